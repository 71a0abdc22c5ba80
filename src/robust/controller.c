/* controller.c - the robust controller: starts the agents, launches the job under mpirun on
 * the healthy nodes, detects and localizes faults, evicts nodes, promotes warm standbys,
 * resumes from the newest checkpoint, and accounts the lost time (ETTR) in a report. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
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

#include <zmq.h>

#include "robust/internal.h"

#define MAXN 64
#define MAXR 256
#define MAXF 64

enum { NODE_STARTING, NODE_ACTIVE, NODE_STANDBY, NODE_EVICTED, NODE_LOST };
enum { PLAN_HANDLED = 1, PLAN_REARMED = 2, PLAN_DEFER_NOTED = 4 };
static const char *const node_state_name[] = {"starting", "active", "standby", "evicted", "lost"};

typedef struct {
    int pid, registered, state;
    char ep[256];
    double last_hb, evicted_at;
    int hbs;         /* heartbeats received */
    int64_t held[2]; /* newest snapshot steps this agent holds (own or replica) */
} node_t;

typedef struct {
    int kind, rank, node;
    int64_t step;             /* step at which it was seen */
    double t_fault, t_detect, t_localized, t_relaunch, t_resumed; /* wall clock */
    double t_launched, t_ready; /* relaunch: the job started (or promoted), every rank connected */
    double recompute_s;
    int recomputed_steps;
    int injected;             /* 1 when it came from the plan */
    char detail[256];
    cJSON *loc;               /* localization evidence (stacks, groups, replay) */
    int evicted, promoted;
    char resumed_kind[16];
    int64_t resumed_step;
    int open; /* recovery in progress: its restart/recompute still accrue */
} fault_t;

typedef struct {
    int64_t step;
    int count;
    unsigned char seen[MAXR];
    double start[MAXR], arrive[MAXR];
} arrival_t;

typedef struct {
    const ls_robust_opts *o;
    void *zctx, *rt;
    arrival_t arr[8];
    char ep[256], shm_dir[256], ckpt_dir[2048], out[2048];
    node_t node[MAXN];
    int n_nodes;
    ls_fault_plan plan;
    int *plan_done;  /* 0 armed, 1 handed to the agents, 2 fired */
    int *plan_flags; /* PLAN_HANDLED, PLAN_REARMED, PLAN_DEFER_NOTED */
    int64_t *plan_at; /* a re-armed entry: the job step it fired at again (see plan_rearm) */
    /* the job */
    int mpirun_pid, launches, relaunches;
    int slot_node[MAXN]; /* active slot -> node */
    int64_t end_step, best_step, job_step;
    int64_t heard_step; /* newest step whose loss a report brought (or the user's --resume step) */
    int64_t rank_step[MAXR];
    int rank_pid[MAXR];
    int rank_gone[MAXR]; /* this launch's rank reported its exit */
    double last_exit_t;  /* when the newest of them arrived */
    double rank_time[MAXR];
    int ranks;
    double t0, last_progress, launch_t, first_step_t;
    int64_t launch_step; /* step the launch resumed from */
    double last_global_t;
    double productive_s;
    /* detectors */
    ls_jump_detector jl[MAXR], jg[MAXR];
    ls_slow_detector slow;
    /* results */
    fault_t f[MAXF];
    int nf;
    cJSON *timeline, *losses_by_step;
    double *loss_of; /* per step, NAN when unknown */
    char *lbits;     /* 9 bytes per step */
    int recompute_mismatch;
    double snap_s_sum, snap_s_max, disk_s_sum, disk_s_max;
    int snap_n, disk_n;
    char slow_method[64];
    int restarts;
    int consecutive_fail;
    char diagnosis[512];
    lsr_status *status;
    double tokens_per_step;
    /* pending events collected by pump() */
    int ev_exit_rank, ev_oom_rank;
    double ev_exit_time, ev_oom_time;
    char ev_exit_status[64];
    int ev_nan_rank, ev_nan_kind;
    int64_t ev_nan_step;
    double ev_nan_time;
    int stacks_pending;
    cJSON *stacks;
    int materialized;
    char mat_err[512];
    int killed_acks, launch_acks;
    double launched_t; /* when the last launch started its ranks (wall) */
    int tearing_down;
    double last_ping;
    double inj_times[LS_FAULT_COUNT_][MAXR]; /* when each kind was injected on each rank (wall) */
    int cur; /* the fault being recovered (-1: none) */
    double ev_nan_loss, ev_nan_gn; /* the suspicious values, compared with the replay's */
    int replay_rank, replay_got;
    int64_t replay_step;
    double replay_loss, replay_gn;
    int replaying; /* a NaN replay runs: its steps are localization, not training */
    /* the pre-started world (warm): mpirun, MPI up, data open, parked until a restart needs it */
    int spare_pid, spare_gen, spare_parked, spare_failures;
    char spare_id[MAXR][64];
} ctl;

static void tl(ctl *c, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void tl(ctl *c, const char *event, const char *fmt, ...) {
    char d[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d, sizeof d, fmt, ap);
    va_end(ap);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "t", ls_wall_time() - c->t0);
    cJSON_AddStringToObject(e, "event", event);
    cJSON_AddStringToObject(e, "detail", d);
    cJSON_AddItemToArray(c->timeline, e);
    if (!c->o->quiet) fprintf(stderr, "[robust %7.2fs] %-10s %s\n", ls_wall_time() - c->t0, event, d);
}

static void send_to(ctl *c, const char *id, cJSON *j) {
    lsr_send(c->rt, id, j, NULL, 0);
    cJSON_Delete(j);
}

static void send_node(ctl *c, int n, cJSON *j) {
    char id[32];
    snprintf(id, sizeof id, "a%d", n);
    send_to(c, id, j);
}

static cJSON *msg(const char *t) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "t", t);
    return j;
}

static int node_of_rank(ctl *c, int rank) {
    int slot = rank / c->o->ranks_per_node;
    return slot >= 0 && slot < c->o->nodes ? c->slot_node[slot] : -1;
}

/* ---------------------------------------------------------------- messages */

static double num_or_nan(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    if (cJSON_IsNumber(v)) return v->valuedouble;
    return cJSON_IsString(v) && !strcmp(v->valuestring, "inf") ? INFINITY : NAN;
}

static void on_step(ctl *c, cJSON *j) {
    int r = (int)lsr_num(j, "rank", -1);
    int64_t s = (int64_t)lsr_num(j, "step", -1);
    if (r < 0 || r >= c->ranks || s < 1 || s > c->end_step) return;
    /* only this launch's processes: a report that reached its agent before a kill and the
     * controller after the next launch began is an earlier launch's, not this one's progress
     * (nor a replay's result); that step counts as not heard and is computed again */
    if ((int)lsr_num(j, "pid", -1) != c->rank_pid[r]) return;
    double now = ls_wall_time(), loss = num_or_nan(j, "loss"), gn = num_or_nan(j, "gn");
    c->rank_step[r] = s;
    c->rank_time[r] = now;
    c->last_progress = now;
    if (c->first_step_t <= 0) c->first_step_t = now;
    double ss = lsr_num(j, "snap_s", 0), ds = lsr_num(j, "disk_s", -1);
    if (lsr_num(j, "snap", -1) >= 0) {
        c->snap_s_sum += ss;
        c->snap_n++;
        if (ss > c->snap_s_max) c->snap_s_max = ss;
    }
    if (ds >= 0) {
        c->disk_s_sum += ds;
        c->disk_n++;
        if (ds > c->disk_s_max) c->disk_s_max = ds;
    }
    /* numeric health, per rank */
    int k1 = ls_jump_feed(&c->jl[r], loss), k2 = ls_jump_feed(&c->jg[r], gn);
    int k = k1 == LS_FAULT_NAN || k2 == LS_FAULT_NAN ? LS_FAULT_NAN : k1 ? k1 : k2;
    if (k && c->ev_nan_rank < 0) {
        c->ev_nan_rank = r;
        c->ev_nan_kind = k;
        c->ev_nan_step = s;
        c->ev_nan_time = now;
        c->ev_nan_loss = loss;
        c->ev_nan_gn = gn;
    }
    if (c->replaying && s == c->replay_step && r == c->replay_rank) {
        c->replay_loss = loss;
        c->replay_gn = gn;
        c->replay_got = 1;
    }
    /* the loss is all-reduced, the same bits on every rank: rank 0's is kept, another rank's
     * fills a step rank 0's report never reached (its agent lost) and is checked against it */
    if (!k && (r == 0 || c->loss_of[s - 1] != c->loss_of[s - 1])) {
        const char *bits = lsr_str(j, "loss_bits");
        if (c->loss_of[s - 1] == c->loss_of[s - 1] && strcmp(c->lbits + 9 * (s - 1), bits) != 0) c->recompute_mismatch++;
        c->loss_of[s - 1] = loss;
        snprintf(c->lbits + 9 * (s - 1), 9, "%s", bits);
        if (s > c->heard_step) c->heard_step = s;
    }
    /* the job's step: the slowest rank's */
    int64_t js = INT64_MAX;
    for (int i = 0; i < c->ranks; i++)
        if (c->rank_step[i] < js) js = c->rank_step[i];
    if (js > c->job_step && c->replaying) {
        c->job_step = js;
    } else if (js > c->job_step) {
        double dt = c->last_global_t > 0 ? now - c->last_global_t : lsr_num(j, "step_s", 0);
        for (int64_t q = c->job_step + 1; q <= js; q++) {
            if (q > c->best_step) {
                c->productive_s += dt / (double)(js - c->job_step);
            } else if (c->cur >= 0) {
                c->f[c->cur].recompute_s += dt / (double)(js - c->job_step);
                c->f[c->cur].recomputed_steps++;
            }
        }
        if (js > c->best_step) c->best_step = js;
        c->job_step = js;
        c->last_global_t = now;
        if (c->cur >= 0 && c->f[c->cur].open && c->f[c->cur].t_relaunch > 0 && c->f[c->cur].t_resumed <= 0)
            c->f[c->cur].t_resumed = now;
    }
    /* slow ranks: per step, how long after the earliest rank started it each rank entered
     * the all-reduce; fed to the detector once every rank reported the step */
    int sr = -1;
    arrival_t *a = &c->arr[s % 8];
    if (a->step != s) {
        memset(a, 0, sizeof *a);
        a->step = s;
    }
    if (!a->seen[r]) {
        a->seen[r] = 1;
        a->start[r] = lsr_num(j, "start", now);
        a->arrive[r] = lsr_num(j, "arrive", now);
        /* the first window after a launch is warm-up (page faults, caches), not a verdict */
        if (++a->count == c->ranks && c->o->slow_window > 0 && s > c->launch_step + c->o->slow_window) {
            double t0 = a->start[0];
            for (int q = 1; q < c->ranks; q++)
                if (a->start[q] < t0) t0 = a->start[q];
            for (int q = 0; q < c->ranks; q++) {
                ls_robust_step rs = {q, s, (float)loss, (float)gn, 0, a->arrive[q] - t0, now};
                if (getenv("LLMSYS_ROBUST_TRACE")) fprintf(stderr, "trace rank %d step %lld busy %.4f\n", q, (long long)s, rs.compute_s);
                int x = ls_slow_feed(&c->slow, &rs);
                if (x >= 0) sr = x;
            }
        }
    }
    if (sr >= 0 && c->ev_nan_rank < 0) {
        c->ev_nan_rank = sr;
        c->ev_nan_kind = LS_FAULT_SLOW;
        c->ev_nan_step = s;
        c->ev_nan_time = now;
    }
}

