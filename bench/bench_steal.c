/* bench_steal.c - model-extraction audit benchmark, in two sets: development tasks (those the
 * attack was designed on: Fashion-MNIST and the tables) and held-out tasks (generated image
 * tasks and tables it never saw). Per victim type x task x budget: the replica's agreement
 * with the victim on held-out natural test data, its accuracy, queries, wall time; baselines
 * in the same run (uniform random queries with the same budget, the same number of real
 * training rows labelled by the victim); and both extraction detectors side by side (PRADA
 * and the query-distribution monitor): when each flagged the attack, and which natural-data
 * clients (the natural baseline and a client replaying the test rows) each flagged, with the
 * trade-off over each detector's threshold. Everything goes over HTTP. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

/* One of the attacker's member tests (the CNN's, the linear member's) as a row reports it. */
typedef struct {
    int tested, kept;
    double acc, agree_without;
    int64_t better, worse;
} member_test;

typedef struct {
    double agree, acc, secs;
    int64_t queries, flagged_at, mon_at[LS_QMON_GRID];
    double w, max_z;
    int tree_tested, tree_kept; /* the attacker's CART test ran; the replica kept its CART member */
    int distilled;              /* the replica's members were distilled (ls_steal_opts.distill) */
    double style_share[LS_STEAL_NSTYLE]; /* images: the queries' spread over the prior's styles */
    double blend_share;                  /* ... and the pixel blends, which have none */
    double tree_acc, mlp_acc; /* the accuracies of that test (when tree_tested) */
    /* The attacker's tests of its CNN and linear members: ran; kept; the held-back accuracy of
     * the MLP plus the member; the replica's agreement without the member (= agree when none;
     * the CNN's without the linear member too); held-back rows won and lost by adding it. */
    member_test cnn, lin;
    /* ls_steal_opts.cnn_rank: the CNN's test after the seeds (its acc and counts; agree_without
     * unused), the answers it ran on and the rounds then ranked with the CNN */
    member_test rank;
    int64_t rank_answers;
    int rank_rounds;
    int rank_cart_tested, rank_cart_won; /* ... the CART's test there, which when won left the MLP ranking */
    double rank_cart_acc, rank_mlp_acc;
} outcome;

typedef struct {
    int nb, epochs, proba, no_base, tree_member, cnn_member, cnn_shift, cnn_epochs, cnn_rank,
        linear_member;                                                              /* < 0: default */
    double distill, cnn_weight;                                                     /* < 0: the attack's default */
    int64_t train_n, test_n, budgets[16];
    uint64_t seed;
    double delta;
    ls_qmon_opts mo;
} bench_cfg;

/* One member test under a result row: "cnn member kept: MLP + CNN 0.562, MLP 0.520 on ...". */
static void member_print(const char *name, const char *shown, const member_test *t, double mlp_acc) {
    if (!t->tested) return;
    printf("%-10s %-7s   %s member %s: MLP + %s %.3f, MLP %.3f on the held-back fifth (rows +%lld -%lld); agreement "
           "%.3f without it\n",
           "", "", name, t->kept ? "kept" : "dropped", shown, t->acc, mlp_acc, (long long)t->better,
           (long long)t->worse, t->agree_without);
}

/* The same in a JSON row: NAME_member_kept, NAME_test_mlp_plus_NAME, agreement_without_NAME,
 * NAME_test_rows_better, NAME_test_rows_worse. */
static void member_json(cJSON *row, const char *name, const member_test *t) {
    if (!t->tested) return;
    char k[64];
    snprintf(k, sizeof k, "%s_member_kept", name);
    cJSON_AddBoolToObject(row, k, t->kept);
    snprintf(k, sizeof k, "%s_test_mlp_plus_%s", name, name);
    cJSON_AddNumberToObject(row, k, t->acc);
    snprintf(k, sizeof k, "agreement_without_%s", name);
    cJSON_AddNumberToObject(row, k, t->agree_without);
    snprintf(k, sizeof k, "%s_test_rows_better", name);
    cJSON_AddNumberToObject(row, k, (double)t->better);
    snprintf(k, sizeof k, "%s_test_rows_worse", name);
    cJSON_AddNumberToObject(row, k, (double)t->worse);
}

