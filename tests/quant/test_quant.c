/* test_quant.c - quantization formats and kernels: dequantization error within half a
 * step, SIMD levels (AVX2, AVX-512) vs scalar reference on random ragged shapes, batch
 * invariance. */
#include "llmsys/core.h"
#include "llmsys/quant.h"
#include "test.h"

static void fill(ls_rng *rng, float *a, size_t n, float sd) {
    for (size_t i = 0; i < n; i++) {
        a[i] = sd * ls_rng_normal(rng);
        if (ls_rng_below(rng, 97) == 0) a[i] *= 8.0f; /* outliers stretch some groups */
    }
}

static void test_f16(void) {
    CHECK_EQ_INT(ls_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(ls_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(ls_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(ls_f32_to_f16(1e6f), 0x7c00);
    CHECK_EQ_INT(ls_f32_to_f16(5.9604645e-8f), 0x0001);
    CHECK_NEAR(ls_f16_to_f32(0x3555), 0.333251953125, 0);
    /* halfway between two halves: to the even one (IEEE round-to-nearest-even) */
    CHECK_EQ_INT(ls_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);     /* 1 + half an ulp: down to 1 */
    CHECK_EQ_INT(ls_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02); /* 1 + 1.5 ulp: up to 1 + 2 ulp */
    CHECK_EQ_INT(ls_f32_to_f16(-(1.0f + ldexpf(1.0f, -11))), 0xbc00);
    CHECK_EQ_INT(ls_f32_to_f16(ldexpf(1.0f, -25)), 0x0000); /* half the smallest subnormal: 0 */
    CHECK_EQ_INT(ls_f32_to_f16(ldexpf(5.0f, -25)), 0x0002); /* 2.5 subnormal steps: 2 */
    CHECK_EQ_INT(ls_f32_to_f16(ldexpf(3.0f, -25)), 0x0002); /* 1.5 steps: 2 */
    ls_rng rng;
    ls_rng_seed(&rng, 7);
    for (int i = 0; i < 20000; i++) {
        float f = ls_rng_normal(&rng) * (i % 2 ? 1e-3f : 10.0f);
        float g = ls_f16_to_f32(ls_f32_to_f16(f));
        double tol = fabs(f) * (1.0 / 2048) + 3e-8; /* half ulp relative, or subnormal step */
        if (fabs(f - g) > tol) {
            CHECK_NEAR(g, f, tol);
            break;
        }
    }
}

static void test_dequant_error(void) {
    ls_rng rng;
    ls_rng_seed(&rng, 11);
    const int bits_list[] = {32, 16, 8, 4, 3};
    const int groups[] = {32, 64, 128};
    for (int bi = 0; bi < 5; bi++)
        for (int gi = 0; gi < 3; gi++) {
            int rows = 1 + (int)ls_rng_below(&rng, 9), cols = 1 + (int)ls_rng_below(&rng, 300);
            float *w = malloc(sizeof(float) * rows * cols), *d = malloc(sizeof(float) * cols);
            fill(&rng, w, (size_t)rows * cols, 0.05f);
            ls_qmat q;
            CHECK(ls_qmat_quantize(&q, w, rows, cols, bits_list[bi], groups[gi]) == LS_OK);
            int bad = 0;
            for (int r = 0; r < rows && !bad; r++) {
                ls_qmat_dequant_row(&q, r, d);
                for (int c = 0; c < cols && !bad; c++) {
                    double wv = w[(size_t)r * cols + c], tol;
                    if (q.bits == 32) tol = 0;
                    else if (q.bits == 16) tol = fabs(wv) / 2048 + 3e-8;
                    else tol = ls_qmat_scale(&q, r, c / q.group) * 0.5 * (1 + 1e-5) + 1e-7;
                    if (fabs(d[c] - wv) > tol) {
                        fprintf(stderr, "  bits %d group %d shape (%d,%d) at (%d,%d):\n", q.bits, q.group, rows, cols, r, c);
                        CHECK_NEAR(d[c], wv, tol);
                        bad = 1;
                    }
                }
            }
            ls_qmat_free(&q);
            free(w);
            free(d);
        }
}

/* Storage: bits/8 bytes per padded weight in a row (3 bits: 12 bytes per 32), plus per group
 * an fp16 scale and, below 8 bits, an fp16 minimum. */
static void test_sizes(void) {
    const int bits_list[] = {32, 16, 8, 4, 3};
    float *w = calloc(5 * 300, sizeof(float));
    for (int i = 0; i < 5 * 300; i++) w[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (int bi = 0; bi < 5; bi++) {
        int bits = bits_list[bi];
        ls_qmat q;
        CHECK(ls_qmat_quantize(&q, w, 5, 300, bits, 64) == LS_OK); /* 320 padded columns, 5 groups */
        size_t row = (size_t)320 * bits / 8, groups = bits <= 8 ? 5 * 2 * (bits < 8 ? 2 : 1) : 0;
        CHECK_MSG(q.row_bytes == row && ls_qmat_bytes(&q) == 5 * (row + groups), "%d bits: %zu bytes a row, %zu in all",
                  bits, q.row_bytes, ls_qmat_bytes(&q));
        ls_qmat_free(&q);
    }
    free(w);
}

/* Error bound from the weights alone: per group of a row, 3/4-bit codes span [lo, hi] of the
 * group's own values in 2^b - 1 steps (every level used, the top one for hi), so each weight
 * is within (hi - lo) / (2·(2^b - 1)) of its dequantized value; 8 bits are symmetric: within
 * absmax/254. The fp16 min (rounded down, <= lo) and scale (rounded up) widen that by at
 * most 2^-10 relative plus (lo - min)/2: 0.2 % here. Dequantized values lie on the grid
 * min + k·scale of the stored fp16 values, which cover [lo, hi]. */
static void test_range_bound(void) {
    ls_rng rng;
    ls_rng_seed(&rng, 23);
    const int bits_list[] = {8, 4, 3};
    for (int bi = 0; bi < 3; bi++) {
        int bits = bits_list[bi], rows = 6, cols = 512, group = 128;
        float *w = malloc(sizeof(float) * rows * cols), *d = malloc(sizeof(float) * cols);
        for (int i = 0; i < rows * cols; i++) w[i] = (float)(0.1 * (2 * ls_rng_uniform_f64(&rng) - 1));
        ls_qmat q;
        CHECK(ls_qmat_quantize(&q, w, rows, cols, bits, group) == LS_OK);
        double worst = 0, off_grid = 0;
        int top_hits = 0, groups = 0;
        for (int r = 0; r < rows; r++) {
            ls_qmat_dequant_row(&q, r, d);
            for (int c0 = 0; c0 < cols; c0 += group) {
                const float *g = w + (size_t)r * cols + c0;
                double lo = g[0], hi = g[0], amax = 0;
                for (int c = 0; c < group; c++) {
                    lo = g[c] < lo ? g[c] : lo;
                    hi = g[c] > hi ? g[c] : hi;
                    amax = fabs(g[c]) > amax ? fabs(g[c]) : amax;
                }
                double levels = bits == 8 ? 254.0 : (double)((1 << bits) - 1);
                double bound = bits == 8 ? amax / 254.0 : (hi - lo) / (2.0 * levels);
                double step = ls_qmat_scale(&q, r, c0 / group), base = ls_qmat_min(&q, r, c0 / group);
                if (bits != 8) CHECK(base <= lo && base + levels * step >= hi);
                if (bits == 8) CHECK(127 * step >= amax);
                int top = 0;
                for (int c = 0; c < group; c++) {
                    double e = fabs((double)d[c0 + c] - g[c]) / bound;
                    worst = e > worst ? e : worst;
                    double k = ((double)d[c0 + c] - base) / step;
                    off_grid = fabs(k - nearbyint(k)) > off_grid ? fabs(k - nearbyint(k)) : off_grid;
                    if (bits != 8 && fabs(k - levels) < 1e-3) top = 1;
                }
                top_hits += top;
                groups++;
            }
        }
        fprintf(stderr, "  %d bits: worst error %.4f of the range bound, off-grid %.2e, top level in %d/%d groups\n",
                bits, worst, off_grid, top_hits, groups);
        CHECK_MSG(worst <= 1.002, "%d bits: error %.4f x the bound from the weights' range", bits, worst);
        CHECK_MSG(off_grid < 1e-3, "%d bits: dequantized values off the range's grid by %.3g steps", bits, off_grid);
        if (bits != 8) CHECK_MSG(top_hits == groups, "%d bits: top code level used in %d of %d groups", bits, top_hits, groups);
        ls_qmat_free(&q);
        free(w);
        free(d);
    }
}

/* Row r of q (dequantized in d) times x, in float64, with its magnitude Σ|w·x| and the
 * bound on the error of rounding x to int8 per blk-column block (absmax/127, off by at most
 * half a step): Σ|w - mid|·absmax/254, mid = the weight group's code centre for the centred
 * 4/3-bit codes, 0 for 8 bits. */
static void exact_and_bound(const ls_qmat *q, int r, const float *d, const float *x, int blk, double *exact,
                            double *mag, double *aq) {
    *exact = *mag = *aq = 0;
    for (int c0 = 0; c0 < q->cols; c0 += blk) {
        double amax = 0;
        int c1 = c0 + blk < q->cols ? c0 + blk : q->cols;
        for (int c = c0; c < c1; c++) amax = fmax(amax, fabs(x[c]));
        for (int c = c0; c < c1; c++) {
            int g = c / q->group;
            double mid = q->hmin ? ls_qmat_min(q, r, g) + (1 << (q->bits - 1)) * ls_qmat_scale(q, r, g) : 0.0;
            *exact += (double)d[c] * x[c];
            *mag += fabs(d[c] * x[c]);
            *aq += fabs(d[c] - mid) * amax / 254.0;
        }
    }
}

/* Decode kernels (fast vs scalar reference, same arithmetic): |fast - ref| <= 2e-6·Σ|w||x|
 * + 1e-7. Prefill GEMM (M <= 7 here): 8/4/3 bits bit-identical to the decode kernel, 32/16
 * bits vs the exact product, same tolerance. For 8/4/3 bits the decode
 * kernels quantize activations to int8 per 32-block: within Σ|w - mid|·absmax/254 of exact
 * (mid = the group's mid-range for the centred 4/3-bit codes, 0 for 8 bits). */
static void test_kernels(void) {
    if (!ls_quant_have_fast()) {
        fprintf(stderr, "  (no AVX2/FMA/F16C here or LLMSYS_NO_SIMD set: fast path not tested)\n");
        return;
    }
    ls_rng rng;
    ls_rng_seed(&rng, 12345);
    const int bits_list[] = {32, 16, 8, 4, 3};
    for (int iter = 0; iter < 60; iter++) {
        /* rows beyond 64 take the threaded path; any rows leave 4-row tile remainders;
         * groups 32..256 cover every pair/group arrangement incl. odd block counts */
        int bits = bits_list[iter % 5], group = 32 << ls_rng_below(&rng, 4);
        int rows = 1 + (int)ls_rng_below(&rng, 150), cols = 1 + (int)ls_rng_below(&rng, 600), M = 1 + (int)ls_rng_below(&rng, 7);
        if (iter < 5) cols = 256; /* aligned shapes too */
        float *w = malloc(sizeof(float) * rows * cols), *X = malloc(sizeof(float) * M * cols);
        float *yr = malloc(sizeof(float) * M * rows), *yf = malloc(sizeof(float) * M * rows);
        float *yg = malloc(sizeof(float) * M * rows), *y1 = malloc(sizeof(float) * rows);
        float *yt = malloc(sizeof(float) * M * rows), *d = malloc(sizeof(float) * cols);
        float *d3 = malloc(sizeof(float) * rows);
        fill(&rng, w, (size_t)rows * cols, 0.05f);
        fill(&rng, X, (size_t)M * cols, 1.0f);
        ls_qmat q;
        CHECK(ls_qmat_quantize(&q, w, rows, cols, bits, group) == LS_OK);
        ls_qmat_matmul_rows(&q, X, M, yr, 1, LS_QIMPL_REF);
        ls_qmat_matmul_rows(&q, X, M, yf, 1, LS_QIMPL_FAST);
        ls_qmat_matmul_rows(&q, X, M, yt, 2 + iter % 2, LS_QIMPL_FAST);
        ls_qmat_matmul(&q, X, M, yg, LS_QIMPL_FAST);
        int bad = 0;
        for (int r = 0; r < rows && !bad; r++) {
            ls_qmat_dequant_row(&q, r, d);
            for (int m = 0; m < M && !bad; m++) {
                /* exact product, its magnitude, and the int8-activation bound (32-blocks) */
                double mag, exact, aq;
                exact_and_bound(&q, r, d, X + (size_t)m * cols, 32, &exact, &mag, &aq);
                double tol = 2e-6 * mag + 1e-7, tol_aq = bits <= 8 ? aq * 1.001 + tol : tol;
                double ref = yr[(size_t)m * rows + r], f = yf[(size_t)m * rows + r], g = yg[(size_t)m * rows + r];
                /* M <= 8: the prefill GEMM of 8/4/3 bits is the decode kernel, bit for bit */
                int gbad = bits <= 8 ? memcmp(&g, &f, sizeof g) != 0 : fabs(g - exact) > tol;
                if (fabs(f - ref) > tol || gbad || fabs(ref - exact) > tol_aq) {
                    fprintf(stderr, "  bits %d group %d shape (%d,%d) M %d at row %d, x %d:\n", bits, group, rows, cols, M, r, m);
                    CHECK_NEAR(f, ref, tol);         /* fast decode kernel vs its scalar reference */
                    CHECK_NEAR(g, bits <= 8 ? f : exact, bits <= 8 ? 0 : tol); /* prefill GEMM */
                    CHECK_NEAR(ref, exact, tol_aq);  /* int8 activations within their rounding bound */
                    bad = 1;
                }
            }
        }
        /* batch invariance: each batched row bit-identical to a lone mat-vec, also with
         * the rows split over 2 or 3 threads (M rows at once, and one at a time) */
        for (int m = 0; m < M && !bad; m++) {
            ls_qmat_matvec_impl(&q, X + (size_t)m * cols, y1, LS_QIMPL_FAST);
            ls_qmat_matmul_rows(&q, X + (size_t)m * cols, 1, d3, 2 + m % 2, LS_QIMPL_FAST);
            if (memcmp(y1, yf + (size_t)m * rows, sizeof(float) * rows) != 0 ||
                memcmp(yt + (size_t)m * rows, yf + (size_t)m * rows, sizeof(float) * rows) != 0 ||
                memcmp(d3, y1, sizeof(float) * rows) != 0) {
                CHECK_MSG(0, "bits %d shape (%d,%d): batched/threaded row %d differs from mat-vec", bits, rows, cols, m);
                bad = 1;
            }
        }
        ls_qmat_free(&q);
        free(w), free(X), free(yr), free(yf), free(yg), free(y1), free(yt), free(d), free(d3);
    }
}

/* Every SIMD level the CPU has against the scalar reference (same tolerance as
 * test_kernels) and bit for bit against the AVX2 level, for decode (M = 1), small batches
 * and prefill-sized batches (the tile shape changes with M); levels the CPU lacks are
 * reported as skipped. LLMSYS_ISA picks lower levels only. */
static void test_levels(void) {
    char feat[128];
    fprintf(stderr, "  CPU features: %s\n", ls_cpu_features_str(ls_cpu_features(), feat, sizeof feat));
    const ls_qimpl impls[2] = {LS_QIMPL_AVX2, LS_QIMPL_AVX512};
    const ls_isa isas[3] = {LS_ISA_AVX2, LS_ISA_AVX512, LS_ISA_AMX};
    for (int k = 0; k < 3; k++)
        if (!ls_cpu_isa_supported(isas[k]))
            fprintf(stderr, "  SKIPPED: %s path (not on this CPU)\n", ls_isa_name(isas[k]));
    if (!ls_cpu_isa_supported(LS_ISA_AVX2)) return;
    ls_rng rng;
    ls_rng_seed(&rng, 777);
    const int bits_list[] = {8, 4, 3, 16, 32}, Ms[] = {1, 2, 5, 8, 9, 19};
    int tested = 0;
    for (int iter = 0; iter < 30; iter++) {
        int bits = bits_list[iter % 5], group = 32 << ls_rng_below(&rng, 4), M = Ms[iter % 6];
        int rows = 1 + (int)ls_rng_below(&rng, 100), cols = 1 + (int)ls_rng_below(&rng, 700);
        float *w = malloc(sizeof(float) * rows * cols), *X = malloc(sizeof(float) * M * cols);
        float *yr = malloc(sizeof(float) * M * rows), *y2 = malloc(sizeof(float) * M * rows);
        float *y5 = malloc(sizeof(float) * M * rows);
        fill(&rng, w, (size_t)rows * cols, 0.05f);
        fill(&rng, X, (size_t)M * cols, 1.0f);
        ls_qmat q;
        CHECK(ls_qmat_quantize(&q, w, rows, cols, bits, group) == LS_OK);
        ls_qmat_matmul_rows(&q, X, M, yr, 1, LS_QIMPL_REF);
        ls_qmat_matmul_rows(&q, X, M, y2, 1, impls[0]);
        for (int i = 0; i < M * rows; i++) {
            double mag = 0;
            float *d = malloc(sizeof(float) * cols);
            ls_qmat_dequant_row(&q, i % rows, d);
            for (int c = 0; c < cols; c++) mag += fabs(d[c] * X[(size_t)(i / rows) * cols + c]);
            free(d);
            if (fabs(y2[i] - yr[i]) > 2e-6 * mag + 1e-7) {
                fprintf(stderr, "  avx2: bits %d group %d (%d,%d) M %d out %d\n", bits, group, rows, cols, M, i);
                CHECK_NEAR(y2[i], yr[i], 2e-6 * mag + 1e-7);
                break;
            }
        }
        if (ls_cpu_isa_supported(LS_ISA_AVX512)) {
            ls_qmat_matmul_rows(&q, X, M, y5, 1 + iter % 2, impls[1]);
            CHECK_MSG(memcmp(y2, y5, sizeof(float) * M * rows) == 0,
                      "avx512 differs from avx2: bits %d group %d (%d,%d) M %d", bits, group, rows, cols, M);
            tested++;
        }
        ls_qmat_free(&q);
        free(w), free(X), free(yr), free(y2), free(y5);
    }
    if (tested) fprintf(stderr, "  avx512 path: %d cases bit-identical to avx2\n", tested);
    /* LLMSYS_ISA forces a lower level, never a higher one (the caller's value restored) */
    char saved[32] = "";
    if (getenv("LLMSYS_ISA")) snprintf(saved, sizeof saved, "%s", getenv("LLMSYS_ISA"));
    setenv("LLMSYS_ISA", "scalar", 1);
    ls_quant_reselect();
    CHECK(ls_cpu_isa() == LS_ISA_SCALAR && !ls_quant_have_fast());
    setenv("LLMSYS_ISA", "avx2", 1);
    CHECK(ls_cpu_isa() == LS_ISA_AVX2);
    setenv("LLMSYS_ISA", "avx512", 1);
    CHECK(ls_cpu_isa() == (ls_cpu_isa_supported(LS_ISA_AVX512) ? LS_ISA_AVX512 : LS_ISA_AVX2));
    setenv("LLMSYS_ISA", "amx", 1);
    CHECK(ls_cpu_isa() == (ls_cpu_isa_supported(LS_ISA_AMX)      ? LS_ISA_AMX
                           : ls_cpu_isa_supported(LS_ISA_AVX512) ? LS_ISA_AVX512
                                                                 : LS_ISA_AVX2));
    if (saved[0]) setenv("LLMSYS_ISA", saved, 1);
    else unsetenv("LLMSYS_ISA");
    ls_quant_reselect();
}

/* Float64 reference of the integer prefill GEMM's arithmetic for one output: x rounded
 * to int8 per weight group (absmax/127, round to nearest even as the kernels' float
 * multiply + convert), then per group s·xs·Σ(q - ctr)·x̂ + (m + ctr·s)·Σx (ctr = the code
 * centre of 4/3 bits, 0 for 8). Codes are recovered from the dequantized row d. */
static double prefill_ref(const ls_qmat *q, int r, const float *d, const float *x) {
    int ctr = q->bits == 8 ? 0 : 1 << (q->bits - 1);
    double y = 0;
    for (int g = 0; g < q->ngroups; g++) {
        int c0 = g * q->group, c1 = c0 + q->group < q->cols ? c0 + q->group : q->cols;
        float amax = 0.0f;
        for (int c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(x[c]));
        float inv = amax > 0 ? 127.0f / amax : 0.0f;
        double s = ls_qmat_scale(q, r, g), m = ls_qmat_min(q, r, g), sx = 0;
        long long iq = 0;
        for (int c = c0; c < c1; c++) {
            long v = lrintf(x[c] * inv), code = s > 0 ? lround((d[c] - m) / s) : ctr;
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            iq += (code - ctr) * v;
            sx += x[c];
        }
        y += s * (amax / 127.0f) * (double)iq + (m + ctr * s) * sx;
    }
    return y;
}

/* Prefill GEMM for 8/4/3 bits at every level the CPU has (levels it lacks: SKIPPED), M > 8
 * (integer GEMM) and M <= 8 (decode kernels): the integer GEMM against prefill_ref (same
 * rounding, float64 sums) within 2e-6·Σ|w||x|, and against the exact product of the
 * dequantized weights within Σ_g Σ|w - mid_g|·absmax_g(x)/254 (mid_g = the group's code
 * centre) plus that float rounding; LS_QIMPL_DEQUANT within the float rounding alone. */
static void test_prefill(void) {
    const ls_qimpl impls[3] = {LS_QIMPL_AVX2, LS_QIMPL_AVX512, LS_QIMPL_AMX};
    const ls_isa isas[3] = {LS_ISA_AVX2, LS_ISA_AVX512, LS_ISA_AMX};
    ls_rng rng;
    ls_rng_seed(&rng, 4242);
    const int bits_list[] = {8, 4, 3}, Ms[] = {9, 16, 33, 70, 3};
    double worst[3] = {0, 0, 0};
    int same = 0, tiles = 0;
    for (int lv = 0; lv < 3; lv++) {
        if (!ls_cpu_isa_supported(isas[lv])) {
            fprintf(stderr, "  SKIPPED: %s integer prefill (not on this CPU)\n", ls_isa_name(isas[lv]));
            continue;
        }
        for (int iter = 0; iter < 30; iter++) {
            int bits = bits_list[iter % 3], group = 32 << ls_rng_below(&rng, 4), M = Ms[iter % 5];
            int rows = 1 + (int)ls_rng_below(&rng, 70), cols = 1 + (int)ls_rng_below(&rng, 600);
            float *w = malloc(sizeof(float) * rows * cols), *X = malloc(sizeof(float) * M * cols);
            float *y = malloc(sizeof(float) * M * rows), *yd = malloc(sizeof(float) * M * rows);
            float *d = malloc(sizeof(float) * cols);
            fill(&rng, w, (size_t)rows * cols, 0.05f);
            fill(&rng, X, (size_t)M * cols, 1.0f);
            ls_qmat q;
            CHECK(ls_qmat_quantize(&q, w, rows, cols, bits, group) == LS_OK);
            ls_qmat_matmul(&q, X, M, y, impls[lv]);
            if (isas[lv] == LS_ISA_AVX512) {
                /* both AVX-512 tiles: the same sums and fp32 operations, bit for bit (y, the
                 * 6x2 tile's now, is checked against the references below) */
                setenv("LLMSYS_PF_TILE", "6x2", 1);
                ls_quant_reselect();
                ls_qmat_matmul(&q, X, M, y, LS_QIMPL_AVX512);
                setenv("LLMSYS_PF_TILE", "32x2", 1);
                ls_quant_reselect();
                ls_qmat_matmul(&q, X, M, yd, LS_QIMPL_AVX512);
                unsetenv("LLMSYS_PF_TILE");
                ls_quant_reselect();
                CHECK_MSG(memcmp(y, yd, sizeof(float) * M * rows) == 0,
                          "avx512 32x2 tile differs from 6x2: bits %d group %d (%d,%d) M %d", bits, group, rows, cols,
                          M);
                tiles++;
            }
            if (isas[lv] == LS_ISA_AMX) {
                /* the same integer sums and fp32 operations as the avx512 tile, in the same order */
                ls_qmat_matmul(&q, X, M, yd, LS_QIMPL_AVX512);
                CHECK_MSG(memcmp(y, yd, sizeof(float) * M * rows) == 0,
                          "amx prefill differs from avx512: bits %d group %d (%d,%d) M %d", bits, group, rows, cols, M);
                same++;
            }
            ls_qmat_matmul(&q, X, M, yd, LS_QIMPL_DEQUANT);
            int bad = 0;
            for (int r = 0; r < rows && !bad; r++) {
                ls_qmat_dequant_row(&q, r, d);
                for (int m = 0; m < M && !bad; m++) {
                    const float *x = X + (size_t)m * cols;
                    double exact, mag, aq; /* activations rounded per weight group (32-blocks for M <= 8) */
                    exact_and_bound(&q, r, d, x, M > 8 ? group : 32, &exact, &mag, &aq);
                    double tf = 2e-6 * mag + 1e-6, tol = aq * 1.001 + tf, v = y[(size_t)m * rows + r];
                    double e = fabs(v - exact), ref = M > 8 ? prefill_ref(&q, r, d, x) : v;
                    worst[lv] = e / tol > worst[lv] ? e / tol : worst[lv];
                    if (e > tol || fabs(v - ref) > tf || fabs(yd[(size_t)m * rows + r] - exact) > tf) {
                        fprintf(stderr, "  %s: bits %d group %d (%d,%d) M %d row %d token %d:\n", ls_isa_name(isas[lv]),
                                bits, group, rows, cols, M, r, m);
                        CHECK_NEAR(v, exact, tol);
                        CHECK_NEAR(v, ref, tf);
                        CHECK_NEAR(yd[(size_t)m * rows + r], exact, tf);
                        bad = 1;
                    }
                }
            }
            ls_qmat_free(&q);
            free(w), free(X), free(y), free(yd), free(d);
        }
        fprintf(stderr, "  prefill (%s): worst error %.3f of the int8-activation bound\n", ls_isa_name(isas[lv]),
                worst[lv]);
    }
    if (same) fprintf(stderr, "  amx prefill: %d cases bit-identical to avx512\n", same);
    if (tiles) fprintf(stderr, "  avx512 prefill: %d cases, 6x2 and 32x2 tiles bit-identical\n", tiles);
}

/* The AVX-512 prefill tile: 32x2 on every CPU unless LLMSYS_PF_TILE forces either, other
 * values are ignored, read by ls_quant_reselect only (the caller's value
 * restored). */
static void test_prefill_tile(void) {
    char saved[64] = "";
    if (getenv("LLMSYS_PF_TILE")) snprintf(saved, sizeof saved, "%s", getenv("LLMSYS_PF_TILE"));
    unsetenv("LLMSYS_PF_TILE");
    ls_quant_reselect();
    const char *def = "32x2", *other = "6x2";
    CHECK(strcmp(ls_quant_prefill_tile(), def) == 0);
    fprintf(stderr, "  default tile %s\n", ls_quant_prefill_tile());
    setenv("LLMSYS_PF_TILE", other, 1); /* not read until ls_quant_reselect */
    CHECK(strcmp(ls_quant_prefill_tile(), def) == 0);
    ls_quant_reselect();
    CHECK(strcmp(ls_quant_prefill_tile(), other) == 0);
    setenv("LLMSYS_PF_TILE", "6x2", 1);
    ls_quant_reselect();
    CHECK(strcmp(ls_quant_prefill_tile(), "6x2") == 0);
    setenv("LLMSYS_PF_TILE", "32x2", 1);
    ls_quant_reselect();
    CHECK(strcmp(ls_quant_prefill_tile(), "32x2") == 0);
    setenv("LLMSYS_PF_TILE", "8x8", 1);
    ls_quant_reselect();
    CHECK(strcmp(ls_quant_prefill_tile(), def) == 0);
    if (saved[0])
        setenv("LLMSYS_PF_TILE", saved, 1);
    else
        unsetenv("LLMSYS_PF_TILE");
    ls_quant_reselect();
}

/* LLMSYS_NO_SIMD=1 sends LS_QIMPL_AUTO to the scalar reference once ls_quant_reselect reads
 * it, not before: a matmul never reads the environment. */
static void test_env_read_once(void) {
    if (!ls_quant_have_fast()) {
        fprintf(stderr, "  (no SIMD level in use: nothing to switch from)\n");
        return;
    }
    ls_rng rng;
    ls_rng_seed(&rng, 99);
    enum { ROWS = 16, COLS = 300 };
    float *w = malloc(sizeof(float) * ROWS * COLS), x[COLS], yref[ROWS], yfast[ROWS], y[ROWS];
    fill(&rng, w, (size_t)ROWS * COLS, 0.05f);
    fill(&rng, x, COLS, 1.0f);
    ls_qmat q;
    CHECK(ls_qmat_quantize(&q, w, ROWS, COLS, 32, 32) == LS_OK);
    ls_qmat_matvec_impl(&q, x, yref, LS_QIMPL_REF);
    ls_qmat_matvec(&q, x, yfast);
    CHECK(memcmp(yref, yfast, sizeof yref) != 0); /* float vs double sums: the two paths tell apart */
    char saved[32] = "";
    if (getenv("LLMSYS_NO_SIMD")) snprintf(saved, sizeof saved, "%s", getenv("LLMSYS_NO_SIMD"));
    setenv("LLMSYS_NO_SIMD", "1", 1);
    ls_qmat_matvec(&q, x, y);
    CHECK(memcmp(y, yfast, sizeof y) == 0 && ls_quant_have_fast());
    ls_quant_reselect();
    ls_qmat_matvec(&q, x, y);
    CHECK(memcmp(y, yref, sizeof y) == 0 && !ls_quant_have_fast());
    if (saved[0])
        setenv("LLMSYS_NO_SIMD", saved, 1);
    else
        unsetenv("LLMSYS_NO_SIMD");
    ls_quant_reselect();
    CHECK(ls_quant_have_fast());
    ls_qmat_free(&q);
    free(w);
}

static void test_bad_args(void) {
    ls_qmat q;
    float w[4] = {1, 2, 3, 4};
    CHECK(ls_qmat_quantize(&q, w, 2, 2, 5, 64) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "bit width 5") != NULL);
    CHECK(ls_qmat_quantize(&q, w, 2, 2, 4, 48) == LS_EINVAL);
    CHECK(ls_qmat_quantize(&q, w, 0, 2, 4, 64) == LS_EINVAL);
    /* constant groups quantize exactly */
    float c[64];
    for (int i = 0; i < 64; i++) c[i] = 0.25f;
    CHECK(ls_qmat_quantize(&q, c, 1, 64, 3, 64) == LS_OK);
    float d[64];
    ls_qmat_dequant_row(&q, 0, d);
    CHECK_NEAR(d[13], 0.25, 0);
    ls_qmat_free(&q);
}

int main(void) {
    RUN(test_f16);
    RUN(test_sizes);
    RUN(test_dequant_error);
    RUN(test_range_bound);
    RUN(test_kernels);
    RUN(test_levels);
    RUN(test_prefill);
    RUN(test_prefill_tile);
    RUN(test_env_read_once);
    RUN(test_bad_args);
    return TEST_RESULT();
}
