/* demo.c - the robust demo scenario (`llmsys demo robust`) and the fault table printed after a
 * supervised run, both read from the run's JSON report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llmsys/robust.h"

static double num(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *j, const char *k, const char *def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsString(v) ? v->valuestring : def;
}

int ls_robust_print_summary(const char *report, FILE *f) {
    cJSON *j;
    LS_TRY(ls_json_read_file(report, &j));
    fprintf(f, "\n  %-13s %5s %5s %6s %9s %9s %9s %9s %8s\n", "fault", "rank", "node", "step", "detect s", "locate s",
            "restart s", "redo s", "resumed");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "faults")) {
        fprintf(f, "  %-13s %5d %5d %6d %9.2f %9.2f %9.2f %9.2f %8s\n", str(e, "kind", "?"), (int)num(e, "rank"),
                (int)num(e, "node"), (int)num(e, "step"), num(e, "detection_s"), num(e, "localization_s"),
                num(e, "restart_s"), num(e, "recompute_s"), str(e, "resumed_from", "-"));
    }
    fprintf(f, "\n  wall %.1f s, productive %.1f s, ETTR %.3f, %d restart(s); report %s\n", num(j, "wall_s"),
            num(j, "productive_s"), num(j, "ettr"), (int)num(j, "restarts"), report);
    cJSON_Delete(j);
    return LS_OK;
}

int ls_robust_demo(const char *workdir, const char *self, int quick, FILE *f, int *ok) {
    *ok = 0;
    char dir[4096], corpus[4200], plan[4200], report[4200], out[4200];
    snprintf(dir, sizeof dir, "%s/robust", workdir);
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(plan, sizeof plan, "%s/faults.json", dir);
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    LS_TRY(ls_mkdirs(dir));
    /* text: generated lines, so the scenario needs nothing from the machine */
    size_t cap = 200000, n = 0;
    char *text = malloc(cap);
    if (!text) return ls_err(LS_ENOMEM, "out of memory");
    for (int i = 1; n + 120 < cap; i++)
        n += (size_t)snprintf(text + n, cap - n, "line %d: the quick brown fox jumps over the lazy dog %d times; copy %d.\n",
                              i, i * 7 % 13, i % 5);
    int rc = ls_file_write_atomic(corpus, text, n);
    free(text);
    int steps = quick ? 36 : 450;
    int a = steps / 4, b = steps / 2, cst = 3 * steps / 4;
    char pj[512];
    snprintf(pj, sizeof pj,
             "{\"faults\": [{\"kind\": \"crash\", \"step\": %d, \"rank\": 3},\n"
             "            {\"kind\": \"hang\", \"step\": %d, \"rank\": 1},\n"
             "            {\"kind\": \"nan\", \"step\": %d, \"rank\": 2}]}\n",
             a, b, cst);
    if (rc == LS_OK) rc = ls_file_write_atomic(plan, pj, strlen(pj));
    LS_TRY(rc);
    char stepsb[16];
    snprintf(stepsb, sizeof stepsb, "%d", steps);
    char *argv[] = {"llmsys", "train", "--config", "tiny", "--data", corpus, "--batch", "16", "--seq", "64",
                    "--steps", stepsb, "--threads", "1", "--log-every", "1000000", "--out", out, NULL};
    ls_robust_opts o;
    ls_robust_opts_defaults(&o);
    o.nodes = 2;
    o.ranks_per_node = 2;
    o.standby = 1;
    o.hang_timeout = quick ? 2 : 5;
    o.repair_s = quick ? 0.5 : 5;
    o.inject = plan;
    o.report = report;
    o.self = self;
    o.argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    o.argv = argv;
    fprintf(f,
            "training the tiny GPT for %d steps on 4 ranks (2 nodes x 2) + 1 warm standby;\n"
            "injected: crash of rank 3 at step %d, hang of rank 1 at step %d, NaN on rank 2 at step %d\n\n",
            steps, a, b, cst);
    fflush(f);
    ls_robust_result r;
    LS_TRY(ls_robust_run(&o, &r));
    cJSON *j;
    if (ls_json_read_file(report, &j) == LS_OK) {
        fprintf(f, "timeline:\n");
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "timeline"))
            fprintf(f, "  %7.2f s  %-9s %s\n", num(e, "t"), str(e, "event", "?"), str(e, "detail", ""));
        cJSON_Delete(j);
    }
    ls_robust_print_summary(report, f);
    fprintf(f,
            "\n  %d fault(s) detected, %d restart(s), %s; ETTR %.3f over %.1f s "
            "(short runs pay the start-up and every restart in full)\n",
            r.faults, r.restarts, r.completed ? "training completed" : r.diagnosis, r.ettr, r.wall_s);
    /* the same policies at cluster scale */
    ls_sim_config sc;
    ls_sim_defaults(&sc);
    sc.trials = quick ? 2 : 10;
    fprintf(f, "\nsimulated, 9,600 GPUs for 90 days (llmsys sim robust):");
    static const char *const pn[] = {"disk + requeue", "memory + requeue", "memory + warm standby"};
    for (int k = 0; k < 3; k++) {
        sc.policy = k;
        ls_sim_result sr;
        if (ls_sim_run(&sc, &sr) == LS_OK) fprintf(f, "%s %s %.1f%%", k ? "," : "", pn[k], 100 * sr.ettr);
    }
    fprintf(f, "\n");
    *ok = r.completed && r.faults >= 3;
    return LS_OK;
}
