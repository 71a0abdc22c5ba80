/*
 * train.h - training the core model (model.h): text corpora as byte tokens, batch
 * sources, safetensors checkpoints with optimizer state, MPI data parallelism
 * (after Horovod / PyTorch DDP: all-reduce of the flat gradient buffer each step) and
 * the training loop with exact resume.
 *
 * A run, in one process or under mpirun:
 *
 *     ls_dist *d;            ls_dist_init(&d);                   // MPI only under mpirun
 *     ls_corpus *c;          ls_corpus_load(&c, paths, n, NULL);
 *     ls_train_config tc = ls_train_defaults();  tc.steps = 200;
 *     ls_trainer *t;         ls_trainer_init(&t, &model_cfg, &tc, d);
 *     ls_batch_source *src;  ls_batch_source_corpus(&src, c, &tc, ls_dist_size(d));
 *     ls_train_run_opts o = {.out = "ckpt.safetensors", .save_every = 50};
 *     ls_train_run_result r;
 *     ls_train_run(t, src, d, &o, &r);     // steps, saves (rank 0 writes), progress
 *     ls_train_run_result_free(&r);
 *
 * ls_train_run owns the loop; per-step work of a caller (fault injection, timing, a
 * policy) goes in the hooks of ls_trainer_set_hooks. ls_trainer_step is the single step
 * for callers that need no loop.
 *
 * Determinism. The rows of the global batch of step s are a pure function of (seed, s,
 * row index); rank r of N computes rows [r·G/N, (r+1)·G/N). So the same seed gives
 * the same loss sequence, a resumed run sees exactly the batches the uninterrupted run
 * would have seen, and N ranks see the same global batch as one rank.
 *
 * Checkpoint format (safetensors, see safetensors.h): one F32 tensor per parameter under
 * its model.h name; optionally "opt.m.<name>" and "opt.v.<name>" (AdamW moments);
 * __metadata__: "llmsys.config" (ls_model_config_to_json), "llmsys.step" (steps done),
 * "llmsys.ckpt" = "1" (format version), "llmsys.train" (ls_train_config JSON, present when
 * written by a training run), plus the writer's "format" and "llmsys.xxh3" checksum.
 */
#ifndef LLMSYS_TRAIN_H
#define LLMSYS_TRAIN_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- training settings */

typedef struct {
    int batch;          /* global batch: sequences per step, summed over ranks */
    int seq;            /* tokens per sequence (T <= n_ctx) */
    int steps;          /* total optimizer steps of the run (length of the lr schedule) */
    uint64_t seed;      /* model init and data sampling */
    int shards;         /* data shards; 0 = chosen by ls_batch_source_corpus */
    uint64_t data_hash; /* fingerprint of the training data (ls_corpus_hash), 0 = unknown */
    ls_adamw_config opt;
} ls_train_config;

/* batch 8, seq 128, steps 100, seed 1, AdamW defaults with warmup = steps/10 (set by init). */
ls_train_config ls_train_defaults(void);
/* Checks ranges (batch, seq, steps > 0, lr > 0, ...); the message names the field. */
int ls_train_config_validate(const ls_train_config *c);
/* Compact JSON (malloc'd, caller frees) and back; from_json fills every field it finds. */
char *ls_train_config_to_json(const ls_train_config *c);
int ls_train_config_from_json(const char *json, ls_train_config *c);

/* ---------------------------------------------------------------- checkpoints */

enum {
    LS_CKPT_WEIGHTS = 0,  /* parameters only; opt.* tensors are ignored */
    LS_CKPT_WITH_OPT = 1, /* also the AdamW moments (required on load) */
};

typedef struct {
    int64_t step;     /* optimizer steps completed */
    char *train_json; /* "llmsys.train" metadata (malloc'd), NULL when absent */
} ls_ckpt_state;

/* Writes m atomically (temp file, fsync, rename) with step and, when train_json != NULL,
 * the training settings; flags LS_CKPT_WITH_OPT adds the optimizer moments. On failure
 * path is untouched. */