static void mark_injected(ctl *c, cJSON *j) {
    int kind = ls_fault_parse(lsr_str(j, "kind")), rank = (int)lsr_num(j, "rank", -1);
    for (int i = 0; i < c->plan.n; i++)
        if (c->plan_done[i] == 1 && c->plan.f[i].kind == kind && c->plan.f[i].rank == rank) {
            c->plan_done[i] = 2;
            break;
        }
    if (kind == LS_FAULT_SLOW) snprintf(c->slow_method, sizeof c->slow_method, "%s", lsr_str(j, "method"));
    tl(c, "inject", "%s on rank %d at step %.0f (%s)", ls_fault_name(kind), rank, lsr_num(j, "step", 0),
       lsr_str(j, "method"));
}

static void pump(ctl *c, int ms) {
    /* agents stop their ranks when the controller falls silent: keep them sure we live */
    if (ls_now() - c->last_ping > 0.5) {
        c->last_ping = ls_now();
        for (int n = 0; n < c->n_nodes; n++)
            if (c->node[n].pid > 0 && c->node[n].state != NODE_LOST) send_node(c, n, msg("ping"));
        for (int r = 0; r < c->ranks && c->spare_pid > 0; r++)
            if (c->spare_id[r][0]) send_to(c, c->spare_id[r], msg("ping"));
    }
    zmq_pollitem_t it = {c->rt, 0, ZMQ_POLLIN, 0};
    zmq_poll(&it, 1, ms);
    char from[64];
    cJSON *j;
    int got;
    while ((got = lsr_recv(c->rt, from, &j, NULL, NULL)) != 0) {
        if (got < 0) continue;
        int n = (int)lsr_num(j, "agent", -1);
        const char *t = lsr_str(j, "t");
        if (n >= 0 && n < c->n_nodes) {
            c->node[n].last_hb = ls_now();
            c->node[n].hbs += !strcmp(t, "hb");
        }
        if (!strcmp(t, "reg") && n >= 0 && n < c->n_nodes) {
            c->node[n].registered = 1;
            snprintf(c->node[n].ep, sizeof c->node[n].ep, "%s", lsr_str(j, "ep"));
        } else if (!strcmp(t, "step")) {
            on_step(c, j);
        } else if (!strcmp(t, "hello")) {
            int r = (int)lsr_num(j, "rank", -1);
            if (r >= 0 && r < c->ranks) c->rank_pid[r] = (int)lsr_num(j, "pid", 0);
            int hellos = 0;
            for (int q = 0; q < c->ranks; q++) hellos += c->rank_pid[q] > 0;
            fault_t *f = c->cur >= 0 ? &c->f[c->cur] : NULL;
            if (hellos == c->ranks && f && f->open && f->t_launched > 0 && f->t_ready <= 0) {
                f->t_ready = ls_wall_time();
                tl(c, "ready", "%d ranks loaded the state and connected to their agents", c->ranks);
            }
        } else if (!strcmp(t, "exit") && !c->tearing_down) {
            int r = (int)lsr_num(j, "rank", -1);
            double tt = lsr_num(j, "time", 0);
            /* only this launch's processes: a late exit of an earlier launch is no news */
            int ours = r >= 0 && r < c->ranks && c->rank_pid[r] == (int)lsr_num(j, "pid", -1);
            if (ours) {
                c->rank_gone[r] = 1;
                c->last_exit_t = ls_now();
            }
            if (ours && c->rank_step[r] < c->end_step && (c->ev_exit_rank < 0 || tt < c->ev_exit_time)) {
                c->ev_exit_rank = r;
                c->ev_exit_time = tt;
                snprintf(c->ev_exit_status, sizeof c->ev_exit_status, "%s", lsr_str(j, "status"));
            }
        } else if (!strcmp(t, "fault")) {
            if (!strcmp(lsr_str(j, "kind"), "oom") && c->ev_oom_rank < 0) {
                c->ev_oom_rank = (int)lsr_num(j, "rank", -1);
                c->ev_oom_time = lsr_num(j, "time", 0);
                int r = c->ev_oom_rank;
                if (r >= 0 && r < MAXR) c->inj_times[LS_FAULT_OOM][r] = c->ev_oom_time;
                for (int i = 0; i < c->plan.n; i++)
                    if (c->plan.f[i].kind == LS_FAULT_OOM && c->plan.f[i].rank == r) c->plan_done[i] = 2;
            }
        } else if (!strcmp(t, "injected") && lsr_num(j, "launch", -1) == c->launches) {
            /* (an earlier launch's injection, reported late, is no news: plan_rearm judged it) */
            int kind = ls_fault_parse(lsr_str(j, "kind")), r = (int)lsr_num(j, "rank", -1);
            if (kind > 0 && r >= 0 && r < MAXR) c->inj_times[kind][r] = lsr_num(j, "time", -1);
            mark_injected(c, j);
        } else if (!strcmp(t, "held") && n >= 0) {
            int64_t s = (int64_t)lsr_num(j, "step", -1);
            node_t *nd = &c->node[n];
            if (s > nd->held[0]) {
                nd->held[1] = nd->held[0];
                nd->held[0] = s;
            } else if (s != nd->held[0] && s > nd->held[1]) {
                nd->held[1] = s;
            }
        } else if (!strcmp(t, "stacks")) {
            cJSON_AddItemToArray(c->stacks, cJSON_Duplicate(j, 1));
        } else if (!strcmp(t, "stacks_done")) {
            c->stacks_pending--;
        } else if (!strcmp(t, "materialized")) {
            c->materialized = lsr_num(j, "ok", 0) ? 1 : -1;
            snprintf(c->mat_err, sizeof c->mat_err, "%s", lsr_str(j, "error"));
        } else if (!strcmp(t, "parked")) {
            int r = (int)lsr_num(j, "rank", -1);
            if (c->spare_pid > 0 && (int)lsr_num(j, "gen", -1) == c->spare_gen && r >= 0 && r < c->ranks &&
                !c->spare_id[r][0]) {
                snprintf(c->spare_id[r], sizeof c->spare_id[r], "%s", from);
                if (++c->spare_parked == c->ranks)
                    tl(c, "standby", "pre-started world %d parked: %d ranks with MPI up and data open", c->spare_gen,
                       c->ranks);
            }
        } else if (!strcmp(t, "killed")) {
            c->killed_acks++;
        } else if (!strcmp(t, "launched")) {
            c->launch_acks++;
        }
        cJSON_Delete(j);
    }
}

/* ---------------------------------------------------------------- processes */

static int start_agent(ctl *c, int n) {
    char id[16], grace[16];
    snprintf(id, sizeof id, "%d", n);
    snprintf(grace, sizeof grace, "%g", 5.0);
    const char *argv[] = {c->o->self, "robust", "agent", "--id", id, "--controller", c->ep, "--grace", grace, NULL};
    /* no parent-death signal: an agent that loses the controller keeps its ranks for a grace
     * period, then stops them cleanly (agent.c) */
    pid_t pid;
    LS_TRY(ls_spawn_self(c->o->self, argv, NULL, &pid));
    c->node[n].pid = pid;
    c->node[n].last_hb = ls_now();
    return LS_OK;
}

static int is_run_setting(const char *a) {
    static const char *const k[] = {"--config", "--batch", "--seq", "--lr", "--warmup", "--seed", "--weight-decay",
                                     "--grad-clip", "--resume", "--robust-agent"};
    for (int i = 0; i < 10; i++) {
        size_t l = strlen(k[i]);
        if (!strncmp(a, k[i], l) && (a[l] == '\0' || a[l] == '=')) return a[l] == '=' ? 1 : 2;
    }
    return 0;
}

/* The mpirun command line (malloc'd) of the job on the active nodes: the user's command,
 * resumed from resume (may be NULL), stopped at stop_at (> 0), reporting to the agents eps;
 * park (may be NULL) makes it a pre-started world that waits for "go" instead; np (16 bytes),
 * hostfile and stopb are buffers the command line points into. */
static char **job_argv(ctl *c, const char *resume, int64_t stop_at, const char *eps, const char *park, char *np,
                       char *hostfile, char *stopb) {
    const ls_robust_opts *o = c->o;
    char **av = calloc((size_t)o->argc + 32, sizeof *av);
    if (!av) return NULL;
    int n = ls_dist_mpirun_args(av, np, c->ranks); /* the same mpirun flags as `train --ranks` */
    av[n++] = "--hostfile";
    av[n++] = hostfile;
    av[n++] = (char *)o->self;
    av[n++] = "train";
    for (int i = 2; i < o->argc; i++) {
        int rs = resume ? is_run_setting(o->argv[i]) : (is_run_setting(o->argv[i]) && !strncmp(o->argv[i], "--robust", 8));
        if (rs == 2) {
            i++;
            continue;
        }
        if (rs == 1) continue;
        if (stop_at > 0 && !strncmp(o->argv[i], "--stop-at", 9)) {
            if (!o->argv[i][9]) i++;
            continue;
        }
        av[n++] = o->argv[i];
    }
    if (resume) {
        av[n++] = "--resume";
        av[n++] = (char *)resume;
    }
    if (stop_at > 0) {
        snprintf(stopb, 32, "%" PRId64, stop_at);
        av[n++] = "--stop-at";
        av[n++] = stopb;
    }
    av[n++] = park ? "--robust-park" : "--robust-agent";
    av[n++] = (char *)(park ? park : eps);
    av[n] = NULL;
    return av;
}

/* Forks mpirun av in its own process group, output to outf/errf; returns its pid or < 0. The
 * ranks' shared-memory files go under the controller's shm_dir: a job killed with SIGKILL
 * cannot remove its own, and the controller removes that directory when it ends. */
static int fork_mpirun(ctl *c, char **av, const char *outf, const char *errf) {
    fflush(NULL);
    int pid = fork();
    if (pid < 0) return ls_err(LS_EIO, "cannot fork mpirun: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        if (!freopen(outf, "w", stdout) || !freopen(errf, "w", stderr)) _exit(126);
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
        setenv("OMPI_MCA_btl_vader_backing_directory", c->shm_dir, 1);
        setenv("OMP_WAIT_POLICY", "passive", 0);
        setenv("LLMSYS_PROGRESS", "0", 1);
        execvp("mpirun", av);
        fprintf(stderr, "cannot run mpirun: %s\n", strerror(errno));
        _exit(127);
    }
    return pid;
}

