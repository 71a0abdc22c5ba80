/* stats.c - what N steps of a mix look like built in-process: token shares against the
 * targets, per-rank cost imbalance per balance algorithm, its SVG chart and JSON summary;
 * and the loader demo's generated sources. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llmsys/loader.h"

void ls_loader_stats_free(ls_loader_stats *s) {
    free(s->cost_naive);
    free(s->cost_bal);
    s->cost_naive = s->cost_bal = NULL;
}

int ls_loader_stats_run(const ls_loader_mix *mix, int R, int steps, ls_loader_stats *out) {
    memset(out, 0, sizeof *out);
    int64_t max_steps = ls_mem_max_items(2.0 * sizeof(double) * (R > 0 ? R : 1));
    if (steps < 1 || steps > max_steps) /* before the per-step costs are allocated */
        return ls_err(LS_EINVAL, "--steps must be in [1, %lld] for %d ranks here (every step's costs kept), got %d",
                      (long long)max_steps, R, steps);
    out->steps = steps;
    out->ranks = R;
    out->n_sources = mix->n_sources;
    out->cost_naive = calloc((size_t)steps * R, sizeof(double));
    out->cost_bal = calloc((size_t)steps * R, sizeof(double));
    if (!out->cost_naive || !out->cost_bal) return ls_err(LS_ENOMEM, "out of memory");
    ls_loader *ld;
    LS_TRY(ls_loader_open(&ld, mix, R, NULL));
    ls_progress pg;
    ls_progress_start(&pg, "loader stats", steps);
    double t0 = ls_now();
    int rc = LS_OK;
    const ls_balance_algo algos[3] = {LS_BALANCE_NAIVE, LS_BALANCE_LPT, LS_BALANCE_KK};
    int64_t G = (int64_t)mix->tokens_per_rank * R;
    for (int s = 0; s < steps && rc == LS_OK; s++) {
        ls_loader_step *st;
        rc = ls_loader_next_step(ld, &st);
        if (rc != LS_OK) break;
        for (int a = 0; a < 3 && rc == LS_OK; a++) {
            rc = ls_loader_step_rebalance(st, algos[a]);
            double mx = 0, sum = 0;
            for (int r = 0; r < R; r++) {
                mx = st->rank_cost[r] > mx ? st->rank_cost[r] : mx;
                sum += st->rank_cost[r];
                if (algos[a] == LS_BALANCE_NAIVE) out->cost_naive[(size_t)s * R + r] = st->rank_cost[r];
                if (algos[a] == mix->balance || (mix->balance == LS_BALANCE_NAIVE && algos[a] == LS_BALANCE_KK))
                    out->cost_bal[(size_t)s * R + r] = st->rank_cost[r];
            }
            double imb = sum > 0 ? mx / (sum / R) : 1;
            out->imb_sum[a] += imb;
            out->imb_max[a] = imb > out->imb_max[a] ? imb : out->imb_max[a];
        }
        for (int k = 0; k < out->n_sources; k++) {
            out->tokens[k] += st->source_tokens[k];
            out->target[k] += st->weights[k] * (double)G;
            if (s < steps / 5) out->early[k] += st->source_tokens[k], out->early_t[k] += st->weights[k] * (double)G;
            if (s >= steps - steps / 5)
                out->late[k] += st->source_tokens[k], out->late_t[k] += st->weights[k] * (double)G;
        }
        ls_loader_step_free(st);
        ls_progress_update(&pg, s + 1, NULL);
    }
    ls_progress_end(&pg);
    out->seconds = ls_now() - t0;
    ls_loader_close(ld);
    return rc;
}

static double share(const int64_t *v, int n, int k) {
    double t = 0;
    for (int i = 0; i < n; i++) t += (double)v[i];
    return t > 0 ? (double)v[k] / t : 0;
}
static double share_d(const double *v, int n, int k) {
    double t = 0;
    for (int i = 0; i < n; i++) t += v[i];
    return t > 0 ? v[k] / t : 0;
}

