/* cmd_train.c - `llmsys train`, `eval`, `generate` and the core demo scenario. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "llmsys/robust.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

/* ---------------------------------------------------------------- shared helpers */

/* Prints "llmsys <cmd>: msg" and returns the usage exit code. */
static int usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_err(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "llmsys %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* Options every command that reads a text corpus shares. */
typedef struct {
    ls_strlist paths;
    double heldout;
    int64_t max_bytes;
} data_opts;

static int data_opts_check(const char *cmd, const data_opts *d) {
    if (!(d->heldout > 0 && d->heldout <= 0.5))
        return usage_err(cmd, "--heldout must be in (0, 0.5], got %g", d->heldout);
    if (d->max_bytes < 0) return usage_err(cmd, "--max-bytes must be >= 0");
    return 0;
}

static int data_load(const data_opts *d, ls_corpus **out) {
    ls_corpus_opts o = ls_corpus_defaults();
    o.heldout_frac = d->heldout;
    if (d->max_bytes > 0) o.max_bytes = (size_t)d->max_bytes;
    return ls_corpus_load(out, d->paths.v, d->paths.n, &o);
}

/* Threads per process: the cores shared evenly among the ranks on this host. */
static void set_threads(int threads, const ls_dist *d) {
    if (threads <= 0) {
        threads = ls_num_cores() / ls_dist_local_size(d);
        if (threads < 1) threads = 1;
    }
    ls_model_set_threads(threads);
}

static int write_report(const char *path, cJSON *j) {
    if (!j) return ls_err(LS_ENOMEM, "out of memory building the report");
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- mpirun re-launch */

static volatile pid_t mpirun_pid = 0;

static void forward_stop_signal(int sig) {
    (void)sig;
    if (mpirun_pid > 0) kill(mpirun_pid, SIGUSR1);
}

/* `llmsys train --ranks N ...` runs `mpirun -np N <self> train ...` without --ranks and
 * returns its exit code, or a negative status (with message) when it cannot start it. */
static int relaunch_under_mpirun(int ranks, int argc, char **argv) {
    char np[16];
    char **av = calloc((size_t)argc + LS_DIST_MPIRUN_ARGC + 3, sizeof *av);
    if (!av) return ls_err(LS_ENOMEM, "out of memory");
    int n = ls_dist_mpirun_args(av, np, ranks);
    av[n++] = (char *)ls_cli_self();
    av[n++] = "train";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--ranks=", 8)) continue;
        av[n++] = argv[i];
    }
    av[n] = NULL;
    /* each rank gets its share of the cores (the child re-computes it too) */
    int per = ls_num_cores() / ranks;
    char thr[16];
    snprintf(thr, sizeof thr, "%d", per < 1 ? 1 : per);
    setenv("OMP_NUM_THREADS", thr, 0);
    setenv("OPENBLAS_NUM_THREADS", thr, 0);
    /* ranks share the cores: spinning OpenMP workers would steal them from each other */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    fflush(NULL);
    /* mpirun is a child, not an exec: mpirun answers SIGINT/SIGTERM by tearing the job down
     * (SIGKILL after a short grace), which loses the save the ranks would make. So this
     * process catches those signals and passes them on as SIGUSR1, which mpirun forwards
     * to the ranks as an ordinary stop request (finish the step, agree, save). */
    pid_t parent = getpid();
    char watch[64];
    int wrc = ls_dist_watch_open(watch);
    if (wrc) {
        free(av);
        return wrc;
    }
    pid_t pid = fork();
    if (pid < 0) {
        free(av);
        rmdir(watch);
        return ls_err(LS_EIO, "cannot fork for --ranks %d: %s", ranks, strerror(errno));
    }
    if (pid == 0) {
        /* mpirun gets a process group of its own, so a Ctrl-C on the terminal (or a signal
         * to our process group, as `timeout` sends) reaches only us; and it is told to stop
         * if we die without forwarding anything. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        execvp("mpirun", av);
        fprintf(stderr, "llmsys: cannot run mpirun for --ranks %d: %s (install openmpi-bin)\n", ranks, strerror(errno));
        _exit(127);
    }
    free(av);
    mpirun_pid = pid;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    char lost[300];
    int code = ls_dist_wait_job(pid, watch, ranks, lost, sizeof lost);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    mpirun_pid = 0;
    if (lost[0]) fprintf(stderr, "llmsys train --ranks %d: %s\n", ranks, lost);
    return code;
}

/* ---------------------------------------------------------------- train */

/* SIGINT/SIGTERM during `train`: finish the current step, save, exit 130. A signal can
 * only reach the process through a global; it is the CLI's only one. */
static volatile sig_atomic_t train_stop_signal = 0;

static void on_stop_signal(int sig) { train_stop_signal = sig; }

#define UNSET INT_MIN
#define UNSET64 INT64_MIN

typedef struct {
    const char *config, *out, *resume, *report, *loader, *robust_agent;
    const char *precision_plan; /* --precision-plan (cmd_plan_train.c) */
    data_opts data;
    int steps, batch, seq, warmup, ranks, save_every, stop_at, log_every, threads;
    int64_t seed;
    double lr, weight_decay, grad_clip;
} train_opts;

/* Everything a run needs after parsing; owned and freed by train_run. */
typedef struct {
    ls_dist *d;
    ls_corpus *corpus;
    ls_trainer *t;
    ls_batch_source *src;
    ls_throttle thr;  /* this rank's CPU limit from --precision-plan */
    char qsync[1024]; /* every rank's precisions and throttle (on rank 0), for the log and report */
} train_ctx;

static void train_ctx_free(train_ctx *c) {
    ls_throttle_release(&c->thr);
    ls_batch_source_free(c->src);
    ls_trainer_free(c->t);
    ls_corpus_free(c->corpus);
}

/* Reports a collective failure once: the lowest rank that failed by itself (not merely
 * because a peer did, LS_EPEER) prints its message. */
static int collective_fail(ls_dist *d, int rc) {
    int bad = -1;
    ls_dist_agree(d, rc == LS_EPEER ? LS_OK : rc, &bad);
    if (bad == ls_dist_rank(d) || (bad < 0 && ls_dist_rank(d) == 0)) {
        if (ls_dist_size(d) > 1)
            fprintf(stderr, "llmsys: rank %d: %s\n", ls_dist_rank(d), ls_errmsg());
        else
            ls_cli_fail();
    }
    return 1;
}

/* The data side of a run. The loop only sees an ls_batch_source; another kind of source
 * (a remote loader) adds its option and a branch in these two functions. */
static int data_open(const train_opts *o, train_ctx *c) {
    return o->loader ? LS_OK : data_load(&o->data, &c->corpus); /* the loader service owns its sources */
}

static int data_source(const train_opts *o, train_ctx *c, int ranks) {
    if (o->loader) {
        /* each rank fetches its own cost-balanced share of every step from the service */
        LS_TRY(ls_loader_batch_source(&c->src, o->loader, ls_dist_rank(c->d), ranks, 10000));
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

/* With --loader, the loader's resume state is saved beside each checkpoint, as
 * <out>.loader-state: `llmsys loader serve --resume` restarts the service from it. */
static int data_save(void *ctx, const char *ckpt) {
    train_ctx *c = ctx;
    char p[4096];
    snprintf(p, sizeof p, "%s.loader-state", ckpt);
    return ls_loader_batch_source_save_state(c->src, p, NULL);
}

/* Fails before any work when an output (--out, --report) could not be written where asked. */
static int check_out_path(const char *flag, const char *path) {
    if (ls_is_dir(path)) return ls_err(LS_EINVAL, "--%s %s is a directory", flag, path);
    char *dup = strdup(path);
    if (!dup) return ls_err(LS_ENOMEM, "out of memory");
    char *slash = strrchr(dup, '/');
    const char *parent = slash ? (slash == dup ? "/" : (*slash = '\0', dup)) : ".";
    int rc = LS_OK;
    if (!ls_is_dir(parent))
        rc = ls_err(LS_ENOTFOUND, "--%s %s: directory %s does not exist", flag, path, parent);
    else if (access(parent, W_OK) != 0)
        rc = ls_err(LS_EIO, "--%s %s: directory %s is not writable", flag, path, parent);
    free(dup);
    return rc;
}

static int train_run(const train_opts *o, train_ctx *c) {
    ls_dist *d = c->d;
    int rank = ls_dist_rank(d), N = ls_dist_size(d);
    int rc = rank == 0 ? check_out_path("out", o->out) : LS_OK;
    if (rc == LS_OK && rank == 0 && o->report) rc = check_out_path("report", o->report);
    if (ls_dist_agree(d, rc, NULL) < 0) return collective_fail(d, rc);
    rc = data_open(o, c);
    if (ls_dist_agree(d, rc, NULL) < 0) return collective_fail(d, rc);

    if (o->resume) {
        rc = ls_trainer_resume(&c->t, o->resume, o->steps, d);
    } else {
        ls_model_config mc;
        ls_model_config_named(o->config, &mc); /* checked while parsing */
        ls_train_config tc = ls_train_defaults();
        tc.batch = o->batch;
        tc.seq = o->seq != UNSET ? o->seq : mc.n_ctx;
        tc.steps = o->steps;
        tc.seed = (uint64_t)o->seed;
        if (!isnan(o->lr)) tc.opt.lr = (float)o->lr;
        if (!isnan(o->weight_decay)) tc.opt.weight_decay = (float)o->weight_decay;
        if (!isnan(o->grad_clip)) tc.opt.grad_clip = (float)o->grad_clip;
        tc.opt.warmup_steps = o->warmup != UNSET ? o->warmup : o->steps / 10;
        rc = ls_trainer_init(&c->t, &mc, &tc, d);
    }
    if (rc == LS_OK) rc = data_source(o, c, N);
    if (rc == LS_OK && o->precision_plan) {
        const ls_train_config *ptc = ls_trainer_config(c->t);
        rc = train_precision_plan_apply(o->precision_plan, ls_trainer_model(c->t), d, ptc->batch, ptc->seq, &c->thr,
                                        c->qsync, sizeof c->qsync);
        if (rc == LS_OK && rank == 0) LS_INFO("train: %s", c->qsync);
    }
    if (ls_dist_agree(d, rc, NULL) < 0) return collective_fail(d, rc);

    const ls_train_config *tc = ls_trainer_config(c->t);
    int64_t start = ls_trainer_step_index(c->t), end = tc->steps;
    if (o->stop_at > 0 && o->stop_at < end) end = o->stop_at;
    if (start >= end && rank == 0) LS_WARN("%s is already at step %" PRId64 ": nothing to train", o->resume, start);
    ls_model *m = ls_trainer_model(c->t);
    if (rank == 0 && !c->corpus) {
        LS_INFO("train: %zu params, %d rank(s), batch %d x seq %d, steps %" PRId64 "..%" PRId64
                " of %d, data from the loader service %s",
                ls_model_num_params(m), N, tc->batch, tc->seq, start, end, tc->steps, o->loader);
    } else if (rank == 0) {
        char b[32];
        LS_INFO("train: %zu params (%s), %d rank(s), global batch %d x seq %d, steps %" PRId64 "..%" PRId64
                " of %d, %zu train / %zu held-out bytes from %d docs, %d shards",
                ls_model_num_params(m), ls_fmt_bytes((double)ls_model_num_params(m) * 4, b, sizeof b), N, tc->batch,
                tc->seq, start, end, tc->steps, ls_corpus_num_bytes(c->corpus, LS_SPLIT_TRAIN),
                ls_corpus_num_bytes(c->corpus, LS_SPLIT_HELDOUT), ls_corpus_num_docs(c->corpus), tc->shards);
    }
    ls_train_run_opts ro = {.out = o->out,
                            .save_every = o->save_every,
                            .stop_at = o->stop_at,
                            .log_every = o->log_every,
                            .stop_flag = &train_stop_signal,
                            .after_save = o->loader ? data_save : NULL,
                            .save_ctx = c};
    /* under `llmsys robust run`: every step reported to this node's agent (robust.h) */
    ls_robust_client *rcl = NULL;
    if (o->robust_agent) {
        rc = ls_robust_client_open(&rcl, o->robust_agent, rank, N);
        if (ls_dist_agree(d, rc, NULL) < 0) {
            ls_robust_client_close(rcl);
            return collective_fail(d, rc);
        }
        ls_train_hooks hk = {.ctx = rcl, .before_update = ls_robust_hook_before_update,
                             .after_step = ls_robust_hook_after_step};
        ls_trainer_set_hooks(c->t, &hk);
    }
    ls_train_run_result r;
    rc = ls_train_run(c->t, c->src, d, &ro, &r);
    ls_trainer_set_hooks(c->t, NULL);
    ls_robust_client_close(rcl);
    if (rc < 0) return collective_fail(d, rc);
    int nl = r.n_losses;
    if (rank == 0) {
        printf("trained steps %" PRId64 "..%" PRId64 " of %d: loss %.4f -> %.4f, %.0f tokens/s, %.1f s; saved %s\n",
               r.start_step, r.end_step, tc->steps, nl ? r.losses[0] : NAN, nl ? r.losses[nl - 1] : NAN, r.tokens_per_s,
               r.wall_s, o->out);
        if (o->report) {
            cJSON *j = ls_train_run_report(c->t, d, &r);
            if (j && c->corpus)
                cJSON_AddNumberToObject(j, "train_bytes", (double)ls_corpus_num_bytes(c->corpus, LS_SPLIT_TRAIN));
            if (j && o->loader) cJSON_AddStringToObject(j, "loader", o->loader);
            if (j) cJSON_AddStringToObject(j, "out", o->out);
            if (j && o->resume) cJSON_AddStringToObject(j, "resumed_from", o->resume);
            if (j && o->precision_plan) cJSON_AddStringToObject(j, "precision_plan", o->precision_plan);
            if (j && c->qsync[0]) cJSON_AddStringToObject(j, "precision_ranks", c->qsync);
            rc = write_report(o->report, j);
        }
    }
    int stopped = r.stopped;
    ls_train_run_result_free(&r);
    if (ls_dist_agree(d, rc, NULL) < 0) return collective_fail(d, rc);
    if (stopped) {
        if (rank == 0)
            fprintf(stderr, "llmsys: interrupted: saved step %" PRId64 " to %s; continue with --resume %s\n",
                    ls_trainer_step_index(c->t), o->out, o->out);
        return 130;
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    /* "not given" sentinels: a value the parser can never produce for real input */
    train_opts o = {.config = NULL,
                    .steps = UNSET,
                    .batch = UNSET,
                    .seq = UNSET,
                    .warmup = UNSET,
                    .ranks = 1,
                    .seed = UNSET64,
                    .lr = NAN,
                    .weight_decay = NAN,
                    .grad_clip = NAN,
                    .threads = 0};
    o.data.heldout = 0.05;
    ls_arg spec[] = {
        {"config", LS_ARG_STR, &o.config, "NAME", "model config: tiny or small (default small)"},
        {"data", LS_ARG_STR_LIST, &o.data.paths, "PATH", "text files or directories (recursive)"},
        {"loader", LS_ARG_STR, &o.loader, "URL",
         "fetch each step's batch from `llmsys loader serve` at tcp://host:port instead of --data"},
        {"steps", LS_ARG_INT, &o.steps, "N", "total optimizer steps of the run (the lr schedule length)"},
        {"out", LS_ARG_STR, &o.out, "FILE", "checkpoint to write (.safetensors, atomic)", 1},
        {"resume", LS_ARG_STR, &o.resume, "CKPT", "continue the run saved in CKPT exactly"},
        {"batch", LS_ARG_INT, &o.batch, "B", "global batch: sequences per step over all ranks (default 8)"},
        {"seq", LS_ARG_INT, &o.seq, "T", "tokens per sequence (default: the model's context)"},
        {"lr", LS_ARG_FLOAT, &o.lr, "LR", "peak learning rate (default 1e-3)"},
        {"warmup", LS_ARG_INT, &o.warmup, "N", "linear warmup steps (default steps/10)"},
        {"weight-decay", LS_ARG_FLOAT, &o.weight_decay, "W", "AdamW weight decay on 2-D weights (default 0.1)"},
        {"grad-clip", LS_ARG_FLOAT, &o.grad_clip, "C", "clip the global gradient norm to C (default 1; 0: off)"},
        {"seed", LS_ARG_I64, &o.seed, "S", "seed of model init and data sampling (default 1)"},
        {"ranks", LS_ARG_INT, &o.ranks, "N", "data-parallel ranks: re-launches under mpirun -np N"},
        {"save-every", LS_ARG_INT, &o.save_every, "N", "also checkpoint to --out every N steps"},
        {"stop-at", LS_ARG_INT, &o.stop_at, "STEP", "stop (and save) after STEP steps, as if interrupted"},
        {"log-every", LS_ARG_INT, &o.log_every, "N", "log line every N steps when stderr is not a TTY"},
        {"heldout", LS_ARG_FLOAT, &o.data.heldout, "FRAC", "share of the data held out (default 0.05)"},
        {"max-bytes", LS_ARG_I64, &o.data.max_bytes, "N", "read at most N bytes of text (default 256 MiB)"},
        {"threads", LS_ARG_INT, &o.threads, "N", "threads per rank (default: cores / ranks on this host)"},
        {"report", LS_ARG_STR, &o.report, "FILE", "write a JSON summary (losses, tokens/s, wall time)"},
        {"precision-plan", LS_ARG_STR, &o.precision_plan, "FILE",
         "per-rank Linear-layer precisions and CPU shares from `llmsys plan train`"},
        {"robust-agent", LS_ARG_STR, &o.robust_agent, "EPS",
         "report every step to these node agents (set by `llmsys robust run`)"},
    };
    int n = (int)(sizeof spec / sizeof spec[0]);
    int prc = ls_args_parse("train",
                            "Trains the GPT on text, data-parallel over MPI ranks (mpirun -np N llmsys train ..., or "
                            "--ranks N). Example:\n  llmsys train --config small --data /usr/share/common-licenses "
                            "--steps 200 --out model.safetensors",
                            spec, n, argc, argv, NULL, 0, NULL);
    if (prc) {
        ls_strlist_free(&o.data.paths);
        return LS_ARGS_EXIT(prc);
    }
    int rc = 0;
    ls_model_config mc = {0};
    int given_run_setting = o.config || o.batch != UNSET || o.seq != UNSET || !isnan(o.lr) || o.warmup != UNSET ||
                            o.seed != UNSET64 || !isnan(o.weight_decay) || !isnan(o.grad_clip);
    if (o.data.paths.n == 0 && !o.loader)
        rc = usage_err("train", "missing --data PATH... or --loader URL (see --help)");
    else if (o.data.paths.n > 0 && o.loader)
        rc = usage_err("train", "give --data or --loader, not both");
    else if (!o.resume && o.steps == UNSET)
        rc = usage_err("train", "missing --steps N (see --help)");
    else if (o.steps != UNSET && o.steps < 1)
        rc = usage_err("train", "--steps must be >= 1, got %d", o.steps);
    else if (o.resume && given_run_setting)
        rc = usage_err("train", "--resume continues the saved run: --config, --batch, --seq, --lr, --warmup, "
                                "--seed, --weight-decay and --grad-clip come from the checkpoint");
    else if (!o.resume && ls_model_config_named(o.config ? o.config : "small", &mc) < 0)
        rc = usage_err("train", "%s", ls_errmsg());
    else if (o.batch != UNSET && o.batch < 1)
        rc = usage_err("train", "--batch must be >= 1, got %d", o.batch);
    else if (o.seq != UNSET && (o.seq < 1 || o.seq > mc.n_ctx))
        rc = usage_err("train", "--seq must be in [1, %d] for this config, got %d", mc.n_ctx, o.seq);
    else if (!isnan(o.lr) && !(o.lr > 0 && o.lr < 10))
        rc = usage_err("train", "--lr must be in (0, 10), got %g", o.lr);
    else if (o.warmup != UNSET && o.warmup < 0)
        rc = usage_err("train", "--warmup must be >= 0, got %d", o.warmup);
    else if (!isnan(o.weight_decay) && o.weight_decay < 0)
        rc = usage_err("train", "--weight-decay must be >= 0");
    else if (!isnan(o.grad_clip) && o.grad_clip < 0)
        rc = usage_err("train", "--grad-clip must be >= 0");
    else if (o.seed != UNSET64 && o.seed < 0)
        rc = usage_err("train", "--seed must be >= 0");
    else if (o.ranks < 1 || o.ranks > 1024)
        rc = usage_err("train", "--ranks must be in [1, 1024], got %d", o.ranks);
    else if (!o.resume && (o.batch != UNSET ? o.batch : 8) % o.ranks != 0)
        rc = usage_err("train", "--batch %d does not split evenly over %d ranks", o.batch != UNSET ? o.batch : 8,
                       o.ranks);
    else if (o.save_every < 0 || o.stop_at < 0 || o.log_every < 0 || o.threads < 0)
        rc = usage_err("train", "--save-every, --stop-at, --log-every and --threads must be >= 0");
    else if (o.stop_at > 0 && o.steps != UNSET && o.stop_at > o.steps)
        rc = usage_err("train", "--stop-at %d is beyond --steps %d", o.stop_at, o.steps);
    else if (o.precision_plan &&
             train_precision_plan_check(o.precision_plan, getenv("OMPI_COMM_WORLD_SIZE")
                                                              ? atoi(getenv("OMPI_COMM_WORLD_SIZE"))
                                                              : o.ranks) < 0)
        rc = usage_err("train", "%s", ls_errmsg());
    else
        rc = data_opts_check("train", &o.data);
    if (rc) {
        ls_strlist_free(&o.data.paths);
        return rc;
    }
    if (!o.config) o.config = "small";
    if (o.batch == UNSET) o.batch = 8;
    if (o.seed == UNSET64) o.seed = 1;
    if (o.steps == UNSET) o.steps = 0; /* with --resume: keep the saved schedule */

    /* --ranks N outside mpirun: hand over to mpirun, which starts N copies of us */
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (o.ranks > 1 && !ws) {
        rc = relaunch_under_mpirun(o.ranks, argc, argv);
        ls_strlist_free(&o.data.paths);
        return rc < 0 ? ls_cli_fail() : rc;
    }
    if (ws && o.ranks > 1 && atoi(ws) != o.ranks) {
        ls_strlist_free(&o.data.paths);
        return usage_err("train", "--ranks %d but mpirun started %s ranks", o.ranks, ws);
    }
    train_ctx c = {0};
    if (ls_dist_init(&c.d) < 0) {
        ls_strlist_free(&o.data.paths);
        return ls_cli_fail();
    }
    set_threads(o.threads, c.d);
    struct sigaction sa, old_int, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1); /* a stop request forwarded by mpirun (--ranks) */
    train_stop_signal = 0;
    rc = train_run(&o, &c);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    train_ctx_free(&c);
    ls_dist_free(c.d);
    ls_strlist_free(&o.data.paths);
    return rc;
}

/* ---------------------------------------------------------------- eval */

static int parse_split(const char *s, ls_split *out) {
    if (!strcmp(s, "heldout"))
        *out = LS_SPLIT_HELDOUT;
    else if (!strcmp(s, "train"))
        *out = LS_SPLIT_TRAIN;
    else if (!strcmp(s, "all"))
        *out = LS_SPLIT_ALL;
    else
        return -1;
    return 0;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *report = NULL, *split_name = "heldout";
    int seq = 0, batch = 8, threads = 0;
    int64_t max_tokens = 0;
    data_opts data = {.heldout = 0.05};
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "CKPT", "checkpoint (.safetensors)", 1},
        {"data", LS_ARG_STR_LIST, &data.paths, "PATH", "text files or directories", 1},
        {"split", LS_ARG_STR, &split_name, "S", "heldout (default), train or all"},
        {"seq", LS_ARG_INT, &seq, "T", "window length (default: the model's context)"},
        {"batch", LS_ARG_INT, &batch, "B", "windows per forward pass (default 8)"},
        {"max-tokens", LS_ARG_I64, &max_tokens, "N", "evaluate at most N tokens (default all)"},
        {"heldout", LS_ARG_FLOAT, &data.heldout, "FRAC", "held-out share, as used in training (default 0.05)"},
        {"max-bytes", LS_ARG_I64, &data.max_bytes, "N", "read at most N bytes of text"},
        {"threads", LS_ARG_INT, &threads, "N", "threads (default: all cores)"},
        {"report", LS_ARG_STR, &report, "FILE", "write a JSON summary"},
    };
    int prc = ls_args_parse("eval",
                            "Loss, bits per byte and perplexity of a checkpoint on the held-out part of a corpus "
                            "(the same split training used).",
                            spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (prc) {
        ls_strlist_free(&data.paths);
        return LS_ARGS_EXIT(prc);
    }
    ls_split split = LS_SPLIT_HELDOUT;
    int rc = 0;
    if (parse_split(split_name, &split) < 0)
        rc = usage_err("eval", "--split must be heldout, train or all, got '%s'", split_name);
    else if (seq < 0 || batch < 1 || max_tokens < 0 || threads < 0)
        rc = usage_err("eval", "--seq, --max-tokens and --threads must be >= 0, --batch >= 1");
    else
        rc = data_opts_check("eval", &data);
    if (rc) {
        ls_strlist_free(&data.paths);
        return rc;
    }
    ls_model_set_threads(threads);
    ls_model *m = NULL;
    ls_engine *qe = NULL; /* quantized checkpoints run on the serve engine */
    ls_corpus *c = NULL;
    ls_eval_result r;
    int quantized = ls_ckpt_is_quantized(model);
    rc = quantized == 1  ? ls_engine_open(&qe, model, NULL)
         : quantized < 0 ? quantized
                         : ls_ckpt_load(model, LS_CKPT_WEIGHTS, &m, NULL);
    if (rc == LS_OK) rc = data_load(&data, &c);
    if (rc == LS_OK) {
        size_t n;
        const uint16_t *tok = ls_corpus_tokens(c, split, &n);
        int T = seq > 0 ? seq : (qe ? ls_engine_config(qe) : ls_model_cfg(m))->n_ctx;
        double t0 = ls_now();
        rc = qe ? ls_engine_eval_tokens(qe, tok, n, T, (size_t)max_tokens, &r)
                : ls_eval_tokens(m, tok, n, T, batch, (size_t)max_tokens, &r);
        if (rc < 0) rc = ls_err_wrap(rc, "%s split", split_name);
        if (rc == LS_OK) {
            double el = ls_now() - t0, h = ls_corpus_unigram_entropy(c, split);
            printf("%s on %s split: %zu tokens (%zu bytes)\n", model, split_name, r.tokens, r.bytes);
            printf("  loss        %.4f nats/token\n", r.loss);
            printf("  bits/byte   %.4f   (unigram entropy of this text: %.4f)\n", r.bits_per_byte, h);
            printf("  perplexity  %.3f\n", r.perplexity);
            if (report) {
                cJSON *j = cJSON_CreateObject();
                if (j) {
                    cJSON_AddStringToObject(j, "command", "eval");
                    cJSON_AddStringToObject(j, "model", model);
                    cJSON_AddStringToObject(j, "split", split_name);
                    cJSON_AddNumberToObject(j, "loss", r.loss);
                    cJSON_AddNumberToObject(j, "bits_per_byte", r.bits_per_byte);
                    cJSON_AddNumberToObject(j, "perplexity", r.perplexity);
                    cJSON_AddNumberToObject(j, "unigram_entropy", h);
                    cJSON_AddNumberToObject(j, "tokens", (double)r.tokens);
                    cJSON_AddNumberToObject(j, "bytes", (double)r.bytes);
                    cJSON_AddNumberToObject(j, "wall_s", el);
                }
                rc = write_report(report, j);
            }
        }
    }
    if (m) ls_model_free(m);
    if (qe) ls_engine_free(qe);
    ls_corpus_free(c);
    ls_strlist_free(&data.paths);
    return rc < 0 ? ls_cli_fail() : 0;
}

/* ---------------------------------------------------------------- generate */

/* Writes generated bytes as they are; specials are not text and are dropped. */
static void put_tokens(FILE *f, const int *t, int n) {
    for (int i = 0; i < n; i++)
        if (t[i] >= 0 && t[i] < 256) fputc(t[i], f);
}

/* Samples n_new tokens after prompt (BOS + bytes). When the context fills, generation
 * continues from the last half context, so any length can be produced. *got counts the
 * tokens in out (cap n_new); stops after EOS. */
static int generate_text(ls_model *m, const char *prompt, int n_new, const ls_sample_config *s, ls_rng *rng, int *out,
                         int *got) {
    int ctx = ls_model_cfg(m)->n_ctx;
    size_t plen = strlen(prompt);
    int *win = malloc((size_t)ctx * sizeof(int));
    if (!win) return ls_err(LS_ENOMEM, "out of memory");
    int nw = 0;
    /* keep the end of a prompt longer than the context: it decides the continuation */
    if (plen + 1 < (size_t)ctx) win[nw++] = LS_TOK_BOS;
    size_t from = plen > (size_t)(ctx - 1) ? plen - (size_t)(ctx - 1) : 0;
    for (size_t i = from; i < plen; i++) win[nw++] = (unsigned char)prompt[i];
    *got = 0;
    int rc = LS_OK;
    while (*got < n_new) {
        int room = ctx - nw, want = n_new - *got, k = 0;
        if (want > room) want = room;
        rc = ls_model_generate(m, win, nw, want, s, rng, out + *got, &k);
        if (rc < 0 || k == 0) break;
        *got += k;
        if (out[*got - 1] == LS_TOK_EOS) break;
        /* slide: the last half context of prompt + output becomes the new prompt */
        int keep = ctx / 2 > 0 ? ctx / 2 : 1, total = nw + k;
        int *all = malloc((size_t)total * sizeof(int));
        if (!all) {
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        memcpy(all, win, (size_t)nw * sizeof(int));
        memcpy(all + nw, out + *got - k, (size_t)k * sizeof(int));
        if (keep > total) keep = total;
        memcpy(win, all + total - keep, (size_t)keep * sizeof(int));
        nw = keep;
        free(all);
    }
    free(win);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = "", *report = NULL;
    int tokens = 256, top_k = 0, threads = 0;
    double temperature = 0.8, top_p = 1.0;
    int64_t seed = 1;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "CKPT", "checkpoint (.safetensors)", 1},
        {"prompt", LS_ARG_STR, &prompt, "TEXT", "text to continue (default: start of a document)"},
        {"tokens", LS_ARG_INT, &tokens, "N", "bytes to generate (default 256)"},
        {"temperature", LS_ARG_FLOAT, &temperature, "T", "sampling temperature; 0 = greedy (default 0.8)"},
        {"top-k", LS_ARG_INT, &top_k, "K", "sample among the K most likely bytes (0: off)"},
        {"top-p", LS_ARG_FLOAT, &top_p, "P", "nucleus sampling mass in (0, 1] (1: off)"},
        {"seed", LS_ARG_I64, &seed, "S", "sampling seed (default 1)"},
        {"threads", LS_ARG_INT, &threads, "N", "threads (default: all cores)"},
        {"report", LS_ARG_STR, &report, "FILE", "write a JSON summary (text, tokens/s)"},
    };
    int prc = ls_args_parse("generate", "Samples text from a checkpoint: the prompt, then its continuation.", spec,
                            (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (prc) return LS_ARGS_EXIT(prc);
    if (tokens < 1 || tokens > 1000000)
        return usage_err("generate", "--tokens must be in [1, 1000000], got %d", tokens);
    if (!(temperature >= 0 && temperature <= 100)) return usage_err("generate", "--temperature must be in [0, 100]");
    if (top_k < 0) return usage_err("generate", "--top-k must be >= 0");
    if (!(top_p > 0 && top_p <= 1)) return usage_err("generate", "--top-p must be in (0, 1]");
    if (seed < 0 || threads < 0) return usage_err("generate", "--seed and --threads must be >= 0");
    ls_model_set_threads(threads);
    ls_model *m;
    if (ls_ckpt_load(model, LS_CKPT_WEIGHTS, &m, NULL) < 0) return ls_cli_fail();
    int *out = malloc((size_t)tokens * sizeof(int)), got = 0;
    if (!out) {
        ls_model_free(m);
        ls_err(LS_ENOMEM, "out of memory");
        return ls_cli_fail();
    }
    ls_sample_config s = {(float)temperature, top_k, (float)top_p};
    ls_rng rng;
    ls_rng_seed(&rng, (uint64_t)seed);
    double t0 = ls_now();
    int rc = generate_text(m, prompt, tokens, &s, &rng, out, &got);
    double el = ls_now() - t0;
    if (rc == LS_OK) {
        fputs(prompt, stdout);
        put_tokens(stdout, out, got);
        fputc('\n', stdout);
        fflush(stdout);
        if (report) {
            char *text = malloc((size_t)got + 1);
            int nt = 0;
            for (int i = 0; text && i < got; i++)
                if (out[i] < 256) text[nt++] = (char)out[i];
            if (text) text[nt] = '\0';
            cJSON *j = cJSON_CreateObject();
            if (j && text) {
                cJSON_AddStringToObject(j, "command", "generate");
                cJSON_AddStringToObject(j, "model", model);
                cJSON_AddStringToObject(j, "prompt", prompt);
                cJSON_AddStringToObject(j, "text", text);
                cJSON_AddNumberToObject(j, "tokens", got);
                cJSON_AddNumberToObject(j, "tokens_per_s", el > 0 ? got / el : 0);
            }
            free(text);
            rc = write_report(report, j);
        }
    }
    free(out);
    ls_model_free(m);
    return rc < 0 ? ls_cli_fail() : 0;
}

/* ---------------------------------------------------------------- demo core */

/* Text every Debian 12 machine with the setup.sh packages has: license texts and the C
 * library headers. Paths that do not exist are skipped. */
static int demo_collect(char ***paths, int *n, size_t budget) {
    static const char *const dirs[] = {"/usr/share/common-licenses", "/usr/include"};
    *paths = NULL;
    *n = 0;
    int cap = 0;
    size_t total = 0;
    for (int k = 0; k < 2 && total < budget; k++) {
        DIR *d = opendir(dirs[k]);
        if (!d) continue;
        char **names = NULL;
        int nn = 0, nc = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (e->d_name[0] == '.') continue;
            if (k == 1 && (l < 3 || strcmp(e->d_name + l - 2, ".h") != 0)) continue;
            if (nn == nc) {
                nc = nc ? 2 * nc : 64;
                char **t = realloc(names, (size_t)nc * sizeof *t);
                if (!t) break;
                names = t;
            }
            if (!(names[nn] = strdup(e->d_name))) break;
            nn++;
        }
        closedir(d);
        for (int i = 0; i < nn; i++)
            for (int j = i + 1; j < nn; j++)
                if (strcmp(names[i], names[j]) > 0) {
                    char *t = names[i];
                    names[i] = names[j];
                    names[j] = t;
                }
        for (int i = 0; i < nn; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dirs[k], names[i]);
            struct stat st;
            /* regular files only, no symlinks: GPL -> GPL-3 would put one text in both splits */
            if (total < budget && lstat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && access(p, R_OK) == 0) {
                if (*n == cap) {
                    cap = cap ? 2 * cap : 64;
                    char **t = realloc(*paths, (size_t)cap * sizeof *t);
                    if (!t) break;
                    *paths = t;
                }
                if (!((*paths)[*n] = strdup(p))) break;
                (*n)++;
                total += (size_t)st.st_size;
            }
            free(names[i]);
        }
        free(names);
    }
    return (int)(total > budget ? budget : total);
}

/* Fallback corpus: generated arithmetic, "17 + 25 = 42." lines. */
static int demo_generate_text(const char *path, size_t bytes) {
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, path));
    ls_rng r;
    ls_rng_seed(&r, 7);
    size_t n = 0;
    while (n < bytes) {
        int a = (int)ls_rng_below(&r, 100), b = (int)ls_rng_below(&r, 100), op = (int)ls_rng_below(&r, 3);
        int c = op == 0 ? a + b : op == 1 ? a - b : a * b;
        int w = fprintf(af.fp, "%d %c %d = %d.\n", a, "+-*"[op], b, c);
        if (w < 0) {
            ls_atomic_abort(&af);
            return ls_err(LS_EIO, "%s: write failed", path);
        }
        n += (size_t)w;
    }
    return ls_atomic_commit(&af);
}

/* Prints text with control bytes shown as spaces, so a sample cannot mess up the terminal. */
static void print_sample(const char *prefix, const int *t, int n) {
    printf("%s", prefix);
    for (int i = 0; i < n; i++) {
        int c = t[i];
        if (c == '\n')
            printf("\n%s", prefix);
        else if (c >= 32 && c < 127)
            putchar(c);
        else if (c >= 128 && c < 256)
            putchar(c); /* UTF-8 continuation of a character */
        else if (c < 256)
            putchar(' ');
    }
    putchar('\n');
}

/* The core demo's training: a time budget turned into a schedule length from the measured
 * step time, first after a few steps (the first ones pay for allocation), then refined once
 * at a quarter of the budget; log lines every eighth of the run. */
typedef struct {
    double budget_s, t0, t_warm, tokens;
    int calib, steps, max_points, refined, next_log;
    ls_progress pb;
} core_run;

static int core_step(void *ctx, ls_trainer *t, const ls_train_step_info *in) {
    core_run *c = ctx;
    int s = (int)in->step - 1;
    float loss = in->loss;
    double el = ls_now() - c->t0;
    if (s + 1 == 2) c->t_warm = el;
    if (s + 1 == c->calib || (!c->refined && s + 1 > c->calib && el > c->budget_s / 4)) {
        double per = (el - c->t_warm) / (s + 1 - 2);
        int want = (int)((c->budget_s - c->t_warm) / per) + 2;
        if (want < s + 4) want = s + 4;
        if (want > c->max_points) want = c->max_points;
        if (s + 1 > c->calib) c->refined = 1;
        if (want != c->steps) {
            c->steps = want;
            LS_TRY(ls_trainer_set_steps(t, c->steps));
            c->pb.total = c->steps;
            if (c->pb.enabled) fputs("\r\033[K", stderr);
            printf("%s: %.3f s/step -> %d steps\n", c->refined ? "re-calibrated" : "calibrated", per, c->steps);
            fflush(stdout);
        }
        if (!c->refined) c->next_log = s + 1 + (c->steps / 8 > 0 ? c->steps / 8 : 1);
    }
    double tps = (double)(s + 1) * c->tokens / (el > 0 ? el : 1e-9);
    ls_progress_update(&c->pb, s + 1, "loss %.4f  %.0f tok/s", loss, tps);
    if ((c->next_log > 0 && s + 1 >= c->next_log) || s + 1 == c->steps) {
        if (c->pb.enabled) fputs("\r\033[K", stderr);
        printf("  step %5d/%d  loss %.4f  (%.2f bits/byte)  %6.0f tok/s  %5.1f s\n", s + 1, c->steps, loss,
               loss / log(2.0), tps, el);
        fflush(stdout);
        c->next_log = s + 1 + (c->steps / 8 > 0 ? c->steps / 8 : 1);
    }
    return 0;
}

int demo_core(const ls_demo_ctx *ctx) {
    int quick = ctx->quick;
    char dir[4096], ckpt[4200], gen[4200];
    snprintf(dir, sizeof dir, "%s/core", ctx->workdir);
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
    snprintf(gen, sizeof gen, "%s/generated.txt", dir);
    if (ls_mkdirs(dir) < 0) return ls_cli_fail();

    /* 1. corpus: what the machine has, else generated text */
    size_t budget = quick ? (size_t)300 << 10 : (size_t)3 << 20;
    char **paths = NULL;
    int np = 0;
    int have = demo_collect(&paths, &np, budget);
    if ((size_t)have < ((size_t)100 << 10)) {
        printf("little local text found (%d bytes): adding generated arithmetic\n", have);
        int rc = demo_generate_text(gen, budget - (size_t)have);
        char **t = realloc(paths, (size_t)(np + 1) * sizeof *t);
        if (rc < 0 || !t) {
            for (int i = 0; i < np; i++) free(paths[i]);
            free(t ? t : paths);
            return ls_cli_fail();
        }
        paths = t;
        paths[np++] = strdup(gen);
    }
    ls_corpus *c = NULL;
    ls_corpus_opts co = ls_corpus_defaults();
    co.max_bytes = budget;
    int rc = ls_corpus_load(&c, (const char *const *)paths, np, &co);
    for (int i = 0; i < np; i++) free(paths[i]);
    free(paths);
    if (rc < 0) return ls_cli_fail();
    double h_held = ls_corpus_unigram_entropy(c, LS_SPLIT_HELDOUT);
    printf("corpus: %d documents (license texts, C headers), %zu train / %zu held-out bytes, held-out unigram entropy "
           "%.3f "
           "bits/byte\n",
           ls_corpus_num_docs(c), ls_corpus_num_bytes(c, LS_SPLIT_TRAIN), ls_corpus_num_bytes(c, LS_SPLIT_HELDOUT),
           h_held);

    /* 2. train for a time budget: time the first steps, then fix the cosine schedule */
    ls_model_config mc;
    ls_model_config_named(quick ? "tiny" : "small", &mc);
    ls_train_config tc = ls_train_defaults();
    tc.batch = 8;
    tc.seq = mc.n_ctx;
    tc.steps = 1000000;
    tc.seed = 1;
    tc.opt.lr = quick ? 3e-3f : 2e-3f;
    tc.opt.warmup_steps = quick ? 5 : 20;
    tc.opt.min_lr_frac = 0.1f;
    double budget_s = quick ? 4.0 : 110.0;
    ls_model_set_threads(0);
    ls_trainer *t = NULL;
    ls_batch_source *src = NULL;
    rc = ls_trainer_init(&t, &mc, &tc, NULL);
    if (rc == LS_OK) rc = ls_batch_source_corpus(&src, c, &tc, 1);
    if (rc < 0) goto fail;
    printf("model: %s config, %zu parameters; global batch %d x %d tokens; %.0f s budget\n", quick ? "tiny" : "small",
           ls_model_num_params(ls_trainer_model(t)), tc.batch, tc.seq, budget_s);
    fflush(stdout);
    /* The schedule length comes from the measured step time (core_step). */
    core_run cr = {
        .budget_s = budget_s, .calib = 6, .steps = 1000000, .max_points = 1 << 20, .tokens = (double)tc.batch * tc.seq};
    ls_progress_start(&cr.pb, "core", 0);
    ls_train_hooks hk = {.ctx = &cr, .after_step = core_step};
    ls_trainer_set_hooks(t, &hk);
    ls_train_run_opts ro = {.quiet = 1};
    ls_train_run_result res;
    cr.t0 = ls_now();
    rc = ls_train_run(t, src, NULL, &ro, &res);
    ls_progress_end(&cr.pb);
    double train_s = ls_now() - cr.t0;
    if (rc < 0) goto fail;
    float *losses = res.losses;
    int nl = res.n_losses;
    /* 3. save, reload (what later scenarios and `llmsys eval` see), evaluate, sample */
    char *tj = ls_train_config_to_json(ls_trainer_config(t));
    rc = ls_ckpt_save(ckpt, ls_trainer_model(t), ls_trainer_step_index(t), tj, LS_CKPT_WEIGHTS);
    free(tj);
    ls_model *m = NULL;
    ls_eval_result ev;
    if (rc == LS_OK) rc = ls_ckpt_load(ckpt, LS_CKPT_WEIGHTS, &m, NULL);
    if (rc == LS_OK) {
        size_t n;
        const uint16_t *ho = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
        rc = ls_eval_tokens(m, ho, n, mc.n_ctx, 8, quick ? 8192 : 32768, &ev);
    }
    int out[400], got = 0;
    const char *prompt = "This program is free software";
    if (rc == LS_OK) {
        ls_sample_config sc = {0.7f, 40, 0.95f};
        ls_rng rng;
        ls_rng_seed(&rng, 1);
        rc = generate_text(m, prompt, quick ? 80 : 300, &sc, &rng, out, &got);
    }
    if (rc < 0) {
        if (m) ls_model_free(m);
        ls_train_run_result_free(&res);
        goto fail;
    }
    struct stat st;
    double mib = stat(ckpt, &st) == 0 ? (double)st.st_size / 1048576.0 : 0;
    int avg = nl >= 10 ? 10 : nl;
    double first = 0, last = 0;
    for (int i = 0; i < avg; i++) {
        first += losses[i] / avg;
        last += losses[nl - 1 - i] / avg;
    }
    int below = ev.bits_per_byte < h_held;
    printf("\n  %-34s %s\n", "checkpoint", ckpt);
    printf("  %-34s %.1f MiB (weights, config, xxh3 checksum)\n", "checkpoint size", mib);
    printf("  %-34s %d in %.1f s, %.0f tokens/s\n", "steps", nl, train_s, (double)nl * tc.batch * tc.seq / train_s);
    printf("  %-34s %.3f -> %.3f (mean of first/last %d steps)\n", "train loss (nats/token)", first, last, avg);
    printf("  %-34s %.3f bits/byte over %zu bytes\n", "held-out", ev.bits_per_byte, ev.bytes);
    printf("  %-34s %.3f bits/byte -> %s\n", "held-out unigram entropy", h_held,
           below ? "below it: the model uses context" : "model is NOT below it");
    printf("  %-34s %.3f\n", "held-out perplexity (per token)", ev.perplexity);
    printf("\nsample (temperature 0.7, top-k 40, top-p 0.95):\n");
    int pt[256], npt = 0;
    for (const char *p = prompt; *p && npt < 256; p++) pt[npt++] = (unsigned char)*p;
    int all[700], na = 0;
    for (int i = 0; i < npt; i++) all[na++] = pt[i];
    for (int i = 0; i < got; i++) all[na++] = out[i];
    print_sample("  | ", all, na);
    ls_model_free(m);
    ls_train_run_result_free(&res);
    ls_batch_source_free(src);
    ls_trainer_free(t);
    ls_corpus_free(c);
    /* the tiny quick run is only a smoke test; the full run must show the model learned */
    return below || quick ? 0 : 1;
fail:
    ls_batch_source_free(src);
    ls_trainer_free(t);
    ls_corpus_free(c);
    return ls_cli_fail();
}
