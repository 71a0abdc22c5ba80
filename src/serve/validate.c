/* validate.c - closing the loop between planner and pipeline (`llmsys plan validate`):
 * profile, virtual CPU cluster, plans, the real server under the planned workload, and
 * predicted against measured throughput, busy seconds and micro-batch counts. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/serve.h"

struct ls_validate {
    ls_validate_opts o;
    ls_validate_result r;
    int own_dir; /* dir is a temporary directory to remove */
    ls_plan_catalog *cat;
    ls_plan_cluster *cl;
    ls_plan_arch arch;
    ls_plan_problem *pb;
    cJSON *profile; /* opts.profile, read and checked by _open (written to the work directory by _profile) */
};

ls_validate_opts ls_validate_defaults(void) {
    ls_validate_opts o = {0};
    o.config = "small";
    o.stages = 2;
    o.threads = 1;
    o.runs = 5;
    o.reps = 5;
    o.wl = (ls_plan_workload){8, 32, 32};
    o.mem_gb = 2.0;
    o.quality = (ls_plan_qtarget){LS_PLAN_Q_BITS, 8};
    o.algos[0] = LS_PLAN_ALGO_SPLITQUANT;
    o.algos[1] = LS_PLAN_ALGO_UNIFORM;
    o.n_algos = 2;
    o.replay_select = 16;
    return o;
}

const ls_validate_result *ls_validate_get(const ls_validate *v) { return &v->r; }

/* An fp32 checkpoint with a named config and random (GPT-2 init) weights. The EOS row
 * of the tied embedding is zeroed: its logit is then 0 while the largest of the other
 * 258 is positive, so greedy generation never stops early and every request yields
 * exactly the planned number of tokens. */
static int make_ckpt(const char *config, uint64_t seed, const char *path) {
    ls_model_config cfg;
    LS_TRY(ls_model_config_named(config, &cfg));
    ls_model *m;
    LS_TRY(ls_model_init(&m, &cfg, seed));
    int t = ls_model_find_tensor(m, "wte");
    if (t < 0) {
        ls_model_free(m);
        return ls_err(LS_ESTATE, "model has no wte tensor");
    }
    ls_param p = ls_model_tensor(m, t);
    memset(p.data + (size_t)LS_TOK_EOS * cfg.d_model, 0, sizeof(float) * (size_t)cfg.d_model);
    int rc = ls_ckpt_save(path, m, 0, NULL, 0);
    ls_model_free(m);
    return rc;
}

int ls_validate_open(ls_validate **out, const ls_validate_opts *o) {
    *out = NULL;
    const ls_plan_workload *wl = &o->wl;
    if (!(o->mem_gb > 0 && o->mem_gb <= 1e6))
        return ls_err(LS_EINVAL, "--memory-gb must be in (0, 1e6], got %g", o->mem_gb);
    if (o->n_algos < 1) return ls_err(LS_EINVAL, "--algos is empty");
    if (o->stages < 1 || o->stages > LS_SERVE_MAX_STAGES || wl->batch < 1 || wl->batch > 256 || wl->prompt < 2 ||
        wl->gen < 1 || o->threads < 1 || o->threads > 64 || o->runs < 1 || o->runs > LS_VALIDATE_MAX_RUNS ||
        o->reps < 1 || o->reps > 100 || o->n_algos > LS_PLAN_ALGO_COUNT || !o->self)
        return ls_err(LS_EINVAL, "validate: options out of range");
    ls_validate *v = calloc(1, sizeof *v);
    if (!v) return ls_err(LS_ENOMEM, "out of memory");
    v->o = *o;
    ls_validate_result *r = &v->r;
    r->host_capacity = r->first_capacity = r->hop_s = NAN;
    int rc = LS_OK, *fbits = NULL;
    /* the given profile, read once here and checked as the cluster will read it: its errors name
     * the user's path, before any work (was: found through the cluster file, a relative path then
     * looked up in the work directory and named there) */
    ls_plan_profile p;
    if (o->profile && (rc = ls_json_read_file(o->profile, &v->profile)) == LS_OK)
        rc = ls_plan_profile_parse(v->profile, o->profile, &p);
    if (rc == LS_OK && o->workdir) {
        snprintf(r->dir, sizeof r->dir, "%s", o->workdir);
        rc = ls_mkdirs(r->dir);
    } else if (rc == LS_OK) {
        snprintf(r->dir, sizeof r->dir, "/tmp/llmsys-validate-XXXXXX");
        if (!mkdtemp(r->dir))
            rc = ls_err(LS_EIO, "mkdtemp %s failed", r->dir);
        else
            v->own_dir = 1;
    }
    if (rc) {
        cJSON_Delete(v->profile);
        free(v);
        return rc;
    }
    *out = v;
    if (o->model) {
        snprintf(r->ckpt, sizeof r->ckpt, "%s", o->model);
    } else {
        snprintf(r->ckpt, sizeof r->ckpt, "%s/model.safetensors", r->dir);
        LS_TRY(make_ckpt(o->config ? o->config : "small", 1, r->ckpt));
    }
    LS_TRY(ls_ckpt_info(r->ckpt, &r->cfg, &fbits, NULL));
    free(fbits);
    if (wl->prompt + wl->gen > r->cfg.n_ctx)
        return ls_err(LS_EINVAL, "prompt + gen = %d exceeds the model context %d", wl->prompt + wl->gen, r->cfg.n_ctx);
    return LS_OK;
}

