/* job.c - a whole training job as `llmsys train` runs it: option checks, data (corpus or
 * loader service), a fresh or resumed trainer, the run with its saves, and the report. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmsys/loader.h"
#include "llmsys/train.h"
#include "llmsys/zsec.h"

ls_train_job ls_train_job_defaults(void) {
    /* "not given" sentinels: values the option parser can never produce for real input */
    return (ls_train_job){.steps = LS_TRAIN_UNSET,
                          .batch = LS_TRAIN_UNSET,
                          .seq = LS_TRAIN_UNSET,
                          .warmup = LS_TRAIN_UNSET,
                          .ranks = 1,
                          .seed = INT64_MIN,
                          .lr = NAN,
                          .weight_decay = NAN,
                          .grad_clip = NAN,
                          .heldout = 0.05};
}

int ls_train_job_check(ls_train_job *o, int world) {
    ls_model_config mc = {0};
    int given_run_setting = o->config || o->batch != LS_TRAIN_UNSET || o->seq != LS_TRAIN_UNSET || !isnan(o->lr) ||
                            o->warmup != LS_TRAIN_UNSET || o->seed != INT64_MIN || !isnan(o->weight_decay) ||
                            !isnan(o->grad_clip) || o->tokenizer;
    int batch = o->batch != LS_TRAIN_UNSET ? o->batch : 8;
    if (o->n_data == 0 && !o->loader) return ls_err(LS_EINVAL, "missing --data PATH... or --loader URL (see --help)");
    if (o->n_data > 0 && o->loader) return ls_err(LS_EINVAL, "give --data or --loader, not both");
    if (o->loader) LS_TRY(ls_zsec_check(o->loader, 0, "--loader")); /* as the client would refuse it */
    if (!o->resume && o->steps == LS_TRAIN_UNSET) return ls_err(LS_EINVAL, "missing --steps N (see --help)");
    if (o->steps != LS_TRAIN_UNSET && o->steps < 1) return ls_err(LS_EINVAL, "--steps must be >= 1, got %d", o->steps);
    if (o->resume && given_run_setting)
        return ls_err(LS_EINVAL, "--resume continues the saved run: --config, --batch, --seq, --lr, --warmup, "
                                 "--seed, --weight-decay, --grad-clip and --tokenizer come from the checkpoint");
    if (!o->resume && ls_model_config_named(o->config ? o->config : "small", &mc) < 0) return LS_EINVAL;
    if (o->batch != LS_TRAIN_UNSET && o->batch < 1) return ls_err(LS_EINVAL, "--batch must be >= 1, got %d", o->batch);
    if (o->seq != LS_TRAIN_UNSET && (o->seq < 1 || o->seq > mc.n_ctx))
        return ls_err(LS_EINVAL, "--seq must be in [1, %d] for this config, got %d", mc.n_ctx, o->seq);
    if (!isnan(o->lr) && !(o->lr > 0 && o->lr < 10)) return ls_err(LS_EINVAL, "--lr must be in (0, 10), got %g", o->lr);
    if (o->warmup != LS_TRAIN_UNSET && o->warmup < 0)
        return ls_err(LS_EINVAL, "--warmup must be >= 0, got %d", o->warmup);
    if (!isnan(o->weight_decay) && o->weight_decay < 0) return ls_err(LS_EINVAL, "--weight-decay must be >= 0");
    if (!isnan(o->grad_clip) && o->grad_clip < 0) return ls_err(LS_EINVAL, "--grad-clip must be >= 0");
    if (o->seed != INT64_MIN && o->seed < 0) return ls_err(LS_EINVAL, "--seed must be >= 0");
    if (o->ranks < 1 || o->ranks > 1024) return ls_err(LS_EINVAL, "--ranks must be in [1, 1024], got %d", o->ranks);
    if (!o->resume && batch % o->ranks != 0)
        return ls_err(LS_EINVAL, "--batch %d does not split evenly over %d ranks", batch, o->ranks);
    if (!o->resume) /* before any allocation */
        LS_TRY(ls_model_batch_fit(&mc, batch, o->ranks, o->seq != LS_TRAIN_UNSET ? o->seq : mc.n_ctx));
    if (o->save_every < 0 || o->stop_at < 0 || o->log_every < 0 || o->threads < 0)
        return ls_err(LS_EINVAL, "--save-every, --stop-at, --log-every and --threads must be >= 0");
    if (o->threads > LS_MODEL_MAX_THREADS)
        return ls_err(LS_EINVAL, "--threads must be at most %d, got %d", LS_MODEL_MAX_THREADS, o->threads);
    if (o->stop_at > 0 && o->steps != LS_TRAIN_UNSET && o->stop_at > o->steps)
        return ls_err(LS_EINVAL, "--stop-at %d is beyond --steps %d", o->stop_at, o->steps);
    if (o->precision_plan && o->plan_check && o->plan_check(o->precision_plan, world ? world : o->ranks) < 0)
        return LS_EINVAL;
    if (!(o->heldout > 0 && o->heldout <= 0.5))
        return ls_err(LS_EINVAL, "--heldout must be in (0, 0.5], got %g", o->heldout);
    if (o->max_bytes < 0) return ls_err(LS_EINVAL, "--max-bytes must be >= 0");
    if (!o->config) o->config = "small";
    if (o->batch == LS_TRAIN_UNSET) o->batch = 8;
    if (o->seed == INT64_MIN) o->seed = 1;
    if (o->steps == LS_TRAIN_UNSET) o->steps = 0; /* with --resume: keep the saved schedule */
    return LS_OK;
}

