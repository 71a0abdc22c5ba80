/* test_precision.c - mixed-precision Linear layers: each precision's GEMM against a float64
 * product, the model's forward and backward with every Linear layer in that precision
 * against fp32, and its gradient against central finite differences of the fp32 loss; the
 * 16-bit casts round ties to even; the Linear call sites' contracts at each low precision.
 * Tolerances are about 3x the errors observed on this machine (printed). */
#include <stdint.h>

#include "llmsys/model.h"
#include "model/layers.h"
#include "model/precision.h"
#include "test.h"

static void fill(float *x, size_t n, float sd, ls_rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = sd * ls_rng_normal(r);
}

/* Relative Frobenius error of C against the float64 product beta·C0 + op(A)·op(B). */
static double gemm_err(ls_prec_ctx *c, ls_prec p, int pc, int ta, int tb, int M, int N, int K, float beta) {
    ls_rng r;
    ls_rng_seed(&r, 7 + (uint64_t)(ta * 2 + tb));
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
    fill(A, (size_t)M * K, 1.0f, &r);
    fill(B, (size_t)K * N, 0.02f, &r);
    fill(C, (size_t)M * N, 0.1f, &r);
    double *ref = malloc(sizeof(double) * M * N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = beta * (double)C[(size_t)m * N + n];
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
                double b = tb ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
                s += a * b;
            }
            ref[(size_t)m * N + n] = s;
        }
    int rc = ls_prec_gemm(c, p, pc, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, beta, C, N);
    CHECK_EQ_INT(rc, LS_OK);
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        num += (C[i] - ref[i]) * (C[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    free(A);
    free(B);
    free(C);
    free(ref);
    return sqrt(num / den);
}

static void test_gemm(void) {
    ls_prec_ctx *c;
    CHECK_EQ_INT(ls_prec_ctx_new(&c), LS_OK);
    /* tolerance (relative Frobenius), about 3x observed: fp32 1e-6 (1.6e-7), bf16 7e-3
     * (2.3e-3), fp16 1e-3 (3.0e-4), int8 per tensor 4.5e-2 (1.4e-2), per channel 2.6e-2 (8.6e-3);
     * int8 with 7-bit op(B) (CPUs without VNNI) about 1.7x observed: 2.4e-2 and 1.6e-2 */
    const double tol[LS_PREC_COUNT] = {1e-6, 7e-3, 1e-3, 4.5e-2};
    for (int p = 0; p < LS_PREC_COUNT; p++) {
        for (int pc = 0; pc < (p == LS_PREC_INT8 ? 2 : 1); pc++) {
            double worst = 0;
            for (int t = 0; t < 4; t++) {
                double e = gemm_err(c, (ls_prec)p, pc, t >> 1, t & 1, 37, 45, 70, (float)(t & 1));
                worst = e > worst ? e : worst;
                CHECK_MSG(e <= (pc ? 2.6e-2 : tol[p]), "%s%s ta=%d tb=%d: rel err %.3g", ls_prec_name(p),
                          pc ? " per-channel" : "", t >> 1, t & 1, e);
            }
            printf("  gemm %-4s%s: worst relative error %.3g (%s)\n", ls_prec_name(p), pc ? " per-channel" : "", worst,
                   ls_prec_kernel(c, (ls_prec)p));
        }
    }
    /* the error grows with coarser formats: int8 > bf16 > fp16 > fp32 */
    double e32 = gemm_err(c, LS_PREC_FP32, 0, 0, 1, 37, 45, 70, 0),
           e16 = gemm_err(c, LS_PREC_FP16, 0, 0, 1, 37, 45, 70, 0);
    double eb = gemm_err(c, LS_PREC_BF16, 0, 0, 1, 37, 45, 70, 0),
           e8 = gemm_err(c, LS_PREC_INT8, 0, 0, 1, 37, 45, 70, 0);
    CHECK(e32 < e16 && e16 < eb && eb < e8);
    CHECK(ls_prec_gemm(c, LS_PREC_BF16, 0, 0, 0, 2, 2, 2, NULL, 2, NULL, 2, 0.5f, NULL, 2) == LS_EINVAL);
    ls_prec_ctx_free(c);
}

static void test_names(void) {
    ls_prec p;
    CHECK(ls_prec_parse("INT8", &p) == LS_OK && p == LS_PREC_INT8);
    CHECK(ls_prec_parse("fp8", &p) == LS_EINVAL);
    char b[64];
    CHECK(!strcmp(ls_linear_name(LS_LIN(1, LS_LIN_FC), b, sizeof b), "h.1.mlp.fc"));
    CHECK_EQ_INT(ls_linear_find("h.1.mlp.proj", 2), LS_LIN(1, LS_LIN_MPROJ));
    CHECK_EQ_INT(ls_linear_find("h.2.mlp.proj", 2), -1);
}

enum { B_ = 2, T_ = 16 };

static void batch(int *tok, int *tgt) {
    ls_rng r;
    ls_rng_seed(&r, 3);
    for (int i = 0; i < B_ * T_; i++) {
        tok[i] = (int)ls_rng_below(&r, 256);
        tgt[i] = (int)ls_rng_below(&r, 256);
    }
}

/* Loss and a copy of the gradient with every Linear layer in precision p. */
static float loss_grad(ls_model *m, ls_prec p, int pc, float *grad) {
    int n = ls_model_cfg(m)->n_layer * LS_LIN_COUNT;
    uint8_t pl[64];
    for (int i = 0; i < n; i++) pl[i] = (uint8_t)p;
    CHECK_EQ_INT(ls_model_set_precision(m, pl, n, pc), LS_OK);
    int tok[B_ * T_], tgt[B_ * T_];
    batch(tok, tgt);
    ls_model_zero_grad(m);
    float loss = ls_model_forward(m, tok, tgt, B_, T_);
    if (grad) {
        ls_model_backward(m);
        memcpy(grad, ls_model_grads(m), ls_model_num_params(m) * sizeof(float));
    }
    return loss;
}

static void test_model(void) {
    ls_model_config cfg;
    ls_model_config_named("tiny", &cfg);
    ls_model *m;
    CHECK_EQ_INT(ls_model_init(&m, &cfg, 5), LS_OK);
    size_t np = ls_model_num_params(m);
    float *g32 = malloc(np * sizeof(float)), *gp = malloc(np * sizeof(float)), *dir = malloc(np * sizeof(float));
    float l32 = loss_grad(m, LS_PREC_FP32, 0, g32);
    /* int8 with 7-bit op(B), where oneDNN's int8 kernels add pairs of products in int16 */
    ls_prec_ctx *c;
    CHECK_EQ_INT(ls_prec_ctx_new(&c), LS_OK);
    int b7 = strstr(ls_prec_kernel(c, LS_PREC_INT8), "7-bit") != NULL;
    ls_prec_ctx_free(c);
    /* loss and gradient vs fp32 (relative gradient error over all parameters), about 3x
     * observed: loss bf16 2.7e-5, fp16 7.6e-6, int8 2.9e-4 (7-bit op(B): 6.1e-4); gradient
     * 2.7e-3, 3.4e-4, 1.6e-2 (7-bit op(B): 2.5e-2, 2x) */
    const double ltol[LS_PREC_COUNT] = {0, 1e-4, 3e-5, b7 ? 2e-3 : 1e-3}, gtol[LS_PREC_COUNT] = {0, 8e-3, 1e-3, 5e-2};
    for (int p = 1; p < LS_PREC_COUNT; p++) {
        for (int pc = 0; pc < (p == LS_PREC_INT8 ? 2 : 1); pc++) {
            float lp = loss_grad(m, (ls_prec)p, pc, gp);
            double num = 0, den = 0;
            for (size_t i = 0; i < np; i++) {
                num += ((double)gp[i] - g32[i]) * ((double)gp[i] - g32[i]);
                den += (double)g32[i] * g32[i];
            }
            double ge = sqrt(num / den);
            printf("  model %-4s%s: loss %.6f vs fp32 %.6f (|diff| %.2g), gradient rel err %.3g\n", ls_prec_name(p),
                   pc ? " per-channel" : "", lp, l32, fabs(lp - l32), ge);
            CHECK_NEAR(lp, l32, ltol[p]);
            CHECK_MSG(ge <= gtol[p], "%s gradient rel err %.3g > %.3g", ls_prec_name(p), ge, gtol[p]);
        }
    }
    /* directional derivative along a random direction: the precision's gradient against
     * central differences of the fp32 loss (float64 accumulation of the step) */
    ls_rng r;
    ls_rng_seed(&r, 11);
    fill(dir, np, 1.0f, &r);
    double dn = 0;
    for (size_t i = 0; i < np; i++) dn += (double)dir[i] * dir[i];
    for (size_t i = 0; i < np; i++) dir[i] = (float)(dir[i] / sqrt(dn));
    float *w = ls_model_params(m), *w0 = malloc(np * sizeof(float));
    memcpy(w0, w, np * sizeof(float));
    const float h = 1e-2f;
    for (size_t i = 0; i < np; i++) w[i] = w0[i] + h * dir[i];
    double lplus = loss_grad(m, LS_PREC_FP32, 0, NULL);
    for (size_t i = 0; i < np; i++) w[i] = w0[i] - h * dir[i];
    double lminus = loss_grad(m, LS_PREC_FP32, 0, NULL);
    memcpy(w, w0, np * sizeof(float));
    double fd = (lplus - lminus) / (2.0 * h);
    /* relative to |fd|; observed fp32 3.4e-4 (the differences' own error), bf16 3.4e-4, fp16
     * 1.6e-4, int8 per channel 1.7e-3 (7-bit op(B): 9.2e-3) */
    const double dtol[LS_PREC_COUNT] = {1e-3, 1e-3, 1e-3, b7 ? 2.8e-2 : 5e-3};
    for (int p = 0; p < LS_PREC_COUNT; p++) {
        loss_grad(m, (ls_prec)p, 1, gp);
        double dd = 0;
        for (size_t i = 0; i < np; i++) dd += (double)gp[i] * dir[i];
        printf("  finite differences %-4s: directional derivative %.6f vs %.6f (rel %.3g)\n", ls_prec_name(p), dd, fd,
               fabs(dd - fd) / fabs(fd));
        CHECK_MSG(fabs(dd - fd) <= dtol[p] * fabs(fd), "%s: %.6f vs fd %.6f", ls_prec_name(p), dd, fd);
    }
    /* bad plans */
    uint8_t bad[64] = {0};
    CHECK(ls_model_set_precision(m, bad, 3, 0) == LS_EINVAL);
    bad[1] = 9;
    CHECK(ls_model_set_precision(m, bad, cfg.n_layer * LS_LIN_COUNT, 0) == LS_EINVAL);
    CHECK_EQ_INT(ls_model_set_precision(m, NULL, 0, 0), LS_OK);
    CHECK_NEAR(loss_grad(m, LS_PREC_FP32, 0, NULL), l32, 0);
    free(w0);
    free(g32);
    free(gp);
    free(dir);
    ls_model_free(m);
}

/* int8 on numbers its quantization keeps exactly, so the result must be the exact integer
 * product on whichever path runs (VNNI; without it, oneDNN's kernels that add pairs of u8 x s8
 * products in int16, fed a 7-bit op(B)), oneDNN's matmul forced or not. op(A) is in
 * [-127, 127] with 127 in every row; op(B) in {-8001, 0, 8001}, 8001 = 127 x 63 being a whole
 * number of steps at 8 bits (63 of them) and at 7 (127). With 8-bit op(B) on the int16 path
 * the pair sums saturate and this product was off by up to 6 %. */
/* The 16-bit casts round to nearest, ties to even: a 1 x 6 x 1 GEMM of 1 by values halfway
 * between two bf16 (fp16) neighbours gives the even one exactly, and just past halfway the
 * upper one. u = the format's unit in the last place at 1 (2^-7 bf16, 2^-10 fp16). */
static void test_cast_rounding(void) {
    ls_prec_ctx *c;
    CHECK_EQ_INT(ls_prec_ctx_new(&c), LS_OK);
    for (int p = LS_PREC_BF16; p <= LS_PREC_FP16; p++) {
        double u = p == LS_PREC_BF16 ? 0x1p-7 : 0x1p-10;
        /* 1 + u/2: a tie, to 1 (even); 1 + 3u/2: a tie, to 1 + 2u (even); 1 + u/2 + u/64: up; the
         * same negated, and 2 + u (a tie at 2, to 2) */
        const double x[6] = {1 + u / 2, 1 + 1.5 * u, 1 + u / 2 + u / 64, -(1 + u / 2), -(1 + 1.5 * u), 2 + u};
        const double want[6] = {1, 1 + 2 * u, 1 + u, -1, -(1 + 2 * u), 2};
        float one = 1.0f, B[6], C[6];
        for (int j = 0; j < 6; j++) B[j] = (float)x[j];
        CHECK_EQ_INT(ls_prec_gemm(c, (ls_prec)p, 0, 0, 0, 1, 6, 1, &one, 1, B, 6, 0.0f, C, 6), LS_OK);
        int bad = 0;
        for (int j = 0; j < 6; j++)
            if ((double)C[j] != want[j]) {
                fprintf(stderr, "  %s: %.10g cast to %.10g, expected %.10g\n", ls_prec_name(p), x[j], C[j], want[j]);
                bad++;
            }
        CHECK_MSG(bad == 0, "%s: %d of 6 casts not rounded to nearest even (%s)", ls_prec_name(p), bad,
                  ls_prec_kernel(c, (ls_prec)p));
    }
    ls_prec_ctx_free(c);
}

static void test_int8_exact(void) {
    enum { M = 37, N = 45, K = 70 };
    ls_prec_ctx *c;
    CHECK_EQ_INT(ls_prec_ctx_new(&c), LS_OK);
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
    ls_rng r;
    ls_rng_seed(&r, 19);
    for (int mm = 0; mm < 2; mm++) {
        ls_prec_ctx_set_int8_matmul(c, mm);
        for (int pc = 0; pc < 2; pc++)
            for (int t = 0; t < 4; t++) {
                int ta = t >> 1, tb = t & 1;
                for (int m = 0; m < M; m++)
                    for (int k = 0; k < K; k++)
                        A[ta ? k * M + m : m * K + k] = k == m % K ? 127.0f : (float)ls_rng_below(&r, 255) - 127.0f;
                for (int k = 0; k < K; k++)
                    for (int n = 0; n < N; n++)
                        B[tb ? n * K + k : k * N + n] = 8001.0f * (float)((int)ls_rng_below(&r, 3) - 1);
                CHECK_EQ_INT(
                    ls_prec_gemm(c, LS_PREC_INT8, pc, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, 0.0f, C, N),
                    LS_OK);
                int64_t bad = 0;
                double worst = 0;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        int64_t e = 0; /* exact: |e| <= 70 x 127 x 8001 < 2^27 */
                        for (int k = 0; k < K; k++)
                            e += (int64_t)A[ta ? k * M + m : m * K + k] * (int64_t)B[tb ? n * K + k : k * N + n];
                        double d = fabs((double)C[m * N + n] - (double)e); /* float's rounding only */
                        bad += d > 1e-6 * fabs((double)e);
                        worst = d > worst ? d : worst;
                    }
                CHECK_MSG(bad == 0, "%s%s ta=%d tb=%d: %lld of %d entries not exact (worst off by %.0f)",
                          ls_prec_kernel(c, LS_PREC_INT8), pc ? " per-channel" : "", ta, tb, (long long)bad, M * N,
                          worst);
            }
        printf("  int8 exact on integers: %s\n", ls_prec_kernel(c, LS_PREC_INT8));
    }
    free(A), free(B), free(C);
    ls_prec_ctx_free(c);
}

