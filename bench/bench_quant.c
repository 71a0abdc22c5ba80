/* bench_quant.c - quantized kernels against the machine's limits, all measured in one run:
 * STREAM-style read and copy bandwidth, then for every weight format the mat-vec (decode)
 * GB/s of weights streamed and tokens/s on a matrix larger than the last-level cache, at
 * one thread and at all threads, each against the read bandwidth measured with the same
 * thread count in the same round (median over rounds: the machine is shared); when a ggml
 * build is given (--ggml DIR / LLMSYS_GGML_DIR), int8 and 4-bit decode against ggml's
 * q8_0 and repacked q4_0 in the same process, sides interleaved; and the prefill GEMM
 * (the level's integer GEMM: AMX-INT8, AVX-512 VNNI or AVX2; on an AMX machine the VNNI GEMM
 * too, on a line of its own) against dequantize-then-sgemm and OpenBLAS sgemm at a 2048-wide
 * shape and the "small" model's shapes, and batches of 1-8 rows (decode kernels) against
 * dequantize-then-sgemm, sides interleaved. Prints tables, writes JSON (--out); --only
 * decode|prefill|batch runs one part. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
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
    return timer_threads > 1 ? ls_now() : ls_thread_cpu_time();
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

/* The median of v[0..n), n <= 64, leaving v as it is. */
static double median(const double *v, int n) {
    double t[64];
    memcpy(t, v, sizeof(double) * (size_t)n);
    return ls_median(t, n);
}

/* ---------------------------------------------------------------- ggml peer (optional)
 * A ggml build beside the project (--ggml DIR or LLMSYS_GGML_DIR: a directory holding
 * libggml-base.so, libggml-cpu.so and libggml.so, or its build/src) is loaded with dlopen and run in
 * this process through its public API: W quantized by ggml_quantize_chunk, y = W·x by a
 * one-node graph on the CPU backend at the same thread count. q8_0 sits in the plain CPU
 * buffer; q4_0 in the CPU backend's repacking buffer (CPU_AARCH64 / CPU_REPACK: q4_0
 * rearranged 8x8, llama.cpp's default on AVX2) when the build has one. Nothing of ggml is
 * compiled in: the declarations below are the few entry points used, by address. */
struct gg_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};
typedef struct {
    void *base, *cpu, *reg;
    void *(*init)(struct gg_init_params);
    void (*free_ctx)(void *);
    void *(*new_tensor_2d)(void *, int, int64_t, int64_t);
    void *(*mul_mat)(void *, void *, void *);
    void *(*new_graph)(void *);
    void (*build_forward_expand)(void *, void *);
    size_t (*nbytes)(const void *);
    size_t (*quantize_chunk)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);
    void *(*cpu_init)(void);
    void (*cpu_set_n_threads)(void *, int);
    void *(*cpu_buffer_type)(void);
    void *(*buft_alloc_buffer)(void *, size_t);
    const char *(*buft_name)(void *);
    void *(*buffer_get_base)(void *);
    int (*tensor_alloc)(void *, void *, void *);
    void (*tensor_set)(void *, const void *, size_t, size_t);
    void (*tensor_get)(const void *, void *, size_t, size_t);
    void *(*alloc_ctx_tensors_from_buft)(void *, void *);
    int (*graph_compute)(void *, void *);
    void (*backend_free)(void *);
    void (*buffer_free)(void *);
    void *(*dev_by_type)(int);
    void *(*dev_backend_reg)(void *);
    void *(*reg_get_proc_address)(void *, const char *);
} gg_api;

typedef struct {
    void *ctxw, *ctx, *backend, *bufw, *bufx, *graph, *x, *y;
    const char *buft;
    size_t wbytes;
} gg_mv;

