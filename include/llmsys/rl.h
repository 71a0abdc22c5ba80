/*
 * rl.h - asynchronous RL post-training on llmsys models (after Laminar, arXiv 2510.12633):
 * tasks with verifiable rewards and long-tailed output lengths, a policy-gradient trainer
 * (GRPO group baseline, PPO clipped ratio, truncated importance weights for trajectories
 * produced by older weights), and a multi-process runtime over ZeroMQ: a rollout manager
 * (prompt pool, partial-response pool, experience buffer, dynamic repack), rollout workers
 * generating with the serve engine's slot KV cache, a chain of relay workers holding
 * versioned weights in memory, and the trainer. The same runtime runs the baselines
 * (synchronous, one-step-stale, AReaL-like bounded staleness). A discrete-event simulator
 * predicts the four designs at cluster scale.
 *
 *     ls_rl_task *t; int n;
 *     ls_rl_gen_opts g = ls_rl_gen_defaults();  g.kind = LS_RL_REVERSE; g.n = 512;
 *     ls_rl_tasks_generate(&g, &t, &n);
 *     ls_rl_tasks_write("tasks.jsonl", t, n);
 *     double r = ls_rl_reward(&t[0], "cba", 3);   // 1 for an exact answer
 *
 * Sequence layout shared by SFT, rollouts and the trainer: BOS, the prompt bytes, then
 * the response bytes and EOS. Only response positions carry loss or policy gradient.
 */
#ifndef LLMSYS_RL_H
#define LLMSYS_RL_H

#include <stddef.h>
#include <stdint.h>

#include "llmsys/core.h"
#include "llmsys/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tasks */

typedef enum {
    LS_RL_COPY = 0,    /* "copy:abc="  -> "abc" */
    LS_RL_REVERSE = 1, /* "rev:abc="   -> "cba" */
    LS_RL_SORT = 2,    /* "sort:cab="  -> "abc" */
    LS_RL_ADD = 3,     /* "add:47+85=" -> worked steps "7+5=12c1;4+8+1=13c1;|132" */
    LS_RL_KIND_COUNT
} ls_rl_kind;

/* One task: prompt and reference answer (NUL-terminated, malloc'd), its kind and the
 * input length that drew its output length. demo (may be NULL) is the demonstration the
 * supervised warm start imitates instead of the answer: imperfect demonstrations are what
 * a verifiable reward then corrects. */
typedef struct {
    char *prompt, *answer;
    int kind, len;
    int64_t id;
    char *demo;
} ls_rl_task;

typedef struct {
    int kind;             /* ls_rl_kind */
    int n;                /* tasks to draw */
    double mean_len;      /* mean input length (symbols or digits) */
    double cv;            /* coefficient of variation of the log-normal length */
    int min_len, max_len; /* clamp */
    uint64_t seed;
    double demo_noise; /* probability that a task's demo drops the answer's last byte (0: no demo) */
} ls_rl_gen_opts;

ls_rl_gen_opts ls_rl_gen_defaults(void);
/* "copy", "reverse", "sort", "add" -> kind; LS_EINVAL naming the known kinds. */
int ls_rl_kind_parse(const char *name, int *kind);
const char *ls_rl_kind_name(int kind);
/* Draws g->n tasks; lengths log-normal with mean g->mean_len and CV g->cv, clamped.
 * *out is malloc'd (free with ls_rl_tasks_free). */
int ls_rl_tasks_generate(const ls_rl_gen_opts *g, ls_rl_task **out, int *n);
/* JSONL, one {"id","kind","prompt","answer","len"[,"demo"]} object a line; atomic. */
int ls_rl_tasks_write(const char *path, const ls_rl_task *t, int n);
/* Reads a JSONL task file; the error names the file and line (bad JSON, missing field,
 * non-ASCII or control bytes, prompt not ending in '='). */
int ls_rl_tasks_read(const char *path, ls_rl_task **out, int *n);
void ls_rl_tasks_free(ls_rl_task *t, int n);
/* Verifiable reward in [0, 1]: 1 for the exact answer; otherwise 0.5 × the fraction of
 * answer positions matched (a response longer than the answer is penalised by its
 * extra length). For LS_RL_ADD the final number after '|' alone decides exactness. */
