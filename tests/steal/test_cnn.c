/* test_cnn.c - the cnn victim's network (src/steal/cnn.c): im2col + sgemm convolution against
 * direct loops, every gradient (each parameter tensor and the input) against central differences
 * of a float64 forward, image shifts and the shifted fit, and victim.bin shape checks for a cnn. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "steal/internal.h"
#include "test.h"

static void fill_normal(float *a, size_t n, ls_rng *r, float s) {
    for (size_t i = 0; i < n; i++) a[i] = s * ls_rng_normal(r);
}

/* Direct same-padded convolution in float64, NHWC, W (cout, ks, ks, cin): the oracle for
 * ls_cnn_conv2d, and the convolutions of loss_f64. */
static void conv_f64(const double *x, int n, int h, int w, int cin, const double *W, const double *b, int cout, int ks,
                     double *y) {
    int pad = ks / 2;
    for (int bi = 0; bi < n; bi++)
        for (int oy = 0; oy < h; oy++)
            for (int ox = 0; ox < w; ox++)
                for (int co = 0; co < cout; co++) {
                    double s = b[co];
                    for (int ky = 0; ky < ks; ky++)
                        for (int kx = 0; kx < ks; kx++) {
                            int iy = oy + ky - pad, ix = ox + kx - pad;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                            for (int ci = 0; ci < cin; ci++)
                                s += W[((co * ks + ky) * ks + kx) * cin + ci] *
                                     x[(((size_t)bi * h + iy) * w + ix) * cin + ci];
                        }
                    y[(((size_t)bi * h + oy) * w + ox) * cout + co] = s;
                }
}

/* A float64 copy of n floats (the caller frees it). */
static double *to_f64(const float *a, size_t n) {
    double *d = malloc(sizeof(double) * n);
    for (size_t i = 0; d && i < n; i++) d[i] = a[i];
    return d;
}

static void test_conv_matches_naive(void) {
    /* Shapes with odd sizes, a kernel as wide as the image, and 1x1. */
    const int cases[][6] = {/* n, h, w, cin, cout, ks */
                            {2, 7, 6, 3, 4, 3},
                            {3, 5, 9, 2, 5, 5},
                            {1, 4, 4, 1, 2, 5},
                            {2, 6, 5, 4, 3, 1},
                            {2, 28, 28, 1, 16, 5}};
    ls_rng r;
    ls_rng_seed(&r, 7);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int n = cases[t][0], h = cases[t][1], w = cases[t][2], cin = cases[t][3], cout = cases[t][4], ks = cases[t][5];
        size_t nx = (size_t)n * h * w * cin, ny = (size_t)n * h * w * cout, nw = (size_t)cout * ks * ks * cin;
        float *x = malloc(sizeof(float) * nx), *W = malloc(sizeof(float) * nw), *b = malloc(sizeof(float) * cout);
        float *y = malloc(sizeof(float) * ny);
        double *yr = malloc(sizeof(double) * ny);
        float *cols = malloc(sizeof(float) * (size_t)n * h * w * ks * ks * cin);
        fill_normal(x, nx, &r, 1.0f);
        fill_normal(W, nw, &r, 0.5f);
        fill_normal(b, (size_t)cout, &r, 0.5f);
        ls_cnn_conv2d(x, n, h, w, cin, W, b, cout, ks, cols, y);
        double *xd = to_f64(x, nx), *Wd = to_f64(W, nw), *bd = to_f64(b, (size_t)cout);
        conv_f64(xd, n, h, w, cin, Wd, bd, cout, ks, yr);
        free(xd), free(Wd), free(bd);
        double maxd = 0, maxv = 0;
        for (size_t i = 0; i < ny; i++) {
            double dd = fabs((double)y[i] - yr[i]);
            if (dd > maxd) maxd = dd;
            if (fabs(yr[i]) > maxv) maxv = fabs(yr[i]);
        }
        CHECK_MSG(maxd <= 1e-5 * (1 + maxv) && maxv > 0.1, "case %zu (n%d %dx%dx%d -> %d, ks %d): max |diff| %.3g", t,
                  n, h, w, cin, cout, ks, maxd);
        free(x);
        free(W);
        free(b);
        free(y);
        free(yr);
        free(cols);
    }
}

