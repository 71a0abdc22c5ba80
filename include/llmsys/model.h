/*
 * model.h - the llmsys core model: a small GPT-style decoder trained, evaluated and
 * sampled in C (after llm.c's train_gpt2.c).
 *
 * Architecture: byte-level vocabulary (256 bytes + BOS/EOS/PAD), learned absolute
 * position embeddings, n_layer pre-LayerNorm blocks of causal multi-head attention
 * and a GELU (tanh) MLP, a final LayerNorm, and an LM head TIED to the token
 * embedding (logits = h · wteᵀ).
 *
 * Parameters live in one allocation; tensors point into it. Names and shapes (the
 * same names appear in checkpoints; Linear weights are (out, in) as in PyTorch,
 * y = x·Wᵀ + b):
 *
 *   wte (V, C)  wpe (n_ctx, C)
 *   h.{l}.ln1.w (C)  h.{l}.ln1.b (C)
 *   h.{l}.attn.qkv.w (3C, C)  h.{l}.attn.qkv.b (3C)     q, k, v stacked in that order
 *   h.{l}.attn.proj.w (C, C)  h.{l}.attn.proj.b (C)
 *   h.{l}.ln2.w (C)  h.{l}.ln2.b (C)
 *   h.{l}.mlp.fc.w (F, C)  h.{l}.mlp.fc.b (F)
 *   h.{l}.mlp.proj.w (C, F)  h.{l}.mlp.proj.b (C)
 *   lnf.w (C)  lnf.b (C)
 *
 * Training step:
 *
 *     ls_model_zero_grad(m);
 *     float loss = ls_model_forward(m, tokens, targets, B, T);
 *     ls_model_backward(m);
 *     ls_model_adamw_step(m, &opt, step);
 */
#ifndef LLMSYS_MODEL_H
#define LLMSYS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "llmsys/core.h"
#include "llmsys/quant.h"
#include "llmsys/safetensors.h"
#include "llmsys/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    LS_TOK_BOS = 256,
    LS_TOK_EOS = 257,
    LS_TOK_PAD = 258,
    LS_VOCAB = 259, /* 256 bytes + 3 specials */
};

typedef struct {
    int vocab;   /* LS_VOCAB for bytes, or a BPE tokenizer's size (259 .. 65536; ids 256-258 as above) */
    int n_ctx;   /* maximum sequence length */
    int n_layer;
    int n_head;
    int d_model; /* C; divisible by n_head */
    int d_ff;    /* F; usually 4C */
} ls_model_config;

/* Named configs: "tiny" (<= 0.5 M params, tests) and "small" (5-10 M params, demo). */
int ls_model_config_named(const char *name, ls_model_config *cfg);
/* Checks ranges and divisibility; message names the bad field. */
int ls_model_config_validate(const ls_model_config *cfg);
/* Total parameter count for a config. */
size_t ls_model_config_num_params(const ls_model_config *cfg);
/* LS_OK when a step of batch sequences of T tokens (T >= 1) split over ranks fits this machine:
 * a rank's batch / ranks rows, their activation and backward buffers (one allocation per (B, T))
 * and token ids within the memory the process may use (ls_mem_total), and B·T within an int (the kernels count tokens
 * with int). Else LS_EINVAL "--batch must be at most N here (...)", before anything is allocated. */
int ls_model_batch_fit(const ls_model_config *cfg, int batch, int ranks, int T);
/* Floats of the activation and backward buffers a step of B sequences of T tokens allocates
 * (one allocation; the training planner's memory model counts them too). */
size_t ls_model_acts_floats(const ls_model_config *cfg, int B, int T);
/* Config <-> compact JSON string (stored in checkpoint metadata as "llmsys.config").
 * to_json returns a malloc'd string (caller frees). */
char *ls_model_config_to_json(const ls_model_config *cfg);
/* The same object as cJSON (caller deletes; NULL when out of memory): reports and profiles. */
struct cJSON *ls_model_config_json(const ls_model_config *cfg);
int ls_model_config_from_json(const char *json, ls_model_config *cfg);

