/* trainer.c - the RL trainer process: takes complete groups from the manager's experience
 * buffer, computes GRPO advantages, runs PPO epochs of the importance-weighted clipped loss
 * with AdamW, hands each new version to the master relay (and continues at once), and
 * evaluates held-out reward before and after. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "llmsys/train.h"
#include "llmsys/zsec.h"
#include "rl/internal.h"

typedef struct {
    rl_config cfg;
    void *zctx, *msock, *rsock;
    char master[256];
    int resend; /* a master relay newly named: hand it the current version (publish) */
    int version;
    double stats[7];
    int has_stats;
    uint8_t *seen;
    int64_t seen_cap, duplicates;
} trainer;

/* One GET_BATCH round: *got receives the trajectories when the manager had enough. */
static int get_batch(trainer *t, int want, ls_rl_traj **out, int *got, int *stop) {
    *out = NULL;
    *got = 0;
    rl_buf b = {0};
    rl_msg_begin(&b, M_GET_BATCH);
    rl_put_i32(&b, t->version);
    rl_put_i32(&b, want);
    rl_put_i32(&b, t->has_stats);
    for (int i = 0; i < 7; i++) rl_put_f64(&b, t->stats[i]);
    void *rep;
    size_t len;
    rl_rd r;
    int rc = rl_call(t->msock, &b, 5000, &rep, &len, &r, "manager");
    rl_buf_free(&b);
    if (rc == LS_ETIMEDOUT || rc == LS_ENET) return ls_err(LS_ENET, "trainer: manager unreachable (%s)", ls_errmsg());
    if (rc) return rc;
    t->has_stats = 0;
    *stop = rl_get_i32(&r);
    char ep[256];
    rl_get_str(&r, ep, sizeof ep);
    if (strcmp(ep, t->master) != 0) {
        if (t->rsock) zmq_close(t->rsock);
        t->rsock = NULL;
        snprintf(t->master, sizeof t->master, "%s", ep);
        if (ep[0]) {
            t->rsock = rl_socket(t->zctx, ZMQ_DEALER);
            rc = t->rsock ? ls_zsec_connect(t->rsock, ep, "trainer's relay link") : LS_ENET;
            t->resend = rc == LS_OK;
        }
    }
    int ng = rl_get_i32(&r), G = rl_get_i32(&r);
    ls_rl_traj *tr = ng > 0 ? calloc((size_t)ng * G, sizeof *tr) : NULL;
    if (ng > 0 && !tr) rc = ls_err(LS_ENOMEM, "trainer: out of memory");
    int n = 0;
    for (int g = 0; rc == LS_OK && g < ng && !r.bad; g++) {
        rl_get_i32(&r);
        for (int k = 0; k < G && !r.bad; k++, n++) {
            ls_rl_traj *x = &tr[n];
            x->id = rl_get_i64(&r);
            x->version = rl_get_i32(&r);
            x->reward = (float)rl_get_f64(&r);
            rl_get_i64(&r); /* id again (assignment record) */
            rl_get_i32(&r); /* max_new */
            x->n_prompt = rl_get_i32(&r);
            const int32_t *pt =
                x->n_prompt > 0 && x->n_prompt < 100000 ? rl_get_bytes(&r, 4 * (size_t)x->n_prompt) : NULL;
            x->n_gen = rl_get_i32(&r);
            const int32_t *gt =
                pt && x->n_gen >= 0 && x->n_gen < 100000 ? rl_get_bytes(&r, 4 * (size_t)x->n_gen) : NULL;
            const float *gl = gt ? rl_get_bytes(&r, 4 * (size_t)x->n_gen) : NULL;
            if (!gl) {
                r.bad = 1;
                break;
            }
            x->tok = malloc(sizeof(int) * (size_t)(x->n_prompt + x->n_gen));
            x->lp = malloc(sizeof(float) * (size_t)(x->n_gen + 1));
            if (!x->tok || !x->lp) {
                rc = ls_err(LS_ENOMEM, "trainer: out of memory");
                n++;
                break;
            }
            memcpy(x->tok, pt, 4 * (size_t)x->n_prompt);
            memcpy(x->tok + x->n_prompt, gt, 4 * (size_t)x->n_gen);
            memcpy(x->lp, gl, 4 * (size_t)x->n_gen);
            if (x->id >= t->seen_cap) {
                int64_t nc = (x->id + 1) * 2;
                uint8_t *s = realloc(t->seen, (size_t)nc);
                if (s) memset(s + t->seen_cap, 0, (size_t)(nc - t->seen_cap)), t->seen = s, t->seen_cap = nc;
            }
            if (x->id < t->seen_cap) t->duplicates += t->seen[x->id]++ > 0;
        }
    }
    if (r.bad && rc == LS_OK) rc = ls_err(LS_EFORMAT, "trainer: malformed batch from the manager");
    free(rep);
    if (rc) {
        for (int i = 0; i < n; i++) free(tr[i].tok), free(tr[i].lp);
        free(tr);
        return rc;
    }
    *out = tr;
    *got = n;
    return LS_OK;
}

