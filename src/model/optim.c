/* optim.c - AdamW with decoupled weight decay, global gradient-norm clipping and a
 * linear-warmup + cosine learning-rate schedule. */
#include "llmsys/model.h"

#include <math.h>
#include <stdlib.h>
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
#pragma omp parallel for schedule(static) if (n >= (1u << 18))
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
 * layer, as in GPT-2/nanoGPT) and never to biases or LayerNorm parameters. The update
 * runs as one parallel loop over fixed chunks of the flat buffers (one barrier per step,
 * not one per tensor). */
void ls_adam_update(float *p, const float *g, float *m, float *v, size_t n, const ls_adam_hparams *h) {
    float b1 = h->beta1, b2 = h->beta2, eps = h->eps, lr = h->lr, wd = h->weight_decay, gs = h->grad_scale;
    float bc1 = 1.0f - powf(b1, (float)h->t), bc2 = 1.0f - powf(b2, (float)h->t);
    if (h->recip) {
        float ic1 = 1.0f / bc1, ic2 = 1.0f / bc2;
        for (size_t j = 0; j < n; j++) {
            float gj = g[j] * gs;
            m[j] = b1 * m[j] + (1.0f - b1) * gj;
            v[j] = b2 * v[j] + (1.0f - b2) * gj * gj;
            p[j] -= lr * ((m[j] * ic1) / (sqrtf(v[j] * ic2) + eps) + wd * p[j]);
        }
        return;
    }
    for (size_t j = 0; j < n; j++) {
        float gj = g[j] * gs;
        float mm = b1 * m[j] + (1.0f - b1) * gj;
        float vv = b2 * v[j] + (1.0f - b2) * gj * gj;
        m[j] = mm;
        v[j] = vv;
        p[j] -= lr * ((mm / bc1) / (sqrtf(vv / bc2) + eps) + wd * p[j]);
    }
}

#define ADAM_CHUNK 16384
float ls_model_adamw_step(ls_model *m, const ls_adamw_config *c, int step) {
    float norm = ls_model_grad_norm(m);
    float gscale = 1.0f;
    if (c->grad_clip > 0.0f && norm > c->grad_clip) gscale = c->grad_clip / norm;
    if (!isfinite(norm)) gscale = 1.0f; /* propagate NaN/Inf rather than hide it */
    ls_adam_hparams h = {ls_lr_at(c, step), c->beta1, c->beta2, c->eps, 0.0f, gscale, step + 1, 0};
    float *w = ls_model_params(m), *gr = ls_model_grads(m), *am = ls_model_adam_m(m), *av = ls_model_adam_v(m);
    /* chunk list: (start, end, decay) never crossing a tensor boundary */
    int nt = ls_model_num_tensors(m);
    long nchunk = 0;
    for (int i = 0; i < nt; i++) nchunk += (long)((ls_model_tensor(m, i).numel + ADAM_CHUNK - 1) / ADAM_CHUNK);
    size_t *c0 = malloc((size_t)nchunk * sizeof *c0), *c1 = malloc((size_t)nchunk * sizeof *c1);
    float *cwd = malloc((size_t)nchunk * sizeof *cwd);
    if (!c0 || !c1 || !cwd) { /* one chunk per tensor, serially */
        free(c0), free(c1), free(cwd);
        c0 = c1 = NULL;
        cwd = NULL;
    }
    long k = 0;
    for (int i = 0; i < nt; i++) {
        ls_param p = ls_model_tensor(m, i);
        size_t off = (size_t)(p.data - w);
        for (size_t j = 0; j < p.numel; j += ADAM_CHUNK) {
            size_t e = j + ADAM_CHUNK < p.numel ? j + ADAM_CHUNK : p.numel;
            float wd = p.ndim == 2 ? c->weight_decay : 0.0f;
            if (cwd) {
                c0[k] = off + j, c1[k] = off + e, cwd[k] = wd;
            } else {
                ls_adam_hparams hc = h;
                hc.weight_decay = wd;
                ls_adam_update(w + off + j, gr + off + j, am + off + j, av + off + j, e - j, &hc);
            }
            k++;
        }
    }
    if (cwd) {
#pragma omp parallel for schedule(static) if (nchunk >= 16)
        for (long q = 0; q < nchunk; q++) {
            ls_adam_hparams hc = h;
            hc.weight_decay = cwd[q];
            ls_adam_update(w + c0[q], gr + c0[q], am + c0[q], av + c0[q], c1[q] - c0[q], &hc);
        }
    }
    free(c0), free(c1), free(cwd);
    return norm;
}