/* What the detectors saw of one client: PRADA's min W and flag; the monitor's flag per grid z. */
static void detector_view(ls_victim_server *srv, const char *key, outcome *out) {
    char id[160];
    snprintf(id, sizeof id, "key:%s", key);
    ls_victim_server_client(srv, id, NULL, &out->flagged_at, &out->w);
    for (int g = 0; g < LS_QMON_GRID; g++) ls_victim_server_monitor(srv, id, ls_qmon_grid[g], &out->mon_at[g], &out->max_z);
}

static int run_one(ls_victim_server *srv, const ls_steal_data *tr, const ls_steal_data *te, const int32_t *vlab,
                   int strategy, int64_t budget, const bench_cfg *c, const char *key, outcome *out) {
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
    o.use_proba = c->proba;
    o.final_epochs = c->epochs;
    o.seed = c->seed;
    if (c->tree_member >= 0) o.tree_member = c->tree_member;
    if (c->cnn_member >= 0) o.cnn_member = c->cnn_member;
    if (c->cnn_shift >= 0) o.cnn_shift = c->cnn_shift;
    if (c->cnn_epochs >= 0) o.cnn_epochs = c->cnn_epochs;
    if (c->cnn_rank >= 0) o.cnn_rank = c->cnn_rank;
    if (c->distill >= 0) o.distill = c->distill;
    if (c->cnn_weight >= 0) o.cnn_weight = c->cnn_weight;
    if (c->linear_member >= 0) o.linear_member = c->linear_member;
    ls_replica *r = NULL;
    ls_steal_result res;
    int rc = ls_steal_run(&o, ls_steal_client_oracle(cl), &r, &res);
    ls_steal_client_free(cl);
    if (rc) return rc;
    if (res.stopped_early) LS_WARN("bench: %s stopped early: %s", key, res.error);
    out->cnn = (member_test){res.cnn_tested, res.cnn_kept, res.cnn_acc, 0, res.cnn_better, res.cnn_worse};
    out->lin = (member_test){res.linear_tested, res.linear_kept, res.linear_acc, 0, res.linear_better, res.linear_worse};
    out->rank = (member_test){res.cnn_rank_tested, res.cnn_rank_kept, res.cnn_rank_acc, 0,
                              res.cnn_rank_better, res.cnn_rank_worse};
    out->rank_answers = res.cnn_rank_answers, out->rank_rounds = res.cnn_rank_rounds;
    out->rank_cart_tested = res.cnn_rank_cart_tested, out->rank_cart_won = res.cnn_rank_cart_won;
    out->rank_cart_acc = res.cnn_rank_cart_acc, out->rank_mlp_acc = res.cnn_rank_mlp_acc;
    rc = ls_steal_agreement(r, te, vlab, &out->agree, &out->acc);
    out->lin.agree_without = out->agree;
    if (!rc && ls_replica_has_linear(r)) { /* without its linear member: what that member added */
        ls_replica_drop_linear(r);
        rc = ls_steal_agreement(r, te, vlab, &out->lin.agree_without, NULL);
    }
    out->cnn.agree_without = out->lin.agree_without;
    if (!rc && ls_replica_has_cnn(r)) { /* the same replica without its CNN: what the member added */
        ls_replica_drop_cnn(r);
        rc = ls_steal_agreement(r, te, vlab, &out->cnn.agree_without, NULL);
    }
    ls_replica_free(r);
    out->secs = res.seconds;
    out->queries = res.queries;
    out->tree_tested = res.tree_tested, out->tree_kept = res.tree_kept, out->tree_acc = res.tree_acc, out->mlp_acc = res.mlp_acc;
    out->distilled = res.distilled;
    memcpy(out->style_share, res.style_share, sizeof out->style_share);
    out->blend_share = res.blend_share;
    detector_view(srv, key, out);
    return rc;
}

/* A natural client that replays up to n test rows (shuffled) through the API. */
static int replay_test(ls_victim_server *srv, const ls_steal_data *te, int64_t n, const char *key, outcome *out) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(srv));
    ls_steal_data sub;
    LS_TRY(ls_steal_data_subset(te, n, 17, &sub));
    ls_steal_client *cl;
    int rc = ls_steal_client_init(url, key, 30, te->d, te->k, &cl);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)sub.n);
    if (!rc) rc = lab ? ls_steal_client_labels(cl, &sub, lab) : ls_err(LS_ENOMEM, "out of memory");
    free(lab);
    ls_steal_client_free(cl);
    ls_steal_data_free(&sub);
    if (!rc) detector_view(srv, key, out);
    return rc;
}

