/* bench_qsync.c - hybrid-precision data-parallel training (QSync) on this machine:
 *   1. low-precision GEMMs (bf16, fp16, int8, casts included, as training runs them) vs
 *      OpenBLAS sgemm at the model's Linear shapes, interleaved, same run;
 *   2. planning time (profile here; allocation for a catalog cluster);
 *   3. predictor error: 7 plans (fp32, uniform bf16, fp16 and int8, qsync, two fixed mixes) for
 *      2 ranks, one throttled, run in --repeats interleaved rounds as `llmsys train --ranks 2`;
 *      predicted (the plan files', from the profile before the first round; and each round's
 *      from a profile taken just before it, unless --one-profile) vs the median of the measured
 *      per-step times, and the error by part (each rank's compute, the ranks' expected maximum,
 *      the synchronisation);
 *   4. held-out bits/byte at equal steps and at equal wall time (qsync vs uniform low
 *      precision vs fp32 at the slow rank's pace) and the throughput gain over fp32.
 *
 *   build/bench_qsync [--quick] [--gemm-only] [--config small] [--steps 10] [--repeats 6] [--reps 8 (profile rounds)]
 *                     [--one-profile] [--share auto|X] [--out FILE]
 *
 * The slow rank's CPU share: "auto" is 2/3 of what an unthrottled process gets right now
 * (the machine may be shared), so the slow rank runs at about 2/3 of the fast one's speed. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/train.h"

static double load_avg(void) {
    double la[3] = {-1, -1, -1};
    ls_load_avg(la);
    return la[0];
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { REPS_MAX = 32, NV = LS_PREC_COUNT + 1 }; /* the precisions, then int8 through the matmul primitive */

static void min_med_max(double *v, int n, double *mn, double *md, double *mx) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    *mn = v[0], *md = v[n / 2], *mx = v[n - 1];
}

/* GEMM table: per Linear kind, the forward GEMM (N, OC, IC) per precision (and int8 through
 * oneDNN's cached matmul primitive), min/median/max ms, and the split of its fastest
 * repetition into operand casts / GEMM kernel / dequantisation. */
