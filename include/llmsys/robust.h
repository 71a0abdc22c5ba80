/*
 * robust.h - keeping an MPI training job going through faults with nobody watching:
 * a controller and per-node agents (separate processes over ZeroMQ) that detect crashes,
 * hangs, NaN/Inf or jumping losses and slow ranks, localize them (stack dumps of every
 * rank grouped by shape; a replay of the failing step for NaN), evict the faulty node,
 * promote a warm standby and resume from an in-memory checkpoint, with the lost time
 * accounted as ETTR (effective training time ratio). After ByteRobust (Wu et al., SOSP'25,
 * https://arxiv.org/abs/2509.16293).
 *
 * Processes of `llmsys robust run --nodes 2 --ranks-per-node 2 --standby 1 -- llmsys train ...`:
 *
 *     controller ──ZeroMQ── agent 0 (node 0: ranks 0,1) ──ZeroMQ── trainer ranks (hook)
 *        │         └─────── agent 1 (node 1: ranks 2,3)
 *        │         └─────── agent 2 (standby: no ranks, holds checkpoint replicas)
 *        └── mpirun -np 4 llmsys train ... --robust-agent EP0,EP1
 *
 * Each trainer rank reports every step to its node's agent through the training-loop hook
 * (ls_robust_client_*), writes its state into shared memory every ckpt_every steps (the
 * agent copies it to a peer agent), and rank 0 writes a disk checkpoint every disk_every
 * steps. The pure parts (detectors, stack grouping, injection plans, the cluster-scale
 * simulator) are usable and tested on their own.
 */
#ifndef LLMSYS_ROBUST_H
#define LLMSYS_ROBUST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "llmsys/core.h"
#include "llmsys/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- fault kinds */

typedef enum {
    LS_FAULT_NONE = 0,
    LS_FAULT_CRASH = 1,        /* a rank exited or was killed */
    LS_FAULT_HANG = 2,         /* no step progress for the hang timeout */
    LS_FAULT_NAN = 3,          /* NaN/Inf loss or gradient norm */
    LS_FAULT_JUMP = 4,         /* loss or gradient norm x factor above its running median */
    LS_FAULT_SLOW = 5,         /* one rank's compute time an outlier over 3 windows */
    LS_FAULT_OOM = 6,          /* a rank ran out of memory */
    LS_FAULT_CORRUPT_CKPT = 7, /* a disk checkpoint failed its checksum */
    LS_FAULT_AGENT = 8,        /* an agent stopped answering */
    LS_FAULT_COUNT_ = 9
} ls_fault_kind;

/* "crash", "hang", ...; "none" for 0. */
const char *ls_fault_name(int kind);
/* The kind named s (as ls_fault_name, also "corrupt-ckpt"), or -1. */
int ls_fault_parse(const char *s);

/* ---------------------------------------------------------------- trainer snapshots */

/* In-memory checkpoints: a trainer's full state (parameters, AdamW moments, step, model
 * and training settings) as one flat buffer with a magic, version and XXH3 checksum;
 * writing one is a memcpy, so training blocks for milliseconds instead of a disk save. */
typedef struct {
    int64_t step;
    size_t params; /* parameter count */
    size_t bytes;  /* total size of the snapshot */
} ls_snapshot_info;

/* Bytes a snapshot of t needs. */
size_t ls_snapshot_size(ls_trainer *t);
/* Writes t's state into buf (cap bytes, >= ls_snapshot_size), sealed with its checksum;
 * *len receives the size. */
int ls_snapshot_write(ls_trainer *t, void *buf, size_t cap, size_t *len);
/* The blocking part only: copies t's state into buf (marked writing, then copied) without the
 * checksum; a reader seals its own consistent copy (ls_snapshot_seal). */
int ls_snapshot_copy(ls_trainer *t, void *buf, size_t cap, size_t *len);
/* Adds the checksum to a copied snapshot (LS_ESTATE while it is being written); info (may be
 * NULL) is filled. A sealed one is only checked. */
int ls_snapshot_seal(void *buf, size_t len, ls_snapshot_info *info);
/* 1 with *step when buf holds a complete (copied or sealed) snapshot, else 0. */
int ls_snapshot_peek(const void *buf, size_t len, int64_t *step);
/* Checks magic, version, sizes and checksum of a snapshot; info (may be NULL) is filled. */
int ls_snapshot_check(const void *buf, size_t len, ls_snapshot_info *info);
/* Writes a checked snapshot as a resumable checkpoint (ls_ckpt_save with optimizer state,
 * atomically) at path: `llmsys train --resume path` continues exactly where it was. */
