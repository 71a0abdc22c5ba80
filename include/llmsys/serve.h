/*
 * serve.h - mixed-precision inference and pipeline-parallel serving (after LLM-PQ and
 * SplitQuant, docs/references.md §3): an inference engine over (quantized) checkpoints with a
 * slot-based KV cache, a multi-process ZeroMQ pipeline that runs a plan (plan.h: stages
 * with per-layer bits) with continuous batching behind an OpenAI-style HTTP API, and the
 * profiler that feeds the planner.
 *
 *     ls_engine *e;
 *     ls_engine_opts o = ls_engine_defaults();           // whole model, checkpoint's bits
 *     if (ls_engine_open(&e, "q.safetensors", &o) != LS_OK) { ...ls_errmsg()... }
 *     int out[64], n;
 *     ls_engine_generate(e, prompt, n_prompt, 64, out, &n);   // greedy
 *     ls_engine_free(e);
 *
 * Quantized checkpoint (written by ls_quant_checkpoint): the llmsys checkpoint layout
 * (model.h names, "llmsys.config" metadata) where each layer's four Linear weights are
 * stored in its own format: F32 or F16 under the plain name, or for 8/4/3 bits
 * "<name>.q" (U8, rows × packed row bytes), "<name>.scale" and, for 4/3 bits,
 * "<name>.min" (F16, rows × groups; F32 in version 1 files, which still load). Metadata
 * "llmsys.quant" = {"version":2,"group":G,"bits":[b_0,...,b_{L-1}]}. Everything else
 * stays F32.
 */
#ifndef LLMSYS_SERVE_H
#define LLMSYS_SERVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "llmsys/http.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/quant.h"
#include "llmsys/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- quantized checkpoints */

/* Reads the fp32 checkpoint in_path and writes out_path with layer l at bits[l] (n_layer
 * entries, each 3, 4, 8, 16 or 32) and the given group size. Atomic; errors name the file. */
int ls_quant_checkpoint(const char *in_path, const int *bits, int n_layer, int group, const char *out_path);
/* Parses a bits map file: JSON {"bits": [..]} or a plain list of n_layer integers
 * (whitespace/comma separated). *bits is malloc'd, *n its length. */
int ls_quant_read_bits_map(const char *path, int **bits, int *n);

/* What `llmsys quantize` did: per-layer bits (malloc'd, n_layer entries), layer weight
 * bytes of the result and of fp32, and the seconds quantizing took. */
typedef struct {
    int *bits, n_layer;
    size_t weight_bytes;
    double fp32_bytes, seconds;
} ls_quantize_result;
/* `llmsys quantize`: the fp32 checkpoint model into out, at the widths of the bits_map file
 * (ls_quant_read_bits_map) or at bits (16, 8, 4 or 3) for every layer, exactly one of the two;
 * group columns per group (32, 64, 128 or 256). eval (n_eval paths, may be none) is the corpus
 * whose held-out share (heldout, in (0, 0.5], as in training; at most eval_tokens tokens, 0 all)
 * ls_quant_eval_heldout will score, report the JSON summary ls_quantize_report_write will write. */
typedef struct {
    const char *model, *out, *bits_map, *report;
    int bits, group;
    const char *const *eval;
    int n_eval;
    double heldout;
    size_t eval_tokens;
} ls_quantize_opts;
ls_quantize_opts ls_quantize_defaults(void); /* group 64, held-out share 0.05 */
/* Checks first what would fail once out is written: the options (LS_EINVAL, naming the flag),
 * the eval corpus (ls_quant_eval_check) and the directories of report and out. Then quantizes;
 * out is written atomically. */
int ls_quantize(const ls_quantize_opts *o, ls_quantize_result *r);
void ls_quantize_result_free(ls_quantize_result *r);
/* Held-out bits/byte over the corpus paths (heldout share as in training, at most max_tokens
 * tokens, 0 all) of the quantized checkpoint qpath (engine) and, when bpb_f != NULL, of the
 * fp32 checkpoint fp32_path (the training module's evaluator), on the same windows. */
