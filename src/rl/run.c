/* run.c - `llmsys rl run`: writes the run config, starts the manager, relays, rollouts and
 * trainer as separate processes (fork + exec of the llmsys binary), injects the requested
 * faults, restarts a killed rollout, and stops everything when the trainer is done. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/safetensors.h"
#include "llmsys/train.h"
#include "llmsys/zsec.h"
#include "rl/internal.h"

static const char *const MODE_NAMES[LS_RL_MODE_COUNT] = {"laminar", "sync", "onestep", "areal"};

int ls_rl_mode_parse(const char *name, int *mode) {
    int i = rl_name_index(MODE_NAMES, LS_RL_MODE_COUNT, name);
    if (i >= 0) return *mode = i, LS_OK;
    return ls_err(LS_EINVAL, "unknown mode '%s' (known: laminar, sync, onestep, areal)", name ? name : "(null)");
}

const char *ls_rl_mode_name(int mode) { return mode >= 0 && mode < LS_RL_MODE_COUNT ? MODE_NAMES[mode] : "?"; }

ls_rl_run_opts ls_rl_run_defaults(void) {
    ls_rl_run_opts o;
    memset(&o, 0, sizeof o);
    o.mode = LS_RL_MODE_LAMINAR;
    o.workdir = "rl-out";
    o.rollouts = 3;
    o.relays = 2;
    o.updates = 20;
    o.group = 8; /* 8 prompts x 8 samples an update, 16 slots: enough to learn in a couple of minutes */
    o.batch_groups = 8;
    o.max_seqs = 16;
    o.max_new = 96;
    o.lr = 3e-4, o.clip_eps = 0.2, o.is_cap = 5.0;
    o.staleness = 2, o.repack = 1; /* areal's bound, laminar's repack */
    o.step_ms = 0;
    o.eval_n = 64;
    o.seed = 1;
    o.timeout_s = 600;
    o.sft_steps = -1, o.sft_batch = 16, o.sft_lr = 3e-3; /* the warm start */
    return o;
}

void ls_rl_inputs_free(ls_rl_inputs *in) {
    if (!in) return;
    ls_rl_tasks_free(in->tasks, in->n_tasks);
    ls_rl_tasks_free(in->heldout, in->n_heldout);
    free(in);
}

/* The model of the checkpoint at path, from its header. */
static int ckpt_model(const char *path, ls_model_config *mc) {
    ls_st_file *f;
    LS_TRY(ls_ckpt_open(path, &f, mc));
    ls_st_close(f);
    return rl_model_check(mc, path);
}

static int worker_check(const ls_rl_worker_opts *o, ls_rl_inputs *in) {
    static const char *const roles[] = {"manager", "trainer", "rollout", "relay"};
    if (!o->role) return ls_err(LS_EINVAL, "worker: --role is required (manager, trainer, rollout, relay)");
    int known = 0;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) known |= !strcmp(o->role, roles[i]);
    if (!known) return ls_err(LS_EINVAL, "worker: unknown role '%s' (manager, trainer, rollout, relay)", o->role);
    /* the endpoints it binds and connects to, as the run would refuse them (syntax, CURVE keys) */
    int relay = !strcmp(o->role, "relay"), manager = !strcmp(o->role, "manager");
    if ((relay || manager) && o->bind) LS_TRY(ls_zsec_check(o->bind, 1, relay ? "rl relay" : "rl manager"));
    if (!manager && !o->manager) return ls_err(LS_EINVAL, "worker: --manager tcp://HOST:PORT is required");
    if (!manager) return ls_zsec_check(o->manager, 0, "rl manager link");
    if (!o->config) return ls_err(LS_EINVAL, "manager: --config is required");
    /* the config and the task file it names, read once: the manager runs on these */
    char *cj = NULL;
    size_t cn;
    int rc = ls_file_read(o->config, &cj, &cn);
    if (rc == LS_OK && (rc = rl_config_from_json(cj, cn, &in->cfg)) != LS_OK) ls_err_wrap(rc, "%s", o->config);
    free(cj);
    /* a config without "model" (written by hand): the manager's host reads it off init */
    if (rc == LS_OK && in->cfg.model.vocab == 0 && (rc = ckpt_model(in->cfg.init, &in->cfg.model)) != LS_OK)
        ls_err_wrap(rc, "%s has no \"model\", and its init", o->config);
    return rc == LS_OK ? ls_rl_tasks_read(in->cfg.tasks, &in->tasks, &in->n_tasks) : rc;
}