static int write_hostfile(ctl *c, char *hostfile, size_t cap) {
    snprintf(hostfile, cap, "%s/hosts", c->shm_dir);
    FILE *hf = fopen(hostfile, "w");
    if (!hf) return ls_err(LS_EIO, "%s: %s", hostfile, strerror(errno));
    /* one line per host with the slots of its active nodes (all "localhost" here) */
    fprintf(hf, "localhost slots=%d\n", c->o->nodes * c->o->ranks_per_node);
    fclose(hf);
    return LS_OK;
}

static void spare_kill(ctl *c) {
    if (c->spare_pid <= 0) return;
    kill(-c->spare_pid, SIGKILL);
    kill(c->spare_pid, SIGKILL);
    waitpid(c->spare_pid, NULL, 0);
    c->spare_pid = 0;
}

/* Pre-starts the next job's world: mpirun, MPI initialised and the data opened in every rank,
 * each parked until a restart sends it the checkpoint to resume from (warm standby processes;
 * --cold restarts start everything anew instead). */
static void spare_start(ctl *c) {
    if (c->o->cold || c->o->no_prestart || c->spare_pid > 0 || c->replaying || c->spare_failures >= 2) return;
    char hostfile[512], errf[512], outf[512], np[16], park[320], stopb[32];
    if (write_hostfile(c, hostfile, sizeof hostfile) < 0) return;
    c->spare_gen++;
    snprintf(errf, sizeof errf, "%s/spare-%d.err", c->shm_dir, c->spare_gen);
    snprintf(outf, sizeof outf, "%s/spare-%d.out", c->shm_dir, c->spare_gen);
    snprintf(park, sizeof park, "%s,%d", c->ep, c->spare_gen);
    char **av = job_argv(c, NULL, 0, NULL, park, np, hostfile, stopb);
    int pid = av ? fork_mpirun(c, av, outf, errf) : -1;
    free(av);
    c->spare_parked = 0;
    memset(c->spare_id, 0, sizeof c->spare_id);
    c->spare_pid = pid > 0 ? pid : 0;
}

/* Launches the job on the active nodes; resume == NULL: the user's command as given. A
 * restart (resume, no stop_at) promotes the parked pre-started world when it is ready. */
static int launch(ctl *c, const char *resume, int64_t stop_at) {
    const ls_robust_opts *o = c->o;
    c->launches++;
    char hostfile[512], errf[512], outf[512], np[16], eps[MAXN * 64] = "", stopb[32];
    snprintf(errf, sizeof errf, "%s/launch-%d.err", c->shm_dir, c->launches);
    snprintf(outf, sizeof outf, "%s/launch-%d.out", c->shm_dir, c->launches);
    LS_TRY(write_hostfile(c, hostfile, sizeof hostfile));
    for (int s = 0; s < o->nodes; s++) {
        if (s) strcat(eps, ",");
        strcat(eps, c->node[c->slot_node[s]].ep);
    }
    /* a pre-started world still starting up is waited for: its start-up is already paid */
    for (double t = ls_now(); resume && stop_at <= 0 && c->spare_pid > 0 && c->spare_parked < c->ranks;) {
        pump(c, 10);
        if (waitpid(c->spare_pid, NULL, WNOHANG) == c->spare_pid)
            c->spare_pid = 0;
        else if (ls_now() - t > 15)
            spare_kill(c);
        if (!c->spare_pid) c->spare_failures++;
    }
    int warm = resume && stop_at <= 0 && c->spare_pid > 0 && c->spare_parked == c->ranks;
    char **av = warm ? NULL : job_argv(c, resume, stop_at, eps, NULL, np, hostfile, stopb);
    if (!warm && !av) return ls_err(LS_ENOMEM, "out of memory");
    c->launch_acks = 0;
    /* tell each active agent its ranks and this launch's injections */
    for (int s = 0; s < o->nodes; s++) {
        int nd = c->slot_node[s];
        cJSON *j = msg("launch");
        cJSON *rk = cJSON_AddArrayToObject(j, "ranks");
        for (int r = s * o->ranks_per_node; r < (s + 1) * o->ranks_per_node; r++)
            cJSON_AddItemToArray(rk, cJSON_CreateNumber(r));
        cJSON_AddNumberToObject(j, "launch", c->launches);
        cJSON_AddNumberToObject(j, "ckpt_every", o->ckpt_every);
        cJSON_AddNumberToObject(j, "disk_every", o->disk_every);
        cJSON_AddNumberToObject(j, "keep", o->keep_disk);
        cJSON_AddStringToObject(j, "disk_dir", stop_at > 0 ? "" : c->ckpt_dir);
        char shm[300];
        snprintf(shm, sizeof shm, "%s/a%d", c->shm_dir, nd);
        cJSON_AddStringToObject(j, "shm_dir", shm);
        cJSON *inj = cJSON_AddArrayToObject(j, "inject");
        for (int i = 0; i < c->plan.n; i++) {
            const ls_fault_spec *f = &c->plan.f[i];
            /* a replay re-runs only what the data itself would do again (a sticky NaN) */
            int replay_it = stop_at > 0 && f->kind == LS_FAULT_NAN && f->sticky && f->step == stop_at;
            if (stop_at > 0 && !replay_it) continue;
            if ((c->plan_done[i] && !replay_it) || f->step < 1 || f->kind == LS_FAULT_CORRUPT_CKPT) continue;
            if ((c->plan_flags[i] & PLAN_REARMED) && !replay_it) continue; /* the controller fires these */
            if (f->rank < s * o->ranks_per_node || f->rank >= (s + 1) * o->ranks_per_node) continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "kind", ls_fault_name(f->kind));
            cJSON_AddNumberToObject(e, "step", (double)f->step);
            cJSON_AddNumberToObject(e, "rank", f->rank);
            cJSON_AddNumberToObject(e, "share", f->share);
            cJSON_AddItemToArray(inj, e);
            if (!replay_it) c->plan_done[i] = 1; /* handed out; confirmed by "injected" or by detection */
        }
        send_node(c, nd, j);
    }
    /* the agents take the launch settings before the ranks say hello: each acknowledges */
    for (double t = ls_now(); c->launch_acks < o->nodes && ls_now() - t < 2;) pump(c, 5);
    for (int r = 0; r < c->ranks; r++) {
        c->rank_step[r] = c->launch_step;
        c->rank_pid[r] = 0;
        c->rank_gone[r] = 0;
        ls_jump_init(&c->jl[r], o->jump_factor, 20, 8);
        ls_jump_init(&c->jg[r], o->jump_factor, 20, 8);
    }
    ls_slow_free(&c->slow);
    if (o->slow_window > 0) ls_slow_init(&c->slow, c->ranks, o->slow_window, 3, o->slow_factor);
    c->job_step = c->launch_step;
    c->last_global_t = 0;
    c->first_step_t = 0;
    c->ev_exit_rank = c->ev_oom_rank = c->ev_nan_rank = -1;
    if (warm) { /* the parked world takes over: it only loads the state and connects to the agents */
        for (int r = 0; r < c->ranks; r++) {
            cJSON *g = msg("go");
            cJSON_AddStringToObject(g, "resume", resume);
            cJSON_AddStringToObject(g, "agents", eps);
            send_to(c, c->spare_id[r], g);
        }
        c->mpirun_pid = c->spare_pid;
        c->spare_pid = 0;
        tl(c, "standby", "pre-started world %d promoted", c->spare_gen);
    } else {
        int pid = fork_mpirun(c, av, outf, errf);
        free(av);
        if (pid < 0) return pid;
        c->mpirun_pid = pid;
    }
    c->launch_t = c->last_progress = c->launched_t = ls_wall_time();
    c->tearing_down = 0;
    return LS_OK;
}

/* Stops the job: agents kill their ranks, mpirun's process group is killed and reaped. */
static int stop_job(ctl *c) {
    c->tearing_down = 1;
    c->killed_acks = 0;
    int expect = 0;
    for (int n = 0; n < c->n_nodes; n++)
        if (c->node[n].state == NODE_ACTIVE || c->node[n].state == NODE_EVICTED) {
            send_node(c, n, msg("kill"));
            expect++;
        }
    int status = 0;
    if (c->mpirun_pid > 0) {
        kill(-c->mpirun_pid, SIGKILL);
        kill(c->mpirun_pid, SIGKILL);
        waitpid(c->mpirun_pid, &status, 0);
        c->mpirun_pid = 0;
    }
    for (double t = ls_now(); c->killed_acks < expect && ls_now() - t < 3;) pump(c, 10);
    return status;
}

static void show_err_tail(ctl *c) {
    char p[512];
    snprintf(p, sizeof p, "%s/launch-%d.err", c->shm_dir, c->launches);
    char *d;
    size_t len;
    if (ls_file_read(p, &d, &len) < 0) return;
    size_t from = len > 2000 ? len - 2000 : 0;
    fprintf(stderr, "llmsys robust: the training command failed at once; its stderr:\n%s", d + from);
    if (len && d[len - 1] != '\n') fputc('\n', stderr);
    free(d);
}

/* ---------------------------------------------------------------- checkpoints */

/* Checkpoints left in the directory by an earlier run are not this job's state. */
static int from_this_run(ctl *c, const char *name) {
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%.4000s/%.100s", c->ckpt_dir, name);
    return stat(p, &st) == 0 && (double)st.st_mtime >= floor(c->t0) - 1;
}

/* Newest verified disk checkpoint with step <= limit; corrupt ones are set aside (renamed
 * *.corrupt) and recorded. Returns the step or -1. */
static int64_t newest_disk(ctl *c, int64_t limit, char *path, size_t cap) {
    for (;;) {
        DIR *d = opendir(c->ckpt_dir);
        if (!d) return -1;
        int64_t best = -1;
        struct dirent *e;
        while ((e = readdir(d))) {
            long long s;
            char tail[32];
            if (sscanf(e->d_name, "ckpt-%lld%31s", &s, tail) == 2 && !strcmp(tail, ".safetensors") && s <= limit &&
                s > best && from_this_run(c, e->d_name))
                best = s;
        }
        closedir(d);
        if (best < 0) return -1;
        snprintf(path, cap, "%s/ckpt-%08" PRId64 ".safetensors", c->ckpt_dir, best);
        ls_st_file *f;
        ls_model_config mc;
        int rc = ls_ckpt_open(path, &f, &mc);
        if (rc == LS_OK) {
            ls_st_close(f);
            return best;
        }
        char bad[2200];
        snprintf(bad, sizeof bad, "%s.corrupt", path);
        rename(path, bad);
        if (c->nf < MAXF) {
            fault_t *ft = &c->f[c->nf++];
            memset(ft, 0, sizeof *ft);
            ft->kind = LS_FAULT_CORRUPT_CKPT;
            ft->rank = -1;
            ft->node = -1;
            ft->step = best;
            ft->t_detect = ft->t_localized = ls_wall_time();
            ft->t_fault = c->inj_times[LS_FAULT_CORRUPT_CKPT][0] > 0 ? c->inj_times[LS_FAULT_CORRUPT_CKPT][0] : ft->t_detect;
            ft->injected = c->inj_times[LS_FAULT_CORRUPT_CKPT][0] > 0;
            snprintf(ft->detail, sizeof ft->detail, "%s", ls_errmsg());
        }
        tl(c, "detect", "corrupt-ckpt: %s; falling back to the previous checkpoint", ls_errmsg());
    }
}

