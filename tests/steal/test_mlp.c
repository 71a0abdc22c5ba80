/* test_mlp.c - the MLP of steal's victims and replica members (src/steal/nn.c): the loss its
 * fit minimises (soft targets, weighted rows) and every gradient (each layer's W and b, and the
 * input) against central differences of a float64 forward by direct loops; ls_mlp_input_grad
 * against the same differences of the sum of dlogits . logits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "steal/internal.h"
#include "test.h"

/* The network's logits for row x (d wide) in float64: P holds the parameters in m's layout. */
static void logits_f64(const ls_mlp *m, const double *P, const double *x, double *z) {
    double a[2][64];
    memcpy(a[0], x, sizeof(double) * (size_t)m->sizes[0]);
    for (int l = 0; l < m->nl; l++) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        const double *W = P + (m->W[l] - m->p), *b = P + (m->b[l] - m->p);
        double *y = l == m->nl - 1 ? z : a[(l + 1) % 2];
        for (int j = 0; j < out; j++) {
            double s = b[j];
            for (int i = 0; i < in; i++) s += W[(size_t)j * in + i] * a[l % 2][i];
            y[j] = l == m->nl - 1 || s > 0 ? s : 0;
        }
    }
}

/* The weighted mean soft cross-entropy of n rows (targets n*k, weights NULL = 1) in float64. */
static double loss_f64(const ls_mlp *m, const double *P, const double *X, int n, const float *t, const float *w) {
    int d = m->sizes[0], k = m->sizes[m->nl];
    double total = 0, wsum = 0, z[64];
    for (int i = 0; i < n; i++) {
        logits_f64(m, P, X + (size_t)i * d, z);
        double mx = z[0], sum = 0, wi = w ? w[i] : 1.0;
        for (int j = 1; j < k; j++) mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < k; j++) sum += exp(z[j] - mx);
        for (int j = 0; j < k; j++) total += wi * t[i * k + j] * (mx + log(sum) - z[j]);
        wsum += wi;
    }
    return total / wsum;
}

/* sum_i dl_i . logits_i in float64: the function ls_mlp_input_grad differentiates. */
static double dot_f64(const ls_mlp *m, const double *P, const double *X, int n, const float *dl) {
    int d = m->sizes[0], k = m->sizes[m->nl];
    double s = 0, z[64];
    for (int i = 0; i < n; i++) {
        logits_f64(m, P, X + (size_t)i * d, z);
        for (int j = 0; j < k; j++) s += dl[i * k + j] * z[j];
    }
    return s;
}

/* Compares len analytic gradients ana with central differences of f over base[0..len) (f reads
 * base through ctx): |a - fd| <= 2e-5 + 1e-4 |fd|, as steal.test_cnn's check (a float64
 * step of 1e-6 seldom crosses a ReLU kink; the tolerance is the float32 gradient's own). Every
 * checked tensor must matter: its largest |fd| above 1e-3. */
typedef struct {
    const ls_mlp *m;
    const double *P, *X;
    int n;
    const float *t, *w, *dl;
} fd_ctx;

static double fd_eval(const fd_ctx *c) {
    return c->dl ? dot_f64(c->m, c->P, c->X, c->n, c->dl) : loss_f64(c->m, c->P, c->X, c->n, c->t, c->w);
}

static void check_grad(const char *name, const fd_ctx *c, double *base, const float *ana, int64_t len) {
    const double eps = 1e-6;
    int bad = 0;
    double worst = 0, maxg = 0;
    for (int64_t i = 0; i < len; i++) {
        double keep = base[i];
        base[i] = keep + eps;
        double lp = fd_eval(c);
        base[i] = keep - eps;
        double lm = fd_eval(c);
        base[i] = keep;
        double fd = (lp - lm) / (2 * eps), err = fabs(fd - ana[i]);
        worst = err > worst ? err : worst;
        maxg = fabs(fd) > maxg ? fabs(fd) : maxg;
        if (err > 2e-5 + 1e-4 * fabs(fd)) {
            if (bad < 3)
                fprintf(stderr, "  %s[%lld]: analytic %.8g, finite difference %.8g\n", name, (long long)i, ana[i], fd);
            bad++;
        }
    }
    fprintf(stderr, "  %-8s %4lld values, max |grad| %.3g, worst |analytic - fd| %.2g\n", name, (long long)len, maxg,
            worst);
    CHECK_MSG(bad == 0, "%s: %d of %lld gradients off", name, bad, (long long)len);
    CHECK_MSG(maxg > 1e-3, "%s: gradient is (near) zero everywhere", name);
}