typedef struct ls_model ls_model;

/* Allocates parameters, gradients and AdamW state, and initialises weights from seed
 * (GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2·n_layer)).
 * Activations are sized lazily by the first forward for its (B, T). */
int ls_model_init(ls_model **out, const ls_model_config *cfg, uint64_t seed);
void ls_model_free(ls_model *m);
const ls_model_config *ls_model_cfg(const ls_model *m);
/* The model's BPE vocabulary (saved in its checkpoints; ls_text_* map text with it): takes
 * ownership of tok (NULL: bytes); its size must equal cfg.vocab. */
int ls_model_set_tokenizer(ls_model *m, ls_bpe *tok);
const ls_bpe *ls_model_tokenizer(const ls_model *m); /* NULL: the byte vocabulary */

/* Parameter access (checkpoints, quantization, gradient all-reduce). */
typedef struct {
    const char *name;
    float *data;
    float *grad;
    float *adam_m, *adam_v;
    int ndim;
    int64_t shape[2];
    size_t numel;
} ls_param;

int ls_model_num_tensors(const ls_model *m);
ls_param ls_model_tensor(ls_model *m, int i);
/* The flat buffers (num_params floats each), in tensor order. */
size_t ls_model_num_params(const ls_model *m);
float *ls_model_params(ls_model *m);
float *ls_model_grads(ls_model *m);
float *ls_model_adam_m(ls_model *m);
float *ls_model_adam_v(ls_model *m);
/* Index of the tensor with this name, or -1. */
int ls_model_find_tensor(const ls_model *m, const char *name);

/* ---------------------------------------------------------------- checkpoint layout
 *
 * The one table of tensor names and shapes (the list at the top of this header): the
 * model's parameters, training checkpoints, quantized checkpoints, the serving engine
 * and the planner's indicators all walk it. Order: wte, wpe, then LS_LT_COUNT tensors
 * per layer in ls_layer_tensor order, then lnf.w, lnf.b. */
typedef enum {
    LS_LT_LN1W,
    LS_LT_LN1B,
    LS_LT_QKVW,
    LS_LT_QKVB,
    LS_LT_PROJW,
    LS_LT_PROJB,
    LS_LT_LN2W,
    LS_LT_LN2B,
    LS_LT_FCW,
    LS_LT_FCB,
    LS_LT_FCPW,
    LS_LT_FCPB,
    LS_LT_COUNT
} ls_layer_tensor;
/* Tensors outside the layers (layer -1 in ls_model_layout_index). */
typedef enum { LS_GT_WTE, LS_GT_WPE, LS_GT_LNFW, LS_GT_LNFB } ls_global_tensor;
/* The four Linear layers of a block, in forward order. */
typedef enum { LS_LIN_QKV, LS_LIN_PROJ, LS_LIN_FC, LS_LIN_MPROJ, LS_LIN_COUNT } ls_linear_kind;

typedef struct {
    char name[40];
    int ndim;
    int64_t shape[2]; /* shape[1] = 0 for 1-D tensors */
    size_t numel;
    int layer;  /* block index, -1 for wte, wpe, lnf.* */
    int kind;   /* ls_layer_tensor in a block, ls_global_tensor outside */
    int linear; /* ls_linear_kind when this is a Linear weight, else -1 */
} ls_tensor_spec;

/* Number of tensors of a config. */
int ls_model_layout_count(const ls_model_config *c);
/* Fills s with tensor i (0 <= i < count); LS_EINVAL outside. */
int ls_model_layout(const ls_model_config *c, int i, ls_tensor_spec *s);
/* Index of tensor kind of block layer, or of global tensor kind when layer is -1. */
int ls_model_layout_index(const ls_model_config *c, int layer, int kind);
/* 1 and *layer, *kind when name is a block tensor "h.{l}.<suffix>", else 0. */
int ls_model_layout_parse(const char *name, int *layer, int *kind);
/* Tensor kind of Linear lin's weight (its bias is the next kind), and its (rows, cols). */
int ls_model_linear_tensor(int lin);
void ls_model_linear_shape(const ls_model_config *c, int lin, int *rows, int *cols);
/* Linear kind of a block tensor kind, or -1 when it is not a Linear weight. */
int ls_model_linear_of(int kind);

