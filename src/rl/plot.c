/* plot.c - an SVG figure of one or more rl run reports: reward per update (one line per
 * report) and the staleness histogram of each, its axis up to the tallest bar's share. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/rl.h"

static const char *const COLORS[6] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

int ls_rl_report_svg(const char *const *reports, int n, const char *out) {
    if (n < 1 || n > 6) return ls_err(LS_EINVAL, "plot: 1 to 6 reports");
    cJSON *j[6] = {0};
    int rc = LS_OK, maxu = 1;
    double maxh = 0; /* the tallest bar's share over all reports: the histogram's axis ends there */
    for (int i = 0; i < n && rc == LS_OK; i++) {
        rc = ls_json_read_file(reports[i], &j[i]);
        if (rc) break;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j[i], "reward_curve");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(j[i], "staleness_hist");
        if (!cJSON_IsArray(c) || !cJSON_IsArray(h)) {
            rc = ls_err(LS_EFORMAT, "%s: not an rl run report (no reward_curve)", reports[i]);
            break;
        }
        maxu = cJSON_GetArraySize(c) > maxu ? cJSON_GetArraySize(c) : maxu;
        double tot = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, h) tot += e->valuedouble;
        cJSON_ArrayForEach(e, h) if (tot > 0 && e->valuedouble / tot > maxh) maxh = e->valuedouble / tot;
    }
    if (!(maxh > 0)) maxh = 1; /* no trajectory consumed: empty bars on a 0..1 axis */
    ls_atomic_file af;
    if (rc == LS_OK) rc = ls_atomic_open(&af, out);
    if (rc) {
        for (int i = 0; i < n; i++) cJSON_Delete(j[i]);
        return rc;
    }
    FILE *f = af.fp;
    const int W = 820, H = 300, px = 50, py = 30, pw = 340, ph = 220, hx = 450;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
            "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H);
    fprintf(f, "<text x=\"%d\" y=\"18\">mean reward of each update's batch</text>\n", px);
    fprintf(f, "<text x=\"%d\" y=\"18\">staleness of consumed trajectories (share)</text>\n", hx);
    for (int a = 0; a < 2; a++) {
        int x0 = a ? hx : px;
        fprintf(f, "<path d=\"M%d %d V%d H%d\" stroke=\"black\" fill=\"none\"/>\n", x0, py, py + ph, x0 + pw);
    }
    for (int k = 0; k <= 4; k++) {
        double v = k / 4.0;
        fprintf(f, "<text x=\"%d\" y=\"%.0f\" text-anchor=\"end\">%.2f</text>\n", px - 4, py + ph - v * ph + 4, v);
        fprintf(f, "<text x=\"%d\" y=\"%.0f\" text-anchor=\"end\">%.2f</text>\n", hx - 4, py + ph - v * ph + 4,
                v * maxh);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">update (1..%d)</text>\n", px + pw / 2, py + ph + 16,
            maxu);
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j[i], "reward_curve"), *e;
        const char *mode = "?";
        ls_json_get_string(j[i], "mode", "?", &mode);
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", COLORS[i]);
        int u = 0;
        cJSON_ArrayForEach(e, c) {
            double v = e->valuedouble < 0 ? 0 : (e->valuedouble > 1 ? 1 : e->valuedouble);
            fprintf(f, "%.1f,%.1f ", px + (maxu > 1 ? (double)u / (maxu - 1) : 0.5) * pw, py + ph - v * ph);
            u++;
        }
        fprintf(f, "\"/>\n<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", px + pw - 80, py + 14 + 14 * i, COLORS[i],
                mode);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(j[i], "staleness_hist");
        double tot = 0;
        cJSON_ArrayForEach(e, h) tot += e->valuedouble;
        int nb = cJSON_GetArraySize(h), b = 0;
        double bw = (double)pw / nb / n;
        cJSON_ArrayForEach(e, h) {
            double v = tot > 0 ? e->valuedouble / tot / maxh : 0;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                    hx + (double)b * pw / nb + i * bw, py + ph - v * ph, bw, v * ph, COLORS[i]);
            if (i == 0)
                fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", hx + (b + 0.5) * pw / nb,
                        py + ph + 14, b);
            b++;
        }
    }
    fprintf(f, "</svg>\n");
    for (int i = 0; i < n; i++) cJSON_Delete(j[i]);
    if (ferror(f)) {
        ls_atomic_abort(&af);
        return ls_err(LS_EIO, "%s: write failed", out);
    }
    return ls_atomic_commit(&af);
}
