/* test_run.c - ls_train_run against a hand-written loop of ls_trainer_step: the same losses
 * and weights bit for bit, the after_step hook once per step, stops by hook and by flag
 * that save the step reached, exact resume from such a stop, periodic saves, failing hooks,
 * and before_update seeing (and changing) the gradients before AdamW. */
#include <math.h>
#include <signal.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmsys/core.h"
#include "llmsys/train.h"
#include "test.h"
#include "train/train_util.h"

enum { K = 12 };

static char dir[] = "/tmp/llmsys-trainrun-XXXXXX";
static ls_corpus *corpus;
static float ref_loss[K], ref_gn[K];
static ls_model *ref_model; /* weights after K steps of the reference loop */

static ls_corpus *make_corpus(void) {
    static const char *w[] = {"the", "model", "reads", "bytes", "and", "learns", "which", "byte", "comes", "next"};
    return test_sentences(w, 10, 40000, 11, 7);
}

static int fresh(ls_trainer **t, ls_batch_source **s, const ls_train_config *tc0);

static ls_train_config run_config(void);

/* fresh() (tc NULL: run_config()), and out (256 bytes) = dir/name. */
static int fresh_out(ls_trainer **t, ls_batch_source **s, const ls_train_config *tc, char *out, const char *name) {
    ls_train_config dflt = run_config();
    snprintf(out, 256, "%s/%s", dir, name);
    return fresh(t, s, tc ? tc : &dflt);
}

static ls_train_config run_config(void) { return test_small_run(K, 5, 2); }

/* A fresh trainer and its source; a failure counts as a failed check. */
static int fresh(ls_trainer **t, ls_batch_source **s, const ls_train_config *tc0) {
    ls_model_config mc;
    ls_train_config tc = *tc0;
    *t = NULL;
    *s = NULL;
    if (ls_model_config_named("tiny", &mc) < 0 || ls_trainer_init(t, &mc, &tc, NULL) < 0 ||
        ls_batch_source_corpus(s, corpus, &tc, 1) < 0 || ls_trainer_set_shards(*t, tc.shards) < 0) {
        fprintf(stderr, "  setup: %s\n", ls_errmsg());
        CHECK(0);
        return -1;
    }
    return 0;
}

static void done(ls_trainer *t, ls_batch_source *s) {
    ls_batch_source_free(s);
    ls_trainer_free(t);
}

static int64_t ckpt_step(const char *path) {
    ls_model *m = NULL;
    ls_ckpt_state st = {0};
    if (ls_ckpt_load(path, LS_CKPT_WITH_OPT, &m, &st) < 0) return -1;
    int64_t step = st.step;
    ls_model_free(m);
    ls_ckpt_state_free(&st);
    return step;
}

static int same_params(ls_model *a, ls_model *b) {
    return ls_model_num_params(a) == ls_model_num_params(b) &&
           !memcmp(ls_model_params(a), ls_model_params(b), ls_model_num_params(a) * sizeof(float));
}

/* The reference: K steps of ls_trainer_step by hand. */
static void test_reference(void) {
    ls_train_config tc = run_config();
    ls_trainer *t;
    ls_batch_source *s;
    if (fresh(&t, &s, &tc) < 0) return;
    for (int i = 0; i < K; i++) CHECK(ls_trainer_step(t, s, &ref_loss[i], &ref_gn[i]) == LS_OK);
    ls_model_config mc = *ls_model_cfg(ls_trainer_model(t));
    CHECK(ls_model_init(&ref_model, &mc, 0) == LS_OK);
    if (ref_model)
        memcpy(ls_model_params(ref_model), ls_model_params(ls_trainer_model(t)),
               ls_model_num_params(ref_model) * sizeof(float));
    done(t, s);
}

/* What the hooks saw. */
typedef struct {
    int calls, stop_at, fail_at, flag_at, saves;
    int64_t save_steps[8];
    ls_train_step_info info[64];
    volatile sig_atomic_t *flag;
} seen;