int ls_quant_eval_heldout(const char *fp32_path, const char *qpath, const char *const *paths, int n_paths,
                          double heldout, size_t max_tokens, double *bpb_f, double *bpb_q);
/* What ls_quant_eval_heldout would refuse about its corpus, checked before anything is written:
 * the paths read and tokenized with fp32_path's tokenizer, and enough held-out tokens for one
 * window of the model's context. */
int ls_quant_eval_check(const char *fp32_path, const char *const *paths, int n_paths, double heldout,
                        size_t max_tokens);
/* Measured sensitivity of each layer to quantization, through the serving engine's kernels
 * (nthreads passes at a time, each on its own engine; OpenBLAS on one thread throughout):
 * for layer l and width bits[j] (nb widths), the mean KL divergence of the next-token
 * distribution of the fp32 checkpoint model with layer l at bits[j] and every other layer at 16
 * from the all-16-bit model's, over the windows ls_eval_tokens would score of tok (windows of
 * the model's context, about max_tokens, 0 all), in kl[l*nb + j]. nll (may be NULL) gets each
 * one's mean next-token NLL, and nll[n_layer*nb] the all-16-bit model's. The reference
 * distributions are held in memory: LS_EINVAL when they would pass 1 GiB (lower max_tokens). */
int ls_quant_layer_kl(const char *model, const uint16_t *tok, size_t n, size_t max_tokens, int nthreads,
                      const int *bits, int nb, double *kl, double *nll);
/* The quality indicator measured end to end (`llmsys plan indicator --method kl`):
 * omega[l*4 + k] = ls_quant_layer_kl of the fp32 checkpoint model at ls_plan_bits[k] (0 at 16
 * bits, the reference) on the train split of the corpus paths, normalised as every indicator. */
int ls_quant_indicator_kl(const char *model, const char *const *paths, int n_paths, size_t max_tokens, int nthreads,
                          const ls_plan_arch *a, double *omega);
/* `llmsys plan indicator`: which indicator of which model, measured on what. */
typedef struct {
    const char *model;        /* an llmsys checkpoint path, or a catalog name (method "default" only) */
    const char *method;       /* "variance" (LLM-PQ; NULL too), "measured", "default" or "kl" */
    const char *const *calib; /* corpus paths the indicator is measured on (n_calib), or none */
    int n_calib;
    int64_t calib_tokens; /* about this many tokens of their train split; 0 all; < 0 the
                             method's default (16 384; kl 4 096, it runs 1 + 3·n_layer passes) */
    int relative;         /* LS_PLAN_QUALITY_RELATIVE (calibrated variance or measured only) */
    int nthreads;         /* kl: engine passes at a time, one thread each (0: 1) */
} ls_indicator_opts;
/* What ls_indicator_compute would refuse about o's combination of options, before any work:
 * LS_EINVAL naming the flag (--method, --calib-data, --relative). */
int ls_indicator_check(const ls_indicator_opts *o);
/* The indicator o asks for, of the model a describes, in omega (a->n_layer·LS_PLAN_NBITS):
 * kl (ls_quant_indicator_kl), calibrated (ls_plan_quality_calibrated; calib gets the
 * calibration text's tokens and loss, zero otherwise) or from the weights alone
 * (ls_plan_quality_method). */
int ls_indicator_compute(const ls_indicator_opts *o, const ls_plan_arch *a, double *omega, ls_eval_result *calib);
/* `llmsys eval`: the checkpoint at path, fp32 (ls_eval_tokens, B windows per pass) or
 * quantized (the engine), on split s of the corpus (paths, co) in windows of T tokens (0: the
 * model's context), at most max_tokens (0: all). wall_s times the evaluation alone. */
typedef struct {
    ls_eval_result r;
    double unigram_entropy; /* of the split's bytes */
    double wall_s;
} ls_eval_ckpt_result;
int ls_eval_checkpoint(const char *path, const char *const *paths, int n_paths, const ls_corpus_opts *co, ls_split s,
                       int T, int B, size_t max_tokens, ls_eval_ckpt_result *out);
