/* audit.c - the steal module's command-level workflows (victim train / serve, the attack over
 * HTTP, its evaluation with baselines, the demo scenario): what `llmsys victim` and `llmsys
 * steal` run after parsing their options. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

/* ---------------------------------------------------------------- victim train */

void ls_victim_opts_given(ls_victim_opts *o, int type, const ls_victim_opts *g) {
    ls_victim_opts_default(o, type);
    if (g->epochs > 0) o->epochs = g->epochs;
    if (g->trees > 0) o->trees = g->trees;
    if (g->max_depth > 0) o->max_depth = g->max_depth;
    if (g->knn_ref > 0) o->knn_ref = g->knn_ref;
    if (g->hidden >= 0) o->hidden = g->hidden;
    if (g->conv1 > 0) o->conv1 = g->conv1;
    if (g->conv2 > 0) o->conv2 = g->conv2;
    if (g->kernel > 0) o->kernel = g->kernel;
}

int ls_victim_train_file(const ls_victim_opts *o, const char *data, int64_t train_n, const char *out,
                         const char *report, ls_victim_train_summary *s) {
    memset(s, 0, sizeof *s);
    if (ls_is_file(data) && ls_path_replaces(data, out)) /* a path, not a dataset's name */
        return ls_err(LS_EINVAL, "--out %s would replace the --data file", out);
    if (ls_path_replaces(out, report)) return ls_err(LS_EINVAL, "--out and --report name the same file %s", out);
    LS_TRY(ls_victim_opts_fit(o));
    LS_TRY(ls_out_path_check("out", out)); /* before the training, not after it */
    if (report) LS_TRY(ls_out_path_check("report", report));
    ls_steal_data tr, te;
    LS_TRY(ls_steal_dataset_open(data, train_n, &tr, &te));
    double t0 = ls_now();
    ls_victim *v;
    int rc = ls_victim_train(o, &tr, &v);
    if (rc == LS_OK) {
        s->seconds = ls_now() - t0;
        rc = ls_victim_accuracy(v, &te, &s->test_acc);
        if (rc == LS_OK) rc = ls_victim_accuracy(v, &tr, &s->train_acc);
        if (rc == LS_OK) rc = ls_victim_save(v, out);
        ls_victim_free(v);
    }
    snprintf(s->data_name, sizeof s->data_name, "%s", tr.name);
    s->train_rows = tr.n, s->test_rows = te.n, s->d = tr.d, s->k = tr.k;
    s->has_scaler = tr.raw_min != NULL;
    s->knn_ref = o->knn_ref < tr.n ? o->knn_ref : tr.n;
    if (rc == LS_OK && report) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "type", ls_victim_type_name(o->type));
        cJSON_AddStringToObject(j, "data", data);
        cJSON_AddNumberToObject(j, "train_rows", (double)tr.n);
        cJSON_AddNumberToObject(j, "test_rows", (double)te.n);
        cJSON_AddNumberToObject(j, "train_accuracy", s->train_acc);
        cJSON_AddNumberToObject(j, "test_accuracy", s->test_acc);
        cJSON_AddNumberToObject(j, "train_seconds", s->seconds);
        cJSON_AddStringToObject(j, "out", out);
        rc = ls_json_write_file(report, j);
        cJSON_Delete(j);
    }
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    return rc;
}

/* ---------------------------------------------------------------- victim serve */

/* The monitor's profile from the training split of dataset spec (in the model's units). */
static int monitor_profile(const char *spec, const ls_qmon_opts *mo, ls_qmon_ref **out) {
    ls_steal_data tr, te;
    LS_TRY(ls_steal_dataset_open(spec, 0, &tr, &te));
    int rc = ls_qmon_fit(&tr, mo, out);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    return rc;
}

int ls_victim_serve_check(const ls_victim_server_opts *so, const char *monitor_data, const ls_qmon_opts *mo) {
    LS_TRY(ls_victim_server_opts_check(so));
    if (so->monitor_mode != LS_PRADA_OFF && !monitor_data)
        return ls_err(LS_EINVAL, "--monitor needs the victim's training data (--monitor-data)");
    if (!(mo->z > 0)) return ls_err(LS_EINVAL, "--monitor-z must be > 0, got %g", mo->z);
    return LS_OK;
}

