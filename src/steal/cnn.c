/* cnn.c - a small convolutional network for (C,H,W) images, the victim "cnn": two blocks of
 * conv (ks x ks, same padding) -> ReLU -> 2x2 max-pool, then fc -> ReLU -> fc (or one fc),
 * softmax cross-entropy, Adam. Convolutions are im2col + one cblas_sgemm per layer and batch.
 *
 * Activations are NHWC (channels innermost) so that im2col copies whole runs of a row and a
 * conv layer is one GEMM: cols (n*h*w, ks*ks*cin) x W^T (ks*ks*cin, cout) -> y (n*h*w, cout).
 * Conv weights are (cout, ky, kx, cin); the network's input and dx are CHW per row, as the
 * victim API gives them, and are transposed once at the edges. Non-goals: strides other than
 * the fixed 2x2 pool, dilation, batch norm, threads (OpenBLAS may thread the GEMMs). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "steal/internal.h"

/* ---------------------------------------------------------------- shapes and parameters */

int ls_cnn_init(ls_cnn *m, int c, int h, int w, int k, int c1, int c2, int ks, int hidden, uint64_t seed) {
    memset(m, 0, sizeof *m);
    if (c < 1 || c > 64 || h < 4 || w < 4 || h > 1024 || w > 1024)
        return ls_err(LS_EINVAL, "cnn: input shape (%d,%d,%d) needs 1..64 channels and H, W in 4..1024", c, h, w);
    if (k < 2 || c1 < 1 || c2 < 1 || c1 > 1024 || c2 > 1024 || ks < 1 || ks > 11 || ks % 2 == 0 || hidden < 0 ||
        hidden > 65536)
        return ls_err(LS_EINVAL, "cnn: bad layer sizes (k %d, channels %d/%d, kernel %d, hidden %d)", k, c1, c2, ks,
                      hidden);
    /* The largest per-row buffer (an im2col matrix) bounds workspace and int offsets. */
    int64_t cols1 = (int64_t)h * w * ks * ks * c, cols2 = (int64_t)(h / 2) * (w / 2) * ks * ks * c1;
    int64_t act1 = (int64_t)h * w * c1;
    if (cols1 > (1 << 22) || cols2 > (1 << 22) || act1 > (1 << 22))
        return ls_err(LS_EINVAL, "cnn: (%d,%d,%d) with %d channels and kernel %d needs over 2^22 floats per row", c, h,
                      w, c1, ks);
    m->c = c, m->h = h, m->w = w, m->k = k;
    m->c1 = c1, m->c2 = c2, m->ks = ks, m->hidden = hidden;
    m->nfc = hidden > 0 ? 2 : 1;
    int feat = (h / 4) * (w / 4) * c2; /* after two floor-halving pools */
    /* (out, in) of each layer; conv "in" is one receptive field ks*ks*cin. */
    int out[4] = {c1, c2, hidden > 0 ? hidden : k, k};
    int in[4] = {ks * ks * c, ks * ks * c1, feat, hidden};
    float *buf[4];
    LS_TRY(ls_net_alloc("cnn", 2 + m->nfc, out, in, seed, &m->np, buf, m->W, m->b, m->gW, m->gb));
    m->p = buf[0], m->g = buf[1], m->m = buf[2], m->v = buf[3];
    return LS_OK;
}

ls_mlp_fit_opts ls_cnn_fit_opts(int epochs, float lo, float hi, uint64_t seed, int verbose, const char *label) {
    return (ls_mlp_fit_opts){.epochs = epochs,
                             .batch = 64,
                             .lr = 1e-3f,
                             .lr_end_frac = 0.05f,
                             .wd = 1e-4f,
                             .lo = lo,
                             .hi = hi,
                             .seed = seed,
                             .verbose = verbose,
                             .label = label};
}

