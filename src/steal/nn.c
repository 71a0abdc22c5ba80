/* nn.c - a small dense ReLU MLP with softmax cross-entropy on soft targets, the victim "mlp"
 * and the attacker's replica, and the minibatch Adam training loop of steal's networks (MLP
 * and CNN). Every matmul is one cblas_sgemm. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "steal/internal.h"

int ls_net_alloc(const char *what, int nl, const int *out, const int *in, uint64_t seed, int64_t *np, float *buf[4],
                 float **W, float **b, float **gW, float **gb) {
    int64_t n = 0;
    for (int l = 0; l < nl; l++) n += (int64_t)out[l] * in[l] + out[l];
    for (int k = 0; k < 4; k++) buf[k] = ls_aligned_calloc(64, sizeof(float) * (size_t)n);
    if (!buf[0] || !buf[1] || !buf[2] || !buf[3]) {
        for (int k = 0; k < 4; k++) ls_aligned_free(buf[k]), buf[k] = NULL;
        return ls_err(LS_ENOMEM, "%s: out of memory for %lld params", what, (long long)n);
    }
    ls_rng r;
    ls_rng_seed(&r, seed);
    int64_t off = 0;
    for (int l = 0; l < nl; l++) {
        W[l] = buf[0] + off, gW[l] = buf[1] + off;
        off += (int64_t)out[l] * in[l];
        b[l] = buf[0] + off, gb[l] = buf[1] + off;
        off += out[l];
        /* He initialisation (fan-in) for ReLU layers; biases start at zero. */
        float s = sqrtf(2.0f / (float)in[l]);
        for (int64_t i = 0; i < (int64_t)out[l] * in[l]; i++) W[l][i] = s * ls_rng_normal(&r);
    }
    *np = n;
    return LS_OK;
}

int ls_mlp_init(ls_mlp *m, int nl, const int *sizes, uint64_t seed) {
    memset(m, 0, sizeof *m);
    if (nl < 1 || nl > MLP_MAX_LAYERS) return ls_err(LS_EINVAL, "mlp: %d layers (1..%d)", nl, MLP_MAX_LAYERS);
    m->nl = nl;
    int in[MLP_MAX_LAYERS], out[MLP_MAX_LAYERS];
    for (int l = 0; l <= nl; l++) {
        if (sizes[l] <= 0 || sizes[l] > MLP_MAX_WIDTH) return ls_err(LS_EINVAL, "mlp: layer size %d", sizes[l]);
        m->sizes[l] = sizes[l];
    }
    for (int l = 0; l < nl; l++) in[l] = sizes[l], out[l] = sizes[l + 1];
    float *buf[4];
    LS_TRY(ls_net_alloc("mlp", nl, out, in, seed, &m->np, buf, m->W, m->b, m->gW, m->gb));
    m->p = buf[0], m->g = buf[1], m->m = buf[2], m->v = buf[3];
    return LS_OK;
}

void ls_mlp_free(ls_mlp *m) {
    ls_aligned_free(m->p), ls_aligned_free(m->g), ls_aligned_free(m->m), ls_aligned_free(m->v);
    memset(m, 0, sizeof *m);
}

void ls_softmax_rows(float *z, int64_t n, int k) {
    for (int64_t i = 0; i < n; i++) {
        float *r = z + i * k, mx = r[0], s = 0;
        for (int j = 1; j < k; j++) mx = r[j] > mx ? r[j] : mx;
        for (int j = 0; j < k; j++) {
            r[j] = expf(r[j] - mx);
            s += r[j];
        }
        for (int j = 0; j < k; j++) r[j] /= s;
    }
}

/* Forward pass of n rows; acts[l] (n x sizes[l]) holds each layer's input (acts[0] = x),
 * acts[nl] the logits. Hidden activations are post-ReLU. */
static void forward(const ls_mlp *m, const float *x, int n, float **acts) {
    acts[0] = (float *)x;
    for (int l = 0; l < m->nl; l++) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        float *y = acts[l + 1];
        for (int i = 0; i < n; i++) memcpy(y + (size_t)i * out, m->b[l], sizeof(float) * (size_t)out);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, acts[l], in, m->W[l], in, 1.0f, y, out);
        if (l < m->nl - 1)
            for (size_t i = 0; i < (size_t)n * out; i++) y[i] = y[i] > 0 ? y[i] : 0;
    }
}

/* Backward from dlogits (n x k, overwritten as scratch); accumulates parameter grads when
 * grads != 0, and writes the input gradient to dx when non-NULL. */
