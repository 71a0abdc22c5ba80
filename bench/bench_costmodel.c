/* bench_costmodel.c - the planner's analytical GPU cost model (datasheet figures, src/plan/cost.c)
 * against one transformer layer measured on that GPU: a device profile written by
 * scripts/gpu_layer_profile.py (data/profiles/ holds H200 runs). For every measured row it
 * prints the measured time, the analytical prediction, the prediction of the profile's own
 * linear fit (what the planner uses when a cluster names the profile) and the floor from the
 * ceilings measured in the same run (GEMM rate, copy bandwidth); then per phase and bit width
 * min/median/max of modelled/measured, and the efficiencies the model assumes against those
 * achieved. Then what the difference does to a plan: splitquant on N such GPUs (default 2) from
 * the datasheet and from the measurements, each plan scored by the measured costs.
 * No GPU is needed to run it: the measurements are in the file.
 * Usage: bench_costmodel [--profile FILE]... [--gpu NAME] [--model NAME] [--gpus N] [--out FILE] [--quiet]
 * (default: every .json file in data/profiles). */
#include <cjson/cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/plan.h"

enum { MAX_ROWS = 512, N_PHASE = 2 };

typedef struct {
    int phase, bits, batch, len; /* phase 0 prefill (len = seq), 1 decode (len = ctx) */
    double measured, model, fit, floor;
} row_t;

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A cluster file of one node in dir: the catalog GPU, or the profile (absolute path). */
static int node_cluster(const ls_plan_catalog *cat, const char *dir, const char *tag, const char *node,
                        ls_plan_cluster **cl) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", dir, tag);
    FILE *f = fopen(path, "w");
    if (!f) return ls_err(LS_EIO, "%s: cannot write", path);
    fprintf(f, "{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"%s\",\"nodes\":[%s]}\n", tag, node);
    if (fclose(f)) return ls_err(LS_EIO, "%s: cannot write", path);
    int rc = ls_plan_cluster_load(cat, path, cl);
    unlink(path);
    return rc;
}

/* KV cache bytes one decode step of a layer reads: batch sequences of ctx + 1 tokens (the
 * planner's per-layer KV size for that many tokens). */
static double kv_read(const ls_plan_arch *a, int batch, int ctx) {
    return ls_plan_layer_kv_bytes(a, &(ls_plan_workload){batch, ctx + 1, 0});
}

static int read_rows(const cJSON *arr, int phase, const char *key, row_t *rows, int *n, const char *path) {
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        row_t r = {.phase = phase};
        if (ls_json_get_int(e, "bits", 0, &r.bits) || ls_json_get_int(e, "batch", 0, &r.batch) ||
            ls_json_get_int(e, key, 0, &r.len) || ls_json_get_double(e, "seconds", -1, &r.measured))
            return ls_err_wrap(LS_EFORMAT, "%s: %s row %d", path, phase ? "decode" : "prefill", *n);
        if (ls_plan_bits_index(r.bits) < 0 || r.batch <= 0 || r.len <= 0 || !(r.measured > 0))
            return ls_err(LS_EFORMAT, "%s: %s row %d: bits one of 3/4/8/16, batch, %s and seconds > 0", path,
                          phase ? "decode" : "prefill", *n, key);
        if (*n >= MAX_ROWS) return ls_err(LS_EFORMAT, "%s: more than %d rows", path, MAX_ROWS);
        rows[(*n)++] = r;
    }
    return LS_OK;
}

/* min, median, max of v[0..n) (sorted in place) */
static void spread(double *v, int n, double out[3]) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    out[0] = v[0], out[2] = v[n - 1];
    out[1] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static cJSON *triple(const double t[3]) { return cJSON_CreateDoubleArray(t, 3); }

/* splitquant from the datasheet (ds) and from the measurements (ms), both scored by the
 * measured costs: how much a datasheet-planned deployment leaves on the table here. */