/* Writes the JSON summary of an evaluation of model (`llmsys eval --report`). */
int ls_eval_report_write(const char *report, const char *model, ls_split s, const ls_eval_ckpt_result *r);
/* Writes the JSON summary of `llmsys quantize --report` (model, out, group, bits, weight
 * bytes, seconds, and with_eval: the fp32 and quantized held-out bits/byte). */
int ls_quantize_report_write(const char *report, const char *model, const char *out, int group,
                             const ls_quantize_result *q, int with_eval, double bpb_f, double bpb_q);

/* ---------------------------------------------------------------- engine */

typedef struct ls_engine ls_engine;

typedef struct {
    int layer_begin, layer_end; /* layers this engine holds, [begin, end); end <= 0: to n_layer */
    const int *bits;  /* bits per held layer (end-begin entries) or NULL: the checkpoint's own */
    int group;        /* group size when quantizing an fp32 checkpoint on load (default 64) */
    int max_seqs;     /* KV-cache slots (default 8) */
    int nthreads;     /* kernel threads (default 1) */
} ls_engine_opts;

ls_engine_opts ls_engine_defaults(void);

/* Loads the layers of o from a fp32 or quantized checkpoint. The first layer range owner
 * (begin == 0) holds the embeddings, the last (end == n_layer) the final LN and LM head.
 * Bits that differ from a quantized checkpoint's own are refused (LS_EINVAL); an fp32
 * checkpoint is quantized on load. */
int ls_engine_open(ls_engine **out, const char *path, const ls_engine_opts *o);
/* A whole-model fp32 engine from parameters in memory: n = ls_model_config_num_params(cfg)
 * floats in model.h's tensor order (ls_model_params), or NULL for zeros until
 * ls_engine_load_params (an RL rollout's engine before its first weight version). The byte
 * vocabulary; o's max_seqs and nthreads apply, a layer range or bits are refused (LS_EINVAL). */
int ls_engine_new(ls_engine **out, const ls_model_config *cfg, const float *params, const ls_engine_opts *o);
void ls_engine_free(ls_engine *e);
const ls_model_config *ls_engine_config(const ls_engine *e);
/* Bits of layer l (must be held), weight bytes held, and the held range. */
int ls_engine_layer_bits(const ls_engine *e, int l);
size_t ls_engine_weight_bytes(const ls_engine *e);
void ls_engine_range(const ls_engine *e, int *begin, int *end);
int ls_engine_max_seqs(const ls_engine *e);

/* One sequence of a micro-batch: n new tokens at positions pos..pos+n-1 of KV slot. */
typedef ls_gpt_seq ls_engine_seq;

/* Runs the held layers over a micro-batch. Input: tokens (Σn) on the first stage, else
 * act_in (Σn × C). Output: on the last stage logits, (Σn × V) when all_logits else (nseq ×
 * V) for each sequence's last token; elsewhere activations (Σn × C). A sequence with n == 1
 * goes through the batch-invariant mat-vec kernels, n > 1 through the GEMM path, so every
 * sequence's result is the same whatever else shares its micro-batch. */
int ls_engine_forward(ls_engine *e, const ls_engine_seq *seqs, int nseq, const int *tokens, const float *act_in,
                      float *out, int all_logits);
/* Replaces the weights of a whole-model fp32 engine with params (n floats in model.h's
 * tensor order, e.g. ls_model_params); the KV cache is left as is. LS_EINVAL on a size
 * mismatch, LS_EUNSUPPORTED for a quantized engine. */
int ls_engine_load_params(ls_engine *e, const float *params, size_t n);
/* Size of the output buffer ls_engine_forward needs (floats). */
size_t ls_engine_out_floats(const ls_engine *e, const ls_engine_seq *seqs, int nseq, int all_logits);

/* Whole-model engines only. nll[t] = -log p(tokens[t+1] | tokens[..t]) in nats for t <
 * n-1, n <= n_ctx, using KV slot 0. (For `llmsys eval` on quantized checkpoints.) */