double ls_rl_reward(const ls_rl_task *t, const char *resp, size_t len);
/* Expected maximum of k log-normal draws with mean mu and CV c (Laminar's long-tail
 * model): mu·exp(s·sqrt(2 ln k) − s²/2), s = sqrt(ln(1 + c²)). */
double ls_rl_lognormal_expected_max(double mu, double c, int k);
/* The model config the RL runs use by default ("rl": 2 layers, d 64, n_ctx 128). */
ls_model_config ls_rl_model_config(void);

/* ---------------------------------------------------------------- policy gradient */

/* GRPO advantages of one group of n rewards: (r - mean) / (std + 1e-6) when norm_std,
 * else r - mean. All-equal rewards give 0 advantages. */
void ls_rl_group_advantages(const float *reward, int n, int norm_std, float *adv);
/* Truncated importance weight of a token: min(exp(logp_prox - logp_behav), cap),
 * computed in float; cap <= 0 disables truncation. */
float ls_rl_is_weight(float logp_prox, float logp_behav, float cap);

/* One policy-gradient batch packed for ls_model_pg_step (model.h): rows of BOS+prompt+
 * response tokens padded with PAD, targets the next token at response positions and -1
 * elsewhere, per-position behaviour log-probs and advantages. */
typedef struct {
    int B, T;
    int *tokens, *targets;   /* (B,T) */
    float *logp_behav, *adv; /* (B,T), meaningful where targets != -1 */
} ls_rl_batch;
/* One sampled trajectory as the trainer holds it: its id, the weights' version that sampled
 * it, n_prompt tokens (BOS + prompt) then n_gen response tokens in tok, the behaviour policy's
 * log-prob of each response token in lp (n_gen), its reward and advantage. */
typedef struct {
    int64_t id;
    int version, n_prompt, n_gen;
    float reward, adv;
    int *tok;
    float *lp;
} ls_rl_traj;
/* Packs n trajectories into b: T = the longest (at least 2); row i's target at position j is
 * tok[j + 1] where j + 1 is a response position (n_prompt <= j + 1 < n_prompt + n_gen), else
 * -1; there logp_behav = lp[j + 1 - n_prompt] and adv = the trajectory's. LS_EINVAL for an
 * empty batch or a trajectory longer than n_ctx, LS_ENOMEM. */
int ls_rl_batch_pack(const ls_rl_traj *tr, int n, int n_ctx, ls_rl_batch *b);
void ls_rl_batch_free(ls_rl_batch *b);

/* The largest seed (--seed): seeds travel as JSON numbers (the run config). */
#define LS_RL_SEED_MAX LS_JSON_INT_MAX
/* Rows one SFT step draws at most (--sft-batch). */
#define LS_RL_SFT_MAX_BATCH 256
/* Supervised warm start on tasks (loss on the demo's or else the answer's bytes and EOS): steps of batch B
 * (1..LS_RL_SFT_MAX_BATCH), AdamW at lr. Returns the final mean loss in *loss (may be NULL). */
int ls_rl_sft(ls_model *m, const ls_rl_task *t, int n, int steps, int B, float lr, uint64_t seed, float *loss);
/* Mean reward on tasks[0..n) (held-out evaluation): greedy answers when temperature is 0,
 * else the mean over `samples` answers sampled per task at that temperature (the policy's
 * expected reward) with a fixed seed. */
int ls_rl_eval(ls_model *m, const ls_rl_task *t, int n, float temperature, int samples, double *mean_reward,
               double *exact_frac);

/* ---------------------------------------------------------------- weight chunks */

/* A versioned weight blob travels in chunks; each chunk carries its own XXH3 and the
 * hash of the whole version, so a receiver rejects a corrupt or foreign chunk and knows a
 * version is complete only when every chunk checked and the whole hash matches. */
typedef struct {
    int64_t version;
    uint32_t index, count;
    uint64_t offset, len, total;
    uint64_t chunk_hash, version_hash;
} ls_rl_chunk_hdr;

