/* sim.c - discrete-event simulator of the four RL designs (synchronous, one-step-stale,
 * AReaL-like bounded staleness, Laminar-style relays with repack) at cluster scale. Costs
 * come from the catalogs (memory-bound decode, FLOP-bound training, bandwidth-bound weight
 * movement) or, for comparison with a real run, from that run's measured per-step costs.
 * A replica advances in segments between trajectory completions, so events scale with the
 * number of trajectories, not tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/plan.h"
#include "llmsys/rl.h"

typedef struct {
    double rem, len; /* tokens still to generate, tokens in the KV cache */
    int version, gen;
    int64_t id;
} strj;

typedef struct {
    strj *a;
    int n, version;
    double pause_until, busy, idle;
    double idle_since; /* polling for work since then, every idle_poll_s (< 0: not waiting) */
    int topup;         /* interrupted (AReaL-like): takes new work into its free slots once, as after a batch */
    int quota;         /* laminar: trajectories it may still take at its version (its waiting queue) */
    double t_upd, st, t_next; /* progress is applied lazily: state is exact at t_upd */
} srep;

typedef struct {
    const ls_rl_sim_opts *o;
    int calibrated;
    double step0, kv_cost, prefill_tok; /* prefill seconds per token (cluster scale) */
    int64_t *buf_ver, buf_cap, buf_tail;
    int group, *gdone, *ver_of; /* per group (ring): members done; per trajectory (ring): its version */
    double tokens;
} sim;

static double step_time(const sim *s, const srep *x) {
    if (s->calibrated) return s->o->step_s;
    double K = 0;
    for (int i = 0; i < x->n; i++) K += x->a[i].len;
    return s->step0 + K * s->kv_cost;
}

static void schedule(const sim *s, srep *x) {
    x->st = step_time(s, x);
    if (x->pause_until > x->t_upd)
        x->t_next = x->pause_until;
    else if (x->n == 0)
        x->t_next = INFINITY;
    else {
        double mn = INFINITY;
        for (int i = 0; i < x->n; i++) mn = fmin(mn, x->a[i].rem);
        x->t_next = x->t_upd + mn * x->st;
    }
}

/* Applies x's progress up to t (no event of x lies strictly inside (t_upd, t)). */
static void advance(sim *s, srep *x, double t) {
    double dt = t - x->t_upd;
    if (dt <= 0) return;
    if (x->pause_until > x->t_upd || x->n == 0) {
        x->idle += dt;
    } else {
        x->busy += dt;
        double k = dt / x->st;
        for (int i = 0; i < x->n;) {
            strj *j = &x->a[i];
            double adv = fmin(k, j->rem);
            j->rem -= adv, j->len += adv;
            if (j->rem <= 1e-6) {
                /* a group enters the buffer when its last member completes */
                int64_t g = j->id / s->group, c = s->buf_cap;
                s->ver_of[j->id % c] = j->version;
                if (++s->gdone[g % c] == s->group) {
                    s->gdone[g % c] = 0;
                    for (int64_t q = g * s->group; q < (g + 1) * s->group; q++)
                        s->buf_ver[s->buf_tail++ % c] = s->ver_of[q % c];
                }
                s->tokens += j->len - s->o->prompt_len;
                x->a[i] = x->a[--x->n];
            } else {
                i++;
            }
        }
    }
    x->t_upd = t;
}

/* The first poll at or after t of a poller that started asking at since, every p seconds. */
static double next_poll(double since, double p, double t) {
    if (since < 0 || p <= 0 || t <= since) return t;
    return since + ceil((t - since) / p - 1e-9) * p;
}