/* Flips bytes in the middle of the newest disk checkpoint (injection). */
static void corrupt_newest(ctl *c) {
    char path[2200];
    DIR *d = opendir(c->ckpt_dir);
    if (!d) return;
    long long best = -1, s;
    char tail[32];
    struct dirent *e;
    while ((e = readdir(d)))
        if (sscanf(e->d_name, "ckpt-%lld%31s", &s, tail) == 2 && !strcmp(tail, ".safetensors") && s > best &&
            from_this_run(c, e->d_name))
            best = s;
    closedir(d);
    if (best < 0) return;
    snprintf(path, sizeof path, "%s/ckpt-%08lld.safetensors", c->ckpt_dir, best);
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    unsigned char buf[64];
    fseek(f, len / 2, SEEK_SET);
    size_t got = fread(buf, 1, sizeof buf, f);
    for (size_t i = 0; i < got; i++) buf[i] ^= 0xA5;
    fseek(f, len / 2, SEEK_SET);
    fwrite(buf, 1, got, f);
    fclose(f);
    c->inj_times[LS_FAULT_CORRUPT_CKPT][0] = ls_wall_time();
    tl(c, "inject", "corrupt-ckpt: flipped %zu bytes of %s", got, path);
}

/* Picks the resume point: the newest in-memory snapshot (step <= limit) held by a live
 * agent, materialized on tmpfs; else the newest good disk checkpoint. path receives the
 * checkpoint ("" = from scratch); returns its step. */
static int64_t resume_point(ctl *c, int64_t limit, char *path, size_t cap, char *kind) {
    /* never past the newest step a report brought: the ranks save a step before they report
     * it, and a state whose step never reached us (its agent lost, or the ranks stopped
     * between the save and the report) would leave that step out of the losses, neither
     * productive nor redone; it is computed again instead */
    if (limit > c->heard_step) limit = c->heard_step;
    for (int pass = c->o->cold ? 2 : 0; pass < 2; pass++) {
        int64_t best = -1;
        int holder = -1;
        for (int n = 0; n < c->n_nodes; n++) {
            node_t *nd = &c->node[n];
            if (nd->state == NODE_LOST || !nd->registered) continue;
            /* prefer healthy holders; an evicted node is asked only when nothing else has it */
            if (pass == 0 && nd->state == NODE_EVICTED) continue;
            for (int k = 0; k < 2; k++)
                if (nd->held[k] > best && nd->held[k] <= limit) {
                    best = nd->held[k];
                    holder = n;
                }
        }
        if (holder < 0) continue;
        snprintf(path, cap, "%s/resume-%" PRId64 ".safetensors", c->shm_dir, best);
        cJSON *j = msg("materialize");
        cJSON_AddNumberToObject(j, "step", (double)best);
        cJSON_AddStringToObject(j, "path", path);
        c->materialized = 0;
        send_node(c, holder, j);
        for (double t = ls_now(); !c->materialized && ls_now() - t < 10 && ls_now() - c->node[holder].last_hb < 3;)
            pump(c, 10);
        if (c->materialized == 1) {
            strcpy(kind, "memory");
            return best;
        }
        tl(c, "warn", "agent %d could not hand over snapshot %" PRId64 ": %s", holder, best, c->mat_err);
        c->node[holder].held[0] = c->node[holder].held[1] = -1;
        pass--; /* try the next holder */
    }
    int64_t s = newest_disk(c, limit, path, cap);
    if (s >= 0) {
        strcpy(kind, "disk");
        return s;
    }
    path[0] = '\0';
    strcpy(kind, "scratch");
    return 0;
}

/* ---------------------------------------------------------------- localization */

/* Stack dumps of every rank, grouped; the outlier group's ranks are returned in bad[]. */
static int localize_by_stacks(ctl *c, fault_t *f, int *bad, int maxbad) {
    cJSON_Delete(c->stacks);
    c->stacks = cJSON_CreateArray();
    c->stacks_pending = 0;
    for (int n = 0; n < c->n_nodes; n++)
        if (c->node[n].state == NODE_ACTIVE) {
            send_node(c, n, msg("stacks"));
            c->stacks_pending++;
        }
    for (double t = ls_now(); c->stacks_pending > 0 && ls_now() - t < 30;) pump(c, 10);
    const char **texts = calloc((size_t)c->ranks, sizeof *texts);
    char *states = calloc((size_t)c->ranks + 1, 1);
    cJSON *e;
    cJSON_ArrayForEach(e, c->stacks) {
        int r = (int)lsr_num(e, "rank", -1);
        if (r >= 0 && r < c->ranks) {
            texts[r] = *lsr_str(e, "text") ? lsr_str(e, "text") : NULL;
            states[r] = lsr_str(e, "state")[0];
        }
    }
    ls_stack_groups g;
    int nbad = 0;
    cJSON *loc = cJSON_CreateObject();
    cJSON_AddStringToObject(loc, "method", "stack dumps (eu-stack), grouped");
    if (ls_stack_group(texts, c->ranks, c->o->self, &g) == LS_OK) {
        cJSON *ga = cJSON_AddArrayToObject(loc, "groups");
        for (int k = 0; k < g.n_groups; k++) {
            cJSON *ge = cJSON_CreateObject();
            cJSON_AddStringToObject(ge, "signature", g.sig[k]);
            cJSON *rk = cJSON_AddArrayToObject(ge, "ranks");
            for (int r = 0; r < c->ranks; r++)
                if (g.group_of[r] == k) cJSON_AddItemToArray(rk, cJSON_CreateNumber(r));
            cJSON_AddBoolToObject(ge, "outlier", k == g.outlier);
            cJSON_AddItemToArray(ga, ge);
        }
        if (g.outlier >= 0)
            for (int r = 0; r < c->ranks && nbad < maxbad; r++)
                if (g.group_of[r] == g.outlier) bad[nbad++] = r;
        ls_stack_groups_free(&g);
    }
    if (nbad == 0) {
        /* same stacks everywhere: a stopped process, else the rank that is behind */
        for (int r = 0; r < c->ranks && nbad < maxbad; r++)
            if (states[r] == 'T' || states[r] == 't') bad[nbad++] = r;
        cJSON_AddStringToObject(loc, "fallback", nbad ? "process state (stopped)" : "lowest step");
        if (!nbad) {
            int lo = 0;
            for (int r = 1; r < c->ranks; r++)
                if (c->rank_step[r] < c->rank_step[lo]) lo = r;
            bad[nbad++] = lo;
        }
    }
    cJSON_AddStringToObject(loc, "states", states);
    cJSON_AddItemToObject(loc, "stacks", c->stacks);
    c->stacks = NULL;
    f->loc = loc;
    free(texts);
    free(states);
    return nbad;
}

/* ---------------------------------------------------------------- recovery */

static int write_report(ctl *c, ls_robust_result *res);
static void set_peers(ctl *c);

/* SIGINT/SIGTERM to the controller: stop the job, keep its last good state, report. */
static volatile sig_atomic_t interrupted;
static void diagnose_interrupt(ctl *c) {
    snprintf(c->diagnosis, sizeof c->diagnosis,
             "interrupted (signal %d); the job is stopped with its last good checkpoint on disk", (int)interrupted);
}

/* Evicted nodes whose repair time has passed rejoin the warm standbys. Called from the
 * main loop and again right before a standby is chosen, since localization (a replay, stack
 * dumps) can hold the loop for longer than a repair takes. */
static void repair_due(ctl *c) {
    for (int n = 0; c->o->repair_s > 0 && n < c->n_nodes; n++)
        if (c->node[n].state == NODE_EVICTED && ls_now() - c->node[n].evicted_at >= c->o->repair_s) {
            c->node[n].state = NODE_STANDBY;
            c->node[n].last_hb = ls_now();
            tl(c, "repair", "node %d repaired: back among the warm standbys", n);
            set_peers(c);
        }
}

static int evict_and_promote(ctl *c, fault_t *f, int node) {
    repair_due(c);
    int slot = -1;
    for (int s = 0; s < c->o->nodes; s++)
        if (c->slot_node[s] == node) slot = s;
    if (slot < 0) return LS_OK;
    int sb = -1;
    for (int n = 0; n < c->n_nodes && sb < 0; n++)
        if (c->node[n].state == NODE_STANDBY && c->node[n].registered) sb = n;
    c->node[node].state = NODE_EVICTED;
    c->node[node].evicted_at = ls_now();
    f->evicted = node;
    if (sb < 0 && c->o->cold && c->n_nodes < MAXN) {
        /* a cold restart: a new node is started now (nothing warm, nothing in its memory) */
        sb = c->n_nodes++;
        memset(&c->node[sb], 0, sizeof c->node[sb]);
        c->node[sb].held[0] = c->node[sb].held[1] = -1;
        c->node[sb].state = NODE_STARTING;
        if (start_agent(c, sb) < 0) return LS_EBUSY;
        for (double t = ls_now(); !c->node[sb].registered && ls_now() - t < 20;) pump(c, 5);
        if (!c->node[sb].registered) return LS_EBUSY;
        tl(c, "start", "cold restart: new node %d started", sb);
    }
    if (sb < 0 && c->o->repair_s > 0) {
        /* no warm standby, but nodes come back from repair (--repair): wait for the first one
         * (the node just evicted at the latest, --repair from now) rather than stop the job;
         * 5 s past its due time we give up (its agent gone) and the job stops as before */
        int first = -1;
        for (int n = 0; n < c->n_nodes; n++)
            if (c->node[n].state == NODE_EVICTED && c->node[n].registered &&
                (first < 0 || c->node[n].evicted_at < c->node[first].evicted_at))
                first = n;
        if (first >= 0) {
            double due = c->node[first].evicted_at + c->o->repair_s;
            tl(c, "wait", "no warm standby: waiting %.1f s for node %d to come back from repair", due - ls_now(),
               first);
            while (sb < 0 && !interrupted && ls_now() < due + 5) {
                pump(c, 20);
                repair_due(c);
                for (int n = 0; n < c->n_nodes && sb < 0; n++)
                    if (c->node[n].state == NODE_STANDBY && c->node[n].registered) sb = n;
            }
        }
    }
    if (sb < 0) {
        f->promoted = -1;
        return LS_EBUSY;
    }
    int was = c->node[sb].state;
    c->node[sb].state = NODE_ACTIVE;
    c->slot_node[slot] = sb;
    f->promoted = sb;
    tl(c, "evict", "node %d evicted; %s node %d takes slot %d (ranks %d-%d)", node,
       was == NODE_STARTING ? "new" : "warm standby", sb, slot,
       slot * c->o->ranks_per_node, (slot + 1) * c->o->ranks_per_node - 1);
    return LS_OK;
}