/* ---------------------------------------------------------------- checkpoint files
 *
 * Checkpoints are safetensors with metadata "llmsys.config" (ls_model_config_to_json),
 * optionally "llmsys.ckpt" (format version, LS_CKPT_VERSION), "llmsys.step" and
 * "llmsys.quant" (quantized checkpoints: {"version":1,"group":G,"bits":[...]}). */
#define LS_CKPT_VERSION "1"

/* Opens an llmsys checkpoint (fp32 or quantized), checks its config and format version,
 * fills cfg. The caller closes *f with ls_st_close. LS_EFORMAT / LS_EUNSUPPORTED with a
 * message naming the file. */
int ls_ckpt_open(const char *path, ls_st_file **f, ls_model_config *cfg);
/* Per-layer storage bits (n_layer entries) and group from "llmsys.quant"; all 32 and group
 * 64 when the checkpoint is not quantized. Returns 1 if quantized, 0 if not, < 0 on bad metadata. */
int ls_ckpt_quant_meta(ls_st_file *f, int n_layer, int *group, int *bits);
/* The BPE vocabulary stored as "llmsys.tokenizer" (*out NULL for the byte vocabulary); its size
 * must equal cfg->vocab, and a vocabulary other than bytes must have one. */
int ls_ckpt_tokenizer(ls_st_file *f, const ls_model_config *cfg, ls_bpe **out);
/* The same from a checkpoint path (cfg may be NULL: the file's own). */
int ls_ckpt_tokenizer_load(const char *path, const ls_model_config *cfg, ls_bpe **out);
/* The F32 data of layout tensor i in an open checkpoint, checked against the layout shape. */
int ls_ckpt_tensor(ls_st_file *f, const ls_model_config *c, int i, const float **data);

/* Forward over tokens (B, T) with T <= n_ctx. With targets (B, T) returns the mean
 * cross-entropy over targets != -1 (and keeps what backward needs); without targets
 * returns 0. Logits (B, T, V) stay readable until the next forward. Returns NAN and sets
 * the error on invalid input (token out of range, T > n_ctx). */
float ls_model_forward(ls_model *m, const int *tokens, const int *targets, int B, int T);
const float *ls_model_logits(const ls_model *m);
/* The input of block Linear kind (ls_linear_kind) of layer l in the last forward, row-major
 * (*rows, *in): rows = B·T of that forward, in = d_model (d_ff for LS_LIN_MPROJ). Readable
 * until the next forward; NULL before any forward or for l or kind out of range. */
const float *ls_model_lin_input(const ls_model *m, int l, int kind, int *rows, int *in);
/* 1/sqrt(var + eps) of every row's input to LayerNorm `which` (0: ln1, 1: ln2) of layer l in the
 * last forward, or of the final LayerNorm for l = n_layer (which ignored): *rows = B·T
 * entries. Readable until the next forward; NULL as ls_model_lin_input. */
const float *ls_model_ln_rstd(const ls_model *m, int l, int which, int *rows);
/* Per-position losses (B, T) of the last forward with targets: -log p(target), 0 where
 * the target is -1 (for eval: sum them for total nats). NULL if the last forward had none. */
const float *ls_model_losses(const ls_model *m);
void ls_model_zero_grad(ls_model *m);
/* Accumulates d(mean loss)/d(params) into the gradients; requires a forward with targets
 * (otherwise records an error and leaves the gradients unchanged). */
void ls_model_backward(ls_model *m);
/* Same, returning LS_ESTATE when the last forward had no targets. */
int ls_model_backward_checked(ls_model *m);

/* Wall time of forward+backward by layer kind, summed while profiling is on (for the
 * benchmark; off by default). enable resets the sums. */