/* Sorted unique positive ints of v (n entries), clipped to [1, hi]; returns the count. */
static int uniq_grid(int *v, int n, int hi) {
    for (int i = 0; i < n; i++) v[i] = v[i] < 1 ? 1 : (v[i] > hi ? hi : v[i]);
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k] < v[k - 1]; k--) {
            int t = v[k];
            v[k] = v[k - 1], v[k - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!m || v[i] != v[m - 1]) v[m++] = v[i];
    return m;
}

int ls_validate_profile(ls_validate *v) {
    ls_validate_result *r = &v->r;
    snprintf(r->profile, sizeof r->profile, "%s/profile.json", r->dir);
    if (v->profile) return ls_json_write_file(r->profile, v->profile); /* the one _open read */
    /* a grid that brackets the workload */
    const ls_plan_workload *wl = &v->o.wl;
    int n_ctx = r->cfg.n_ctx;
    int batches[8] = {1, 2, 4, 8, wl->batch, (wl->batch + 1) / 2}, nb;
    int seqs[4] = {wl->prompt / 2, wl->prompt, wl->prompt * 2}, ns;
    int ctxs[4] = {wl->prompt, wl->prompt + wl->gen / 2, wl->prompt + wl->gen - 1}, nc;
    nb = uniq_grid(batches, 6, wl->batch);
    ns = uniq_grid(seqs, 3, n_ctx);
    nc = uniq_grid(ctxs, 3, n_ctx - 1);
    static const int bits[4] = {16, 8, 4, 3};
    ls_profile_opts o = ls_profile_defaults();
    o.bits = bits, o.n_bits = 4;
    o.batches = batches, o.n_batches = nb;
    o.seqs = seqs, o.n_seqs = ns;
    o.ctxs = ctxs, o.n_ctxs = nc;
    o.reps = v->o.reps, o.nthreads = v->o.threads;
    /* measured alone: the replay adds the sharing of the host (its measured capacity) */
    double t0 = ls_now();
    cJSON *j = NULL;
    int rc = ls_profile_run(r->ckpt, &o, &j);
    if (rc == LS_OK) rc = ls_json_write_file(r->profile, j);
    cJSON_Delete(j);
    r->profile_s = ls_now() - t0;
    return rc;
}