int ls_ckpt_save(const char *path, ls_model *m, int64_t step, const char *train_json, int flags);
/* (ls_ckpt_open, the one checkpoint opener, is in model.h with the layout.) */
/* Loads path into a new model (*out; free with ls_model_free). Every parameter tensor
 * must be present as F32 with its model.h shape (and the opt.* tensors with
 * LS_CKPT_WITH_OPT); st (may be NULL) receives step and training settings. */
int ls_ckpt_load(const char *path, int flags, ls_model **out, ls_ckpt_state *st);
/* Same into an existing model whose config must equal the file's. */
int ls_ckpt_load_into(const char *path, ls_model *m, int flags, ls_ckpt_state *st);
void ls_ckpt_state_free(ls_ckpt_state *st);
/* `llmsys generate`: checks s (temperature in [0, 100], top_p in (0, 1]) and report's
 * directory, loads the checkpoint at path (weights), samples up to n_new tokens after
 * prompt with s and seed (ls_model_generate_text), writes prompt and continuation to out (the
 * bytes as they are; specials are not text), and the JSON summary to report (may be NULL). */
int ls_generate_checkpoint(const char *path, const char *prompt, int n_new, const ls_sample_config *s, uint64_t seed,
                           FILE *out, const char *report);

/* ---------------------------------------------------------------- text corpus */

/* Files and directories (searched recursively, in sorted order) read as bytes; each file
 * is one document, tokenised as BOS <bytes> EOS. The token stream is cut into blocks
 * and every k-th block (k = round(1/heldout_frac)) is held out, so the split depends only
 * on the data. Empty data, binary files named explicitly (NUL bytes or > 5% control
 * bytes) and directories without text are errors; binary files met inside directories
 * are skipped. */
typedef struct ls_corpus ls_corpus;

typedef struct {
    double heldout_frac; /* share held out, (0, 0.5]; default 0.05 */
    size_t max_bytes;    /* stop after this many bytes of text; default 256 MiB */
    const ls_bpe *tokenizer; /* borrowed; NULL: byte tokens. Documents become BOS <BPE ids> EOS */
} ls_corpus_opts;

typedef enum { LS_SPLIT_TRAIN = 0, LS_SPLIT_HELDOUT = 1, LS_SPLIT_ALL = 2 } ls_split;

ls_corpus_opts ls_corpus_defaults(void);
/* o may be NULL (defaults). Errors name the offending path. */
int ls_corpus_load(ls_corpus **out, const char *const *paths, int n, const ls_corpus_opts *o);
/* Same from in-memory documents (tests, generated text); what names them in messages. */
int ls_corpus_from_docs(ls_corpus **out, const char *what, const char *const *docs, const size_t *lens, int n,
                        const ls_corpus_opts *o);
void ls_corpus_free(ls_corpus *c);
/* The corpus at paths as the checkpoint ckpt was trained on it: tokenized with the vocabulary
 * ckpt carries (*bpe, NULL for bytes) and split with o's held-out share (o may be NULL:
 * defaults; its tokenizer is replaced). The caller frees both. */
int ls_corpus_load_for(const char *ckpt, const char *const *paths, int n, const ls_corpus_opts *o, ls_corpus **out,
                       ls_bpe **bpe);
/* Tokens of a split (bytes 0..255 or BPE ids, LS_TOK_BOS, LS_TOK_EOS); *n receives the count. */
const uint16_t *ls_corpus_tokens(const ls_corpus *c, ls_split s, size_t *n);
int ls_corpus_num_docs(const ls_corpus *c);
/* Bytes of text (excluding specials) in a split. */
size_t ls_corpus_num_bytes(const ls_corpus *c, ls_split s);
/* Entropy in bits/byte of the byte distribution of a split: what the best context-free
 * (unigram) byte model achieves on it. */
