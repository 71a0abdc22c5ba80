/* sim.c - discrete-event simulator of the four RL designs (synchronous, one-step-stale,
 * AReaL-like bounded staleness, Laminar-style relays with repack) at cluster scale. Costs
 * come from the catalogs (memory-bound decode, FLOP-bound training, bandwidth-bound weight
 * movement) or, for comparison with a real run, from that run's measured per-step costs.
 * A replica advances in segments between trajectory completions, so events scale with the
 * number of trajectories, not tokens. */
#include <math.h>
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
} srep;

ls_rl_sim_opts ls_rl_sim_defaults(void) {
    ls_rl_sim_opts o;
    memset(&o, 0, sizeof o);
    o.model = "qwen2.5-7b";
    o.gpu = "H800-80G";
    o.gpus = 1024;
    o.train_frac_pct = 25;
    o.mode = LS_RL_MODE_LAMINAR;
    o.mean_len = 2000;
    o.cv = 1.5;
    o.prompt_len = 256;
    o.batch = 2048;
    o.updates = 10;
    o.staleness = 2;
    o.max_batch = 64;
    o.seed = 1;
    o.repack = 1;
    return o;
}

static double draw_len(const ls_rl_sim_opts *o, ls_rng *rng) {
    if (o->trace && o->n_trace > 0) return (double)o->trace[ls_rng_below(rng, (uint64_t)o->n_trace)];
    double s2 = log(1.0 + o->cv * o->cv), mu = log(o->mean_len) - s2 / 2.0;
    double x = exp(mu + sqrt(s2) * (double)ls_rng_normal(rng));
    double cap = o->mean_len * 16.0;
    return x < 1.0 ? 1.0 : (x > cap ? cap : floor(x));
}