int ls_victim_serve_file(const char *model, const ls_victim_server_opts *so_in, const char *monitor_data,
                         const ls_qmon_opts *mo, const char *port_file, double duration, const volatile int *stop,
                         FILE *out) {
    ls_victim_server_opts so1 = *so_in, *so = &so1;
    ls_qmon_ref *prof = NULL;
    LS_TRY(ls_victim_serve_check(so, monitor_data, mo));
    if (so->monitor_mode != LS_PRADA_OFF) {
        LS_TRY(monitor_profile(monitor_data, mo, &prof));
        so->monitor = prof;
    }
    ls_victim *v;
    int rc = ls_victim_load(model, &v);
    if (rc) {
        ls_qmon_ref_free(prof);
        return rc;
    }
    ls_victim_server *srv;
    if ((rc = ls_victim_server_start(v, so, &srv))) {
        ls_victim_free(v);
        ls_qmon_ref_free(prof);
        return rc;
    }
    int d, k, shape[3];
    float lo, hi;
    ls_victim_info(v, &d, &k, &lo, &hi, shape);
    const char *units =
        ls_victim_server_input_range(srv, &lo, &hi) ? "the training data's units, per-feature ranges in GET /info" : "";
    char uh[80];
    fprintf(out,
            "victim %s serving on http://%s:%d/predict (input %dx%dx%d in [%g,%g]%s%s, %d classes, output %s, "
            "PRADA %s, query monitor %s)\n",
            ls_victim_type_name(ls_victim_kind(v)),
            ls_url_host(so->bind && so->bind[0] ? so->bind : "127.0.0.1", uh, sizeof uh), ls_victim_server_port(srv),
            shape[0], shape[1], shape[2], lo, hi, units[0] ? ", " : "", units, k, so->output_proba ? "proba" : "label",
            ls_prada_mode_name(so->prada_mode), ls_prada_mode_name(so->monitor_mode));
    fflush(out);
    rc = port_file ? ls_port_file_write(port_file, ls_victim_server_port(srv)) : LS_OK;
    double t0 = ls_now();
    while (!rc && !*stop && (duration <= 0 || ls_now() - t0 < duration)) ls_sleep_ms(50);
    if (!rc) {
        cJSON *st = ls_victim_server_stats(srv);
        char *txt = cJSON_PrintUnformatted(st);
        fprintf(out, "victim serve: stopping; stats %s\n", txt ? txt : "{}");
        free(txt);
        cJSON_Delete(st);
    }
    ls_victim_server_stop(srv);
    ls_victim_free(v);
    ls_qmon_ref_free(prof);
    return rc;
}

/* ---------------------------------------------------------------- the attack */

int ls_steal_opts_fit(const ls_steal_opts *o) {
    int64_t max_q = ls_mem_max_items(4.0 * ((double)o->c * o->h * o->w + o->k + 1)),
            max_b = ls_mem_max_items(4.0 * o->k);
    if (o->budget > max_q)
        return ls_err(LS_EINVAL, "--budget must be at most %lld here (every query kept in memory), got %lld",
                      (long long)max_q, (long long)o->budget);
    if (o->batch > max_b)
        return ls_err(LS_EINVAL, "--batch must be at most %lld here (a request's answers in memory), got %d",
                      (long long)max_b, o->batch);
    if (!(o->distill >= 0 && o->distill <= 8))
        return ls_err(LS_EINVAL, "--distill must be in [0, 8], got %g", o->distill);
    if (!(o->cnn_weight > 0 && o->cnn_weight <= 10))
        return ls_err(LS_EINVAL, "--cnn-weight must be in (0, 10], got %g", o->cnn_weight);
    if (o->cnn_rank && !o->cnn_member)
        return ls_err(LS_EINVAL, "--cnn-rank ranks with the CNN: not with --cnn-member 0");
    return LS_OK;
}