double ls_corpus_unigram_entropy(const ls_corpus *c, ls_split s);
/* XXH3 fingerprint of all tokens (recorded in checkpoints; a resume on other data warns). */
uint64_t ls_corpus_hash(const ls_corpus *c);
/* "train", "heldout", "all", and back (LS_EINVAL naming --split for any other name). LS_SPLITS:
 * every name, "|"-separated, the default first. */
#define LS_SPLITS "heldout|train|all"
const char *ls_split_name(ls_split s);
int ls_split_parse(const char *name, ls_split *out);

/* ---------------------------------------------------------------- batch sources */

/* Where training batches come from. fill() writes rows [row0, row0 + rows) of the global
 * batch of step `step` (rows x T tokens and next-token targets; target -1 is ignored).
 * For exact resume and rank-count independence fill must be a pure function of
 * (step, row); a source that cannot be replayed (a remote loader) says so in `exact`. */
typedef struct ls_batch_source {
    const char *name;
    int exact;
    int (*fill)(struct ls_batch_source *s, int64_t step, int row0, int rows, int T, int *tokens, int *targets);
    void (*destroy)(struct ls_batch_source *s);
    void *ctx;
} ls_batch_source;

/* Samples windows of T+1 tokens from the training split of c (borrowed; must outlive the
 * source). The split is cut into S contiguous shards, S = tc->shards or, when 0,
 * min(global batch, windows that fit) rounded down to a multiple of ranks; row j of a
 * step reads only shard floor(j·S/G), so rank r touches a disjoint set of shards. The
 * start of row j at step s comes from an RNG stream split from (seed, s·G + j). Errors:
 * too little data for one window, or more ranks than shards. tc->shards receives S. */
int ls_batch_source_corpus(ls_batch_source **out, const ls_corpus *c, ls_train_config *tc, int ranks);
/* For implementations of sources: a source with these fields and a zeroed context of
 * ctx_size bytes in s->ctx (its destroy frees it). */
int ls_batch_source_new(ls_batch_source **out, const char *name, int exact,
                        int (*fill)(ls_batch_source *, int64_t, int, int, int, int *, int *),
                        void (*destroy)(ls_batch_source *), size_t ctx_size);
void ls_batch_source_free(ls_batch_source *s);

/* ---------------------------------------------------------------- distribution (MPI) */

/* One process, or one rank of an mpirun job: MPI is initialised only when the process
 * was started by mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE in the environment), so plain
 * runs never touch MPI. */
typedef struct ls_dist ls_dist;

int ls_dist_init(ls_dist **out);
/* Finalises MPI when this handle initialised it. */
void ls_dist_free(ls_dist *d);
int ls_dist_rank(const ls_dist *d);
int ls_dist_size(const ls_dist *d);
/* Ranks of this job on this host (for sharing cores between them). */
int ls_dist_local_size(const ls_dist *d);
/* In-place sum over ranks (no-op on one rank). */
int ls_dist_allreduce_sum(ls_dist *d, float *buf, size_t n);
/* Collective status agreement: every rank passes its status and gets the lowest
 * (most negative) one back; *first_bad receives the lowest rank that failed (-1 when
 * none), so exactly one rank reports the error. */
int ls_dist_agree(ls_dist *d, int rc, int *first_bad);
/* Copies n bytes from rank 0 to every rank. */
int ls_dist_bcast(ls_dist *d, void *buf, size_t n);
/* Writes the start of a command line that runs `ranks` processes on this host under
 * mpirun into av (room for LS_DIST_MPIRUN_ARGC entries); np (16 bytes, kept alive by the
 * caller) holds the count's text. Returns the entries written; the caller appends the
 * program, its arguments and the NULL. Cannot fail. */
#define LS_DIST_MPIRUN_ARGC 9
int ls_dist_mpirun_args(char **av, char np[16], int ranks);
/* Lost-rank reporting for a job started under mpirun: ls_dist_watch_open makes a private
 * directory (dir, 64 bytes) and names it in LLMSYS_RANK_DIR, where each rank registers its
 * pid at ls_dist_init (so call it before starting mpirun). ls_dist_wait_job waits for the
 * mpirun child `job` (retrying on EINTR), watching the ranks' pids; it returns the job's exit
 * code (128 + signal when killed) and removes dir. When a rank was killed (the job ends
 * with 128 + signal), lost receives one line naming the rank that ended first (else ""). */
