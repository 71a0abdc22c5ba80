/* progress.c - a one-line progress bar on a TTY; silent otherwise. */
#include "llmsys/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ls_progress_start(ls_progress *p, const char *label, int64_t total) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->total = total;
    p->t0 = ls_now();
    const char *env = getenv("LLMSYS_PROGRESS");
    p->enabled = isatty(2) && !(env && env[0] == '0');
    p->width = 30;
}

static void draw(ls_progress *p, const char *status) {
    double el = ls_now() - p->t0;
    double frac = p->total > 0 ? (double)p->done / (double)p->total : 0.0;
    if (frac > 1) frac = 1;
    int fill = (int)(frac * p->width + 0.5);
    char bar[128];
    for (int i = 0; i < p->width; i++) bar[i] = i < fill ? '#' : '.';
    bar[p->width] = '\0';
    double eta = frac > 0 ? el * (1 - frac) / frac : 0;
    fprintf(stderr, "\r%-10s [%s] %3.0f%% %lld/%lld %.0fs<%.0fs %s\033[K", p->label, bar, 100 * frac,
            (long long)p->done, (long long)p->total, el, eta, status ? status : "");
    fflush(stderr);
    p->last_draw = ls_now();
}

void ls_progress_update(ls_progress *p, int64_t done, const char *fmt, ...) {
    p->done = done;
    if (!p->enabled) return;
    /* redraw at most 10x a second, but always on the last step */
    if (ls_now() - p->last_draw < 0.1 && done < p->total) return;
    char status[160] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(status, sizeof status, fmt, ap);
        va_end(ap);
    }
    draw(p, status);
}

void ls_progress_end(ls_progress *p) {
    if (p->enabled) fputc('\n', stderr);
    p->enabled = 0;
}