int ls_steal_attack_url(const ls_steal_opts *o, const char *target, const char *api_key, double timeout_s,
                        const char *out, const char *report, ls_steal_result *res) {
    LS_TRY(ls_out_path_check("out", out)); /* before the queries are spent */
    if (report) LS_TRY(ls_out_path_check("report", report));
    ls_steal_client *cl;
    LS_TRY(ls_steal_client_init(target, api_key, timeout_s, o->c * o->h * o->w, o->k, &cl));
    ls_replica *r = NULL;
    int rc = ls_steal_run(o, ls_steal_client_oracle(cl), &r, res);
    ls_steal_client_free(cl);
    if (rc) return rc;
    cJSON *j = ls_steal_result_json(target, o->strategy == LS_STEAL_RANDOM ? "random" : "synth", o, res);
    char *meta = cJSON_PrintUnformatted(j);
    rc = ls_replica_save(r, out, meta);
    free(meta);
    ls_replica_free(r);
    if (!rc && report) rc = ls_json_write_file(report, j);
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- evaluation */

void ls_steal_eval_opts_default(ls_steal_eval_opts *o) {
    memset(o, 0, sizeof *o);
    o->epochs = 30;
    o->timeout_s = 30;
}

/* The baselines' attack on the evaluation rows te with the same budget: their options, each
 * baseline's strategy to be set. */
static int baseline_opts(const ls_steal_eval_opts *eo, const ls_steal_data *te, ls_steal_opts *o) {
    ls_steal_opts_default(o);
    ls_steal_opts_for_data(o, te);
    o->budget = eo->budget > 0 ? eo->budget : ls_replica_recorded_queries(eo->replica);
    if (o->budget <= 0) return ls_err(LS_EINVAL, "baselines need --budget (the replica records no query count)");
    return ls_steal_opts_fit(o); /* before any query */
}

/* The two baselines with the same budget, each on the evaluation rows te. */
static int eval_baselines(const ls_steal_eval_opts *eo, ls_steal_client *cl, const ls_steal_data *tr,
                          const ls_steal_data *te, const int32_t *vlab, ls_steal_eval_result *r, cJSON *j) {
    const char *names[2] = {"random", "natural"};
    int strat[2] = {LS_STEAL_RANDOM, LS_STEAL_NATURAL};
    for (int b = 0; b < 2; b++) {
        if (strat[b] == LS_STEAL_NATURAL && tr->n == 0) {
            r->natural_skipped = 1; /* natural queries must not be the test rows themselves */
            continue;
        }
        ls_steal_opts o;
        LS_TRY(baseline_opts(eo, te, &o));
        o.strategy = strat[b];
        o.natural = tr;
        o.final_epochs = eo->epochs;
        o.use_proba = 0;
        o.verbose = 1;
        ls_replica *br;
        ls_steal_result res;
        LS_TRY(ls_steal_run(&o, ls_steal_client_oracle(cl), &br, &res));
        int rc = ls_steal_agreement(br, te, vlab, &r->base_agree[b], &r->base_acc[b]);
        ls_replica_free(br);
        if (rc) return rc;
        r->has_base[b] = 1;
        r->base_queries[b] = res.queries;
        cJSON *bj = cJSON_AddObjectToObject(j, names[b]);
        cJSON_AddNumberToObject(bj, "queries", (double)res.queries);
        cJSON_AddNumberToObject(bj, "agreement", r->base_agree[b]);
        cJSON_AddNumberToObject(bj, "accuracy", r->base_acc[b]);
    }
    return LS_OK;
}

int ls_steal_eval_opts_check(const ls_steal_eval_opts *eo) {
    if (eo->test_split < 0 || eo->test_split >= 1 || (eo->test_split > 0 && ls_steal_dataset_is_named(eo->data)))
        return ls_err(LS_EINVAL,
                      "--test-split takes a fraction in (0, 1) and a CSV file (%s has its own held-out split)",
                      eo->data);
    if (!(eo->timeout_s > 0 && eo->timeout_s <= 86400))
        return ls_err(LS_EINVAL, "--timeout must be in (0, 86400] s, got %g", eo->timeout_s);
    if (ls_path_replaces(eo->replica, eo->report) || (ls_is_file(eo->data) && ls_path_replaces(eo->data, eo->report)))
        return ls_err(LS_EINVAL, "--report %s would replace an input (--replica or --test-data)", eo->report);
    return LS_OK;
}

int ls_steal_eval(const ls_steal_eval_opts *eo, ls_steal_eval_result *r) {
    memset(r, 0, sizeof *r);
    r->units = "as given";
    LS_TRY(ls_steal_eval_opts_check(eo));
    if (eo->report) LS_TRY(ls_out_path_check("report", eo->report)); /* before the queries */
    ls_replica *rep;
    LS_TRY(ls_replica_load(eo->replica, &rep));
    ls_steal_data tr, te_full, te;
    int fail = ls_steal_testset_open(eo->data, eo->test_split, &tr, &te_full, r->desc, sizeof r->desc);
    if (fail) {
        ls_replica_free(rep);
        return fail;
    }
    fail = ls_steal_data_subset(&te_full, eo->test_n, 3, &te);
    int64_t full_n = te_full.n;
    ls_steal_data_free(&te_full);
    if (!fail && te.n < full_n) {
        size_t l = strlen(r->desc);
        snprintf(r->desc + l, sizeof r->desc - l, ", %lld of them by --test-n", (long long)te.n);
    }
    int d, k;
    ls_replica_info(rep, &d, &k);
    if (!fail && (d != te.d || k != te.k))
        fail = ls_err(LS_EINVAL, "replica is %d features / %d classes but %s has %d / %d", d, k, eo->data, te.d, te.k);
    ls_steal_opts bo;
    if (!fail && eo->baselines) fail = baseline_opts(eo, &te, &bo);
    ls_steal_client *cl = NULL;
    int32_t *vlab = NULL;
    if (!fail) fail = ls_steal_client_init(eo->target, eo->api_key, eo->timeout_s, te.d, te.k, &cl);
    r->queried = !fail; /* the inputs and --target are checked: from here on the victim answers */
    if (!fail) {
        ls_steal_data *sets[2] = {&te, &tr};
        fail = ls_steal_match_units(cl, sets, 2, &r->units);
    }
    if (!fail) {
        vlab = malloc(sizeof(int32_t) * (size_t)te.n);
        fail = vlab ? ls_steal_client_labels(cl, &te, vlab) : ls_err(LS_ENOMEM, "out of memory");
    }
    if (!fail) fail = ls_steal_agreement(rep, &te, vlab, &r->agreement, &r->accuracy);
    if (!fail) r->victim_accuracy = ls_steal_label_accuracy(vlab, &te);
    r->test_rows = te.n;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "test_data", r->desc);
    cJSON_AddStringToObject(j, "units", r->units);
    cJSON_AddNumberToObject(j, "test_rows", (double)te.n);
    cJSON_AddNumberToObject(j, "agreement", r->agreement);
    cJSON_AddNumberToObject(j, "accuracy", r->accuracy);
    cJSON_AddNumberToObject(j, "victim_accuracy", r->victim_accuracy);
    if (!fail) r->evaluated = 1;
    if (!fail && eo->baselines) fail = eval_baselines(eo, cl, &tr, &te, vlab, r, j);
    if (!fail && eo->report) fail = ls_json_write_file(eo->report, j);
    cJSON_Delete(j);
    free(vlab);
    ls_steal_client_free(cl);
    ls_replica_free(rep);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    return fail;
}