int ls_dist_watch_open(char dir[64]);
int ls_dist_wait_job(int job, const char *dir, int ranks, char *lost, size_t n);
/* Runs `mpirun -np ranks self [prefix] argv[0..argc)` (without --ranks N / --ranks=N; prefix
 * NULL or a parent command, e.g. "plan" before a subcommand's own argv) on this
 * host, each rank's threads set to its share of the cores, and waits for it, watching the
 * ranks (ls_dist_wait_job: lost receives the line naming a killed rank, else ""); SIGINT and
 * SIGTERM meanwhile reach the ranks as SIGUSR1 (a stop request). Returns mpirun's exit
 * code (128 + signal when killed), or a negative status when it cannot start it. */
int ls_dist_relaunch(int ranks, const char *self, const char *prefix, int argc, char **argv, char *lost, size_t nlost);

/* ---------------------------------------------------------------- training loop */

typedef struct ls_trainer ls_trainer;

/* A fresh model from mcfg initialised from tc->seed. tc is copied (validated; warmup 0
 * becomes steps/10). d is borrowed (may be NULL: one process). */
int ls_trainer_init(ls_trainer **out, const ls_model_config *mcfg, const ls_train_config *tc, ls_dist *d);
/* Replaces the model, optimizer state, step and settings with those of a checkpoint
 * written by ls_trainer_save; the schedule length becomes `steps` when > 0. */
int ls_trainer_resume(ls_trainer **out, const char *path, int steps, ls_dist *d);
void ls_trainer_free(ls_trainer *t);
/* One optimizer step on the global batch: this rank's rows from src, forward, backward,
 * all-reduce of gradients and loss weighted by each rank's count of targets (!= -1), so
 * the update is the mean over all targets of the global batch on any rank count; clipped
 * AdamW update. *loss: global mean loss before the update; grad_norm (may be NULL):
 * pre-clip norm (of the gradients as a before_update hook left them). Collective: a
 * failure on any rank fails the step on every rank. */
int ls_trainer_step(ls_trainer *t, ls_batch_source *src, float *loss, float *grad_norm);
/* Collective: rank 0 writes the checkpoint (with optimizer state); every rank gets the status. */
int ls_trainer_save(ls_trainer *t, const char *path);
int64_t ls_trainer_step_index(const ls_trainer *t);
/* Where this rank's step time went, summed over the steps run by this trainer. */
typedef struct {
    int64_t steps;
    double data_s;     /* batch source fill */
    double compute_s;  /* forward + backward */
    double comm_s;     /* gradient all-reduce (0 on one rank) */
    double update_s;   /* AdamW */
    double busy_cpu_s; /* process CPU seconds during data, forward/backward and update */
} ls_train_timing;
void ls_trainer_timing(const ls_trainer *t, ls_train_timing *out);
/* The rank's own work in t: data, forward/backward and update (all but the all-reduce). */
static inline double ls_train_timing_busy(const ls_train_timing *t) { return t->data_s + t->compute_s + t->update_s; }
ls_model *ls_trainer_model(ls_trainer *t);
const ls_train_config *ls_trainer_config(const ls_trainer *t);
/* Changes the schedule length (e.g. after timing the first steps); must exceed the
 * steps done. */
int ls_trainer_set_steps(ls_trainer *t, int steps);
/* Records the data shard count chosen by the batch source (saved with the run's settings
 * so a resume samples the same shards). */
int ls_trainer_set_shards(ls_trainer *t, int shards);
/* Records the fingerprint of the training data (saved, compared on resume). */
void ls_trainer_set_data_hash(ls_trainer *t, uint64_t h);

/* ---------------------------------------------------------------- hooks and the run loop */