static int plan_both(const ls_plan_arch *a, const ls_plan_cluster *ds, const ls_plan_cluster *ms, cJSON *jr) {
    ls_plan_problem *p = malloc(2 * sizeof *p);
    ls_plan_result *r = malloc(3 * sizeof *r);
    const ls_plan_cluster *cls[2] = {ds, ms};
    int rc = p && r ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    for (int k = 0; k < 2 && rc == LS_OK; k++) {
        rc = ls_plan_problem_init(&p[k], a, cls[k], (ls_plan_workload){32, 512, 100});
        if (rc == LS_OK) rc = ls_plan_problem_set_quality(&p[k], (ls_plan_qtarget){LS_PLAN_Q_BITS, 4});
        /* only the widths measured (3-bit has no kernel there), for both plans */
        p[k].bits_mask = 0;
        for (int b = 0; b < LS_PLAN_NBITS; b++) p[k].bits_mask |= ms->prof[0].has_bits[b] << b;
        if (rc == LS_OK) rc = ls_plan_solve(&p[k], LS_PLAN_ALGO_SPLITQUANT, &r[k]);
    }
    if (rc == LS_OK) {
        r[2] = r[0]; /* the datasheet's plan on the measured costs */
        rc = ls_plan_evaluate(&p[1], &r[2]);
        if (rc == LS_EINFEASIBLE) rc = LS_OK; /* still scored; said below */
    }
    if (rc == LS_OK) {
        const char *what[3] = {"planned from the datasheet, as the datasheet predicts", "planned from the measurements",
                               "planned from the datasheet, scored by the measurements"};
        const int order[3] = {0, 2, 1};
        printf("\nPlanning %s on %d x %s, batch 32, prompt 512, gen 100, quality bits:4 (splitquant; times modelled\n"
               "from the per-layer costs, measured or datasheet; the widths measured):\n%-56s %10s %10s %11s\n",
               a->name, ds->n_dev, ds->dev[0].gpu.name, "", "tok/s", "mb pre/dec", "bits 3/4/8/16");
        cJSON *jp = cJSON_AddArrayToObject(jr, "plans");
        for (int i = 0; i < 3; i++) {
            const ls_plan_result *x = &r[order[i]];
            int nb[LS_PLAN_NBITS] = {0};
            for (int l = 0; l < a->n_layer; l++) nb[ls_plan_bits_index(x->bits[l])]++;
            printf("%-56s %10.1f %5d/%-4d %2d/%d/%d/%d\n", what[order[i]], x->throughput_tok_s, x->mb_prefill,
                   x->mb_decode, nb[0], nb[1], nb[2], nb[3]);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "plan", what[order[i]]);
            cJSON_AddNumberToObject(o, "tok_s", x->throughput_tok_s);
            cJSON_AddItemToObject(o, "layers_at_bits_3_4_8_16", cJSON_CreateIntArray(nb, LS_PLAN_NBITS));
            cJSON_AddItemToArray(jp, o);
        }
        printf("measured plan over the datasheet's plan, both scored by the measurements: %.2fx\n",
               r[1].throughput_tok_s / r[2].throughput_tok_s);
        cJSON_AddNumberToObject(jr, "measured_plan_gain", r[1].throughput_tok_s / r[2].throughput_tok_s);
    }
    free(p);
    free(r);
    return rc;
}

