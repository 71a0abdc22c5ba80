/*
 * serve.h - mixed-precision inference and pipeline-parallel serving (after LLM-PQ and
 * SplitQuant, REFERENCES.md §3): an inference engine over (quantized) checkpoints with a
 * slot-based KV cache, the plan file that splits a model into stages with per-layer bits,
 * a multi-process ZeroMQ pipeline with continuous batching behind an OpenAI-style HTTP
 * API, and the profiler that feeds the planner.
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
 * "<name>.min" (F32, rows × groups). Metadata "llmsys.quant" =
 * {"version":1,"group":G,"bits":[b_0,...,b_{L-1}]}. Everything else stays F32.
 */
#ifndef LLMSYS_SERVE_H
#define LLMSYS_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "llmsys/model.h"
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
void ls_engine_free(ls_engine *e);
const ls_model_config *ls_engine_config(const ls_engine *e);
/* Bits of layer l (must be held), weight bytes held, and the held range. */
int ls_engine_layer_bits(const ls_engine *e, int l);
size_t ls_engine_weight_bytes(const ls_engine *e);
void ls_engine_range(const ls_engine *e, int *begin, int *end);
int ls_engine_max_seqs(const ls_engine *e);

/* One sequence of a micro-batch: n new tokens at positions pos..pos+n-1 of KV slot. */
typedef struct {
    int slot, pos, n;
} ls_engine_seq;

/* Runs the held layers over a micro-batch. Input: tokens (Σn) on the first stage, else
 * act_in (Σn × C). Output: on the last stage logits, (Σn × V) when all_logits else (nseq ×
 * V) for each sequence's last token; elsewhere activations (Σn × C). A sequence with n == 1
 * goes through the batch-invariant mat-vec kernels, n > 1 through the GEMM path, so every
 * sequence's result is the same whatever else shares its micro-batch. */
int ls_engine_forward(ls_engine *e, const ls_engine_seq *seqs, int nseq, const int *tokens, const float *act_in,
                      float *out, int all_logits);
/* Size of the output buffer ls_engine_forward needs (floats). */
size_t ls_engine_out_floats(const ls_engine *e, const ls_engine_seq *seqs, int nseq, int all_logits);

/* Whole-model engines only. nll[t] = -log p(tokens[t+1] | tokens[..t]) in nats for t <
 * n-1, n <= n_ctx, using KV slot 0. (For `llmsys eval` on quantized checkpoints.) */
int ls_engine_score(ls_engine *e, const int *tokens, int n, float *nll);
/* Greedy generation in slot 0: prefill the prompt in one call, then one token per step;
 * stops after EOS, n_new tokens or a full context. */
int ls_engine_generate(ls_engine *e, const int *prompt, int n_prompt, int n_new, int *out, int *n_out);
/* Whole-model engines only: the same evaluation as ls_eval_tokens (train.h) - windows of
 * T tokens, BOS targets not counted, bits per text byte - but through this engine's
 * (quantized) kernels. This is what `llmsys eval` calls for a quantized checkpoint. */
int ls_engine_eval_tokens(ls_engine *e, const uint16_t *tokens, size_t n, int T, size_t max_tokens,
                          ls_eval_result *r);
/* 1 if the checkpoint at path is quantized ("llmsys.quant" metadata), 0 if not, < 0 on error. */
int ls_ckpt_is_quantized(const char *path);

/* ---------------------------------------------------------------- plan file */

#define LS_PLAN_MAX_STAGES 16

typedef struct {
    char device[64];
    char address[256]; /* "" when absent */
    int layer_begin, layer_end;
    int *bits; /* layer_end - layer_begin entries */
} ls_plan_stage;

typedef struct {
    char model_name[256];
    int n_layer;
    int n_stages;
    ls_plan_stage stages[LS_PLAN_MAX_STAGES];
    int mb_prefill, mb_decode;
} ls_plan;