static int gg_load(const char *dir, gg_api *g) {
    char p[1024];
    memset(g, 0, sizeof *g);
    const char *sub[2] = {"", "/build/src"};
    for (int i = 0; i < 2 && !g->cpu; i++) {
        snprintf(p, sizeof p, "%s%s/libggml-base.so", dir, sub[i]);
        if (!(g->base = dlopen(p, RTLD_NOW | RTLD_GLOBAL))) continue;
        snprintf(p, sizeof p, "%s%s/libggml-cpu.so", dir, sub[i]);
        g->cpu = dlopen(p, RTLD_NOW | RTLD_GLOBAL);
        snprintf(p, sizeof p, "%s%s/libggml.so", dir, sub[i]);
        if (g->cpu && !(g->reg = dlopen(p, RTLD_NOW | RTLD_GLOBAL))) g->cpu = NULL;
    }
    if (!g->cpu) {
        fprintf(stderr, "bench_quant: no ggml build at %s (%s); peer column left out\n", dir, dlerror());
        return -1;
    }
#define GG(field, name)                                                                    \
    do {                                                                                   \
        *(void **)&g->field = dlsym(g->base, name);                                        \
        if (!g->field) *(void **)&g->field = dlsym(g->cpu, name);                          \
        if (!g->field) *(void **)&g->field = dlsym(g->reg, name);                          \
        if (!g->field) {                                                                   \
            fprintf(stderr, "bench_quant: ggml lacks %s; peer column left out\n", name);   \
            return -1;                                                                     \
        }                                                                                  \
    } while (0)
    GG(init, "ggml_init");
    GG(free_ctx, "ggml_free");
    GG(new_tensor_2d, "ggml_new_tensor_2d");
    GG(mul_mat, "ggml_mul_mat");
    GG(new_graph, "ggml_new_graph");
    GG(build_forward_expand, "ggml_build_forward_expand");
    GG(nbytes, "ggml_nbytes");
    GG(quantize_chunk, "ggml_quantize_chunk");
    GG(cpu_init, "ggml_backend_cpu_init");
    GG(cpu_set_n_threads, "ggml_backend_cpu_set_n_threads");
    GG(cpu_buffer_type, "ggml_backend_cpu_buffer_type");
    GG(buft_alloc_buffer, "ggml_backend_buft_alloc_buffer");
    GG(buft_name, "ggml_backend_buft_name");
    GG(buffer_get_base, "ggml_backend_buffer_get_base");
    GG(tensor_alloc, "ggml_backend_tensor_alloc");
    GG(tensor_set, "ggml_backend_tensor_set");
    GG(tensor_get, "ggml_backend_tensor_get");
    GG(alloc_ctx_tensors_from_buft, "ggml_backend_alloc_ctx_tensors_from_buft");
    GG(graph_compute, "ggml_backend_graph_compute");
    GG(backend_free, "ggml_backend_free");
    GG(buffer_free, "ggml_backend_buffer_free");
    GG(dev_by_type, "ggml_backend_dev_by_type");
    GG(dev_backend_reg, "ggml_backend_dev_backend_reg");
    GG(reg_get_proc_address, "ggml_backend_reg_get_proc_address");
#undef GG
    return 0;
}

enum { GG_F32 = 0, GG_Q4_0 = 2, GG_Q8_0 = 8 };