int ls_engine_score(ls_engine *e, const int *tokens, int n, float *nll);
/* Greedy generation in slot 0: prefill the prompt in one call, then one token per step;
 * stops after EOS, n_new tokens or a full context. */
int ls_engine_generate(ls_engine *e, const int *prompt, int n_prompt, int n_new, int *out, int *n_out);
/* Whole-model engines only: the same evaluation as ls_eval_tokens (train.h) - the same
 * windows of T tokens, BOS targets not counted, bits per text byte - but through this engine's
 * (quantized) kernels. This is what `llmsys eval` calls for a quantized checkpoint. */
int ls_engine_eval_tokens(ls_engine *e, const uint16_t *tokens, size_t n, int T, size_t max_tokens,
                          ls_eval_result *r);
/* 1 if the checkpoint at path is quantized ("llmsys.quant" metadata), 0 if not, < 0 on error. */
int ls_ckpt_is_quantized(const char *path);

/* Stages one server runs (the plan itself may have up to LS_PLAN_MAX_DEV). */
#define LS_SERVE_MAX_STAGES 16

/* ---------------------------------------------------------------- pipeline workers */

typedef struct {
    const char *model;     /* checkpoint (fp32 or quantized) */
    const char *plan_path; /* plan file (ls_plan_read); the stage's layers, bits and group come from it */
    int stage;             /* index in the plan's pipeline */
    int max_seqs, nthreads;
    const char *in_addr;  /* ZeroMQ endpoint this stage binds (PULL) */
    const char *out_addr; /* endpoint of the next stage or the front (PUSH connects) */
} ls_worker_opts;

/* Runs one stage of a plan until a shutdown message arrives (what `llmsys serve --worker
 * --plan FILE --stage I` does; the front writes the file). Returns an error only for setup
 * failures (plan, load, bind); bad messages are reported downstream as error messages and
 * the loop goes on. */
int ls_serve_worker_run(const ls_worker_opts *o);

/* Reads a checkpoint's config and per-layer bits (32 for an fp32 checkpoint) without
 * loading weights into an engine. *bits is malloc'd (n_layer entries); group may be NULL. */
int ls_ckpt_info(const char *path, ls_model_config *cfg, int **bits, int *group);

/* ---------------------------------------------------------------- server */

typedef struct ls_server ls_server;

typedef struct {
    const char *model;      /* checkpoint (fp32 or quantized) */
    const ls_plan *plan;    /* NULL: one stage, the checkpoint's own bits */
    const char *plan_path;  /* or a plan file, read at start (ls_plan_read) when plan is NULL */
    const char *self;       /* llmsys binary, launched as `serve --worker` per stage */
    const char *host;       /* HTTP bind address, IPv4 or IPv6 (default 127.0.0.1) */
    int port;               /* 0: any free port (see ls_server_port) */
    int max_seqs;           /* sequences decoded concurrently = KV slots (default 16) */
    size_t max_body;        /* largest accepted request body (default 64 KiB) */
    int nthreads;           /* kernel threads per stage (default 1) */
    double step_timeout_s;  /* a micro-batch not back after this fails (default 60) */
    const char *model_name; /* served name: /v1/models and "model" in responses (default: the checkpoint's file stem) */
    int mb_prefill, mb_decode; /* without a plan (defaults 2 and 8) */
    unsigned max_conns, max_conns_per_ip; /* HTTP connections in total / per client address (0: 512 / 64) */
    unsigned http_timeout_s;              /* an idle or stalled HTTP client is dropped after this (0: 60) */
    double probe_timeout_s;               /* idle pipeline probe not back in this: /health not ok (default 2) */
    int stage_restarts;                   /* times a stage that dies is started again, per stage over the server's life
                                           * (default 3; 0: a dead stage stays dead) */
    double load_timeout_s;                /* stages loaded and a ping round the ring within this, at start and after a
                                           * restart (default 120) */
    const char *api_key; /* non-NULL (kept, not copied): every /v1/ request needs "Authorization: Bearer KEY";
                          * a host off loopback is refused without one */
} ls_server_opts;