/* The network's mean cross-entropy in float64, by direct loops: the reference the float32
 * analytic gradient is checked against. P holds the parameters in m's layout (W[l], b[l] in
 * m.p order), X the N CHW rows. */
static double loss_f64(const ls_cnn *m, const double *P, const double *X, int n, const int32_t *y) {
    int c = m->c, h = m->h, w = m->w, ks = m->ks, c1 = m->c1, c2 = m->c2, k = m->k;
    int h4 = h / 2 / 2, w4 = w / 2 / 2;
    const double *W[4], *b[4];
    for (int l = 0; l < 2 + m->nfc; l++) {
        W[l] = P + (m->W[l] - m->p);
        b[l] = P + (m->b[l] - m->p);
    }
    int big = h * w * (c > c1 ? c : c1) + h * w * (c1 > c2 ? c1 : c2) + m->hidden + k + 16;
    double *buf = malloc(sizeof(double) * (size_t)big * 2), total = 0;
    for (int bi = 0; bi < n; bi++) {
        double *in = buf, *out = buf + big; /* NHWC planes, ping-pong */
        for (int ch = 0; ch < c; ch++)
            for (int i = 0; i < h * w; i++) in[i * c + ch] = X[((size_t)bi * c + ch) * h * w + i];
        int hh = h, ww = w, cin = c;
        for (int l = 0; l < 2; l++) { /* conv (same padding) -> ReLU -> 2x2 max-pool */
            int cout = l ? c2 : c1;
            double *a = out, *pool = in; /* the pool overwrites the conv's input once it is used */
            conv_f64(in, 1, hh, ww, cin, W[l], b[l], cout, ks, a);
            for (int i = 0; i < hh * ww * cout; i++) a[i] = a[i] > 0 ? a[i] : 0;
            for (int oy = 0; oy < hh / 2; oy++)
                for (int ox = 0; ox < ww / 2; ox++)
                    for (int co = 0; co < cout; co++) {
                        double v = a[((2 * oy) * ww + 2 * ox) * cout + co];
                        for (int t = 1; t < 4; t++) {
                            double u = a[((2 * oy + t / 2) * ww + 2 * ox + t % 2) * cout + co];
                            v = u > v ? u : v;
                        }
                        pool[(oy * (ww / 2) + ox) * cout + co] = v;
                    }
            hh /= 2;
            ww /= 2;
            cin = cout;
        }
        int din = h4 * w4 * c2;
        for (int l = 2; l < 2 + m->nfc; l++) { /* fc layers, ReLU but after the last */
            int last = l == 1 + m->nfc, dout = last ? k : m->hidden;
            for (int j = 0; j < dout; j++) {
                double s = b[l][j];
                for (int i = 0; i < din; i++) s += W[l][(size_t)j * din + i] * in[i];
                out[j] = last || s > 0 ? s : 0;
            }
            memcpy(in, out, sizeof(double) * (size_t)dout);
            din = dout;
        }
        double mx = in[0], sum = 0;
        for (int j = 1; j < k; j++) mx = in[j] > mx ? in[j] : mx;
        for (int j = 0; j < k; j++) sum += exp(in[j] - mx);
        total += mx + log(sum) - in[y[bi]];
    }
    free(buf);
    return total / n;
}

/* The float32 analytic gradient (each parameter tensor and the input) against central
 * differences of loss_f64. In float64 a step of 1e-6 crosses a ReLU or max-pool kink about a
 * thousand times less often than float32's usable 1e-3 (which crossed one at most seeds), and its
 * rounding (~1e-10 in the quotient) is negligible, so the tolerance is the float32 gradient's own:
 * |a - fd| <= 2e-5 + 1e-4 |fd|. */