int ls_snapshot_to_ckpt(const void *buf, size_t len, const char *path);

/* ---------------------------------------------------------------- detectors */

/* What each rank reports per step. compute_s excludes time spent waiting for other ranks
 * in the all-reduce, so a slow rank stands out although synchronous steps take equally long. */
typedef struct {
    int rank;
    int64_t step;
    float loss, grad_norm;
    double step_s, compute_s;
    double time; /* wall-clock seconds (ls_wall_time) when the step completed */
} ls_robust_step;

/* Numeric health of a series (loss or gradient norm): NaN/Inf, or a jump of factor x
 * above the median of the last `window` finite values (after min_history values). */
typedef struct {
    double factor;   /* 5 (ByteRobust); <= 0 disables jump detection */
    int window;      /* 20 */
    int min_history; /* 8 */
    double hist[64];
    int n, head;
} ls_jump_detector;

void ls_jump_init(ls_jump_detector *j, double factor, int window, int min_history);
/* Feeds one value: LS_FAULT_NAN for NaN/Inf, LS_FAULT_JUMP for a jump, else LS_FAULT_NONE
 * (and the value joins the history). */
int ls_jump_feed(ls_jump_detector *j, double v);

/* Slow ranks, robust to load on the whole host: per window of `window` steps, each rank's
 * delay at every step is compared with the median of the other ranks' delays at that step. A
 * rank is an outlier in the window when its mean delay is `factor` x the others' median, the
 * mean excess is at least min_excess_s (1 ms), and it was the slowest rank in at least half of
 * the steps; the same rank an outlier in `windows` consecutive windows is reported. Reports of
 * one step must be fed for every rank (a step some rank misses is not judged). */
#define LS_SLOW_MAX_RANKS 256
typedef struct {
    int ranks, window, windows;
    double factor;
    double min_excess_s;                  /* minimum effect: mean excess over the others (1e-3) */
    int64_t win_start;                    /* first step of the current window, -1 before the first */
    double *t;                            /* ranks x window compute times of the current window */
    int *cnt;                             /* samples per rank in the current window */
    int streak_rank, streak;              /* current outlier and its consecutive windows */
    double last_ratio;                    /* the slowest rank's mean delay / the others' median, last window */
} ls_slow_detector;

int ls_slow_init(ls_slow_detector *s, int ranks, int window, int windows, double factor);
void ls_slow_free(ls_slow_detector *s);
/* Feeds one report; returns the slow rank (>= 0) once its streak reaches `windows`, else -1. */
int ls_slow_feed(ls_slow_detector *s, const ls_robust_step *r);

/* ---------------------------------------------------------------- stack grouping */

/* Stack dumps (eu-stack text) of ranks, normalised to the main thread's call chain from
 * main() inward up to the first frame outside the program (the library entry point it
 * waits or computes in), without addresses or compiler suffixes, then grouped. */
typedef struct {
    int n_groups;
    int group_of[LS_SLOW_MAX_RANKS]; /* rank -> group index */
    int size[LS_SLOW_MAX_RANKS];     /* ranks per group */
    char *sig[LS_SLOW_MAX_RANKS];    /* normalised signature per group (malloc'd) */
    int outlier;                     /* the smallest group when it is unique and below half, else -1 */
} ls_stack_groups;

/* Normalised signature of one eu-stack dump (malloc'd, " <- "-joined frames innermost
 * first; "" when no frame parsed). exe_hint (may be NULL) names the program's module. */
char *ls_stack_normalise(const char *text, const char *exe_hint);
/* Groups n dumps (texts[i] may be NULL: "no stack", its own group). */
int ls_stack_group(const char *const *texts, int n, const char *exe_hint, ls_stack_groups *g);
void ls_stack_groups_free(ls_stack_groups *g);
/* Runs `eu-stack -p pid` (timeout seconds); *text is malloc'd output. */
int ls_stack_dump(int pid, double timeout, char **text);

/* ---------------------------------------------------------------- injection plans */

/* A fault to inject: at a step (reports of `rank` reaching it) or a time after launch. */
typedef struct {
    int kind;     /* LS_FAULT_CRASH, HANG, NAN, SLOW, OOM, CORRUPT_CKPT */
    int64_t step; /* >= 1, or -1 when time is used */
    double time;  /* seconds after the run started, or < 0 */
    int rank;     /* target rank (ignored by corrupt-ckpt) */
    double share; /* slow: share of a core left to the rank, (0, 1) (default 0.25) */
    int sticky;   /* nan: the data itself is bad (the replay repeats it) */
} ls_fault_spec;