ls_server_opts ls_server_defaults(void);
/* Starts the stage workers, waits until every stage has loaded its layers, then starts the
 * scheduler and the HTTP daemon. On failure everything started is stopped again. A stage that
 * dies while serving fails what is in flight and is started again (o->stage_restarts). */
int ls_server_start(ls_server **out, const ls_server_opts *o);
int ls_server_port(const ls_server *s);
int ls_server_num_stages(const ls_server *s);
/* The served model name (--served-model-name, or the checkpoint's file stem). */
const char *ls_server_model_name(const ls_server *s);
/* Process id of a stage worker (for tests and /health), or -1. */
int ls_server_stage_pid(const ls_server *s, int stage);
/* Stops HTTP and the scheduler, shuts the workers down (killing stragglers), frees s. */
void ls_server_stop(ls_server *s);

/* The counters and gauges /metrics reports, read in memory. */
typedef struct {
    uint64_t requests, failed, rejected; /* completions accepted, failed, refused before scheduling */
    uint64_t tokens, prompt_tokens;      /* generated, prefilled */
    uint64_t mb_prefill, mb_decode;      /* micro-batches sent, by phase */
    int queue_depth, active, inflight;   /* waiting requests, sequences in a slot, micro-batches in the pipe */
    int n_stages;
    double busy_s[LS_SERVE_MAX_STAGES]; /* seconds each stage spent computing */
    int up[LS_SERVE_MAX_STAGES];        /* stage process alive */
    int restarts[LS_SERVE_MAX_STAGES];  /* times each stage was started again after it died */
    double uptime_s;
} ls_server_stats;

/* A consistent snapshot of the server's counters (taken under its lock). */
void ls_server_get_stats(ls_server *s, ls_server_stats *out);

/* ---------------------------------------------------------------- validate: planner vs pipeline */

/* Closing the loop (`llmsys plan validate`, docs/plan.md): profile this machine's CPU, build a
 * virtual cluster of identical profiled CPU stages on this host (its parallel capacity and
 * message latency measured now), plan the model on it with each planner, serve every plan
 * with the real multi-process pipeline behind HTTP, drive it with the planned workload (B
 * requests of S prompt tokens, N generated each, all submitted at once) and compare measured
 * with predicted throughput, per-stage busy seconds (the server's counters) and micro-batch
 * counts. Steps, in order: _open, _profile, _cluster, _solve, _measure; then _report. */

enum { LS_VALIDATE_MAX_RUNS = 100 };
#define LS_VALIDATE_OVERLAP_TOL 0.10 /* relative disagreement of measured and replayed stage overlap */

typedef struct {
    const char *model;   /* fp32 checkpoint; NULL: a random one of config, EOS suppressed */
    const char *config;  /* config of the random checkpoint ("tiny", "small") */
    const char *workdir; /* keep checkpoint, profile, cluster and plans here; NULL: a /tmp dir _free removes */
    const char *profile; /* reuse this device profile (copied to the work directory); NULL: measure one */
    const char *self;    /* llmsys binary, launched for the stage workers */
    int stages;          /* CPU stages in the virtual cluster, 1..LS_SERVE_MAX_STAGES */
    int threads;         /* kernel threads per stage */
    int runs;            /* timed batches per plan after one warm-up, 1..LS_VALIDATE_MAX_RUNS */
    int reps;            /* profile repetitions per point */
    ls_plan_workload wl;
    double mem_gb; /* memory each stage offers the planner */
    ls_plan_qtarget quality;
    int algos[LS_PLAN_ALGO_COUNT], n_algos; /* planners whose plans are served */
    int replay_select; /* splitquant: re-rank top plans by the replay (ls_plan_problem.replay_select) */
} ls_validate_opts;

/* One timed batch of one plan. */
typedef struct {
    double seconds, tok_s;
    int tokens;
    double busy_s[LS_SERVE_MAX_STAGES]; /* per stage, from the server's counters */
    double mb_prefill, mb_decode;       /* micro-batches sent */
    double front_cpu_s; /* CPU seconds of this process (serve's front, HTTP, load generator) during the batch */
} ls_validate_run;