static int record(void *ctx, ls_trainer *t, const ls_train_step_info *in) {
    seen *v = ctx;
    if (v->calls < 64) v->info[v->calls] = *in;
    v->calls++;
    CHECK_EQ_INT(ls_trainer_step_index(t), in->step);
    if (v->flag_at && in->step == v->flag_at) *v->flag = SIGTERM;
    if (v->fail_at && in->step == v->fail_at) return ls_err(LS_EINVAL, "hook failure at %d", v->fail_at);
    return v->stop_at && in->step == v->stop_at ? 1 : 0;
}

static int saved(void *ctx, const char *path) {
    seen *v = ctx;
    if (v->saves < 8) v->save_steps[v->saves] = ckpt_step(path);
    v->saves++;
    return LS_OK;
}

/* fresh_out() of the default run with record() on v as its after_step hook. */
static int fresh_recorded(ls_trainer **t, ls_batch_source **s, char *out, const char *name, seen *v) {
    if (fresh_out(t, s, NULL, out, name) < 0) return -1;
    ls_train_hooks h = {.ctx = v, .after_step = record};
    ls_trainer_set_hooks(*t, &h);
    return 0;
}

static void test_run_matches_loop(void) {
    ls_train_config tc = run_config();
    ls_trainer *t;
    ls_batch_source *s;
    if (fresh(&t, &s, &tc) < 0 || !ref_model) {
        CHECK(0);
        return;
    }
    char out[256];
    snprintf(out, sizeof out, "%s/full.st", dir);
    seen v = {0};
    ls_train_hooks h = {.ctx = &v, .after_step = record};
    ls_trainer_set_hooks(t, &h);
    ls_train_hooks back;
    ls_trainer_hooks(t, &back);
    CHECK(back.after_step == record && back.ctx == &v && !back.before_update);
    ls_train_run_opts o = {.out = out, .quiet = 1, .after_save = saved, .save_ctx = &v};
    ls_train_run_result r;
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK_EQ_INT(r.start_step, 0);
    CHECK_EQ_INT(r.end_step, K);
    CHECK_EQ_INT(r.n_losses, K);
    CHECK_EQ_INT(r.stopped, 0);
    CHECK_EQ_INT(v.calls, K);
    CHECK(r.wall_s > 0 && r.tokens_per_s > 0);
    double sum_step = 0; /* per-step times: each at least the hook's step time, together within the loop's wall */
    for (int i = 0; i < K && i < r.n_losses; i++) {
        CHECK(r.step_s[i] >= v.info[i].step_s && r.step_s[i] <= r.wall_s);
        sum_step += r.step_s[i];
    }
    CHECK(sum_step <= r.wall_s * (1 + 1e-9));
    for (int i = 0; i < K && i < r.n_losses; i++) {
        CHECK_MSG(r.losses[i] == ref_loss[i], "step %d: run %.9g loop %.9g", i + 1, r.losses[i], ref_loss[i]);
        CHECK(v.info[i].loss == ref_loss[i] && v.info[i].grad_norm == ref_gn[i]);
        CHECK_EQ_INT(v.info[i].step, i + 1);
        CHECK(v.info[i].rank == 0 && v.info[i].ranks == 1);
        CHECK(v.info[i].step_s > 0 && v.info[i].tokens_per_s > 0);
    }
    CHECK(same_params(ls_trainer_model(t), ref_model));
    /* one save at the end, which after_save sees */
    CHECK_EQ_INT(v.saves, 1);
    CHECK_EQ_INT(v.save_steps[0], K);
    /* the report carries the run's figures */
    cJSON *j = ls_train_run_report(t, NULL, &r);
    CHECK(j != NULL);
    if (j) {
        static const char *keys[] = {"command",    "config",       "params",       "ranks",       "batch",
                                     "seq",        "shards",       "lr",           "warmup",      "steps",
                                     "start_step", "end_step",     "initial_loss", "final_loss",  "losses",
                                     "tokens",     "tokens_per_s", "wall_s",       "rank0_time_s", "step_s"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            CHECK_MSG(cJSON_GetObjectItem(j, keys[k]) != NULL, "report lacks %s", keys[k]);
        cJSON *arr = cJSON_GetObjectItem(j, "losses");
        CHECK_EQ_INT(cJSON_GetArraySize(arr), K);
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "tokens")->valuedouble, K * tc.batch * tc.seq);
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "end_step")->valuedouble, K);
        CHECK((float)cJSON_GetArrayItem(arr, 3)->valuedouble == ref_loss[3]);
        arr = cJSON_GetObjectItem(j, "step_s");
        CHECK_EQ_INT(cJSON_GetArraySize(arr), K);
        CHECK(cJSON_GetArrayItem(arr, 2) && cJSON_GetArrayItem(arr, 2)->valuedouble == r.step_s[2]);
        cJSON_Delete(j);
    }
    ls_train_run_result_free(&r);
    done(t, s);
}