typedef struct {
    double matmul;    /* dense Linear layers (sgemm, bias, residual, and GELU fused into the MLP), LM head */
    double attention; /* fused attention: per-head sgemm products + causal softmax */
    double layernorm, gelu, encoder, xent; /* gelu: only unfused calls (none in training) */
    double memory; /* zeroing of gradient scratch, copies of the batch */
} ls_model_prof;
void ls_model_profile_enable(ls_model *m, int on);
ls_model_prof ls_model_profile_get(const ls_model *m);

/* AdamW with decoupled weight decay on every 2-D tensor (wte, wpe and the Linear weights;
 * never biases or LayerNorm parameters), global gradient-norm clipping, linear warmup
 * then cosine decay to min_lr_frac·lr (see docs/model.md). */
typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
    float grad_clip;  /* <= 0 disables clipping */
    int warmup_steps;
    int total_steps;
    float min_lr_frac;
} ls_adamw_config;

/* One Adam update of n parameters p from gradients g (each scaled by grad_scale first)
 * with moments m, v at 1-based step t and decoupled weight decay: p -= lr·(m̂/(√v̂ + eps)
 * + weight_decay·p). The bias corrections bc = 1 - beta^t are divided out, or, with
 * recip set, multiplied in as 1/bc (the form steal's networks were trained with; the two
 * differ in the last bit, and each caller keeps its own for reproducible results). The
 * one Adam of the library: the GPT's AdamW (per chunk) and steal's MLP/CNN use it. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t t;
    int recip;
} ls_adam_hparams;
void ls_adam_update(float *p, const float *g, float *m, float *v, size_t n, const ls_adam_hparams *h);

ls_adamw_config ls_adamw_defaults(void);
float ls_lr_at(const ls_adamw_config *c, int step);
float ls_model_grad_norm(ls_model *m);
/* One update for step (0-based). Returns the pre-clip gradient norm. */
float ls_model_adamw_step(ls_model *m, const ls_adamw_config *c, int step);

/* Sampling: temperature 0 is greedy; top_k 0 and top_p 1 disable those filters. */
typedef struct {
    float temperature;
    int top_k;
    float top_p;
} ls_sample_config;

/* Picks a token from logits (V) under s using rng; a negative status on a bad config. */
int ls_sample_logits(const float *logits, int V, const ls_sample_config *s, ls_rng *rng);
/* The distribution ls_sample_logits draws from: probs (V) is zero outside the kept set
 * (top-k, then the smallest top-p prefix by probability; ties by lower index) and sums
 * to 1 over it. Returns the kept count (1 for greedy) or a negative status. */
int ls_sample_probs(const float *logits, int V, const ls_sample_config *s, float *probs);
/* Autoregressive generation with a KV cache: feeds prompt (n_prompt >= 1 tokens), then
 * samples up to n_new tokens into out, stopping early after EOS or at n_ctx.
 * *n_out receives the count generated. */
int ls_model_generate(ls_model *m, const int *prompt, int n_prompt, int n_new, const ls_sample_config *s,
                      ls_rng *rng, int *out, int *n_out);
/* Samples n_new tokens after a text prompt (BOS + its bytes; a prompt longer than the
 * context keeps its end). When the context fills, generation continues from the last half
 * context, so any length can be produced. *got counts the tokens in out (n_new at most);
 * stops after EOS. (`llmsys generate`, the core demo.) */
int ls_model_generate_text(ls_model *m, const char *prompt, int n_new, const ls_sample_config *s, ls_rng *rng,
                           int *out, int *got);
/* Writes the JSON summary of a generation (`llmsys generate --report`): model, prompt, the
 * generated text (specials dropped), tokens and tokens per second. */
int ls_generate_report_write(const char *path, const ls_model *m, const char *model, const char *prompt,
                             const int *out, int got, double seconds);

/* Incremental decoding (batch 1) with the model's own KV cache, as used by generate:
 * reset empties the cache; step feeds one token at the next position and returns its
 * logits (V), valid until the next step, or NULL (error set) on a bad token or a full
 * context. kv_pos is the number of tokens in the cache. Not thread-safe per model. */