double ls_cnn_param_count(int c, int h, int w, int k, int c1, int c2, int ks, int hidden) {
    double feat = (double)(h / 4) * (double)(w / 4) * c2;
    double np = (double)c1 * ks * ks * c + c1 + (double)c2 * ks * ks * c1 + c2;
    return np + (hidden > 0 ? (double)hidden * feat + hidden + (double)k * hidden + k : (double)k * feat + k);
}

void ls_cnn_free(ls_cnn *m) {
    ls_aligned_free(m->p), ls_aligned_free(m->g), ls_aligned_free(m->m), ls_aligned_free(m->v);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- layers */

/* cols (n*h*w, ks*ks*c): row (b,y,x) is the ks x ks x c patch centred on (y,x), zeros outside
 * the image. Each kernel row of a patch is one contiguous run of x, copied at once. */
static void im2col(const float *x, int n, int h, int w, int c, int ks, float *cols) {
    int pad = ks / 2;
    size_t rowlen = (size_t)ks * ks * c, krow = (size_t)ks * c;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < h; oy++)
            for (int ox = 0; ox < w; ox++) {
                float *dst = cols + (((size_t)b * h + oy) * w + ox) * rowlen;
                int x0 = ox - pad, lo = x0 < 0 ? -x0 : 0, hi = x0 + ks > w ? w - x0 : ks; /* valid kx in [lo,hi) */
                for (int ky = 0; ky < ks; ky++, dst += krow) {
                    int iy = oy + ky - pad;
                    if (iy < 0 || iy >= h) {
                        memset(dst, 0, sizeof(float) * krow);
                        continue;
                    }
                    if (lo > 0) memset(dst, 0, sizeof(float) * (size_t)lo * c);
                    memcpy(dst + (size_t)lo * c, x + (((size_t)b * h + iy) * w + x0 + lo) * c,
                           sizeof(float) * (size_t)(hi - lo) * c);
                    if (hi < ks) memset(dst + (size_t)hi * c, 0, sizeof(float) * (size_t)(ks - hi) * c);
                }
            }
}

/* The adjoint of im2col: dx (n,h,w,c) = sum of every patch gradient back onto its pixels. */
static void col2im(const float *cols, int n, int h, int w, int c, int ks, float *dx) {
    int pad = ks / 2;
    size_t rowlen = (size_t)ks * ks * c, krow = (size_t)ks * c;
    memset(dx, 0, sizeof(float) * (size_t)n * h * w * c);
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < h; oy++)
            for (int ox = 0; ox < w; ox++) {
                const float *src = cols + (((size_t)b * h + oy) * w + ox) * rowlen;
                int x0 = ox - pad, lo = x0 < 0 ? -x0 : 0, hi = x0 + ks > w ? w - x0 : ks;
                for (int ky = 0; ky < ks; ky++, src += krow) {
                    int iy = oy + ky - pad;
                    if (iy < 0 || iy >= h) continue;
                    float *d = dx + (((size_t)b * h + iy) * w + x0 + lo) * c;
                    const float *s = src + (size_t)lo * c;
                    for (size_t i = 0; i < (size_t)(hi - lo) * c; i++) d[i] += s[i];
                }
            }
}

void ls_cnn_conv2d(const float *x, int n, int h, int w, int cin, const float *W, const float *b, int cout, int ks,
                   float *cols, float *y) {
    int M = n * h * w, R = ks * ks * cin;
    im2col(x, n, h, w, cin, ks, cols);
    for (int i = 0; i < M; i++) memcpy(y + (size_t)i * cout, b, sizeof(float) * (size_t)cout);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, cout, R, 1.0f, cols, R, W, R, 1.0f, y, cout);
}

/* Backward of ls_cnn_conv2d: gW += dy^T cols, gb += column sums of dy; then, when dx is
 * wanted, cols is overwritten with dy W and folded back into dx by col2im. */