/* Runs a stopped run's checkpoint to the end; its losses continue the reference. */
static void resume_and_compare(const char *path, int from) {
    ls_trainer *t = NULL;
    ls_batch_source *s = NULL;
    CHECK(ls_trainer_resume(&t, path, 0, NULL) == LS_OK);
    if (!t) return;
    ls_train_config tc = *ls_trainer_config(t);
    CHECK(ls_batch_source_corpus(&s, corpus, &tc, 1) == LS_OK);
    char out[256];
    snprintf(out, sizeof out, "%s/resumed.st", dir);
    ls_train_run_opts o = {.out = out, .quiet = 1};
    ls_train_run_result r;
    CHECK(s && ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK_EQ_INT(r.start_step, from);
    CHECK_EQ_INT(r.n_losses, K - from);
    for (int i = 0; i < r.n_losses && from + i < K; i++)
        CHECK_MSG(r.losses[i] == ref_loss[from + i], "resumed step %d: %.9g vs %.9g", from + i + 1, r.losses[i],
                  ref_loss[from + i]);
    CHECK(same_params(ls_trainer_model(t), ref_model));
    CHECK_EQ_INT(ckpt_step(out), K);
    ls_train_run_result_free(&r);
    done(t, s);
}

static void test_stop_by_hook_and_resume(void) {
    ls_trainer *t;
    ls_batch_source *s;
    char out[256];
    seen v = {.stop_at = 5};
    if (fresh_recorded(&t, &s, out, "stop.st", &v) < 0) return;
    ls_train_run_opts o = {.out = out, .quiet = 1, .after_save = saved, .save_ctx = &v};
    ls_train_run_result r;
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK_EQ_INT(r.stopped, 1);
    CHECK_EQ_INT(r.n_losses, 5);
    CHECK_EQ_INT(r.end_step, 5);
    CHECK_EQ_INT(v.calls, 5);
    CHECK_EQ_INT(ckpt_step(out), 5);
    CHECK_EQ_INT(v.saves, 1);
    CHECK_EQ_INT(v.save_steps[0], 5);
    ls_train_run_result_free(&r);
    done(t, s);
    resume_and_compare(out, 5);
}

static void test_stop_flag_and_stop_at(void) {
    ls_trainer *t;
    ls_batch_source *s;
    static volatile sig_atomic_t flag = 0;
    char out[256];
    seen v = {.flag_at = 3, .flag = &flag};
    if (fresh_recorded(&t, &s, out, "flag.st", &v) < 0) return;
    ls_train_run_opts o = {.out = out, .quiet = 1, .stop_flag = &flag};
    ls_train_run_result r;
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK(r.stopped == 1 && r.n_losses == 3 && ckpt_step(out) == 3);
    ls_train_run_result_free(&r);
    /* the same trainer continues to stop_at, which ends the run without "stopped" */
    flag = 0;
    v.flag_at = 0;
    o.stop_at = 8;
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK(r.stopped == 0 && r.start_step == 3 && r.end_step == 8 && ckpt_step(out) == 8);
    for (int i = 0; i < r.n_losses; i++) CHECK(r.losses[i] == ref_loss[3 + i]);
    ls_train_run_result_free(&r);
    done(t, s);
}

static void test_save_every(void) {
    ls_train_config tc = run_config();
    ls_trainer *t;
    ls_batch_source *s;
    char out[256];
    if (fresh_out(&t, &s, &tc, out, "every.st") < 0) return;
    seen v = {0};
    ls_train_run_opts o = {.out = out, .save_every = 5, .quiet = 1, .after_save = saved, .save_ctx = &v};
    ls_train_run_result r;
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK_EQ_INT(v.saves, 3);
    CHECK(v.save_steps[0] == 5 && v.save_steps[1] == 10 && v.save_steps[2] == K);
    ls_train_run_result_free(&r);
    done(t, s);
    /* stop_at ends a run early with a save that resumes exactly */
    CHECK(fresh(&t, &s, &tc) == 0);
    snprintf(out, sizeof out, "%s/every5.st", dir);
    o = (ls_train_run_opts){.out = out, .save_every = 5, .stop_at = 7, .quiet = 1};
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK_EQ_INT(ckpt_step(out), 7);
    ls_train_run_result_free(&r);
    done(t, s);
    resume_and_compare(out, 7);
    /* a run that ends on a multiple of save_every saves that step once, as its final save */
    CHECK(fresh(&t, &s, &tc) == 0);
    seen v2 = {0};
    o = (ls_train_run_opts){
        .out = out, .save_every = 5, .stop_at = 10, .quiet = 1, .after_save = saved, .save_ctx = &v2};
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK_MSG(v2.saves == 2 && v2.save_steps[0] == 5 && v2.save_steps[1] == 10, "%d saves", v2.saves);
    ls_train_run_result_free(&r);
    done(t, s);
}

static void test_failing_hooks(void) {
    ls_trainer *t;
    ls_batch_source *s;
    char out[256];
    seen v = {.fail_at = 4};
    if (fresh_recorded(&t, &s, out, "fail.st", &v) < 0) return;
    ls_train_run_opts o = {.out = out, .quiet = 1};
    ls_train_run_result r;
    CHECK_EQ_INT(ls_train_run(t, s, NULL, &o, &r), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "hook failure at 4") != NULL);
    CHECK_EQ_INT(v.calls, 4);
    CHECK(r.losses == NULL && access(out, F_OK) != 0); /* nothing to free, nothing written */
    ls_trainer_set_hooks(t, NULL);
    ls_train_hooks h;
    ls_trainer_hooks(t, &h);
    CHECK(!h.after_step && !h.before_update && !h.ctx);
    done(t, s);
}