static void free_traj(ls_rl_traj *tr, int n) {
    for (int i = 0; i < n; i++) free(tr[i].tok), free(tr[i].lp);
    free(tr);
}

/* Hands version t->version (the model's weights now) to the master relay; with none named yet it
 * goes when one is (get_batch sets resend). */
static int publish(trainer *t, ls_model *m, double *stall) {
    double t0 = ls_now();
    int rc = LS_OK;
    if (t->rsock)
        rc = rl_send_version(t->rsock, NULL, 0, t->version, ls_model_params(m), ls_model_num_params(m) * sizeof(float));
    *stall = ls_now() - t0;
    return rc;
}

/* A master relay named for the first time or anew gets the current version: the rollouts' first
 * weights (version 0) go this way, and a version published before any relay had joined, or one
 * the old master did not pass on, would be missing down the chain. Without it every rollout
 * would wait for ever. */
static int resend(trainer *t, ls_model *m, int quiet) {
    if (!t->resend) return LS_OK;
    double s;
    t->resend = 0;
    if (!quiet) LS_INFO("trainer: version %d handed to the master relay %s", t->version, t->master);
    return publish(t, m, &s);
}

static int read_heldout(const rl_config *c, ls_rl_task **t, int *n, int *off) {
    *off = 0;
    if (c->heldout[0]) return ls_rl_tasks_read(c->heldout, t, n);
    LS_TRY(ls_rl_tasks_read(c->tasks, t, n));
    int k = c->eval_n < *n ? c->eval_n : *n;
    *off = *n - k; /* the last eval_n tasks */
    return LS_OK;
}