static void conv2d_backward(const float *dy, int n, int h, int w, int cin, const float *W, int cout, int ks,
                            float *cols, float *gW, float *gb, float *dx) {
    int M = n * h * w, R = ks * ks * cin;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cout, R, M, 1.0f, dy, cout, cols, R, 1.0f, gW, R);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < cout; j++) gb[j] += dy[(size_t)i * cout + j];
    if (!dx) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, R, cout, 1.0f, dy, cout, W, R, 0.0f, cols, R);
    col2im(cols, n, h, w, cin, ks, dx);
}

static void relu(float *a, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = a[i] > 0 ? a[i] : 0;
}

/* 2x2 max-pool, stride 2, NHWC (n,h,w,c) -> (n,h/2,w/2,c); an odd last row or column is
 * dropped. arg (may be NULL) records the input offset of each maximum for the backward. */
static void maxpool(const float *a, int n, int h, int w, int c, float *p, int32_t *arg) {
    int ho = h / 2, wo = w / 2;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < ho; oy++)
            for (int ox = 0; ox < wo; ox++) {
                size_t o = (((size_t)b * ho + oy) * wo + ox) * c;
                size_t i00 = (((size_t)b * h + 2 * oy) * w + 2 * ox) * c;
                size_t q[4] = {i00, i00 + c, i00 + (size_t)w * c, i00 + (size_t)w * c + c};
                for (int ch = 0; ch < c; ch++) {
                    size_t best = q[0] + ch;
                    for (int t = 1; t < 4; t++)
                        if (a[q[t] + ch] > a[best]) best = q[t] + ch;
                    p[o + ch] = a[best];
                    if (arg) arg[o + ch] = (int32_t)best;
                }
            }
}

/* ---------------------------------------------------------------- forward / backward */

/* Activations and scratch for batches of up to n rows. dcols are not separate: the
 * backward reuses each layer's cols once its weight gradient is taken. */
typedef struct {
    int n;
    float *buf;
    int32_t *arg1, *arg2;
    float *xh, *cols1, *a1, *p1, *cols2, *a2, *p2, *h3, *z; /* forward */
    float *dz, *dh3, *dp2, *da2, *dp1, *da1, *dxh;          /* backward (train only) */
} cnn_ws;

static int ws_init(cnn_ws *s, const ls_cnn *m, int n, int train) {
    memset(s, 0, sizeof *s);
    s->n = n;
    size_t hw = (size_t)m->h * m->w, hw2 = (size_t)(m->h / 2) * (m->w / 2), hw4 = (size_t)(m->h / 4) * (m->w / 4);
    size_t kk = (size_t)m->ks * m->ks, nh = (size_t)(m->hidden > 0 ? m->hidden : 0);
    size_t sz[16] = {hw * m->c,   hw * kk * m->c, hw * m->c1, hw2 * m->c1, hw2 * kk * m->c1,
                     hw2 * m->c2, hw4 * m->c2,    nh,         (size_t)m->k};
    float **dst[16] = {&s->xh, &s->cols1, &s->a1, &s->p1, &s->cols2, &s->a2, &s->p2, &s->h3, &s->z};
    int cnt = 9;
    if (train) {
        size_t bsz[7] = {(size_t)m->k, nh, hw4 * m->c2, hw2 * m->c2, hw2 * m->c1, hw * m->c1, hw * m->c};
        float **bdst[7] = {&s->dz, &s->dh3, &s->dp2, &s->da2, &s->dp1, &s->da1, &s->dxh};
        for (int i = 0; i < 7; i++) {
            sz[cnt] = bsz[i];
            dst[cnt++] = bdst[i];
        }
    }
    size_t tot = 0;
    for (int i = 0; i < cnt; i++) tot += sz[i] * (size_t)n;
    s->buf = malloc(sizeof(float) * tot);
    s->arg1 = train ? malloc(sizeof(int32_t) * hw2 * m->c1 * (size_t)n) : NULL;
    s->arg2 = train ? malloc(sizeof(int32_t) * hw4 * m->c2 * (size_t)n) : NULL;
    if (!s->buf || (train && (!s->arg1 || !s->arg2))) {
        free(s->buf);
        free(s->arg1);
        free(s->arg2);
        return ls_err(LS_ENOMEM, "cnn: out of memory for a %d-row workspace", n);
    }
    float *p = s->buf;
    for (int i = 0; i < cnt; i++) {
        *dst[i] = p;
        p += sz[i] * (size_t)n;
    }
    return LS_OK;
}