int ls_validate_cluster(ls_validate *v) {
    ls_validate_result *r = &v->r;
    /* `stages` identical profiled CPU devices on one host, whose parallel capacity and
     * message latency are measured now */
    double cap = ls_host_capacity(r->ckpt, v->o.stages), hop = ls_host_hop_latency(40, 0.005);
    r->host_capacity = r->first_capacity = cap;
    r->hop_s = hop;
    snprintf(r->cluster, sizeof r->cluster, "%s/cluster.json", r->dir);
    cJSON *j = cJSON_CreateObject(), *nodes = cJSON_AddArrayToObject(j, "nodes"), *n = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "llmsys-cluster");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "name", "cpu-virtual");
    cJSON *h = cJSON_AddObjectToObject(j, "host");
    cJSON_AddNumberToObject(h, "capacity", isfinite(cap) ? cap : 0);
    cJSON_AddNumberToObject(h, "hop_us", isfinite(hop) ? hop * 1e6 : -1);
    cJSON_AddStringToObject(n, "profile", r->profile);
    cJSON_AddNumberToObject(n, "count", v->o.stages);
    cJSON_AddNumberToObject(n, "memory_GB", v->o.mem_gb);
    cJSON_AddItemToArray(nodes, n);
    int rc = ls_json_write_file(r->cluster, j);
    cJSON_Delete(j);
    LS_TRY(rc);
    if (v->pb || v->cat || v->cl) return ls_err(LS_ESTATE, "validate: cluster set up twice");
    ls_plan_problem *pb = malloc(sizeof *pb);
    if (!pb) return ls_err(LS_ENOMEM, "out of memory");
    if ((rc = ls_plan_catalog_load(NULL, &v->cat)) || (rc = ls_plan_cluster_load(v->cat, r->cluster, &v->cl)) ||
        (rc = ls_plan_resolve_model(v->cat, r->ckpt, &v->arch)) ||
        (rc = ls_plan_problem_init(pb, &v->arch, v->cl, v->o.wl)) || (rc = ls_plan_problem_validate(pb)) ||
        (rc = ls_plan_quality_from_checkpoint(r->ckpt, &v->arch, pb->omega)) ||
        (rc = ls_plan_problem_set_quality(pb, v->o.quality))) {
        free(pb);
        return rc;
    }
    pb->replay_select = v->o.replay_select;
    v->pb = pb; /* only a complete problem: _solve checks it */
    r->link_lat_s = v->cl->prof[0].link_lat_s;
    return LS_OK;
}

int ls_validate_solve(ls_validate *v) {
    ls_validate_result *r = &v->r;
    if (!v->pb || r->plans) return ls_err(LS_ESTATE, "validate: solve needs _cluster first, and runs once");
    r->plans = calloc((size_t)v->o.n_algos, sizeof *r->plans);
    if (!r->plans) return ls_err(LS_ENOMEM, "out of memory");
    const ls_plan_workload *wl = &v->o.wl;
    for (int a = 0; a < v->o.n_algos; a++) {
        ls_validate_plan *p = &r->plans[a];
        ls_plan_result *x = &p->plan;
        LS_TRY(ls_plan_solve(v->pb, (ls_plan_algo)v->o.algos[a], x));
        r->n_plans = a + 1;
        snprintf(p->path, sizeof p->path, "%s/plan-%s.json", r->dir, ls_plan_algo_name(x->algo));
        LS_TRY(ls_plan_result_write(v->pb, x, p->path));
        ls_plan_sim_opts so = ls_plan_sim_for_cluster(v->cl);
        LS_TRY(ls_plan_simulate(v->pb, x, &so, &p->replay));
        /* where the time goes in the closed form: micro-batch counts and, per stage, compute
         * only (the stage's layers and head, without the send to the next stage) */
        int mp = (wl->batch + x->mb_prefill - 1) / x->mb_prefill, md = (wl->batch + x->mb_decode - 1) / x->mb_decode;
        p->pred_mb_prefill = mp;
        p->pred_mb_decode = md * (wl->gen - 1);
        for (int s = 0; s < x->n_stage && s < LS_SERVE_MAX_STAGES; s++) {
            int d = x->dev[s];
            double lp = 0, ld = 0;
            if (s + 1 < x->n_stage) {
                lp =
                    ls_plan_link_s(v->cl, d, x->dev[s + 1], (double)x->mb_prefill * wl->prompt * v->arch.d_model * 4.0);
                ld = ls_plan_link_s(v->cl, d, x->dev[s + 1], (double)x->mb_decode * v->arch.d_model * 4.0);
            }
            p->pred_busy_s[s] =
                mp * (x->stage_prefill_s[s] - lp) + (double)(wl->gen - 1) * md * (x->stage_decode_s[s] - ld);
        }
    }
    return LS_OK;
}