typedef struct {
    ls_plan_result plan;                     /* the planner's plan and its prediction */
    char path[1300];                         /* its plan file */
    ls_plan_sim_result replay;               /* the replay of serve's schedule on this host */
    int pred_mb_prefill, pred_mb_decode;     /* micro-batches the closed form counts */
    double pred_busy_s[LS_SERVE_MAX_STAGES]; /* compute seconds per stage the closed form counts */
    /* after _measure */
    ls_validate_run run[LS_VALIDATE_MAX_RUNS];
    double tok_s, min_tok_s, max_tok_s; /* median, min, max over the runs */
    double error, replay_error;         /* (measured - predicted) / predicted */
    double busy_s[LS_SERVE_MAX_STAGES]; /* mean measured busy seconds per stage */
    double batch_s, overlap;            /* mean batch seconds; summed busy over wall time */
    double ratio, ratio_min, ratio_max; /* first plan's tok/s over this one's, per round (median, range) */
    double pred_ratio, replay_ratio;    /* the same ratio predicted and replayed */
    double replay_overlap;              /* summed busy over wall time in the replay */
    double first_replay_tok_s;          /* the replay with the first probe (= replay unless re-taken) */
    double nofront_replay_tok_s;        /* the replay without the front's work (front_s = 0) */
} ls_validate_plan;

typedef struct {
    char dir[1024], ckpt[1200], profile[1200], cluster[1200];
    ls_model_config cfg;  /* of the checkpoint */
    double profile_s;     /* seconds the profile took (0: reused) */
    double host_capacity; /* ls_host_capacity (NAN: failed); the re-taken one when probe_retaken */
    double first_capacity; /* the probe taken before serving */
    int probe_retaken;     /* the measured stage overlap disagreed with the replay's by more than
                            * LS_VALIDATE_OVERLAP_TOL: the probe was re-taken after serving and
                            * every replay recomputed with it */
    double hop_s;         /* ls_host_hop_latency (NAN: failed) */
    double front_s;       /* serve's front (this process: scheduler, HTTP, load generator) CPU seconds
                           * per micro-batch in the warm-up rounds; the replays charge it (0: none) */
    double link_lat_s;    /* the profile's link latency */
    int n_plans;
    ls_validate_plan *plans; /* n_plans, in the order of opts.algos */
} ls_validate_result;

typedef struct ls_validate ls_validate;

/* Defaults: config small, 2 stages, batch 8, prompt 32, gen 32, 1 thread, 5 runs, 5 reps,
 * 2 GB, quality bits:8, splitquant and uniform, replay selection. */
ls_validate_opts ls_validate_defaults(void);
/* Checks the options, reads and checks opts.profile (errors name that path), makes the work
 * directory and the checkpoint (or reads the given one's config). LS_EINVAL for options out of
 * range (--memory-gb and an empty --algos named) and for a workload beyond the model context.
 * A failure once the work directory exists (the checkpoint, the workload) still sets *out, so
 * that ls_validate_free removes a temporary directory: free *out whatever the result. */
int ls_validate_open(ls_validate **out, const ls_validate_opts *o);
/* Measures the device profile over a grid that brackets the workload, or writes the opts.profile
 * _open read, to <dir>/profile.json. */
int ls_validate_profile(ls_validate *v);
/* Probes the host (capacity, hop), writes the virtual cluster and sets up the problem. */
int ls_validate_cluster(ls_validate *v);
/* Solves with each planner, writes the plan files, replays each plan. */
int ls_validate_solve(ls_validate *v);
/* Serves every plan at once and times opts.runs batches per plan after a warm-up, the plans
 * alternating so that each meets the same load; fills the measured fields. */
int ls_validate_measure(ls_validate *v);
const ls_validate_result *ls_validate_get(const ls_validate *v);
/* _profile, _cluster, _solve and _measure in turn, printing each step's figures and the
 * table of plans (planner, measured and replayed throughput, micro-batches, busy seconds
 * per stage, ratios between plans) to f. *cluster_failed: the failure was in _cluster. */