/* One profile: the row table, the summary, the efficiencies and the plans, into jr. */
static int check_profile(const ls_plan_catalog *cat, const char *prof_path, const char *gpu, const char *model,
                         int n_gpu, int quiet, cJSON *jr) {
    ls_plan_cluster *cl_gpu = NULL, *cl_prof = NULL;
    cJSON *pj = NULL;
    row_t *rows = malloc(sizeof(row_t) * MAX_ROWS);
    char dir[] = "/tmp/llmsys-costmodel-XXXXXX", abs_prof[4096], node[4200];
    int n = 0, rc = rows ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK && !mkdtemp(dir)) rc = ls_err(LS_EIO, "cannot make a temp directory");
    if (rc == LS_OK) rc = ls_json_read_format(prof_path, "llmsys-profile", 1, &pj);
    const char *dev = "?";
    if (rc == LS_OK) rc = ls_json_get_string(pj, "device", "?", &dev);
    if (rc == LS_OK && !model) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(pj, "model");
        rc = ls_json_get_string(m, "name", NULL, &model);
        if (rc == LS_OK && !model) rc = ls_err(LS_EFORMAT, "%s: no \"model\".\"name\": give --model", prof_path);
    }
    ls_plan_arch a;
    if (rc == LS_OK) rc = ls_plan_catalog_model(cat, model, &a);
    if (rc == LS_OK) {
        snprintf(node, sizeof node, "{\"gpu\":\"%s\",\"count\":%d}", gpu, n_gpu);
        rc = node_cluster(cat, dir, "datasheet", node, &cl_gpu);
    }
    if (rc == LS_OK && !realpath(prof_path, abs_prof)) rc = ls_err(LS_EIO, "%s: cannot resolve the path", prof_path);
    if (rc == LS_OK) {
        snprintf(node, sizeof node, "{\"profile\":\"%s\",\"count\":%d,\"memory_GB\":%g}", abs_prof, n_gpu,
                 ls_plan_usable_bytes(cl_gpu->dev[0].gpu.mem_bytes) / 1e9);
        rc = node_cluster(cat, dir, "measured", node, &cl_prof);
    }
    if (rc == LS_OK) rc = read_rows(cJSON_GetObjectItemCaseSensitive(pj, "prefill"), 0, "seq", rows, &n, prof_path);
    if (rc == LS_OK) rc = read_rows(cJSON_GetObjectItemCaseSensitive(pj, "decode"), 1, "ctx", rows, &n, prof_path);
    if (rc == LS_OK && n == 0) rc = ls_err(LS_EFORMAT, "%s: no prefill or decode rows", prof_path);
    double copy_Bps = 0, fp16_fl = 0, int8_ops = 0;
    const cJSON *ce = cJSON_GetObjectItemCaseSensitive(pj, "ceilings");
    if (rc == LS_OK && ce) {
        rc = ls_json_get_double(ce, "copy_GBps", 0, &copy_Bps);
        if (rc == LS_OK) rc = ls_json_get_double(ce, "fp16_gemm_tflops", 0, &fp16_fl);
        if (rc == LS_OK) rc = ls_json_get_double(ce, "int8_gemm_tops", 0, &int8_ops);
        copy_Bps *= 1e9, fp16_fl *= 1e12, int8_ops *= 1e12;
    }
    rmdir(dir);
    if (rc != LS_OK) goto done;

    const ls_plan_gpu *g = &cl_gpu->dev[0].gpu;
    double params = ls_plan_layer_params(&a);
    for (int i = 0; i < n; i++) {
        row_t *r = &rows[i];
        double tok = r->phase ? r->batch : (double)r->batch * r->len;
        if (r->phase == 0) {
            r->model = ls_plan_layer_prefill_s(&a, cl_gpu, 0, r->bits, r->batch, r->len);
            r->fit = ls_plan_layer_prefill_s(&a, cl_prof, 0, r->bits, r->batch, r->len);
        } else {
            r->model = ls_plan_layer_decode_s(&a, cl_gpu, 0, r->bits, r->batch, r->len);
            r->fit = ls_plan_layer_decode_s(&a, cl_prof, 0, r->bits, r->batch, r->len);
        }
        /* floor: the linear layers' products at the measured GEMM rate, or the weights (and
         * the KV cache a decode step reads) at the measured copy bandwidth, whichever is more */
        double rate = r->bits == 8 && int8_ops > 0 ? int8_ops : fp16_fl;
        double bytes = ls_plan_layer_weight_bytes(&a, r->bits) + (r->phase ? kv_read(&a, r->batch, r->len) : 0);
        r->floor = rate > 0 && copy_Bps > 0 ? fmax(2 * tok * params / rate, bytes / copy_Bps) : NAN;
    }

    double la[3];
    ls_load_avg(la);
    printf("Cost model check: %s, one layer, analytical (datasheet %s: %.0f GB/s, %.0f fp16 TFLOP/s, %.0f int8 TOP/s)\n"
           "vs MEASURED on %s (%s). Floor: the same layer at the ceilings measured in that run\n"
           "(copy %.0f GB/s, fp16 GEMM %.0f TFLOP/s, int8 GEMM %.0f TOP/s). This machine's load: %.2f.\n",
           model, g->name, g->bw_Bps / 1e9, g->fp16_flops / 1e12, g->int8_ops / 1e12, dev, prof_path, copy_Bps / 1e9,
           fp16_fl / 1e12, int8_ops / 1e12, la[0]);
    if (!quiet) {
        printf("\n%-7s %4s %5s %5s %11s %11s %11s %11s %8s %8s %8s\n", "phase", "bits", "batch", "len", "measured ms",
               "model ms", "fit ms", "floor ms", "model/m", "fit/m", "m/floor");
        for (int i = 0; i < n; i++) {
            const row_t *r = &rows[i];
            printf("%-7s %4d %5d %5d %11.4f %11.4f %11.4f %11.4f %8.3f %8.3f %8.2f\n", r->phase ? "decode" : "prefill",
                   r->bits, r->batch, r->len, r->measured * 1e3, r->model * 1e3, r->fit * 1e3, r->floor * 1e3,
                   r->model / r->measured, r->fit / r->measured, r->measured / r->floor);
        }
    }
    cJSON_AddStringToObject(jr, "profile", prof_path);
    cJSON_AddStringToObject(jr, "model", model);
    cJSON_AddStringToObject(jr, "gpu", g->name);
    cJSON_AddStringToObject(jr, "device", dev);
    cJSON_AddStringToObject(jr, "note", "measured: the profile's rows; model: src/plan/cost.c from the datasheet");
    cJSON_AddNumberToObject(jr, "load_avg_1m", la[0]);
    cJSON *js = cJSON_AddArrayToObject(jr, "summary"), *jrows = cJSON_AddArrayToObject(jr, "rows");
    for (int i = 0; i < n; i++) {
        const row_t *r = &rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "phase", r->phase ? "decode" : "prefill");
        cJSON_AddNumberToObject(o, "bits", r->bits);
        cJSON_AddNumberToObject(o, "batch", r->batch);
        cJSON_AddNumberToObject(o, r->phase ? "ctx" : "seq", r->len);
        cJSON_AddNumberToObject(o, "measured_s", r->measured);
        cJSON_AddNumberToObject(o, "model_s", r->model);
        cJSON_AddNumberToObject(o, "fit_s", r->fit);
        if (isfinite(r->floor)) cJSON_AddNumberToObject(o, "floor_s", r->floor);
        cJSON_AddItemToArray(jrows, o);
    }
    printf("\n%-7s %4s %4s %22s %22s %22s\n", "phase", "bits", "rows", "model/measured", "fit/measured",
           "measured/floor");
    printf("%-7s %4s %4s %22s %22s %22s\n", "", "", "", "min / median / max", "min / median / max",
           "min / median / max");
    double *v = malloc(sizeof(double) * 3 * MAX_ROWS);
    for (int ph = 0; ph < N_PHASE && v; ph++)
        for (int k = LS_PLAN_NBITS - 1; k >= 0; k--) {
            int m = 0;
            for (int i = 0; i < n; i++)
                if (rows[i].phase == ph && rows[i].bits == ls_plan_bits[k]) {
                    v[m] = rows[i].model / rows[i].measured;
                    v[MAX_ROWS + m] = rows[i].fit / rows[i].measured;
                    v[2 * MAX_ROWS + m] = rows[i].measured / rows[i].floor;
                    m++;
                }
            if (!m) continue;
            double s[3][3];
            for (int t = 0; t < 3; t++) spread(v + t * MAX_ROWS, m, s[t]);
            printf("%-7s %4d %4d %6.2f / %5.2f / %5.2f %6.2f / %5.2f / %5.2f %6.2f / %5.2f / %5.2f\n",
                   ph ? "decode" : "prefill", ls_plan_bits[k], m, s[0][0], s[0][1], s[0][2], s[1][0], s[1][1], s[1][2],
                   s[2][0], s[2][1], s[2][2]);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "phase", ph ? "decode" : "prefill");
            cJSON_AddNumberToObject(o, "bits", ls_plan_bits[k]);
            cJSON_AddNumberToObject(o, "rows", m);
            cJSON_AddItemToObject(o, "model_over_measured", triple(s[0]));
            cJSON_AddItemToObject(o, "fit_over_measured", triple(s[1]));
            if (isfinite(s[2][1])) cJSON_AddItemToObject(o, "measured_over_floor", triple(s[2]));
            cJSON_AddItemToArray(js, o);
        }
    free(v);
    /* the model's two efficiencies against what the 16-bit rows achieved: the largest prefill
     * (compute-bound) and the batch-1 decode at the shortest context (weight streaming) */
    const row_t *big = NULL, *one = NULL;
    for (int i = 0; i < n; i++) {
        const row_t *r = &rows[i];
        if (r->bits != 16) continue;
        if (r->phase == 0 && (!big || (double)r->batch * r->len > (double)big->batch * big->len)) big = r;
        if (r->phase == 1 && r->batch == 1 && (!one || r->len < one->len)) one = r;
    }
    if (big) {
        double achieved = 2.0 * big->batch * big->len * params / big->measured;
        printf(
            "\n16-bit prefill, batch %d x %d tokens: %.0f TFLOP/s in the linear layers = %.2f of the datasheet's %.0f "
            "(the model assumes 0.55)\n",
            big->batch, big->len, achieved / 1e12, achieved / g->fp16_flops, g->fp16_flops / 1e12);
        cJSON_AddNumberToObject(jr, "prefill16_achieved_tflops", achieved / 1e12);
        cJSON_AddNumberToObject(jr, "prefill16_of_datasheet", achieved / g->fp16_flops);
    }
    if (one) {
        double achieved = (ls_plan_layer_weight_bytes(&a, 16) + kv_read(&a, 1, one->len)) / one->measured;
        printf("16-bit decode, batch 1, context %d: %.0f GB/s of weights and KV cache = %.2f of the datasheet's %.0f "
               "(the model assumes 0.80)\n",
               one->len, achieved / 1e9, achieved / g->bw_Bps, g->bw_Bps / 1e9);
        cJSON_AddNumberToObject(jr, "decode16_achieved_GBps", achieved / 1e9);
        cJSON_AddNumberToObject(jr, "decode16_of_datasheet", achieved / g->bw_Bps);
    }
    rc = plan_both(&a, cl_gpu, cl_prof, jr);