typedef struct ls_rl_asm ls_rl_asm;
/* Reassembler for one version at a time; latest is the newest complete version held. */
int ls_rl_asm_init(ls_rl_asm **out);
void ls_rl_asm_free(ls_rl_asm *a);
/* Adds a chunk: LS_ECHECKSUM for a corrupt chunk, LS_EFORMAT for inconsistent fields,
 * LS_ERANGE for a version older than the newest complete one (the version goes
 * backwards). Returns 1 when this chunk completed its version, 0 otherwise. A chunk of a
 * newer version abandons the partial one. */
int ls_rl_asm_add(ls_rl_asm *a, const ls_rl_chunk_hdr *h, const void *data);
/* The newest complete version (-1 if none) and its bytes (owned by a). */
int64_t ls_rl_asm_latest(const ls_rl_asm *a, const void **data, size_t *len);
/* The version being assembled (some of its chunks held), or -1. */
int64_t ls_rl_asm_partial(const ls_rl_asm *a);
/* Splits a blob into chunk headers (count = ceil(len/chunk)), *hdrs malloc'd. */
int ls_rl_chunk_split(int64_t version, const void *data, size_t len, size_t chunk, ls_rl_chunk_hdr **hdrs, int *n);

/* ---------------------------------------------------------------- dynamic repack */

typedef struct {
    int id;              /* rollout id */
    int version;         /* weight version it holds */
    int waiting;         /* queued, not yet started */
    int n_traj;          /* running trajectories */
    const int *kv;       /* KV tokens held by each running trajectory */
    int kv_cap;          /* KV capacity in tokens */
    const int64_t *traj; /* trajectory ids (n_traj) */
} ls_rl_rollout_view;

typedef struct {
    double kv_threshold; /* destination may fill up to this fraction of kv_cap */
    int max_batch;       /* destination decode-batch cap */
    double falling_frac; /* a rollout is falling when waiting == 0 and n_traj <= falling_frac·max_batch */
    int exact_limit;     /* exact search when candidates <= this (default 10) */
    int any_dest;        /* 1: any rollout of the version with a free decode slot may receive, not only falling ones */
} ls_rl_repack_cfg;

typedef struct {
    int64_t traj;
    int from, to; /* rollout ids */
} ls_rl_move;

/* The runtime's and the simulator's planner settings: KV threshold 90 %, decode-batch cap max_batch,
 * falling at half the cap or less, exact search up to 10 candidates, any rollout with room receives. */
ls_rl_repack_cfg ls_rl_repack_defaults(int max_batch);
/* Plans moves that empty as many falling-phase rollouts as possible (same version only) onto falling
 * rollouts (or, with any_dest, any rollout with a free slot), destination load within kv_threshold
 * and max_batch; ties: fewer moved KV tokens.
 * Exact for up to exact_limit candidates of one version, best-fit decreasing beyond.
 * *moves malloc'd (may be NULL when *n_moves == 0); *freed receives the count emptied. */
int ls_rl_repack_plan(const ls_rl_rollout_view *r, int n, const ls_rl_repack_cfg *c, ls_rl_move **moves, int *n_moves,
                      int *freed);

/* ---------------------------------------------------------------- runtime */

typedef enum {
    LS_RL_MODE_LAMINAR = 0, /* relay pull per batch, no staleness bound, repack */
    LS_RL_MODE_SYNC = 1,    /* generate all -> train -> every rollout updates */
    LS_RL_MODE_ONESTEP = 2, /* one-step-stale overlap: generate batch k+1 with version k */
    LS_RL_MODE_AREAL = 3,   /* global-sync async: bounded staleness, all rollouts update at once */
    LS_RL_MODE_COUNT
} ls_rl_mode;
int ls_rl_mode_parse(const char *name, int *mode);
const char *ls_rl_mode_name(int mode);

/* The issue rule of the four designs, shared by the runtime's manager and the simulator.
 * One unit is what the caller hands out: a group (G trajectories) in the manager, a
 * trajectory in the simulator; batch, issued, consumed and window all count that unit. */
