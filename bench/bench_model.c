/* bench_model.c - how close a whole training step of the GPT (forward + backward + AdamW)
 * comes to the machine's sgemm rate at the model's own matmul shapes, measured in one run.
 *
 *   build/bench_model [--config small] [--batch 8] [--seq T] [--steps 5] [--threads 0] [--out FILE]
 *
 * 1. Baseline: every matmul shape of one step (dense layers forward, both backward
 *    products, LM head; attention's per-head products), timed standalone: OpenBLAS with
 *    its own threads and the model's row-split driver, the faster of the two per shape.
 * 2. The step itself, with a wall-time profile by layer kind.
 * FLOPs are counted analytically: 2·M·N·K per product (attention's T×T products over the
 * full square, which is what the kernel executes). */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "model/layers.h"

typedef struct {
    const char *what;
    int ta, tb, M, N, K, count; /* count: calls per step */
    int batch;                  /* > 1: attention product, `batch` heads per call in an OpenMP loop */
    double t_blas, t_rows;      /* seconds per call */
} shape;

static double flops_of(const shape *s) { return 2.0 * s->M * s->N * s->K * (s->batch > 1 ? s->batch : 1); }

/* One call of a shape: mode 0 = OpenBLAS's own threading, 1 = the model's row split;
 * attention shapes run `batch` heads in an OpenMP loop as the model does. */
static void time_shape_once(const shape *s, int mode, float *A, float *B, float *C) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N, ldc = s->N;
    size_t per = (size_t)s->M * s->N, pa = (size_t)s->M * s->K, pb = (size_t)s->K * s->N;
    if (s->batch > 1) {
        int saved = ls_blas_threads_push_single();
#pragma omp parallel for schedule(static)
        for (int h = 0; h < s->batch; h++)
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->M, s->N,
                        s->K, 1.0f, A + h * pa, lda, B + h * pb, ldb, 0.0f, C + h * per, ldc);
        ls_blas_threads_pop(saved);
    } else if (mode == 0) {
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->M, s->N,
                    s->K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
    } else {
        ls_sgemm_rows(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
    }
}

/* Time one shape: repeat until ~min_s seconds; returns the fastest call (the machine is
 * shared, so the minimum is the stable statistic; the step is measured the same way). */
static double time_shape(const shape *s, int mode, float *A, float *B, float *C, double min_s) {
    int reps = 0;
    double start = ls_now(), best = 1e30;
    do {
        double t0 = ls_now();
        time_shape_once(s, mode, A, B, C);
        double t = ls_now() - t0;
        best = t < best ? t : best;
        reps++;
    } while (ls_now() - start < min_s || reps < 5);
    return best;
}

static int usage(void) {
    fprintf(stderr,
            "usage: bench_model [--config NAME] [--batch B] [--seq T] [--steps N] [--threads N] [--out FILE]\n");
    return 2;
}

