/* bench_quant.c - quantized kernels against the machine's limits, all measured in one run:
 * STREAM-style read and copy bandwidth, then for every weight format the mat-vec (decode)
 * GB/s of weights streamed and tokens/s on a matrix larger than the last-level cache, at
 * one thread and at all threads, each against the read bandwidth measured with the same
 * thread count in the same round (median over rounds: the machine is shared), and the
 * prefill GEMM rate against OpenBLAS sgemm. Prints a table, writes JSON (--out). */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/quant.h"

#include <time.h>

/* Timer. One thread: this thread's CPU time (the development machine is shared by
 * several busy processes; CPU time leaves out the slices the scheduler gives to others,
 * while memory stalls still count). Several threads: wall clock (process CPU time would
 * count threads spinning while a sibling waits to be scheduled). Each figure is the best
 * of `reps` calls; bandwidth and kernels are timed the same way, so ratios are like for
 * like. */
static int timer_threads = 1;
static double now(void) {
    if (timer_threads > 1) return ls_now();
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

/* Read bandwidth with `threads` threads: best of reps sums of the array a (n floats),
 * each thread summing its contiguous share (as the kernels split rows). */
static double read_bw(const float *a, size_t n, int threads, int reps) {
    double t[16] = {0}, sink = 0;
    int fast = ls_quant_have_fast();
    for (int r = 0; r < reps; r++) {
        double t0 = now(), s = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : s)
        for (int th = 0; th < threads; th++) {
            size_t lo = n * (size_t)th / (size_t)threads, hi = n * (size_t)(th + 1) / (size_t)threads;
            lo &= ~(size_t)7;
            if (th == threads - 1) hi = n;
            else hi &= ~(size_t)7;
            s += fast ? sum_avx2(a + lo, hi - lo) : sum_scalar(a + lo, hi - lo);
        }
        t[r] = now() - t0;
        sink += s;
    }
    if (sink == 42.0) printf(" ");
    return (double)n * sizeof(float) / best_of(t, reps) / 1e9;
}

/* Copy bandwidth: b = a, bytes read + written. */
static double copy_bw(const float *a, float *b, size_t n, int threads, int reps) {
    double t[16] = {0};
    for (int r = 0; r < reps; r++) {
        double t0 = now();
#pragma omp parallel for num_threads(threads)
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        t[r] = now() - t0;
    }
    return 2.0 * (double)n * sizeof(float) / best_of(t, reps) / 1e9;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double t[64];
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_dbl);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

enum { NFMT = 5, MAXROUNDS = 64 };
static const int fmts[NFMT] = {32, 16, 8, 4, 3};

