/* test_job.c - a whole training job as `llmsys train` runs it (ls_train_job_*): the option
 * checks at their bounds and the defaults they fill, the world size a precision plan is
 * checked for, and a short run stopped and resumed: its result, report and saved settings. */
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmsys/train.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-trainjob-XXXXXX";
static char data[256];
static const char *paths[1] = {data};

/* a valid fresh job on the tiny config (n_ctx 64), 4 steps */
static ls_train_job base(void) {
    ls_train_job o = ls_train_job_defaults();
    o.data = paths, o.n_data = 1;
    o.config = "tiny";
    o.steps = 4;
    o.out = "unused.safetensors";
    return o;
}

/* base() with one field set: ls_train_job_check gives want */
#define CHECK_JOB(field, value, want)                                                                                  \
    do {                                                                                                               \
        ls_train_job o_ = base();                                                                                      \
        o_.field = (value);                                                                                            \
        int rc_ = ls_train_job_check(&o_, 0);                                                                          \
        CHECK_MSG(rc_ == (want), "%s = %s: %d (%s)", #field, #value, rc_, rc_ ? ls_errmsg() : "ok");                   \
    } while (0)

static int plan_ranks = -1;
static int plan_check(const char *path, int ranks) {
    (void)path;
    plan_ranks = ranks;
    return LS_OK;
}

/* every bound on its two sides (the CLI's tests reach only values far outside) */
static void test_check_bounds(void) {
    CHECK_JOB(seq, 64, LS_OK); /* the whole context */
    CHECK_JOB(seq, 65, LS_EINVAL);
    CHECK_JOB(lr, 9.99, LS_OK);
    CHECK_JOB(lr, 10.0, LS_EINVAL); /* (0, 10): open */
    CHECK_JOB(warmup, 0, LS_OK);
    CHECK_JOB(warmup, -1, LS_EINVAL);
    CHECK_JOB(weight_decay, 0.0, LS_OK);
    CHECK_JOB(weight_decay, -0.1, LS_EINVAL);
    CHECK_JOB(seed, 0, LS_OK);
    CHECK_JOB(seed, -1, LS_EINVAL);
    CHECK_JOB(stop_at, 4, LS_OK); /* the last step */
    CHECK_JOB(stop_at, 5, LS_EINVAL);
    CHECK_JOB(heldout, 0.5, LS_OK);
    CHECK_JOB(heldout, 0.51, LS_EINVAL);
    CHECK_JOB(threads, LS_MODEL_MAX_THREADS, LS_OK);
    CHECK_JOB(threads, LS_MODEL_MAX_THREADS + 1, LS_EINVAL);
    /* 1024 ranks of one row each; 1025 is past the bound whatever the batch */
    ls_train_job o = base();
    o.ranks = o.batch = 1024;
    o.seq = 8;
    CHECK_MSG(ls_train_job_check(&o, 0) == LS_OK, "%s", ls_errmsg());
    o = base();
    o.ranks = o.batch = 1025;
    o.seq = 8;
    CHECK(ls_train_job_check(&o, 0) == LS_EINVAL && strstr(ls_errmsg(), "--ranks must be in [1, 1024]"));
    /* a resumed run's batch is the checkpoint's: 3 ranks are not checked against the default 8 */
    o = ls_train_job_defaults();
    o.data = paths, o.n_data = 1, o.out = "unused.safetensors", o.resume = "saved.safetensors", o.ranks = 3;
    CHECK_MSG(ls_train_job_check(&o, 0) == LS_OK, "%s", ls_errmsg());
    CHECK_EQ_INT(o.steps, 0); /* keep the saved schedule */
    o.resume = NULL, o.steps = 4;
    CHECK(ls_train_job_check(&o, 0) == LS_EINVAL && strstr(ls_errmsg(), "does not split evenly over 3 ranks"));
}

/* the defaults a fresh run gets, and the world a precision plan is checked for */
static void test_check_fills(void) {
    ls_train_job o = ls_train_job_defaults();
    o.data = paths, o.n_data = 1, o.out = "unused.safetensors", o.steps = 3;
    CHECK(ls_train_job_check(&o, 0) == LS_OK);
    CHECK(o.config && !strcmp(o.config, "small"));
    CHECK_EQ_INT(o.batch, 8);
    CHECK_EQ_INT(o.seed, 1);
    CHECK_EQ_INT(o.steps, 3);
    o = base();
    o.precision_plan = "plan.json", o.plan_check = plan_check, o.ranks = 2;
    CHECK(ls_train_job_check(&o, 4) == LS_OK); /* under mpirun: the world it started */
    CHECK_EQ_INT(plan_ranks, 4);
    plan_ranks = -1;
    CHECK(ls_train_job_check(&o, 0) == LS_OK); /* outside it: --ranks */
    CHECK_EQ_INT(plan_ranks, 2);
}

/* j[k] is the string s */
static int str_is(const cJSON *j, const char *k, const char *s) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(j, k));
    return v && !strcmp(v, s);
}

static cJSON *read_json(const char *path) {
    cJSON *j = NULL;
    return ls_json_read_file(path, &j) == LS_OK ? j : NULL;
}

