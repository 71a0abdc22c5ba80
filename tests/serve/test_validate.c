/* test_validate.c - `llmsys plan validate`'s steps before serving (ls_validate_*): the option
 * bounds the library keeps on its own (the CLI checks them first), the profile grid that
 * brackets the workload, the closed form's micro-batch counts and per-stage compute seconds
 * against the plans, the order of the steps, the report before any figure, and the temporary
 * work directory removed. Serving the plans is tests/plan/validate.sh's. */
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmsys/plan.h"
#include "llmsys/serve.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-test-validate-XXXXXX";
static char model[300];

/* tiny model (n_ctx 64), 2 stages, batch 3 x prompt 8 x gen 4, quality none */
static ls_validate_opts small(void) {
    ls_validate_opts o = ls_validate_defaults();
    o.config = "tiny";
    o.self = "llmsys"; /* only serving starts it */
    o.wl = (ls_plan_workload){3, 8, 4};
    o.reps = 1, o.runs = 1;
    o.quality = (ls_plan_qtarget){LS_PLAN_Q_NONE, 0};
    return o;
}

/* _open with the shared checkpoint and work directory: its status, v freed (_open may
 * return one on failure: the workload is checked against the model it made) */
static int open_rc(ls_validate_opts o) {
    o.model = model, o.workdir = dir;
    ls_validate *v = NULL;
    int rc = ls_validate_open(&v, &o);
    ls_validate_free(v);
    return rc;
}

#define CHECK_OPEN(field, value, want)                                                                                 \
    do {                                                                                                               \
        ls_validate_opts o_ = small();                                                                                 \
        o_.field = (value);                                                                                            \
        int rc_ = open_rc(o_);                                                                                         \
        CHECK_MSG(rc_ == (want), "%s = %s: %d (%s)", #field, #value, rc_, rc_ ? ls_errmsg() : "ok");                   \
    } while (0)

static void test_open_bounds(void) {
    /* the checkpoint the other cases share, made by the first open */
    ls_validate_opts o = small();
    o.workdir = dir;
    ls_validate *v = NULL;
    CHECK(ls_validate_open(&v, &o) == LS_OK);
    ls_validate_free(v);
    struct stat st;
    CHECK(stat(model, &st) == 0); /* kept: the work directory is the caller's */
    CHECK_OPEN(wl.prompt, 2, LS_OK);
    CHECK_OPEN(wl.prompt, 1, LS_EINVAL);
    CHECK_OPEN(wl.batch, 256, LS_OK);
    CHECK_OPEN(wl.batch, 257, LS_EINVAL);
    CHECK_OPEN(runs, LS_VALIDATE_MAX_RUNS, LS_OK); /* a plan holds that many runs */
    CHECK_OPEN(runs, LS_VALIDATE_MAX_RUNS + 1, LS_EINVAL);
    CHECK_OPEN(stages, LS_SERVE_MAX_STAGES, LS_OK);
    CHECK_OPEN(stages, LS_SERVE_MAX_STAGES + 1, LS_EINVAL);
    CHECK_OPEN(threads, 64, LS_OK);
    CHECK_OPEN(threads, 65, LS_EINVAL);
    CHECK_OPEN(reps, 100, LS_OK);
    CHECK_OPEN(reps, 101, LS_EINVAL);
    CHECK_OPEN(self, NULL, LS_EINVAL); /* serving needs the binary */
    /* prompt + gen up to the model's context of 64, not beyond */
    CHECK_OPEN(wl, ((ls_plan_workload){3, 60, 4}), LS_OK);
    CHECK_OPEN(wl, ((ls_plan_workload){3, 60, 5}), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "prompt + gen = 65 exceeds the model context 64") != NULL);
}

/* the sorted set of key k over the rows of arr, as a string ("1,2,3") */
static void row_set(const cJSON *arr, const char *k, char *out, size_t n) {
    int v[256], m = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        int x = cJSON_GetObjectItem(it, k) ? cJSON_GetObjectItem(it, k)->valueint : -1, seen = 0;
        for (int i = 0; i < m; i++) seen |= v[i] == x;
        if (!seen && m < 256) v[m++] = x;
    }
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            int t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    size_t l = 0;
    out[0] = '\0';
    for (int i = 0; i < m && l < n; i++) l += (size_t)snprintf(out + l, n - l, "%s%d", i ? "," : "", v[i]);
}