/* The linear timer: every Linear layer accumulates time at every precision, all of them
 * together within the step's wall time, the same gradient as without the timer; removed,
 * it adds nothing. */
static void test_timer(void) {
    ls_model_config cfg;
    ls_model_config_named("tiny", &cfg);
    ls_model *m;
    CHECK_EQ_INT(ls_model_init(&m, &cfg, 5), LS_OK);
    int n = cfg.n_layer * LS_LIN_COUNT;
    size_t np = ls_model_num_params(m);
    float *g0 = malloc(np * sizeof(float)), *g1 = malloc(np * sizeof(float));
    double acc[64] = {0};
    for (int p = 0; p < LS_PREC_COUNT; p++) {
        loss_grad(m, (ls_prec)p, 1, g0);
        memset(acc, 0, sizeof acc);
        CHECK_EQ_INT(ls_model_set_linear_timer(m, acc), LS_OK);
        double t0 = ls_now();
        loss_grad(m, (ls_prec)p, 1, g1);
        double wall = ls_now() - t0, sum = 0;
        CHECK_EQ_INT(ls_model_set_linear_timer(m, NULL), LS_OK);
        for (int i = 0; i < n; i++) {
            CHECK_MSG(acc[i] > 0, "%s: layer %d not timed", ls_prec_name(p), i);
            sum += acc[i];
        }
        CHECK_MSG(sum <= wall, "%s: layers %.6f s > step %.6f s", ls_prec_name(p), sum, wall);
        CHECK(!memcmp(g0, g1, np * sizeof(float)));
        double before = acc[0];
        loss_grad(m, (ls_prec)p, 1, NULL);
        CHECK(acc[0] == before);
    }
    free(g0), free(g1);
    ls_model_free(m);
}