/* before_update: zeroed gradients on a fresh model with no weight decay leave every
 * parameter exactly as it was (AdamW moments stay 0, so the update is 0/(0+eps)), and the
 * reported norm is that of the zeroed gradients; a NaN planted in one gradient shows as
 * a NaN norm for that step and fails the next. */
typedef struct {
    int calls, mode; /* 0: zero all; 1: NaN in all at step index 1; 2: one NaN at 1; 3: fail at 2 */
    int64_t steps[16];
} upd;

static int before(void *ctx, ls_trainer *t, int64_t step) {
    upd *u = ctx;
    if (u->calls < 16) u->steps[u->calls] = step;
    u->calls++;
    ls_model *m = ls_trainer_model(t);
    float *g = ls_model_grads(m);
    if (u->mode == 0) memset(g, 0, ls_model_num_params(m) * sizeof(float));
    for (size_t i = 0; u->mode == 1 && step == 1 && i < ls_model_num_params(m); i++) g[i] = NAN;
    if (u->mode == 2 && step == 1) g[ls_model_num_params(m) / 2] = NAN;
    if (u->mode == 3 && step == 2) return ls_err(LS_EINVAL, "before_update refuses step %d", (int)step);
    return 0;
}

static void test_before_update(void) {
    ls_train_config tc = run_config();
    tc.opt.weight_decay = 0;
    ls_trainer *t;
    ls_batch_source *s;
    if (fresh(&t, &s, &tc) < 0) return;
    ls_model *m = ls_trainer_model(t);
    size_t np = ls_model_num_params(m);
    float *w0 = malloc(np * sizeof(float));
    memcpy(w0, ls_model_params(m), np * sizeof(float));
    upd u = {0};
    ls_train_hooks h = {.ctx = &u, .before_update = before};
    ls_trainer_set_hooks(t, &h);
    float loss, gn;
    CHECK(ls_trainer_step(t, s, &loss, &gn) == LS_OK);
    CHECK_EQ_INT(u.calls, 1);
    CHECK_EQ_INT(u.steps[0], 0);
    CHECK(loss == ref_loss[0]); /* the forward pass is before the hook */
    CHECK(gn == 0.0f);
    CHECK(!memcmp(w0, ls_model_params(m), np * sizeof(float)));
    free(w0);
    done(t, s);

    /* NaN poisoning through ls_train_run: step 2's norm is NaN, step 3 fails on its loss */
    CHECK(fresh(&t, &s, &tc) == 0);
    u = (upd){.mode = 1};
    ls_trainer_set_hooks(t, &(ls_train_hooks){.ctx = &u, .before_update = before});
    ls_train_run_opts o = {.quiet = 1};
    ls_train_run_result r;
    int rc = ls_train_run(t, s, NULL, &o, &r);
    CHECK(rc < 0);
    CHECK_EQ_INT(u.calls, 2); /* the failing step 3 stops at its loss, before any update */
    CHECK_EQ_INT(ls_trainer_step_index(t), 2);
    CHECK(isnan(ls_model_params(ls_trainer_model(t))[0]));
    done(t, s);

    /* one NaN gradient: that step's reported norm is NaN */
    CHECK(fresh(&t, &s, &tc) == 0);
    u = (upd){.mode = 2};
    ls_trainer_set_hooks(t, &(ls_train_hooks){.ctx = &u, .before_update = before});
    CHECK(ls_trainer_step(t, s, &loss, &gn) == LS_OK && gn == ref_gn[0] && loss == ref_loss[0]);
    CHECK(ls_trainer_step(t, s, &loss, &gn) == LS_OK && isnan(gn) && isfinite(loss)); /* wd 0: not ref_loss[1] */
    done(t, s);

    /* a failing before_update fails the step without advancing it */
    CHECK(fresh(&t, &s, &tc) == 0);
    u = (upd){.mode = 3};
    ls_trainer_set_hooks(t, &(ls_train_hooks){.ctx = &u, .before_update = before});
    rc = ls_train_run(t, s, NULL, &o, &r);
    CHECK_EQ_INT(rc, LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "refuses step 2") != NULL);
    CHECK_EQ_INT(ls_trainer_step_index(t), 2);
    done(t, s);
}