static int split_list(char *s, char **items, int max) {
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) items[n++] = t;
    return n;
}

/* Detector statistics over all runs of a set, for the trade-off tables. */
typedef struct {
    int attacks, naturals;
    double attack_minw[512], natural_minw[512];
    int64_t attack_mon[512][LS_QMON_GRID], natural_mon[512][LS_QMON_GRID], attack_prada[512];
} detstats;

static const char *classic[7] = {"logreg", "svm", "tree", "forest", "knn", "nb", "mlp"};
static int is_classic(const char *v) {
    for (int i = 0; i < 7; i++)
        if (!strcmp(v, classic[i])) return 1;
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Runs one set of tasks; prints its table, summaries and the detectors' trade-off. */
static int run_set(const char *set, char **dl, int nd, char **vl, int nv, const bench_cfg *c, cJSON *rows,
                   cJSON *summary) {
    printf("\n== %s tasks ==\n", set);
    printf("%-10s %-7s %6s %6s | %-20s | %6s | %6s | %5s | %-17s | %-17s\n", "data", "victim", "v.acc", "budget",
           "ours: agree   time", "random", "natural", "prog.", "PRADA ours/nat", "monitor ours/nat");
    static detstats ds;
    memset(&ds, 0, sizeof ds);
    double sum[16][16] = {{0}}, prog_min[16][16];
    int cnt[16][16] = {{0}};
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) prog_min[i][j] = 1e9;
    for (int di = 0; di < nd; di++) {
        ls_steal_data tr, te_full, te;
        LS_TRY(ls_steal_dataset_open(dl[di], c->train_n, &tr, &te_full));
        LS_TRY(ls_steal_data_subset(&te_full, c->test_n, 3, &te));
        ls_steal_data_free(&te_full);
        ls_qmon_ref *prof;
        LS_TRY(ls_qmon_fit(&tr, &c->mo, &prof));
        for (int vi = 0; vi < nv; vi++) {
            int type = ls_victim_type_parse(vl[vi]);
            if (type < 0) return ls_err(LS_EINVAL, "unknown victim '%s'", vl[vi]);
            if (type == LS_VICTIM_CNN && (tr.h < 4 || tr.w < 4)) continue;
            ls_victim_opts vo;
            ls_victim_opts_default(&vo, type);
            ls_victim *v;
            LS_TRY(ls_victim_train(&vo, &tr, &v));
            double vacc;
            ls_victim_accuracy(v, &te, &vacc);
            ls_victim_server_opts so;
            ls_victim_server_opts_default(&so);
            so.model_units = 1; /* the attack works in the model's [0, 1], as the rows here are scaled */
            so.admin_key = "auditor";
            so.output_proba = c->proba;
            so.prada_mode = LS_PRADA_LOG;
            so.prada.delta = c->delta;
            so.monitor = prof;
            so.monitor_mode = LS_PRADA_LOG;
            /* every client has its key (secret = name), so the server tells them apart */
            static ls_victim_key keys[3 * 16 + 1];
            int nk = 0;
            snprintf(keys[nk].name, sizeof keys[nk].name, "natural-test");
            nk++;
            for (int bi = 0; bi < c->nb; bi++)
                for (int s3 = 0; s3 < 3; s3++, nk++)
                    snprintf(keys[nk].name, sizeof keys[nk].name, "%s-%lld", s3 == 0 ? "synth" : s3 == 1 ? "random" : "natural",
                             (long long)c->budgets[bi]);
            for (int i = 0; i < nk; i++) memcpy(keys[i].secret, keys[i].name, sizeof keys[i].name);
            so.keys = keys;
            so.n_keys = nk;
            ls_victim_server *srv;
            LS_TRY(ls_victim_server_start(v, &so, &srv));
            char url[128];
            snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(srv));
            ls_steal_client *aud;
            int32_t *vlab = malloc(sizeof(int32_t) * (size_t)te.n);
            LS_TRY(ls_steal_client_init(url, "auditor", 30, te.d, te.k, &aud));
            LS_TRY(ls_steal_client_labels(aud, &te, vlab));
            ls_steal_client_free(aud);
            outcome rep = {0};
            LS_TRY(replay_test(srv, &te, 2000, "natural-test", &rep));
            ds.natural_minw[ds.naturals] = rep.w;
            memcpy(ds.natural_mon[ds.naturals++], rep.mon_at, sizeof rep.mon_at);
            for (int bi = 0; bi < c->nb; bi++) {
                int64_t budget = c->budgets[bi];
                outcome ours = {0}, rnd = {0}, nat = {0};
                nat.flagged_at = rnd.flagged_at = -1; /* not run (--no-baselines): never flagged */
                for (int g = 0; g < LS_QMON_GRID; g++) nat.mon_at[g] = rnd.mon_at[g] = -1;
                char key[64];
                snprintf(key, sizeof key, "synth-%lld", (long long)budget);
                LS_TRY(run_one(srv, &tr, &te, vlab, LS_STEAL_SYNTH, budget, c, key, &ours));
                if (!c->no_base) {
                    snprintf(key, sizeof key, "random-%lld", (long long)budget);
                    LS_TRY(run_one(srv, &tr, &te, vlab, LS_STEAL_RANDOM, budget, c, key, &rnd));
                    snprintf(key, sizeof key, "natural-%lld", (long long)budget);
                    LS_TRY(run_one(srv, &tr, &te, vlab, LS_STEAL_NATURAL, budget, c, key, &nat));
                    if (ds.naturals < 512) {
                        ds.natural_minw[ds.naturals] = nat.w;
                        memcpy(ds.natural_mon[ds.naturals++], nat.mon_at, sizeof nat.mon_at);
                    }
                }
                if (ds.attacks < 512) {
                    ds.attack_minw[ds.attacks] = ours.w;
                    ds.attack_prada[ds.attacks] = ours.flagged_at;
                    memcpy(ds.attack_mon[ds.attacks++], ours.mon_at, sizeof ours.mon_at);
                }
                double span = nat.agree - rnd.agree, prog = span > 1e-9 ? (ours.agree - rnd.agree) / span : 0;
                int zi = 0; /* the monitor's own z (default 4) on the grid */
                for (int g = 0; g < LS_QMON_GRID; g++)
                    if (ls_qmon_grid[g] == c->mo.z) zi = g;
                printf("%-10s %-7s %6.3f %6lld | %6.3f %9.1fs | %6.3f | %6.3f | %5.2f | %7lld/%-9lld | %7lld/%-9lld\n",
                       dl[di], vl[vi], vacc, (long long)budget, ours.agree, ours.secs, rnd.agree, nat.agree,
                       c->no_base ? 0.0 : prog, (long long)ours.flagged_at, (long long)nat.flagged_at,
                       (long long)ours.mon_at[zi], (long long)nat.mon_at[zi]);
                if (ours.tree_tested)
                    printf("%-10s %-7s   tree member %s: CART %.3f, MLP %.3f on the held-back fifth of the answers\n",
                           "", "", ours.tree_kept ? "kept" : "dropped", ours.tree_acc, ours.mlp_acc);
                member_print("cnn", "CNN", &ours.cnn, ours.mlp_acc);
                member_print("linear", "linear", &ours.lin, ours.mlp_acc);
                if (ours.rank_cart_tested)
                    printf("%-10s %-7s   cnn rank: CART %.3f, MLP %.3f after %lld answers%s\n", "", "",
                           ours.rank_cart_acc, ours.rank_mlp_acc, (long long)ours.rank_answers,
                           ours.rank_cart_won ? ": the CART won, the MLP alone ranks" : "");
                if (ours.rank.tested)
                    printf("%-10s %-7s   cnn rank %s after %lld answers: MLP + CNN %.3f on the held-back fifth"
                           " (rows +%lld -%lld); %d rounds ranked with it\n",
                           "", "", ours.rank.kept ? "kept" : "dropped", (long long)ours.rank_answers, ours.rank.acc,
                           (long long)ours.rank.better, (long long)ours.rank.worse, ours.rank_rounds);
                if (ours.distilled) printf("%-10s %-7s   members distilled on unlabeled prior draws\n", "", "");
                int image = te.h > 1 && te.w > 1; /* the attack's image prior and its styles */
                if (image) {
                    printf("%-10s %-7s   query styles:", "", "");
                    for (int s = 0; s < LS_STEAL_NSTYLE; s++)
                        printf(" %s %.2f", ls_steal_style_names[s], ours.style_share[s]);
                    printf(", pixel blends %.2f\n", ours.blend_share);
                }
                fflush(stdout);
                if (is_classic(vl[vi])) {
                    sum[di][bi] += ours.agree;
                    cnt[di][bi]++;
                    if (!c->no_base && prog < prog_min[di][bi]) prog_min[di][bi] = prog;
                }
                cJSON *row = cJSON_CreateObject();
                cJSON_AddStringToObject(row, "set", set);
                cJSON_AddStringToObject(row, "dataset", dl[di]);
                cJSON_AddStringToObject(row, "victim", vl[vi]);
                cJSON_AddNumberToObject(row, "victim_accuracy", vacc);
                cJSON_AddNumberToObject(row, "budget", (double)budget);
                cJSON_AddNumberToObject(row, "agreement", ours.agree);
                cJSON_AddNumberToObject(row, "accuracy", ours.acc);
                cJSON_AddNumberToObject(row, "queries", (double)ours.queries);
                cJSON_AddNumberToObject(row, "seconds", ours.secs);
                cJSON_AddBoolToObject(row, "tree_member_kept", ours.tree_kept);
                cJSON_AddNumberToObject(row, "tree_test_cart", ours.tree_acc);
                cJSON_AddNumberToObject(row, "tree_test_mlp", ours.mlp_acc);
                cJSON_AddBoolToObject(row, "distilled", ours.distilled);
                member_json(row, "cnn", &ours.cnn);
                member_json(row, "linear", &ours.lin);
                if (ours.rank_cart_tested) {
                    cJSON_AddBoolToObject(row, "cnn_rank_cart_won", ours.rank_cart_won);
                    cJSON_AddNumberToObject(row, "cnn_rank_test_cart", ours.rank_cart_acc);
                    cJSON_AddNumberToObject(row, "cnn_rank_test_mlp", ours.rank_mlp_acc);
                }
                if (ours.rank.tested) {
                    cJSON_AddBoolToObject(row, "cnn_rank_kept", ours.rank.kept);
                    cJSON_AddNumberToObject(row, "cnn_rank_test_answers", (double)ours.rank_answers);
                    cJSON_AddNumberToObject(row, "cnn_rank_test_mlp_plus_cnn", ours.rank.acc);
                    cJSON_AddNumberToObject(row, "cnn_rank_test_rows_better", (double)ours.rank.better);
                    cJSON_AddNumberToObject(row, "cnn_rank_test_rows_worse", (double)ours.rank.worse);
                    cJSON_AddNumberToObject(row, "cnn_rank_rounds", ours.rank_rounds);
                }
                cJSON *st = image ? cJSON_AddObjectToObject(row, "style_share") : NULL;
                for (int s = 0; st && s < LS_STEAL_NSTYLE; s++)
                    cJSON_AddNumberToObject(st, ls_steal_style_names[s], ours.style_share[s]);
                if (image) cJSON_AddNumberToObject(row, "blend_share", ours.blend_share);
                cJSON_AddNumberToObject(row, "prada_flagged_at", (double)ours.flagged_at);
                cJSON_AddNumberToObject(row, "prada_min_w", ours.w);
                cJSON_AddNumberToObject(row, "monitor_flagged_at", (double)ours.mon_at[zi]);
                cJSON_AddNumberToObject(row, "monitor_max_z", ours.max_z);
                cJSON_AddNumberToObject(row, "natural_test_monitor_max_z", rep.max_z);
                cJSON_AddNumberToObject(row, "natural_test_prada_min_w", rep.w);
                if (!c->no_base) {
                    cJSON_AddNumberToObject(row, "random_agreement", rnd.agree);
                    cJSON_AddNumberToObject(row, "natural_agreement", nat.agree);
                    cJSON_AddNumberToObject(row, "natural_accuracy", nat.acc);
                    cJSON_AddNumberToObject(row, "progress", prog);
                    cJSON_AddNumberToObject(row, "natural_prada_flagged_at", (double)nat.flagged_at);
                    cJSON_AddNumberToObject(row, "natural_monitor_flagged_at", (double)nat.mon_at[zi]);
                    cJSON_AddNumberToObject(row, "natural_monitor_max_z", nat.max_z);
                }
                cJSON_AddItemToArray(rows, row);
            }
            free(vlab);
            ls_victim_server_stop(srv);
            ls_victim_free(v);
        }
        ls_qmon_ref_free(prof);
        ls_steal_data_free(&tr);
        ls_steal_data_free(&te);
    }
    printf("\n%s, mean agreement over the classic victims (logreg..mlp), min progress from random to natural:\n", set);
    for (int di = 0; di < nd; di++)
        for (int bi = 0; bi < c->nb; bi++) {
            if (!cnt[di][bi]) continue;
            double mean = sum[di][bi] / cnt[di][bi];
            printf("  %-10s budget %6lld: mean %.3f over %d victims", dl[di], (long long)c->budgets[bi], mean,
                   cnt[di][bi]);
            if (!c->no_base) printf(", lowest progress %.2f", prog_min[di][bi]);
            printf("\n");
            cJSON *s = cJSON_CreateObject();
            cJSON_AddStringToObject(s, "set", set);
            cJSON_AddStringToObject(s, "dataset", dl[di]);
            cJSON_AddNumberToObject(s, "budget", (double)c->budgets[bi]);
            cJSON_AddNumberToObject(s, "mean_agreement", mean);
            if (!c->no_base) cJSON_AddNumberToObject(s, "min_progress", prog_min[di][bi]);
            cJSON_AddItemToArray(summary, s);
        }
    /* trade-off: attack runs flagged within 2000 queries (and ever) vs natural clients flagged */
    printf("\n%s, detectors: attack runs flagged within 2000 queries / ever, natural clients flagged (of %d attack "
           "runs, %d natural clients)\n",
           set, ds.attacks, ds.naturals);
    printf("  query monitor  z:");
    for (int g = 0; g < LS_QMON_GRID; g++) {
        int a2k = 0, aev = 0, fp = 0;
        for (int i = 0; i < ds.attacks; i++) {
            a2k += ds.attack_mon[i][g] >= 0 && ds.attack_mon[i][g] <= 2000;
            aev += ds.attack_mon[i][g] >= 0;
        }
        for (int i = 0; i < ds.naturals; i++) fp += ds.natural_mon[i][g] >= 0;
        printf("  %g: %d/%d fp %d", ls_qmon_grid[g], a2k, aev, fp);
    }
    static const double deltas[6] = {0.90, 0.93, 0.95, 0.97, 0.98, 0.99};
    printf("\n  PRADA   delta (ever):");
    for (int g = 0; g < 6; g++) {
        int aev = 0, fp = 0;
        for (int i = 0; i < ds.attacks; i++) aev += ds.attack_minw[i] < deltas[g];
        for (int i = 0; i < ds.naturals; i++) fp += ds.natural_minw[i] < deltas[g];
        printf("  %.2f: %d fp %d", deltas[g], aev, fp);
    }
    int64_t at[512];
    int na = 0, nf = 0;
    for (int i = 0; i < ds.attacks; i++) {
        int zi = 0;
        for (int g = 0; g < LS_QMON_GRID; g++)
            if (ls_qmon_grid[g] == c->mo.z) zi = g;
        if (ds.attack_mon[i][zi] >= 0) at[na++] = ds.attack_mon[i][zi];
        nf += ds.attack_prada[i] >= 0;
    }
    qsort(at, (size_t)na, sizeof(int64_t), cmp_i64);
    printf("\n  at the defaults: monitor (z %g) flagged %d of %d attack runs, median after %lld, latest after %lld "
           "queries; PRADA (delta %.2f) flagged %d\n",
           c->mo.z, na, ds.attacks, na ? (long long)at[na / 2] : -1LL, na ? (long long)at[na - 1] : -1LL, c->delta, nf);
    return LS_OK;
}