done:
    cJSON_Delete(pj);
    ls_plan_cluster_free(cl_gpu);
    ls_plan_cluster_free(cl_prof);
    free(rows);
    return rc;
}

int main(int argc, char **argv) {
    const char *prof[16], *gpu = "H200", *model = NULL, *out = NULL;
    int n_prof = 0, quiet = 0, n_gpu = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profile") && i + 1 < argc && n_prof < 16)
            prof[n_prof++] = argv[++i];
        else if (!strcmp(argv[i], "--gpu") && i + 1 < argc)
            gpu = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--gpus") && i + 1 < argc)
            n_gpu = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quiet"))
            quiet = 1;
        else {
            fprintf(stderr,
                    "usage: bench_costmodel [--profile FILE]... [--gpu NAME] [--model NAME] [--gpus N] [--out FILE] "
                    "[--quiet]\n"
                    "  FILE: a device profile of a GPU (scripts/gpu_layer_profile.py), up to 16;\n"
                    "        default: every data/profiles/*.json\n"
                    "  NAME: the catalog GPU whose datasheet model to check (default H200); the model\n"
                    "        defaults to the profile's \"model\".\"name\"\n"
                    "  N:    GPUs of the planning comparison (default 2, 1..8)\n");
            return 2;
        }
    }
    if (n_gpu < 1 || n_gpu > 8) {
        fprintf(stderr, "bench_costmodel: --gpus must be 1..8\n");
        return 2;
    }
    if (out && ls_out_path_check("out", out)) {
        fprintf(stderr, "bench_costmodel: %s\n", ls_errmsg());
        return 1;
    }
    ls_plan_catalog *cat = NULL;
    if (ls_plan_catalog_load(NULL, &cat)) {
        fprintf(stderr, "bench_costmodel: %s\n", ls_errmsg());
        return 1;
    }
    glob_t gl = {0};
    char pat[1100];
    if (!n_prof) {
        snprintf(pat, sizeof pat, "%s/profiles/*.json", ls_plan_catalog_dir(cat));
        if (glob(pat, 0, NULL, &gl) == 0)
            for (size_t i = 0; i < gl.gl_pathc && n_prof < 16; i++) prof[n_prof++] = gl.gl_pathv[i];
    }
    int rc = n_prof ? LS_OK : ls_err(LS_ENOTFOUND, "no profile: give --profile FILE (none matches %s)", pat);
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "profiles");
    cJSON_AddStringToObject(root, "bench", "costmodel");
    for (int i = 0; i < n_prof && rc == LS_OK; i++) {
        cJSON *jr = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, jr);
        if (i) printf("\n");
        rc = check_profile(cat, prof[i], gpu, model, n_gpu, quiet, jr);
    }
    if (rc == LS_OK && out) rc = ls_json_write_file(out, root);
    if (rc != LS_OK)
        fprintf(stderr, "bench_costmodel: %s\n", ls_errmsg());
    else if (out)
        printf("wrote %s\n", out);
    cJSON_Delete(root);
    globfree(&gl);
    ls_plan_catalog_free(cat);
    return rc == LS_OK ? 0 : 1;
}