int ls_rl_worker_check(const ls_rl_worker_opts *o, ls_rl_inputs **in) {
    *in = calloc(1, sizeof **in);
    if (!*in) return ls_err(LS_ENOMEM, "out of memory");
    int rc = worker_check(o, *in);
    if (rc != LS_OK) ls_rl_inputs_free(*in), *in = NULL;
    return rc;
}

int ls_rl_worker(const ls_rl_worker_opts *o, const ls_rl_inputs *in) {
    ls_rl_inputs *own = NULL;
    if (!in) LS_TRY(ls_rl_worker_check(o, &own));
    if (!in) in = own;
    int rc = !strcmp(o->role, "manager")   ? rl_manager_main(o, in)
             : !strcmp(o->role, "trainer") ? rl_trainer_main(o)
             : !strcmp(o->role, "rollout") ? rl_rollout_main(o)
                                           : rl_relay_main(o);
    ls_rl_inputs_free(own);
    return rc;
}

/* ---------------------------------------------------------------- processes */

typedef struct {
    pid_t pid;
    char role[16];
    int id;
    char log[1200];
    char joined[1200]; /* the file the worker writes once the manager has answered its hello */
    double joined_at;  /* run time it was first seen; -1 until then */
} child;

static pid_t spawn(const ls_rl_run_opts *o, child *c, const char *manager, const char *cfg_path,
                   const char *port_file) {
    const char *role = c->role;
    char ids[16];
    snprintf(ids, sizeof ids, "%d", c->id);
    const char *mgr[] = {o->exe, "rl", "worker", "--role", role, "--config", cfg_path, "--port-file", port_file, NULL};
    const char *wrk[] = {o->exe, "rl", "worker", "--role", role, "--id", ids, "--manager", manager, NULL};
    const char *env[] = {"OMP_NUM_THREADS", "1", "OPENBLAS_NUM_THREADS", "1", "LLMSYS_RL_JOINED", c->joined, NULL};
    ls_spawn_opts so = {.log = c->log, .log_append = 1, .env = env};
    unlink(c->joined);
    c->joined_at = -1;
    pid_t pid;
    return ls_spawn_self(o->exe, strcmp(role, "manager") ? wrk : mgr, &so, &pid) == LS_OK ? pid : -1;
}

/* Run time since worker c joined the manager (the fault timers count from there, so a worker
 * is never killed before the manager knows it); -1 while it has not. */
static double since_join(child *c, double now) {
    if (c->joined_at < 0 && c->pid > 0 && ls_is_file(c->joined)) c->joined_at = now;
    return c->joined_at < 0 ? -1 : now - c->joined_at;
}

/* SIGKILLs worker c (fault injection) and reaps it. */
static void kill_worker(child *c, double now, int quiet) {
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = 0;
    if (!quiet)
        fprintf(stderr, "rl run: killed %s %d at %.1f s (%.1f s after it joined)\n", c->role, c->id, now,
                now - c->joined_at);
}

static void last_line(const char *path, char *out, size_t cap) {
    out[0] = 0;
    char *d;
    size_t n;
    if (ls_file_read(path, &d, &n) != LS_OK) return;
    while (n > 0 && (d[n - 1] == '\n' || d[n - 1] == '\r')) d[--n] = 0;
    char *s = strrchr(d, '\n');
    snprintf(out, cap, "%s", s ? s + 1 : d);
    free(d);
}