/* Sends every live agent its replication peers: the next active node (ring) and, for the
 * node of rank 0, the standbys (so they hold the newest state before they are needed). */
static void set_peers(ctl *c) {
    for (int s = 0; s < c->o->nodes; s++) {
        int nd = c->slot_node[s];
        cJSON *j = msg("peers");
        cJSON *eps = cJSON_AddArrayToObject(j, "eps");
        if (c->o->nodes > 1) cJSON_AddItemToArray(eps, cJSON_CreateString(c->node[c->slot_node[(s + 1) % c->o->nodes]].ep));
        if (s == 0)
            for (int n = 0; n < c->n_nodes; n++)
                if (c->node[n].state == NODE_STANDBY) cJSON_AddItemToArray(eps, cJSON_CreateString(c->node[n].ep));
        send_node(c, nd, j);
    }
}

/* Puts the last good state (at most step limit) on disk when the job must stop (atomic, in
 * ckpt_dir) and makes it the job's reported step; returns that step (0: none). */
static int64_t save_last_good(ctl *c, int64_t limit) {
    char path[2200], kind[16];
    int64_t s = resume_point(c, limit, path, sizeof path, kind);
    if (!strcmp(kind, "memory")) {
        char dst[2200];
        snprintf(dst, sizeof dst, "%s/ckpt-%08" PRId64 ".safetensors", c->ckpt_dir, s);
        char *d;
        size_t len;
        if (ls_file_read(path, &d, &len) == 0) {
            if (ls_file_write_atomic(dst, d, len) == 0) tl(c, "save", "last good state (step %" PRId64 ") written to %s", s, dst);
            free(d);
        }
    } else if (!strcmp(kind, "disk")) {
        tl(c, "save", "last good checkpoint on disk: %s (step %" PRId64 ")", path, s);
    } else {
        s = 0;
    }
    /* the job stops here: the step it reports is the saved state's (the ranks may have
     * checkpointed a step whose report has not reached us yet, or be past the newest state) */
    if (s > 0) c->job_step = s;
    return s;
}

/* Equal reported values (both NaN counts as equal). */
static int same_value(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Handles one detected fault: localize, stop, evict/promote, pick the resume point and
 * relaunch. Returns 0 to go on, 1 when the job must stop (diagnosis set). */
/* The fired plan entry a detected fault accounts for: the same kind on the same rank, else on
 * a rank of the same node (localization names nodes), else, for a hang (the job stalls as a
 * whole), any fired hang. */
static void plan_handled(ctl *c, int kind, int rank) {
    if (kind == LS_FAULT_JUMP) kind = LS_FAULT_NAN;
    int R = c->o->ranks_per_node;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < c->plan.n; i++) {
            const ls_fault_spec *f = &c->plan.f[i];
            if (c->plan_done[i] != 2 || (c->plan_flags[i] & PLAN_HANDLED) || f->kind != kind) continue;
            if ((pass == 0 && f->rank == rank) || (pass == 1 && rank >= 0 && f->rank / R == rank / R) ||
                (pass == 2 && kind == LS_FAULT_HANG)) {
                c->plan_flags[i] |= PLAN_HANDLED;
                return;
            }
        }
}

/* Injections that fired but were swallowed by a recovery (they landed in a job being stopped,
 * or in the same incident as the fault detected) fire again, once, in a relaunched job, by
 * the controller (rearm_due). Nothing planned is silently lost. */
static void plan_rearm(ctl *c) {
    for (int i = 0; i < c->plan.n; i++) {
        const ls_fault_spec *f = &c->plan.f[i];
        if (c->plan_done[i] == 1) c->plan_done[i] = 0; /* handed out but not fired: the next launch gets them */
        if (c->plan_done[i] != 2 || (c->plan_flags[i] & (PLAN_HANDLED | PLAN_REARMED)) || f->kind == LS_FAULT_CORRUPT_CKPT)
            continue;
        c->plan_done[i] = 0;
        c->plan_flags[i] |= PLAN_REARMED;
        tl(c, "defer", "%s on rank %d fired into the stopped job, unhandled: fires again in a relaunched job",
           ls_fault_name(f->kind), f->rank);
    }
}

/* Sends one injection to the agent of its rank, which executes it at once. */
static void inject_now(ctl *c, int i, double now) {
    const ls_fault_spec *f = &c->plan.f[i];
    cJSON *j = msg("inject");
    cJSON_AddStringToObject(j, "kind", ls_fault_name(f->kind));
    cJSON_AddNumberToObject(j, "rank", f->rank);
    cJSON_AddNumberToObject(j, "share", f->share);
    send_node(c, node_of_rank(c, f->rank), j);
    c->plan_done[i] = 2;
    if (f->kind == LS_FAULT_NAN) c->inj_times[LS_FAULT_NAN][f->rank] = now;
}

/* Re-armed injections fire one at a time once the job trains: the next when the one before
 * was handled, or when the job went on REARM_GAP steps (plus the slow detector's three
 * windows) past it undetected. Fired together, a fault detected fast (a crash, in a fraction
 * of a second) would swallow a slow one (a hang, --hang-timeout) again: agents see their
 * ranks' steps late under load, so even one step apart is not apart. */
enum { REARM_GAP = 4 };
static void rearm_due(ctl *c, double now) {
    if (c->first_step_t <= 0) return;
    int64_t gap = REARM_GAP + (c->o->slow_window > 0 ? 3 * (int64_t)c->o->slow_window : 0);
    for (int i = 0; i < c->plan.n; i++)
        if ((c->plan_flags[i] & (PLAN_REARMED | PLAN_HANDLED)) == PLAN_REARMED && c->plan_done[i] == 2 &&
            c->job_step < c->plan_at[i] + gap)
            return; /* one in flight */
    for (int i = 0; i < c->plan.n; i++)
        if ((c->plan_flags[i] & PLAN_REARMED) && c->plan_done[i] == 0) {
            c->plan_at[i] = c->job_step;
            tl(c, "rearm", "%s on rank %d fires again at step %" PRId64, ls_fault_name(c->plan.f[i].kind),
               c->plan.f[i].rank, c->job_step);
            inject_now(c, i, now);
            return;
        }
}