static void ws_free(cnn_ws *s) {
    free(s->buf);
    free(s->arg1);
    free(s->arg2);
}

/* Logits s->z (n,k) of n CHW rows x; keeps what the backward needs when s->arg1 is set. */
static void forward(const ls_cnn *m, const float *x, int n, cnn_ws *s) {
    int c = m->c, h = m->h, w = m->w, h2 = h / 2, w2 = w / 2, h4 = h2 / 2, w4 = w2 / 2;
    int feat = h4 * w4 * m->c2;
    /* (n,c,h,w) -> (n,h,w,c) */
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++)
            for (int i = 0; i < h * w; i++)
                s->xh[((size_t)b * h * w + i) * c + ch] = x[((size_t)b * c + ch) * h * w + i];
    ls_cnn_conv2d(s->xh, n, h, w, c, m->W[0], m->b[0], m->c1, m->ks, s->cols1, s->a1); /* (n,h,w,c1) */
    relu(s->a1, (size_t)n * h * w * m->c1);
    maxpool(s->a1, n, h, w, m->c1, s->p1, s->arg1);                                          /* (n,h2,w2,c1) */
    ls_cnn_conv2d(s->p1, n, h2, w2, m->c1, m->W[1], m->b[1], m->c2, m->ks, s->cols2, s->a2); /* (n,h2,w2,c2) */
    relu(s->a2, (size_t)n * h2 * w2 * m->c2);
    maxpool(s->a2, n, h2, w2, m->c2, s->p2, s->arg2); /* (n,feat) */
    const float *in = s->p2;
    int din = feat;
    for (int l = 2; l < 2 + m->nfc; l++) {
        int last = l == 1 + m->nfc, out = last ? m->k : m->hidden;
        float *y = last ? s->z : s->h3;
        for (int i = 0; i < n; i++) memcpy(y + (size_t)i * out, m->b[l], sizeof(float) * (size_t)out);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, din, 1.0f, in, din, m->W[l], din, 1.0f, y, out);
        if (!last) relu(y, (size_t)n * out);
        in = y;
        din = out;
    }
}

/* From s->dz (n,k): accumulates every parameter gradient into m->g, and the input gradient
 * (CHW rows) into dx when non-NULL. Overwrites the cols buffers. */