/* Serves every plan at once (their idle workers sleep in their receive) and times `runs`
 * rounds of one batch per plan after a warm-up round, the plans alternating. */
static int measure(ls_validate *v, ls_plan *sp, ls_server **sv, char **prompts) {
    ls_validate_result *r = &v->r;
    const ls_plan_workload *wl = &v->o.wl;
    int n = r->n_plans, runs = v->o.runs;
    for (int a = 0; a < n; a++) LS_TRY(ls_plan_read(r->plans[a].path, r->cfg.n_layer, &sp[a]));
    /* B distinct prompts of exactly S tokens (BOS + S-1 bytes) */
    static const char text[] = "the planner predicts what the pipeline measures; ";
    for (int i = 0; i < wl->batch; i++) {
        if (!(prompts[i] = malloc((size_t)wl->prompt))) return ls_err(LS_ENOMEM, "out of memory");
        for (int k = 0; k < wl->prompt - 1; k++) prompts[i][k] = text[(i * 7 + k) % (sizeof text - 1)];
        prompts[i][wl->prompt - 1] = '\0';
    }
    for (int a = 0; a < n; a++) {
        ls_server_opts o = ls_server_defaults();
        o.model = r->ckpt;
        o.plan = &sp[a];
        o.self = v->o.self;
        o.port = 0;
        o.max_seqs = wl->batch;
        o.max_conns_per_ip = (unsigned)wl->batch + 16; /* the load generator: one address, batch connections */
        o.nthreads = v->o.threads;
        LS_TRY(ls_server_start(&sv[a], &o));
    }
    double warm_cpu = 0, warm_mb = 0;
    for (int k = -1; k < runs; k++) {
        if (k == 0 && warm_mb > 0) r->front_s = warm_cpu / warm_mb;
        for (int a = 0; a < n; a++) {
            ls_server_stats before, after;
            ls_load_result lr;
            ls_server_get_stats(sv[a], &before);
            double c0 = ls_process_cpu_time();
            LS_TRY(ls_http_load("127.0.0.1", ls_server_port(sv[a]), (const char *const *)prompts, wl->batch, wl->batch,
                                wl->batch, wl->gen, &lr));
            double c1 = ls_process_cpu_time();
            ls_server_get_stats(sv[a], &after);
            if (lr.tokens != wl->batch * wl->gen)
                LS_WARN("run %d generated %d tokens, not %d (a request stopped at EOS)", k, lr.tokens,
                        wl->batch * wl->gen);
            if (k < 0) {
                warm_cpu += c1 - c0;
                warm_mb += (double)(after.mb_prefill - before.mb_prefill + after.mb_decode - before.mb_decode);
                continue;
            }
            ls_validate_run *x = &r->plans[a].run[k];
            x->seconds = lr.seconds, x->tokens = lr.tokens, x->tok_s = lr.tokens_per_s;
            for (int i = 0; i < sp[a].n_stages; i++) x->busy_s[i] = after.busy_s[i] - before.busy_s[i];
            x->mb_prefill = (double)(after.mb_prefill - before.mb_prefill);
            x->mb_decode = (double)(after.mb_decode - before.mb_decode);
            x->front_cpu_s = c1 - c0;
        }
    }
    return LS_OK;
}