static int handle_fault(ctl *c, int kind, int rank, int64_t step, double t_detect, const char *detail) {
    if (c->nf >= MAXF) {
        snprintf(c->diagnosis, sizeof c->diagnosis, "too many faults (%d)", MAXF);
        return 1;
    }
    if (c->cur >= 0) c->f[c->cur].open = 0;
    c->cur = c->nf;
    fault_t *f = &c->f[c->nf++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->rank = rank;
    f->step = step;
    f->t_detect = t_detect;
    f->evicted = f->promoted = -1;
    f->open = 1;
    double it = rank >= 0 && rank < MAXR ? c->inj_times[kind][rank] : 0;
    if ((kind == LS_FAULT_NAN || kind == LS_FAULT_JUMP) && rank >= 0) it = c->inj_times[LS_FAULT_NAN][rank];
    f->injected = it > 0;
    f->t_fault = it > 0 && it <= t_detect ? it : t_detect;
    if (rank >= 0 && rank < MAXR) c->inj_times[kind][rank] = 0;
    if ((kind == LS_FAULT_NAN || kind == LS_FAULT_JUMP) && rank >= 0) {
        c->inj_times[LS_FAULT_NAN][rank] = 0;
        for (int i = 0; i < c->plan.n; i++) /* the poisoned step was the injection */
            if (c->plan.f[i].kind == LS_FAULT_NAN && c->plan.f[i].rank == rank && c->plan_done[i] == 1) {
                c->plan_done[i] = 2;
                f->injected = 1;
            }
    }
    snprintf(f->detail, sizeof f->detail, "%s", detail);
    char who[32] = "";
    if (rank >= 0) snprintf(who, sizeof who, " on rank %d", rank);
    tl(c, "detect", "%s%s at step %" PRId64 ": %s", ls_fault_name(kind), who, step, detail);
    int bad[MAXR], nbad = 0;
    int64_t limit = INT64_MAX;
    if (kind == LS_FAULT_HANG || kind == LS_FAULT_SLOW) {
        nbad = localize_by_stacks(c, f, bad, MAXR);
        if (kind == LS_FAULT_SLOW) { /* the detector already named the rank; stacks are evidence */
            bad[0] = rank;
            nbad = 1;
        }
        if (kind == LS_FAULT_HANG && nbad > 0) {
            f->rank = bad[0];
            double hi = c->inj_times[LS_FAULT_HANG][bad[0]];
            if (hi > 0 && hi <= f->t_detect) {
                f->injected = 1;
                f->t_fault = hi;
                c->inj_times[LS_FAULT_HANG][bad[0]] = 0;
            }
        }
        stop_job(c);
    } else if (kind == LS_FAULT_NAN || kind == LS_FAULT_JUMP) {
        /* replay the failing step from the snapshot before it, on the same nodes */
        stop_job(c);
        limit = step - 1;
        char path[2200], rk[16];
        int64_t from = resume_point(c, limit, path, sizeof path, rk);
        cJSON *loc = cJSON_CreateObject();
        cJSON_AddStringToObject(loc, "method", "replay of the failing step from the checkpoint before it");
        cJSON_AddNumberToObject(loc, "replay_from", (double)from);
        int repeat = -1;
        if (path[0]) {
            tl(c, "replay", "step %" PRId64 " from the %s checkpoint of step %" PRId64, step, rk, from);
            c->launch_step = from;
            c->replay_rank = rank;
            c->replay_step = step;
            c->replay_got = 0;
            double orig_loss = c->ev_nan_loss, orig_gn = c->ev_nan_gn;
            /* replaying from here on: launch() still takes the stopped job's last reports as
             * that job's progress; the replay's own come after it returns (its ranks say hello first) */
            int lrc = launch(c, path, step);
            c->replaying = 1;
            if (lrc == LS_OK) {
                int status = 0;
                for (double t = ls_now(); ls_now() - t < 60;) {
                    pump(c, 10);
                    if (waitpid(c->mpirun_pid, &status, WNOHANG) == c->mpirun_pid) {
                        c->mpirun_pid = 0;
                        break;
                    }
                }
                if (c->mpirun_pid) stop_job(c);
                /* deterministic training: the same values again mean the data or the model */
                if (c->replay_got)
                    repeat = same_value(orig_loss, c->replay_loss) && same_value(orig_gn, c->replay_gn);
                cJSON_AddNumberToObject(loc, "original_grad_norm", isfinite(orig_gn) ? orig_gn : -1);
                cJSON_AddNumberToObject(loc, "replayed_grad_norm", c->replay_got && isfinite(c->replay_gn) ? c->replay_gn : -1);
            }
            c->replaying = 0;
            for (int n = 0; n < c->n_nodes; n++) /* the replay's snapshots are not newer state */
                for (int k = 0; k < 2; k++)
                    if (c->node[n].held[k] >= step) c->node[n].held[k] = -1;
        }
        cJSON_AddStringToObject(loc, "verdict", repeat == 1   ? "repeats: the data or the model"
                                                : repeat == 0 ? "does not repeat: the node"
                                                              : "replay inconclusive: the node");
        f->loc = loc;
        if (repeat == 1 && kind == LS_FAULT_JUMP) {
            /* a real spike of this data: nothing to evict; training goes on from before it */
            f->t_localized = ls_wall_time();
            tl(c, "localize", "jump at step %" PRId64 " reproduces on replay: the data or the model, not a node; "
               "training continues", step);
            return 0;
        }
        if (repeat == 1) {
            f->t_localized = ls_wall_time();
            snprintf(c->diagnosis, sizeof c->diagnosis,
                     "%s at step %" PRId64 " repeats on replay: the data or the model is at fault, not a node; "
                     "stopped",
                     ls_fault_name(kind), step);
            save_last_good(c, step - 1);
            f->open = 0;
            return 1;
        }
        bad[nbad++] = rank;
    } else {
        stop_job(c);
        if (rank >= 0) bad[nbad++] = rank;
    }
    f->t_localized = ls_wall_time();
    plan_handled(c, kind, f->rank);
    f->node = nbad > 0 ? node_of_rank(c, bad[0]) : -1;
    if (f->node >= 0) {
        tl(c, "localize", "%s: rank %d on node %d (%.2f s)", ls_fault_name(kind), bad[0], f->node,
           f->t_localized - f->t_detect);
        /* evict every node holding a faulty rank (over-eviction is accepted) */
        int done[MAXN] = {0};
        for (int i = 0; i < nbad; i++) {
            int nd = node_of_rank(c, bad[i]);
            if (nd < 0 || done[nd]) continue;
            done[nd] = 1;
            if (evict_and_promote(c, f, nd) == LS_EBUSY) {
                if (interrupted) /* while it waited for a repair */
                    diagnose_interrupt(c);
                else
                    snprintf(c->diagnosis, sizeof c->diagnosis,
                             "standbys exhausted: node %d is faulty (%s on rank %d) and no warm standby is left; "
                             "the job is stopped with its last good checkpoint on disk",
                             nd, ls_fault_name(kind), bad[i]);
                save_last_good(c, limit);
                f->open = 0;
                return 1;
            }
        }
        set_peers(c);
    }
    return 0;
}

double ls_robust_backoff(double first_s, int failures) {
    if (failures < 1 || !(first_s > 0)) return 0;
    double b = first_s;
    for (int i = 1; i < failures && b < LS_ROBUST_BACKOFF_MAX_S; i++) b *= 2;
    return b < LS_ROBUST_BACKOFF_MAX_S ? b : LS_ROBUST_BACKOFF_MAX_S;
}

/* Relaunches from the newest good state, with back-off after failures that made no progress.
 * Returns 0 when relaunched, 1 when the restart limit stops the job (diagnosis set, last good
 * state saved), negative on error. */
static int relaunch(ctl *c, int64_t limit) {
    if (c->restarts >= c->o->max_restarts) {
        snprintf(c->diagnosis, sizeof c->diagnosis,
                 "restart limit reached (%d restarts, --max-restarts); the job is stopped with its last good "
                 "checkpoint on disk",
                 c->restarts);
        save_last_good(c, limit);
        return 1;
    }
    if (c->consecutive_fail > 0) {
        double b = ls_robust_backoff(c->o->backoff_s, c->consecutive_fail);
        tl(c, "backoff", "%.1f s before restart %d (no progress since the last one)", b, c->restarts + 1);
        for (double t = ls_now(); ls_now() - t < b;) pump(c, 20);
    }
    char path[2200], kind[16];
    int64_t s = resume_point(c, limit, path, sizeof path, kind);
    c->launch_step = s;
    c->restarts++;
    plan_rearm(c);
    fault_t *f = c->cur >= 0 ? &c->f[c->cur] : NULL;
    if (f && f->open) {
        snprintf(f->resumed_kind, sizeof f->resumed_kind, "%s", kind);
        f->resumed_step = s;
        f->t_relaunch = ls_wall_time();
    }
    tl(c, "relaunch", "restart %d from the %s checkpoint of step %" PRId64 "%s%s", c->restarts, kind, s,
       path[0] ? ": " : "", path);
    int rc = launch(c, path[0] ? path : NULL, 0);
    if (f && f->open) f->t_launched = c->launched_t;
    return rc < 0 ? -1 : 0;
}

/* A rank exited (or mpirun did): lets the news of the incident arrive before it is judged.
 * The other exits and the failing rank's own report come a moment later (0.15 s); when
 * mpirun noticed first, the agents' exit reports name the rank. Unless the rank was killed
 * by an injected crash or said it ran out of memory, the burst of exits is waited for (until
 * every rank is gone, or none came for 0.5 s): a rank whose update turned its parameters NaN
 * fails at its next step, its peers fail with it, and their exits may be reported before its
 * own last reports, which explain them. Those wait in its agent, so the 0.5 s count only once
 * every agent still holding a live rank has sent two heartbeats since the first exit (two
 * turns of its loop: a starved agent is not taken for a quiet one). At most 5 s (an agent
 * silent that long is lost anyway). */
static void settle_exit(ctl *c) {
    double t0 = ls_now();
    int base[MAXN];
    for (int n = 0; n < c->n_nodes; n++) base[n] = c->node[n].hbs;
    while (ls_now() - t0 < 0.15) pump(c, 10);
    for (;;) {
        int known = 0, gone = 0, heard = 1;
        for (int q = 0; q < c->ranks; q++) {
            known += c->rank_pid[q] > 0;
            gone += c->rank_pid[q] > 0 && c->rank_gone[q];
            int n = node_of_rank(c, q);
            if (c->rank_pid[q] > 0 && !c->rank_gone[q] && n >= 0 && c->node[n].hbs - base[n] < 2) heard = 0;
        }
        int r = c->ev_exit_rank, named = r >= 0 || c->ev_oom_rank >= 0;
        int explained = c->ev_oom_rank >= 0 || (r >= 0 && c->inj_times[LS_FAULT_CRASH][r] > 0) ||
                        (heard && ls_now() - (c->last_exit_t > t0 ? c->last_exit_t : t0) > 0.5);
        /* (no rank of this launch said hello: no agent knows one, none will report) */
        if (!known || gone == known || (named && explained) || c->ev_nan_rank >= 0 || ls_now() - t0 > 5) break;
        pump(c, 10);
    }
}

/* ---------------------------------------------------------------- main loop */

/* The value of a training option (the last occurrence wins, as in the train parser). */
static const char *arg_str(int argc, char **argv, const char *name) {
    size_t l = strlen(name);
    const char *v = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], name) && i + 1 < argc) v = argv[i + 1];
        if (!strncmp(argv[i], name, l) && argv[i][l] == '=') v = argv[i] + l + 1;
    }
    return v;
}

static int64_t arg_int(int argc, char **argv, const char *name, int64_t def) {
    const char *v = arg_str(argc, argv, name);
    return v ? atoll(v) : def;
}

void ls_robust_opts_defaults(ls_robust_opts *o) {
    memset(o, 0, sizeof *o);
    o->nodes = 2, o->ranks_per_node = 2, o->standby = 1;
    o->hang_timeout = 10;
    o->ckpt_every = 1, o->disk_every = 10, o->keep_disk = 2;
    o->max_restarts = 10, o->backoff_s = 0.5;
    o->jump_factor = 5;
    o->slow_window = 20, o->slow_factor = 2;
    o->status_bind = "127.0.0.1";
}

