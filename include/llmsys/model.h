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
    int vocab;   /* LS_VOCAB */
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
/* Config <-> compact JSON string (stored in checkpoint metadata as "llmsys.config").
 * to_json returns a malloc'd string (caller frees). */
char *ls_model_config_to_json(const ls_model_config *cfg);
int ls_model_config_from_json(const char *json, ls_model_config *cfg);

typedef struct ls_model ls_model;

/* Allocates parameters, gradients and AdamW state, and initialises weights from seed
 * (GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2·n_layer)).
 * Activations are sized lazily by the first forward for its (B, T). */
int ls_model_init(ls_model **out, const ls_model_config *cfg, uint64_t seed);
void ls_model_free(ls_model *m);
const ls_model_config *ls_model_cfg(const ls_model *m);

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

/* Forward over tokens (B, T) with T <= n_ctx. With targets (B, T) returns the mean
 * cross-entropy over targets != -1 (and keeps what backward needs); without targets
 * returns 0. Logits (B, T, V) stay readable until the next forward. Returns NAN and sets
 * the error on invalid input (token out of range, T > n_ctx). */
float ls_model_forward(ls_model *m, const int *tokens, const int *targets, int B, int T);
const float *ls_model_logits(const ls_model *m);
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

/* Threads used by the model (OpenMP: matmul row blocks, attention heads, elementwise
 * loops; OpenBLAS runs single-threaded inside them); 0 = all cores. Sets OpenMP's
 * default for the calling thread. */
void ls_model_set_threads(int n);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_MODEL_H */