/* The measured summaries of each plan, and of each plan against the first. */
static void summarize(ls_validate *v) {
    ls_validate_result *r = &v->r;
    int runs = v->o.runs;
    for (int a = 0; a < r->n_plans; a++) {
        ls_validate_plan *p = &r->plans[a];
        const ls_plan_result *x = &p->plan;
        double tps[LS_VALIDATE_MAX_RUNS];
        for (int k = 0; k < runs; k++) tps[k] = p->run[k].tok_s;
        p->tok_s = ls_median(tps, runs); /* sorts tps */
        p->min_tok_s = tps[0], p->max_tok_s = tps[runs - 1];
        p->error = (p->tok_s - x->throughput_tok_s) / x->throughput_tok_s;
        p->replay_error = (p->tok_s - p->replay.tok_s) / p->replay.tok_s;
        double busy = 0;
        p->batch_s = 0;
        memset(p->busy_s, 0, sizeof p->busy_s);
        for (int k = 0; k < runs; k++) {
            p->batch_s += p->run[k].seconds / runs;
            for (int s = 0; s < x->n_stage && s < LS_SERVE_MAX_STAGES; s++) {
                p->busy_s[s] += p->run[k].busy_s[s] / runs;
                busy += p->run[k].busy_s[s] / runs;
            }
        }
        /* stage overlap: summed busy time over wall time (1 = the stages never computed at
         * the same time, n_stage = always all at once) */
        p->overlap = busy / p->batch_s;
        double rb = 0;
        for (int s = 0; s < x->n_stage && s < LS_SERVE_MAX_STAGES; s++) rb += p->replay.busy_s[s];
        p->replay_overlap = p->replay.seconds > 0 ? rb / p->replay.seconds : NAN;
        if (a == 0) continue;
        /* the planner's decision, checked with both plans under the same load: predicted and
         * measured throughput of the first plan relative to this one (paired by round) */
        double rr[LS_VALIDATE_MAX_RUNS];
        for (int k = 0; k < runs; k++) rr[k] = r->plans[0].run[k].tok_s / p->run[k].tok_s;
        p->ratio = ls_median(rr, runs);
        p->ratio_min = rr[0], p->ratio_max = rr[runs - 1];
        p->pred_ratio = r->plans[0].plan.throughput_tok_s / x->throughput_tok_s;
        p->replay_ratio = r->plans[0].replay.tok_s / p->replay.tok_s;
    }
}

/* Replays every plan again with the cluster's host facts as they are now (capacity, the
 * front's work), and without the front's work; a replay that fails keeps the previous one. */
static void replay_all(ls_validate *v) {
    ls_validate_result *r = &v->r;
    ls_plan_sim_opts so = ls_plan_sim_for_cluster(v->cl);
    for (int a = 0; a < r->n_plans; a++) {
        ls_validate_plan *p = &r->plans[a];
        ls_plan_sim_result sr;
        so.front_s = 0;
        p->nofront_replay_tok_s = ls_plan_simulate(v->pb, &p->plan, &so, &sr) == LS_OK ? sr.tok_s : p->replay.tok_s;
        so.front_s = v->cl->host_front_s;
        if (ls_plan_simulate(v->pb, &p->plan, &so, &sr) == LS_OK) p->replay = sr;
    }
}

/* The host probe against the run: when the stages overlapped (summed busy over wall time)
 * more than LS_VALIDATE_OVERLAP_TOL apart from what the replay with the probe's capacity
 * says, the host was not what the probe saw before serving; the probe is taken again now
 * and every replay recomputed with it (the first replay is kept in the result). */
static void recheck_probe(ls_validate *v) {
    ls_validate_result *r = &v->r;
    int off = 0;
    for (int a = 0; a < r->n_plans; a++) {
        const ls_validate_plan *p = &r->plans[a];
        off |= !(fabs(p->overlap - p->replay_overlap) <= LS_VALIDATE_OVERLAP_TOL * p->replay_overlap);
    }
    if (!off || !v->cl || v->o.stages < 2) return;
    double cap = ls_host_capacity(r->ckpt, v->o.stages);
    if (!isfinite(cap)) return;
    r->probe_retaken = 1;
    r->host_capacity = cap;
    v->cl->host_capacity = cap;
    replay_all(v);
    summarize(v);
}

