/* bench_train.c - data-parallel training throughput: the same global batch on 1 rank and
 * on N MPI ranks (mpirun, one machine), measured in one run, with the split of step time
 * into data, forward+backward, all-reduce and AdamW, and the parameter agreement between
 * rank counts after the same steps.
 *
 *   build/bench_train [--config small] [--batch 8] [--seq T] [--steps 6] [--ranks 1,2] [--out FILE]
 *
 * The 1-rank run is in-process (no MPI, as `llmsys train` runs); N > 1 re-launches this
 * binary under mpirun as workers. Every rank count gets the machine's cores split evenly
 * (cores / ranks threads each), so the comparison is at equal hardware. The first step
 * of each run (allocation, page faults) is not timed. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/train.h"

typedef struct {
    const char *config;
    int batch, seq, steps;
} bench_opts;

typedef struct {
    int ranks, threads;
    double step_s, tokens_s, data_s, compute_s, comm_s, update_s, loss;
} bench_result;

static ls_corpus *bench_corpus(void) {
    ls_corpus *c = NULL;
    const char *lic[1] = {"/usr/share/common-licenses"};
    if (ls_is_dir(lic[0]) && ls_corpus_load(&c, lic, 1, NULL) == LS_OK) return c;
    size_t n = 1 << 20;
    char *s = malloc(n + 64);
    if (!s) return NULL;
    ls_rng r;
    ls_rng_seed(&r, 5);
    size_t k = 0;
    while (k < n)
        k += (size_t)sprintf(s + k, "%d + %d = ?\n", (int)ls_rng_below(&r, 1000), (int)ls_rng_below(&r, 1000));
    const char *docs[1] = {s};
    size_t lens[1] = {n};
    if (ls_corpus_from_docs(&c, "generated", docs, lens, 1, NULL) != LS_OK) c = NULL;
    free(s);
    return c;
}

/* Timing of a run from the end of its first (warm-up) step. */
typedef struct {
    double t0;
    ls_train_timing before;
} bench_clock;

static int bench_step(void *ctx, ls_trainer *t, const ls_train_step_info *info) {
    bench_clock *c = ctx;
    if (info->step == 1) {
        ls_trainer_timing(t, &c->before);
        c->t0 = ls_now();
    }
    return 0;
}

/* One run on this process's ranks; rank 0 fills *res and, when params != NULL, saves
 * the final weights there. */
static int run_worker(const bench_opts *o, const char *params, bench_result *res) {
    ls_dist *d = NULL;
    LS_TRY(ls_dist_init(&d));
    int N = ls_dist_size(d), threads = ls_num_cores() / ls_dist_local_size(d);
    if (threads < 1) threads = 1;
    ls_model_set_threads(threads);
    ls_model_config mc;
    ls_corpus *c = bench_corpus();
    ls_trainer *t = NULL;
    int rc = c ? LS_OK : ls_err(LS_EINVAL, "no corpus");
    if (rc == LS_OK) rc = ls_model_config_named(o->config, &mc);
    ls_train_config tc = ls_train_defaults();
    tc.batch = o->batch;
    tc.seq = o->seq > 0 ? o->seq : mc.n_ctx;
    tc.steps = o->steps + 1;
    tc.opt.warmup_steps = 1;
    /* a fixed shard count, so every rank count samples the same global batch */
    tc.shards = o->batch;
    /* the first step (warm-up) is not timed: the hook starts the clock after it */
    bench_clock bc = {0};
    ls_train_hooks hk = {.ctx = &bc, .after_step = bench_step};
    ls_train_run_result rr = {0};
    /* collective: a rank that failed already takes part in the agreement the run starts with */
    rc = rc == LS_OK ? ls_train_corpus_run(&t, &mc, &tc, c, d, &hk, &rr) : ls_dist_agree(d, rc, NULL);
    double wall = ls_now() - bc.t0;
    float loss = rc == LS_OK && rr.n_losses ? rr.losses[rr.n_losses - 1] : 0;
    ls_train_run_result_free(&rr);
    ls_train_timing before = bc.before, after;
    if (rc == LS_OK && ls_dist_rank(d) == 0) {
        ls_trainer_timing(t, &after);
        double k = (double)o->steps;
        res->ranks = N;
        res->threads = threads;
        res->step_s = wall / k;
        res->tokens_s = (double)o->steps * tc.batch * tc.seq / wall;
        res->data_s = (after.data_s - before.data_s) / k;
        res->compute_s = (after.compute_s - before.compute_s) / k;
        res->comm_s = (after.comm_s - before.comm_s) / k;
        res->update_s = (after.update_s - before.update_s) / k;
        res->loss = loss;
        if (params) rc = ls_ckpt_save(params, ls_trainer_model(t), ls_trainer_step_index(t), NULL, LS_CKPT_WEIGHTS);
    }
    if (rc == LS_OK) rc = ls_dist_agree(d, rc, NULL);
    ls_trainer_free(t);
    ls_corpus_free(c);
    ls_dist_free(d);
    return rc;
}