/* Everything a run holds; freed by job_free. */
typedef struct {
    ls_dist *d;
    ls_corpus *corpus;
    ls_trainer *t;
    ls_batch_source *src;
    ls_bpe *tok;      /* the run's BPE vocabulary (NULL: bytes); handed to the model */
    ls_throttle thr;  /* this rank's CPU limit from the precision plan */
    char qsync[1024]; /* every rank's precisions and throttle (on rank 0), for the log and report */
    /* precision-plan runs, per rank: [0, N) its share of a core over the run, [N, 2N) its
     * seconds per step outside its own compute (waiting and communicating at the syncs),
     * [2N, 3N) inside it (data, forward/backward, update), [3N, 4N) its share of a core
     * inside it (process CPU over wall seconds); the first step left out */
    float qrank[128];
} job_ctx;

static void job_free(job_ctx *c) {
    ls_throttle_release(&c->thr);
    ls_batch_source_free(c->src);
    ls_trainer_free(c->t);
    ls_corpus_free(c->corpus);
    ls_bpe_free(c->tok);
}

/* A collective failure: the lowest rank that failed by itself (not merely because a peer
 * did, LS_EPEER) is the one to report it. */
static int job_fail(ls_dist *d, int rc, ls_train_job_result *r) {
    int bad = -1;
    ls_dist_agree(d, rc == LS_EPEER ? LS_OK : rc, &bad);
    r->report_here = bad == ls_dist_rank(d) || (bad < 0 && ls_dist_rank(d) == 0);
    return rc < 0 ? rc : LS_EPEER;
}

/* The data side of a run. The loop only sees an ls_batch_source; another kind of source
 * adds a branch here. */
static int job_source(const ls_train_job *o, job_ctx *c, int ranks) {
    if (o->loader) {
        /* each rank fetches its own cost-balanced share of every step from the service */
        LS_TRY(ls_loader_batch_source(&c->src, o->loader, ls_dist_rank(c->d), ranks, c->tok, 10000));
        return ls_trainer_set_shards(c->t, ranks);
    }
    ls_train_config tc = *ls_trainer_config(c->t);
    uint64_t h = ls_corpus_hash(c->corpus);
    if (o->resume && tc.data_hash && tc.data_hash != h && ls_dist_rank(c->d) == 0)
        LS_WARN("%s was trained on other data (fingerprint %016llx, now %016llx): the resumed run will not "
                "match an uninterrupted one",
                o->resume, (unsigned long long)tc.data_hash, (unsigned long long)h);
    LS_TRY(ls_batch_source_corpus(&c->src, c->corpus, &tc, ranks));
    /* the shard count and data fingerprint of a fresh run are part of its saved settings */
    LS_TRY(ls_trainer_set_shards(c->t, tc.shards));
    if (!o->resume) ls_trainer_set_data_hash(c->t, h);
    return LS_OK;
}