int ls_model_kv_reset(ls_model *m);
const float *ls_model_kv_step(ls_model *m, int token);
int ls_model_kv_pos(const ls_model *m);

/* Policy-gradient loss (pg.c): per response token t with target y_t,
 *   L = -(1/N) Σ_t is_t · min(r_t·A_t, clip(r_t, 1-ε, 1+ε)·A_t),
 *   r_t = exp(logp_t - logp_prox_t),  is_t = min(exp(logp_prox_t - logp_behav_t), is_cap),
 * over the N positions whose target != -1 (PPO's clipped ratio against the proximal policy,
 * truncated importance weights for the behaviour policy that sampled the tokens, as in
 * decoupled PPO). logp_prox and is_t carry no gradient. */
typedef struct {
    float clip_eps; /* ε (default 0.2) */
    float is_cap;   /* truncation of the importance weight; <= 0: none */
} ls_pg_config;

typedef struct {
    double loss;       /* L */
    double clip_frac;  /* share of tokens whose gradient the clip removed */
    double mean_ratio; /* mean r_t */
    double mean_is;    /* mean is_t */
    int n_tokens;      /* N */
} ls_pg_stats;

/* Loss term of one token and dL_t/d(-logp_t) in *dnll (0 where clipped). */
float ls_pg_token(float logp, float logp_prox, float logp_behav, float adv, const ls_pg_config *c, float *dnll);
/* Backward of Σ_t w[t]·(-log p(target_t)) over the (B,T) positions of the last forward with
 * targets (w is (B,T); positions with target -1 ignored); accumulates into the gradients.
 * LS_ESTATE when the last forward had no targets. (gpt.c) */
int ls_model_backward_weighted(ls_model *m, const float *w);
/* Forward over tokens/targets (B,T), then accumulates dL/dθ of the loss above into the
 * gradients (the caller zeroes them and steps AdamW). logp_prox NULL: the proximal policy is
 * the current one (r_t = 1). logp_behav and adv are (B,T). *st may be NULL. */
int ls_model_pg_loss(ls_model *m, const int *tokens, const int *targets, int B, int T, const float *logp_prox,
                     const float *logp_behav, const float *adv, const ls_pg_config *c, ls_pg_stats *st);
/* log p(target) at every (B,T) position of tokens/targets under the current weights (0 where
 * the target is -1), no gradient. */
int ls_model_logprobs(ls_model *m, const int *tokens, const int *targets, int B, int T, float *logp);

/* ---------------------------------------------------------------- inference forward
 *
 * The GPT forward pass for inference, shared by ls_model_kv_step (fp32 parameters, one
 * KV slot) and the serving engine (serve.h: a layer range of fp32 or quantized weights,
 * KV slots for continuous batching). Each Linear layer is an ls_linear view whose
 * weights are either fp32 or an ls_qmat; ls_linear_forward dispatches to sgemm or to the
 * quant kernels. LayerNorm, attention over the KV cache and GELU are plain scalar loops
 * (the reference order, so every row's result is independent of its micro-batch). */

/* One sequence of a micro-batch: n new tokens at positions pos..pos+n-1 of KV slot. */
typedef struct {
    int slot, pos, n;
} ls_gpt_seq;

/* A Linear layer y = x·Wᵀ + b, W (rows = out, cols = in): fp32 w when q is NULL, else the
 * quantized (or F32-format) q. */
typedef struct {
    const float *w;
    const ls_qmat *q;
    const float *b; /* bias (rows) or NULL */
    int rows, cols;
} ls_linear;

/* Y (M, rows) = [residual] + X (M, cols)·Wᵀ + b. Quantized weights: rowwise selects the
 * batch-invariant row kernel (decode: every row computed alone, whatever M is) over the
 * GEMM path (prefill), nthreads splits W's rows for the row kernel, and residual must be
 * NULL. fp32 weights run through sgemm with the residual fused (it may be Y itself). */