static int result_write(const char *path, const bench_result *r) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return ls_err(LS_ENOMEM, "out of memory");
    cJSON_AddNumberToObject(j, "ranks", r->ranks);
    cJSON_AddNumberToObject(j, "threads", r->threads);
    cJSON_AddNumberToObject(j, "step_s", r->step_s);
    cJSON_AddNumberToObject(j, "tokens_s", r->tokens_s);
    cJSON_AddNumberToObject(j, "data_s", r->data_s);
    cJSON_AddNumberToObject(j, "compute_s", r->compute_s);
    cJSON_AddNumberToObject(j, "comm_s", r->comm_s);
    cJSON_AddNumberToObject(j, "update_s", r->update_s);
    cJSON_AddNumberToObject(j, "loss", r->loss);
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}

static int result_read(const char *path, bench_result *r) {
    cJSON *j;
    LS_TRY(ls_json_read_file(path, &j));
    ls_json_get_int(j, "ranks", 0, &r->ranks);
    ls_json_get_int(j, "threads", 0, &r->threads);
    ls_json_get_double(j, "step_s", 0, &r->step_s);
    ls_json_get_double(j, "tokens_s", 0, &r->tokens_s);
    ls_json_get_double(j, "data_s", 0, &r->data_s);
    ls_json_get_double(j, "compute_s", 0, &r->compute_s);
    ls_json_get_double(j, "comm_s", 0, &r->comm_s);
    ls_json_get_double(j, "update_s", 0, &r->update_s);
    ls_json_get_double(j, "loss", 0, &r->loss);
    cJSON_Delete(j);
    return LS_OK;
}