/* With a loader, the loader's resume state is saved beside each checkpoint, as
 * <out>.loader-state: `llmsys loader serve --resume` restarts the service from it. */
static int job_save_state(void *ctx, const char *ckpt) {
    job_ctx *c = ctx;
    char p[4096];
    snprintf(p, sizeof p, "%s.loader-state", ckpt);
    return ls_loader_batch_source_save_state(c->src, p, NULL);
}

/* The trainer: resumed from the checkpoint, or fresh from the options. */
static int job_trainer(const ls_train_job *o, job_ctx *c) {
    if (o->resume) return ls_trainer_resume(&c->t, o->resume, o->steps, c->d); /* with its tokenizer */
    ls_model_config mc;
    ls_model_config_named(o->config, &mc); /* checked by ls_train_job_check */
    if (c->tok) mc.vocab = ls_bpe_vocab_size(c->tok);
    ls_train_config tc = ls_train_defaults();
    tc.batch = o->batch;
    tc.seq = o->seq != LS_TRAIN_UNSET ? o->seq : mc.n_ctx;
    tc.steps = o->steps;
    tc.seed = (uint64_t)o->seed;
    if (!isnan(o->lr)) tc.opt.lr = (float)o->lr;
    if (!isnan(o->weight_decay)) tc.opt.weight_decay = (float)o->weight_decay;
    if (!isnan(o->grad_clip)) tc.opt.grad_clip = (float)o->grad_clip;
    tc.opt.warmup_steps = o->warmup != LS_TRAIN_UNSET ? o->warmup : o->steps / 10;
    LS_TRY(ls_trainer_init(&c->t, &mc, &tc, c->d));
    if (!c->tok) return LS_OK;
    char *json = ls_bpe_to_json(c->tok); /* the model owns its copy */
    ls_bpe *copy = NULL;
    int rc = json ? ls_bpe_parse(json, strlen(json), &copy) : LS_ENOMEM;
    free(json);
    return rc ? rc : ls_model_set_tokenizer(ls_trainer_model(c->t), copy);
}

static void job_log_start(const ls_train_job *o, job_ctx *c, int64_t start, int64_t end) {
    const ls_train_config *tc = ls_trainer_config(c->t);
    ls_model *m = ls_trainer_model(c->t);
    int N = ls_dist_size(c->d);
    if (start >= end) LS_WARN("%s is already at step %" PRId64 ": nothing to train", o->resume, start);
    if (!c->corpus) {
        LS_INFO("train: %zu params, %d rank(s), batch %d x seq %d, steps %" PRId64 "..%" PRId64
                " of %d, data from the loader service %s",
                ls_model_num_params(m), N, tc->batch, tc->seq, start, end, tc->steps, o->loader);
        return;
    }
    char b[32];
    LS_INFO("train: %zu params (%s), %d rank(s), global batch %d x seq %d, steps %" PRId64 "..%" PRId64
            " of %d, %zu train / %zu held-out bytes from %d docs, %d shards",
            ls_model_num_params(m), ls_fmt_bytes((double)ls_model_num_params(m) * 4, b, sizeof b), N, tc->batch,
            tc->seq, start, end, tc->steps, ls_corpus_num_bytes(c->corpus, LS_SPLIT_TRAIN),
            ls_corpus_num_bytes(c->corpus, LS_SPLIT_HELDOUT), ls_corpus_num_docs(c->corpus), tc->shards);
}