void ls_linear_forward(const ls_linear *l, const float *X, int M, float *Y, const float *residual, int rowwise,
                       int nthreads);

/* The weights of one block and its KV cache (slots, n_ctx, C) for keys and values. */
typedef struct {
    const float *ln1w, *ln1b, *ln2w, *ln2b;
    ls_linear lin[LS_LIN_COUNT]; /* ls_linear_kind order */
    float *kcache, *vcache;
} ls_gpt_block;

/* The layers [layer_begin, layer_end) of a model: the first stage (layer_begin == 0)
 * embeds tokens with wte and wpe, the last (layer_end == n_layer) applies lnf and head
 * (the tied LM head: wte as a Linear without bias). */
typedef struct {
    ls_model_config cfg;
    int layer_begin, layer_end;
    const ls_gpt_block *blocks; /* layer_end - layer_begin */
    const float *wte, *wpe, *lnfw, *lnfb;
    ls_linear head;
    int slots;    /* KV slots in each block's cache */
    int nthreads; /* threads of the row kernel */
    /* LayerNorm, GELU and attention kernels: 0 = scalar loops, each row reduced in a fixed
     * order (the engine: batch-invariant serving); 1 = the training layers' kernels and
     * sgemm attention per head (the model's own decoding, fast for one sequence) */
    int blas;
} ls_gpt_weights;

/* Activation buffers of ls_gpt_forward, grown on demand; zero-initialise, then free. */
typedef struct {
    size_t cap_tokens;
    float *x, *h, *qkv, *att, *fc, *stats, *prob;
} ls_gpt_scratch;
void ls_gpt_scratch_free(ls_gpt_scratch *s);

/* Runs the layers of w over a micro-batch, writing each sequence's keys and values into
 * its KV slot. Input: tokens (Σn) on the first stage, else act_in (Σn × C). Output: on the
 * last stage logits, (Σn × V) when all_logits else (nseq × V) for each sequence's last
 * token; elsewhere activations (Σn × C). A sequence with n == 1 goes through the
 * batch-invariant row kernels, n > 1 through the GEMM path, so each sequence's result is
 * the same whatever else shares its micro-batch. LS_EINVAL on a bad slot, position or token. */
int ls_gpt_forward(const ls_gpt_weights *w, ls_gpt_scratch *s, const ls_gpt_seq *seqs, int nseq, const int *tokens,
                   const float *act_in, float *out, int all_logits);
/* Floats of the output ls_gpt_forward writes for this micro-batch. */
size_t ls_gpt_out_floats(const ls_gpt_weights *w, const ls_gpt_seq *seqs, int nseq, int all_logits);

/* Threads used by the model (OpenMP: matmul row blocks, attention heads, elementwise
 * loops; OpenBLAS runs single-threaded inside them); 0 = all cores. Sets OpenMP's
 * default for the calling thread. */
void ls_model_set_threads(int n);
/* The most threads a --threads option accepts (OpenMP's team start overflows the stack
 * near 100000). */
#define LS_MODEL_MAX_THREADS 1024

/* ---------------------------------------------------------------- per-layer precision
 * Mixed-precision Linear layers (docs/qsync.md): each of the 4·n_layer Linear layers of
 * the blocks (index LS_LIN(l, kind)) runs its forward GEMM and both backward GEMMs in
 * one precision. Weights, gradients and optimizer state stay fp32 (the master copy);
 * both operands of each GEMM are cast on the fly (bf16/fp16: round to nearest even;
 * int8: dynamic symmetric scales, per tensor or per channel) and accumulate in fp32
 * (int32 for int8, rescaled). The LM head and attention's products stay fp32. */
typedef enum {
    LS_PREC_FP32 = 0,
    LS_PREC_BF16 = 1,
    LS_PREC_FP16 = 2,
    LS_PREC_INT8 = 3,
    LS_PREC_COUNT = 4,
} ls_prec;

/* Linear layer index of kind (ls_linear_kind) in block l. */
#define LS_LIN(l, kind) ((l) * LS_LIN_COUNT + (kind))