int ls_validate_measure(ls_validate *v) {
    int n = v->r.n_plans, B = v->o.wl.batch;
    if (n < 1) return ls_err(LS_ESTATE, "validate: measure before solve");
    ls_plan *sp = calloc((size_t)n, sizeof *sp);
    ls_server **sv = calloc((size_t)n, sizeof *sv);
    char **prompts = calloc((size_t)B, sizeof(char *));
    int rc = sp && sv && prompts ? measure(v, sp, sv, prompts) : ls_err(LS_ENOMEM, "out of memory");
    for (int a = 0; sv && a < n; a++)
        if (sv[a]) ls_server_stop(sv[a]);
    for (int i = 0; prompts && i < B; i++) free(prompts[i]);
    free(prompts);
    free(sv);
    free(sp);
    if (rc == LS_OK) {
        /* the front's work per micro-batch, measured in the warm-up rounds: the replays take it
         * as a station of its own on the shared host (each micro-batch passes it between the
         * last stage and the next schedule) */
        v->cl->host_front_s = v->r.front_s;
        replay_all(v);
        summarize(v);
        for (int a = 0; a < n; a++) v->r.plans[a].first_replay_tok_s = v->r.plans[a].replay.tok_s;
        recheck_probe(v);
    }
    return rc;
}

cJSON *ls_validate_report(const ls_validate *v) {
    const ls_validate_result *r = &v->r;
    cJSON *rep = cJSON_CreateObject(), *rplans = rep ? cJSON_AddArrayToObject(rep, "plans") : NULL;
    if (!rplans) {
        cJSON_Delete(rep);
        return NULL;
    }
    if (isfinite(r->host_capacity)) cJSON_AddNumberToObject(rep, "host_capacity_cores", r->host_capacity);
    if (isfinite(r->hop_s)) cJSON_AddNumberToObject(rep, "idle_hop_s", r->hop_s);
    if (isfinite(r->first_capacity)) cJSON_AddNumberToObject(rep, "host_capacity_first_probe", r->first_capacity);
    cJSON_AddBoolToObject(rep, "probe_retaken", r->probe_retaken);
    cJSON_AddNumberToObject(rep, "front_s_per_microbatch", r->front_s);
    for (int a = 0; a < r->n_plans; a++) {
        const ls_validate_plan *p = &r->plans[a];
        const ls_plan_result *x = &p->plan;
        cJSON *o = cJSON_CreateObject(), *ost = cJSON_AddArrayToObject(o, "stages");
        cJSON_AddStringToObject(o, "algo", ls_plan_algo_name(x->algo));
        if (v->o.workdir) cJSON_AddStringToObject(o, "plan", p->path);
        static const char *const keys[] = {"predicted_tok_s",     "predicted_s",        "measured_tok_s",
                                           "measured_min_tok_s",  "measured_max_tok_s", "error",
                                           "replay_tok_s",        "replay_error",       "predicted_mb_prefill",
                                           "predicted_mb_decode", "replay_mb_prefill",  "replay_mb_decode",
                                           "measured_mb_prefill", "measured_mb_decode"};
        const double vals[] = {x->throughput_tok_s,  x->total_s,           p->tok_s,
                               p->min_tok_s,         p->max_tok_s,         p->error,
                               p->replay.tok_s,      p->replay_error,      p->pred_mb_prefill,
                               p->pred_mb_decode,    p->replay.mb_prefill, p->replay.mb_decode,
                               p->run[0].mb_prefill, p->run[0].mb_decode};
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) cJSON_AddNumberToObject(o, keys[k], vals[k]);
        cJSON *rs = cJSON_AddArrayToObject(o, "runs");
        for (int k = 0; k < v->o.runs; k++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "seconds", p->run[k].seconds);
            cJSON_AddNumberToObject(e, "tokens", p->run[k].tokens);
            cJSON_AddNumberToObject(e, "tok_s", p->run[k].tok_s);
            cJSON_AddItemToArray(rs, e);
        }
        for (int s = 0; s < x->n_stage && s < LS_SERVE_MAX_STAGES; s++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "predicted_busy_s", p->pred_busy_s[s]);
            cJSON_AddNumberToObject(e, "replay_busy_s", p->replay.busy_s[s]);
            cJSON_AddNumberToObject(e, "measured_busy_s", p->busy_s[s]);
            cJSON_AddItemToArray(ost, e);
        }
        cJSON_AddNumberToObject(o, "measured_batch_s", p->batch_s);
        cJSON_AddNumberToObject(o, "stage_overlap", p->overlap);
        cJSON_AddNumberToObject(o, "replay_stage_overlap", p->replay_overlap);
        cJSON_AddNumberToObject(o, "replay_first_probe_tok_s", p->first_replay_tok_s);
        cJSON_AddNumberToObject(o, "replay_without_front_tok_s", p->nofront_replay_tok_s);
        if (a > 0) {
            cJSON_AddNumberToObject(o, "predicted_ratio_first_over_this", p->pred_ratio);
            cJSON_AddNumberToObject(o, "replay_ratio_first_over_this", p->replay_ratio);
            cJSON_AddNumberToObject(o, "measured_ratio_first_over_this", p->ratio);
        }
        cJSON_AddItemToArray(rplans, o);
    }
    if (v->o.workdir) cJSON_AddStringToObject(rep, "workdir", r->dir);
    cJSON_AddStringToObject(rep, "model", r->ckpt);
    cJSON_AddNumberToObject(rep, "stages", v->o.stages);
    cJSON_AddNumberToObject(rep, "threads", v->o.threads);
    cJSON *w = cJSON_AddObjectToObject(rep, "workload");
    cJSON_AddNumberToObject(w, "batch", v->o.wl.batch);
    cJSON_AddNumberToObject(w, "prompt", v->o.wl.prompt);
    cJSON_AddNumberToObject(w, "gen", v->o.wl.gen);
    cJSON_AddNumberToObject(rep, "runs", v->o.runs);
    return rep;
}