static int job_report(const ls_train_job *o, job_ctx *c, const ls_train_run_result *r) {
    cJSON *j = ls_train_run_report(c->t, c->d, r);
    if (!j) return ls_err(LS_ENOMEM, "out of memory building the report");
    if (c->corpus) cJSON_AddNumberToObject(j, "train_bytes", (double)ls_corpus_num_bytes(c->corpus, LS_SPLIT_TRAIN));
    if (o->loader) cJSON_AddStringToObject(j, "loader", o->loader);
    cJSON_AddStringToObject(j, "out", o->out);
    if (o->resume) cJSON_AddStringToObject(j, "resumed_from", o->resume);
    if (o->precision_plan) cJSON_AddStringToObject(j, "precision_plan", o->precision_plan);
    if (c->qsync[0]) cJSON_AddStringToObject(j, "precision_ranks", c->qsync);
    if (c->qsync[0] && ls_dist_size(c->d) <= 32) {
        cJSON_AddItemToObject(j, "cpu_share", cJSON_CreateFloatArray(c->qrank, ls_dist_size(c->d)));
        cJSON_AddItemToObject(j, "sync_s", cJSON_CreateFloatArray(c->qrank + ls_dist_size(c->d), ls_dist_size(c->d)));
        cJSON_AddItemToObject(j, "compute_s",
                              cJSON_CreateFloatArray(c->qrank + 2 * ls_dist_size(c->d), ls_dist_size(c->d)));
        cJSON_AddItemToObject(j, "compute_share",
                              cJSON_CreateFloatArray(c->qrank + 3 * ls_dist_size(c->d), ls_dist_size(c->d)));
    }
    int rc = ls_json_write_file(o->report, j);
    cJSON_Delete(j);
    return rc;
}

static int job_run(const ls_train_job *o, job_ctx *c, ls_train_job_result *res) {
    ls_dist *d = c->d;
    int rank = ls_dist_rank(d), N = ls_dist_size(d);
    int rc = rank == 0 ? ls_out_path_check("out", o->out) : LS_OK;
    if (rc == LS_OK && rank == 0 && o->report) rc = ls_out_path_check("report", o->report);
    if (ls_dist_agree(d, rc, NULL) < 0) return job_fail(d, rc, res);
    ls_corpus_opts co = ls_corpus_defaults();
    co.heldout_frac = o->heldout;
    if (o->max_bytes > 0) co.max_bytes = (size_t)o->max_bytes;
    /* a fresh run's vocabulary from --tokenizer, a resumed one's from its checkpoint */
    if (o->resume) rc = ls_ckpt_tokenizer_load(o->resume, NULL, &c->tok);
    else if (o->tokenizer) rc = ls_bpe_load(o->tokenizer, &c->tok);
    co.tokenizer = c->tok;
    /* the loader service owns its sources */
    if (rc == LS_OK) rc = o->loader ? LS_OK : ls_corpus_load(&c->corpus, o->data, o->n_data, &co);
    if (ls_dist_agree(d, rc, NULL) < 0) return job_fail(d, rc, res);
    ls_train_job po = *o; /* a pre-started world learns here what to resume from */
    if (o->prepare) {
        res->started = 1; /* a pre-started world: what it resumes from is no input of its command line */
        rc = o->prepare(o->ctx, d, &po.resume);
        if (ls_dist_agree(d, rc, NULL) < 0) return job_fail(d, rc, res);
        if (po.resume && !o->resume && !c->tok && ls_ckpt_tokenizer_load(po.resume, NULL, &c->tok) == LS_OK && c->tok)
            rc = ls_err(LS_EUNSUPPORTED, "a pre-started world read its data as bytes, but %s has a BPE vocabulary",
                        po.resume);
        if (ls_dist_agree(d, rc, NULL) < 0) return job_fail(d, rc, res);
    }
    o = &po;
    rc = job_trainer(o, c);
    if (rc == LS_OK && o->loader) res->started = 1; /* the service's answers are the run's */
    if (rc == LS_OK) rc = job_source(o, c, N);
    if (rc == LS_OK && o->precision_plan && o->plan_apply) {
        const ls_train_config *ptc = ls_trainer_config(c->t);
        rc = o->plan_apply(o->precision_plan, ls_trainer_model(c->t), d, ptc->batch, ptc->seq, &c->thr, c->qsync,
                           sizeof c->qsync);
        if (rc == LS_OK && rank == 0) LS_INFO("train: %s", c->qsync);
    }
    if (rc == LS_OK) res->started = 1;
    if (ls_dist_agree(d, rc, NULL) < 0) return job_fail(d, rc, res);

    const ls_train_config *tc = ls_trainer_config(c->t);
    int64_t start = ls_trainer_step_index(c->t), end = tc->steps;
    if (o->stop_at > 0 && o->stop_at < end) end = o->stop_at;
    if (rank == 0) job_log_start(o, c, start, end);
    ls_train_run_opts ro = {.out = o->out,
                            .save_every = o->save_every,
                            .stop_at = o->stop_at,
                            .log_every = o->log_every,
                            .stop_flag = o->stop_flag,
                            .after_save = o->loader ? job_save_state : NULL,
                            .save_ctx = c};
    rc = o->attach ? o->attach(o->ctx, c->t, d) : LS_OK;
    if (ls_dist_agree(d, rc, NULL) < 0) {
        if (o->detach) o->detach(o->ctx, c->t);
        return job_fail(d, rc, res);
    }
    ls_train_run_result r;
    rc = ls_train_run(c->t, c->src, d, &ro, &r);
    if (o->detach) o->detach(o->ctx, c->t);
    if (rc < 0) return job_fail(d, rc, res);
    if (o->precision_plan && o->plan_apply && N <= 32) { /* what each rank ran at: checks the plan's predictions */
        ls_train_timing tm;
        ls_trainer_timing(c->t, &tm);
        c->qrank[rank] = (float)ls_throttle_cpu_share(&c->thr);
        /* per step after the first (oneDNN builds its kernels there): outside and inside compute */
        double busy = ls_train_timing_busy(&tm) - r.busy0_s;
        int ns = r.n_losses > 1 ? r.n_losses - 1 : 1;
        double wall = r.n_losses > 1 ? r.wall_s - r.step_s[0] : r.wall_s;
        c->qrank[N + rank] = (float)((wall - busy) / ns);
        c->qrank[2 * N + rank] = (float)(busy / ns);
        c->qrank[3 * N + rank] = (float)(busy > 0 ? (tm.busy_cpu_s - r.busy0_cpu_s) / busy : 0);
        if ((rc = ls_dist_allreduce_sum(d, c->qrank, (size_t)N * 4)) < 0) {
            ls_train_run_result_free(&r);
            return job_fail(d, rc, res);
        }
    }
    int nl = r.n_losses;
    *res = (ls_train_job_result){
        r.start_step, r.end_step, tc->steps, nl, nl ? r.losses[0] : NAN, nl ? r.losses[nl - 1] : NAN, r.tokens_per_s,
        r.wall_s,     r.stopped,  0,         1};
    if (rank == 0 && o->report) rc = job_report(o, c, &r);
    ls_train_run_result_free(&r);
    if (ls_dist_agree(d, rc, NULL) < 0) return job_fail(d, rc, res);
    return LS_OK;
}

