/* run.c - the training run loop (steps, per-step hook, stop agreement across ranks,
 * periodic and final saves, progress) and its JSON report. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llmsys/train.h"

/* Last step of the run: the schedule's end (a hook may move it) or stop_at. */
static int64_t run_end(ls_trainer *t, const ls_train_run_opts *o) {
    int64_t end = ls_trainer_config(t)->steps;
    return o->stop_at > 0 && o->stop_at < end ? o->stop_at : end;
}

/* Saves the checkpoint and, on rank 0 when steps were run, calls after_save; collective. */
static int run_save(ls_trainer *t, ls_dist *d, const ls_train_run_opts *o, int ran) {
    LS_TRY(ls_trainer_save(t, o->out));
    if (!o->after_save || !ran) return LS_OK;
    int rc = ls_dist_rank(d) == 0 ? o->after_save(o->save_ctx, o->out) : LS_OK;
    return ls_dist_agree(d, rc, NULL);
}

int ls_train_run(ls_trainer *t, ls_batch_source *src, ls_dist *d, const ls_train_run_opts *o, ls_train_run_result *r) {
    static const ls_train_run_opts none;
    if (!o) o = &none;
    memset(r, 0, sizeof *r);
    const ls_train_config *tc = ls_trainer_config(t);
    int rank = ls_dist_rank(d), N = ls_dist_size(d);
    int64_t start = ls_trainer_step_index(t), end = run_end(t, o);
    /* the per-step records grow with the run: a long schedule is no allocation up front */
    int nsteps = end > start ? (int)(end - start) : 0, cap = nsteps < 4096 ? nsteps : 4096;
    float *losses = malloc(((size_t)cap + 1) * sizeof *losses);
    double *step_s = malloc(((size_t)cap + 1) * sizeof *step_s);
    int rc = losses && step_s ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    rc = ls_dist_agree(d, rc, NULL);
    if (rc < 0) {
        free(losses), free(step_s);
        return rc;
    }
    int log_every = o->log_every > 0 ? o->log_every : (nsteps >= 10 ? nsteps / 10 : 1);
    double tok_per_step = (double)tc->batch * tc->seq;
    ls_progress pb;
    ls_progress_start(&pb, o->label ? o->label : "train", nsteps);
    if (rank != 0 || o->quiet) pb.enabled = 0;
    double t0 = ls_now();
    int nl = 0, stopped = 0;
    ls_train_timing tm0, tm1;
    double busy0 = 0, busy0_cpu = 0;
    for (int64_t s = start; s < (end = run_end(t, o)); s++) {
        float loss, gn;
        double ts = ls_now();
        if (nl == 0) ls_trainer_timing(t, &tm0);
        rc = ls_trainer_step(t, src, &loss, &gn);
        if (rc < 0) break;
        if (nl == 0) {
            ls_trainer_timing(t, &tm1);
            busy0 = ls_train_timing_busy(&tm1) - ls_train_timing_busy(&tm0);
            busy0_cpu = tm1.busy_cpu_s - tm0.busy_cpu_s;
        }
        double now = ls_now(), el = now - t0, tps = (nl + 1) * tok_per_step / (el > 0 ? el : 1e-9);
        if (nl == cap) { /* a long run, or a hook lengthened the schedule */
            int nc = cap < 64 ? 128 : 2 * cap;
            float *nlp = realloc(losses, ((size_t)nc + 1) * sizeof *losses);
            if (nlp) losses = nlp;
            double *nsp = nlp ? realloc(step_s, ((size_t)nc + 1) * sizeof *step_s) : NULL;
            if (!nsp) {
                rc = ls_err(LS_ENOMEM, "out of memory");
                break;
            }
            step_s = nsp;
            cap = nc;
        }
        losses[nl++] = loss;
        int hrc = LS_OK;
        ls_train_hooks h;
        ls_trainer_hooks(t, &h);
        if (h.after_step) {
            ls_train_step_info info = {s + 1, loss, gn, now - ts, tps, rank, N};
            hrc = h.after_step(h.ctx, t, &info);
        }
        /* one agreement per step on [failures, stop requests], so every rank fails or
         * stops (and saves) at the same step */
        float flags[2] = {hrc < 0 ? 1.0f : 0.0f, (hrc > 0 || (o->stop_flag && *o->stop_flag)) ? 1.0f : 0.0f};
        rc = ls_dist_allreduce_sum(d, flags, 2);
        step_s[nl - 1] = ls_now() - ts;
        if (rc < 0) break;
        if (flags[0] > 0) {
            rc = hrc < 0 ? hrc : ls_err(LS_EPEER, "another rank's step hook failed at step %" PRId64, s + 1);
            break;
        }
        if (flags[1] > 0) stopped = 1;
        if (!o->quiet) {
            if (pb.total != end - start) pb.total = end - start;
            ls_progress_update(&pb, nl, "loss %.4f  %.0f tok/s", loss, tps);
            if (rank == 0 && !pb.enabled && (nl % log_every == 0 || s == end - 1 || nl == 1))
                fprintf(stderr, "step %" PRId64 "/%d  loss %.4f  lr %.2e  grad-norm %.3f  %.0f tok/s\n", s + 1,
                        tc->steps, loss, ls_lr_at(&tc->opt, (int)s), gn, tps);
        }
        if (stopped) break;
        if (o->out && o->save_every > 0 && (s + 1) % o->save_every == 0 && s + 1 < run_end(t, o)) {
            rc = run_save(t, d, o, 1);
            if (rc < 0) break;
        }
    }
    if (!o->quiet) ls_progress_end(&pb);
    double wall = ls_now() - t0;
    if (rc == LS_OK && o->out) rc = run_save(t, d, o, nl > 0);
    if (rc < 0) {
        free(losses), free(step_s);
        return rc;
    }
    r->start_step = start;
    r->end_step = ls_trainer_step_index(t);
    r->losses = losses;
    r->step_s = step_s;
    r->n_losses = nl;
    r->wall_s = wall;
    r->busy0_s = busy0;
    r->busy0_cpu_s = busy0_cpu;
    r->tokens_per_s = wall > 0 ? nl * tok_per_step / wall : 0;
    r->stopped = stopped;
    return LS_OK;
}