int ls_robust_opts_check(const ls_robust_opts *o) {
    if (o->nodes < 1 || o->nodes > 32) return ls_err(LS_EINVAL, "--nodes must be in [1, 32], got %d", o->nodes);
    if (o->ranks_per_node < 1 || o->ranks_per_node > MAXR / o->nodes) /* (a product would overflow) */
        return ls_err(LS_EINVAL, "--ranks-per-node must be >= 1 with at most %d ranks in all", MAXR);
    if (o->standby < 0 || o->standby > MAXN - o->nodes)
        return ls_err(LS_EINVAL, "--standby must be in [0, %d]", MAXN - o->nodes);
    if (!(o->hang_timeout > 0 && o->hang_timeout <= 86400)) return ls_err(LS_EINVAL, "--hang-timeout must be in (0, 86400] s");
    if (o->ckpt_every < 0 || o->disk_every < 0) return ls_err(LS_EINVAL, "--ckpt-every and --disk-every must be >= 0");
    if (o->max_restarts < 0) return ls_err(LS_EINVAL, "--max-restarts must be >= 0");
    if (!o->report) return ls_err(LS_EINVAL, "missing --report FILE");
    if (!*o->report) return ls_err(LS_EINVAL, "--report '': not a file path");
    if (ls_is_dir(o->report)) /* an output: LS_EIO (its directory may be made with the checkpoints') */
        return ls_err(LS_EIO, "--report %s is a directory", o->report);
    if (o->keep_disk < 1 || !(o->repair_s >= 0) || !(o->jump_factor >= 0) || o->slow_window < 0 ||
        !(o->slow_factor > 1))
        return ls_err(LS_EINVAL,
                      "--keep must be >= 1, --repair, --jump-factor and --slow-window >= 0, --slow-factor > 1");
    if (o->argc < 2) return ls_err(LS_EINVAL, "missing the training command after --: -- llmsys train ...");
    const char *p = o->argv[0], *slash = strrchr(p, '/');
    if (strcmp(slash ? slash + 1 : p, "llmsys") != 0 || strcmp(o->argv[1], "train") != 0)
        return ls_err(LS_EINVAL, "the command after -- must be `llmsys train ...`, got `%s %s`", p, o->argv[1]);
    for (int i = 2; i < o->argc; i++)
        if (!strncmp(o->argv[i], "--ranks", 7) || !strncmp(o->argv[i], "--robust-agent", 14))
            return ls_err(LS_EINVAL, "%.*s is set by robust run (--nodes x --ranks-per-node)",
                          (int)strcspn(o->argv[i], "="), o->argv[i]);
    if (arg_int(o->argc, o->argv, "--steps", -1) < 1)
        return ls_err(LS_EINVAL, "the training command needs --steps N (the run's end)");
    if (!arg_str(o->argc, o->argv, "--out")) return ls_err(LS_EINVAL, "the training command needs --out FILE");
    if (o->status_port < -1 || o->status_port > 65535) return ls_err(LS_EINVAL, "--status-port must be in [-1, 65535]");
    if (o->status_key && !o->status_key[0]) return ls_err(LS_EINVAL, "--status-key must not be empty");
    if (o->status_port) LS_TRY(lsr_status_check(o->status_bind, o->status_key));
    if (o->inject) { /* a malformed plan is a usage error, found before anything starts */
        ls_fault_plan p;
        LS_TRY(ls_fault_plan_load(o->inject, o->nodes * o->ranks_per_node, &p));
        ls_fault_plan_free(&p);
    }
    return LS_OK;
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void update_status(ctl *c, const char *state) {
    if (!c->status) return;
    lsr_status_view v;
    memset(&v, 0, sizeof v);
    for (int n = 0; n < c->n_nodes; n++) {
        v.nodes_active += c->node[n].state == NODE_ACTIVE;
        v.nodes_standby += c->node[n].state == NODE_STANDBY;
        v.nodes_evicted += c->node[n].state == NODE_EVICTED;
    }
    v.ranks = c->ranks;
    v.step = (long long)c->job_step;
    v.wall_s = ls_wall_time() - c->t0;
    v.ettr = v.wall_s > 0 ? c->productive_s / v.wall_s : 0;
    v.tokens_per_s = v.wall_s > 0 ? (double)c->best_step * c->tokens_per_step / v.wall_s : 0;
    for (int i = 0; i < c->nf; i++) v.faults[c->f[i].kind]++;
    v.restarts = c->restarts;
    snprintf(v.state, sizeof v.state, "%s", state);
    lsr_status_update(c->status, &v);
}

static void on_interrupt(int sig) { interrupted = sig; }

static int run_loop(ctl *c) {
    const ls_robust_opts *o = c->o;
    double last_status = 0;
    for (;;) {
        pump(c, 10);
        if (interrupted) {
            tl(c, "stop", "signal %d received", (int)interrupted);
            stop_job(c);
            diagnose_interrupt(c);
            save_last_good(c, INT64_MAX);
            return 1;
        }
        double now = ls_wall_time();
        if (ls_now() - last_status > 0.5) {
            update_status(c, "training");
            last_status = ls_now();
        }
        /* time- and step-triggered injections the controller executes */
        for (int i = 0; i < c->plan.n; i++) {
            const ls_fault_spec *f = &c->plan.f[i];
            if (c->plan_done[i] == 2 || (c->plan_flags[i] & PLAN_REARMED)) continue;
            int due = f->step >= 1 ? (f->kind == LS_FAULT_CORRUPT_CKPT && c->job_step >= f->step)
                                   : (now - c->t0 >= f->time);
            if (!due) continue;
            if (f->step < 1 && c->first_step_t <= 0 && !(c->plan_flags[i] & PLAN_DEFER_NOTED)) {
                /* due while the job starts or recovers: deferred to the first step it completes */
                c->plan_flags[i] |= PLAN_DEFER_NOTED;
                tl(c, "defer", "%s on rank %d due at %.1f s while the job is not training: fires at its first step",
                   ls_fault_name(f->kind), f->rank, f->time);
            }
            if (f->kind == LS_FAULT_CORRUPT_CKPT) {
                corrupt_newest(c);
                c->plan_done[i] = 2;
            } else if (f->step < 1 && c->first_step_t > 0) {
                inject_now(c, i, now);
            }
        }
        rearm_due(c, now);
        repair_due(c);
        /* the pre-started world for the next restart: once this launch trains; one that died is
         * replaced (twice at most) */
        int sst = 0;
        if (c->spare_pid > 0 && waitpid(c->spare_pid, &sst, WNOHANG) == c->spare_pid) {
            c->spare_pid = 0;
            c->spare_failures++;
            tl(c, "warn", "pre-started world %d exited (%d)", c->spare_gen, WIFEXITED(sst) ? WEXITSTATUS(sst) : -1);
        }
        if (c->first_step_t > 0 && c->job_step < c->end_step) spare_start(c);
        /* agents that stopped answering */
        for (int n = 0; n < c->n_nodes; n++) {
            node_t *nd = &c->node[n];
            if ((nd->state == NODE_ACTIVE || nd->state == NODE_STANDBY) && ls_now() - nd->last_hb > 3) {
                int was_active = nd->state == NODE_ACTIVE;
                nd->state = NODE_LOST;
                tl(c, "detect", "agent of node %d silent for 3 s: node lost", n);
                if (was_active) {
                    int rank = -1;
                    for (int s = 0; s < o->nodes; s++)
                        if (c->slot_node[s] == n) rank = s * o->ranks_per_node;
                    if (handle_fault(c, LS_FAULT_AGENT, rank, c->job_step, ls_wall_time(), "agent lost")) return 1;
                    int rr = relaunch(c, INT64_MAX);
                    if (rr) return rr < 0 ? -1 : 1; /* 1: the restart limit */
                }
            }
        }
        int status = 0;
        int exited = c->mpirun_pid > 0 && waitpid(c->mpirun_pid, &status, WNOHANG) == c->mpirun_pid;
        if (exited) c->mpirun_pid = 0;
        int all_done = c->job_step >= c->end_step;
        int exit_ev = c->ev_exit_rank >= 0 || c->ev_oom_rank >= 0 || (exited && !all_done);
        int pending = c->ev_nan_rank >= 0;
        if (exit_ev && !pending) {
            settle_exit(c);
            all_done = c->job_step >= c->end_step; /* the last reports may come after mpirun's exit */
        }
        if (exited && all_done && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            if (c->cur >= 0) c->f[c->cur].open = 0;
            tl(c, "complete", "step %" PRId64 " reached; final checkpoint %s", c->job_step, c->out);
            return 0;
        }
        int kind = 0, rank = -1;
        int64_t step = c->job_step;
        double td = now;
        char detail[256] = "";
        /* a NaN or jump reported while settling explains the exits; a slow rank does not */
        if (c->ev_nan_rank >= 0 && (pending || c->ev_nan_kind != LS_FAULT_SLOW)) {
            kind = c->ev_nan_kind;
            rank = c->ev_nan_rank;
            step = c->ev_nan_step;
            td = c->ev_nan_time;
            snprintf(detail, sizeof detail, "%s",
                     kind == LS_FAULT_NAN    ? "non-finite loss or gradient norm"
                     : kind == LS_FAULT_JUMP ? "loss or gradient norm jumped above 5x its running median"
                                             : "compute time an outlier over 3 windows");
            if (kind == LS_FAULT_SLOW)
                snprintf(detail, sizeof detail, "entered the all-reduce %.1fx later than the median rank, 3 windows running", c->slow.last_ratio);
        } else if (exit_ev) {
            if (c->ev_oom_rank >= 0) {
                kind = LS_FAULT_OOM;
                rank = c->ev_oom_rank;
                snprintf(detail, sizeof detail, "out of memory");
            } else {
                kind = LS_FAULT_CRASH;
                rank = c->ev_exit_rank;
                snprintf(detail, sizeof detail, "process %s", rank >= 0 ? c->ev_exit_status : "mpirun exited");
                if (rank < 0 && exited)
                    snprintf(detail, sizeof detail, "mpirun exited with %d before the end",
                             WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            }
            if (c->first_step_t <= 0 && c->best_step == 0 && c->launches == 1 && !c->plan.n) {
                stop_job(c);
                show_err_tail(c);
                snprintf(c->diagnosis, sizeof c->diagnosis,
                         "the training command failed before its first step; not restarted");
                return 2;
            }
        } else if (c->first_step_t > 0 && now - c->last_progress > o->hang_timeout) {
            kind = LS_FAULT_HANG;
            snprintf(detail, sizeof detail, "no step for %.1f s", now - c->last_progress);
            rank = -1; /* named by the stacks */
        } else if (c->first_step_t <= 0 && now - c->launch_t > o->hang_timeout + 60) {
            kind = LS_FAULT_HANG;
            snprintf(detail, sizeof detail, "no first step %.0f s after launch", now - c->launch_t);
            rank = 0;
        }
        if (!kind) continue;
        int progressed = c->first_step_t > 0;
        c->consecutive_fail = progressed ? 0 : c->consecutive_fail + 1;
        int64_t limit = kind == LS_FAULT_NAN || kind == LS_FAULT_JUMP ? step - 1 : INT64_MAX;
        if (handle_fault(c, kind, rank, step, td, detail)) return 1;
        int rr = relaunch(c, limit);
        if (rr) return rr < 0 ? -1 : 1; /* 1: the restart limit */
    }
}

static int write_report(ctl *c, ls_robust_result *res) {
    const ls_robust_opts *o = c->o;
    double wall = ls_wall_time() - c->t0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "command", "robust run");
    cJSON_AddNumberToObject(j, "nodes", o->nodes);
    cJSON_AddNumberToObject(j, "ranks_per_node", o->ranks_per_node);
    cJSON_AddNumberToObject(j, "standby", o->standby);
    cJSON_AddNumberToObject(j, "hang_timeout_s", o->hang_timeout);
    cJSON_AddNumberToObject(j, "ckpt_every", o->ckpt_every);
    cJSON_AddNumberToObject(j, "disk_every", o->disk_every);
    cJSON *cmd = cJSON_AddArrayToObject(j, "train_command");
    for (int i = 0; i < o->argc; i++) cJSON_AddItemToArray(cmd, cJSON_CreateString(o->argv[i]));
    cJSON_AddBoolToObject(j, "completed", res->completed);
    if (c->diagnosis[0]) cJSON_AddStringToObject(j, "diagnosis", c->diagnosis);
    cJSON_AddNumberToObject(j, "end_step", (double)c->job_step);
    cJSON_AddNumberToObject(j, "target_step", (double)c->end_step);
    cJSON_AddNumberToObject(j, "wall_s", wall);
    cJSON_AddNumberToObject(j, "productive_s", c->productive_s);
    cJSON_AddNumberToObject(j, "ettr", wall > 0 ? c->productive_s / wall : 0);
    cJSON_AddNumberToObject(j, "restarts", c->restarts);
    cJSON_AddNumberToObject(j, "launches", c->launches);
    if (c->slow_method[0]) cJSON_AddStringToObject(j, "slow_method", c->slow_method);
    cJSON_AddNumberToObject(j, "slow_last_ratio", c->slow.last_ratio);
    cJSON *ck = cJSON_AddObjectToObject(j, "checkpoint_blocking_s");
    cJSON_AddNumberToObject(ck, "memory_mean", c->snap_n ? c->snap_s_sum / c->snap_n : 0);
    cJSON_AddNumberToObject(ck, "memory_max", c->snap_s_max);
    cJSON_AddNumberToObject(ck, "memory_count", c->snap_n);
    cJSON_AddNumberToObject(ck, "disk_mean", c->disk_n ? c->disk_s_sum / c->disk_n : 0);
    cJSON_AddNumberToObject(ck, "disk_max", c->disk_s_max);
    cJSON_AddNumberToObject(ck, "disk_count", c->disk_n);
    cJSON *fa = cJSON_AddArrayToObject(j, "faults");
    double lost_total = 0;
    for (int i = 0; i < c->nf; i++) {
        fault_t *f = &c->f[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "kind", ls_fault_name(f->kind));
        cJSON_AddNumberToObject(e, "rank", f->rank);
        cJSON_AddNumberToObject(e, "node", f->node);
        cJSON_AddNumberToObject(e, "step", (double)f->step);
        cJSON_AddBoolToObject(e, "injected", f->injected);
        cJSON_AddStringToObject(e, "detail", f->detail);
        cJSON_AddNumberToObject(e, "at_s", f->t_fault - c->t0);
        double det = f->t_detect - f->t_fault, loc = f->t_localized > 0 ? f->t_localized - f->t_detect : 0;
        double rst = f->t_resumed > 0 ? f->t_resumed - f->t_localized : 0;
        cJSON_AddNumberToObject(e, "detection_s", det);
        cJSON_AddNumberToObject(e, "localization_s", loc);
        cJSON_AddNumberToObject(e, "restart_s", rst);
        if (f->t_resumed > 0 && f->t_ready >= f->t_launched && f->t_launched >= f->t_relaunch) {
            /* localized -> resume point ready (evict, promote, back-off, snapshot materialised or
             * disk checkpoint chosen) -> ranks started or promoted -> all connected with the state
             * loaded -> first step done */
            cJSON *rp = cJSON_AddObjectToObject(e, "restart_parts_s");
            cJSON_AddNumberToObject(rp, "resume_point", f->t_relaunch - f->t_localized);
            cJSON_AddNumberToObject(rp, "launch", f->t_launched - f->t_relaunch);
            cJSON_AddNumberToObject(rp, "load_connect", f->t_ready - f->t_launched);
            cJSON_AddNumberToObject(rp, "first_step", f->t_resumed - f->t_ready);
        }
        cJSON_AddNumberToObject(e, "recompute_s", f->recompute_s);
        cJSON_AddNumberToObject(e, "recomputed_steps", f->recomputed_steps);
        cJSON_AddNumberToObject(e, "lost_s", det + loc + rst + f->recompute_s);
        lost_total += det + loc + rst + f->recompute_s;
        cJSON_AddNumberToObject(e, "evicted_node", f->evicted);
        cJSON_AddNumberToObject(e, "promoted_node", f->promoted);
        if (f->resumed_kind[0]) {
            cJSON_AddStringToObject(e, "resumed_from", f->resumed_kind);
            cJSON_AddNumberToObject(e, "resumed_step", (double)f->resumed_step);
        }
        if (f->loc) {
            cJSON_AddItemToObject(e, "localization", f->loc);
            f->loc = NULL;
        }
        cJSON_AddItemToArray(fa, e);
    }
    cJSON_AddNumberToObject(j, "lost_to_faults_s", lost_total);
    cJSON_AddNumberToObject(j, "other_overhead_s", wall - c->productive_s - lost_total);
    cJSON_AddNumberToObject(j, "recomputed_loss_mismatches", c->recompute_mismatch);
    cJSON *ns = cJSON_AddArrayToObject(j, "node_states");
    for (int n = 0; n < c->n_nodes; n++) cJSON_AddItemToArray(ns, cJSON_CreateString(node_state_name[c->node[n].state]));
    cJSON *ls = cJSON_AddArrayToObject(j, "losses");
    cJSON *lb = cJSON_AddArrayToObject(j, "loss_bits");
    for (int64_t s = 0; s < c->best_step; s++) {
        cJSON_AddItemToArray(ls, cJSON_CreateNumber(c->loss_of[s]));
        cJSON_AddItemToArray(lb, cJSON_CreateString(c->lbits + 9 * s));
    }
    cJSON_AddItemToObject(j, "timeline", c->timeline);
    c->timeline = NULL;
    int rc = ls_json_write_file(o->report, j);
    cJSON_Delete(j);
    res->ettr = wall > 0 ? c->productive_s / wall : 0;
    res->wall_s = wall;
    return rc;
}

int ls_robust_run(const ls_robust_opts *o, ls_robust_result *res) {
    memset(res, 0, sizeof *res);
    LS_TRY(ls_robust_opts_check(o));
    ctl *c = calloc(1, sizeof *c);
    if (!c) return ls_err(LS_ENOMEM, "out of memory");
    c->o = o;
    c->t0 = ls_wall_time();
    struct sigaction sa = {.sa_handler = on_interrupt}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    c->ranks = o->nodes * o->ranks_per_node;
    c->n_nodes = o->nodes + o->standby;
    c->end_step = arg_int(o->argc, o->argv, "--steps", 0);
    int64_t stop_at = arg_int(o->argc, o->argv, "--stop-at", 0);
    if (stop_at > 0 && stop_at < c->end_step) c->end_step = stop_at;
    snprintf(c->out, sizeof c->out, "%s", arg_str(o->argc, o->argv, "--out"));
    c->tokens_per_step = (double)arg_int(o->argc, o->argv, "--batch", 8) * (double)arg_int(o->argc, o->argv, "--seq", 64);
    c->timeline = cJSON_CreateArray();
    c->loss_of = malloc((size_t)c->end_step * sizeof(double));
    c->lbits = calloc((size_t)c->end_step, 9);
    c->ev_exit_rank = c->ev_oom_rank = c->ev_nan_rank = -1;
    c->cur = -1;
    int rc = c->loss_of && c->lbits && c->timeline ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    for (int64_t s = 0; rc == LS_OK && s < c->end_step; s++) c->loss_of[s] = NAN;
    if (rc == LS_OK && o->inject) rc = ls_fault_plan_load(o->inject, c->ranks, &c->plan);
    if (rc == LS_OK) {
        c->plan_done = calloc((size_t)c->plan.n + 1, sizeof(int));
        c->plan_flags = calloc((size_t)c->plan.n + 1, sizeof(int));
        c->plan_at = calloc((size_t)c->plan.n + 1, sizeof(int64_t));
        if (!c->plan_done || !c->plan_flags || !c->plan_at) rc = ls_err(LS_ENOMEM, "out of memory");
    }
    if (rc == LS_OK) {
        if (o->ckpt_dir) {
            snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%s", o->ckpt_dir);
        } else {
            snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%s", o->report);
            char *dot = strrchr(c->ckpt_dir, '.');
            if (dot && !strchr(dot, '/')) *dot = '\0';
            strncat(c->ckpt_dir, ".ckpt", sizeof c->ckpt_dir - strlen(c->ckpt_dir) - 1);
        }
        snprintf(c->shm_dir, sizeof c->shm_dir, "/dev/shm/llmsys-robust-%d", (int)getpid());
        rc = ls_mkdirs(c->ckpt_dir);
        if (rc == LS_OK) rc = ls_out_path_check("report", o->report); /* before the job, not after it */
        if (rc == LS_OK) rc = ls_mkdirs(c->shm_dir);
    }
    c->zctx = zmq_ctx_new();
    if (rc == LS_OK) rc = lsr_socket(c->zctx, ZMQ_ROUTER, NULL, "tcp://127.0.0.1:*", NULL, &c->rt, c->ep);
    if (rc == LS_OK && o->status_port != 0) {
        int port = 0;
        rc =
            lsr_status_start(&c->status, o->status_bind, o->status_port < 0 ? 0 : o->status_port, o->status_key, &port);
        char uh[80];
        if (rc == LS_OK)
            tl(c, "status", "http://%s:%d/ (and /metrics)", ls_url_host(o->status_bind, uh, sizeof uh), port);
    }
    /* agents: the first `nodes` hold ranks, the rest are warm standbys */
    for (int n = 0; rc == LS_OK && n < c->n_nodes; n++) {
        c->node[n].state = n < o->nodes ? NODE_ACTIVE : NODE_STANDBY;
        c->node[n].held[0] = c->node[n].held[1] = -1;
        if (n < o->nodes) c->slot_node[n] = n;
        rc = start_agent(c, n);
    }
    for (double t = ls_now(); rc == LS_OK;) {
        pump(c, 20);
        int all = 1;
        for (int n = 0; n < c->n_nodes; n++) all &= c->node[n].registered;
        if (all) break;
        if (ls_now() - t > 20) rc = ls_err(LS_ETIMEDOUT, "agents did not register within 20 s");
    }
    int loop = -1;
    if (rc == LS_OK) {
        tl(c, "start", "%d nodes x %d ranks + %d warm standby, steps to %" PRId64, o->nodes, o->ranks_per_node,
           o->standby, c->end_step);
        set_peers(c);
        pump(c, 50);
        const char *user_resume = arg_str(o->argc, o->argv, "--resume");
        c->launch_step = 0;
        if (user_resume) {
            ls_st_file *f;
            ls_model_config mc;
            if (ls_ckpt_open(user_resume, &f, &mc) == LS_OK) {
                const char *s = ls_st_meta(f, "llmsys.step");
                c->launch_step = c->best_step = s ? atoll(s) : 0;
                ls_st_close(f);
            }
        }
        c->job_step = c->heard_step = c->launch_step;
        rc = launch(c, NULL, 0);
        if (rc == LS_OK) loop = run_loop(c);
        if (loop < 0) rc = -1;
    }
    if (c->mpirun_pid > 0) stop_job(c);
    spare_kill(c);
    res->completed = loop == 0;
    if (loop == 0) {
        /* stop_job only when something is still running; reap the last launch */
    }
    update_status(c, res->completed ? "completed" : "stopped");
    for (int n = 0; n < c->n_nodes; n++)
        if (c->node[n].pid > 0) send_node(c, n, msg("quit"));
    for (int n = 0; n < c->n_nodes; n++)
        if (c->node[n].pid > 0) {
            int st;
            int done = 0;
            for (double t = ls_now(); ls_now() - t < 3 && !done;) {
                done = waitpid(c->node[n].pid, &st, WNOHANG) == c->node[n].pid;
                if (!done) ls_sleep_ms(10);
            }
            if (!done) {
                kill(c->node[n].pid, SIGKILL);
                waitpid(c->node[n].pid, &st, 0);
            }
        }
    res->faults = c->nf;
    res->restarts = c->restarts;
    res->end_step = c->job_step;
    snprintf(res->diagnosis, sizeof res->diagnosis, "%s", c->diagnosis);
    if (c->timeline && (rc == LS_OK || loop > 0)) {
        int wrc = write_report(c, res); /* a report that could not be written fails the run */
        if (rc == LS_OK)
            rc = wrc;
        else if (wrc < 0)
            fprintf(stderr, "llmsys robust: %s\n", ls_errmsg());
    }
    if (loop == 2) rc = ls_err(LS_EINVAL, "%s", c->diagnosis);
    lsr_status_stop(c->status);
    if (c->shm_dir[0]) rm_tree(c->shm_dir);
    cJSON_Delete(c->timeline);
    cJSON_Delete(c->stacks);
    for (int i = 0; i < c->nf; i++) cJSON_Delete(c->f[i].loc);
    ls_slow_free(&c->slow);
    ls_fault_plan_free(&c->plan);
    free(c->plan_done);
    free(c->plan_flags);
    free(c->plan_at);
    free(c->loss_of);
    free(c->lbits);
    if (c->rt) zmq_close(c->rt);
    if (c->zctx) zmq_ctx_term(c->zctx);
    free(c);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