ls_rl_sim_opts ls_rl_sim_defaults(void) {
    ls_rl_sim_opts o;
    memset(&o, 0, sizeof o);
    o.model = "qwen2.5-7b";
    o.gpu = "H800-80G", o.gpus = 1024, o.train_frac_pct = 25;
    o.mode = LS_RL_MODE_LAMINAR;
    o.mean_len = 2000, o.cv = 1.3; /* p99 about 10x the median */
    o.max_len = 16384, o.prompt_len = 256;
    o.batch = 8192, o.updates = 10, o.staleness = 2;
    o.max_batch = 64;
    o.seed = 1;
    o.repack = 1;
    return o;
}

static double draw_len(const ls_rl_sim_opts *o, ls_rng *rng, int64_t k) {
    if (o->trace && o->n_trace > 0 && o->trace_replay) return (double)o->trace[k % o->n_trace];
    if (o->trace && o->n_trace > 0) return (double)o->trace[ls_rng_below(rng, (uint64_t)o->n_trace)];
    double s2 = log(1.0 + o->cv * o->cv), mu = log(o->mean_len) - s2 / 2.0;
    double x = exp(mu + sqrt(s2) * (double)ls_rng_normal(rng));
    double cap = o->max_len > 0 ? o->max_len : 16384;
    return x < 1.0 ? 1.0 : (x > cap ? cap : floor(x));
}

static int simulate(const ls_rl_sim_opts *o, ls_rl_sim_result *res);

int ls_rl_simulate(const ls_rl_sim_opts *o, ls_rl_sim_result *res) {
    if (o->train_frac_pct != 0 || o->step_s > 0 || o->mode == LS_RL_MODE_SYNC) return simulate(o, res);
    /* the split each design runs best with: every 10 % from 20 to 80, then 5 and 2 points around the best */
    ls_rl_sim_opts q = *o;
    ls_rl_sim_result best = {0}, r;
    int at = 0;
    for (int pct = 20; pct <= 80; pct += 10) {
        q.train_frac_pct = pct;
        LS_TRY(simulate(&q, &r));
        if (r.traj_per_s > best.traj_per_s) best = r, at = pct;
    }
    for (int step = 5; step >= 2; step -= 3) {
        int c0 = at;
        for (int d = -1; d <= 1; d += 2) {
            q.train_frac_pct = c0 + d * step;
            if (q.train_frac_pct < 5 || q.train_frac_pct > 95) continue;
            LS_TRY(simulate(&q, &r));
            if (r.traj_per_s > best.traj_per_s) best = r, at = q.train_frac_pct;
        }
    }
    *res = best;
    return LS_OK;
}

/* The option values one design is simulated with (its lengths come from a trace when
 * have_trace): LS_EINVAL naming what is wrong. */
static int sim_values_check(const ls_rl_sim_opts *o, int have_trace) {
    if (o->gpus < 2 || o->batch < 1 || o->updates < 1 || o->max_batch < 1 || o->mode < 0 || o->mode >= LS_RL_MODE_COUNT)
        return ls_err(LS_EINVAL, "sim rl: need gpus >= 2, batch, updates and max batch >= 1, a known mode");
    /* the trajectory buffer holds batch x (updates + staleness) entries: bounded before it is sized */
    if (o->max_batch > 65536 || o->updates > 1000000 || o->staleness > 1000000 ||
        (int64_t)o->batch * (o->updates + (o->staleness > 0 ? o->staleness : 0)) > (int64_t)1 << 26)
        return ls_err(LS_EINVAL, "sim rl: need max batch <= 65536, updates and staleness <= 10^6, "
                                 "batch x (updates + staleness) <= 2^26");
    if (o->rollout_batch < 0 || o->rollout_batch > 64 * o->max_batch)
        return ls_err(LS_EINVAL, "sim rl: rollout batch must be in [0, 64 x max batch], got %d", o->rollout_batch);
    if (!(o->mean_len >= 1 && o->mean_len <= 1e6) && !have_trace) /* past it: a hang */
        return ls_err(LS_EINVAL, "sim rl: mean length must be in [1, 10^6]");
    if (!(o->cv >= 0 && o->cv <= 20) || o->prompt_len < 0 || o->prompt_len > 1000000 || o->staleness < 0 ||
        o->train_frac_pct < 0 || o->train_frac_pct > 100)
        return ls_err(LS_EINVAL, "sim rl: need CV in [0, 20], prompt length in [0, 10^6], staleness >= 0, "
                                 "train %% in [0, 100]");
    return LS_OK;
}