static void backward(ls_cnn *m, int n, cnn_ws *s, float *dx) {
    int c = m->c, h = m->h, w = m->w, h2 = h / 2, w2 = w / 2, h4 = h2 / 2, w4 = w2 / 2;
    int feat = h4 * w4 * m->c2;
    /* fully connected layers, last first */
    float *dy = s->dz;
    for (int l = 1 + m->nfc; l >= 2; l--) {
        int out = l == 1 + m->nfc ? m->k : m->hidden;
        int din = l == 2 ? feat : m->hidden;
        const float *in = l == 2 ? s->p2 : s->h3;
        float *din_grad = l == 2 ? s->dp2 : s->dh3;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, din, n, 1.0f, dy, out, in, din, 1.0f, m->gW[l], din);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < out; j++) m->gb[l][j] += dy[(size_t)i * out + j];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, din, out, 1.0f, dy, out, m->W[l], din, 0.0f, din_grad,
                    din);
        if (l > 2) /* through the hidden ReLU */
            for (size_t i = 0; i < (size_t)n * din; i++)
                if (s->h3[i] <= 0) din_grad[i] = 0;
        dy = din_grad;
    }
    /* pool 2 and ReLU 2: route each pooled gradient to its maximum, zero where ReLU clipped */
    size_t na2 = (size_t)n * h2 * w2 * m->c2, na1 = (size_t)n * h * w * m->c1;
    memset(s->da2, 0, sizeof(float) * na2);
    for (size_t i = 0; i < (size_t)n * feat; i++) s->da2[s->arg2[i]] = s->dp2[i];
    for (size_t i = 0; i < na2; i++)
        if (s->a2[i] <= 0) s->da2[i] = 0;
    conv2d_backward(s->da2, n, h2, w2, m->c1, m->W[1], m->c2, m->ks, s->cols2, m->gW[1], m->gb[1], s->dp1);
    memset(s->da1, 0, sizeof(float) * na1);
    for (size_t i = 0; i < (size_t)n * h2 * w2 * m->c1; i++) s->da1[s->arg1[i]] = s->dp1[i];
    for (size_t i = 0; i < na1; i++)
        if (s->a1[i] <= 0) s->da1[i] = 0;
    conv2d_backward(s->da1, n, h, w, c, m->W[0], m->c1, m->ks, s->cols1, m->gW[0], m->gb[0], dx ? s->dxh : NULL);
    if (dx) /* (n,h,w,c) -> (n,c,h,w) */
        for (int b = 0; b < n; b++)
            for (int ch = 0; ch < c; ch++)
                for (int i = 0; i < h * w; i++)
                    dx[((size_t)b * c + ch) * h * w + i] = s->dxh[((size_t)b * h * w + i) * c + ch];
}

/* Softmax cross-entropy of s->z against labels y: returns the summed loss, and writes
 * dz = (softmax - onehot) * scale. */
static double xent(const ls_cnn *m, cnn_ws *s, int n, const int32_t *y, float scale) {
    int k = m->k;
    double loss = 0;
    for (int i = 0; i < n; i++) {
        const float *zi = s->z + (size_t)i * k;
        float *dz = s->dz + (size_t)i * k, mx = zi[0], sum = 0;
        for (int j = 1; j < k; j++) mx = zi[j] > mx ? zi[j] : mx;
        for (int j = 0; j < k; j++) sum += expf(zi[j] - mx);
        float lse = mx + logf(sum);
        loss += lse - zi[y[i]];
        for (int j = 0; j < k; j++) dz[j] = scale * (expf(zi[j] - lse) - (j == y[i] ? 1.0f : 0.0f));
    }
    return loss;
}

int ls_cnn_loss_grad(ls_cnn *m, const float *x, int n, const int32_t *y, double *loss, float *dx) {
    if (n < 1) return ls_err(LS_EINVAL, "cnn: no rows");
    for (int i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= m->k) return ls_err(LS_EINVAL, "cnn: label %d outside 0..%d", y[i], m->k - 1);
    cnn_ws s;
    LS_TRY(ws_init(&s, m, n, 1));
    forward(m, x, n, &s);
    double l = xent(m, &s, n, y, 1.0f / (float)n);
    memset(m->g, 0, sizeof(float) * (size_t)m->np);
    backward(m, n, &s, dx);
    if (loss) *loss = l / n;
    ws_free(&s);
    return LS_OK;
}

int ls_cnn_logits(const ls_cnn *m, const float *x, int64_t n, float *logits) {
    /* 64-row chunks keep the conv-2 im2col buffer near 20 MB for 28x28 inputs. */
    enum { CH = 64 };
    int d = m->c * m->h * m->w;
    cnn_ws s;
    LS_TRY(ws_init(&s, m, (int)(n < CH ? (n > 0 ? n : 1) : CH), 0));
    for (int64_t i = 0; i < n; i += CH) {
        int b = (int)(n - i < CH ? n - i : CH);
        forward(m, x + i * d, b, &s);
        memcpy(logits + i * m->k, s.z, sizeof(float) * (size_t)b * m->k);
    }
    ws_free(&s);
    return LS_OK;
}

/* ---------------------------------------------------------------- training */