typedef struct {
    int n;
    ls_fault_spec *f; /* malloc'd */
} ls_fault_plan;

/* Parses {"faults": [{"kind": "crash", "step": 5, "rank": 1}, ...]}; errors name the file,
 * the entry and the field. ranks bounds the rank fields (0: unchecked). */
int ls_fault_plan_parse(const char *json, size_t len, const char *what, int ranks, ls_fault_plan *p);
int ls_fault_plan_load(const char *path, int ranks, ls_fault_plan *p);
void ls_fault_plan_free(ls_fault_plan *p);

/* ---------------------------------------------------------------- trainer side (hook) */

/* The trainer's connection to its node agent. Open with the comma-separated agent
 * endpoints (node k serves ranks [k*R, (k+1)*R), R = ranks / nodes): says hello, receives
 * the checkpoint cadence, shared-memory paths and any injection meant for this rank. */
typedef struct ls_robust_client ls_robust_client;

int ls_robust_client_open(ls_robust_client **out, const char *endpoints, int rank, int ranks);
void ls_robust_client_close(ls_robust_client *c);
/* Before the optimizer update of step (0-based index of the step being taken): poisons
 * a gradient with NaN when an injection says so. */
int ls_robust_client_before_update(ls_robust_client *c, ls_trainer *t, int64_t step);
/* After a completed step: reports it, writes the in-memory snapshot and (rank 0, collective)
 * the periodic disk checkpoint. Returns < 0 to fail the run (injected OOM). */
int ls_robust_client_after_step(ls_robust_client *c, ls_trainer *t, int64_t step, float loss, float grad_norm,
                                double step_s);
/* A rank of a pre-started (parked) world, `llmsys train --robust-park ENDPOINT,GEN`: reports
 * to the controller and blocks until it is promoted; resume and agents receive the checkpoint
 * to resume from and the agent endpoints (static storage, for ls_robust_client_open). */
int ls_robust_park(const char *spec, int rank, const char **resume, const char **agents);
/* A training job under `llmsys robust run` (`train --robust-agent EPS`, `--robust-park EP,GEN`):
 * every step is reported to this node's agent at agent; a pre-started world first waits at park
 * for its promotion, which names the agents. */
typedef struct {
    const char *agent, *park;
    ls_robust_client *cl;
} ls_robust_train;
/* Sets j's prepare/attach/detach so that it runs as r says (nothing when r names neither); r
 * outlives the job. */
void ls_robust_train_hooks(ls_train_job *j, ls_robust_train *r);

/* ---------------------------------------------------------------- agent */

typedef struct {
    int id;
    const char *controller; /* tcp://host:port of the controller */
    const char *host;       /* this node's host name (localhost here) */
    const char *run_dir;    /* shared-memory directory for this run (under /dev/shm) */
    double grace_s;         /* controller silent this long: stop the ranks, exit (default 5) */
} ls_agent_opts;

/* Runs an agent until the controller says quit or is lost (then its ranks are stopped
 * after the grace period). */
int ls_agent_run(const ls_agent_opts *o);

/* ---------------------------------------------------------------- controller */

typedef struct {
    int nodes, ranks_per_node, standby;
    double hang_timeout;  /* seconds without progress after the first step (10) */
    int ckpt_every;       /* in-memory snapshot period in steps (1; 0 = off: disk only) */
    int disk_every;       /* disk checkpoint period in steps (default 10) */
    int keep_disk;        /* disk checkpoints kept (2) */
    int max_restarts;     /* (10) */
    double repair_s;      /* an evicted node rejoins the standbys after this (0: never) */
    int cold;             /* no standby left: start a new node and resume from disk (requeue) */
    int no_prestart;      /* no pre-started world: every restart starts a fresh mpirun */
    double backoff_s;     /* first back-off after a failed restart (0.5; ls_robust_backoff) */
    double jump_factor;   /* 5; 0 = off */
    int slow_window;      /* steps per slow-rank window (20) */
    double slow_factor;   /* 2 */
    const char *inject;   /* plan file or NULL */
    const char *report;   /* JSON report path */
    const char *ckpt_dir; /* disk checkpoints (default <report>.ckpt) */
    const char *self;     /* path of the llmsys binary (agents) */
    int status_port;      /* 0: no status server; -1: any free port */
    const char *status_bind; /* 127.0.0.1; another address needs status_key */
    const char *status_key;  /* non-NULL: the status page answers only "Authorization: Bearer KEY" */
    int quiet;            /* no progress lines on stderr */
    int argc;             /* the training command: "llmsys train ..." or "<self> train ..." */
    char **argv;
} ls_robust_opts;