int ls_rl_sim_check(const ls_rl_sim_opts *o, const char *models, const char *gpus, int have_trace) {
    LS_TRY(ls_rl_sim_gpus_parse(gpus, NULL));
    char buf[512];
    if (!ls_list_ok(models, sizeof buf))
        return ls_err(LS_EINVAL,
                      "sim rl: --models '%.64s': a comma-separated list of catalog models, none empty, "
                      "at most 511 characters",
                      models);
    ls_rl_sim_opts q = *o;
    q.gpus = 2, q.mode = LS_RL_MODE_SYNC; /* set per row */
    LS_TRY(sim_values_check(&q, have_trace));
    ls_plan_catalog *cat;
    LS_TRY(ls_plan_catalog_load(o->data_dir, &cat)); /* a missing catalog is no usage error */
    ls_plan_arch a;
    ls_plan_gpu g;
    int rc = ls_plan_catalog_gpu(cat, o->gpu, &g);
    snprintf(buf, sizeof buf, "%s", models);
    char *save = NULL;
    for (char *m = strtok_r(buf, ",", &save); rc == LS_OK && m; m = strtok_r(NULL, ",", &save))
        rc = ls_plan_catalog_model(cat, m, &a);
    ls_plan_catalog_free(cat);
    if (rc == LS_OK) return LS_OK;
    snprintf(buf, sizeof buf, "%s", ls_errmsg()); /* ls_err writes the buffer ls_errmsg reads */
    return ls_err(LS_EINVAL, "sim rl: %s", buf);  /* an unknown name (or its catalog shape) */
}

int ls_rl_sim_gpus_parse(const char *gpus, int gl[16]) {
    int ng = 0;
    for (const char *p = gpus;;) { /* "64,256,1024": integers in [2, 2^20], at most 16 */
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || (*end && !end[1]) || v < 2 || v > (1 << 20) || ng == 16)
            return ls_err(LS_EINVAL, "sim rl: --gpus '%s': a list of at most 16 GPU counts in [2, 2^20]", gpus);
        if (gl) gl[ng] = (int)v;
        ng++;
        if (!*end) return ng;
        p = end + 1;
    }
}