/* An after_step hook may lengthen the schedule (the core demo does): the run follows it. */
static int lengthen(void *ctx, ls_trainer *t, const ls_train_step_info *in) {
    (void)ctx;
    return in->step == 2 ? ls_trainer_set_steps(t, 40) : 0;
}

static void test_schedule_change(void) {
    ls_train_config tc = run_config();
    tc.steps = 4;
    ls_trainer *t;
    ls_batch_source *s;
    if (fresh(&t, &s, &tc) < 0) return;
    ls_trainer_set_hooks(t, &(ls_train_hooks){.after_step = lengthen});
    ls_train_run_opts o = {.quiet = 1};
    ls_train_run_result r;
    CHECK(ls_train_run(t, s, NULL, &o, &r) == LS_OK);
    CHECK_EQ_INT(r.n_losses, 40);
    CHECK_EQ_INT(r.end_step, 40);
    for (int i = 0; i < r.n_losses; i++) CHECK(isfinite(r.losses[i]));
    ls_train_run_result_free(&r);
    done(t, s);
}

int main(void) {
    if (test_train_begin(dir, &corpus, make_corpus) < 0) return 1;
    RUN(test_reference);
    RUN(test_run_matches_loop);
    RUN(test_stop_by_hook_and_resume);
    RUN(test_stop_flag_and_stop_at);
    RUN(test_save_every);
    RUN(test_failing_hooks);
    RUN(test_before_update);
    RUN(test_schedule_change);
    if (ref_model) ls_model_free(ref_model);
    ls_corpus_free(corpus);
    return TEST_RESULT_RMTREE(dir);
}
