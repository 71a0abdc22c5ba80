/* optim.c - AdamW with decoupled weight decay, global gradient-norm clipping and a
 * linear-warmup + cosine learning-rate schedule. */
#include "llmsys/model.h"

#include <math.h>
#include <string.h>

ls_adamw_config ls_adamw_defaults(void) {
    return (ls_adamw_config){.lr = 1e-3f,
                             .beta1 = 0.9f,
                             .beta2 = 0.95f,
                             .eps = 1e-8f,
                             .weight_decay = 0.1f,
                             .grad_clip = 1.0f,
                             .warmup_steps = 10,
                             .total_steps = 0,
                             .min_lr_frac = 0.1f};
}

float ls_lr_at(const ls_adamw_config *c, int step) {
    if (step < 0) step = 0;
    if (c->warmup_steps > 0 && step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (c->total_steps <= c->warmup_steps) return c->lr; /* no decay horizon: constant */
    double prog = (double)(step - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
    if (prog > 1.0) prog = 1.0;
    double lo = (double)c->min_lr_frac * c->lr;
    return (float)(lo + 0.5 * (1.0 + cos(M_PI * prog)) * ((double)c->lr - lo));
}

/* Sum of squares over fixed chunks (independent of the thread count), then the chunk
 * sums in order: the same bits on every run. */
#define NORM_CHUNK 4096
float ls_model_grad_norm(ls_model *m) {
    const float *g = ls_model_grads(m);
    size_t n = ls_model_num_params(m);
    long nchunk = (long)((n + NORM_CHUNK - 1) / NORM_CHUNK);
    double total = 0.0;
    double *part = ls_aligned_alloc(64, (size_t)(nchunk > 0 ? nchunk : 1) * sizeof(double));
    if (!part) { /* fall back to one serial pass */
        for (size_t i = 0; i < n; i++) total += (double)g[i] * g[i];
        return (float)sqrt(total);
    }
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nchunk; k++) {
        size_t i0 = (size_t)k * NORM_CHUNK, i1 = i0 + NORM_CHUNK < n ? i0 + NORM_CHUNK : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)g[i] * g[i];
        part[k] = s;
    }
    for (long k = 0; k < nchunk; k++) total += part[k];
    ls_aligned_free(part);
    return (float)sqrt(total);
}

/* Weight decay applies to every 2-D tensor (wte, wpe and the four Linear weights per
 * layer, as in GPT-2/nanoGPT) and never to biases or LayerNorm parameters. */
float ls_model_adamw_step(ls_model *m, const ls_adamw_config *c, int step) {
    float norm = ls_model_grad_norm(m);
    float gscale = 1.0f;
    if (c->grad_clip > 0.0f && norm > c->grad_clip) gscale = c->grad_clip / norm;
    if (!isfinite(norm)) gscale = 1.0f; /* propagate NaN/Inf rather than hide it */
    float lr = ls_lr_at(c, step);
    int t = step + 1;
    float bc1 = 1.0f - powf(c->beta1, (float)t), bc2 = 1.0f - powf(c->beta2, (float)t);
    int nt = ls_model_num_tensors(m);
    for (int i = 0; i < nt; i++) {
        ls_param p = ls_model_tensor(m, i);
        float wd = p.ndim == 2 ? c->weight_decay : 0.0f;
        float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
        long n = (long)p.numel;
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++) {
            float g = p.grad[j] * gscale;
            float mm = b1 * p.adam_m[j] + (1.0f - b1) * g;
            float vv = b2 * p.adam_v[j] + (1.0f - b2) * g * g;
            p.adam_m[j] = mm;
            p.adam_v[j] = vv;
            float mhat = mm / bc1, vhat = vv / bc2;
            p.data[j] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p.data[j]);
        }
    }
    return norm;
}