/* "fp32", "bf16", "fp16", "int8" ("?" when out of range). */
const char *ls_prec_name(int p);
/* Parses a precision name (case-insensitive); LS_EINVAL names the known ones. */
int ls_prec_parse(const char *s, ls_prec *out);
/* Name of Linear layer i, "h.<l>.attn.qkv" style, into buf (the weight without ".w"). */
const char *ls_linear_name(int i, char *buf, size_t n);
/* Index of a Linear layer by that name for n_layer layers, or -1. */
int ls_linear_find(const char *name, int n_layer);

/* Sets the precision of every block Linear layer: prec has n = 4·n_layer entries (NULL: all
 * fp32); int8_per_channel selects per-row/per-column int8 scales (else one per tensor).
 * LS_EINVAL on a wrong count or precision. */
int ls_model_set_precision(ls_model *m, const uint8_t *prec, int n, int int8_per_channel);
/* Precision of Linear layer i (fp32 when none was set). */
ls_prec ls_model_precision(const ls_model *m, int i);

/* Called in backward for every block Linear layer with its input x (N,IC), weight w (OC,IC)
 * and output gradient dy (N,OC), all fp32, before its GEMMs (the sensitivity indicator). */
typedef void (*ls_linear_observer)(void *user, int lin, const float *x, const float *w, const float *dy, int N,
                                   int IC, int OC);
/* Installs (fn non-NULL) or removes the observer; LS_ENOMEM only. */
int ls_model_set_linear_observer(ls_model *m, ls_linear_observer fn, void *user);
/* While acc is non-NULL (n_layer * LS_LIN_COUNT entries), every block Linear layer's forward
 * and backward calls add their wall seconds (GEMMs, casts, bias, fused GELU) to acc[lin]:
 * the in-situ cost of each layer at its precision. NULL stops it; LS_ENOMEM only. */
int ls_model_set_linear_timer(ls_model *m, double *acc);

/* C (M,N) = beta·C + op(A)·op(B) with both operands cast to precision p (fp32 accumulation;
 * int8 scales per row of op(A) and column of op(B) when per_channel), beta 0 or 1, row-major
 * (trans_*: the operand is stored transposed). A standalone context, so benchmarks and tests
 * time exactly what the model runs. LS_EUNSUPPORTED / LS_ENOMEM on failure. */
typedef struct ls_prec_ctx ls_prec_ctx;
int ls_prec_ctx_new(ls_prec_ctx **out);
void ls_prec_ctx_free(ls_prec_ctx *c);
int ls_prec_gemm(ls_prec_ctx *c, ls_prec p, int per_channel, int trans_a, int trans_b, int M, int N, int K,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Casts a compact (rows, cols) fp32 matrix to precision p into c's scratch exactly as a GEMM
 * casts an operand (int8: finding its scale first); for timing the casts alone. */
int ls_prec_cast(ls_prec_ctx *c, ls_prec p, const float *x, int rows, int cols);
/* Which kernel runs precision p here: "openblas sgemm", "onednn matmul bf16 (fp32 acc)", ... */
const char *ls_prec_kernel(ls_prec_ctx *c, ls_prec p);
/* Seconds c's low-precision GEMMs spent since the last call, split into [0] casting or
 * quantising both operands (scales included), [1] the GEMM kernel, [2] dequantising the int32
 * result (int8 on the u8 x s8 path; 0 elsewhere); resets them. */
void ls_prec_ctx_split(ls_prec_ctx *c, double out[3]);
/* 1: int8 GEMMs through a cached oneDNN matmul primitive (s8 x s8, one scale for op(A), output
 * scales applied by oneDNN) even where the u8 x s8 GEMM would run; 0: the default choice. */
void ls_prec_ctx_set_int8_matmul(ls_prec_ctx *c, int on);
/* Bytes of low-precision GEMM scratch m holds: each buffer grown to the largest operand cast
 * so far, int8 scales included (0 before any low-precision GEMM). */
size_t ls_model_prec_scratch_bytes(const ls_model *m);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_MODEL_H */