/* Parses and validates a plan (FORMATS.md): format/version, contiguous stages covering
 * [0, n_layer) exactly once, one bits entry per layer in {3,4,8,16}, micro-batches >= 1.
 * expect_n_layer > 0 also checks the plan is for a model of that depth. Messages name the
 * file and the offending stage. */
int ls_plan_read(const char *path, int expect_n_layer, ls_plan *p);
int ls_plan_parse(const char *json, size_t len, const char *what, int expect_n_layer, ls_plan *p);
/* A one-stage plan over the whole model at the given bits (n_layer entries). */
int ls_plan_single(ls_plan *p, int n_layer, const int *bits, int mb_prefill, int mb_decode);
void ls_plan_free(ls_plan *p);
/* Writes a plan file (atomic). */
int ls_plan_write(const char *path, const ls_plan *p);


/* ---------------------------------------------------------------- pipeline workers */

typedef struct {
    const char *model;
    int stage;                  /* index in the pipeline */
    int layer_begin, layer_end; /* held layers */
    const int *bits;            /* per held layer, or NULL */
    int group, max_seqs, nthreads;
    const char *in_addr;  /* ZeroMQ endpoint this stage binds (PULL) */
    const char *out_addr; /* endpoint of the next stage or the front (PUSH connects) */
} ls_worker_opts;

/* Runs one stage until a shutdown message arrives (what `llmsys serve --worker` does).
 * Returns an error only for setup failures (load, bind); bad messages are reported
 * downstream as error messages and the loop goes on. */
int ls_serve_worker_run(const ls_worker_opts *o);

/* Reads a checkpoint's config and per-layer bits (32 for an fp32 checkpoint) without
 * loading weights into an engine. *bits is malloc'd (n_layer entries); group may be NULL. */
int ls_ckpt_info(const char *path, ls_model_config *cfg, int **bits, int *group);

/* ---------------------------------------------------------------- server */

typedef struct ls_server ls_server;

typedef struct {
    const char *model;      /* checkpoint (fp32 or quantized) */
    const ls_plan *plan;    /* NULL: one stage, the checkpoint's own bits */
    const char *self;       /* llmsys binary, launched as `serve --worker` per stage */
    const char *host;       /* HTTP bind address (default 127.0.0.1) */
    int port;               /* 0: any free port (see ls_server_port) */
    int max_seqs;           /* sequences decoded concurrently = KV slots (default 16) */
    size_t max_body;        /* largest accepted request body (default 64 KiB) */
    int nthreads;           /* kernel threads per stage (default 1) */
    double step_timeout_s;  /* a micro-batch not back after this fails (default 60) */
    const char *model_name; /* reported in responses (default: the checkpoint path) */
    int mb_prefill, mb_decode; /* without a plan (defaults 2 and 8) */
} ls_server_opts;

ls_server_opts ls_server_defaults(void);
/* Starts the stage workers, waits until every stage has loaded its layers, then starts the
 * scheduler and the HTTP daemon. On failure everything started is stopped again. */
int ls_server_start(ls_server **out, const ls_server_opts *o);
int ls_server_port(const ls_server *s);
int ls_server_num_stages(const ls_server *s);
/* Process id of a stage worker (for tests and /health), or -1. */
int ls_server_stage_pid(const ls_server *s, int stage);
/* Stops HTTP and the scheduler, shuts the workers down (killing stragglers), frees s. */
void ls_server_stop(ls_server *s);

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
/* Measures a layer of the fp32 checkpoint at each bit width over the grid (the mean over a
 * span of consecutive middle layers, as a stage runs them), the head, and the local
 * ZeroMQ link; *out is the profile JSON of FORMATS.md (caller deletes). */
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

/* One blocking HTTP/1.1 request to host:port (for the demo, benchmarks and tests).
 * *resp is the malloc'd body (NUL-terminated), *status the HTTP status. */
int ls_http_request(const char *host, int port, const char *method, const char *path, const char *body,
                    double timeout_s, int *status, char **resp);

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

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_SERVE_H */