static void test_steps(void) {
    ls_validate_opts o = small();
    ls_validate *v = NULL;
    CHECK(ls_validate_open(&v, &o) == LS_OK);
    if (!v) return;
    const ls_validate_result *r = ls_validate_get(v);
    char wd[1024];
    snprintf(wd, sizeof wd, "%s", r->dir);
    CHECK(strncmp(wd, "/tmp/llmsys-validate-", 21) == 0);
    /* the steps in order: nothing to measure or solve yet */
    CHECK(ls_validate_measure(v) == LS_ESTATE);
    CHECK(ls_validate_solve(v) == LS_ESTATE);
    /* the report before any figure: no probe, no plan */
    cJSON *rep = ls_validate_report(v);
    CHECK(rep && !cJSON_GetObjectItem(rep, "host_capacity_cores") && !cJSON_GetObjectItem(rep, "idle_hop_s") &&
          !cJSON_GetObjectItem(rep, "host_capacity_first_probe"));
    CHECK(rep && cJSON_GetArraySize(cJSON_GetObjectItem(rep, "plans")) == 0);
    CHECK(rep && cJSON_GetObjectItem(rep, "stages")->valueint == 2 &&
          cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "workload"), "batch")->valueint == 3);
    cJSON_Delete(rep);
    /* the grid brackets the workload: batches 1, 2, 3 (1, 2, 4, 8, B, B/2 rounded up, at most
     * B), seqs S/2, S, 2S and contexts S, S + G/2, S + G - 1, each point once */
    CHECK(ls_validate_profile(v) == LS_OK);
    cJSON *p = NULL;
    CHECK(ls_json_read_file(r->profile, &p) == LS_OK);
    cJSON *pre = cJSON_GetObjectItem(p, "prefill"), *dec = cJSON_GetObjectItem(p, "decode");
    char s[256];
    CHECK_EQ_INT(cJSON_GetArraySize(pre), 4 * 3 * 3);
    CHECK_EQ_INT(cJSON_GetArraySize(dec), 4 * 3 * 3);
    row_set(pre, "batch", s, sizeof s);
    CHECK_MSG(!strcmp(s, "1,2,3"), "prefill batches %s", s);
    row_set(pre, "seq", s, sizeof s);
    CHECK_MSG(!strcmp(s, "4,8,16"), "prefill seqs %s", s);
    row_set(dec, "ctx", s, sizeof s);
    CHECK_MSG(!strcmp(s, "8,10,11"), "decode contexts %s", s);
    row_set(dec, "bits", s, sizeof s);
    CHECK_MSG(!strcmp(s, "3,4,8,16"), "decode bits %s", s);
    cJSON_Delete(p);
    /* the plans and what the closed form counts for them */
    CHECK(ls_validate_cluster(v) == LS_OK);
    CHECK(ls_validate_solve(v) == LS_OK);
    CHECK(ls_validate_solve(v) == LS_ESTATE); /* once */
    CHECK_EQ_INT(r->n_plans, 2);
    ls_plan_catalog *cat = NULL;
    ls_plan_cluster *cl = NULL;
    CHECK(ls_plan_catalog_load(NULL, &cat) == LS_OK && ls_plan_cluster_load(cat, r->cluster, &cl) == LS_OK);
    int split = 0, C = r->cfg.d_model;
    for (int a = 0; cl && a < r->n_plans; a++) {
        const ls_validate_plan *q = &r->plans[a];
        const ls_plan_result *x = &q->plan;
        CHECK(access(q->path, R_OK) == 0);
        /* ceil(3 / micro-batch) prefill micro-batches; decode ones for each of gen - 1 = 3 steps
         * (the first token comes from the prefill) */
        int mp = (3 + x->mb_prefill - 1) / x->mb_prefill, md = (3 + x->mb_decode - 1) / x->mb_decode;
        CHECK_EQ_INT(q->pred_mb_prefill, mp);
        CHECK_EQ_INT(q->pred_mb_decode, 3 * md);
        /* a stage's compute: its prefill and decode time less, but on the last stage, the send
         * of a micro-batch's fp32 activations to the next stage (prompt x C, or C, per sequence) */
        for (int st = 0; st < x->n_stage; st++) {
            double lp = 0, ld = 0;
            if (st < x->n_stage - 1) {
                lp = ls_plan_link_s(cl, x->dev[st], x->dev[st + 1], 4.0 * x->mb_prefill * 8 * C);
                ld = ls_plan_link_s(cl, x->dev[st], x->dev[st + 1], 4.0 * x->mb_decode * C);
                CHECK(lp > 0 && ld > 0);
            }
            double want = mp * (x->stage_prefill_s[st] - lp) + 3.0 * md * (x->stage_decode_s[st] - ld);
            CHECK_MSG(fabs(q->pred_busy_s[st] - want) <= 1e-9 * fabs(want), "%s stage %d of %d: %g, want %g",
                      ls_plan_algo_name(x->algo), st, x->n_stage, q->pred_busy_s[st], want);
        }
        split |= x->n_stage == 2;
    }
    CHECK(split); /* some plan sends between stages */
    ls_plan_cluster_free(cl);
    ls_plan_catalog_free(cat);
    ls_validate_free(v);
    /* everything it wrote is gone with the directory */
    struct stat st;
    CHECK_MSG(stat(wd, &st) != 0, "%s left behind", wd);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    RUN(test_open_bounds);
    RUN(test_steps);
    unlink(model);
    rmdir(dir);
    return TEST_RESULT();
}