static void stop_all(child *c, int n) {
    for (int i = 0; i < n; i++)
        if (c[i].pid > 0) kill(c[i].pid, SIGTERM);
    double t0 = ls_now();
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            if (c[i].pid <= 0) continue;
            if (waitpid(c[i].pid, NULL, WNOHANG) == c[i].pid)
                c[i].pid = 0;
            else
                left++;
        }
        if (!left) break;
        if (ls_now() - t0 > 2.0) {
            for (int i = 0; i < n; i++)
                if (c[i].pid > 0) kill(c[i].pid, SIGKILL), waitpid(c[i].pid, NULL, 0), c[i].pid = 0;
            break;
        }
        ls_sleep_ms(20);
    }
}

/* o's values and where its outputs go (no file is read) */
static int run_values(const ls_rl_run_opts *o) {
    if (!o->exe || !o->tasks || !o->workdir)
        return ls_err(LS_EINVAL, "rl run: needs the llmsys binary, a task file and a work directory");
    if (o->init && o->sft_steps > 0)
        return ls_err(LS_EINVAL, "rl run: --sft-steps applies to a fresh model; drop it or --init");
    if (o->rollouts < 1 || o->rollouts > 32 || o->relays < 1 || o->relays > 16)
        return ls_err(LS_EINVAL, "rl run: need 1..32 rollouts and 1..16 relays");
    if (o->group < 1 || o->group > 64 || o->max_seqs < o->group || o->batch_groups < 1 || o->updates < 1)
        return ls_err(LS_EINVAL, "rl run: need 1 <= group <= max_seqs, batch_groups >= 1, updates >= 1");
    if (o->max_new < 1) return ls_err(LS_EINVAL, "rl run: --max-new must be >= 1");
    if (o->sft_batch < 1 || o->sft_batch > LS_RL_SFT_MAX_BATCH)
        return ls_err(LS_EINVAL, "rl run: --sft-batch must be in [1, %d], got %d", LS_RL_SFT_MAX_BATCH, o->sft_batch);
    if (o->max_seqs > 1024 || o->batch_groups > 1024 || o->updates > 1000000) /* (updates + 2) x batch fits an int */
        return ls_err(LS_EINVAL, "rl run: --max-seqs and --batch-groups must be at most 1024, --updates 10^6");
    if (o->rollout_batch < 0 || o->rollout_batch > 64 * o->max_seqs)
        return ls_err(LS_EINVAL, "rl run: --rollout-batch must be in [0, 64 x max_seqs], got %d", o->rollout_batch);
    if (!(o->lr > 0 && o->lr < 10) || !(o->sft_lr > 0 && o->sft_lr < 10) || !(o->clip_eps > 0 && o->clip_eps <= 1) ||
        !(o->is_cap >= 0))
        return ls_err(LS_EINVAL, "rl run: --lr and --sft-lr must be in (0, 10), --clip in (0, 1], --is-cap >= 0");
    if (o->staleness < 0 || o->eval_n < 0 || o->sft_steps < -1) /* sft_steps -1: the default */
        return ls_err(LS_EINVAL, "rl run: --staleness, --eval-n and --sft-steps must be >= 0");
    if (!(o->step_ms >= 0 && o->step_ms <= 3.6e6) || !(o->train_ms >= 0 && o->train_ms <= 3.6e6)) /* slept as int ms */
        return ls_err(LS_EINVAL, "rl run: --step-ms and --train-ms must be in [0, 3600000]");
    if (!(o->timeout_s >= 0) || !(o->kill_rollout_s >= 0) || !(o->kill_relay_s >= 0) || !(o->restart_s >= 0))
        return ls_err(LS_EINVAL,
                      "rl run: --timeout, --kill-rollout-at, --kill-relay-at and --restart-after must be >= 0");
    /* the report is found writable before the run, and never in place of an input (a run used
     * to remove an earlier report at its start: with --report naming the task file, that file) */
    if (ls_path_replaces(o->tasks, o->report) || ls_path_replaces(o->heldout, o->report) ||
        ls_path_replaces(o->init, o->report))
        return ls_err(LS_EINVAL, "rl run: --report %s would replace an input (--tasks, --heldout or --init)",
                      o->report);
    /* nor do the run's copies of --tasks and --heldout (rewritten from what was read, they would
     * lose what the reader ignores) */
    const char *in[3][2] = {{"tasks", o->tasks}, {"heldout", o->heldout}, {"init", o->init}};
    for (int k = 0; k < 2; k++) {
        char copy[1100];
        snprintf(copy, sizeof copy, "%s/%s.jsonl", o->workdir, k ? "heldout" : "tasks");
        for (int i = 0; i < 3; i++)
            if (ls_path_replaces(in[i][1], copy))
                return ls_err(LS_EINVAL,
                              "rl run: --%s %s is where the run keeps its copy of --%s; choose another "
                              "--workdir or move the file",
                              in[i][0], in[i][1], k ? "heldout" : "tasks");
    }
    return LS_OK;
}