/* The CPU backend's repacking buffer type, or NULL. */
static void *gg_repack_buft(gg_api *g) {
    void *dev = g->dev_by_type(0 /* CPU */);
    void *(*extra)(void *) = NULL;
    if (dev) *(void **)&extra = g->reg_get_proc_address(g->dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    void **b = extra ? (void **)extra(dev) : NULL;
    for (; b && *b; b++) {
        const char *n = g->buft_name(*b);
        if (strstr(n, "AARCH64") || strstr(n, "REPACK")) return *b;
    }
    return NULL;
}

/* y = W·x set up for W (rows x cols fp32) at ggml type `type`, `threads` threads. */
static int gg_mv_init(gg_api *g, gg_mv *m, int type, const float *w, int rows, int cols, int threads) {
    memset(m, 0, sizeof *m);
    struct gg_init_params ip = {1 << 20, NULL, true};
    m->ctxw = g->init(ip);
    m->ctx = g->init(ip);
    void *W = g->new_tensor_2d(m->ctxw, type, cols, rows);
    m->x = g->new_tensor_2d(m->ctx, GG_F32, cols, 1);
    m->y = g->mul_mat(m->ctx, W, m->x);
    m->graph = g->new_graph(m->ctx);
    g->build_forward_expand(m->graph, m->y);
    m->backend = g->cpu_init();
    g->cpu_set_n_threads(m->backend, threads);
    void *buft = type == GG_Q4_0 ? gg_repack_buft(g) : NULL;
    if (!buft) buft = g->cpu_buffer_type();
    m->buft = g->buft_name(buft);
    m->wbytes = g->nbytes(W);
    m->bufw = g->buft_alloc_buffer(buft, m->wbytes);
    if (!m->bufw) return -1;
    g->tensor_alloc(m->bufw, W, g->buffer_get_base(m->bufw));
    void *qd = malloc(m->wbytes);
    if (!qd) return -1;
    g->quantize_chunk(type, w, qd, 0, rows, cols, NULL);
    g->tensor_set(W, qd, 0, m->wbytes); /* the repacking buffer rearranges here */
    free(qd);
    m->bufx = g->alloc_ctx_tensors_from_buft(m->ctx, g->cpu_buffer_type());
    return m->bufx ? 0 : -1;
}

static void gg_mv_run(gg_api *g, gg_mv *m, const float *x, int cols) {
    g->tensor_set(m->x, x, 0, sizeof(float) * (size_t)cols);
    g->graph_compute(m->backend, m->graph);
}

static void gg_mv_free(gg_api *g, gg_mv *m) {
    if (m->bufw) g->buffer_free(m->bufw);
    if (m->bufx) g->buffer_free(m->bufx);
    if (m->backend) g->backend_free(m->backend);
    if (m->ctx) g->free_ctx(m->ctx);
    if (m->ctxw) g->free_ctx(m->ctxw);
}

enum { NFMT = 5, MAXROUNDS = 64, NPF = 5 };
static const int fmts[NFMT] = {32, 16, 8, 4, 3}, ifmts[3] = {8, 4, 3};

/* min, median, max of v[0..n) into r[3] */
static void mmm(const double *v, int n, double r[3]) {
    r[0] = r[2] = v[0];
    for (int i = 1; i < n; i++) r[0] = v[i] < r[0] ? v[i] : r[0], r[2] = v[i] > r[2] ? v[i] : r[2];
    r[1] = median(v, n);
}

/* Prefill shapes M x N x K (tokens x weight rows x columns): a 2048-wide layer and the core
 * "small" model's four Linear shapes at its 128-token context (qkv, proj, fc, fc2). */
static const int pf_shapes[NPF][3] = {{64, 2048, 2048}, {128, 768, 256}, {128, 256, 256}, {128, 1024, 256}, {128, 256, 1024}};
static const int pf_quick[3] = {64, 512, 512};

typedef struct {
    int M, N, K, bits;
    double gops, dq_gops, ratio[3], relerr, dq_relerr;
    double v_gops, v_ratio[3]; /* the avx512 (VNNI) GEMM when the level is amx, else 0 */
} pf_res;

/* One prefill shape: OpenBLAS sgemm on the fp32 weights (best of the rounds), then per
 * integer format the level's GEMM (AUTO) and dequantize + sgemm, the two sides
 * alternating which goes first; GOP/s medians, per-round ratio min/median/max, and the
 * GEMM's max error against the fp32 product relative to its max |y|. */
static void prefill_shape(const int *shape, int rounds, int reps, ls_rng *rng, double *sgemm_gf, pf_res *res) {
    int M = shape[0], N = shape[1], K = shape[2];
    double ops = 2.0 * M * N * K;
    float *w = malloc(sizeof(float) * (size_t)N * K), *X = malloc(sizeof(float) * (size_t)M * K);
    float *y = malloc(sizeof(float) * (size_t)M * N), *y32 = malloc(sizeof(float) * (size_t)M * N);
    LS_ASSERT(w && X && y && y32);
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = 0.02f * ls_rng_normal(rng);
    for (size_t i = 0; i < (size_t)M * K; i++) X[i] = ls_rng_normal(rng);
    double best = 1e30;
    for (int r = 0; r < reps * rounds; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X, K, w, K, 0.0f, y32, N);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    *sgemm_gf = ops / best / 1e9;
    for (int f = 0; f < 3; f++) {
        ls_qmat q;
        LS_ASSERT(ls_qmat_quantize(&q, w, N, K, ifmts[f], 64) == LS_OK);
        double g[MAXROUNDS], d[MAXROUNDS], rt[MAXROUNDS], v[MAXROUNDS], rv[MAXROUNDS], ymax = 0, emax = 0, dmax = 0;
        /* on an AMX machine a third side: the avx512 (VNNI) GEMM, reported apart */
        int nside = ls_quant_isa() == LS_ISA_AMX ? 3 : 2;
        for (int rd = 0; rd < rounds; rd++) {
            double t[3][16];
            for (int r = 0; r < reps; r++)
                for (int o = 0; o < nside; o++) {
                    int side = (o + rd + r) % nside; /* 0: the kernels' GEMM, 1: dequantize + sgemm, 2: VNNI */
                    double t0 = now();
                    ls_qmat_matmul(&q, X, M, y, side == 1 ? LS_QIMPL_DEQUANT : side == 2 ? LS_QIMPL_AVX512 : LS_QIMPL_AUTO);
                    t[side][r] = now() - t0;
                }
            g[rd] = ops / best_of(t[0], reps) / 1e9, d[rd] = ops / best_of(t[1], reps) / 1e9, rt[rd] = g[rd] / d[rd];
            v[rd] = nside == 3 ? ops / best_of(t[2], reps) / 1e9 : 0, rv[rd] = v[rd] / d[rd];
        }
        ls_qmat_matmul(&q, X, M, y, LS_QIMPL_DEQUANT);
        for (size_t i = 0; i < (size_t)M * N; i++) ymax = fmax(ymax, fabs(y32[i])), dmax = fmax(dmax, fabs(y[i] - y32[i]));
        ls_qmat_matmul(&q, X, M, y, LS_QIMPL_AUTO);
        for (size_t i = 0; i < (size_t)M * N; i++) emax = fmax(emax, fabs(y[i] - y32[i]));
        pf_res *e = &res[f];
        e->M = M, e->N = N, e->K = K, e->bits = ifmts[f];
        e->gops = median(g, rounds), e->dq_gops = median(d, rounds), e->relerr = emax / ymax, e->dq_relerr = dmax / ymax;
        mmm(rt, rounds, e->ratio);
        e->v_gops = median(v, rounds);
        mmm(rv, rounds, e->v_ratio);
        ls_qmat_free(&q);
    }
    free(w), free(X), free(y), free(y32);
}

typedef struct {
    int bits;
    double mvs, dq_mvs, ratio[3];
} sb_res;

/* Batches of M = 1..8 X rows through ls_qmat_matmul on an n x n matrix: the decode
 * kernels (AUTO) against dequantize + sgemm, sides alternating; mat-vecs/s = M / time. */
static void small_batches(int n, int rounds, int reps, ls_rng *rng, sb_res res[3][8]) {
    float *w = malloc(sizeof(float) * (size_t)n * n), *X = malloc(sizeof(float) * 8 * (size_t)n);
    float *y = malloc(sizeof(float) * 8 * (size_t)n);
    LS_ASSERT(w && X && y);
    for (size_t i = 0; i < (size_t)n * n; i++) w[i] = 0.02f * ls_rng_normal(rng);
    for (size_t i = 0; i < 8 * (size_t)n; i++) X[i] = ls_rng_normal(rng);
    for (int f = 0; f < 3; f++) {
        ls_qmat q;
        LS_ASSERT(ls_qmat_quantize(&q, w, n, n, ifmts[f], 64) == LS_OK);
        double k[8][MAXROUNDS], d[8][MAXROUNDS], rt[8][MAXROUNDS];
        for (int rd = 0; rd < rounds; rd++)
            for (int M = 1; M <= 8; M++) {
                double t[2][16];
                for (int r = 0; r < reps; r++)
                    for (int o = 0; o < 2; o++) {
                        int side = (o + rd + r + M) % 2;
                        double t0 = now();
                        ls_qmat_matmul(&q, X, M, y, side ? LS_QIMPL_DEQUANT : LS_QIMPL_AUTO);
                        t[side][r] = now() - t0;
                    }
                k[M - 1][rd] = M / best_of(t[0], reps), d[M - 1][rd] = M / best_of(t[1], reps);
                rt[M - 1][rd] = k[M - 1][rd] / d[M - 1][rd];
            }
        for (int m = 0; m < 8; m++) {
            res[f][m].bits = ifmts[f];
            res[f][m].mvs = median(k[m], rounds), res[f][m].dq_mvs = median(d[m], rounds);
            mmm(rt[m], rounds, res[f][m].ratio);
        }
        ls_qmat_free(&q);
    }
    free(w), free(X), free(y);
}

int main(int argc, char **argv) {
    ls_runtime_reexec(argv, LS_REEXEC_BLAS_CORE); /* OpenBLAS kernels, even on a CPU it does not know */
    const char *out = NULL, *ggml_dir = getenv("LLMSYS_GGML_DIR");
    int rows = 16384, cols = 8192, threads = omp_get_num_procs(), reps = 3, rounds = 5, quick = 0;
    int do_dec = 1, do_pf = 1, do_sb = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ggml") && i + 1 < argc) ggml_dir = argv[++i];
        else if (!strcmp(argv[i], "--quick")) rows = 4096, cols = 4096, reps = 2, rounds = 3, quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "decode") || !strcmp(argv[i + 1], "prefill") || !strcmp(argv[i + 1], "batch"))) {
            const char *o = argv[++i];
            do_dec = !strcmp(o, "decode"), do_pf = !strcmp(o, "prefill"), do_sb = !strcmp(o, "batch");
        }
        else {
            fprintf(stderr,
                    "usage: bench_quant [--out FILE] [--rows R --cols C] [--threads N] [--reps N] [--rounds N] [--quick]\n"
                    "                   [--ggml DIR]   (or LLMSYS_GGML_DIR: a ggml build to compare against)\n"
                    "                   [--only decode|prefill|batch]\n"
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
    int tcs[2] = {1, threads}, ntc = !do_dec ? 0 : threads > 1 ? 2 : 1;
    if (!do_dec) rows = cols = 64; /* no decode section: a token matrix */
    char feat[160];
    double la[3] = {0};
    if (getloadavg(la, 3) < 0) la[0] = -1;
    printf("bench_quant: kernels %s (CPU: %s; LLMSYS_ISA=%s), 1 and %d thread(s); load average %.2f\n"
           "1 thread timed by its CPU time, more by wall clock; best of %d timings each; medians over %d rounds\n",
           ls_quant_impl_name(), ls_cpu_features_str(ls_cpu_features(), feat, sizeof feat),
           getenv("LLMSYS_ISA") ? getenv("LLMSYS_ISA") : "(unset)", threads, la[0], reps, rounds);
    if (do_dec)
        printf("decode rounds, each: read bandwidth (512 MiB), every format's decode (calls streaming ~512 MiB),\n"
               "read bandwidth again\n");

    size_t nw = (size_t)rows * cols, nbw = (do_dec ? 512u << 20 : 1u << 16) / sizeof(float);
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
    /* ggml peer: int8 vs q8_0, 4-bit vs repacked q4_0, one thread, sides interleaved */
    gg_api gg;
    gg_mv gm[2];
    int have_gg = do_dec && ggml_dir && *ggml_dir && gg_load(ggml_dir, &gg) == 0;
    const int gtypes[2] = {GG_Q8_0, GG_Q4_0}, gfmt[2] = {2, 3};
    double pv[2][2][MAXROUNDS]; /* [pair][side: llmsys, ggml][round] mat-vecs/s */
    if (have_gg)
        for (int k = 0; k < 2 && have_gg; k++)
            if (gg_mv_init(&gg, &gm[k], gtypes[k], w, rows, cols, 1) != 0) {
                fprintf(stderr, "bench_quant: ggml set-up failed; peer column left out\n");
                have_gg = 0;
            }
    free(w);
    if (have_gg) {
        /* both sides compute the same product: ggml's y against llmsys's, relative to |y|max */
        float *yg = malloc(sizeof(float) * rows);
        LS_ASSERT(yg);
        for (int k = 0; k < 2; k++) {
            gg_mv_run(&gg, &gm[k], x, cols);
            gg.tensor_get(gm[k].y, yg, 0, sizeof(float) * rows);
            ls_qmat_matmul_rows(&q[gfmt[k]], x, 1, y, 1, LS_QIMPL_AUTO);
            double dmax = 0, ymax = 0;
            for (int r = 0; r < rows; r++) dmax = fmax(dmax, fabs(yg[r] - y[r])), ymax = fmax(ymax, fabs(y[r]));
            printf("ggml %s output vs llmsys %d-bit: max difference %.3g of max |y| (quantization differs)\n",
                   k ? "q4_0" : "q8_0", fmts[gfmt[k]], dmax / ymax);
        }
        free(yg);
        timer_threads = 1;
        for (int rd_i = 0; rd_i < rounds; rd_i++)
            for (int k = 0; k < 2; k++)
                for (int o = 0; o < 2; o++) {
                    int side = (o + rd_i) % 2; /* alternate which side goes first */
                    size_t qb = side ? gm[k].wbytes : ls_qmat_bytes(&q[gfmt[k]]);
                    int ncall = (int)((nbw * sizeof(float) / 2 + qb / 2) / qb);
                    if (ncall < 1) ncall = 1;
                    double t[16] = {0};
                    for (int r = 0; r < reps; r++) {
                        double t0 = now();
                        for (int c = 0; c < ncall; c++) {
                            if (side) gg_mv_run(&gg, &gm[k], x, cols);
                            else ls_qmat_matmul_rows(&q[gfmt[k]], x, 1, y, 1, LS_QIMPL_AUTO);
                        }
                        t[r] = (now() - t0) / ncall;
                    }
                    pv[k][side][rd_i] = 1.0 / best_of(t, reps);
                }
    }

    /* decode: rounds × thread counts, bandwidth measured around the kernels */
    double rd[2][MAXROUNDS], gbs[2][NFMT][MAXROUNDS], frac[2][NFMT][MAXROUNDS], r4[2][MAXROUNDS], cp[2];
    double fj[2][MAXROUNDS] = {{0}}; /* µs per empty parallel region of tc threads (fork + barrier) */
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
            if (tc > 1) {
                /* what a threaded call pays besides its rows: the fork and the one barrier */
                double t0 = ls_now();
                for (int it = 0; it < 200; it++) {
#pragma omp parallel num_threads(tc)
                    { __asm__ volatile(""); }
                }
                fj[k][rd_i] = (ls_now() - t0) / 200 * 1e6;
            }
            /* the higher of the two readings: the ratio is not flattered by a slow reading */
            rd[k][rd_i] = bw0 > bw1 ? bw0 : bw1;
            for (int f = 0; f < NFMT; f++) frac[k][f][rd_i] = gbs[k][f][rd_i] / rd[k][rd_i];
            r4[k][rd_i] = gbs[k][3][rd_i] / ls_qmat_bytes(&q[3]) * ls_qmat_bytes(&q[0]) / gbs[k][0][rd_i];
        }
    ls_aligned_free(ba);
    ls_aligned_free(bb);

    /* prefill GEMMs and small batches: one thread, each against dequantize + sgemm */
    timer_threads = 1;
    openblas_set_num_threads(1);
    pf_res pres[NPF][3];
    double sg_gf[NPF];
    int npf = quick ? 2 : NPF;
    if (do_pf)
        for (int s = 0; s < npf; s++) prefill_shape(s == 0 && quick ? pf_quick : pf_shapes[s], rounds, reps, &rng, &sg_gf[s], pres[s]);
    sb_res sres[3][8];
    int sbn = quick ? 1024 : 4096;
    if (do_sb) small_batches(sbn, rounds, reps, &rng, sres);

    cJSON *j = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(j, "decode");
    for (int k = 0; k < ntc; k++) {
        double bw = median(rd[k], rounds);
        printf("\ndecode mat-vec %d x %d, %d thread(s): read bandwidth %.2f GB/s (median), copy %.2f GB/s\n", rows, cols,
               tcs[k], bw, cp[k]);
        double lo = rd[k][0], hi = rd[k][0];
        for (int i = 1; i < rounds; i++) lo = rd[k][i] < lo ? rd[k][i] : lo, hi = rd[k][i] > hi ? rd[k][i] : hi;
        printf("  (read bandwidth over the rounds: %.1f-%.1f GB/s)\n", lo, hi);
        double f3[3] = {0, 0, 0};
        if (tcs[k] > 1) {
            mmm(fj[k], rounds, f3);
            printf("  empty parallel region of %d threads (fork + barrier), wall: %.1f us median (%.1f-%.1f)\n", tcs[k], f3[1],
                   f3[0], f3[2]);
        }
        printf("  %-6s %10s %10s %16s %10s %10s\n", "bits", "MiB", "GB/s", "% of read bw", "(min-max)", "tokens/s");
        cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "formats");
        if (tcs[k] > 1) cJSON_AddNumberToObject(o, "fork_barrier_us", f3[1]);
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
    if (have_gg) {
        printf("\ndecode vs ggml (%s), %d x %d, 1 thread, sides interleaved, %d rounds: mat-vecs/s median (min-max)\n",
               ggml_dir, rows, cols, rounds);
        printf("  %-22s %10s %8s   %-26s %10s %8s   %s\n", "llmsys", "mv/s", "GB/s", "ggml", "mv/s", "GB/s",
               "llmsys / ggml");
        cJSON *pa = cJSON_AddArrayToObject(j, "peer_ggml");
        for (int k = 0; k < 2; k++) {
            double ratio[MAXROUNDS], lo = 1e30, hi = 0;
            for (int i = 0; i < rounds; i++) {
                ratio[i] = pv[k][0][i] / pv[k][1][i];
                lo = ratio[i] < lo ? ratio[i] : lo, hi = ratio[i] > hi ? ratio[i] : hi;
            }
            double a = median(pv[k][0], rounds), b = median(pv[k][1], rounds), rm = median(ratio, rounds);
            size_t qa = ls_qmat_bytes(&q[gfmt[k]]), qb = gm[k].wbytes;
            char nm[64];
            snprintf(nm, sizeof nm, "%s (%s)", k ? "q4_0" : "q8_0", gm[k].buft);
            printf("  %-22s %10.1f %8.2f   %-26s %10.1f %8.2f   %.2fx (%.2f-%.2f)\n",
                   k ? "4-bit g64 (4.5 b/w)" : "int8 g64 (8.25 b/w)", a, a * qa / 1e9, nm, b, b * qb / 1e9, rm, lo, hi);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "bits", fmts[gfmt[k]]);
            cJSON_AddStringToObject(e, "ggml_type", k ? "q4_0" : "q8_0");
            cJSON_AddStringToObject(e, "ggml_buffer", gm[k].buft);
            cJSON_AddNumberToObject(e, "llmsys_matvec_s", a);
            cJSON_AddNumberToObject(e, "ggml_matvec_s", b);
            cJSON_AddNumberToObject(e, "llmsys_bytes", (double)qa);
            cJSON_AddNumberToObject(e, "ggml_bytes", (double)qb);
            cJSON_AddNumberToObject(e, "ratio_median", rm);
            cJSON_AddNumberToObject(e, "ratio_min", lo);
            cJSON_AddNumberToObject(e, "ratio_max", hi);
            cJSON_AddItemToArray(pa, e);
            gg_mv_free(&gg, &gm[k]);
        }
    } else if (do_dec) {
        printf("\n(no ggml peer: %s)\n",
               ggml_dir && *ggml_dir ? "could not load it, see above" : "give a build with --ggml DIR or LLMSYS_GGML_DIR");
    }
    if (do_pf) {
        printf(
            "\nprefill GEMM, 1 thread, %d rounds, sides interleaved: integer GEMM (%s) vs dequantize + OpenBLAS sgemm\n"
            "(OpenBLAS core %s%s%s)\n",
            rounds, ls_quant_impl_name(), openblas_get_corename(),
            strstr(ls_quant_impl_name(), "avx512") ? "; AVX-512 VNNI tile " : "", /* the tile only where it runs */
            strstr(ls_quant_impl_name(), "avx512") ? ls_quant_prefill_tile() : "");
        printf("  %-18s %5s %10s %14s %14s   %-18s %s\n", "M x N x K", "bits", "GOP/s", "dequant GOP/s", "sgemm GFLOP/s",
               "ratio (min-max)", "rel. error: GEMM, dequant");
        cJSON *pf = cJSON_AddArrayToObject(j, "prefill");
        for (int s = 0; s < npf; s++)
            for (int f = 0; f < 3; f++) {
                const pf_res *e = &pres[s][f];
                char shape[40];
                snprintf(shape, sizeof shape, "%d x %d x %d", e->M, e->N, e->K);
                printf("  %-18s %5d %10.1f %14.1f %14.1f   %.2fx (%.2f-%.2f)   %.2e, %.2e\n", shape, e->bits, e->gops,
                       e->dq_gops, sg_gf[s], e->ratio[1], e->ratio[0], e->ratio[2], e->relerr, e->dq_relerr);
                if (e->v_gops > 0)
                    printf("  %-18s %5s %10.1f %44s%.2fx (%.2f-%.2f)   (avx512 VNNI GEMM, same rounds)\n", "", "", e->v_gops,
                           "", e->v_ratio[1], e->v_ratio[0], e->v_ratio[2]);
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "M", e->M);
                cJSON_AddNumberToObject(o, "N", e->N);
                cJSON_AddNumberToObject(o, "K", e->K);
                cJSON_AddNumberToObject(o, "bits", e->bits);
                cJSON_AddNumberToObject(o, "prefill_gops", e->gops);
                cJSON_AddNumberToObject(o, "dequant_sgemm_gops", e->dq_gops);
                cJSON_AddNumberToObject(o, "sgemm_gflops", sg_gf[s]);
                cJSON_AddNumberToObject(o, "ratio_median", e->ratio[1]);
                cJSON_AddNumberToObject(o, "ratio_min", e->ratio[0]);
                cJSON_AddNumberToObject(o, "ratio_max", e->ratio[2]);
                cJSON_AddStringToObject(o, "level", ls_isa_name(ls_quant_isa()));
                if (ls_quant_isa() >= LS_ISA_AVX512) cJSON_AddStringToObject(o, "vnni_tile", ls_quant_prefill_tile());
                if (e->v_gops > 0) {
                    cJSON_AddNumberToObject(o, "vnni_gops", e->v_gops);
                    cJSON_AddNumberToObject(o, "vnni_ratio_median", e->v_ratio[1]);
                    cJSON_AddNumberToObject(o, "vnni_ratio_min", e->v_ratio[0]);
                    cJSON_AddNumberToObject(o, "vnni_ratio_max", e->v_ratio[2]);
                }
                cJSON_AddNumberToObject(o, "max_rel_error_vs_fp32", e->relerr);
                cJSON_AddNumberToObject(o, "dequant_max_rel_error_vs_fp32", e->dq_relerr);
                cJSON_AddItemToArray(pf, o);
            }
        printf("  rel. error: max |y - y_fp32| / max |y_fp32| against sgemm on the unquantized weights, of the GEMM\n"
               "  (weights and int8 activations) and of dequantize + sgemm (weights only)\n");
    }
    if (do_sb) {
        printf("\nsmall batches, %d x %d weights, 1 thread, %d rounds, sides interleaved: mat-vecs/s (X rows per second)\n"
               "of the decode kernels (%s) vs dequantize + sgemm; 'vs M=1': per-row rate over batch 1\n",
               sbn, sbn, rounds, ls_quant_impl_name());
        printf("  %5s %3s %12s %8s %14s   %s\n", "bits", "M", "mat-vecs/s", "vs M=1", "dequant mv/s", "kernel / dequant (min-max)");
        cJSON *sb = cJSON_AddArrayToObject(j, "small_batch");
        for (int f = 0; f < 3; f++)
            for (int m = 0; m < 8; m++) {
                const sb_res *e = &sres[f][m];
                printf("  %5d %3d %12.0f %7.2fx %14.0f   %.2fx (%.2f-%.2f)\n", e->bits, m + 1, e->mvs, e->mvs / sres[f][0].mvs,
                       e->dq_mvs, e->ratio[1], e->ratio[0], e->ratio[2]);
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "bits", e->bits);
                cJSON_AddNumberToObject(o, "M", m + 1);
                cJSON_AddNumberToObject(o, "matvec_s", e->mvs);
                cJSON_AddNumberToObject(o, "vs_batch1", e->mvs / sres[f][0].mvs);
                cJSON_AddNumberToObject(o, "dequant_matvec_s", e->dq_mvs);
                cJSON_AddNumberToObject(o, "ratio_median", e->ratio[1]);
                cJSON_AddNumberToObject(o, "ratio_min", e->ratio[0]);
                cJSON_AddNumberToObject(o, "ratio_max", e->ratio[2]);
                cJSON_AddItemToArray(sb, o);
            }
    }
    cJSON_AddStringToObject(j, "openblas_core", openblas_get_corename());
    cJSON_AddStringToObject(j, "kernels", ls_quant_impl_name());
    cJSON_AddStringToObject(j, "cpu_features", feat);
    cJSON_AddNumberToObject(j, "load_avg_1min", la[0]);
    cJSON_AddNumberToObject(j, "rows", rows);
    cJSON_AddNumberToObject(j, "cols", cols);
    cJSON_AddNumberToObject(j, "rounds", rounds);
    cJSON_AddNumberToObject(j, "reps", reps);
    int rc = 0;
    if (out && ls_json_write_file(out, j) != LS_OK) {
        fprintf(stderr, "bench_quant: %s\n", ls_errmsg());
        rc = 1;
    }
    cJSON_Delete(j);
    for (int f = 0; f < NFMT; f++) ls_qmat_free(&q[f]);
    free(x), free(y);
    return rc;
}
