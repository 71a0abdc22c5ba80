/* bench_steal.c - model-extraction audit benchmark: per victim type x dataset x budget, the
 * replica's agreement with the victim on held-out natural test data, its accuracy, queries,
 * wall time and whether PRADA flagged the attacker; baselines measured in the same run:
 * uniform random queries with the same budget, and the same number of real training
 * samples labelled by the victim (upper reference). Everything goes over HTTP. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

typedef struct {
    double agree, acc, secs;
    int64_t queries, flagged_at;
    double w;
} outcome;

static int run_one(ls_victim_server *srv, const ls_steal_data *tr, const ls_steal_data *te, const int32_t *vlab,
                   int strategy, int64_t budget, int final_epochs, int proba, uint64_t seed, const char *key,
                   outcome *out) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(srv));
    ls_steal_client *cl;
    LS_TRY(ls_steal_client_init(url, key, 30, te->d, te->k, &cl));
    ls_steal_opts o;
    ls_steal_opts_default(&o);
    ls_steal_opts_for_data(&o, te);
    o.budget = budget;
    o.strategy = strategy;
    o.natural = tr;
    o.use_proba = proba;
    o.final_epochs = final_epochs;
    o.seed = seed;
    ls_replica *r = NULL;
    ls_steal_result res;
    int rc = ls_steal_run(&o, ls_steal_client_oracle(cl), &r, &res);
    ls_steal_client_free(cl);
    if (rc) return rc;
    if (res.stopped_early) LS_WARN("bench: %s stopped early: %s", key, res.error);
    rc = ls_steal_agreement(r, te, vlab, &out->agree, &out->acc);
    ls_replica_free(r);
    out->secs = res.seconds;
    out->queries = res.queries;
    char id[160];
    snprintf(id, sizeof id, "key:%s", key);
    ls_victim_server_client(srv, id, NULL, &out->flagged_at, &out->w);
    return rc;
}

static int split_list(char *s, char **items, int max) {
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) items[n++] = t;
    return n;
}

int main(int argc, char **argv) {
    const char *out = NULL, *victims_s = "logreg,svm,tree,forest,knn,nb,mlp,cnn", *datasets_s = "fmnist,blobs,rings,wine,cancer,digits";
    const char *budgets_s = "1000,5000,20000";
    int64_t train_n = 30000, test_n = 0;
    int no_base = 0, quick = 0, epochs = 30, proba = 0;
    uint64_t seed = 1;
    double delta = 0.95;
    /* Small batches on shared cores: OpenBLAS threads would mostly spin. */
    openblas_set_num_threads(1);
    /* Options (no libllmsys CLI parser here: src/cli is not part of the library). */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            printf("usage: bench_steal [--out FILE] [--victims LIST] [--datasets LIST] [--budgets LIST]\n"
                   "                   [--train-n N] [--test-n N] [--epochs N] [--delta W] [--no-baselines] [--proba] "
                   "[--seed N] [--quick]\n"
                   "  victims: logreg,svm,tree,forest,knn,nb,mlp,cnn (cnn on image data only, skipped on tables)\n"
                   "  datasets: fmnist,blobs,rings,wine,cancer,digits or CSV paths\n");
            return 0;
        } else if (!strcmp(a, "--no-baselines"))
            no_base = 1;
        else if (!strcmp(a, "--quick"))
            quick = 1;
        else if (!strcmp(a, "--proba"))
            proba = 1;
        else if (!v) {
            fprintf(stderr, "bench_steal: %s needs a value (see --help)\n", a);
            return 2;
        } else if (!strcmp(a, "--out"))
            out = argv[++i];
        else if (!strcmp(a, "--victims"))
            victims_s = argv[++i];
        else if (!strcmp(a, "--datasets"))
            datasets_s = argv[++i];
        else if (!strcmp(a, "--budgets"))
            budgets_s = argv[++i];
        else if (!strcmp(a, "--train-n"))
            train_n = atoll(argv[++i]);
        else if (!strcmp(a, "--test-n"))
            test_n = atoll(argv[++i]);
        else if (!strcmp(a, "--epochs"))
            epochs = atoi(argv[++i]);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--delta"))
            delta = atof(argv[++i]);
        else {
            fprintf(stderr, "bench_steal: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    char vbuf[256], dbuf[1024], bbuf[256];
    snprintf(vbuf, sizeof vbuf, "%s", quick ? "logreg,tree" : victims_s);
    snprintf(dbuf, sizeof dbuf, "%s", quick ? "fmnist" : datasets_s);
    snprintf(bbuf, sizeof bbuf, "%s", quick ? "1000" : budgets_s);
    if (quick) {
        train_n = 5000;
        test_n = 2000;
        epochs = 15;
    }
    char *vl[16], *dl[16], *bl[16];
    int nv = split_list(vbuf, vl, 16), nd = split_list(dbuf, dl, 16), nb = split_list(bbuf, bl, 16);
    cJSON *root = cJSON_CreateObject();
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    cJSON_AddNumberToObject(root, "prada_delta", delta);
    cJSON_AddBoolToObject(root, "probabilities", proba);
    printf("%-7s %-7s %6s %7s | %-26s | %-15s | %-15s | %s\n", "data", "victim", "v.acc", "budget",
           "ours: agree  acc   time", "random: agree", "natural: agree", "flagged at (ours/rand/nat)");
    double sum_agree[16] = {0}, best_agree[16] = {0};
    int cnt_agree[16] = {0};
    int64_t nat_clients = 0, nat_flagged = 0;
    for (int di = 0; di < nd; di++) {
        ls_steal_data tr, te_full, te;
        if (ls_steal_dataset_open(dl[di], train_n, &tr, &te_full)) {
            fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
            return 1;
        }
        if (ls_steal_data_subset(&te_full, test_n, 3, &te)) return 1;
        ls_steal_data_free(&te_full);
        for (int vi = 0; vi < nv; vi++) {
            int type = ls_victim_type_parse(vl[vi]);
            if (type < 0) {
                fprintf(stderr, "bench_steal: unknown victim '%s'\n", vl[vi]);
                return 2;
            }
            if (type == LS_VICTIM_CNN && (tr.h < 4 || tr.w < 4)) {
                printf("%-7s %-7s (skipped: the cnn victim needs image-shaped data, %s is a table)\n", dl[di], vl[vi],
                       dl[di]);
                continue;
            }
            ls_victim_opts vo;
            ls_victim_opts_default(&vo, type);
            ls_victim *v;
            if (ls_victim_train(&vo, &tr, &v)) {
                fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
                return 1;
            }
            double vacc;
            ls_victim_accuracy(v, &te, &vacc);
            ls_victim_server_opts so;
            ls_victim_server_opts_default(&so);
            so.model_units = 1; /* the attack works in the model's [0, 1], as the rows here are scaled */
            so.admin_key = "auditor";
            so.output_proba = proba;
            so.prada_mode = LS_PRADA_LOG;
            so.prada.delta = delta;
            ls_victim_server *srv;
            if (ls_victim_server_start(v, &so, &srv)) {
                fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
                return 1;
            }
            /* The auditor's view of the victim on the test set (not counted in any budget). */
            char url[128];
            snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(srv));
            ls_steal_client *aud;
            int32_t *vlab = malloc(sizeof(int32_t) * (size_t)te.n);
            ls_steal_client_init(url, "auditor", 30, te.d, te.k, &aud);
            if (ls_steal_client_labels(aud, &te, vlab)) {
                fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
                return 1;
            }
            ls_steal_client_free(aud);
            for (int bi = 0; bi < nb; bi++) {
                int64_t budget = atoll(bl[bi]);
                outcome ours = {0}, rnd = {0}, nat = {0};
                ours.flagged_at = rnd.flagged_at = nat.flagged_at = -1;
                char key[64];
                snprintf(key, sizeof key, "synth-%lld", (long long)budget);
                if (run_one(srv, &tr, &te, vlab, LS_STEAL_SYNTH, budget, epochs, proba, seed, key, &ours)) {
                    fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
                    return 1;
                }
                if (!no_base) {
                    snprintf(key, sizeof key, "random-%lld", (long long)budget);
                    if (run_one(srv, &tr, &te, vlab, LS_STEAL_RANDOM, budget, epochs, proba, seed, key, &rnd)) return 1;
                    snprintf(key, sizeof key, "natural-%lld", (long long)budget);
                    if (run_one(srv, &tr, &te, vlab, LS_STEAL_NATURAL, budget, epochs, proba, seed, key, &nat)) return 1;
                    nat_clients++;
                    nat_flagged += nat.flagged_at >= 0;
                }
                printf("%-7s %-7s %6.3f %7lld | %6.3f %6.3f %6.1fs | %6.3f        | %6.3f          | %lld/%lld/%lld\n",
                       dl[di], vl[vi], vacc, (long long)budget, ours.agree, ours.acc, ours.secs, rnd.agree, nat.agree,
                       (long long)ours.flagged_at, (long long)rnd.flagged_at, (long long)nat.flagged_at);
                fflush(stdout);
                if (!strcmp(dl[di], "fmnist") && budget <= 20000) {
                    sum_agree[bi] += ours.agree;
                    cnt_agree[bi]++;
                    if (ours.agree > best_agree[bi]) best_agree[bi] = ours.agree;
                }
                cJSON *row = cJSON_CreateObject();
                cJSON_AddStringToObject(row, "dataset", dl[di]);
                cJSON_AddStringToObject(row, "victim", vl[vi]);
                cJSON_AddNumberToObject(row, "victim_accuracy", vacc);
                cJSON_AddNumberToObject(row, "budget", (double)budget);
                cJSON_AddNumberToObject(row, "agreement", ours.agree);
                cJSON_AddNumberToObject(row, "accuracy", ours.acc);
                cJSON_AddNumberToObject(row, "queries", (double)ours.queries);
                cJSON_AddNumberToObject(row, "seconds", ours.secs);
                cJSON_AddNumberToObject(row, "flagged_at", (double)ours.flagged_at);
                cJSON_AddNumberToObject(row, "prada_min_w", ours.w);
                if (!no_base) {
                    cJSON_AddNumberToObject(row, "random_agreement", rnd.agree);
                    cJSON_AddNumberToObject(row, "random_flagged_at", (double)rnd.flagged_at);
                    cJSON_AddNumberToObject(row, "random_prada_min_w", rnd.w);
                    cJSON_AddNumberToObject(row, "natural_agreement", nat.agree);
                    cJSON_AddNumberToObject(row, "natural_accuracy", nat.acc);
                    cJSON_AddNumberToObject(row, "natural_flagged_at", (double)nat.flagged_at);
                    cJSON_AddNumberToObject(row, "natural_prada_min_w", nat.w);
                }
                cJSON_AddItemToArray(rows, row);
            }
            free(vlab);
            ls_victim_server_stop(srv);
            ls_victim_free(v);
        }
        ls_steal_data_free(&tr);
        ls_steal_data_free(&te);
    }
    printf("\nFashion-MNIST, %s, ours: ", proba ? "probabilities" : "label-only");
    cJSON *summ = cJSON_AddArrayToObject(root, "fmnist_summary");
    for (int bi = 0; bi < nb; bi++) {
        if (!cnt_agree[bi]) continue;
        printf("budget %s: mean agreement %.3f, best %.3f over %d victims;  ", bl[bi], sum_agree[bi] / cnt_agree[bi],
               best_agree[bi], cnt_agree[bi]);
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "budget", atof(bl[bi]));
        cJSON_AddNumberToObject(s, "mean_agreement", sum_agree[bi] / cnt_agree[bi]);
        cJSON_AddNumberToObject(s, "best_agreement", best_agree[bi]);
        cJSON_AddItemToArray(summ, s);
    }
    printf("\n(published ML-Stealer: mean 0.856, best 0.936)\n");
    if (!no_base)
        printf("PRADA (delta %.2f) false positives on natural traffic: %lld of %lld clients\n", delta,
               (long long)nat_flagged, (long long)nat_clients);
    cJSON_AddNumberToObject(root, "natural_clients", (double)nat_clients);
    cJSON_AddNumberToObject(root, "natural_flagged", (double)nat_flagged);
    if (out && ls_json_write_file(out, root)) {
        fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
        return 1;
    }
    cJSON_Delete(root);
    return 0;
}