int main(int argc, char **argv) {
    ls_runtime_reexec(argv, LS_REEXEC_ALL); /* OpenMP wait policy, OpenBLAS kernels */
    const char *cfgname = "small", *out = NULL;
    int B = 8, T = 0, steps = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) return usage();
        if (strcmp(a, "--config") == 0)
            cfgname = argv[++i];
        else if (strcmp(a, "--batch") == 0)
            B = atoi(argv[++i]);
        else if (strcmp(a, "--seq") == 0)
            T = atoi(argv[++i]);
        else if (strcmp(a, "--steps") == 0)
            steps = atoi(argv[++i]);
        else if (strcmp(a, "--threads") == 0)
            threads = atoi(argv[++i]);
        else if (strcmp(a, "--out") == 0)
            out = argv[++i];
        else
            return usage();
    }
    ls_model_config cfg;
    if (ls_model_config_named(cfgname, &cfg) != LS_OK) {
        fprintf(stderr, "bench_model: %s\n", ls_errmsg());
        return 2;
    }
    if (T <= 0) T = cfg.n_ctx;
    if (B < 1 || T > cfg.n_ctx || steps < 1) return usage();
    ls_model_set_threads(threads);
    int nth = omp_get_max_threads();
    int V = cfg.vocab, C = cfg.d_model, F = cfg.d_ff, L = cfg.n_layer, NH = cfg.n_head, hs = C / NH, N = B * T;

    /* ---- 1. baseline sgemm at the step's shapes */
    shape sh[] = {
        {"qkv fwd", 0, 1, N, 3 * C, C, L, 1, 0, 0},  {"proj fwd", 0, 1, N, C, C, L, 1, 0, 0},
        {"fc fwd", 0, 1, N, F, C, L, 1, 0, 0},       {"mlp.proj fwd", 0, 1, N, C, F, L, 1, 0, 0},
        {"lm head fwd", 0, 1, N, V, C, 1, 1, 0, 0},  {"qkv dx", 0, 0, N, C, 3 * C, L, 1, 0, 0},
        {"proj dx", 0, 0, N, C, C, L, 1, 0, 0},      {"fc dx", 0, 0, N, C, F, L, 1, 0, 0},
        {"mlp.proj dx", 0, 0, N, F, C, L, 1, 0, 0},  {"lm head dx", 0, 0, N, C, V, 1, 1, 0, 0},
        {"qkv dW", 1, 0, 3 * C, C, N, L, 1, 0, 0},   {"proj dW", 1, 0, C, C, N, L, 1, 0, 0},
        {"fc dW", 1, 0, F, C, N, L, 1, 0, 0},        {"mlp.proj dW", 1, 0, C, F, N, L, 1, 0, 0},
        {"lm head dW", 1, 0, V, C, N, 1, 1, 0, 0},   {"att QK^T", 0, 1, T, T, hs, L, B * NH, 0, 0},
        {"att PV", 0, 0, T, hs, T, L, B * NH, 0, 0}, {"att dP", 0, 1, T, T, hs, L, B * NH, 0, 0},
        {"att dV", 1, 0, T, hs, T, L, B * NH, 0, 0}, {"att dQ", 0, 0, T, hs, T, L, B * NH, 0, 0},
        {"att dK", 1, 0, T, hs, T, L, B * NH, 0, 0},
    };
    int nsh = (int)(sizeof sh / sizeof sh[0]);
    size_t maxA = 0, maxB = 0, maxC = 0;
    for (int i = 0; i < nsh; i++) {
        size_t nb = (size_t)(sh[i].batch > 1 ? sh[i].batch : 1);
        size_t a = nb * sh[i].M * sh[i].K, b = nb * sh[i].K * sh[i].N, c = nb * sh[i].M * sh[i].N;
        maxA = a > maxA ? a : maxA, maxB = b > maxB ? b : maxB, maxC = c > maxC ? c : maxC;
    }
    float *A = ls_aligned_alloc(64, maxA * 4), *Bm = ls_aligned_alloc(64, maxB * 4),
          *Cm = ls_aligned_alloc(64, maxC * 4);
    if (!A || !Bm || !Cm) return 1;
    ls_rng r;
    ls_rng_seed(&r, 1);
    for (size_t i = 0; i < maxA; i++) A[i] = ls_rng_normal(&r);
    for (size_t i = 0; i < maxB; i++) Bm[i] = ls_rng_normal(&r);
    memset(Cm, 0, maxC * 4);
    int blas_threads_default = openblas_get_num_threads();
    double dense_flops = 0, dense_best = 0, att_flops = 0, att_best = 0;
    double la[3];
    ls_load_avg(la);
    double load = la[0];
    const char *wait = getenv("OMP_WAIT_POLICY");
    printf("model %s (%zu params), B=%d T=%d, %d threads, %d cores, OMP_WAIT_POLICY=%s, OpenBLAS kernels %s, load "
           "average %.2f at start\n\n",
           cfgname, ls_model_config_num_params(&cfg), B, T, nth, ls_num_cores(), wait ? wait : "(default)",
           ls_cpu_blas_core_picked(), load);
    printf("%-14s %6s %6s %6s %5s %12s %12s\n", "sgemm shape", "M", "N", "K", "x/step", "OpenBLAS GF/s",
           "row-split GF/s");
    for (int i = 0; i < nsh; i++) {
        shape *s = &sh[i];
        openblas_set_num_threads(nth);
        s->t_blas = time_shape(s, 0, A, Bm, Cm, 0.05);
        openblas_set_num_threads(1);
        s->t_rows = s->batch > 1 ? s->t_blas : time_shape(s, 1, A, Bm, Cm, 0.05);
        double best = s->t_blas < s->t_rows ? s->t_blas : s->t_rows, fl = flops_of(s);
        if (s->batch > 1) {
            att_flops += fl * s->count;
            att_best += best * s->count;
        } else {
            dense_flops += fl * s->count;
            dense_best += best * s->count;
        }
        printf("%-14s %6d %6d %6d %5d %12.1f %12.1f%s\n", s->what, s->M, s->N, s->K, s->count, fl / s->t_blas * 1e-9,
               fl / s->t_rows * 1e-9, s->batch > 1 ? "  (per-head, OpenMP)" : "");
    }
    /* ---- 2. the training step */
    ls_model *m = NULL;
    if (ls_model_init(&m, &cfg, 1) != LS_OK) {
        fprintf(stderr, "bench_model: %s\n", ls_errmsg());
        return 1;
    }
    int *tok = malloc((size_t)N * sizeof(int)), *tgt = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (int)ls_rng_below(&r, 256), tgt[i] = (int)ls_rng_below(&r, 256);
    ls_adamw_config oc = ls_adamw_defaults();
    /* Each round replays every product of one step back to back (each shape `count`
     * times, the faster driver per shape), then runs one real step: both sides are
     * whole-run wall times taken under the same conditions of a shared machine. The
     * rounds give a fastest-vs-fastest ratio and a median of the per-round ratios. */
    double t_adamw = 0, step = 1e30, *st = malloc((size_t)steps * sizeof(double));
    double replay = 1e30, replay_att = 0, *ratio = malloc((size_t)steps * sizeof(double));
    ls_model_prof pr = {0};
    float loss0 = 0, loss1 = 0;
    for (int s = -1; s < steps; s++) { /* step -1: warm-up (allocations, caches), not timed */
        double rp = ls_now(), ta = 0;
        for (int i = 0; i < nsh; i++) {
            shape *sp = &sh[i];
            int mode = sp->t_blas <= sp->t_rows ? 0 : 1;
            openblas_set_num_threads(mode == 0 ? nth : 1);
            double ts = ls_now();
            for (int c = 0; c < sp->count; c++) time_shape_once(sp, mode, A, Bm, Cm);
            if (sp->batch > 1) ta += ls_now() - ts;
        }
        rp = ls_now() - rp;
        openblas_set_num_threads(blas_threads_default);
        if (s >= 0 && rp < replay) replay = rp, replay_att = ta;
        ls_model_profile_enable(m, 1);
        double t0 = ls_now();
        ls_model_zero_grad(m);
        float loss = ls_model_forward(m, tok, tgt, B, T);
        ls_model_backward(m);
        double t1 = ls_now();
        ls_model_adamw_step(m, &oc, s + 1);
        double t2 = ls_now();
        if (s >= 0) {
            st[s] = t2 - t0;
            ratio[s] = rp / (t2 - t0);
            if (t2 - t0 < step) { /* keep the profile of the fastest step */
                step = t2 - t0;
                t_adamw = t2 - t1;
                pr = ls_model_profile_get(m);
            }
        }
        if (s == 0) loss0 = loss;
        loss1 = loss;
    }
    for (int i = 1; i < steps; i++) /* insertion sort for the median */
        for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
            double x = st[j];
            st[j] = st[j - 1], st[j - 1] = x;
        }
    double median = st[steps / 2];
    for (int i = 1; i < steps; i++)
        for (int j = i; j > 0 && ratio[j] < ratio[j - 1]; j--) {
            double x = ratio[j];
            ratio[j] = ratio[j - 1], ratio[j - 1] = x;
        }
    double ratio_med = ratio[steps / 2];
    free(st);
    free(ratio);
    double sgemm_rate = (dense_flops + att_flops) / replay;
    double total_flops = dense_flops + att_flops;
    double achieved = total_flops / step;
    double per = 1.0;
    double in_dense = pr.matmul * per, in_att = pr.attention * per;
    /* attention's sgemm share inside the fused kernel, estimated from its replay time */
    double att_gemm = replay_att < in_att ? replay_att : in_att;
    /* Share of the step outside sgemm: the step's products take `replay` seconds when run
     * alone (same round, same conditions); everything else in the step is not sgemm. The
     * in-step profile below cannot split sgemm from the work fused with it (bias and
     * residual initialisation, GELU in the MLP, softmax inside attention). */
    double outside = 1.0 - replay / step;
    if (outside < 0) outside = 0;
    double tok_s = N / step;

    printf("\nstep (fwd+bwd+AdamW): fastest %.1f ms (median %.1f ms of %d), %.0f tokens/s, loss %.4f -> %.4f\n",
           step * 1e3, median * 1e3, steps, tok_s, loss0, loss1);
    printf("FLOPs per step: %.2f G (dense %.2f G, attention %.2f G)\n", total_flops * 1e-9, dense_flops * 1e-9,
           att_flops * 1e-9);
    printf("\n%-34s %10s\n", "", "GFLOP/s");
    printf("%-34s %10.1f   (all products of a step replayed: %.1f ms)\n", "sgemm at the step's shapes",
           sgemm_rate * 1e-9, replay * 1e3);
    printf("%-34s %10.1f\n", "  dense products (per-shape best)", dense_flops / dense_best * 1e-9);
    printf("%-34s %10.1f\n", "  attention products (per-shape best)", att_flops / att_best * 1e-9);
    printf("%-34s %10.1f   (%.0f%% of sgemm; goal >= 60%%)\n", "whole training step (fastest)", achieved * 1e-9,
           100.0 * achieved / sgemm_rate);
    printf("%-34s %10.1f   (median of per-round ratios: %.0f%% of sgemm)\n", "whole training step (median)",
           total_flops / median * 1e-9, 100.0 * ratio_med);
    printf("\n%-34s %8s %7s\n", "step time by kind", "ms", "share");
    struct {
        const char *k;
        double t;
    } rows[] = {
        {"dense layers (sgemm, bias, GELU)", in_dense},
        {"attention (fused)", in_att},
        {"  of which sgemm (replay est.)", att_gemm},
        {"layernorm", pr.layernorm * per},
        {"gelu", pr.gelu * per},
        {"encoder", pr.encoder * per},
        {"softmax + cross-entropy", pr.xent * per},
        {"memset/memcpy", pr.memory * per},
        {"AdamW + grad norm", t_adamw * per},
        {"untracked", step - (in_dense + in_att + (pr.layernorm + pr.gelu + pr.encoder + pr.xent + pr.memory) * per +
                              t_adamw * per)}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("%-34s %8.2f %6.1f%%\n", rows[i].k, rows[i].t * 1e3, 100.0 * rows[i].t / step);
    printf("(profile of the fastest step; attention's sgemm share estimated from the replay)\n");
    printf("%-34s %8.2f %6.1f%%   (step minus its sgemm replay)\n", "outside matmuls", (step - replay) * 1e3,
           100.0 * outside);

    /* ---- 3. incremental decoding with the KV cache (batch 1): prompt + n_ctx/2 new tokens */
    int n_new = cfg.n_ctx / 2, prompt[4] = {'T', 'h', 'e', ' '}, *gen = malloc((size_t)n_new * sizeof(int)), n_gen = 0;
    ls_sample_config sc = {1.0f, 0, 1.0f};
    double dec_best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        ls_rng gr;
        ls_rng_seed(&gr, 5);
        double t0 = ls_now();
        if (ls_model_generate(m, prompt, 4, n_new, &sc, &gr, gen, &n_gen) != LS_OK) {
            fprintf(stderr, "bench_model: %s\n", ls_errmsg());
            return 1;
        }
        double t = ls_now() - t0;
        dec_best = t < dec_best ? t : dec_best;
    }
    double dec_tok_s = (4 + n_gen) / dec_best;
    printf("\nKV-cache decoding (batch 1): %d prompt + %d sampled tokens in %.1f ms: %.0f tokens/s\n", 4, n_gen,
           dec_best * 1e3, dec_tok_s);
    free(gen);

    if (out) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "bench", "model");
        cJSON_AddStringToObject(j, "config", cfgname);
        cJSON_AddNumberToObject(j, "params", (double)ls_model_config_num_params(&cfg));
        cJSON_AddNumberToObject(j, "batch", B);
        cJSON_AddNumberToObject(j, "seq", T);
        cJSON_AddNumberToObject(j, "threads", nth);
        cJSON_AddNumberToObject(j, "cores", ls_num_cores());
        cJSON_AddStringToObject(j, "openblas_core", ls_cpu_blas_core_picked());
        cJSON_AddNumberToObject(j, "load_average_at_start", load);
        cJSON_AddStringToObject(j, "omp_wait_policy", wait ? wait : "default");
        cJSON_AddNumberToObject(j, "sgemm_replay_ms", replay * 1e3);
        cJSON_AddNumberToObject(j, "steps", steps);
        cJSON_AddNumberToObject(j, "step_ms", step * 1e3);
        cJSON_AddNumberToObject(j, "step_ms_median", median * 1e3);
        cJSON_AddNumberToObject(j, "step_vs_sgemm_median_of_rounds", ratio_med);
        cJSON_AddNumberToObject(j, "tokens_per_s", tok_s);
        cJSON_AddNumberToObject(j, "flops_per_step", total_flops);
        cJSON_AddNumberToObject(j, "sgemm_gflops_at_model_shapes", sgemm_rate * 1e-9);
        cJSON_AddNumberToObject(j, "step_gflops", achieved * 1e-9);
        cJSON_AddNumberToObject(j, "step_vs_sgemm", achieved / sgemm_rate);
        cJSON_AddNumberToObject(j, "share_outside_matmul", outside);
        cJSON_AddNumberToObject(j, "decode_tokens_per_s", dec_tok_s);
        cJSON *sj = cJSON_AddArrayToObject(j, "shapes");
        for (int i = 0; i < nsh; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "what", sh[i].what);
            cJSON_AddNumberToObject(o, "M", sh[i].M);
            cJSON_AddNumberToObject(o, "N", sh[i].N);
            cJSON_AddNumberToObject(o, "K", sh[i].K);
            cJSON_AddNumberToObject(o, "per_step", sh[i].count);
            cJSON_AddNumberToObject(o, "openblas_gflops", flops_of(&sh[i]) / sh[i].t_blas * 1e-9);
            cJSON_AddNumberToObject(o, "rowsplit_gflops", flops_of(&sh[i]) / sh[i].t_rows * 1e-9);
            cJSON_AddItemToArray(sj, o);
        }
        cJSON *tj = cJSON_AddObjectToObject(j, "step_ms_by_kind");
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            cJSON_AddNumberToObject(tj, rows[i].k, rows[i].t * 1e3);
        if (ls_json_write_file(out, j) != LS_OK) fprintf(stderr, "bench_model: %s\n", ls_errmsg());
        cJSON_Delete(j);
    }
    free(tok), free(tgt);
    ls_aligned_free(A), ls_aligned_free(Bm), ls_aligned_free(Cm);
    ls_model_free(m);
    return 0;
}