typedef struct {
    int mode;            /* ls_rl_mode */
    int64_t batch;       /* B: units the trainer consumes per update (>= 1) */
    int staleness;       /* s: AReaL's bound */
    int64_t window;      /* laminar: units that may be issued and not yet consumed */
    int trainer_version; /* P: the trainer's newest version (updates it has made) */
    int64_t consumed;    /* units the trainer has taken */
} ls_rl_issue_state;
/* Whether unit number `issued` (0-based: the count issued so far) may go to a rollout
 * holding weights of `version`:
 *   sync     version >= P and issued < (P + 1) B
 *   onestep  version >= P - 1, issued < (P + 2) B and version >= issued / B - 1
 *   areal    issued < (version + s + 1) B
 *   laminar  issued - consumed < window
 * A rollout may be a version ahead of P in the manager (it pulled from a relay before the
 * trainer's next batch request came in): the caps in P still hold for it. 0 when batch < 1. */
int ls_rl_may_issue(const ls_rl_issue_state *s, int64_t issued, int version);

typedef struct {
    int mode;
    const char *tasks, *heldout; /* JSONL task files (heldout may be NULL: last 64 of tasks) */
    const char *init;            /* starting checkpoint (safetensors) */
    const char *workdir;         /* logs, report */
    const char *report;          /* JSON report path (NULL: workdir/report.json) */
    const char *exe;             /* the llmsys binary, re-executed for each worker */
    int rollouts, relays;
    int updates;      /* trainer updates */
    int group;        /* G samples per prompt */
    int batch_groups; /* groups per update */
    int max_seqs;     /* KV slots (decode batch) per rollout */
    int max_new;      /* response cap in tokens */
    double lr, clip_eps, is_cap;
    int staleness;   /* AReaL bound */
    int repack;      /* 0 disables repack in laminar mode */
    int rollout_batch; /* laminar: trajectories a rollout takes at one weight version, its max_seqs slots
                          and a waiting queue that refills them (0: max_seqs, no queue; whole groups) */
    double step_ms;  /* rollout decode-step floor (emulates a dedicated accelerator) */
    double train_ms; /* trainer update floor */
    int eval_n;      /* held-out prompts evaluated before/after */
    uint64_t seed;
    /* fault injection (tests, demo): kill rollout 0 / relay 1 at these seconds (<= 0: never);
     * restart_s > 0 restarts the killed rollout after that many seconds */
    double kill_rollout_s, kill_relay_s, restart_s;
    double timeout_s; /* whole-run limit */
    int quiet;
    /* supervised warm start when init is NULL: a fresh "rl" model trained on the task file's
     * demonstrations (less the held-out tail when heldout is NULL); sft_steps < 0: 1500 */
    int sft_steps, sft_batch;
    double sft_lr;
} ls_rl_run_opts;

ls_rl_run_opts ls_rl_run_defaults(void);
/* The input files of an rl command, read and checked once at its start-up (ls_rl_run_check,
 * ls_rl_worker_check) and handed on to the work (ls_rl_run, ls_rl_worker): a file that changes
 * after the check is not read again. */
typedef struct ls_rl_inputs ls_rl_inputs;
void ls_rl_inputs_free(ls_rl_inputs *in);
/* o's values, its report naming none of its inputs, and the inputs themselves: --tasks and
 * --heldout read into *in, --init opened. LS_EINVAL naming what is wrong, or the input's error
 * (LS_ENOTFOUND, LS_EFORMAT, ...); *in is NULL then. What fails here is the command line's. */
int ls_rl_run_check(const ls_rl_run_opts *o, ls_rl_inputs **in);
/* Warm start on in's tasks unless o->init is given (LS_EINVAL for both init and sft_steps > 0),
 * then writes the tasks it read to WORKDIR/tasks.jsonl (and --heldout's to
 * WORKDIR/heldout.jsonl): the run's own copies, which its workers read. Starts manager, relays,
 * rollouts and trainer as separate processes (fork+exec of o->exe "rl worker ..."), waits for
 * the trainer to finish, stops the rest, and leaves the JSON report. in: from
 * ls_rl_run_check(o) (NULL: checked here). Errors: a worker that cannot start, the manager or
 * trainer dying, timeout. */