void ls_robust_opts_defaults(ls_robust_opts *o);
/* Validates o (the message names the flag); the training command must be `llmsys train`. */
int ls_robust_opts_check(const ls_robust_opts *o);

typedef struct {
    int completed;     /* the job reached its last step */
    int faults;        /* faults detected */
    int restarts;      /* relaunches */
    double ettr;       /* productive / wall */
    double wall_s;
    int64_t end_step;
    char diagnosis[512]; /* why it stopped, when it did not complete */
} ls_robust_result;

/* Seconds waited before a restart that follows `failures` consecutive restarts without
 * progress: first_s, doubling, at most LS_ROBUST_BACKOFF_MAX_S; 0 when failures < 1. */
#define LS_ROBUST_BACKOFF_MAX_S 8.0
double ls_robust_backoff(double first_s, int failures);
/* Runs the supervised job to its end or until it cannot be recovered; writes the report. */
int ls_robust_run(const ls_robust_opts *o, ls_robust_result *r);
/* Prints the fault table and the wall/productive/ETTR line of a run's JSON report to f. */
int ls_robust_print_summary(const char *report, FILE *f);
/* The demo scenario under workdir/robust: 4 ranks on 2 nodes + 1 standby, a crash, a hang and a
 * NaN injected; prints the timeline, the fault table and the simulator's view to f. *ok is 1
 * when the job completed with all three faults recovered. self: the llmsys binary. */
int ls_robust_demo(const char *workdir, const char *self, int quick, FILE *f, int *ok);

/* ---------------------------------------------------------------- simulator */

typedef enum { LS_SIM_DISK = 0, LS_SIM_MEMORY = 1, LS_SIM_STANDBY = 2 } ls_sim_policy;

typedef struct {
    int gpus, gpus_per_node;
    double days;
    int policy;
    double fail_per_1000_node_days; /* failure rate; <= 0: from interruptions below */
    double step_s;                  /* training step time (s) */
    double ckpt_bytes;              /* full training state (bytes), sharded over nodes */
    double disk_GBps;               /* per-node write/read bandwidth to storage */
    double host_GBps;               /* per-node device-to-host copy bandwidth */
    double disk_interval_s;         /* disk checkpoint period; <= 0: Young's optimum */
    double requeue_s;               /* cold restart: reschedule, start processes, init comms */
    double warm_restart_s;          /* warm standby: relaunch on a ready machine */
    int standbys;                   /* warm standby machines */
    double repair_s;                /* an evicted machine returns to the pool after this */
    double detect_scale;            /* multiplies the per-kind detection times (1) */
    uint64_t seed;
    int trials;                     /* independent runs averaged (1) */
    const double *fail_at;          /* n_fail_at > 0: failures at these wall times (s), ascending, */
    int n_fail_at;                  /*   all of kind fail_kind, instead of Poisson arrivals */
    int fail_kind;                  /* index into the failure mix (0: CUDA error) */
} ls_sim_config;

typedef struct {
    double ettr;
    double wall_s, productive_s;
    int failures;
    double lost_detect_s, lost_localize_s, lost_restart_s, lost_recompute_s, lost_ckpt_s;
    int standby_misses; /* failures that found no standby and fell back to a cold restart */
} ls_sim_result;

/* ByteRobust-like defaults for gpus/days/policy (9,600 GPUs, 90 days, 70B state). */
void ls_sim_defaults(ls_sim_config *c);
int ls_sim_run(const ls_sim_config *c, ls_sim_result *r);

/* `llmsys sim robust`: a config plus the choices the command resolves. */
typedef struct {
    ls_sim_config c;      /* c.trials 20 */
    const char *policy;   /* disk, memory, standby or all */
    const char *model;    /* catalog model or a parameter count ("405e9"): sizes the state */
    const char *preset;   /* NULL, "byterobust" or "llama3" (16,384 GPUs, 54 days, 466 interruptions) */
    double interruptions; /* > 0: failures over the job instead of c.fail_per_1000_node_days */
    double repair_h;      /* hours until an evicted machine returns (6) */
    const char *out;      /* JSON table, or NULL */
} ls_sim_table_opts;

void ls_sim_table_defaults(ls_sim_table_opts *o);
/* Resolves preset and model, simulates each selected policy, prints the table to f and writes
 * out; LS_EINVAL (message names the flag) for bad options. */
int ls_sim_table(ls_sim_table_opts *o, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_ROBUST_H */