int ls_rl_simulate(const ls_rl_sim_opts *o, ls_rl_sim_result *res) {
    memset(res, 0, sizeof *res);
    if (o->gpus < 2 || o->batch < 1 || o->updates < 1 || o->max_batch < 1 || o->mode < 0 || o->mode >= LS_RL_MODE_COUNT)
        return ls_err(LS_EINVAL, "sim rl: need gpus >= 2, batch, updates and max batch >= 1, a known mode");
    if (!(o->mean_len >= 1) && !(o->trace && o->n_trace > 0)) return ls_err(LS_EINVAL, "sim rl: mean length must be >= 1");
    int calibrated = o->step_s > 0;
    double step0 = 0, kv_cost = 0, train_per_tok = 0, W = 0, pcie = 25e9, net = 25e9, flops = 0;
    int tp = o->tp, R, train_gpus;
    if (calibrated) {
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
        if (tp <= 0) {     /* smallest power of two whose memory holds weights with half the card for KV */
            tp = 1;
            while (tp < 8 && W / tp > 0.5 * g.mem_bytes) tp *= 2;
        }
        train_gpus = o->gpus * (o->train_frac_pct > 0 ? o->train_frac_pct : 25) / 100;
        if (train_gpus < 1) train_gpus = 1;
        R = (o->gpus - train_gpus) / tp;
        double bw = g.bw_Bps * 0.7;
        step0 = (W / tp) / bw + 2e-3; /* weights read once per step, plus launch overhead */
        kv_cost = 2.0 * a.n_layer * a.n_kv_head * (a.d_model / (double)a.n_head) * 2.0 / (tp * bw);
        flops = g.fp16_flops;
        train_per_tok = 8.0 * params / (train_gpus * flops * 0.35); /* fwd+bwd (6) + proximal log-probs (2) */
    }
    if (R < 1) return ls_err(LS_EINVAL, "sim rl: no GPUs left for rollouts");
    int B = o->batch, MB = o->max_batch;
    int64_t need = (int64_t)B * o->updates;
    /* weight movement */
    double bcast = calibrated ? (o->pull_s > 0 ? o->pull_s : 0.0) : (W / tp) / net + W / ((double)train_gpus * net) + 1e-3 * log2(R + 1.0);
    double stall_relay = calibrated ? 0.0 : W / (8.0 * pcie);
    double chain = calibrated ? 0.0 : W / net + 8.0 * 256e6 / net;
    double pull = calibrated ? (o->pull_s > 0 ? o->pull_s : 0.0) : (W / tp) / pcie;
    double repack_dt = o->repack_s > 0 ? o->repack_s : 10.0 * (calibrated ? o->step_s : step0);
    srep *rp = calloc((size_t)R, sizeof *rp);
    int *buf_ver = malloc(sizeof(int) * (size_t)(need + (int64_t)R * MB + 16));
    if (!rp || !buf_ver) {
        free(rp), free(buf_ver);
        return ls_err(LS_ENOMEM, "sim rl: out of memory");
    }
    for (int r = 0; r < R; r++) {
        rp[r].a = malloc(sizeof(strj) * (size_t)MB);
        if (!rp[r].a) {
            for (int q = 0; q < r; q++) free(rp[q].a);
            free(rp), free(buf_ver);
            return ls_err(LS_ENOMEM, "sim rl: out of memory");
        }
    }
    ls_rng rng;
    ls_rng_seed(&rng, o->seed);
    double t = 0, train_until = -1, t_first = -1, t_last = 0, tokens = 0, stall_sum = 0, next_repack = 0;
    double avail_at = 0; /* laminar: when the relays hold version P */
    int P = 0, training = 0, consumed_batches = 0, stale_max = 0, avail_ver = 0;
    int64_t issued = 0, buf_head = 0, buf_tail = 0, stale_sum = 0, consumed = 0;
    int rc = LS_OK;
    while (consumed_batches < o->updates) {
        /* 1. hand out work */
        for (int r = 0; r < R; r++) {
            srep *x = &rp[r];
            if (x->pause_until > t) continue;
            int mode = o->mode, room = MB - x->n;
            if (mode == LS_RL_MODE_LAMINAR) {
                if (x->n > 0) continue; /* batch mode: refill only when the batch is done */
                int newest = avail_at <= t ? avail_ver : avail_ver - 1;
                if (newest > x->version) { /* pull from the local relay first */
                    x->version = newest;
                    x->pause_until = t + pull;
                    if (pull > 0) continue;
                }
            }
            if (mode == LS_RL_MODE_SYNC && (x->n > 0 || x->version < P)) continue;
            while (room > 0) {
                int ok;
                switch (mode) {
                case LS_RL_MODE_SYNC: ok = issued < (int64_t)(P + 1) * B; break;
                case LS_RL_MODE_ONESTEP: ok = issued < (int64_t)(P + 2) * B && x->version >= issued / B - 1; break;
                case LS_RL_MODE_AREAL: ok = issued < (int64_t)(P + o->staleness + 1) * B; break;
                default: ok = issued - consumed < 3LL * B + (int64_t)R * MB; break;
                }
                if (!ok) break;
                strj *s = &x->a[x->n++];
                s->rem = draw_len(o, &rng);
                s->len = o->prompt_len;
                s->version = x->version;
                s->gen = 0;
                s->id = issued++;
                room--;
                if (t_first < 0) t_first = t;
            }
        }
        /* 2. the trainer starts an update when a batch is complete */
        if (!training && t >= train_until && buf_tail - buf_head >= B) {
            double ttok = 0;
            for (int64_t i = 0; i < B; i++) {
                int st = P - buf_ver[buf_head % (need + (int64_t)R * MB + 16)];
                buf_head++;
                stale_sum += st;
                stale_max = st > stale_max ? st : stale_max;
            }
            consumed += B;
            ttok = (double)B * (o->prompt_len + o->mean_len);
            double tr = calibrated ? o->train_s : ttok * train_per_tok;
            if (o->mode == LS_RL_MODE_ONESTEP || o->mode == LS_RL_MODE_SYNC) tr = tr; /* same compute either way */
            training = 1;
            train_until = t + tr;
        }
        /* 3. next event */
        double tn = INFINITY;
        if (training) tn = train_until;
        for (int r = 0; r < R; r++) {
            srep *x = &rp[r];
            if (x->pause_until > t) {
                tn = fmin(tn, x->pause_until);
                continue;
            }
            if (x->n == 0) continue;
            double K = 0, mn = INFINITY;
            for (int i = 0; i < x->n; i++) K += x->a[i].len, mn = fmin(mn, x->a[i].rem);
            double st = calibrated ? o->step_s : step0 + K * kv_cost;
            tn = fmin(tn, t + mn * st);
        }
        if (o->mode == LS_RL_MODE_LAMINAR && o->repack && next_repack > t) tn = fmin(tn, next_repack);
        if (o->mode == LS_RL_MODE_LAMINAR && avail_at > t) tn = fmin(tn, avail_at);
        if (!isfinite(tn)) {
            rc = ls_err(LS_ESTATE, "sim rl: no event left at t=%.1f s (scheduling deadlock)", t);
            break;
        }
        if (tn < t) tn = t;
        double dt = tn - t;
        /* 4. advance every replica */
        for (int r = 0; r < R; r++) {
            srep *x = &rp[r];
            if (x->pause_until > t || x->n == 0) {
                x->idle += dt;
                continue;
            }
            double K = 0;
            for (int i = 0; i < x->n; i++) K += x->a[i].len;
            double st = calibrated ? o->step_s : step0 + K * kv_cost, k = dt / st;
            x->busy += dt;
            for (int i = 0; i < x->n;) {
                strj *s = &x->a[i];
                double adv = fmin(k, s->rem);
                s->rem -= adv, s->len += adv;
                if (s->rem <= 1e-9) {
                    buf_ver[buf_tail % (need + (int64_t)R * MB + 16)] = s->version;
                    buf_tail++;
                    tokens += s->len - o->prompt_len;
                    x->a[i] = x->a[--x->n];
                } else {
                    i++;
                }
            }
        }
        t = tn;
        /* 5. the trainer finishes: new version */
        if (training && t >= train_until) {
            training = 0;
            consumed_batches++;
            t_last = t;
            P++;
            if (o->mode == LS_RL_MODE_LAMINAR) {
                stall_sum += stall_relay;
                train_until = t + stall_relay;
                avail_ver = P;
                avail_at = t + stall_relay + chain;
            } else { /* global sync: every rollout stops for the broadcast, the trainer too */
                stall_sum += bcast;
                train_until = t + bcast;
                for (int r = 0; r < R; r++) {
                    if (o->mode == LS_RL_MODE_SYNC && rp[r].n > 0) continue; /* cannot happen: batch complete */
                    rp[r].pause_until = fmax(rp[r].pause_until, t + bcast);
                    rp[r].version = P;
                }
            }
        }
        /* 6. laminar repack of falling-phase replicas */
        if (o->mode == LS_RL_MODE_LAMINAR && o->repack && t >= next_repack) {
            next_repack = t + repack_dt;
            ls_rl_rollout_view *v = malloc(sizeof *v * (size_t)R);
            int *kv = malloc(sizeof(int) * (size_t)R * MB);
            int64_t *ids = malloc(sizeof(int64_t) * (size_t)R * MB);
            int nv = 0;
            if (v && kv && ids) {
                for (int r = 0; r < R; r++) {
                    srep *x = &rp[r];
                    if (x->n == 0 || x->pause_until > t || x->n > MB / 2) continue;
                    for (int i = 0; i < x->n; i++) kv[r * MB + i] = (int)x->a[i].len, ids[r * MB + i] = x->a[i].id;
                    v[nv++] = (ls_rl_rollout_view){r, x->version, 0, x->n, kv + (size_t)r * MB, 1 << 30, ids + (size_t)r * MB};
                }
                ls_rl_repack_cfg c = {0.9, MB, 0.5, 8};
                ls_rl_move *mv;
                int nm, freed;
                if (nv >= 2 && ls_rl_repack_plan(v, nv, &c, &mv, &nm, &freed) == LS_OK) {
                    for (int i = 0; i < nm; i++) {
                        srep *f = &rp[mv[i].from], *d = &rp[mv[i].to];
                        for (int q = 0; q < f->n; q++)
                            if (f->a[q].id == mv[i].traj) {
                                if (d->n < MB) d->a[d->n++] = f->a[q];
                                f->a[q] = f->a[--f->n];
                                break;
                            }
                    }
                    res->repacks += freed > 0;
                    free(mv);
                }
            }
            free(v), free(kv), free(ids);
        }
    }
    double busy = 0, idle = 0;
    for (int r = 0; r < R; r++) busy += rp[r].busy, idle += rp[r].idle, free(rp[r].a);
    free(rp), free(buf_ver);
    LS_TRY(rc);
    double span = t_last - (t_first > 0 ? t_first : 0);
    res->wall_s = t_last;
    res->traj_per_s = span > 0 ? consumed / span : 0;
    res->tokens_per_s = span > 0 ? tokens / span : 0;
    res->idle_frac = busy + idle > 0 ? idle / (busy + idle) : 0;
    res->mean_staleness = consumed ? (double)stale_sum / consumed : 0;
    res->max_staleness = stale_max;
    res->stall_s = o->updates ? stall_sum / o->updates : 0;
    res->step_s = calibrated ? o->step_s : step0;
    res->train_s = calibrated ? o->train_s : (double)B * (o->prompt_len + o->mean_len) * train_per_tok;
    res->bcast_s = bcast;
    res->pull_s = pull;
    res->replicas = R;
    res->tp = tp;
    return LS_OK;
}