int ls_rl_run(const ls_rl_run_opts *o, const ls_rl_inputs *in);

typedef struct {
    const char *role;      /* manager, trainer, rollout, relay */
    const char *manager;   /* tcp endpoint of the manager */
    const char *bind;      /* manager/relay bind address (default tcp://127.0.0.1:0) */
    const char *port_file; /* manager: write the bound endpoint here */
    const char *config;    /* manager: run config JSON (written by ls_rl_run) */
    int id;
} ls_rl_worker_opts;
/* o's role and the options it needs: LS_EINVAL naming what is missing, or an endpoint it would
 * refuse to bind or connect to (ls_zsec_check); a manager's --config and the task file it
 * names are read into *in (their error: LS_ENOTFOUND, LS_EFORMAT, ...; *in is NULL then). What
 * fails here is the command line's. The other roles get their config from the manager, in the
 * run. */
int ls_rl_worker_check(const ls_rl_worker_opts *o, ls_rl_inputs **in);
/* Runs one worker until the manager says stop (or the manager is unreachable: LS_ENET with
 * one clear message); in: from ls_rl_worker_check(o) (NULL: checked here). Its links follow
 * the CURVE policy of llmsys/zsec.h: off loopback, or forced, the keys are required and only
 * allowed peers get in. */
int ls_rl_worker(const ls_rl_worker_opts *o, const ls_rl_inputs *in);

/* Writes an SVG figure of 1..6 run reports: reward per update (a line each) and their
 * staleness histograms. Atomic; errors name a report that is not an rl run report. */
int ls_rl_report_svg(const char *const *reports, int n, const char *out);

/* Draws tasks per g and writes them to path (atomic); answer length mean and max in bytes. */
int ls_rl_tasks_make(const ls_rl_gen_opts *g, const char *path, double *mean_len, double *max_len);
/* How many of a task file's n tasks a run without a held-out file keeps for evaluation: its
 * last eval_n, when more than that many remain (else none). */
int ls_rl_held_tail(int n, int eval_n);
/* Writes WORKDIR/init.safetensors (path in out): a fresh "rl" model after sft_steps of
 * supervised training on the demonstrations of tasks t[0, n), leaving out
 * ls_rl_held_tail(n, hold_out) of them. Prints one line unless quiet. */
int ls_rl_warm_start(const ls_rl_task *t, int n, int hold_out, const char *workdir, int sft_steps, int sft_batch,
                     double sft_lr, uint64_t seed, char *out, size_t cap, int quiet);
/* Micro-measurement for the simulator: mean round trip of n poll-sized messages between this
 * process and a forked echoing process over ZeroMQ (what a rollout pays per manager poll). */
int ls_rl_measure_rtt(int n, double *mean_s);
/* Prints a run report's headline figures (rates, idle, staleness, faults, held-out reward) to stdout. */
int ls_rl_report_print(const char *path);
/* Runs the rl demo scenario under workdir/rl (exe: the llmsys binary); prints as it goes. */
int ls_rl_demo(const char *workdir, int quick, const char *exe);

/* ---------------------------------------------------------------- simulator */