/* One step's figures, handed to the after_step hook. */
typedef struct {
    int64_t step;        /* steps completed, including this one */
    float loss;          /* global mean loss before the update */
    float grad_norm;     /* pre-clip global gradient norm */
    double step_s;       /* wall seconds of this step on this rank (ls_trainer_step only) */
    double tokens_per_s; /* global tokens per second, mean over this run so far */
    int rank, ranks;
} ls_train_step_info;

/* Hooks of a trainer (any may be NULL), installed with ls_trainer_set_hooks.
 * before_update runs inside ls_trainer_step after backward and the gradient all-reduce,
 *   before clipping and AdamW, on every rank with `step` = steps completed before this one;
 *   it may read or change the (global mean) gradients, ls_model_grads(ls_trainer_model(t)).
 *   < 0 fails the step on every rank (one extra agreement per step when installed).
 * after_step runs on every rank after each completed step of ls_train_run; > 0 asks the
 *   run to stop (the ranks agree as on a stop signal: save, stopped = 1), < 0 fails the
 *   run on every rank (the others get LS_EPEER). */
typedef struct {
    void *ctx;
    int (*before_update)(void *ctx, ls_trainer *t, int64_t step);
    int (*after_step)(void *ctx, ls_trainer *t, const ls_train_step_info *info);
} ls_train_hooks;

/* Installs a copy of *h (NULL removes the hooks). */
void ls_trainer_set_hooks(ls_trainer *t, const ls_train_hooks *h);
/* The installed hooks (all NULL when none), e.g. to chain a new hook to the old one. */
void ls_trainer_hooks(const ls_trainer *t, ls_train_hooks *out);

/* Options of ls_train_run; zero-initialised means: no checkpoint, run to the schedule's
 * end, progress bar (TTY) or log lines (otherwise) on rank 0. */
typedef struct {
    /* checkpoint (with optimizer state, ls_trainer_save) every save_every steps and at
     * the end; NULL: never saved */
    const char *out;
    int save_every;    /* 0: only at the end */
    int64_t stop_at;   /* > 0: stop (and save) after this step, as if interrupted */
    int log_every;     /* stderr log period when there is no progress bar; 0: steps/10 */
    int quiet;         /* 1: neither progress bar nor log lines */
    const char *label; /* progress-bar label; NULL: "train" */
    /* nonzero on any rank: finish the step, save, stop (e.g. set by a signal handler) */
    const volatile sig_atomic_t *stop_flag;
    /* called on rank 0 after each checkpoint save that followed at least one step (e.g. a
     * loader-state side file); < 0 fails the run on every rank */
    int (*after_save)(void *ctx, const char *ckpt_path);
    void *save_ctx;
} ls_train_run_opts;

typedef struct {
    int64_t start_step, end_step; /* trainer step index before and after the run */
    float *losses;                /* n_losses = end_step - start_step; ls_train_run_result_free */
    double *step_s;               /* n_losses: each step's wall seconds on this rank (step, hook, agreement) */
    int n_losses;
    double wall_s;       /* the loop, without the final save */
    double busy0_s;      /* data + forward/backward + update seconds of the run's first step */
    double busy0_cpu_s;  /* the process CPU seconds in them */
    double tokens_per_s; /* global tokens per wall second */
    int stopped;         /* ended early by stop_flag or an after_step hook */
} ls_train_run_result;

/* Runs steps until the schedule's end (its length is re-read every step, so a hook may
 * change it with ls_trainer_set_steps) or stop_at: after each step the after_step hook,
 * then one agreement of the ranks on stop requests and hook failures; periodic and final
 * saves with after_save; progress bar or log lines on rank 0. Collective. On error r
 * holds nothing to free; a failing rank returns its own status (and message), the
 * others LS_EPEER. */
int ls_train_run(ls_trainer *t, ls_batch_source *src, ls_dist *d, const ls_train_run_opts *o, ls_train_run_result *r);
void ls_train_run_result_free(ls_train_run_result *r);
/* A fresh trainer (*t, for the caller to free, also on failure) from mc and tc, on the
 * training split of c (tc->shards as ls_batch_source_corpus takes it; the trainer's own
 * settings keep 0) over d's ranks, with hooks h (may be NULL), run quietly to the end of its
 * schedule. Collective; r as from ls_train_run. (Benchmarks and demos.) */