static void gradcheck(int c, int h, int w, int k, int c1, int c2, int ks, int hidden, uint64_t seed) {
    ls_cnn m;
    CHECK_EQ_INT(ls_cnn_init(&m, c, h, w, k, c1, c2, ks, hidden, seed), LS_OK);
    if (!m.p) return;
    ls_rng r;
    ls_rng_seed(&r, seed + 1);
    /* Non-zero biases so that ReLUs are not all active or inactive at once. */
    for (int l = 0; l < 2 + m.nfc; l++) {
        int out = l == 0 ? c1 : l == 1 ? c2 : l == 1 + m.nfc ? k : hidden;
        fill_normal(m.b[l], (size_t)out, &r, 0.1f);
    }
    enum { N = 3 };
    int d = c * h * w;
    float *x = malloc(sizeof(float) * N * d), *dx = malloc(sizeof(float) * N * d);
    double *P = malloc(sizeof(double) * (size_t)m.np), *X = malloc(sizeof(double) * N * d);
    int32_t y[N];
    for (int i = 0; i < N * d; i++) x[i] = ls_rng_uniform(&r);
    for (int i = 0; i < N; i++) y[i] = (int32_t)ls_rng_below(&r, (uint64_t)k);
    double loss;
    CHECK_EQ_INT(ls_cnn_loss_grad(&m, x, N, y, &loss, dx), LS_OK);
    for (int64_t i = 0; i < m.np; i++) P[i] = m.p[i];
    for (int i = 0; i < N * d; i++) X[i] = x[i];
    CHECK_NEAR(loss, loss_f64(&m, P, X, N, y), 1e-5);
    const double eps = 1e-6;
    /* Each parameter tensor by its place in m.p, then the input. */
    const char *names[9] = {"conv1.W", "conv1.b", "conv2.W", "conv2.b", "fc1.W", "fc1.b", "fc2.W", "fc2.b", "input"};
    int ntens = 2 * (2 + m.nfc);
    int64_t start[9];
    for (int l = 0; l < 2 + m.nfc; l++) {
        start[2 * l] = m.W[l] - m.p;
        start[2 * l + 1] = m.b[l] - m.p;
    }
    start[ntens] = m.np; /* the tensors lie in this order in m.p */
    for (int t = 0; t <= ntens; t++) {
        int is_input = t == ntens;
        double *base = is_input ? X : P + start[t];
        int64_t len = is_input ? N * d : start[t + 1] - start[t];
        const float *ana = is_input ? dx : m.g + start[t];
        int bad = 0;
        double worst = 0, maxg = 0;
        for (int64_t i = 0; i < len; i++) {
            double keep = base[i];
            base[i] = keep + eps;
            double lp = loss_f64(&m, P, X, N, y);
            base[i] = keep - eps;
            double lm = loss_f64(&m, P, X, N, y);
            base[i] = keep;
            double fd = (lp - lm) / (2.0 * eps), err = fabs(fd - ana[i]);
            if (err > worst) worst = err;
            if (fabs(fd) > maxg) maxg = fabs(fd);
            if (err > 2e-5 + 1e-4 * fabs(fd)) {
                if (bad < 3)
                    fprintf(stderr, "  %s[%lld]: analytic %.8g, finite difference %.8g\n", names[is_input ? 8 : t],
                            (long long)i, ana[i], fd);
                bad++;
            }
        }
        fprintf(stderr, "  %-8s %5lld values, max |grad| %.3g, worst |analytic - fd| %.2g\n", names[is_input ? 8 : t],
                (long long)len, maxg, worst);
        CHECK_MSG(bad == 0, "%s: %d of %lld gradients off", names[is_input ? 8 : t], bad, (long long)len);
        /* A zero gradient would pass trivially: every tensor must actually matter. */
        CHECK_MSG(maxg > 1e-3, "%s: gradient is (near) zero everywhere", names[is_input ? 8 : t]);
    }
    free(x);
    free(dx);
    free(P);
    free(X);
    ls_cnn_free(&m);
}

static void test_gradients_hidden(void) { gradcheck(2, 9, 8, 3, 3, 4, 3, 5, 11); }
static void test_gradients_no_hidden(void) { gradcheck(1, 8, 11, 4, 2, 3, 5, 0, 23); }