static cJSON *gemm_table(const ls_model_config *c, int N, int reps) {
    ls_prec_ctx *ctx[2];
    if (ls_prec_ctx_new(&ctx[0]) < 0) return NULL;
    if (ls_prec_ctx_new(&ctx[1]) < 0) return NULL;
    ls_prec_ctx_set_int8_matmul(ctx[1], 1);
    int C = c->d_model, F = c->d_ff;
    int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, F}, {F, C}};
    const char *kn[4] = {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"},
               *vn[NV] = {"fp32", "bf16", "fp16", "int8", "int8-mm"};
    size_t big = (size_t)N * (F > 3 * C ? F : 3 * C), wsz = (size_t)F * 3 * C;
    float *X = malloc(big * 4), *W = malloc(wsz * 4), *Y = malloc(big * 4);
    ls_rng r;
    ls_rng_seed(&r, 1);
    for (size_t i = 0; i < big; i++) X[i] = ls_rng_normal(&r);
    for (size_t i = 0; i < wsz; i++) W[i] = 0.02f * ls_rng_normal(&r);
    double t[4][NV][REPS_MAX], sp[4][NV][3][REPS_MAX], sink[3];
    for (int rep = -1; rep < reps; rep++) /* interleaved: each round runs every shape and precision */
        for (int k = 0; k < 4; k++)
            for (int v = 0; v < NV; v++) {
                int IC = shapes[k][0], OC = shapes[k][1], q = v < LS_PREC_COUNT ? v : LS_PREC_INT8;
                ls_prec_ctx *x = ctx[v == LS_PREC_COUNT];
                ls_prec_ctx_split(x, sink);
                double t0 = ls_now();
                ls_prec_gemm(x, (ls_prec)q, 1, 0, 1, N, OC, IC, X, IC, W, IC, 0.0f, Y, OC);
                double dt = ls_now() - t0;
                if (rep < 0) continue;
                t[k][v][rep] = dt;
                ls_prec_ctx_split(x, sink);
                for (int s = 0; s < 3; s++) sp[k][v][s][rep] = q == LS_PREC_FP32 ? (s == 1 ? dt : 0) : sink[s];
            }
    cJSON *arr = cJSON_CreateArray();
    printf("GEMM at the model's Linear shapes, forward (N=%d rows), 1 thread, casts included; %d reps interleaved\n", N,
           reps);
    printf("  %-10s %-8s %9s %9s %9s %8s %9s %7s | %8s %8s %8s %9s\n", "layer", "prec", "min ms", "median ms", "max ms",
           "GFLOP/s", "vs fp32 md", "vs min", "cast ms", "gemm ms", "deq ms", "gemm/fp32");
    for (int k = 0; k < 4; k++) {
        double med32 = 0, min32 = 0;
        for (int v = 0; v < NV; v++) {
            double mn, md, mx, s3[3];
            int best = 0; /* the split of the fastest repetition: at this load medians are preempted */
            for (int rep = 1; rep < reps; rep++)
                if (t[k][v][rep] < t[k][v][best]) best = rep;
            for (int s = 0; s < 3; s++) s3[s] = sp[k][v][s][best];
            min_med_max(t[k][v], reps, &mn, &md, &mx);
            if (v == 0) med32 = md, min32 = mn;
            double gf = 2.0 * N * shapes[k][0] * shapes[k][1] / md / 1e9;
            printf("  %-10s %-8s %9.3f %9.3f %9.3f %8.1f %9.2fx %6.2fx | %8.3f %8.3f %8.3f %8.2fx\n", kn[k], vn[v],
                   mn * 1e3, md * 1e3, mx * 1e3, gf, med32 / md, min32 / mn, s3[0] * 1e3, s3[1] * 1e3, s3[2] * 1e3,
                   min32 / s3[1]);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "layer", kn[k]);
            cJSON_AddStringToObject(o, "precision", vn[v]);
            int q = v < LS_PREC_COUNT ? v : LS_PREC_INT8;
            cJSON_AddStringToObject(o, "kernel", ls_prec_kernel(ctx[v == LS_PREC_COUNT], (ls_prec)q));
            cJSON_AddNumberToObject(o, "min_ms", mn * 1e3);
            cJSON_AddNumberToObject(o, "median_ms", md * 1e3);
            cJSON_AddNumberToObject(o, "max_ms", mx * 1e3);
            cJSON_AddNumberToObject(o, "gflops", gf);
            cJSON_AddNumberToObject(o, "speedup_vs_fp32", med32 / md);
            cJSON_AddNumberToObject(o, "speedup_vs_fp32_min", min32 / mn);
            cJSON_AddNumberToObject(o, "cast_ms_at_min", s3[0] * 1e3);
            cJSON_AddNumberToObject(o, "gemm_ms_at_min", s3[1] * 1e3);
            cJSON_AddNumberToObject(o, "dequant_ms_at_min", s3[2] * 1e3);
            cJSON_AddNumberToObject(o, "gemm_only_speedup_vs_fp32_min", min32 / s3[1]);
            cJSON_AddItemToArray(arr, o);
        }
    }
    for (int v = 0; v < NV; v++)
        printf("  kernel %-8s %s\n", vn[v],
               ls_prec_kernel(ctx[v == LS_PREC_COUNT], (ls_prec)(v < LS_PREC_COUNT ? v : LS_PREC_INT8)));
    printf("  split of the fastest repetition: cast = both operands cast or quantised (scales included), gemm = the "
           "kernel alone, deq = int32 -> fp32 with the scales; gemm/fp32 = fp32's min over the kernel alone\n");
    free(X), free(W), free(Y);
    ls_prec_ctx_free(ctx[0]);
    ls_prec_ctx_free(ctx[1]);
    return arr;
}