/* The inputs, read once here (a bad one is the command line's: LS_ENOTFOUND, LS_EFORMAT, ...);
 * the warm start and the run's copies for its workers are made from what was read. */
static int run_inputs(const ls_rl_run_opts *o, ls_rl_inputs *in) {
    LS_TRY(ls_rl_tasks_read(o->tasks, &in->tasks, &in->n_tasks));
    if (o->heldout) LS_TRY(ls_rl_tasks_read(o->heldout, &in->heldout, &in->n_heldout));
    if (o->init) LS_TRY(ckpt_model(o->init, &in->cfg.model));
    return LS_OK;
}

int ls_rl_run_check(const ls_rl_run_opts *o, ls_rl_inputs **in) {
    *in = NULL;
    LS_TRY(run_values(o));
    if (!(*in = calloc(1, sizeof **in))) return ls_err(LS_ENOMEM, "out of memory");
    int rc = run_inputs(o, *in);
    if (rc != LS_OK) ls_rl_inputs_free(*in), *in = NULL;
    return rc;
}

static int run(const ls_rl_run_opts *o, const ls_rl_inputs *in) {
    if (o->report) LS_TRY(ls_out_path_check("report", o->report));
    LS_TRY(ls_mkdirs(o->workdir));
    char init[1200];
    if (!o->init)
        LS_TRY(ls_rl_warm_start(in->tasks, in->n_tasks, o->heldout ? 0 : o->eval_n, o->workdir,
                                o->sft_steps < 0 ? 1500 : o->sft_steps, o->sft_batch, o->sft_lr, o->seed, init,
                                sizeof init, o->quiet));
    if (!o->quiet) {
        printf("rl run: %s, %d rollouts, %d relays, %d updates of %d groups x %d\n", ls_rl_mode_name(o->mode),
               o->rollouts, o->relays, o->updates, o->batch_groups, o->group);
        fflush(stdout);
    }
    rl_config c;
    memset(&c, 0, sizeof c);
    c.mode = o->mode;
    /* the workers read the run's copies of the tasks it read, never the files again */
    char *rp = realpath(o->workdir, NULL);
    if (!rp) return ls_err(LS_EIO, "%s: %s", o->workdir, strerror(errno));
    snprintf(c.tasks, sizeof c.tasks, "%s/tasks.jsonl", rp);
    if (in->heldout) snprintf(c.heldout, sizeof c.heldout, "%s/heldout.jsonl", rp);
    free(rp);
    LS_TRY(ls_rl_tasks_write(c.tasks, in->tasks, in->n_tasks));
    if (in->heldout) LS_TRY(ls_rl_tasks_write(c.heldout, in->heldout, in->n_heldout));
    rp = realpath(o->init ? o->init : init, NULL);
    if (!rp) return ls_err(LS_ENOTFOUND, "%s: %s", o->init ? o->init : init, strerror(errno));
    snprintf(c.init, sizeof c.init, "%s", rp);
    free(rp);
    c.model = o->init ? in->cfg.model : ls_rl_model_config(); /* the warm start's model */
    snprintf(c.workdir, sizeof c.workdir, "%s", o->workdir);
    if (o->report)
        snprintf(c.report, sizeof c.report, "%s", o->report);
    else
        snprintf(c.report, sizeof c.report, "%s/report.json", o->workdir);
    c.rollouts = o->rollouts, c.relays = o->relays, c.updates = o->updates, c.group = o->group;
    c.batch_groups = o->batch_groups, c.max_seqs = o->max_seqs, c.max_new = o->max_new, c.staleness = o->staleness;
    c.repack = o->repack, c.eval_n = o->eval_n, c.ppo_epochs = 2;
    /* whole groups, at least the decode slots' worth */
    int rb = o->rollout_batch > 0 ? o->rollout_batch : o->max_seqs;
    c.rollout_batch = (rb < o->max_seqs ? o->max_seqs : rb) / o->group * o->group;
    c.lr = o->lr, c.clip_eps = o->clip_eps, c.is_cap = o->is_cap, c.step_ms = o->step_ms, c.train_ms = o->train_ms;
    c.hb_timeout_s = 1.5, c.seed = o->seed;
    char cfg_path[1100], port_file[1100], logdir[1100];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", o->workdir);
    snprintf(port_file, sizeof port_file, "%s/manager.endpoint", o->workdir);
    snprintf(logdir, sizeof logdir, "%s/logs", o->workdir);
    LS_TRY(ls_mkdirs(logdir));
    unlink(port_file);
    /* The manager writes the report atomically (a new file renamed over the name), so a new
     * report is a new inode: an older one stays in place until then, also when this run fails. */
    struct stat old_report;
    int had_report = stat(c.report, &old_report) == 0;
    char *js = rl_config_to_json(&c);
    if (!js) return ls_err(LS_ENOMEM, "rl run: out of memory");
    int rc = ls_file_write_atomic(cfg_path, js, strlen(js));
    free(js);
    LS_TRY(rc);

    int nc = 2 + o->relays + o->rollouts;
    child *ch = calloc((size_t)nc, sizeof *ch);
    if (!ch) return ls_err(LS_ENOMEM, "rl run: out of memory");
    int k = 0;
#define START(R, I, MGR)                                                                                               \
    do {                                                                                                               \
        snprintf(ch[k].role, sizeof ch[k].role, "%s", R);                                                              \
        ch[k].id = I;                                                                                                  \
        snprintf(ch[k].log, sizeof ch[k].log, "%s/%s-%d.log", logdir, R, I);                                           \
        snprintf(ch[k].joined, sizeof ch[k].joined, "%s/%s-%d.joined", logdir, R, I);                                  \
        ch[k].pid = spawn(o, &ch[k], MGR, cfg_path, port_file);                                                        \
        if (ch[k].pid < 0) rc = ls_err(LS_EIO, "rl run: cannot start %s %d: %s", R, I, strerror(errno));               \
        k++;                                                                                                           \
    } while (0)
    START("manager", 0, NULL);
    char mep[256] = "";
    double t0 = ls_now();
    while (rc == LS_OK && !ls_is_file(port_file)) {
        if (waitpid(ch[0].pid, NULL, WNOHANG) == ch[0].pid) {
            char l[512];
            ch[0].pid = 0;
            last_line(ch[0].log, l, sizeof l);
            rc = ls_err(LS_EPEER, "rl run: the manager failed to start: %s", l);
        } else if (ls_now() - t0 > 20) {
            rc = ls_err(LS_ETIMEDOUT, "rl run: the manager did not start within 20 s");
        }
        ls_sleep_ms(20);
    }
    if (rc == LS_OK) {
        char *d;
        size_t n;
        rc = ls_file_read(port_file, &d, &n);
        if (rc == LS_OK) snprintf(mep, sizeof mep, "%s", d), free(d);
    }
    for (int i = 0; rc == LS_OK && i < o->relays; i++) START("relay", i, mep);
    for (int i = 0; rc == LS_OK && i < o->rollouts; i++) START("rollout", i, mep);
    if (rc == LS_OK) START("trainer", 0, mep);
    int trainer = k - 1, killed_roll = 0, killed_relay = 0;
    double killed_at = 0;
    t0 = ls_now();
    while (rc == LS_OK) {
        double now = ls_now() - t0;
        for (int i = 0; i < k; i++) {
            int st;
            if (ch[i].pid <= 0 || waitpid(ch[i].pid, &st, WNOHANG) != ch[i].pid) continue;
            ch[i].pid = 0;
            int bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
            char l[512];
            last_line(ch[i].log, l, sizeof l);
            if (i == 0) {
                if (bad) rc = ls_err(LS_EPEER, "rl run: the manager failed: %s", l);
                goto finished;
            }
            if (i == trainer && bad)
                rc = ls_err(LS_EPEER, "rl run: the trainer failed: %s", l);
            else if (bad && !o->quiet && !(killed_roll && !strcmp(ch[i].role, "rollout") && ch[i].id == 0) &&
                     !(killed_relay && !strcmp(ch[i].role, "relay") && ch[i].id == 1))
                fprintf(stderr, "rl run: %s %d exited: %s\n", ch[i].role, ch[i].id, l);
        }
        if (o->kill_rollout_s > 0 && !killed_roll) {
            for (int i = 0; i < k; i++)
                if (!strcmp(ch[i].role, "rollout") && ch[i].id == 0 && ch[i].pid > 0 &&
                    since_join(&ch[i], now) >= o->kill_rollout_s) {
                    kill_worker(&ch[i], now, o->quiet);
                    killed_roll = 1;
                    killed_at = now;
                }
        }
        if (killed_roll == 1 && o->restart_s > 0 && now >= killed_at + o->restart_s) {
            for (int i = 0; i < k; i++)
                if (!strcmp(ch[i].role, "rollout") && ch[i].id == 0) {
                    ch[i].pid = spawn(o, &ch[i], mep, cfg_path, port_file);
                    if (!o->quiet) fprintf(stderr, "rl run: restarted rollout 0 at %.1f s\n", now);
                }
            killed_roll = 2;
        }
        if (o->kill_relay_s > 0 && !killed_relay) {
            for (int i = 0; i < k; i++)
                if (!strcmp(ch[i].role, "relay") && ch[i].id == (o->relays > 1 ? 1 : 0) && ch[i].pid > 0 &&
                    since_join(&ch[i], now) >= o->kill_relay_s) {
                    kill_worker(&ch[i], now, o->quiet);
                    killed_relay = 1;
                }
        }
        if (o->timeout_s > 0 && now > o->timeout_s) { /* where it waited: the manager's and trainer's last lines */
            char lm[160], lt[160];
            last_line(ch[0].log, lm, sizeof lm);
            last_line(ch[trainer].log, lt, sizeof lt);
            rc = ls_err(LS_ETIMEDOUT,
                        "rl run: not finished within %.0f s (manager: \"%s\"; trainer: \"%s\"; logs in %s)",
                        o->timeout_s, lm, lt, logdir);
        }
        ls_sleep_ms(20);
    }
finished:
    stop_all(ch, k);
    free(ch);
    struct stat st;
    int fresh = stat(c.report, &st) == 0 && S_ISREG(st.st_mode) &&
                !(had_report && st.st_ino == old_report.st_ino && st.st_dev == old_report.st_dev);
    if (rc == LS_OK && !fresh) rc = ls_err(LS_EIO, "rl run: the manager left no report at %s", c.report);
    return rc;
#undef START
}

int ls_rl_run(const ls_rl_run_opts *o, const ls_rl_inputs *in) {
    ls_rl_inputs *own = NULL;
    if (!in) LS_TRY(ls_rl_run_check(o, &own));
    int rc = run(o, in ? in : own);
    ls_rl_inputs_free(own);
    return rc;
}