/* ---------------------------------------------------------------- demo */

/* One victim of the demo: trained, saved and reloaded, served with PRADA logging; the attack
 * and the random baseline at each budget, one row each. */
static int demo_victim(const char *dir, int quick, int type, const ls_steal_data *tr, const ls_steal_data *te,
                       const ls_qmon_ref *prof, const int64_t *budgets, int nb, FILE *out) {
    ls_victim_opts vo;
    ls_victim_opts_default(&vo, type);
    if (quick) {
        vo.epochs = 3;
        vo.hidden = 64;
    }
    ls_victim *v;
    LS_TRY(ls_victim_train(&vo, tr, &v));
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.bin", dir, ls_victim_type_name(type));
    ls_victim *vl = NULL;
    double vacc = 0;
    int fail = ls_victim_save(v, path) || ls_victim_load(path, &vl) || ls_victim_accuracy(vl, te, &vacc);
    ls_victim_free(v);
    if (fail) {
        ls_victim_free(vl);
        return LS_EIO;
    }
    ls_victim_server_opts so;
    ls_victim_server_opts_default(&so);
    so.admin_key = "auditor";
    so.prada_mode = LS_PRADA_LOG;
    /* the two attackers of each budget are told apart by their keys (secret = name) */
    ls_victim_key keys[4] = {{{0}}};
    for (int b = 0; b < nb; b++)
        for (int s = 0; s < 2; s++) {
            ls_victim_key *kk = &keys[2 * b + s];
            snprintf(kk->name, sizeof kk->name, "%s-%lld", s ? "random" : "attacker", (long long)budgets[b]);
            memcpy(kk->secret, kk->name, sizeof kk->name);
        }
    so.keys = keys;
    so.n_keys = 2 * nb;
    so.monitor = prof;
    so.monitor_mode = LS_PRADA_LOG;
    snprintf(path, sizeof path, "%s/%s-queries.log", dir, ls_victim_type_name(type));
    so.log_path = path;
    ls_victim_server *srv;
    if (ls_victim_server_start(vl, &so, &srv)) {
        ls_victim_free(vl);
        return LS_EIO;
    }
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(srv));
    ls_steal_client *aud = NULL;
    int32_t *vlab = malloc(sizeof(int32_t) * (size_t)te->n);
    fail = !vlab || ls_steal_client_init(url, "auditor", 30, te->d, te->k, &aud) || ls_steal_client_labels(aud, te, vlab);
    ls_steal_client_free(aud);
    for (int b = 0; b < nb && !fail; b++) {
        double ag[2] = {0, 0}, secs = 0;
        int64_t flagged[2] = {-1, -1}, mon = -1;
        for (int s = 0; s < 2 && !fail; s++) {
            char key[64];
            snprintf(key, sizeof key, "%s-%lld", s ? "random" : "attacker", (long long)budgets[b]);
            ls_steal_client *cl;
            fail = ls_steal_client_init(url, key, 30, te->d, te->k, &cl);
            if (fail) break;
            ls_steal_opts o;
            ls_steal_opts_default(&o);
            o.budget = budgets[b];
            o.strategy = s ? LS_STEAL_RANDOM : LS_STEAL_SYNTH;
            o.use_proba = 0;
            o.final_epochs = quick ? 15 : 20;
            o.members = 1;    /* one network and no CNN member keep the demo quick; */
            o.cnn_member = 0; /* `llmsys steal` averages 3 and tests a CNN */
            if (quick) o.hidden1 = 64, o.hidden2 = 32;
            o.seed = 7;
            ls_replica *r;
            ls_steal_result res;
            fail = ls_steal_run(&o, ls_steal_client_oracle(cl), &r, &res);
            ls_steal_client_free(cl);
            if (fail) break;
            if (!s) secs = res.seconds;
            fail = ls_steal_agreement(r, te, vlab, &ag[s], NULL);
            if (!s && !fail && b == nb - 1) {
                snprintf(path, sizeof path, "%s/%s-replica.safetensors", dir, ls_victim_type_name(type));
                fail = ls_replica_save(r, path, NULL);
            }
            ls_replica_free(r);
            char id[80];
            snprintf(id, sizeof id, "key:%s", key);
            ls_victim_server_client(srv, id, NULL, &flagged[s], NULL);
            if (!s) ls_victim_server_monitor(srv, id, 0, &mon, NULL);
        }
        if (fail) break;
        char fl[2][64];
        for (int t = 0; t < 2; t++)
            if ((t ? mon : flagged[0]) >= 0)
                snprintf(fl[t], sizeof fl[t], "after %lld", (long long)(t ? mon : flagged[0]));
            else
                snprintf(fl[t], sizeof fl[t], "not flagged");
        fprintf(out, "%-7s %8.3f %7lld %10.3f %10.3f %8.1fs %-12s %s\n", ls_victim_type_name(type), vacc,
                (long long)budgets[b], ag[0], ag[1], secs, fl[0], fl[1]);
        fflush(out);
    }
    free(vlab);
    ls_victim_server_stop(srv);
    ls_victim_free(vl);
    return fail ? LS_EIO : LS_OK;
}