int ls_train_corpus_run(ls_trainer **t, const ls_model_config *mc, ls_train_config *tc, const ls_corpus *c,
                        ls_dist *d, const ls_train_hooks *h, ls_train_run_result *r);
/* The JSON summary of a run (`llmsys train --report`): command, config, params, ranks,
 * batch, seq, shards, lr, warmup, steps, start_step, end_step, initial_loss, final_loss,
 * losses, step_s, tokens, tokens_per_s, wall_s, rank0_time_s; the caller adds its own fields.
 * NULL when out of memory; caller deletes. */
struct cJSON *ls_train_run_report(ls_trainer *t, const ls_dist *d, const ls_train_run_result *r);

/* ---------------------------------------------------------------- evaluation */

typedef struct {
    double loss;          /* mean cross-entropy, nats per predicted token */
    double bits_per_byte; /* total bits over text bytes predicted */
    double perplexity;    /* exp(loss) */
    size_t tokens;        /* predicted tokens */
    size_t bytes;         /* of which text bytes */
} ls_eval_result;

/* Evaluates m on n tokens in non-overlapping windows of T (<= n_ctx), B windows per
 * forward; targets that are BOS (always after EOS) are not counted. max_tokens > 0 caps
 * the work at about that many tokens, in windows spread evenly over the whole text. */
int ls_eval_tokens(ls_model *m, const uint16_t *tokens, size_t n, int T, int B, size_t max_tokens, ls_eval_result *r);
/* The same, calling each(m, ctx) after every forward (its activations readable, e.g. through
 * ls_model_lin_input); an error each returns stops the evaluation and is returned. */
int ls_eval_tokens_each(ls_model *m, const uint16_t *tokens, size_t n, int T, int B, size_t max_tokens,
                        int (*each)(const ls_model *m, void *ctx), void *ctx, ls_eval_result *r);
/* The windows every evaluation scores (ls_eval_tokens, ls_engine_eval_tokens): *avail
 * non-overlapping windows of T fit in n tokens; returns how many are scored (all of them, or
 * about max_tokens / T when max_tokens > 0), 0 when not even one fits. */
size_t ls_eval_windows(size_t n, int T, size_t max_tokens, size_t *avail);
/* The first token of scored window w (of `windows`, spread evenly over `avail`). */
static inline size_t ls_eval_window_start(size_t w, size_t windows, size_t avail, int T) {
    return (w * avail / windows) * (size_t)T;
}
/* Completes r from the nats summed over its r->tokens predicted tokens (r->bytes of them
 * text bytes): loss, bits per byte, perplexity. LS_EINVAL when there was no text. */
int ls_eval_finish(ls_eval_result *r, double nats);

/* ---------------------------------------------------------------- the core demo */

/* `llmsys demo core`: trains the small GPT (tiny when quick) on this machine's licence texts
 * and C headers (else generated arithmetic) for a time budget under workdir/core, saves,
 * reloads, evaluates on held-out text and samples, printing a summary to f. *learned: the
 * held-out bits/byte beat the unigram entropy. */
int ls_train_demo_core(FILE *f, const char *workdir, int quick, int *learned);


/* ---------------------------------------------------------------- slow ranks (throttle) */

/* A process limited to a share of the CPU, to make unequal ranks on one machine (the
 * hybrid-device setting of docs/qsync.md). Mechanism, in order: a cgroup v1 CPU quota
 * (/sys/fs/cgroup/cpu/llmsys-<pid>, cpu.cfs_quota_us over a 10 ms period) when that is
 * writable, else a duty cycle: a child process stops and continues this one every 10 ms.
 * LLMSYS_THROTTLE=dutycycle forces the second. */
