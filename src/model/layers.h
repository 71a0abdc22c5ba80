/* layers.h - the GPT's layers as plain functions over float arrays (after llm.c): one
 * forward and one backward per layer, shapes in comments. Backward functions ACCUMULATE
 * (+=) into every gradient they write, so callers zero what must start from zero.
 * Internal to libllmsys; tests include it to check each layer alone.
 *
 * Threading: loops are split over rows, heads or output channels so that every output
 * element is written by exactly one thread in a fixed order: results do not depend on
 * the thread count or schedule (bit-identical runs). */
#ifndef LLMSYS_MODEL_LAYERS_H
#define LLMSYS_MODEL_LAYERS_H

/* out (N,C) = wte[tokens] + wpe[t] for the N = B*T positions. */
void ls_encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C);
/* dwte (V,C) += scatter of dout, dwpe (T,C) += sum over batch. */
void ls_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T, int C);

/* out (N,C) = (inp - mean)·rstd·w + b per row; saves mean, rstd (N) for backward. */
void ls_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                          int C);
void ls_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int N, int C);

/* out (N,OC) = residual (N,OC) + inp (N,IC) · wᵀ + bias (OC), w is (OC,IC); bias and
 * residual may be NULL, residual may be out itself. The residual operand is the residual
 * layer, fused: its backward is the identity, so the model passes the residual stream's
 * gradient through unchanged. */
void ls_matmul_forward(float *out, const float *inp, const float *w, const float *bias, const float *residual, int N,
                       int IC, int OC);
/* dinp (N,IC) += dout·w; dw (OC,IC) += doutᵀ·inp; dbias (OC) += column sums of dout.
 * dinp may be NULL (not needed). */
void ls_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                        int N, int IC, int OC);

/* Causal self-attention. qkv (B,T,3C) holds q, k, v; out (B,T,C); att (B,NH,T,T) keeps
 * the softmax probabilities (zero above the diagonal) for backward. */
void ls_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) += ...; scratch (B,NH,T,T) is overwritten. */
void ls_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, int B,
                           int T, int C, int NH);

/* GELU, tanh approximation: out (N) = 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))). */
void ls_gelu_forward(float *out, const float *inp, int N);
void ls_gelu_backward(float *dinp, const float *inp, const float *dout, int N);
/* d (N) *= gelu'(inp): the backward in place, overwriting the upstream gradient (the one
 * exception to accumulate-semantics; saves the model a buffer, a memset and two of five
 * memory streams over (N, 4C)). */
void ls_gelu_backward_inplace(float *d, const float *inp, int N);

/* Fused fc + GELU, the MLP's first half: pre (N,OC) = inp·wᵀ + bias, out = gelu(pre), each
 * thread finishing its rows while they are in cache. Equal (up to the sgemm row split) to
 * ls_matmul_forward followed by ls_gelu_forward. */
void ls_matmul_gelu_forward(float *pre, float *out, const float *inp, const float *w, const float *bias, int N, int IC,
                            int OC);
/* Backward of a Linear layer whose input is gelu(gelu_pre) (the MLP's second half):
 * dinp (N,IC) is OVERWRITTEN with (dout·w) ⊙ gelu'(gelu_pre), the gradient with respect
 * to gelu_pre; dw and dbias accumulate. Equal (up to the sgemm row split) to zeroing dinp,
 * then ls_matmul_backward, then ls_gelu_backward_inplace. */
void ls_matmul_gelu_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                             const float *gelu_pre, int N, int IC, int OC);

/* Row-wise softmax of logits (N,V) into probs and per-row loss -log p[target]
 * (0 where target == -1). Returns the mean loss over valid targets and stores their
 * count (0 valid targets -> loss 0). */
float ls_softmax_xent_forward(float *probs, float *losses, const float *logits, const int *targets, int N, int V,
                              int *n_valid);
/* dlogits (N,V) += (probs - onehot(target)) · dloss for rows with a valid target. */
void ls_softmax_xent_backward(float *dlogits, const float *probs, const int *targets, float dloss, int N, int V);
/* Same with a per-position weight w[n] in place of dloss (pg.c). */
void ls_softmax_xent_backward_weighted(float *dlogits, const float *probs, const int *targets, const float *w, int N,
                                       int V);

/* C (M,N) = alpha·op(A)·op(B) + beta·C (row-major cblas_sgemm; trans_* != 0 transposes)
 * with the rows of C split over the OpenMP threads, each block one single-threaded
 * sgemm. Every matmul of the model goes through here (attention calls cblas_sgemm
 * directly, one head per thread). */
void ls_sgemm_rows(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc);

/* Limits OpenBLAS to one thread (for sgemm calls inside OpenMP loops) and returns the
 * previous count for ls_blas_threads_pop. */
int ls_blas_threads_push_single(void);
void ls_blas_threads_pop(int saved);

#endif