void ls_train_run_result_free(ls_train_run_result *r) {
    if (!r) return;
    free(r->losses);
    free(r->step_s);
    memset(r, 0, sizeof *r);
}

cJSON *ls_train_run_report(ls_trainer *t, const ls_dist *d, const ls_train_run_result *r) {
    const ls_train_config *tc = ls_trainer_config(t);
    ls_model *m = ls_trainer_model(t);
    const ls_model_config *mc = ls_model_cfg(m);
    int nl = r->n_losses;
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "command", "train");
    cJSON_AddItemToObject(j, "config", ls_model_config_json(mc));
    cJSON_AddNumberToObject(j, "params", (double)ls_model_num_params(m));
    cJSON_AddNumberToObject(j, "ranks", ls_dist_size(d));
    cJSON_AddNumberToObject(j, "batch", tc->batch);
    cJSON_AddNumberToObject(j, "seq", tc->seq);
    cJSON_AddNumberToObject(j, "shards", tc->shards);
    cJSON_AddNumberToObject(j, "lr", tc->opt.lr);
    cJSON_AddNumberToObject(j, "warmup", tc->opt.warmup_steps);
    cJSON_AddNumberToObject(j, "steps", tc->steps);
    cJSON_AddNumberToObject(j, "start_step", (double)r->start_step);
    cJSON_AddNumberToObject(j, "end_step", (double)r->end_step);
    cJSON_AddNumberToObject(j, "initial_loss", nl > 0 ? r->losses[0] : NAN);
    cJSON_AddNumberToObject(j, "final_loss", nl > 0 ? r->losses[nl - 1] : NAN);
    cJSON *arr = cJSON_AddArrayToObject(j, "losses");
    for (int i = 0; arr && i < nl; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->losses[i]));
    arr = r->step_s ? cJSON_AddArrayToObject(j, "step_s") : NULL;
    for (int i = 0; arr && i < nl; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->step_s[i]));
    cJSON_AddNumberToObject(j, "tokens", (double)nl * tc->batch * tc->seq);
    cJSON_AddNumberToObject(j, "tokens_per_s", r->tokens_per_s);
    cJSON_AddNumberToObject(j, "wall_s", r->wall_s);
    ls_train_timing tm;
    ls_trainer_timing(t, &tm);
    cJSON *tj = cJSON_AddObjectToObject(j, "rank0_time_s");
    if (tj) {
        cJSON_AddNumberToObject(tj, "data", tm.data_s);
        cJSON_AddNumberToObject(tj, "forward_backward", tm.compute_s);
        cJSON_AddNumberToObject(tj, "allreduce", tm.comm_s);
        cJSON_AddNumberToObject(tj, "adamw", tm.update_s);
    }
    return j;
}