typedef struct {
    double share;   /* cores granted (1 = one full core) */
    char mech[96];  /* what limits it, for reports */
    char dir[128];  /* the cgroup directory, "" when none */
    int child;      /* duty-cycle process id, 0 when none */
    int quit;       /* with a child: the socket that tells it to continue us and end */
    int active;
    double wall0, cpu0; /* wall and process CPU seconds when it was applied */
} ls_throttle;

/* Limits this process (all its threads) to `share` cores when it runs `threads` threads;
 * share <= 0 or >= threads is no limit (mech "none"). Errors name the file or call. */
int ls_throttle_apply(ls_throttle *t, double share, int threads);
/* Lifts the limit and removes the cgroup or stops the duty-cycle process. Idempotent. */
void ls_throttle_release(ls_throttle *t);
/* The share of a core this process got since ls_throttle_apply (its CPU seconds over wall
 * seconds, throttled or not): what a rank ran at, on a machine shared with other work. */
double ls_throttle_cpu_share(const ls_throttle *t);

/* ---------------------------------------------------------------- a whole job (`llmsys train`) */

/* A training job as `llmsys train` takes it: a fresh run (config, batch, ...) or a resumed
 * one (--resume), on a text corpus (data) or batches of a loader service (loader).
 * ls_train_job_defaults leaves the run settings unset (LS_TRAIN_UNSET, INT64_MIN, NAN). */
#define LS_TRAIN_UNSET INT_MIN
typedef struct {
    const char *config, *out, *resume, *report, *loader;
    const char *tokenizer;   /* tokenizer.json of a fresh run's BPE vocabulary (NULL: bytes; a
                              * resumed run uses its checkpoint's) */
    const char *const *data; /* n_data text files or directories */
    int n_data;
    double heldout;
    int64_t max_bytes;
    int steps, batch, seq, warmup, ranks, save_every, stop_at, log_every, threads;
    int64_t seed;
    double lr, weight_decay, grad_clip;
    const volatile sig_atomic_t *stop_flag; /* as in ls_train_run_opts */
    /* per-rank precision plan (may be NULL): checked with the world size, then applied on
     * each rank after the data source is set (summary: every rank's settings, rank 0) */
    const char *precision_plan;
    int (*plan_check)(const char *path, int ranks);
    int (*plan_apply)(const char *path, ls_model *m, ls_dist *d, int batch, int seq, ls_throttle *thr,
                      char *summary, size_t n);
    /* called on every rank right before the loop (e.g. to install hooks; the ranks agree
     * on its status) and right after it; either may be NULL */
    int (*attach)(void *ctx, ls_trainer *t, ls_dist *d);
    void (*detach)(void *ctx, ls_trainer *t);
    /* called on every rank after the data is open and before the trainer is made (a
     * pre-started world waits here until promoted); it may set *resume. May be NULL */
    int (*prepare)(void *ctx, ls_dist *d, const char **resume);
    void *ctx;
} ls_train_job;

ls_train_job ls_train_job_defaults(void);
/* Checks the options (world: the ranks mpirun started, 0 outside mpirun) and fills the
 * defaults of a fresh run; LS_EINVAL with a message naming the option. */
int ls_train_job_check(ls_train_job *j, int world);

typedef struct {
    int64_t start_step, end_step;
    int steps; /* the schedule's length */
    int n_losses;
    float first_loss, last_loss; /* NAN when no step ran */
    double tokens_per_s, wall_s;
    int stopped;     /* ended early by stop_flag: saved, resumable */
    int report_here; /* on failure: this rank is the one that reports the error */
    int started;     /* the job's inputs were read and checked: a failure is the run's (a rank,
                      * the loader service, the loop), not the command line's */
} ls_train_job_result;

/* Runs a checked job on d (collective): threads, data, trainer, precision plan, the loop
 * with its saves (and the loader state beside each checkpoint with a loader), and on rank 0
 * the log lines and the report. */
int ls_train_job_run(const ls_train_job *j, ls_dist *d, ls_train_job_result *r);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_TRAIN_H */