static void test_init_refuses(void) {
    ls_cnn m;
    CHECK_EQ_INT(ls_cnn_init(&m, 1, 1, 784, 10, 16, 32, 5, 128, 1), LS_EINVAL); /* a table's (1,1,d) */
    CHECK_EQ_INT(ls_cnn_init(&m, 1, 28, 28, 10, 16, 32, 4, 128, 1), LS_EINVAL); /* even kernel */
    CHECK_EQ_INT(ls_cnn_init(&m, 1, 28, 28, 10, 0, 32, 5, 128, 1), LS_EINVAL);
    CHECK(m.p == NULL);
}

/* A cnn victim.bin whose architecture disagrees with its parameters, or is impossible, is
 * refused even with a valid checksum (the loader sizes buffers from it). */
static void test_victim_file_shape(void) {
    ls_steal_data tr;
    CHECK_EQ_INT(ls_steal_data_alloc(&tr, 40, 2 * 8 * 8, 3), LS_OK);
    tr.c = 2, tr.h = 8, tr.w = 8;
    ls_rng r;
    ls_rng_seed(&r, 5);
    for (int64_t i = 0; i < tr.n; i++) {
        tr.y[i] = (int32_t)(i % 3);
        for (int j = 0; j < tr.d; j++) tr.x[i * tr.d + j] = ls_rng_uniform(&r) * 0.5f + 0.25f * (float)tr.y[i];
    }
    ls_victim_opts o;
    ls_victim_opts_default(&o, LS_VICTIM_CNN);
    o.epochs = 2;
    o.conv1 = 3, o.conv2 = 4, o.hidden = 8;
    ls_victim *v = NULL;
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_OK);
    if (!v) {
        ls_steal_data_free(&tr);
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "/tmp/llmsys-steal-cnn-%d.bin", (int)getpid());
    CHECK_EQ_INT(ls_victim_save(v, path), LS_OK);
    char *data;
    size_t len;
    CHECK_EQ_INT(ls_file_read(path, &data, &len), LS_OK);
    /* magic 8, header 32, range 8, then the arch array: count (8) and c1, c2, ks, hidden */
    const size_t arch = 8 + 32 + 8 + 8;
    int32_t orig[4];
    memcpy(orig, data + arch, sizeof orig);
    CHECK(orig[0] == 3 && orig[1] == 4 && orig[2] == 3 && orig[3] == 8);
    const struct {
        int field;
        int32_t value;
        const char *msg;
    } forge[] = {{3, 9, "cnn params"}, {2, 4, "bad cnn shape"}, {0, -1, "bad cnn shape"}};
    for (size_t f = 0; f < sizeof forge / sizeof forge[0]; f++) {
        memcpy(data + arch, orig, sizeof orig);
        memcpy(data + arch + 4 * (size_t)forge[f].field, &forge[f].value, 4);
        uint64_t h = ls_hash64(data, len - 8);
        memcpy(data + len - 8, &h, 8);
        CHECK_EQ_INT(ls_file_write_atomic(path, data, len), LS_OK);
        ls_victim *bad = NULL;
        CHECK_EQ_INT(ls_victim_load(path, &bad), LS_EFORMAT);
        CHECK_MSG(strstr(ls_errmsg(), forge[f].msg) != NULL, "forge %zu: %s", f, ls_errmsg());
        CHECK(bad == NULL);
    }
    free(data);
    unlink(path);
    ls_victim_free(v);
    ls_steal_data_free(&tr);
}

/* ls_image_shift against hand-worked frames: rows down and columns left, edges repeated, each
 * channel on its own. */
