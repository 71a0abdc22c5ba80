/* trainer.c - the data-parallel training loop (one step = rows of this rank, forward,
 * backward, gradient all-reduce, AdamW), exact resume, and held-out evaluation. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llmsys/train.h"

/* ---------------------------------------------------------------- settings */

ls_train_config ls_train_defaults(void) {
    ls_train_config c;
    memset(&c, 0, sizeof c);
    c.batch = 8;
    c.seq = 128;
    c.steps = 100;
    c.seed = 1;
    c.shards = 0;
    c.opt = ls_adamw_defaults();
    c.opt.warmup_steps = 0; /* steps/10 at init */
    return c;
}

int ls_train_config_validate(const ls_train_config *c) {
    if (c->batch < 1) return ls_err(LS_EINVAL, "batch must be >= 1, got %d", c->batch);
    if (c->seq < 1) return ls_err(LS_EINVAL, "seq must be >= 1, got %d", c->seq);
    if (c->steps < 1) return ls_err(LS_EINVAL, "steps must be >= 1, got %d", c->steps);
    if (c->shards < 0) return ls_err(LS_EINVAL, "shards must be >= 0, got %d", c->shards);
    const ls_adamw_config *o = &c->opt;
    if (!(o->lr > 0 && o->lr < 10)) return ls_err(LS_EINVAL, "lr must be in (0, 10), got %g", o->lr);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return ls_err(LS_EINVAL, "AdamW betas must be in [0, 1)");
    if (!(o->eps > 0)) return ls_err(LS_EINVAL, "AdamW eps must be > 0");
    if (!(o->weight_decay >= 0)) return ls_err(LS_EINVAL, "weight decay must be >= 0, got %g", o->weight_decay);
    if (!isfinite(o->grad_clip)) return ls_err(LS_EINVAL, "grad clip must be finite");
    if (o->warmup_steps < 0) return ls_err(LS_EINVAL, "warmup must be >= 0, got %d", o->warmup_steps);
    if (!(o->min_lr_frac >= 0 && o->min_lr_frac <= 1)) return ls_err(LS_EINVAL, "min lr fraction must be in [0, 1]");
    return LS_OK;
}

/* The optimizer settings "llmsys.train" stores, in its order (total_steps is not stored: it follows steps). */
static const struct {
    const char *key;
    size_t off;
    int is_int; /* else float */
} opt_keys[] = {
    {"lr", offsetof(ls_adamw_config, lr), 0},
    {"beta1", offsetof(ls_adamw_config, beta1), 0},
    {"beta2", offsetof(ls_adamw_config, beta2), 0},
    {"eps", offsetof(ls_adamw_config, eps), 0},
    {"weight_decay", offsetof(ls_adamw_config, weight_decay), 0},
    {"grad_clip", offsetof(ls_adamw_config, grad_clip), 0},
    {"warmup_steps", offsetof(ls_adamw_config, warmup_steps), 1},
    {"min_lr_frac", offsetof(ls_adamw_config, min_lr_frac), 0},
};
#define N_OPT_KEYS (sizeof opt_keys / sizeof opt_keys[0])

