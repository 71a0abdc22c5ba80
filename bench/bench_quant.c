/* bench_quant.c - quantized kernels against the machine's limits, all measured in one run:
 * STREAM-style read and copy bandwidth, then for every weight format the mat-vec (decode)
 * GB/s of weights streamed and tokens/s on a matrix larger than the last-level cache, and
 * the prefill GEMM rate against OpenBLAS sgemm. Prints a table, writes JSON (--out). */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/quant.h"

#include <time.h>

/* Timer: with one thread, this thread's CPU time (the development machine is shared by
 * several busy processes; CPU time leaves out the slices the scheduler gives to others,
 * while memory stalls still count); with several threads, wall time. */
static int use_cpu_clock = 1;
static double now(void) {
    if (!use_cpu_clock) return ls_now();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double best_of(double *t, int n) {
    double m = t[0];
    for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
    return m;
}

/* Sum of n floats with eight independent accumulators so the loop is limited by memory,
 * not by the latency of one dependent add chain (no -ffast-math needed to vectorize). */
__attribute__((target("avx2"))) static float sum_avx2(const float *a, size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(a + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    float s = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    for (; i < n; i++) s += a[i];
    return s;
}

static float sum_scalar(const float *a, size_t n) {
    float s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k];
    for (; i < n; i++) s[0] += a[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* Read bandwidth: sum of a large array; copy bandwidth: b = a (bytes read + written). */
static void bandwidth(size_t bytes, int threads, int reps, double *read_gbs, double *copy_gbs) {
    size_t n = bytes / sizeof(float);
    float *a = ls_aligned_alloc(64, n * sizeof(float)), *b = ls_aligned_alloc(64, n * sizeof(float));
    LS_ASSERT(a && b);
#pragma omp parallel for num_threads(threads)
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 1023), b[i] = 0;
    double tr[16], tc[16], sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now(), s = 0;
        int fast = ls_quant_have_fast();
#pragma omp parallel for num_threads(threads) reduction(+ : s)
        for (int th = 0; th < threads; th++) {
            size_t lo = n * (size_t)th / (size_t)threads, hi = n * (size_t)(th + 1) / (size_t)threads;
            lo &= ~(size_t)7;
            if (th == threads - 1) hi = n;
            else hi &= ~(size_t)7;
            s += fast ? sum_avx2(a + lo, hi - lo) : sum_scalar(a + lo, hi - lo);
        }
        tr[r] = now() - t0;
        sink += s;
        t0 = now();
#pragma omp parallel for num_threads(threads)
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        tc[r] = now() - t0;
    }
    *read_gbs = (double)bytes / best_of(tr, reps) / 1e9;
    *copy_gbs = 2.0 * (double)bytes / best_of(tc, reps) / 1e9;
    if (sink == 42.0) printf(" ");
    ls_aligned_free(a);
    ls_aligned_free(b);
}

int main(int argc, char **argv) {
    const char *out = NULL;
    int rows = 16384, cols = 8192, threads = 1, reps = 5, M = 64, gk = 2048, gn = 2048;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) rows = 4096, cols = 4096, reps = 3, gk = gn = 512;
        else {
            fprintf(stderr,
                    "usage: bench_quant [--out FILE] [--rows R --cols C] [--threads N] [--reps N] [--quick]\n"
                    "  decode mat-vec on an R x C matrix (default 16384 x 8192 = 512 MiB in fp32)\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 16 || threads < 1 || rows < 64 || cols < 64) {
        fprintf(stderr, "bench_quant: reps in [1,16], threads >= 1, rows/cols >= 64\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    use_cpu_clock = threads == 1;
    printf("bench_quant: kernels %s, %d thread(s), timed by %s\n", ls_quant_impl_name(), threads,
           use_cpu_clock ? "thread CPU time" : "wall clock");
    double rd, cp;
    bandwidth(512u << 20, threads, reps, &rd, &cp);
    printf("memory bandwidth (512 MiB arrays): read %.2f GB/s, copy %.2f GB/s\n\n", rd, cp);

    size_t nw = (size_t)rows * cols;
    float *w = malloc(nw * sizeof(float)), *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows);
    LS_ASSERT(w && x && y);
    ls_rng rng;
    ls_rng_seed(&rng, 1);
    for (size_t i = 0; i < nw; i++) w[i] = 0.02f * ls_rng_normal(&rng);
    for (int i = 0; i < cols; i++) x[i] = ls_rng_normal(&rng);

    /* prefill GEMM operands (weights gk x gn, M tokens) and the sgemm baseline */
    float *gw = malloc(sizeof(float) * (size_t)gn * gk), *gx = malloc(sizeof(float) * (size_t)M * gk);
    float *gy = malloc(sizeof(float) * (size_t)M * gn);
    LS_ASSERT(gw && gx && gy);
    for (size_t i = 0; i < (size_t)gn * gk; i++) gw[i] = 0.02f * ls_rng_normal(&rng);
    for (size_t i = 0; i < (size_t)M * gk; i++) gx[i] = ls_rng_normal(&rng);
    double tg[16];
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, gn, gk, 1.0f, gx, gk, gw, gk, 0.0f, gy, gn);
        tg[r] = now() - t0;
    }
    double sgemm_gflops = 2.0 * M * gn * gk / best_of(tg, reps) / 1e9;

    static const int fmts[5] = {32, 16, 8, 4, 3};
    double gbs[5], tps[5], gf[5], mib[5];
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "formats");
    printf("decode mat-vec %d x %d, prefill GEMM %d tokens x (%d x %d); sgemm %.1f GFLOP/s\n", rows, cols, M, gn, gk,
           sgemm_gflops);
    printf("%-6s %10s %10s %10s %10s %12s %12s\n", "bits", "MiB", "GB/s", "% read bw", "tokens/s", "GEMM GFLOP/s",
           "% of sgemm");
    for (int f = 0; f < 5; f++) {
        ls_qmat q, gq;
        if (ls_qmat_quantize(&q, w, rows, cols, fmts[f], 64) != LS_OK || ls_qmat_quantize(&gq, gw, gn, gk, fmts[f], 64) != LS_OK) {
            fprintf(stderr, "bench_quant: %s\n", ls_errmsg());
            return 1;
        }
        double t[16];
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            ls_qmat_matmul_rows(&q, x, 1, y, threads, LS_QIMPL_AUTO);
            t[r] = now() - t0;
        }
        double tb = best_of(t, reps);
        mib[f] = ls_qmat_bytes(&q) / 1048576.0;
        gbs[f] = ls_qmat_bytes(&q) / tb / 1e9;
        tps[f] = 1.0 / tb;
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            ls_qmat_matmul(&gq, gx, M, gy, LS_QIMPL_AUTO);
            t[r] = now() - t0;
        }
        gf[f] = 2.0 * M * gn * gk / best_of(t, reps) / 1e9;
        printf("%-6d %10.1f %10.2f %9.0f%% %10.1f %12.1f %11.0f%%\n", fmts[f], mib[f], gbs[f], 100 * gbs[f] / rd, tps[f],
               gf[f], 100 * gf[f] / sgemm_gflops);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "bits", fmts[f]);
        cJSON_AddNumberToObject(o, "weight_mib", mib[f]);
        cJSON_AddNumberToObject(o, "decode_gb_s", gbs[f]);
        cJSON_AddNumberToObject(o, "decode_frac_read_bw", gbs[f] / rd);
        cJSON_AddNumberToObject(o, "decode_tokens_s", tps[f]);
        cJSON_AddNumberToObject(o, "prefill_gflops", gf[f]);
        cJSON_AddNumberToObject(o, "prefill_frac_sgemm", gf[f] / sgemm_gflops);
        cJSON_AddItemToArray(arr, o);
        ls_qmat_free(&q);
        ls_qmat_free(&gq);
    }
    double r4 = tps[3] / tps[0];
    printf("\ngoals: int8 decode %.0f%% and int4 decode %.0f%% of read bandwidth (goal >= 80%%); "
           "4-bit decode %.2fx fp32 tokens/s (goal >= 3x)\n",
           100 * gbs[2] / rd, 100 * gbs[3] / rd, r4);
    cJSON_AddStringToObject(j, "kernels", ls_quant_impl_name());
    cJSON_AddNumberToObject(j, "threads", threads);
    cJSON_AddStringToObject(j, "timer", use_cpu_clock ? "thread_cputime" : "wall");
    cJSON_AddNumberToObject(j, "rows", rows);
    cJSON_AddNumberToObject(j, "cols", cols);
    cJSON_AddNumberToObject(j, "read_gb_s", rd);
    cJSON_AddNumberToObject(j, "copy_gb_s", cp);
    cJSON_AddNumberToObject(j, "sgemm_gflops", sgemm_gflops);
    cJSON_AddNumberToObject(j, "int4_vs_fp32_decode_tokens_s", r4);
    int rc = 0;
    if (out && ls_json_write_file(out, j) != LS_OK) {
        fprintf(stderr, "bench_quant: %s\n", ls_errmsg());
        rc = 1;
    }
    cJSON_Delete(j);
    free(w), free(x), free(y), free(gw), free(gx), free(gy);
    return rc;
}