/* Removes what validate writes into its own temporary directory, then the directory. */
static void cleanup_dir(const char *dir) {
    char f[1400];
    static const char *names[] = {"model.safetensors", "profile.json", "cluster.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        unlink(f);
    }
    for (int a = 0; a < LS_PLAN_ALGO_COUNT; a++) {
        snprintf(f, sizeof f, "%s/plan-%s.json", dir, ls_plan_algo_name((ls_plan_algo)a));
        unlink(f);
    }
    rmdir(dir);
}

void ls_validate_free(ls_validate *v) {
    if (!v) return;
    if (v->own_dir) cleanup_dir(v->r.dir);
    free(v->r.plans);
    free(v->pb);
    ls_plan_cluster_free(v->cl);
    ls_plan_catalog_free(v->cat);
    cJSON_Delete(v->profile);
    free(v);
}

static void validate_print(FILE *f, const ls_validate_result *r) {
    for (int a = 0; a < r->n_plans; a++) {
        const ls_validate_plan *p = &r->plans[a];
        const ls_plan_result *x = &p->plan;
        char st[64] = "", mbs[16];
        for (int s = 0; s < x->n_stage && strlen(st) < 48; s++) {
            size_t l = strlen(st);
            int b0 = x->bits[x->begin[s]], mixed = 0;
            for (int i = x->begin[s]; i < x->begin[s + 1]; i++) mixed |= x->bits[i] != b0;
            snprintf(st + l, sizeof st - l, "%s%d@%s%d", s ? " " : "", x->begin[s + 1] - x->begin[s], mixed ? "~" : "",
                     b0);
        }
        snprintf(mbs, sizeof mbs, "%d/%d", x->mb_prefill, x->mb_decode);
        fprintf(f, "  %-10s %-22s %5s %8.1f/s %8.1f/s %+7.1f%% %8.1f/s %+7.1f%% %6.1f%%\n", ls_plan_algo_name(x->algo),
                st, mbs, x->throughput_tok_s, p->tok_s, p->error * 100, p->replay.tok_s, p->replay_error * 100,
                (p->max_tok_s - p->min_tok_s) / p->tok_s * 100);
        fprintf(f,
                "  %-10s micro-batches prefill %g (planner %d, replay %d), decode %g (planner %d, replay %d); busy s "
                "per stage (measured, planner, replay):",
                "", p->run[0].mb_prefill, p->pred_mb_prefill, p->replay.mb_prefill, p->run[0].mb_decode,
                p->pred_mb_decode, p->replay.mb_decode);
        for (int s = 0; s < x->n_stage; s++)
            fprintf(f, " %.3f/%.3f/%.3f", p->busy_s[s], p->pred_busy_s[s], p->replay.busy_s[s]);
        fprintf(f, "; batch %.3f s (planner %.3f, replay %.3f); stage overlap %.2f (replay %.2f)\n", p->batch_s,
                x->total_s, p->replay.seconds, p->overlap, p->replay_overlap);

    }
    for (int a = 1; a < r->n_plans; a++) {
        const ls_validate_plan *p = &r->plans[a];
        fprintf(f,
                "  %s / %s: planner %.2fx, replay %.2fx, measured %.2fx (median of per-round ratios, range "
                "%.2f-%.2f)\n",
                ls_plan_algo_name(r->plans[0].plan.algo), ls_plan_algo_name(p->plan.algo), p->pred_ratio,
                p->replay_ratio, p->ratio, p->ratio_min, p->ratio_max);
    }
}