void ls_loader_stats_print(FILE *f, const ls_loader_mix *mix, const ls_loader_stats *s) {
    int n = s->n_sources, e = s->steps / 5;
    fprintf(f, "\n%-10s %12s %8s %8s   %-17s %-17s\n", "source", "tokens", "share", "target", "first fifth",
            "last fifth");
    for (int k = 0; k < n; k++)
        fprintf(f, "%-10s %12lld %7.2f%% %7.2f%%   %6.2f%% / %6.2f%%  %6.2f%% / %6.2f%%\n", mix->src[k].name,
                (long long)s->tokens[k], 100 * share(s->tokens, n, k), 100 * share_d(s->target, n, k),
                100 * share(s->early, n, k), 100 * share_d(s->early_t, n, k), 100 * share(s->late, n, k),
                100 * share_d(s->late_t, n, k));
    fprintf(f, "(shares are of tokens; 'first/last fifth' = steps [0, %d) and [%d, %d), drawn / target)\n", e,
            s->steps - e, s->steps);
    fprintf(f, "\nper-rank cost max/mean over %d steps, %d ranks, cost(L) = %g·L² + %g·L per segment\n", s->steps,
            s->ranks, mix->cost_a, mix->cost_b);
    fprintf(f, "%-8s %10s %10s\n", "balance", "mean", "worst");
    const char *names[3] = {"naive", "lpt", "kk"};
    for (int a = 0; a < 3; a++) fprintf(f, "%-8s %10.4f %10.4f\n", names[a], s->imb_sum[a] / s->steps, s->imb_max[a]);
}

/* Two panels (naive | balanced), one polyline per rank: per-rank cost at each step. */
int ls_loader_stats_svg(const char *path, const ls_loader_stats *s, const char *bal_name) {
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, path));
    FILE *f = af.fp;
    const int W = 960, H = 360, PW = 440, PH = 260, X0[2] = {60, 540}, Y0 = 50;
    double ymax = 0;
    for (int i = 0; i < s->steps * s->ranks; i++) {
        ymax = s->cost_naive[i] > ymax ? s->cost_naive[i] : ymax;
        ymax = s->cost_bal[i] > ymax ? s->cost_bal[i] : ymax;
    }
    ymax = ymax > 0 ? ymax * 1.05 : 1;
    static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n",
            W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f,
            "<text x=\"%d\" y=\"20\" font-size=\"14\">Per-rank cost per step (a·L² + b·L summed over each rank's "
            "segments), %d ranks</text>\n",
            60, s->ranks);
    for (int p = 0; p < 2; p++) {
        const double *c = p == 0 ? s->cost_naive : s->cost_bal;
        double imb = p == 0 ? s->imb_sum[0] / s->steps : s->imb_sum[strcmp(bal_name, "lpt") ? 2 : 1] / s->steps;
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s: mean max/mean %.3f</text>\n", X0[p], Y0 - 8,
                p == 0 ? "naive (sequential slices)" : bal_name, imb);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", X0[p], Y0,
                PW, PH);
        for (int t = 0; t <= 4; t++) {
            double v = ymax * t / 4;
            int y = Y0 + PH - (int)(PH * t / 4);
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>\n", X0[p], y, X0[p] + PW, y);
            if (p == 0) fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.2g</text>\n", X0[p] - 4, y + 4, v);
        }
        for (int r = 0; r < s->ranks; r++) {
            fprintf(f, "<polyline fill=\"none\" stroke-width=\"1.2\" stroke=\"%s\" points=\"", colors[r % 8]);
            for (int st = 0; st < s->steps; st++) {
                double x = X0[p] + (s->steps > 1 ? (double)PW * st / (s->steps - 1) : 0);
                double y = Y0 + PH - PH * c[(size_t)st * s->ranks + r] / ymax;
                fprintf(f, "%.1f,%.1f ", x, y);
            }
            fprintf(f, "\"/>\n");
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", X0[p] + PW / 2, Y0 + PH + 30);
    }
    for (int r = 0; r < s->ranks && r < 8; r++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">rank %d</text>\n", 60 + 70 * r, H - 8, colors[r], r);
    fprintf(f, "</svg>\n");
    if (ferror(f)) {
        ls_atomic_abort(&af);
        return ls_err(LS_EIO, "%s: write failed", path);
    }
    return ls_atomic_commit(&af);
}