/* The settings saved in a checkpoint (checked by the caller: NULL-safe on failure). */
static int saved_config(const char *path, ls_train_config *tc) {
    ls_model *m = NULL;
    ls_ckpt_state st = {0};
    int rc = ls_ckpt_load(path, LS_CKPT_WEIGHTS, &m, &st);
    if (rc == LS_OK) rc = st.train_json ? ls_train_config_from_json(st.train_json, tc) : LS_EFORMAT;
    ls_ckpt_state_free(&st);
    ls_model_free(m);
    return rc;
}

/* 20 steps stopped at 10, then resumed to the end: result, report and saved settings */
static void test_run_and_resume(void) {
    ls_dist *d;
    CHECK(ls_dist_init(&d) == LS_OK);
    char a[300], b[300], ra[300], rb[300];
    snprintf(a, sizeof a, "%s/a.safetensors", dir), snprintf(b, sizeof b, "%s/b.safetensors", dir);
    snprintf(ra, sizeof ra, "%s/a.json", dir), snprintf(rb, sizeof rb, "%s/b.json", dir);
    ls_train_job o = ls_train_job_defaults();
    o.data = paths, o.n_data = 1, o.config = "tiny", o.batch = 2, o.seq = 16, o.steps = 20, o.stop_at = 10;
    o.lr = 1e-3, o.weight_decay = 0.05, o.threads = 1, o.out = a, o.report = ra;
    CHECK(ls_train_job_check(&o, 0) == LS_OK);
    ls_train_job_result r;
    CHECK_MSG(ls_train_job_run(&o, d, &r) == LS_OK, "%s", ls_errmsg());
    CHECK_EQ_INT(r.start_step, 0);
    CHECK_EQ_INT(r.end_step, 10);
    CHECK_EQ_INT(r.steps, 20);
    CHECK_EQ_INT(r.n_losses, 10);
    CHECK_EQ_INT(r.started, 1);
    cJSON *j = read_json(ra), *l = j ? cJSON_GetObjectItem(j, "losses") : NULL;
    CHECK(cJSON_GetArraySize(l) == 10);
    if (cJSON_GetArraySize(l) == 10) {
        CHECK((float)cJSON_GetArrayItem(l, 0)->valuedouble == r.first_loss);
        CHECK((float)cJSON_GetArrayItem(l, 9)->valuedouble == r.last_loss);
        CHECK(r.first_loss != r.last_loss);
    }
    CHECK(str_is(j, "out", a));
    CHECK(j && !cJSON_GetObjectItem(j, "resumed_from") && cJSON_GetObjectItem(j, "train_bytes"));
    cJSON_Delete(j);
    /* the saved settings: the given ones, warmup = steps / 10, the data's fingerprint */
    ls_corpus_opts co = ls_corpus_defaults();
    co.heldout_frac = o.heldout;
    ls_corpus *c = NULL;
    CHECK(ls_corpus_load(&c, paths, 1, &co) == LS_OK);
    uint64_t h = c ? ls_corpus_hash(c) : 0;
    ls_corpus_free(c);
    ls_train_config tc = {0};
    CHECK(saved_config(a, &tc) == LS_OK);
    CHECK_EQ_INT(tc.batch, 2);
    CHECK_EQ_INT(tc.seq, 16);
    CHECK_EQ_INT(tc.steps, 20);
    CHECK_EQ_INT(tc.opt.warmup_steps, 2);
    CHECK(tc.opt.lr == 1e-3f && tc.opt.weight_decay == 0.05f);
    CHECK(h != 0 && tc.data_hash == h);
    /* resumed: steps 10..20 of the saved schedule, named in the report */
    ls_train_job o2 = ls_train_job_defaults();
    o2.data = paths, o2.n_data = 1, o2.resume = a, o2.threads = 1, o2.out = b, o2.report = rb;
    CHECK(ls_train_job_check(&o2, 0) == LS_OK);
    CHECK_MSG(ls_train_job_run(&o2, d, &r) == LS_OK, "%s", ls_errmsg());
    CHECK_EQ_INT(r.start_step, 10);
    CHECK_EQ_INT(r.end_step, 20);
    CHECK_EQ_INT(r.n_losses, 10);
    j = read_json(rb);
    CHECK(str_is(j, "resumed_from", a));
    cJSON_Delete(j);
    CHECK(saved_config(b, &tc) == LS_OK && tc.data_hash == h && tc.opt.warmup_steps == 2);
    ls_dist_free(d);
    unlink(a), unlink(b), unlink(ra), unlink(rb);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    snprintf(data, sizeof data, "%s/corpus.txt", dir);
    FILE *f = fopen(data, "w");
    if (!f) return 1;
    for (int i = 0; i < 600; i++) fprintf(f, "line %d: the job reads its data, trains and saves what it ran.\n", i);
    fclose(f);
    RUN(test_check_bounds);
    RUN(test_check_fills);
    RUN(test_run_and_resume);
    unlink(data);
    rmdir(dir);
    return TEST_RESULT();
}