/* The Linear call sites' contracts at each low precision (layers.h): the backward adds to the
 * dinp, dw and dbias it is given (a run from zeros, added to the given values, to float
 * rounding: the quantised operands are the same both times); the fused fc + GELU forward's
 * output is GELU of its pre-activation, every element; the layer timer adds to what it holds. */
static void test_lin_contracts(void) {
    enum { N = 9, IC = 16, OC = 24 };
    ls_rng r;
    ls_rng_seed(&r, 23);
    float inp[N * IC], w[OC * IC], b[OC], dout[N * OC], pre[N * OC], out[N * OC], ref[N * OC];
    fill(inp, N * IC, 1.0f, &r), fill(w, OC * IC, 0.3f, &r), fill(b, OC, 0.3f, &r), fill(dout, N * OC, 1.0f, &r);
    for (int p = LS_PREC_BF16; p < LS_PREC_COUNT; p++) {
        uint8_t prec = (uint8_t)p;
        double timer = 1000.0;
        ls_model_prec mp = {.prec = &prec, .n = 1, .timer = &timer};
        CHECK_EQ_INT(ls_prec_ctx_new(&mp.ctx), LS_OK);
        float g0[3][OC * IC], z[3][OC * IC] = {{0}}, a[3][OC * IC];
        for (int k = 0; k < 3; k++) fill(g0[k], OC * IC, 1.0f, &r), memcpy(a[k], g0[k], sizeof a[k]);
        ls_lin_backward(&mp, 0, z[0], z[1], z[2], dout, inp, w, N, IC, OC);
        ls_lin_backward(&mp, 0, a[0], a[1], a[2], dout, inp, w, N, IC, OC);
        const int len[3] = {N * IC, OC * IC, OC};
        double e = 0;
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < len[k]; i++) e = fmax(e, fabs(a[k][i] - (g0[k][i] + z[k][i])));
        CHECK_MSG(e < 1e-5, "%s backward does not accumulate: %.3g", ls_prec_name(p), e);
        CHECK_MSG(timer > 1000.0, "%s: the timer was overwritten (%g)", ls_prec_name(p), timer);
        ls_lin_gelu_forward(&mp, 0, pre, out, inp, w, b, N, IC, OC);
        ls_gelu_forward(ref, pre, N * OC);
        CHECK_MSG(!memcmp(out, ref, sizeof out), "%s: the fused forward's output is not GELU of its pre-activation",
                  ls_prec_name(p));
        ls_prec_ctx_free(mp.ctx);
    }
}

int main(void) {
    ls_model_set_threads(1);
    RUN(test_timer);
    RUN(test_names);
    RUN(test_gemm);
    RUN(test_cast_rounding);
    RUN(test_int8_exact);
    RUN(test_lin_contracts);
    RUN(test_model);
    return TEST_RESULT();
}