static void backward(ls_mlp *m, int n, float **acts, float *dlogits, float **scratch, float *dx, int grads) {
    float *dy = dlogits;
    for (int l = m->nl - 1; l >= 0; l--) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        if (grads) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, acts[l], in, 1.0f, m->gW[l],
                        in);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < out; j++) m->gb[l][j] += dy[(size_t)i * out + j];
        }
        if (l == 0 && !dx) break;
        float *dprev = l == 0 ? dx : scratch[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, m->W[l], in, 0.0f, dprev, in);
        if (l > 0)
            for (size_t i = 0; i < (size_t)n * in; i++)
                if (acts[l][i] <= 0) dprev[i] = 0;
        dy = dprev;
    }
}

/* Workspace for a batch of up to n rows: activations and backward scratch per layer. */
typedef struct {
    float *buf;
    float *acts[MLP_MAX_LAYERS + 1];
    float *scratch[MLP_MAX_LAYERS + 1];
    float *dlog;
} workspace;

static int ws_init(workspace *w, const ls_mlp *m, int n) {
    memset(w, 0, sizeof *w);
    size_t tot = 0;
    for (int l = 1; l <= m->nl; l++) tot += 2 * (size_t)n * m->sizes[l];
    tot += (size_t)n * m->sizes[m->nl];
    w->buf = malloc(sizeof(float) * tot);
    if (!w->buf) return ls_err(LS_ENOMEM, "mlp: out of memory for workspace");
    float *p = w->buf;
    for (int l = 1; l <= m->nl; l++) {
        w->acts[l] = p;
        p += (size_t)n * m->sizes[l];
        w->scratch[l] = p;
        p += (size_t)n * m->sizes[l];
    }
    w->dlog = p;
    return LS_OK;
}

int ls_mlp_logits(const ls_mlp *m, const float *x, int64_t n, float *logits) {
    enum { CH = 512 };
    workspace w;
    LS_TRY(ws_init(&w, m, CH));
    int d = m->sizes[0], k = m->sizes[m->nl];
    for (int64_t i = 0; i < n; i += CH) {
        int b = (int)(n - i < CH ? n - i : CH);
        forward(m, x + i * d, b, w.acts);
        memcpy(logits + i * k, w.acts[m->nl], sizeof(float) * (size_t)b * k);
    }
    free(w.buf);
    return LS_OK;
}

int ls_mlp_input_grad(const ls_mlp *m, const float *x, int n, const float *dlogits, float *dx) {
    workspace w;
    LS_TRY(ws_init(&w, m, n));
    int k = m->sizes[m->nl];
    forward(m, x, n, w.acts);
    memcpy(w.dlog, dlogits, sizeof(float) * (size_t)n * k);
    backward((ls_mlp *)m, n, w.acts, w.dlog, w.scratch, dx, 0);
    free(w.buf);
    return LS_OK;
}

void ls_fit_gather(const float *x, int d, const int *rows, int b, const ls_mlp_fit_opts *o, ls_rng *r, float *xb) {
    for (int i = 0; i < b; i++) {
        const float *src = x + (int64_t)rows[i] * d;
        float *dst = xb + (size_t)i * d;
        if (o->input_noise > 0) {
            for (int j = 0; j < d; j++) {
                float v = src[j] + o->input_noise * ls_rng_normal(r);
                dst[j] = v < o->lo ? o->lo : v > o->hi ? o->hi : v;
            }
        } else {
            memcpy(dst, src, sizeof(float) * (size_t)d);
        }
    }
}

float ls_fit_lr(const ls_mlp_fit_opts *o, int64_t t, int64_t total) {
    double frac = total > 1 ? (double)t / (double)(total - 1) : 1.0;
    return o->lr * (float)(1.0 - (1.0 - o->lr_end_frac) * frac);
}