static int simulate(const ls_rl_sim_opts *o, ls_rl_sim_result *res) {
    memset(res, 0, sizeof *res);
    LS_TRY(sim_values_check(o, o->trace && o->n_trace > 0));
    sim S = {0};
    S.o = o;
    S.calibrated = o->step_s > 0;
    double train_per_tok = 0, W = 0, pcie = 25e9, net = 25e9, link = 0;
    int tp = o->tp, R, train_gpus, colocated = 0;
    if (S.calibrated) {
        tp = 1;
        R = o->gpus - 1; /* one process trains, the others generate */
        train_gpus = 1;
    } else {
        ls_plan_catalog *cat;
        LS_TRY(ls_plan_catalog_load(o->data_dir, &cat));
        ls_plan_arch a;
        ls_plan_gpu g;
        int rc = ls_plan_catalog_model(cat, o->model, &a);
        if (rc == LS_OK) rc = ls_plan_catalog_gpu(cat, o->gpu, &g);
        ls_plan_catalog_free(cat);
        LS_TRY(rc);
        double params = ls_plan_layer_params(&a) * a.n_layer + (double)a.vocab * a.d_model * (a.tied ? 1 : 2);
        W = params * 2.0; /* bf16 */
        if (tp <= 0) {    /* smallest power of two whose memory holds the weights with half the card left for KV */
            tp = 1;
            while (tp < 8 && W / tp > 0.5 * g.mem_bytes) tp *= 2;
        }
        link = g.link_Bps > 0 ? g.link_Bps : pcie;
        /* the synchronous baseline is colocated (verl-style): every GPU generates, then every GPU trains */
        colocated = o->mode == LS_RL_MODE_SYNC;
        train_gpus = colocated ? o->gpus : o->gpus * (o->train_frac_pct > 0 ? o->train_frac_pct : 25) / 100;
        if (train_gpus < 1) train_gpus = 1;
        R = (colocated ? o->gpus : o->gpus - train_gpus) / tp;
        double bw = g.bw_Bps * 0.7;
        S.step0 = (W / tp) / bw + 2e-3; /* weights read once per step, plus launch overhead */
        S.kv_cost = 2.0 * a.n_layer * a.n_kv_head * (a.d_model / (double)a.n_head) * 2.0 / (tp * bw);
        train_per_tok = 8.0 * params / (train_gpus * g.fp16_flops * 0.35); /* fwd+bwd (6) + proximal log-probs (2) */
        /* recomputing a trajectory's KV cache (AReaL-like after an interrupt, Laminar-style at a repack
         * destination): a forward pass over its tokens at the training efficiency */
        S.prefill_tok = 2.0 * params / (tp * g.fp16_flops * 0.35);
    }
    if (R < 1) return ls_err(LS_EINVAL, "sim rl: no GPUs left for rollouts");
    int B = o->batch, MB = o->max_batch;
    int QB = o->rollout_batch > MB ? o->rollout_batch : MB; /* laminar: a replica's batch at one version */
    /* weight movement */
    double bcast, stall_relay = 0, chain = 0, pull;
    if (S.calibrated) {
        bcast = pull = o->pull_s > 0 ? o->pull_s : 0.0;
    } else {
        /* colocated: re-shard trainer weights into the rollout layout over NVLink; disaggregated
         * global sync: every rollout GPU receives its shard over the network */
        bcast = colocated ? (W / tp) / link : (W / tp) / net + W / ((double)train_gpus * net) + 1e-3 * log2(R + 1.0);
        stall_relay = W / (8.0 * pcie);      /* trainer -> master relay, host memory */
        chain = W / net + 8.0 * 256e6 / net; /* pipelined chain: one transfer plus a few chunks */
        pull = (W / tp) / pcie;              /* rollout <- relay on its own machine */
    }
    double repack_dt = o->repack_s > 0 ? o->repack_s : 10.0 * (S.calibrated ? o->step_s : S.step0);
    srep *rp = calloc((size_t)R, sizeof *rp);
    S.group = o->group > 1 ? o->group : 1;
    S.buf_cap = (int64_t)B * (o->updates + (o->staleness > 0 ? o->staleness : 0) + 4) + (int64_t)R * QB + 16;
    S.buf_ver = malloc(sizeof(int64_t) * (size_t)S.buf_cap);
    S.gdone = calloc((size_t)S.buf_cap, sizeof(int));
    S.ver_of = malloc(sizeof(int) * (size_t)S.buf_cap);
    int *order = malloc(sizeof(int) * (size_t)R);
    if (!rp || !S.buf_ver || !order || !S.gdone || !S.ver_of) {
        free(rp), free(S.buf_ver), free(order), free(S.gdone), free(S.ver_of);
        return ls_err(LS_ENOMEM, "sim rl: out of memory");
    }
    for (int r = 0; r < R; r++) {
        rp[r].a = malloc(sizeof(strj) * (size_t)MB);
        rp[r].t_next = INFINITY;
        rp[r].idle_since = -1;
        if (!rp[r].a) {
            for (int q = 0; q < r; q++) free(rp[q].a);
            free(rp), free(S.buf_ver), free(order), free(S.gdone), free(S.ver_of);
            return ls_err(LS_ENOMEM, "sim rl: out of memory");
        }
    }
    ls_rng rng;
    ls_rng_seed(&rng, o->seed);
    double t = 0, train_until = -1, t_first = -1, t_last = 0, stall_sum = 0, next_repack = 0, excluded = 0;
    double avail_at = 0; /* laminar: when the relays hold version avail_ver */
    double tr_idle_since = -1; /* the trainer has asked for a batch since then */
    int P = 0, training = 0, consumed_batches = 0, stale_max = 0, avail_ver = 0;
    int64_t issued = 0, buf_head = 0, stale_sum = 0, consumed = 0;
    int rc = LS_OK, mode = o->mode;
    /* rollouts pull new weights from a relay between batches: Laminar-style, and one-step-stale as
     * llmsys's runtime runs it (batch_refill); otherwise every rollout pauses for a broadcast */
    int pulls = mode == LS_RL_MODE_LAMINAR || (mode != LS_RL_MODE_AREAL && o->batch_refill);
    while (consumed_batches < o->updates) {
        /* 1. hand out work under the design's rule (ls_rl_may_issue), counted in trajectories;
         * asked at the trainer's version P it says whether any rollout may take one more */
        ls_rl_issue_state iq = {.mode = mode,
                                .batch = B,
                                .staleness = o->staleness,
                                .window = (int64_t)B + (int64_t)R * QB,
                                .trainer_version = P,
                                .consumed = consumed};
        for (int r = 0; r < R && ls_rl_may_issue(&iq, issued, P); r++) {
            srep *x = &rp[r];
            if (x->pause_until > t) continue;
            /* refill when the batch is done, or once after an interrupt (the runtime hands an interrupted
             * rollout a new batch: the partial responses and new groups) */
            int top = x->topup;
            x->topup = 0;
            /* laminar: a running replica's waiting queue refills free slots a group at a time */
            int queue = mode == LS_RL_MODE_LAMINAR && x->n > 0 && x->quota >= S.group && MB - x->n >= S.group;
            if (x->n == MB || ((mode == LS_RL_MODE_LAMINAR || o->batch_refill) && x->n > 0 && !top && !queue)) continue;
            if (pulls && x->n == 0) {
                int newest = avail_at <= t ? avail_ver : avail_ver - 1;
                if (newest > x->version && pull > 0) { /* pull from the local relay first */
                    advance(&S, x, t);
                    x->version = newest;
                    /* the poll that names the version (the next one of an idle replica), then the pull */
                    x->pause_until = next_poll(x->idle_since, o->idle_poll_s, t) + o->refill_s + pull;
                    x->idle_since = -1;
                    schedule(&S, x);
                    continue;
                }
                x->version = newest > x->version ? newest : x->version;
            }
            if (mode == LS_RL_MODE_SYNC && x->n > 0) continue; /* synchronous: a whole batch at once */
            /* the rollout's own version (sync: the trainer's; one-step: at most one behind the batch
             * being issued). It is asked once per batch: the batch then fills up to the rule at P */
            if (!ls_rl_may_issue(&iq, issued, x->version)) continue;
            advance(&S, x, t);
            if (x->n == 0) { /* the poll that brings the batch: the next one of a replica that waited */
                double tp = next_poll(x->idle_since, o->idle_poll_s, t) + o->refill_s;
                if (tp > t) x->pause_until = tp;
                x->quota = mode == LS_RL_MODE_LAMINAR ? QB : 0;
            }
            x->idle_since = -1;
            int lim = queue ? x->n + (MB - x->n) / S.group * S.group : MB;
            while (x->n < lim && ls_rl_may_issue(&iq, issued, P) && (mode != LS_RL_MODE_LAMINAR || x->quota > 0)) {
                x->quota -= mode == LS_RL_MODE_LAMINAR;
                strj *j = &x->a[x->n++];
                j->rem = draw_len(o, &rng, issued);
                j->len = o->prompt_len;
                j->version = x->version;
                j->gen = 0;
                j->id = issued++;
                if (t_first < 0) t_first = t;
            }
            if (QB == MB) x->quota = 0; /* without a queue a batch that started short stays short, as in the runtime */
            schedule(&S, x);
        }
        for (int r = 0; r < R; r++) /* replicas left without work keep asking */
            if (rp[r].n == 0 && rp[r].pause_until <= t && rp[r].idle_since < 0) rp[r].idle_since = t;
        /* 2. the trainer starts an update when a batch is complete (at its next ask if it waited) */
        if (!training && t >= train_until && S.buf_tail - buf_head < B && tr_idle_since < 0) tr_idle_since = t;
        if (!training && t >= train_until && S.buf_tail - buf_head >= B) {
            for (int64_t i = 0; i < B; i++) {
                int st = P - (int)S.buf_ver[buf_head++ % S.buf_cap];
                stale_sum += st;
                stale_max = st > stale_max ? st : stale_max;
            }
            consumed += B;
            double tr = S.calibrated ? o->train_s : (double)B * (o->prompt_len + o->mean_len) * train_per_tok;
            training = 1;
            train_until = next_poll(tr_idle_since, o->trainer_poll_s, t) + tr;
            tr_idle_since = -1;
            if (colocated) excluded += tr * R; /* the rollout GPUs are training, not idle */
        }
        /* 3. next event */
        double tn = training ? train_until : INFINITY;
        for (int r = 0; r < R; r++) tn = fmin(tn, rp[r].t_next);
        if (mode == LS_RL_MODE_LAMINAR && o->repack && next_repack > t) tn = fmin(tn, next_repack);
        if (pulls && avail_at > t) tn = fmin(tn, avail_at);
        if (!training && train_until > t) tn = fmin(tn, train_until);
        if (!isfinite(tn)) {
            rc = ls_err(LS_ESTATE, "sim rl: no event left at t=%.1f s (scheduling deadlock)", t);
            break;
        }
        if (tn < t) tn = t;
        t = tn;
        /* 4. replicas whose event is due */
        for (int r = 0; r < R; r++)
            if (rp[r].t_next <= t + 1e-12) {
                advance(&S, &rp[r], t);
                schedule(&S, &rp[r]);
            }
        /* 5. the trainer finishes: a new version */
        if (training && t >= train_until) {
            training = 0;
            consumed_batches++;
            t_last = t;
            P++;
            /* the trainer's stall: a real run's measured hand-over (and batch round trip) */
            double ts = S.calibrated ? o->trainer_extra_s : pulls ? stall_relay : bcast;
            stall_sum += ts;
            train_until = t + ts;
            if (pulls) {
                avail_ver = P;
                avail_at = t + (S.calibrated ? ts : stall_relay + chain);
            } else { /* global sync: every rollout stops for the weight update, the trainer too */
                if (colocated) excluded += bcast * R;
                for (int r = 0; r < R; r++) {
                    advance(&S, &rp[r], t);
                    /* AReaL-like interrupts: the in-flight trajectories' KV caches are recomputed
                     * with the new weights before decoding resumes */
                    double pre = 0;
                    if (mode == LS_RL_MODE_AREAL)
                        for (int i = 0; i < rp[r].n; i++) pre += rp[r].a[i].len * S.prefill_tok;
                    rp[r].pause_until = fmax(rp[r].pause_until, t + bcast + pre);
                    rp[r].version = P;
                    rp[r].topup = mode == LS_RL_MODE_AREAL;
                    schedule(&S, &rp[r]);
                }
            }
        }
        /* 6. laminar repack of falling-phase replicas (the 48 lightest, as one manager poll) */
        if (mode == LS_RL_MODE_LAMINAR && o->repack && t >= next_repack) {
            next_repack = t + repack_dt;
            ls_rl_repack_cfg c = ls_rl_repack_defaults(MB); /* as the manager plans */
            int nc = 0;
            for (int r = 0; r < R; r++)
                if (rp[r].n > 0 && (rp[r].n <= MB * c.falling_frac || (c.any_dest && rp[r].n < MB)) &&
                    rp[r].pause_until <= t)
                    order[nc++] = r;
            for (int i = 1; i < nc; i++) /* insertion sort by load, small nc typical */
                for (int q = i; q > 0 && rp[order[q]].n < rp[order[q - 1]].n; q--) {
                    int tmp = order[q];
                    order[q] = order[q - 1], order[q - 1] = tmp;
                }
            if (nc > 48) nc = 48;
            ls_rl_rollout_view *v = malloc(sizeof *v * (size_t)(nc + 1));
            int *kv = malloc(sizeof(int) * (size_t)(nc + 1) * MB);
            int64_t *ids = malloc(sizeof(int64_t) * (size_t)(nc + 1) * MB);
            if (v && kv && ids && nc >= 2) {
                for (int q = 0; q < nc; q++) {
                    srep *x = &rp[order[q]];
                    advance(&S, x, t);
                    for (int i = 0; i < x->n; i++) kv[q * MB + i] = (int)x->a[i].len, ids[q * MB + i] = x->a[i].id;
                    v[q] = (ls_rl_rollout_view){order[q],
                                                o->repack_any_version ? 0 : x->version,
                                                x->quota,
                                                x->n,
                                                kv + (size_t)q * MB,
                                                1 << 30,
                                                ids + (size_t)q * MB};
                }
                ls_rl_move *mv;
                int nm, freed;
                if (ls_rl_repack_plan(v, nc, &c, &mv, &nm, &freed) == LS_OK) {
                    for (int i = 0; i < nm; i++) {
                        srep *f = &rp[mv[i].from], *d = &rp[mv[i].to];
                        for (int q = 0; q < f->n; q++)
                            if (f->a[q].id == mv[i].traj) {
                                if (d->n < MB) {
                                    strj *j = &d->a[d->n++];
                                    *j = f->a[q];
                                    if (S.calibrated) /* it reaches the destination at its next poll: one step */
                                        j->rem += 1, j->len -= 1;
                                    else /* the destination recomputes its KV cache */
                                        d->pause_until = fmax(d->pause_until, t) + j->len * S.prefill_tok;
                                }
                                f->a[q] = f->a[--f->n];
                                break;
                            }
                    }
                    res->repacks += freed > 0;
                    free(mv);
                }
                for (int q = 0; q < nc; q++) schedule(&S, &rp[order[q]]);
            }
            free(v), free(kv), free(ids);
        }
    }
    double busy = 0, idle = 0;
    for (int r = 0; r < R; r++) {
        if (rc == LS_OK) advance(&S, &rp[r], t_last > rp[r].t_upd ? t_last : rp[r].t_upd);
        busy += rp[r].busy, idle += rp[r].idle;
        free(rp[r].a);
    }
    free(rp), free(S.buf_ver), free(order), free(S.gdone), free(S.ver_of);
    LS_TRY(rc);
    idle = fmax(0.0, idle - excluded);
    double span = t_last - (t_first > 0 ? t_first : 0);
    res->wall_s = t_last;
    res->traj_per_s = span > 0 ? consumed / span : 0;
    res->tokens_per_s = span > 0 ? S.tokens / span : 0;
    res->idle_frac = busy + idle > 0 ? idle / (busy + idle) : 0;
    res->mean_staleness = consumed ? (double)stale_sum / consumed : 0;
    res->max_staleness = stale_max;
    res->stall_s = o->updates ? stall_sum / o->updates : 0;
    res->step_s = S.calibrated ? o->step_s : S.step0;
    res->train_s = S.calibrated ? o->train_s : (double)B * (o->prompt_len + o->mean_len) * train_per_tok;
    res->bcast_s = bcast;
    res->pull_s = pull;
    res->replicas = R;
    res->tp = tp;
    res->train_pct = S.calibrated ? 0 : colocated ? 100 : o->train_frac_pct > 0 ? o->train_frac_pct : 25;
    return LS_OK;
}