char *ls_train_config_to_json(const ls_train_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed); /* a string: JSON numbers lose 64-bit precision */
    cJSON_AddNumberToObject(j, "batch", c->batch);
    cJSON_AddNumberToObject(j, "seq", c->seq);
    cJSON_AddNumberToObject(j, "steps", c->steps);
    cJSON_AddStringToObject(j, "seed", seed);
    cJSON_AddNumberToObject(j, "shards", c->shards);
    if (c->data_hash) {
        char dh[32];
        snprintf(dh, sizeof dh, "%016" PRIx64, c->data_hash);
        cJSON_AddStringToObject(j, "data_hash", dh);
    }
    for (size_t i = 0; i < N_OPT_KEYS; i++) {
        const char *f = (const char *)&c->opt + opt_keys[i].off;
        cJSON_AddNumberToObject(j, opt_keys[i].key,
                                opt_keys[i].is_int ? (double)*(const int *)f : (double)*(const float *)f);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static int get_float(const cJSON *j, const char *key, float *v) {
    double d = *v;
    LS_TRY(ls_json_get_double(j, key, d, &d));
    *v = (float)d; /* values were written from floats, so the round trip is exact */
    return LS_OK;
}

/* A 64-bit value written as a string in base (JSON numbers lose 64-bit precision);
 * a missing key leaves *v as it is. */
static int get_u64_string(const cJSON *j, const char *key, int base, uint64_t *v) {
    const char *s = NULL;
    LS_TRY(ls_json_get_string(j, key, NULL, &s));
    if (!s) return LS_OK;
    char *end;
    unsigned long long u = strtoull(s, &end, base);
    if (!*s || *end) return ls_err(LS_EFORMAT, "llmsys.train: bad %s '%s'", key, s);
    *v = u;
    return LS_OK;
}

int ls_train_config_from_json(const char *json, ls_train_config *c) {
    cJSON *j;
    LS_TRY(ls_json_parse(json, strlen(json), "llmsys.train", &j));
    int rc = LS_OK;
    if (!cJSON_IsObject(j)) rc = ls_err(LS_EFORMAT, "llmsys.train: not a JSON object");
    if (rc == LS_OK) rc = ls_json_get_int(j, "batch", c->batch, &c->batch);
    if (rc == LS_OK) rc = ls_json_get_int(j, "seq", c->seq, &c->seq);
    if (rc == LS_OK) rc = ls_json_get_int(j, "steps", c->steps, &c->steps);
    if (rc == LS_OK) rc = ls_json_get_int(j, "shards", c->shards, &c->shards);
    if (rc == LS_OK) rc = get_u64_string(j, "seed", 10, &c->seed);
    if (rc == LS_OK) rc = get_u64_string(j, "data_hash", 16, &c->data_hash);
    for (size_t i = 0; rc == LS_OK && i < N_OPT_KEYS; i++) {
        char *f = (char *)&c->opt + opt_keys[i].off;
        rc = opt_keys[i].is_int ? ls_json_get_int(j, opt_keys[i].key, *(int *)f, (int *)f)
                                : get_float(j, opt_keys[i].key, (float *)f);
    }
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- trainer */

struct ls_trainer {
    ls_model *m;
    ls_train_config tc;
    ls_dist *d;
    int64_t step;
    int rows; /* this rank's share of the global batch */
    int *tokens, *targets;
    float *red; /* all-reduce buffer: gradients, then [loss, failure flag, target count] */
    ls_train_timing timing;
    ls_train_hooks hooks;
};

static int trainer_alloc(ls_trainer *t) {
    int N = ls_dist_size(t->d);
    if (t->tc.batch % N != 0)
        return ls_err(LS_EINVAL, "global batch %d does not split evenly over %d ranks", t->tc.batch, N);
    if (t->tc.seq > ls_model_cfg(t->m)->n_ctx)
        return ls_err(LS_EINVAL, "seq %d exceeds the model's context %d", t->tc.seq, ls_model_cfg(t->m)->n_ctx);
    if (t->tc.steps > 0 && t->tc.opt.total_steps <= 0) t->tc.opt.total_steps = t->tc.steps;
    t->rows = t->tc.batch / N;
    LS_TRY(ls_model_batch_fit(ls_model_cfg(t->m), t->tc.batch, N, t->tc.seq)); /* before allocating */
    size_t nt = (size_t)t->rows * (size_t)t->tc.seq;
    t->tokens = malloc(nt * sizeof(int));
    t->targets = malloc(nt * sizeof(int));
    t->red = N > 1 ? ls_aligned_alloc(64, (ls_model_num_params(t->m) + 3) * sizeof(float)) : NULL;
    if (!t->tokens || !t->targets || (N > 1 && !t->red)) return ls_err(LS_ENOMEM, "out of memory for the batch");
    return LS_OK;
}

/* The end of init and resume: when set-up went well (rc), the step buffers; then t goes to
 * *out, or is freed on any failure. */
static int trainer_finish(ls_trainer *t, int rc, ls_trainer **out) {
    if (rc == LS_OK) rc = trainer_alloc(t);
    if (rc < 0) {
        ls_trainer_free(t);
        return rc;
    }
    *out = t;
    return LS_OK;
}

int ls_trainer_init(ls_trainer **out, const ls_model_config *mcfg, const ls_train_config *tc, ls_dist *d) {
    LS_TRY(ls_model_config_validate(mcfg));
    LS_TRY(ls_train_config_validate(tc));
    ls_trainer *t = calloc(1, sizeof *t);
    if (!t) return ls_err(LS_ENOMEM, "out of memory");
    t->tc = *tc;
    t->d = d;
    if (t->tc.opt.warmup_steps == 0) t->tc.opt.warmup_steps = t->tc.steps / 10;
    t->tc.opt.total_steps = t->tc.steps;
    return trainer_finish(t, ls_model_init(&t->m, mcfg, tc->seed), out);
}

int ls_trainer_resume(ls_trainer **out, const char *path, int steps, ls_dist *d) {
    ls_trainer *t = calloc(1, sizeof *t);
    if (!t) return ls_err(LS_ENOMEM, "out of memory");
    t->d = d;
    t->tc = ls_train_defaults();
    ls_ckpt_state st = {0};
    int rc = ls_ckpt_load(path, LS_CKPT_WITH_OPT, &t->m, &st);
    if (rc == LS_OK && !st.train_json)
        rc = ls_err(LS_EFORMAT, "%s: no training state (llmsys.train); it was not written by a training run", path);
    if (rc == LS_OK) {
        rc = ls_train_config_from_json(st.train_json, &t->tc);
        if (rc < 0) rc = ls_err_wrap(rc, "%s", path);
    }
    if (rc == LS_OK) {
        t->step = st.step;
        if (steps > 0) t->tc.steps = steps;
        t->tc.opt.total_steps = t->tc.steps;
        rc = ls_train_config_validate(&t->tc);
        if (rc < 0) rc = ls_err_wrap(rc, "%s", path);
    }
    if (rc == LS_OK && t->step > t->tc.steps)
        rc = ls_err(LS_EINVAL, "%s: already at step %" PRId64 ", beyond the requested %d steps", path, t->step,
                    t->tc.steps);
    ls_ckpt_state_free(&st);
    return trainer_finish(t, rc, out);
}

void ls_trainer_free(ls_trainer *t) {
    if (!t) return;
    if (t->m) ls_model_free(t->m);
    free(t->tokens);
    free(t->targets);
    ls_aligned_free(t->red);
    free(t);
}

int64_t ls_trainer_step_index(const ls_trainer *t) { return t->step; }
void ls_trainer_timing(const ls_trainer *t, ls_train_timing *out) { *out = t->timing; }
ls_model *ls_trainer_model(ls_trainer *t) { return t->m; }
const ls_train_config *ls_trainer_config(const ls_trainer *t) { return &t->tc; }

int ls_trainer_set_steps(ls_trainer *t, int steps) {
    if (steps <= t->step) return ls_err(LS_EINVAL, "steps %d must exceed the %" PRId64 " done", steps, t->step);
    t->tc.steps = steps;
    t->tc.opt.total_steps = steps;
    return LS_OK;
}

int ls_trainer_set_shards(ls_trainer *t, int shards) {
    if (shards < 1) return ls_err(LS_EINVAL, "shards must be >= 1, got %d", shards);
    t->tc.shards = shards;
    return LS_OK;
}

void ls_trainer_set_data_hash(ls_trainer *t, uint64_t h) { t->tc.data_hash = h; }

void ls_trainer_set_hooks(ls_trainer *t, const ls_train_hooks *h) {
    if (h)
        t->hooks = *h;
    else
        memset(&t->hooks, 0, sizeof t->hooks);
}

void ls_trainer_hooks(const ls_trainer *t, ls_train_hooks *out) { *out = t->hooks; }

int ls_trainer_step(ls_trainer *t, ls_batch_source *src, float *loss, float *grad_norm) {
    int N = ls_dist_size(t->d), r = ls_dist_rank(t->d), T = t->tc.seq;
    float l = NAN;
    double t0 = ls_now(), c0 = ls_process_cpu_time();
    int rc = src->fill(src, t->step, r * t->rows, t->rows, T, t->tokens, t->targets);
    double t1 = ls_now();
    ls_model_zero_grad(t->m);
    /* targets counted: a source may mask some (-1), so ranks can hold different counts */
    size_t cnt = 0, nt = (size_t)t->rows * (size_t)T;
    for (size_t i = 0; rc == LS_OK && i < nt; i++) cnt += t->targets[i] >= 0;
    if (rc == LS_OK && cnt == 0 && N == 1)
        rc = ls_err(LS_EINVAL, "step %" PRId64 ": the batch has no targets", t->step);
    if (rc == LS_OK && cnt > 0) {
        l = ls_model_forward(t->m, t->tokens, t->targets, t->rows, T);
        if (isnan(l))
            rc = ls_err_wrap(LS_EINVAL, "step %" PRId64, t->step);
        else
            ls_model_backward(t->m);
    }
    double t2 = ls_now(), c2 = ls_process_cpu_time();
    if (N > 1) {
        /* One all-reduce carries the count-weighted gradients, the loss, a failure flag and
         * the target count, so a failing rank stops every rank at the same step instead of
         * leaving them blocked, and the result is the mean over every target of the global
         * batch, as one rank would compute it. */
        size_t np = ls_model_num_params(t->m);
        const float *g = ls_model_grads(t->m);
        float w = rc == LS_OK ? (float)cnt : 0.0f;
        for (size_t i = 0; i < np; i++) t->red[i] = w > 0 ? g[i] * w : 0.0f;
        t->red[np] = w > 0 ? l * w : 0.0f;
        t->red[np + 1] = rc == LS_OK ? 0.0f : 1.0f;
        t->red[np + 2] = w;
        int mrc = ls_dist_allreduce_sum(t->d, t->red, np + 3);
        if (mrc < 0) return mrc;
        if (t->red[np + 1] != 0.0f)
            return rc < 0 ? rc : ls_err(LS_EPEER, "another rank failed at step %" PRId64, t->step);
        float total = t->red[np + 2];
        if (total <= 0) return ls_err(LS_EINVAL, "step %" PRId64 ": the global batch has no targets", t->step);
        float *gw = ls_model_grads(t->m);
        for (size_t i = 0; i < np; i++) gw[i] = t->red[i] / total;
        l = t->red[np] / total;
    } else if (rc < 0) {
        return rc;
    }
    double t3 = ls_now(), c3 = ls_process_cpu_time();
    if (t->hooks.before_update) {
        /* the gradients are global here; a hook failing on one rank fails the step on all */
        int hrc = t->hooks.before_update(t->hooks.ctx, t, t->step);
        if (N > 1) hrc = ls_dist_agree(t->d, hrc, NULL);
        if (hrc < 0) return hrc;
    }
    float gn = ls_model_adamw_step(t->m, &t->tc.opt, (int)t->step);
    double t4 = ls_now();
    t->timing.busy_cpu_s += c2 - c0 + ls_process_cpu_time() - c3;
    t->timing.steps++;
    t->timing.data_s += t1 - t0;
    t->timing.compute_s += t2 - t1;
    t->timing.comm_s += t3 - t2;
    t->timing.update_s += t4 - t3;
    t->step++;
    if (loss) *loss = l;
    if (grad_norm) *grad_norm = gn;
    return LS_OK;
}

int ls_trainer_save(ls_trainer *t, const char *path) {
    int rc = LS_OK;
    if (ls_dist_rank(t->d) == 0) {
        char *tj = ls_train_config_to_json(&t->tc);
        rc = tj ? ls_ckpt_save(path, t->m, t->step, tj, LS_CKPT_WITH_OPT) : ls_err(LS_ENOMEM, "out of memory");
        free(tj);
    }
    return ls_dist_agree(t->d, rc, NULL);
}

/* ---------------------------------------------------------------- evaluation */

size_t ls_eval_windows(size_t n, int T, size_t max_tokens, size_t *avail) {
    *avail = n > 0 && T > 0 ? (n - 1) / (size_t)T : 0;
    /* a cap takes windows evenly spread over the whole text, not its beginning */
    if (max_tokens > 0 && max_tokens / (size_t)T < *avail) return max_tokens / (size_t)T > 0 ? max_tokens / (size_t)T : 1;
    return *avail;
}

int ls_eval_tokens(ls_model *m, const uint16_t *tokens, size_t n, int T, int B, size_t max_tokens, ls_eval_result *r) {
    return ls_eval_tokens_each(m, tokens, n, T, B, max_tokens, NULL, NULL, r);
}

int ls_eval_tokens_each(ls_model *m, const uint16_t *tokens, size_t n, int T, int B, size_t max_tokens,
                        int (*each)(const ls_model *m, void *ctx), void *ctx, ls_eval_result *r) {
    memset(r, 0, sizeof *r);
    if (T < 1 || T > ls_model_cfg(m)->n_ctx)
        return ls_err(LS_EINVAL, "eval seq %d outside [1, %d]", T, ls_model_cfg(m)->n_ctx);
    if (B < 1) return ls_err(LS_EINVAL, "eval batch must be >= 1");
    size_t avail, windows = ls_eval_windows(n, T, max_tokens, &avail);
    if (windows == 0) return ls_err(LS_EINVAL, "too little data to evaluate: %zu tokens, need at least %d", n, T + 1);
    if ((size_t)B > windows) B = (int)windows; /* no buffers for windows that do not exist */
    int *tok = malloc((size_t)B * (size_t)T * sizeof(int)), *tgt = malloc((size_t)B * (size_t)T * sizeof(int));
    if (!tok || !tgt) {
        free(tok);
        free(tgt);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    double sum = 0;
    int rc = LS_OK;
    for (size_t w = 0; w < windows && rc == LS_OK; w += (size_t)B) {
        int b = windows - w < (size_t)B ? (int)(windows - w) : B;
        size_t counted = 0;
        for (int i = 0; i < b; i++)
            for (int k = 0; k < T; k++) {
                size_t p = ls_eval_window_start(w + (size_t)i, windows, avail, T) + (size_t)k;
                tok[i * T + k] = tokens[p];
                int y = tokens[p + 1];
                /* BOS always follows EOS: predicting it carries no information about the text */
                tgt[i * T + k] = y == LS_TOK_BOS ? -1 : y;
                if (y != LS_TOK_BOS) counted++;
                r->bytes += ls_text_token_bytes(ls_model_tokenizer(m), y);
            }
        if (counted == 0) continue;
        float l = ls_model_forward(m, tok, tgt, b, T);
        if (isnan(l)) {
            rc = ls_err_wrap(LS_EINVAL, "evaluation");
            break;
        }
        sum += (double)l * (double)counted;
        r->tokens += counted;
        if (each) rc = each(m, ctx);
    }
    free(tok);
    free(tgt);
    LS_TRY(rc);
    return ls_eval_finish(r, sum);
}

int ls_eval_finish(ls_eval_result *r, double nats) {
    if (r->tokens == 0 || r->bytes == 0) return ls_err(LS_EINVAL, "no text to evaluate");
    r->loss = nats / (double)r->tokens;
    r->bits_per_byte = nats / log(2.0) / (double)r->bytes;
    r->perplexity = exp(r->loss);
    return LS_OK;
}