/* ls_fit_net.grad of the CNN: softmax cross-entropy on hard labels, mean over the batch. */
typedef struct {
    ls_cnn *m;
    cnn_ws s;
    const int32_t *y;
    int32_t *yb;
    int shift; /* ls_mlp_fit_opts.shift */
    float *xs; /* the shifted minibatch (shift > 0) */
    ls_rng r;
} cnn_fit;

void ls_image_shift(const float *src, int c, int h, int w, int dy, int dx, float *dst) {
    for (int ch = 0; ch < c; ch++) {
        const float *s = src + (size_t)ch * h * w;
        float *d = dst + (size_t)ch * h * w;
        for (int y = 0; y < h; y++) {
            int sy = y - dy < 0 ? 0 : y - dy >= h ? h - 1 : y - dy;
            for (int x = 0; x < w; x++) {
                int sx = x - dx < 0 ? 0 : x - dx >= w ? w - 1 : x - dx;
                d[y * w + x] = s[sy * w + sx];
            }
        }
    }
}

/* Each row of xb moved by its own offset, uniform in [-shift, shift] each way, into f->xs. */
static void shift_rows(cnn_fit *f, const float *xb, int b) {
    const ls_cnn *m = f->m;
    int S = f->shift, d = m->c * m->h * m->w;
    for (int i = 0; i < b; i++) {
        int dy = (int)ls_rng_below(&f->r, (uint64_t)(2 * S + 1)) - S;
        int dx = (int)ls_rng_below(&f->r, (uint64_t)(2 * S + 1)) - S;
        ls_image_shift(xb + (size_t)i * d, m->c, m->h, m->w, dy, dx, f->xs + (size_t)i * d);
    }
}

static int cnn_grad(void *ctx, const float *xb, const int *rows, int b, double *loss, double *weight) {
    cnn_fit *f = ctx;
    for (int i = 0; i < b; i++) f->yb[i] = f->y[rows[i]];
    if (f->shift > 0) {
        shift_rows(f, xb, b);
        xb = f->xs;
    }
    forward(f->m, xb, b, &f->s);
    *loss += xent(f->m, &f->s, b, f->yb, 1.0f / (float)b);
    *weight += b;
    memset(f->m->g, 0, sizeof(float) * (size_t)f->m->np);
    backward(f->m, b, &f->s, NULL);
    return LS_OK;
}

int ls_cnn_fit(ls_cnn *m, const float *x, const int32_t *y, int64_t n, const ls_mlp_fit_opts *o, double *loss) {
    if (n <= 0 || n > INT32_MAX) return ls_err(LS_EINVAL, "cnn: %lld training rows", (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= m->k) return ls_err(LS_EINVAL, "cnn: label %d outside 0..%d", y[i], m->k - 1);
    int bs = o->batch > 0 ? o->batch : 64;
    if (bs > n) bs = (int)n;
    int d = m->c * m->h * m->w, shift = o->shift > 0 ? (o->shift < m->h && o->shift < m->w ? o->shift : 0) : 0;
    cnn_fit f = {.m = m, .y = y, .yb = malloc(sizeof(int32_t) * (size_t)bs), .shift = shift};
    if (shift) {
        f.xs = malloc(sizeof(float) * (size_t)bs * d);
        ls_rng_seed(&f.r, o->seed ^ 0x5bd1e995u);
    }
    if (!f.yb || (shift && !f.xs)) {
        free(f.yb);
        free(f.xs);
        return ls_err(LS_ENOMEM, "cnn: out of memory");
    }
    int rc = ws_init(&f.s, m, bs, 1);
    if (rc == LS_OK) {
        ls_fit_net net = {m->p, m->g, m->m, m->v, m->np, &m->step, cnn_grad, &f};
        rc = ls_fit_run(&net, x, d, n, bs, o, "cnn", loss);
        ws_free(&f.s);
    }
    free(f.yb);
    free(f.xs);
    return rc;
}