typedef struct {
    const char *model;  /* catalog name, e.g. "qwen2.5-7b" */
    const char *gpu;    /* catalog GPU, e.g. "H800-80G" */
    int gpus;           /* total GPUs */
    int train_frac_pct; /* share of GPUs training in the disaggregated designs (default 25; 0: the best
                           for each design, searched to 2 points, as its operator would choose) */
    int tp;             /* GPUs per rollout replica (0: by model size) */
    int mode;
    double mean_len, cv; /* response length distribution (tokens) */
    int max_len;         /* response cap (default 16384) */
    int prompt_len;
    int batch; /* trajectories per update (global batch) */
    int updates;
    int staleness;
    int max_batch; /* decode batch per replica */
    uint64_t seed;
    const char *data_dir; /* catalogs (NULL: default) */
    /* small-run calibration (real-run comparison): when > 0 these replace catalog costs */
    double step_s;    /* decode step seconds per replica */
    double train_s;   /* trainer seconds per update */
    double pull_s;    /* weight pull seconds per rollout */
    const int *trace; /* response lengths to sample from instead of the log-normal (n_trace) */
    int n_trace;
    int trace_replay; /* take the trace in order (the k-th issued trajectory gets trace[k % n]) */
    double repack_s; /* manager poll period for repack (0: 10 decode steps) */
    int repack;      /* laminar: 0 disables repack */
    int rollout_batch; /* laminar: trajectories a replica takes at one weight version (its waiting queue
                          refills free slots until they are issued; 0: max_batch, no queue) */
    double refill_s; /* pause before a replica's new batch starts (a manager round trip; 0: none) */
    int batch_refill; /* every design takes new work only when a replica's batch is done (llmsys's runtime) */
    double idle_poll_s;    /* a replica that got no work asks again after this (0: it sees work at once) */
    double trainer_poll_s; /* the trainer that found no complete batch asks again after this (0: at once) */
    double trainer_extra_s; /* per update beyond train_s: handing the version to the relays, the batch round trip */
    int group; /* samples per prompt: the trainer takes only complete groups (0 or 1: single trajectories) */
    int repack_any_version; /* analysis only: repack across weight versions (a trajectory would mix versions) */
} ls_rl_sim_opts;

typedef struct {
    double traj_per_s, tokens_per_s, idle_frac, wall_s, mean_staleness, stall_s;
    double step_s, train_s, bcast_s, pull_s; /* the per-operation costs used */
    int max_staleness, replicas, tp, repacks;
    int train_pct; /* the share of GPUs that trained (100 for the colocated synchronous design) */
} ls_rl_sim_result;

ls_rl_sim_opts ls_rl_sim_defaults(void);
int ls_rl_simulate(const ls_rl_sim_opts *o, ls_rl_sim_result *r);
/* Response lengths (answer bytes + EOS) of a task file, as a trace; *trace malloc'd. */
int ls_rl_trace_read(const char *path, int **trace, int *n);
/* Whether ls_rl_sim_table could run these: the GPU counts (a comma list of at most 16 in
 * [2, 2^20]), the model names (a comma list of catalog models) and o->gpu in the catalog, and
 * o's values (its mean length unused when have_trace). LS_EINVAL for any of these (a usage
 * error); a catalog that cannot be read keeps its own code. */
int ls_rl_sim_check(const ls_rl_sim_opts *o, const char *models, const char *gpus, int have_trace);
/* Parses a --gpus list into gl (may be NULL): the count, or LS_EINVAL. */
int ls_rl_sim_gpus_parse(const char *gpus, int gl[16]);
/* Prints the four designs for every model × GPU count (comma lists) with o's other fields,
 * checked first (ls_rl_sim_check, then out's directory); trace (NULL: log-normal) a task file;
 * out (NULL: none) the JSON {"rows": [...]}. */
int ls_rl_sim_table(const ls_rl_sim_opts *o, const char *models, const char *gpus, const char *trace,
                    const char *out);
/* The simulator's options for predicting a real run from its report: the run's sizes, measured
 * decode step, pull and train time, its consumed response lengths (*lens malloc'd; when the
 * report has none, trace/nt are used) and refill_s, a round trip measured apart from the run. */
int ls_rl_sim_opts_from_report(const char *report, const int *trace, int nt, double refill_s, ls_rl_sim_opts *o,
                               int **lens, int *nl, double *measured_traj_per_s);
/* Predicts each real run (rl run report) from its own measured costs and a manager round trip
 * measured now (ls_rl_measure_rtt); trace (may be NULL) a task file for reports without lengths;
 * prints measured, predicted and the relative error; *worst (may be NULL) the largest |error|;
 * out (NULL: none) the JSON {"calibration": [...], "max_abs_error"}. */
int ls_rl_sim_calibrate(const char *const *reports, int n, const char *trace, const char *out, double *worst);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_RL_H */