int rl_trainer_main(const ls_rl_worker_opts *o) {
    trainer *t = calloc(1, sizeof *t);
    if (!t) return ls_err(LS_ENOMEM, "trainer: out of memory");
    ls_model_set_threads(1);
    ls_model *m = NULL;
    ls_rl_task *ho = NULL;
    int nho = 0, off = 0, stop = 0;
    t->zctx = zmq_ctx_new();
    int rc = t->zctx ? rl_join(t->zctx, o->manager, "trainer", 0, NULL, &t->msock, &t->cfg) : LS_ENET;
    if (rc == LS_OK) rc = ls_ckpt_load(t->cfg.init, LS_CKPT_WEIGHTS, &m, NULL);
    if (rc == LS_OK && memcmp(ls_model_cfg(m), &t->cfg.model, sizeof t->cfg.model) != 0)
        rc = ls_err(LS_EINVAL, "trainer: %s is not the model the run config names (its \"model\")", t->cfg.init);
    if (rc == LS_OK) { /* version 0 to the rollouts (through the relays) before the held-out evaluation */
        ls_rl_traj *tr;
        int n;
        rc = get_batch(t, 0, &tr, &n, &stop);
        free_traj(tr, n);
        if (rc == LS_OK) rc = resend(t, m, o->port_file != NULL);
    }
    if (rc == LS_OK) rc = read_heldout(&t->cfg, &ho, &nho, &off);
    int neval = nho - off < t->cfg.eval_n ? nho - off : t->cfg.eval_n;
    double before = 0, after = 0, ex_before = 0, ex_after = 0, sb = 0, sa = 0, sxb = 0, sxa = 0;
    if (rc == LS_OK && neval > 0) rc = ls_rl_eval(m, ho + off, neval, 0.0f, 1, &before, &ex_before);
    if (rc == LS_OK && neval > 0) rc = ls_rl_eval(m, ho + off, neval, 1.0f, 4, &sb, &sxb);
    if (rc == LS_OK && !t->cfg.tasks[0]) rc = ls_err(LS_EINVAL, "trainer: no task file");
    ls_adamw_config oc = ls_adamw_defaults();
    oc.lr = (float)t->cfg.lr;
    oc.warmup_steps = 0;
    oc.total_steps = 0;
    oc.weight_decay = 0.0f;
    ls_pg_config pc = {(float)t->cfg.clip_eps, (float)t->cfg.is_cap};
    int G = t->cfg.group, want = t->cfg.batch_groups, opt_step = 0;
    double t_start = ls_now();
    for (int u = 0; rc == LS_OK && u < t->cfg.updates && !stop; u++) {
        double tw = ls_now();
        ls_rl_traj *tr = NULL;
        int n = 0;
        while (rc == LS_OK && n == 0 && !stop) {
            rc = get_batch(t, want, &tr, &n, &stop);
            if (rc == LS_OK) rc = resend(t, m, o->port_file != NULL);
            if (rc == LS_OK && n == 0) ls_sleep_ms(RL_TRAINER_POLL_MS);
        }
        if (rc || stop) {
            free_traj(tr, n);
            break;
        }
        double wait_s = ls_now() - tw, t0 = ls_now();
        double rsum = 0;
        for (int g = 0; g < n / G; g++) {
            float rw[256], adv[256];
            for (int k = 0; k < G && k < 256; k++) rw[k] = tr[g * G + k].reward, rsum += rw[k];
            ls_rl_group_advantages(rw, G, 1, adv);
            for (int k = 0; k < G; k++) tr[g * G + k].adv = adv[k];
        }
        ls_rl_batch b;
        rc = ls_rl_batch_pack(tr, n, ls_model_cfg(m)->n_ctx, &b);
        free_traj(tr, n);
        if (rc) break;
        float *prox = malloc(sizeof(float) * (size_t)b.B * b.T);
        ls_pg_stats st = {0};
        rc = prox ? ls_model_logprobs(m, b.tokens, b.targets, b.B, b.T, prox)
                  : ls_err(LS_ENOMEM, "trainer: out of memory");
        for (int e = 0; rc == LS_OK && e < (t->cfg.ppo_epochs > 0 ? t->cfg.ppo_epochs : 1); e++) {
            ls_model_zero_grad(m);
            rc = ls_model_pg_loss(m, b.tokens, b.targets, b.B, b.T, prox, b.logp_behav, b.adv, &pc, &st);
            if (rc == LS_OK) ls_model_adamw_step(m, &oc, opt_step++);
        }
        free(prox);
        ls_rl_batch_free(&b);
        double el = (ls_now() - t0) * 1000.0;
        if (t->cfg.train_ms > el) ls_sleep_ms((int)(t->cfg.train_ms - el + 0.5));
        double train_s = ls_now() - t0, stall = 0;
        t->version++;
        if (rc == LS_OK) rc = publish(t, m, &stall);
        double s[7] = {n ? rsum / n : 0, st.loss, stall, wait_s, train_s, st.clip_frac, st.mean_is};
        memcpy(t->stats, s, sizeof s);
        t->has_stats = 1;
        if (!o->port_file) /* progress line per update (stderr of the worker's log) */
            LS_INFO("trainer: update %d/%d version %d reward %.3f loss %.4f wait %.3f s train %.3f s stall %.4f s",
                    u + 1, t->cfg.updates, t->version, s[0], s[1], wait_s, train_s, stall);
    }
    double wall = ls_now() - t_start;
    if (rc == LS_OK && !stop) { /* hand in the last update's figures */
        ls_rl_traj *tr;
        int n;
        rc = get_batch(t, 0, &tr, &n, &stop);
        free_traj(tr, n);
    }
    if (rc == LS_OK && neval > 0) rc = ls_rl_eval(m, ho + off, neval, 0.0f, 1, &after, &ex_after);
    if (rc == LS_OK && neval > 0) rc = ls_rl_eval(m, ho + off, neval, 1.0f, 4, &sa, &sxa);
    if (rc == LS_OK) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "heldout_n", neval);
        cJSON_AddNumberToObject(j, "heldout_reward_before", before);
        cJSON_AddNumberToObject(j, "heldout_reward_after", after);
        cJSON_AddNumberToObject(j, "heldout_exact_before", ex_before);
        cJSON_AddNumberToObject(j, "heldout_exact_after", ex_after);
        cJSON_AddNumberToObject(j, "heldout_sampled_reward_before", sb);
        cJSON_AddNumberToObject(j, "heldout_sampled_reward_after", sa);
        cJSON_AddNumberToObject(j, "heldout_sampled_exact_before", sxb);
        cJSON_AddNumberToObject(j, "heldout_sampled_exact_after", sxa);
        cJSON_AddNumberToObject(j, "versions", t->version);
        cJSON_AddNumberToObject(j, "duplicate_trajectories", (double)t->duplicates);
        cJSON_AddNumberToObject(j, "train_wall_s", wall);
        char *js = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        rl_buf b = {0};
        rl_msg_begin(&b, M_DONE);
        rl_put_i32(&b, js ? (int32_t)strlen(js) : 0);
        if (js) rl_put(&b, js, strlen(js));
        free(js);
        void *rep;
        size_t len;
        rl_rd r;
        rc = rl_call(t->msock, &b, 5000, &rep, &len, &r, "manager");
        if (rc == LS_OK) free(rep);
        rl_buf_free(&b);
    }
    ls_model_free(m);
    ls_rl_tasks_free(ho, nho);
    if (t->rsock) zmq_close(t->rsock);
    if (t->msock) zmq_close(t->msock);
    if (t->zctx) zmq_ctx_term(t->zctx);
    free(t->seen);
    free(t);
    return rc;
}