int ls_loader_stats_report(const char *path, const ls_loader_mix *mix, const ls_loader_stats *s) {
    cJSON *o = cJSON_CreateObject(), *src = cJSON_AddArrayToObject(o, "sources"),
          *bal = cJSON_AddObjectToObject(o, "imbalance");
    cJSON_AddNumberToObject(o, "steps", s->steps);
    cJSON_AddNumberToObject(o, "ranks", s->ranks);
    cJSON_AddNumberToObject(o, "seconds", s->seconds);
    for (int k = 0; k < s->n_sources; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", mix->src[k].name);
        cJSON_AddNumberToObject(e, "tokens", (double)s->tokens[k]);
        cJSON_AddNumberToObject(e, "share", share(s->tokens, s->n_sources, k));
        cJSON_AddNumberToObject(e, "target", share_d(s->target, s->n_sources, k));
        cJSON_AddItemToArray(src, e);
    }
    const char *names[3] = {"naive", "lpt", "kk"};
    for (int a = 0; a < 3; a++) {
        cJSON *e = cJSON_AddObjectToObject(bal, names[a]);
        cJSON_AddNumberToObject(e, "mean_max_over_mean", s->imb_sum[a] / s->steps);
        cJSON_AddNumberToObject(e, "worst_max_over_mean", s->imb_max[a]);
    }
    int rc = ls_json_write_file(path, o);
    cJSON_Delete(o);
    return rc;
}

/* Copies demo text from a system directory (files cut at 1 MiB). */
static int demo_copy(const char *src, const char *dst, const char *ext, int max_files, int *copied) {
    if (!ls_is_dir(src)) return ls_err(LS_ENOTFOUND, "%s: cannot open (the demo reads its text from there)", src);
    return ls_dir_copy(src, dst, ext, max_files, (size_t)1 << 20, copied);
}

int ls_loader_demo_data(const char *base, int quick, ls_loader_demo_counts *counts) {
    ls_loader_demo_counts cnt = {0};
    if (!counts) counts = &cnt;
    char p[1100], q[1100];
    snprintf(p, sizeof p, "%s/data/prose", base);
    LS_TRY(ls_mkdirs(p));
    LS_TRY(demo_copy("/usr/share/common-licenses", p, NULL, quick ? 6 : 64, &counts->prose_files));
    snprintf(p, sizeof p, "%s/data/code", base);
    LS_TRY(ls_mkdirs(p));
    LS_TRY(demo_copy("/usr/include", p, ".h", quick ? 40 : 400, &counts->code_files));
    /* Short arithmetic, written as JSON Lines and pre-tokenized into a .lstok file. */
    snprintf(p, sizeof p, "%s/data/math.jsonl", base);
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, p));
    ls_rng r;
    ls_rng_seed(&r, 42);
    int lines = quick ? 2000 : 20000;
    for (int i = 0; i < lines; i++) {
        int a = (int)ls_rng_below(&r, 1000), b = (int)ls_rng_below(&r, 1000), op = (int)ls_rng_below(&r, 3);
        int c = op == 0 ? a + b : op == 1 ? a - b : a * b;
        fprintf(af.fp, "{\"text\": \"%d %c %d = %d\"}\n", a, "+-*"[op], b, c);
    }
    LS_TRY(ls_atomic_commit(&af));
    ls_loader_source_spec sp = {.type = LS_SRC_JSONL, .path = p, .field = "text", .split = LS_SPLIT_FILE};
    snprintf(sp.name, sizeof sp.name, "math");
    snprintf(q, sizeof q, "%s/data/math.lstok", base);
    LS_TRY(ls_loader_tokenize(&sp, 1, q, &counts->math_docs, &counts->math_tokens));
    return LS_OK;
}