/* An MLP of nl layers (sizes), n rows with soft targets and unequal weights (or none). */
static void gradcheck(int nl, const int *sizes, int weighted, uint64_t seed) {
    ls_mlp m;
    CHECK_EQ_INT(ls_mlp_init(&m, nl, sizes, seed), LS_OK);
    if (!m.p) return;
    ls_rng r;
    ls_rng_seed(&r, seed + 1);
    /* non-zero biases, so that ReLUs are neither all on nor all off */
    for (int l = 0; l < nl; l++)
        for (int j = 0; j < sizes[l + 1]; j++) m.b[l][j] = 0.3f * ls_rng_normal(&r);
    enum { N = 5 };
    int d = sizes[0], k = sizes[nl];
    float x[N * 16], t[N * 8], w[N], dx[N * 16], dl[N * 8];
    double X[N * 16], *P = malloc(sizeof(double) * (size_t)m.np);
    for (int i = 0; i < N * d; i++) X[i] = x[i] = ls_rng_uniform(&r);
    for (int i = 0; i < N; i++) { /* soft targets: a random distribution per row */
        float s = 0;
        for (int j = 0; j < k; j++) s += t[i * k + j] = ls_rng_uniform(&r);
        for (int j = 0; j < k; j++) t[i * k + j] /= s;
        w[i] = 0.2f + 2 * ls_rng_uniform(&r);
    }
    for (int i = 0; i < N * k; i++) dl[i] = ls_rng_normal(&r);
    double loss;
    CHECK_EQ_INT(ls_mlp_loss_grad(&m, x, N, t, weighted ? w : NULL, &loss, dx), LS_OK);
    for (int64_t i = 0; i < m.np; i++) P[i] = m.p[i];
    fd_ctx c = {&m, P, X, N, t, weighted ? w : NULL, NULL};
    CHECK_NEAR(loss, fd_eval(&c), 1e-5);
    char name[16];
    for (int l = 0; l < nl; l++) { /* W[l], b[l] by their places in m.p */
        snprintf(name, sizeof name, "W%d", l);
        check_grad(name, &c, P + (m.W[l] - m.p), m.gW[l], (int64_t)sizes[l] * sizes[l + 1]);
        snprintf(name, sizeof name, "b%d", l);
        check_grad(name, &c, P + (m.b[l] - m.p), m.gb[l], sizes[l + 1]);
    }
    check_grad("input", &c, X, dx, (int64_t)N * d);
    /* ls_mlp_input_grad: the gradient of sum dl . logits */
    CHECK_EQ_INT(ls_mlp_input_grad(&m, x, N, dl, dx), LS_OK);
    fd_ctx cd = {&m, P, X, N, NULL, NULL, dl};
    check_grad("dlogits", &cd, X, dx, (int64_t)N * d);
    free(P);
    ls_mlp_free(&m);
}

static void test_gradients_three_layers(void) { gradcheck(3, (const int[]){6, 9, 7, 4}, 1, 3); }
static void test_gradients_two_layers(void) { gradcheck(2, (const int[]){5, 8, 3}, 0, 17); }
static void test_gradients_linear(void) { gradcheck(1, (const int[]){7, 5}, 1, 29); }

int main(void) {
    RUN(test_gradients_three_layers);
    RUN(test_gradients_two_layers);
    RUN(test_gradients_linear);
    return TEST_RESULT();
}