int main(int argc, char **argv) {
    ls_runtime_reexec(argv, LS_REEXEC_BLAS_CORE); /* OpenBLAS kernels, even on a CPU it does not know */
    int quick = 0, steps = 10, reps = 8, gemm_only = 0, repeats = 6, reprofile = 1;
    const char *config = "small", *out = NULL, *share_arg = "auto";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--gemm-only"))
            gemm_only = 1;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--share") && i + 1 < argc)
            share_arg = argv[++i];
        else if (!strcmp(argv[i], "--one-profile"))
            reprofile = 0;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else {
            fprintf(stderr, "usage: bench_qsync [--quick] [--gemm-only] [--config NAME] [--steps N] [--repeats N] "
                            "[--reps N] [--one-profile] [--share auto|X] [--out FILE]\n");
            return 2;
        }
    }
    if (quick && !gemm_only) config = "tiny", steps = 4, reps = 3, repeats = 2;
    if (steps < 2) steps = 2;
    if (repeats < 1) repeats = 1;
    ls_model_set_threads(1);
    char self[4096], bin[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = '\0';
    snprintf(bin, sizeof bin, "%s/llmsys", dirname(self));
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "bench_qsync: %s not found (build the llmsys target)\n", bin);
        return 1;
    }
    ls_model_config mc;
    if (ls_model_config_named(config, &mc) < 0) {
        fprintf(stderr, "bench_qsync: %s\n", ls_errmsg());
        return 2;
    }
    int batch = 8, seq = quick ? 32 : mc.n_ctx;
    double load0 = load_avg();
    printf("bench_qsync: config %s, global batch %d x seq %d, 2 ranks x 1 thread, %d steps per run; cores %d, load "
           "average %.2f; CPU avx512_bf16=%d avx512_vnni=%d avx2=%d; OpenBLAS kernels %s\n\n",
           config, batch, seq, steps, ls_num_cores(), load0, !!__builtin_cpu_supports("avx512bf16"),
           !!__builtin_cpu_supports("avx512vnni"), !!__builtin_cpu_supports("avx2"), ls_cpu_blas_core_picked());
    cJSON *J = cJSON_CreateObject();
    cJSON_AddStringToObject(J, "bench", "qsync");
    cJSON_AddStringToObject(J, "openblas_core", ls_cpu_blas_core_picked());
    cJSON_AddStringToObject(J, "config", config);
    cJSON_AddNumberToObject(J, "load_start", load0);
    cJSON_AddItemToObject(J, "gemm", gemm_table(&mc, batch / 2 * seq, quick ? 5 : 15));
    if (gemm_only) { /* the GEMM table alone, at the config's shapes */
        int rc = out && ls_json_write_file(out, J) < 0 ? 1 : 0;
        cJSON_Delete(J);
        return rc;
    }

    /* corpus: the system's license texts, else the repository's docs */
    const char *paths[1] = {"/usr/share/common-licenses"};
    if (!ls_is_dir(paths[0])) paths[0] = LLMSYS_SOURCE_DIR "/docs";
    ls_corpus *corpus = NULL;
    if (ls_corpus_load(&corpus, paths, 1, NULL) < 0) {
        fprintf(stderr, "bench_qsync: %s\n", ls_errmsg());
        return 1;
    }
    double frac = ls_tplan_exp_cpu_fraction(), share = !strcmp(share_arg, "auto") ? frac * 2 / 3 : atof(share_arg);
    if (!(share > 0)) share = 0.5;
    if (share < 0.1) share = 0.1; /* the kernel's minimum quota is 1 ms of a 10 ms period */
    char dir[] = "/tmp/llmsys-bench-qsync-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    /* the uniform plans are configurations the profile ran; the two fixed mixes (a precision per
     * Linear kind: qkv, proj, fc, mlp.proj) are not: they test how the replayer composes costs */
    enum { NP = 7 };
    const ls_tplan_exp_row want[NP] = {
        {.name = "fp32", .strategy = LS_TPLAN_FP32, .uniform = -1},
        {.name = "uniform-bf16", .strategy = LS_TPLAN_UNIFORM, .uniform = LS_PREC_BF16, .eq_time = 1},
        {.name = "uniform-fp16", .strategy = LS_TPLAN_UNIFORM, .uniform = LS_PREC_FP16},
        {.name = "uniform-int8", .strategy = LS_TPLAN_UNIFORM, .uniform = LS_PREC_INT8},
        {.name = "qsync", .strategy = LS_TPLAN_QSYNC, .uniform = -1, .eq_time = 1},
        {.name = "mix-a", .fixed = 1, .kinds = {LS_PREC_BF16, LS_PREC_FP32, LS_PREC_INT8, LS_PREC_FP16}},
        {.name = "mix-b", .fixed = 1, .kinds = {LS_PREC_FP16, LS_PREC_INT8, LS_PREC_BF16, LS_PREC_FP32}}};
    ls_tplan_exp e = {.bin = bin,
                      .config = config,
                      .data = paths[0],
                      .dir = dir,
                      .batch = batch,
                      .seq = seq,
                      .steps = steps,
                      .repeats = repeats,
                      .reps = reps,
                      .share = share,
                      .reprofile = reprofile};
    ls_tplan_exp_row rows[NP];
    double prof_s = 0;
    ls_tplan *p = malloc(sizeof *p);
    printf("\nslow rank: CPU share %.3f (an unthrottled process gets %.2f of a core now); %d interleaved runs of "
           "every plan x %d steps\n",
           share, frac, repeats, steps);
    fflush(stdout);
    int rc = ls_tplan_exp_run(&e, corpus, NP, want, p, rows, &prof_s);
    if (rc < 0) {
        fprintf(stderr, "bench_qsync: %s\n", ls_errmsg());
        return 1;
    }
    /* planning time: the allocation alone, here and for a catalog cluster */
    ls_plan_catalog *cat = NULL;
    double alloc_local = p->solve_s, alloc_cat = NAN;
    if (ls_plan_catalog_load(NULL, &cat) == LS_OK) {
        ls_tplan *g = malloc(sizeof *g);
        memcpy(g, p, sizeof *g);
        g->ranks = 4;
        char gn[4][LS_PLAN_NAME] = {"A100", "A100", "A10", "A10"};
        if (ls_tplan_model_gpus(g, cat, gn) == LS_OK && ls_tplan_allocate(g, LS_TPLAN_QSYNC, -1) == LS_OK)
            alloc_cat = g->solve_s;
        free(g);
        ls_plan_catalog_free(cat);
    }
    printf("planning: profile + indicator here %.1f s (mechanism: %s); allocation %.3f ms here, %.3f ms for "
           "A100x2,A10x2 (modelled)\n",
           prof_s, p->throttle, alloc_local * 1e3, alloc_cat * 1e3);
    { /* QSync's greedy on the same profile, for comparison with the exact programme */
        ls_tplan *g = malloc(sizeof *g);
        memcpy(g, p, sizeof *g);
        if (g && ls_tplan_allocate(g, LS_TPLAN_GREEDY, -1) == LS_OK) {
            printf("allocator on this profile: total indicator %.5g (programme) vs %.5g (QSync's greedy), slow rank "
                   "predicted %.1f vs %.1f ms, target %.1f ms\n",
                   p->quality, g->quality, p->pred_s[1] * 1e3, g->pred_s[1] * 1e3, p->target_s * 1e3);
            cJSON_AddNumberToObject(J, "indicator_programme", p->quality);
            cJSON_AddNumberToObject(J, "indicator_greedy", g->quality);
        }
        free(g);
    }
    cJSON *pj = cJSON_AddObjectToObject(J, "planning");
    cJSON_AddNumberToObject(pj, "profile_s", prof_s);
    cJSON_AddNumberToObject(pj, "allocate_local_ms", alloc_local * 1e3);
    cJSON_AddNumberToObject(pj, "allocate_catalog_ms", alloc_cat * 1e3);
    cJSON_AddStringToObject(J, "throttle", p->throttle);
    cJSON_AddNumberToObject(J, "slow_share", share);
    cJSON_AddNumberToObject(J, "slow_slowdown_measured", p->dev[1].slowdown);

    printf("\npredictor: predicted vs measured iteration time (2 ranks, rank 1 throttled), held-out bits/byte after "
           "%d steps\n",
           steps);
    ls_tplan_exp_print(stdout, &e, rows, NP, p);
    cJSON *pa = cJSON_AddArrayToObject(J, "plans");
    for (int k = 0; k < NP; k++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "plan", rows[k].name);
        cJSON_AddStringToObject(o, "rank1_mix", rows[k].mix);
        cJSON_AddNumberToObject(o, "predicted_ms", rows[k].pred_s * 1e3);
        cJSON_AddNumberToObject(o, "measured_median_ms", rows[k].meas_s * 1e3);
        cJSON_AddNumberToObject(o, "measured_q1_ms", rows[k].meas_lo_s * 1e3);
        cJSON_AddNumberToObject(o, "measured_q3_ms", rows[k].meas_hi_s * 1e3);
        cJSON_AddNumberToObject(o, "steps_timed", rows[k].n_steps_timed);
        cJSON_AddNumberToObject(o, "error", (rows[k].pred_s - rows[k].meas_s) / rows[k].meas_s);
        cJSON_AddNumberToObject(o, "cpu_share_rank0", rows[k].share0);
        cJSON_AddNumberToObject(o, "cpu_share_rank1", rows[k].share1);
        cJSON_AddNumberToObject(o, "run_cpu_share_rank0", rows[k].run_share[0]);
        cJSON_AddNumberToObject(o, "run_cpu_share_rank1", rows[k].run_share[1]);
        cJSON_AddNumberToObject(o, "sync_ms", rows[k].sync_s * 1e3);
        cJSON_AddNumberToObject(o, "sync_profiled_ms", rows[k].sync_pred_s * 1e3);
        cJSON_AddNumberToObject(o, "expected_max_excess_ms", rows[k].emax_s * 1e3);
        cJSON *rm = cJSON_AddArrayToObject(o, "round_measured_ms"), *rp = cJSON_AddArrayToObject(o, "round_predicted_ms");
        for (int r = 0; r < repeats; r++) {
            cJSON_AddItemToArray(rm, cJSON_CreateNumber(rows[k].run_meas_s[r] * 1e3));
            cJSON_AddItemToArray(rp, cJSON_CreateNumber(rows[k].run_pred_s[r] * 1e3));
        }
        for (int r = 0; r < 2; r++) {
            char key[64];
            snprintf(key, sizeof key, "rank%d_compute_predicted_ms", r);
            cJSON_AddNumberToObject(o, key, rows[k].comp_pred_s[r] * 1e3);
            snprintf(key, sizeof key, "rank%d_compute_measured_ms", r);
            cJSON_AddNumberToObject(o, key, rows[k].comp_meas_s[r] * 1e3);
        }
        const char *vn[3] = {"rounds", "at_run", "at_sync"};
        const double pv[3][3] = {{rows[k].pred_rounds_s, rows[k].err_rounds, rows[k].err_rounds_max},
                                 {rows[k].pred_run_s, rows[k].err_run, rows[k].err_run_max},
                                 {rows[k].pred_sync_s, rows[k].err_sync, rows[k].err_sync_max}};
        for (int v = 0; v < 3; v++) {
            char key[64];
            snprintf(key, sizeof key, "predicted_%s_ms", vn[v]);
            cJSON_AddNumberToObject(o, key, pv[v][0] * 1e3);
            snprintf(key, sizeof key, "error_%s", vn[v]);
            cJSON_AddNumberToObject(o, key, pv[v][1]);
            snprintf(key, sizeof key, "error_%s_max_abs", vn[v]);
            cJSON_AddNumberToObject(o, key, pv[v][2]);
        }
        cJSON_AddNumberToObject(o, "heldout_bpb_equal_steps", rows[k].bpb);
        cJSON_AddNumberToObject(o, "equal_time_steps", rows[k].eq_steps);
        cJSON_AddNumberToObject(o, "heldout_bpb_equal_time", rows[k].eq_bpb);
        cJSON_AddItemToArray(pa, o);
    }
    double err[4][2];
    ls_tplan_exp_errors(rows, NP, err);
    const char *en[4] = {"profile", "rounds", "at_run", "at_sync"};
    for (int v = 0; v < 4; v++) {
        char key[64];
        snprintf(key, sizeof key, "predictor_%s_mean_abs_error", en[v]);
        cJSON_AddNumberToObject(J, key, err[v][0]);
        snprintf(key, sizeof key, "predictor_%s_max_abs_error", en[v]);
        cJSON_AddNumberToObject(J, key, err[v][1]);
    }
    cJSON_AddBoolToObject(J, "reprofile", reprofile);
    cJSON_AddNumberToObject(J, "profile_cpu_share_rank0", p->dev[0].cpu_share);
    cJSON_AddNumberToObject(J, "profile_cpu_share_rank1", p->dev[1].cpu_share);
    cJSON_AddNumberToObject(J, "profile_step_cv", p->step_cv);
    cJSON_AddNumberToObject(J, "sync_profiled_ms", p->allreduce_s * 1e3);
    int same = !strcmp(rows[1].mix, rows[4].mix);
    double gain_uni = rows[1].eq_bpb - rows[4].eq_bpb, gain_fp32 = rows[0].eq_bpb - rows[4].eq_bpb,
           thr_gain = rows[0].meas_s / rows[4].meas_s;
    printf("  qsync vs uniform bf16 at equal time: %+.4f bits/byte (positive: qsync better)%s; vs fp32: %+.4f\n",
           gain_uni, same ? " -- the two plans are IDENTICAL here: the difference is only their step counts" : "",
           gain_fp32);
    printf("  throughput: qsync %.2fx fp32 at the slow rank's pace (measured iterations %.1f vs %.1f ms)\n", thr_gain,
           rows[4].meas_s * 1e3, rows[0].meas_s * 1e3);
    cJSON_AddBoolToObject(J, "qsync_equals_uniform", same);
    cJSON_AddNumberToObject(J, "bpb_gain_vs_uniform", gain_uni);
    cJSON_AddNumberToObject(J, "bpb_gain_vs_fp32", gain_fp32);
    cJSON_AddNumberToObject(J, "throughput_gain_vs_fp32", thr_gain);
    double load1 = load_avg();
    cJSON_AddNumberToObject(J, "load_end", load1);
    printf("\nload average %.2f at start, %.2f at end\n", load0, load1);
    if (out && ls_json_write_file(out, J) < 0) fprintf(stderr, "bench_qsync: %s\n", ls_errmsg());
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_qsync: could not remove %s\n", dir);
    cJSON_Delete(J);
    ls_corpus_free(corpus);
    free(p);
    return 0;
}