/* Runs this binary as `mpirun -np n <self> --worker ...` and waits for it. */
static int launch(int n, const bench_opts *o, const char *result, const char *params) {
    char np[16], b[16], t[16], s[16];
    snprintf(b, sizeof b, "%d", o->batch);
    snprintf(t, sizeof t, "%d", o->seq);
    snprintf(s, sizeof s, "%d", o->steps);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return ls_err(LS_EIO, "cannot find this binary");
    self[len] = '\0';
    char *av[LS_DIST_MPIRUN_ARGC + 16];
    int k = ls_dist_mpirun_args(av, np, n);
    av[k++] = self;
    av[k++] = "--worker";
    av[k++] = "--config";
    av[k++] = (char *)o->config;
    av[k++] = "--batch";
    av[k++] = b;
    av[k++] = "--seq";
    av[k++] = t;
    av[k++] = "--steps";
    av[k++] = s;
    av[k++] = "--result";
    av[k++] = (char *)result;
    av[k++] = "--params";
    av[k++] = (char *)params;
    av[k] = NULL;
    pid_t pid = fork();
    if (pid < 0) return ls_err(LS_EIO, "fork failed");
    if (pid == 0) {
        execvp("mpirun", av);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return ls_err(LS_EIO, "waitpid failed");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return ls_err(LS_EMPI, "mpirun -np %d exited with status %d", n, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return LS_OK;
}

static double max_param_diff(const char *a, const char *b) {
    ls_model *ma = NULL, *mb = NULL;
    double d = -1;
    if (ls_ckpt_load(a, LS_CKPT_WEIGHTS, &ma, NULL) == LS_OK && ls_ckpt_load(b, LS_CKPT_WEIGHTS, &mb, NULL) == LS_OK &&
        ls_model_num_params(ma) == ls_model_num_params(mb)) {
        d = 0;
        const float *pa = ls_model_params(ma), *pb = ls_model_params(mb);
        for (size_t i = 0; i < ls_model_num_params(ma); i++) d = fmax(d, fabs((double)pa[i] - (double)pb[i]));
    }
    if (ma) ls_model_free(ma);
    if (mb) ls_model_free(mb);
    return d;
}

static int usage(void) {
    fprintf(stderr,
            "usage: bench_train [--config NAME] [--batch B] [--seq T] [--steps N] [--ranks 1,2] [--out FILE]\n");
    return 2;
}

int main(int argc, char **argv) {
    /* ranks and other processes share the cores: spinning OpenMP workers would steal them */
    ls_runtime_reexec(argv, LS_REEXEC_ALL);
    bench_opts o = {"small", 8, 0, 6};
    const char *out = NULL, *ranks = "1,2", *result = NULL, *params = NULL;
    int worker = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--worker")) {
            worker = 1;
            continue;
        }
        if (i + 1 >= argc) return usage();
        if (!strcmp(a, "--config"))
            o.config = argv[++i];
        else if (!strcmp(a, "--batch"))
            o.batch = atoi(argv[++i]);
        else if (!strcmp(a, "--seq"))
            o.seq = atoi(argv[++i]);
        else if (!strcmp(a, "--steps"))
            o.steps = atoi(argv[++i]);
        else if (!strcmp(a, "--ranks"))
            ranks = argv[++i];
        else if (!strcmp(a, "--out"))
            out = argv[++i];
        else if (!strcmp(a, "--result"))
            result = argv[++i];
        else if (!strcmp(a, "--params"))
            params = argv[++i];
        else
            return usage();
    }
    if (o.batch < 1 || o.steps < 1 || o.seq < 0) return usage();
    if (worker) {
        bench_result r = {0};
        int rc = run_worker(&o, params, &r);
        if (rc == LS_OK && r.ranks > 0 && result) rc = result_write(result, &r);
        if (rc < 0) fprintf(stderr, "bench_train worker: %s\n", ls_errmsg());
        return rc < 0 ? 1 : 0;
    }

    char dir[] = "/tmp/llmsys-bench-train-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    double la[3];
    ls_load_avg(la);
    double load = la[0];
    ls_model_config mc;
    if (ls_model_config_named(o.config, &mc) < 0) {
        fprintf(stderr, "bench_train: %s\n", ls_errmsg());
        return 2;
    }
    if (o.seq == 0) o.seq = mc.n_ctx;
    printf("bench_train: %s (%zu params), global batch %d x %d tokens, %d timed steps, %d cores, OpenBLAS kernels %s, "
           "load average %.2f\n\n",
           o.config, ls_model_config_num_params(&mc), o.batch, o.seq, o.steps, ls_num_cores(),
           ls_cpu_blas_core_picked(), load);
    printf("%6s %8s %9s %10s %8s %9s %14s %7s %8s %14s\n", "ranks", "threads", "step s", "tokens/s", "speedup",
           "fwd+bwd s", "allreduce+wait", "share", "adamw s", "max|dp| vs 1");
    cJSON *jr = cJSON_CreateArray();
    bench_result base = {0};
    char base_params[256] = "";
    int failed = 0;
    for (const char *p = ranks; *p;) {
        int n = atoi(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
        if (n < 1 || o.batch % n != 0) {
            fprintf(stderr, "bench_train: skipping %d ranks (must divide the batch %d)\n", n, o.batch);
            continue;
        }
        char res_path[256], par_path[256];
        snprintf(res_path, sizeof res_path, "%s/r%d.json", dir, n);
        snprintf(par_path, sizeof par_path, "%s/p%d.safetensors", dir, n);
        bench_result r = {0};
        int rc = n == 1 ? run_worker(&o, par_path, &r) : launch(n, &o, res_path, par_path);
        if (rc == LS_OK && n > 1) rc = result_read(res_path, &r);
        if (rc < 0) {
            fprintf(stderr, "bench_train: %d ranks: %s\n", n, ls_errmsg());
            failed = 1;
            continue;
        }
        if (base.ranks == 0) {
            base = r;
            snprintf(base_params, sizeof base_params, "%s", par_path);
        }
        double diff = strcmp(base_params, par_path) ? max_param_diff(base_params, par_path) : 0;
        double share = r.comm_s / r.step_s;
        printf("%6d %8d %9.3f %10.0f %7.2fx %9.3f %14.4f %6.1f%% %8.3f %14.2g\n", r.ranks, r.threads, r.step_s,
               r.tokens_s, r.tokens_s / base.tokens_s, r.compute_s, r.comm_s, 100 * share, r.update_s, diff);
        cJSON *e = cJSON_CreateObject();
        if (e) {
            cJSON_AddNumberToObject(e, "ranks", r.ranks);
            cJSON_AddNumberToObject(e, "threads_per_rank", r.threads);
            cJSON_AddNumberToObject(e, "step_s", r.step_s);
            cJSON_AddNumberToObject(e, "tokens_per_s", r.tokens_s);
            cJSON_AddNumberToObject(e, "speedup_vs_first", r.tokens_s / base.tokens_s);
            cJSON_AddNumberToObject(e, "forward_backward_s", r.compute_s);
            cJSON_AddNumberToObject(e, "allreduce_s", r.comm_s);
            cJSON_AddNumberToObject(e, "allreduce_share", share);
            cJSON_AddNumberToObject(e, "adamw_s", r.update_s);
            cJSON_AddNumberToObject(e, "data_s", r.data_s);
            cJSON_AddNumberToObject(e, "allreduce_gbps",
                                    r.ranks > 1 && r.comm_s > 0 ? 4.0 * ls_model_config_num_params(&mc) / r.comm_s / 1e9
                                                                : 0);
            cJSON_AddNumberToObject(e, "max_param_diff_vs_first", diff);
            cJSON_AddNumberToObject(e, "final_loss", r.loss);
            cJSON_AddItemToArray(jr, e);
        }
    }
    printf("\nspeedup: tokens/s relative to the first row, same global batch, same cores in total;\n"
           "max|dp|: largest parameter difference after the same steps (float summation order only);\n"
           "allreduce+wait: the all-reduce including the wait for the slowest rank.\n");
    if (out) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "bench", "train");
        cJSON_AddStringToObject(j, "config", o.config);
        cJSON_AddNumberToObject(j, "params", (double)ls_model_config_num_params(&mc));
        cJSON_AddNumberToObject(j, "batch", o.batch);
        cJSON_AddNumberToObject(j, "seq", o.seq);
        cJSON_AddNumberToObject(j, "steps", o.steps);
        cJSON_AddNumberToObject(j, "cores", ls_num_cores());
        cJSON_AddStringToObject(j, "openblas_core", ls_cpu_blas_core_picked());
        cJSON_AddNumberToObject(j, "load_average", load);
        cJSON_AddItemToObject(j, "runs", jr);
        jr = NULL;
        if (ls_json_write_file(out, j) < 0) {
            fprintf(stderr, "bench_train: %s\n", ls_errmsg());
            failed = 1;
        }
        cJSON_Delete(j);
    }
    cJSON_Delete(jr);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) failed = 1;
    return failed;
}