int ls_validate_all(ls_validate *v, FILE *f, int *cluster_failed) {
    const ls_validate_opts *o = &v->o;
    const ls_validate_result *r = &v->r;
    const ls_plan_workload *wl = &o->wl;
    *cluster_failed = 0;
    fprintf(
        f,
        "closing the loop in %s: %s (%d layers, d_model %d), %d CPU stages x %d thread(s), batch %d, prompt %d, gen "
        "%d\n",
        r->dir, r->ckpt, r->cfg.n_layer, r->cfg.d_model, o->stages, o->threads, wl->batch, wl->prompt, wl->gen);
    /* 2. the device profile (same machine, measured now unless given) */
    LS_TRY(ls_validate_profile(v));
    if (!o->profile) fprintf(f, "profile: %s (%.1f s)\n", r->profile, r->profile_s);
    /* 3. the virtual cluster, 4. the plans, 5. serving them */
    int rc = ls_validate_cluster(v);
    if (rc) {
        *cluster_failed = 1;
        return rc;
    }
    fprintf(f,
            "host: parallel capacity for %d stage processes %.2f cores (1 = one process alone); idle ZeroMQ hop "
            "%.0f us median (profile link: %.0f us)\n",
            o->stages, r->host_capacity, r->hop_s * 1e6, r->link_lat_s * 1e6);
    fprintf(f, "\n  %-10s %-22s %5s %10s %10s %8s %10s %8s %7s\n", "plan", "stages (layers@bits)", "mb", "planner",
            "measured", "error", "replay", "error", "spread");
    LS_TRY(ls_validate_solve(v));
    LS_TRY(ls_validate_measure(v));
    fprintf(f, "front (scheduler, HTTP, load generator): %.0f us CPU per micro-batch in the warm-up, charged by the "
               "replays (without it:", r->front_s * 1e6);
    for (int a = 0; a < r->n_plans; a++)
        fprintf(f, " %s %.1f/s %+.1f%%", ls_plan_algo_name(r->plans[a].plan.algo), r->plans[a].nofront_replay_tok_s,
                (r->plans[a].tok_s / r->plans[a].nofront_replay_tok_s - 1) * 100);
    fprintf(f, ")\n");
    if (r->probe_retaken) {
        fprintf(f, "host probe re-taken after serving: the measured stage overlap was more than %.0f%% from the "
                   "replay's; capacity %.2f -> %.2f cores, replays recomputed (with the first probe:",
                LS_VALIDATE_OVERLAP_TOL * 100, r->first_capacity, r->host_capacity);
        for (int a = 0; a < r->n_plans; a++)
            fprintf(f, " %s %.1f/s %+.1f%%", ls_plan_algo_name(r->plans[a].plan.algo), r->plans[a].first_replay_tok_s,
                    (r->plans[a].tok_s / r->plans[a].first_replay_tok_s - 1) * 100);
        fprintf(f, ")\n");
    }
    validate_print(f, r);
    return LS_OK;
}