int main(int argc, char **argv) {
    const char *out = NULL;
    int rows = 16384, cols = 8192, threads = omp_get_num_procs(), reps = 3, rounds = 5, M = 64, gk = 2048, gn = 2048;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) rows = 4096, cols = 4096, reps = 2, rounds = 3, gk = gn = 512;
        else {
            fprintf(stderr,
                    "usage: bench_quant [--out FILE] [--rows R --cols C] [--threads N] [--reps N] [--rounds N] [--quick]\n"
                    "  decode mat-vec on an R x C matrix (default 16384 x 8192 = 512 MiB in fp32), at 1 thread and\n"
                    "  at N threads (default: all processors); each of `rounds` rounds measures read bandwidth\n"
                    "  before and after the kernels at each thread count (best of `reps` calls each); medians\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 16 || rounds < 1 || rounds > MAXROUNDS || threads < 1 || rows < 64 || cols < 64) {
        fprintf(stderr, "bench_quant: reps in [1,16], rounds in [1,%d], threads >= 1, rows/cols >= 64\n", MAXROUNDS);
        return 2;
    }
    int tcs[2] = {1, threads}, ntc = threads > 1 ? 2 : 1;
    printf("bench_quant: kernels %s, 1 and %d thread(s); 1 thread timed by its CPU time, more by wall clock;\n"
           "%d rounds, each: read bandwidth (512 MiB), every format's decode (calls streaming ~512 MiB), read\n"
           "bandwidth again; best of %d timings each; medians over rounds\n",
           ls_quant_impl_name(), threads, rounds, reps);

    size_t nw = (size_t)rows * cols, nbw = (512u << 20) / sizeof(float);
    float *w = malloc(nw * sizeof(float)), *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows);
    float *ba = ls_aligned_alloc(64, nbw * sizeof(float)), *bb = ls_aligned_alloc(64, nbw * sizeof(float));
    LS_ASSERT(w && x && y && ba && bb);
    for (size_t i = 0; i < nbw; i++) ba[i] = (float)(i & 1023), bb[i] = 0;
    ls_rng rng;
    ls_rng_seed(&rng, 1);
    for (size_t i = 0; i < nw; i++) w[i] = 0.02f * ls_rng_normal(&rng);
    for (int i = 0; i < cols; i++) x[i] = ls_rng_normal(&rng);
    ls_qmat q[NFMT];
    for (int f = 0; f < NFMT; f++)
        if (ls_qmat_quantize(&q[f], w, rows, cols, fmts[f], 64) != LS_OK) {
            fprintf(stderr, "bench_quant: %s\n", ls_errmsg());
            return 1;
        }
    free(w);

    /* decode: rounds × thread counts, bandwidth measured around the kernels */
    double rd[2][MAXROUNDS], gbs[2][NFMT][MAXROUNDS], frac[2][NFMT][MAXROUNDS], r4[2][MAXROUNDS], cp[2];
    for (int k = 0; k < ntc; k++) {
        timer_threads = tcs[k];
        cp[k] = copy_bw(ba, bb, nbw, tcs[k], reps);
    }
    for (int rd_i = 0; rd_i < rounds; rd_i++)
        for (int k = 0; k < ntc; k++) {
            int tc = tcs[k];
            timer_threads = tc;
            openblas_set_num_threads(1);
            double bw0 = read_bw(ba, nbw, tc, reps);
            for (int f = 0; f < NFMT; f++) {
                /* as many back-to-back mat-vecs as stream about as many bytes as one read
                 * pass: a short call is hurt more by waiting for a time slice (threads) */
                size_t qb = ls_qmat_bytes(&q[f]);
                int ncall = (int)((nbw * sizeof(float) + qb / 2) / qb);
                if (ncall < 1) ncall = 1;
                double t[16] = {0};
                for (int r = 0; r < reps; r++) {
                    double t0 = now();
                    for (int c = 0; c < ncall; c++) ls_qmat_matmul_rows(&q[f], x, 1, y, tc, LS_QIMPL_AUTO);
                    t[r] = (now() - t0) / ncall;
                }
                gbs[k][f][rd_i] = qb / best_of(t, reps) / 1e9;
            }
            double bw1 = read_bw(ba, nbw, tc, reps);
            /* the higher of the two readings: the ratio is not flattered by a slow reading */
            rd[k][rd_i] = bw0 > bw1 ? bw0 : bw1;
            for (int f = 0; f < NFMT; f++) frac[k][f][rd_i] = gbs[k][f][rd_i] / rd[k][rd_i];
            r4[k][rd_i] = gbs[k][3][rd_i] / ls_qmat_bytes(&q[3]) * ls_qmat_bytes(&q[0]) / gbs[k][0][rd_i];
        }
    ls_aligned_free(ba);
    ls_aligned_free(bb);

    /* prefill GEMM operands (weights gk x gn, M tokens) and the sgemm baseline, 1 thread */
    timer_threads = 1;
    openblas_set_num_threads(1);
    float *gw = malloc(sizeof(float) * (size_t)gn * gk), *gx = malloc(sizeof(float) * (size_t)M * gk);
    float *gy = malloc(sizeof(float) * (size_t)M * gn);
    LS_ASSERT(gw && gx && gy);
    for (size_t i = 0; i < (size_t)gn * gk; i++) gw[i] = 0.02f * ls_rng_normal(&rng);
    for (size_t i = 0; i < (size_t)M * gk; i++) gx[i] = ls_rng_normal(&rng);
    double tg[16] = {0};
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, gn, gk, 1.0f, gx, gk, gw, gk, 0.0f, gy, gn);
        tg[r] = now() - t0;
    }
    double sgemm_gflops = 2.0 * M * gn * gk / best_of(tg, reps) / 1e9, gf[NFMT];
    for (int f = 0; f < NFMT; f++) {
        ls_qmat gq;
        if (ls_qmat_quantize(&gq, gw, gn, gk, fmts[f], 64) != LS_OK) {
            fprintf(stderr, "bench_quant: %s\n", ls_errmsg());
            return 1;
        }
        double t[16] = {0};
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            ls_qmat_matmul(&gq, gx, M, gy, LS_QIMPL_AUTO);
            t[r] = now() - t0;
        }
        gf[f] = 2.0 * M * gn * gk / best_of(t, reps) / 1e9;
        ls_qmat_free(&gq);
    }

    cJSON *j = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(j, "decode");
    for (int k = 0; k < ntc; k++) {
        double bw = median(rd[k], rounds);
        printf("\ndecode mat-vec %d x %d, %d thread(s): read bandwidth %.2f GB/s (median), copy %.2f GB/s\n", rows, cols,
               tcs[k], bw, cp[k]);
        double lo = rd[k][0], hi = rd[k][0];
        for (int i = 1; i < rounds; i++) lo = rd[k][i] < lo ? rd[k][i] : lo, hi = rd[k][i] > hi ? rd[k][i] : hi;
        printf("  (read bandwidth over the rounds: %.1f-%.1f GB/s)\n", lo, hi);
        printf("  %-6s %10s %10s %16s %10s %10s\n", "bits", "MiB", "GB/s", "% of read bw", "(min-max)", "tokens/s");
        cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "formats");
        cJSON_AddNumberToObject(o, "threads", tcs[k]);
        cJSON_AddStringToObject(o, "timer", tcs[k] == 1 ? "thread_cputime" : "wall");
        cJSON_AddNumberToObject(o, "read_gb_s", bw);
        cJSON_AddNumberToObject(o, "read_gb_s_min", lo);
        cJSON_AddNumberToObject(o, "read_gb_s_max", hi);
        cJSON_AddNumberToObject(o, "copy_gb_s", cp[k]);
        for (int f = 0; f < NFMT; f++) {
            double g = median(gbs[k][f], rounds), fr = median(frac[k][f], rounds), flo = frac[k][f][0], fhi = flo;
            for (int i = 1; i < rounds; i++)
                flo = frac[k][f][i] < flo ? frac[k][f][i] : flo, fhi = frac[k][f][i] > fhi ? frac[k][f][i] : fhi;
            double mib = ls_qmat_bytes(&q[f]) / 1048576.0, tps = g * 1e9 / ls_qmat_bytes(&q[f]);
            printf("  %-6d %10.1f %10.2f %15.0f%% %4.0f-%3.0f%% %10.1f\n", fmts[f], mib, g, 100 * fr, 100 * flo, 100 * fhi, tps);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "bits", fmts[f]);
            cJSON_AddNumberToObject(e, "weight_mib", mib);
            cJSON_AddNumberToObject(e, "decode_gb_s", g);
            cJSON_AddNumberToObject(e, "decode_tokens_s", tps);
            cJSON_AddNumberToObject(e, "decode_frac_read_bw", fr);
            cJSON_AddNumberToObject(e, "decode_frac_read_bw_min", flo);
            cJSON_AddNumberToObject(e, "decode_frac_read_bw_max", fhi);
            cJSON_AddItemToArray(arr, e);
        }
        double m4 = median(r4[k], rounds);
        printf("  goals (%d thread(s)): int8 decode %.0f%% and int4 decode %.0f%% of read bandwidth (goal >= 80%%); "
               "4-bit decode %.2fx fp32 tokens/s (goal >= 3x)\n",
               tcs[k], 100 * median(frac[k][2], rounds), 100 * median(frac[k][3], rounds), m4);
        cJSON_AddNumberToObject(o, "int4_vs_fp32_decode_tokens_s", m4);
        cJSON_AddItemToArray(runs, o);
    }
    printf("\nprefill GEMM %d tokens x (%d x %d), 1 thread; OpenBLAS sgemm %.1f GFLOP/s\n", M, gn, gk, sgemm_gflops);
    printf("  %-6s %12s %12s\n", "bits", "GFLOP/s", "% of sgemm");
    cJSON *pf = cJSON_AddArrayToObject(j, "prefill");
    for (int f = 0; f < NFMT; f++) {
        printf("  %-6d %12.1f %11.0f%%\n", fmts[f], gf[f], 100 * gf[f] / sgemm_gflops);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "bits", fmts[f]);
        cJSON_AddNumberToObject(e, "prefill_gflops", gf[f]);
        cJSON_AddNumberToObject(e, "prefill_frac_sgemm", gf[f] / sgemm_gflops);
        cJSON_AddItemToArray(pf, e);
    }
    cJSON_AddStringToObject(j, "kernels", ls_quant_impl_name());
    cJSON_AddNumberToObject(j, "rows", rows);
    cJSON_AddNumberToObject(j, "cols", cols);
    cJSON_AddNumberToObject(j, "rounds", rounds);
    cJSON_AddNumberToObject(j, "reps", reps);
    cJSON_AddNumberToObject(j, "sgemm_gflops", sgemm_gflops);
    int rc = 0;
    if (out && ls_json_write_file(out, j) != LS_OK) {
        fprintf(stderr, "bench_quant: %s\n", ls_errmsg());
        rc = 1;
    }
    cJSON_Delete(j);
    for (int f = 0; f < NFMT; f++) ls_qmat_free(&q[f]);
    free(x), free(y), free(gw), free(gx), free(gy);
    return rc;
}