int ls_validate_all(ls_validate *v, FILE *f, int *cluster_failed);
/* JSON summary: predicted vs measured per plan and stage (caller deletes). */
struct cJSON *ls_validate_report(const ls_validate *v);
/* Frees v and removes a temporary work directory. NULL is fine. */
void ls_validate_free(ls_validate *v);

/* ---------------------------------------------------------------- profiler */

typedef struct {
    const int *bits, *batches, *seqs, *ctxs; /* grids */
    int n_bits, n_batches, n_seqs, n_ctxs;
    int reps;     /* timings per point; the median is kept */
    int nthreads; /* kernel threads */
    int span;     /* consecutive middle layers timed together (<= 0: up to 4); a row is their mean */
    int no_link;  /* 1: skip the ZeroMQ link measurement (the profile then has no "link") */
} ls_profile_opts;

ls_profile_opts ls_profile_defaults(void);
#define LS_PROFILE_MAX_REPS 1000
/* Every grid non-empty, widths in {16, 8, 4, 3}, batches and lengths >= 1, reps in
 * [1, LS_PROFILE_MAX_REPS], threads in [1, LS_MODEL_MAX_THREADS]: LS_OK, else LS_EINVAL naming
 * the option (--bits, --reps, ...). */
int ls_profile_opts_check(const ls_profile_opts *o);
/* Checks o (ls_profile_opts_check), then measures a layer of the fp32 checkpoint at each bit width over the grid (the
 * mean over a span of consecutive middle layers, as a stage runs them), the head, and the local ZeroMQ link; *out is
 * the profile JSON of docs/plan-format.md (caller deletes). */
struct cJSON;
int ls_profile_run(const char *model, const ls_profile_opts *o, struct cJSON **out);
/* One-way latency and bandwidth between two local processes over ZeroMQ ipc. */
int ls_profile_link(double *latency_s, double *bandwidth_Bps);

/* ---------------------------------------------------------------- host probes */

/* Parallel capacity this host offers n stage processes now: decode steps of ckpt's middle
 * layers that n fresh processes complete together in a fixed 0.1 s window over the steps
 * one completes alone (median of 3 tries; at most n; 1 <= n <= 64). NAN on failure. */
double ls_host_capacity(const char *ckpt, int n);
/* Median one-way latency of a small ZeroMQ ipc message to a process that sleeps in its
 * receive between messages (rounds spaced gap_s apart). NAN on failure. */
double ls_host_hop_latency(int rounds, double gap_s);

/* ---------------------------------------------------------------- HTTP client */

/* ls_http_request (one request) is the library's HTTP client, in http.h. */

/* One greedy POST /v1/completions of prompt (a JSON-safe string): the first choice's text
 * into text (cut to n_text) and its token ids into tokens[max_tokens] (as many as came). */
int ls_http_complete(const char *host, int port, const char *prompt, int max_tokens, double timeout_s, char *text,
                     size_t n_text, int *tokens);

typedef struct {
    int ok, failed, tokens;
    double seconds, tokens_per_s;
    double mean_latency_s; /* per request */
    double mean_tpot_s;    /* request latency / its completion tokens, averaged */
} ls_load_result;

/* Sends n_requests greedy completions (max_tokens each, prompts round-robin) from
 * `concurrency` client threads and measures throughput and time per output token. */
int ls_http_load(const char *host, int port, const char *const *prompts, int n_prompts, int concurrency, int n_requests,
                 int max_tokens, ls_load_result *res);

/* ---------------------------------------------------------------- the serve demo */

/* `llmsys demo serve` under workdir/serve, printing to f: held-out bits/byte of the core
 * demo's model (or one trained here) per bits map, a mixed 8/4-bit plan on 2 stages served
 * over HTTP (stage workers run as `self serve --worker`) against fp32, and the pipelined
 * greedy output checked against single-process generation (LS_ESTATE when it differs). */
int ls_serve_demo(FILE *f, const char *workdir, const char *self, int quick);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_SERVE_H */