int ls_fit_run(const ls_fit_net *net, const float *x, int d, int64_t n, int bs, const ls_mlp_fit_opts *o,
               const char *label, double *loss) {
    float *xb = malloc(sizeof(float) * (size_t)bs * d);
    int *perm = malloc(sizeof(int) * (size_t)n);
    if (!xb || !perm) {
        free(xb);
        free(perm);
        return ls_err(LS_ENOMEM, "%s: out of memory", label);
    }
    for (int64_t i = 0; i < n; i++) perm[i] = (int)i;
    ls_rng r;
    ls_rng_seed(&r, o->seed);
    ls_progress pg;
    int64_t steps_per_epoch = (n + bs - 1) / bs, total = steps_per_epoch * o->epochs, t = 0;
    if (o->verbose) ls_progress_start(&pg, o->label ? o->label : label, total);
    double ep_loss = 0;
    int rc = LS_OK;
    for (int ep = 0; ep < o->epochs && rc == LS_OK; ep++) {
        ls_rng_shuffle_int(&r, perm, (size_t)n);
        ep_loss = 0;
        double wsum = 0;
        for (int64_t s = 0; s < n; s += bs) {
            int b = (int)(n - s < bs ? n - s : bs);
            ls_fit_gather(x, d, perm + s, b, o, &r, xb);
            if ((rc = net->grad(net->ctx, xb, perm + s, b, &ep_loss, &wsum))) break;
            ls_adam_hparams h = {ls_fit_lr(o, t, total), 0.9f, 0.999f, 1e-8f, o->wd, 1.0f, ++*net->step, 1};
            ls_adam_update(net->p, net->g, net->m, net->v, (size_t)net->np, &h);
            t++;
            if (o->verbose) ls_progress_update(&pg, t, "loss %.3f", wsum > 0 ? ep_loss / wsum : 0.0);
        }
        if (wsum > 0) ep_loss /= wsum;
    }
    if (o->verbose) ls_progress_end(&pg);
    if (loss && rc == LS_OK) *loss = ep_loss;
    free(xb);
    free(perm);
    return rc;
}

/* ls_fit_net.grad of the MLP: softmax cross-entropy on soft targets, rows weighted; the input
 * gradient into dx too when it is set. */
typedef struct {
    ls_mlp *m;
    workspace w;
    const float *targets, *weights;
    float *dx;
} mlp_fit;

static int mlp_grad(void *ctx, const float *xb, const int *rows, int b, double *loss, double *weight) {
    mlp_fit *f = ctx;
    ls_mlp *m = f->m;
    int k = m->sizes[m->nl];
    forward(m, xb, b, f->w.acts);
    float *z = f->w.acts[m->nl];
    double bw = 0;
    for (int i = 0; i < b; i++) bw += f->weights ? f->weights[rows[i]] : 1.0;
    for (int i = 0; i < b; i++) {
        float *zi = z + (size_t)i * k, *dl = f->w.dlog + (size_t)i * k;
        const float *ti = f->targets + (int64_t)rows[i] * k;
        float wi = f->weights ? f->weights[rows[i]] : 1.0f;
        float mx = zi[0], sum = 0;
        for (int j = 1; j < k; j++) mx = zi[j] > mx ? zi[j] : mx;
        for (int j = 0; j < k; j++) sum += expf(zi[j] - mx);
        float lse = mx + logf(sum);
        for (int j = 0; j < k; j++) {
            float pj = expf(zi[j] - lse);
            if (ti[j] > 0) *loss += wi * ti[j] * (lse - zi[j]);
            dl[j] = (float)(wi * (pj - ti[j]) / bw);
        }
    }
    *weight += bw;
    memset(m->g, 0, sizeof(float) * (size_t)m->np);
    backward(m, b, f->w.acts, f->w.dlog, f->w.scratch, f->dx, 1);
    return LS_OK;
}

int ls_mlp_loss_grad(ls_mlp *m, const float *x, int n, const float *targets, const float *weights, double *loss,
                     float *dx) {
    if (n <= 0) return ls_err(LS_EINVAL, "mlp: no rows");
    int *rows = malloc(sizeof(int) * (size_t)n);
    mlp_fit f = {m, {0}, targets, weights, dx};
    int rc = rows ? ws_init(&f.w, m, n) : ls_err(LS_ENOMEM, "mlp: out of memory");
    double sum = 0, wsum = 0;
    for (int i = 0; rc == LS_OK && i < n; i++) rows[i] = i;
    if (rc == LS_OK) rc = mlp_grad(&f, x, rows, n, &sum, &wsum);
    if (rc == LS_OK) *loss = wsum > 0 ? sum / wsum : 0;
    free(rows);
    free(f.w.buf);
    return rc;
}

int ls_mlp_fit(ls_mlp *m, const float *x, const float *targets, const float *weights, int64_t n,
               const ls_mlp_fit_opts *o, double *loss) {
    if (n <= 0) return ls_err(LS_EINVAL, "mlp: no training rows");
    int bs = o->batch > 0 ? o->batch : 128;
    if (bs > n) bs = (int)n;
    mlp_fit f = {m, {0}, targets, weights, NULL};
    LS_TRY(ws_init(&f.w, m, bs));
    ls_fit_net net = {m->p, m->g, m->m, m->v, m->np, &m->step, mlp_grad, &f};
    int rc = ls_fit_run(&net, x, m->sizes[0], n, bs, o, "train", loss);
    free(f.w.buf);
    return rc;
}