int ls_steal_demo(const char *dir, int quick, FILE *out) {
    LS_TRY(ls_mkdirs(dir));
    int64_t train_n = quick ? 1500 : 20000, test_n = quick ? 500 : 5000;
    int64_t budgets_full[2] = {1000, 5000}, budgets_quick[1] = {300};
    const int64_t *budgets = quick ? budgets_quick : budgets_full;
    int nb = quick ? 1 : 2;
    int types[2] = {LS_VICTIM_LOGREG, LS_VICTIM_MLP};
    ls_steal_data tr, te_full, te;
    LS_TRY(ls_steal_dataset_open("fmnist", train_n, &tr, &te_full));
    int rc = ls_steal_data_subset(&te_full, test_n, 3, &te);
    ls_steal_data_free(&te_full);
    if (rc) {
        ls_steal_data_free(&tr);
        return rc;
    }
    fprintf(out, "Fashion-MNIST: %lld train rows for the victims, %lld held-out test rows for agreement\n",
            (long long)tr.n, (long long)te.n);
    ls_qmon_opts mo;
    ls_qmon_opts_default(&mo);
    ls_qmon_ref *prof = NULL;
    rc = ls_qmon_fit(&tr, &mo, &prof);
    fprintf(out, "%-7s %8s %7s %10s %10s %9s %-12s %s\n", "victim", "v.acc", "budget", "agreement", "random", "time",
            "PRADA", "query monitor");
    for (int t = 0; t < 2 && !rc; t++) rc = demo_victim(dir, quick, types[t], &tr, &te, prof, budgets, nb, out);
    ls_qmon_ref_free(prof);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    if (rc) return rc;
    fprintf(out,
            "agreement = label agreement with the victim on held-out natural test images (the published metric);\n"
            "random = a replica from the same number of uniform random queries; PRADA / query monitor: when each\n"
            "detector flagged the attacker. Files under %s\n",
            dir);
    return LS_OK;
}