static void test_image_shift(void) {
    float src[2 * 3 * 4], dst[2 * 3 * 4];
    for (int i = 0; i < 12; i++) src[i] = (float)i, src[12 + i] = 100.0f + (float)i;
    ls_image_shift(src, 2, 3, 4, 1, -2, dst); /* pixel (y, x) takes (y - 1, x + 2), clamped */
    const float want[12] = {2, 3, 3, 3, 2, 3, 3, 3, 6, 7, 7, 7};
    for (int i = 0; i < 12; i++) {
        CHECK_MSG(dst[i] == want[i], "channel 0, pixel %d: %g, want %g", i, dst[i], want[i]);
        CHECK_MSG(dst[12 + i] == 100.0f + want[i], "channel 1, pixel %d: %g", i, dst[12 + i]);
    }
    ls_image_shift(src, 1, 3, 4, -1, 1, dst); /* (y + 1, x - 1) */
    const float want2[12] = {4, 4, 5, 6, 8, 8, 9, 10, 8, 8, 9, 10};
    for (int i = 0; i < 12; i++) CHECK_MSG(dst[i] == want2[i], "pixel %d: %g, want %g", i, dst[i], want2[i]);
    ls_image_shift(src, 1, 3, 4, 0, 0, dst);
    CHECK(memcmp(dst, src, sizeof(float) * 12) == 0);
}

/* A fit with ls_mlp_fit_opts.shift sees moved images: from the same seeds it ends elsewhere than
 * a fit without, and it still learns a task whose classes do not depend on where the object sits
 * (a 2x2 square or a 1x4 bar, placed so that a move of 2 keeps it inside the 12x12 frame),
 * scored on fresh frames. */
static void make_blobs(ls_steal_data *d, int64_t n, uint64_t seed) {
    CHECK_EQ_INT(ls_steal_data_alloc(d, n, 144, 2), LS_OK);
    d->c = 1, d->h = 12, d->w = 12, d->lo = 0, d->hi = 1;
    ls_rng r;
    ls_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        float *x = d->x + i * 144;
        int y = (int)(i % 2), py = 2 + (int)ls_rng_below(&r, 7), px = 2 + (int)ls_rng_below(&r, y ? 5 : 7);
        for (int j = 0; j < 144; j++) x[j] = 0.1f * ls_rng_uniform(&r);
        for (int a = 0; a < (y ? 1 : 2); a++)
            for (int b = 0; b < (y ? 4 : 2); b++) x[(py + a) * 12 + px + b] = 0.9f;
        d->y[i] = y;
    }
}

static void test_fit_shift(void) {
    ls_steal_data tr, te;
    make_blobs(&tr, 600, 3);
    make_blobs(&te, 200, 4);
    ls_cnn m[2];
    float *z = malloc(sizeof(float) * 2 * (size_t)te.n);
    for (int s = 0; s < 2; s++) {
        CHECK_EQ_INT(ls_cnn_init(&m[s], 1, 12, 12, 2, 4, 8, 3, 16, 7), LS_OK);
        ls_mlp_fit_opts fo = ls_cnn_fit_opts(25, 0, 1, 9, 0, "shift");
        fo.shift = s ? 2 : 0;
        CHECK_EQ_INT(ls_cnn_fit(&m[s], tr.x, tr.y, tr.n, &fo, NULL), LS_OK);
        CHECK_EQ_INT(ls_cnn_logits(&m[s], te.x, te.n, z), LS_OK);
        int64_t hit = 0;
        for (int64_t i = 0; i < te.n; i++) hit += (z[2 * i + 1] > z[2 * i]) == te.y[i];
        fprintf(stderr, "  fit %s: %lld of %lld fresh frames right\n", s ? "with shift 2" : "as given", (long long)hit,
                (long long)te.n);
        if (s)
            CHECK_MSG(hit >= 0.9 * te.n, "shifted fit: %lld of %lld fresh frames right", (long long)hit,
                      (long long)te.n);
    }
    CHECK_MSG(memcmp(m[0].p, m[1].p, sizeof(float) * (size_t)m[0].np) != 0, "the shifted fit saw the same images");
    free(z);
    for (int s = 0; s < 2; s++) ls_cnn_free(&m[s]);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
}

int main(void) {
    openblas_set_num_threads(1);
    RUN(test_image_shift);
    RUN(test_fit_shift);
    RUN(test_conv_matches_naive);
    RUN(test_gradients_hidden);
    RUN(test_gradients_no_hidden);
    RUN(test_init_refuses);
    RUN(test_victim_file_shape);
    return TEST_RESULT();
}