int ls_train_job_run(const ls_train_job *o, ls_dist *d, ls_train_job_result *r) {
    memset(r, 0, sizeof *r);
    /* threads per process: the cores shared evenly among the ranks on this host */
    int threads = o->threads;
    if (threads <= 0) {
        threads = ls_num_cores() / ls_dist_local_size(d);
        if (threads < 1) threads = 1;
    }
    ls_model_set_threads(threads);
    job_ctx c = {.d = d};
    int rc = job_run(o, &c, r);
    job_free(&c);
    return rc;
}

int ls_train_corpus_run(ls_trainer **t, const ls_model_config *mc, ls_train_config *tc, const ls_corpus *c,
                        ls_dist *d, const ls_train_hooks *h, ls_train_run_result *r) {
    memset(r, 0, sizeof *r);
    ls_batch_source *src = NULL;
    int shards = tc->shards;
    tc->shards = 0;
    int rc = ls_trainer_init(t, mc, tc, d);
    tc->shards = shards;
    if (rc == LS_OK) rc = ls_batch_source_corpus(&src, c, tc, ls_dist_size(d));
    rc = ls_dist_agree(d, rc, NULL);
    ls_train_run_opts ro = {.quiet = 1};
    if (rc == LS_OK) {
        ls_trainer_set_hooks(*t, h);
        rc = ls_train_run(*t, src, d, &ro, r);
    }
    ls_batch_source_free(src);
    return rc;
}