int main(int argc, char **argv) {
    ls_runtime_reexec(argv, LS_REEXEC_BLAS_CORE); /* OpenBLAS kernels, even on a CPU it does not know */
    const char *out = NULL, *victims_s = "logreg,svm,tree,forest,knn,nb,mlp,cnn";
    const char *dev_s = "fmnist,blobs,rings,wine,cancer,digits";
    const char *held_s = "glyphs,shapes,textures,fmnist-inv,moons,checker,skewed";
    const char *budgets_s = "1000,5000,20000";
    bench_cfg c = {.epochs = 30,
                   .train_n = 30000,
                   .seed = 1,
                   .delta = 0.95,
                   .tree_member = -1,
                   .cnn_member = -1,
                   .cnn_shift = -1,
                   .cnn_epochs = -1,
                   .distill = -1,
                   .cnn_weight = -1,
                   .cnn_rank = -1,
                   .linear_member = -1};
    ls_qmon_opts_default(&c.mo);
    int quick = 0;
    openblas_set_num_threads(1); /* small batches on shared cores: OpenBLAS threads would mostly spin */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            printf(
                "usage: bench_steal [--out FILE] [--victims LIST] [--datasets LIST] [--heldout LIST] [--budgets LIST]\n"
                "                   [--train-n N] [--test-n N] [--epochs N] [--delta W] [--monitor-z Z] "
                "[--monitor-stats 0|1]\n"
                "                   [--no-baselines] [--proba] [--seed N] [--quick] [--goal]\n"
                "                   [--tree-member 0|1] [--cnn-member 0|1] [--cnn-shift N] [--cnn-epochs N]\n"
                "                   [--cnn-weight W] [--cnn-rank E] [--linear-member 0|1] [--distill R]\n"
                "  victims: logreg,svm,tree,forest,knn,nb,mlp,cnn (cnn on image data only, skipped on tables)\n"
                "  --datasets: development tasks (default %s), 'none' for none\n"
                "  --heldout:  held-out tasks (default %s), 'none' for none\n"
                "  --tree-member: 0 = the replica is MLPs only, 1 = it adds a CART of the queries when the attacker's\n"
                "          own test keeps it (images; the attack's default)\n"
                "  --cnn-member: 1 = the replica adds a small CNN of the answers when the attacker's own test keeps\n"
                "          it (images; the attack's default), 0 = no CNN\n"
                "  --cnn-shift: the CNN member trained on answers moved by up to N pixels each way (default 0)\n"
                "  --cnn-epochs: the CNN member's training epochs (default %d)\n"
                "  --cnn-weight: the CNN member's softmax counts W times in the replica's sum (default %g)\n"
                "  --cnn-rank: when the CNN's test after the seeds keeps it, the rounds rank their candidates with\n"
                "          the MLP plus that CNN, refitted E epochs before each round, unless a CART wins its test\n"
                "          there first (default 0 = off)\n"
                "  --linear-member: 1 = the replica adds a softmax regression of the answers when the attacker's own\n"
                "          test keeps it (images; the attack's default), 0 = none\n"
                "  --distill: unlabeled prior draws per answer on which the members are distilled (images, when\n"
                "          the CART is not kept; default 1, 0 = off)\n"
                "  --monitor-stats: 1 = the query monitor also profiles each image's level and edge statistics (its\n"
                "          default), 0 = the pixels only\n"
                "  --train-n / --test-n: rows of each task's splits used (0: all; default 30000 / all)\n"
                "  --goal: the issue's 20k goal on held-out images: the seven classic victims, budget 20000, the\n"
                "          tasks' whole splits (20000 training, 5000 test rows), the attack's default 30 final\n"
                "          epochs, no development tasks, the four held-out image tasks (options after --goal\n"
                "          override these)\n",
                dev_s, held_s, LS_STEAL_CNN_EPOCHS, LS_STEAL_CNN_WEIGHT);
            return 0;
        } else if (!strcmp(a, "--no-baselines"))
            c.no_base = 1;
        else if (!strcmp(a, "--quick"))
            quick = 1;
        else if (!strcmp(a, "--goal")) {
            victims_s = "logreg,svm,tree,forest,knn,nb,mlp";
            dev_s = "none";
            held_s = "glyphs,fmnist-inv,shapes,textures";
            budgets_s = "20000";
            c.train_n = 20000;
            c.test_n = 0; /* all */
            c.epochs = 30;
        }
        else if (!strcmp(a, "--proba"))
            c.proba = 1;
        else if (!v) {
            fprintf(stderr, "bench_steal: %s needs a value (see --help)\n", a);
            return 2;
        } else if (!strcmp(a, "--out"))
            out = argv[++i];
        else if (!strcmp(a, "--victims"))
            victims_s = argv[++i];
        else if (!strcmp(a, "--datasets"))
            dev_s = argv[++i];
        else if (!strcmp(a, "--heldout"))
            held_s = argv[++i];
        else if (!strcmp(a, "--budgets"))
            budgets_s = argv[++i];
        else if (!strcmp(a, "--train-n"))
            c.train_n = atoll(argv[++i]);
        else if (!strcmp(a, "--test-n"))
            c.test_n = atoll(argv[++i]);
        else if (!strcmp(a, "--epochs"))
            c.epochs = atoi(argv[++i]);
        else if (!strcmp(a, "--seed"))
            c.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--delta"))
            c.delta = atof(argv[++i]);
        else if (!strcmp(a, "--tree-member"))
            c.tree_member = atoi(argv[++i]);
        else if (!strcmp(a, "--cnn-member"))
            c.cnn_member = atoi(argv[++i]);
        else if (!strcmp(a, "--cnn-shift"))
            c.cnn_shift = atoi(argv[++i]);
        else if (!strcmp(a, "--cnn-epochs"))
            c.cnn_epochs = atoi(argv[++i]);
        else if (!strcmp(a, "--distill"))
            c.distill = atof(argv[++i]);
        else if (!strcmp(a, "--cnn-weight"))
            c.cnn_weight = atof(argv[++i]);
        else if (!strcmp(a, "--cnn-rank"))
            c.cnn_rank = atoi(argv[++i]);
        else if (!strcmp(a, "--linear-member"))
            c.linear_member = atoi(argv[++i]);
        else if (!strcmp(a, "--monitor-z"))
            c.mo.z = atof(argv[++i]);
        else if (!strcmp(a, "--monitor-stats"))
            c.mo.image_stats = atoi(argv[++i]) != 0;
        else {
            fprintf(stderr, "bench_steal: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    char vbuf[256], dbuf[1024], hbuf[1024], bbuf[256];
    snprintf(vbuf, sizeof vbuf, "%s", quick ? "logreg,tree" : victims_s);
    snprintf(dbuf, sizeof dbuf, "%s", quick ? "fmnist" : dev_s);
    snprintf(hbuf, sizeof hbuf, "%s", quick ? "shapes,moons" : held_s);
    snprintf(bbuf, sizeof bbuf, "%s", quick ? "1000" : budgets_s);
    if (quick) {
        c.train_n = 5000;
        c.test_n = 2000;
        c.epochs = 15;
    }
    char *vl[16], *dl[16], *hl[16], *bl[16];
    int nv = split_list(vbuf, vl, 16), nd = split_list(dbuf, dl, 16), nh = split_list(hbuf, hl, 16);
    c.nb = split_list(bbuf, bl, 16);
    for (int i = 0; i < c.nb; i++) c.budgets[i] = atoll(bl[i]);
    if (nd == 1 && !strcmp(dl[0], "none")) nd = 0;
    if (nh == 1 && !strcmp(hl[0], "none")) nh = 0;
    struct utsname un;
    uname(&un);
    double load[3] = {0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(lf);
    }
    /* The kernel OpenBLAS picks for the CPU changes the victims' and replicas' floats, and so single
     * agreement rows by about a point: the header and the JSON name it (OPENBLAS_CORETYPE overrides it). */
    char feat[128];
    ls_cpu_features_str(ls_cpu_features(), feat, sizeof feat);
    printf("bench_steal: %s [%s], one OpenBLAS thread (%s), load %.2f %.2f %.2f; %s; monitor z %g%s, PRADA "
           "delta %.2f\n",
           un.machine, feat, openblas_get_config(), load[0], load[1], load[2], c.proba ? "probabilities" : "label-only",
           c.mo.z, c.mo.image_stats ? "" : " (pixels only)", c.delta);
    cJSON *root = cJSON_CreateObject();
    cJSON *rows = cJSON_AddArrayToObject(root, "rows"), *summ = cJSON_AddArrayToObject(root, "summary");
    cJSON_AddNumberToObject(root, "prada_delta", c.delta);
    cJSON_AddNumberToObject(root, "monitor_z", c.mo.z);
    cJSON_AddBoolToObject(root, "monitor_image_stats", c.mo.image_stats);
    cJSON_AddBoolToObject(root, "probabilities", c.proba);
    cJSON_AddNumberToObject(root, "load", load[0]);
    cJSON_AddStringToObject(root, "cpu_features", feat);
    cJSON_AddStringToObject(root, "openblas", openblas_get_config());
    cJSON_AddStringToObject(root, "openblas_core", openblas_get_corename());
    int rc = LS_OK;
    if (nd) rc = run_set("development", dl, nd, vl, nv, &c, rows, summ);
    if (!rc && nh) rc = run_set("held-out", hl, nh, vl, nv, &c, rows, summ);
    if (rc) {
        fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
        return 1;
    }
    printf("\n(published ML-Stealer: mean 0.856, best 0.936; progress = (ours - random) / (natural - random))\n");
    if (out && ls_json_write_file(out, root)) {
        fprintf(stderr, "bench_steal: %s\n", ls_errmsg());
        return 1;
    }
    cJSON_Delete(root);
    return 0;
}
