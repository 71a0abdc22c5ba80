/* detect.c - fault detectors over the per-step reports: NaN/Inf, jumps against a running
 * median, and slow ranks (compute-time outliers sustained over consecutive windows). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/robust.h"

static const char *const fault_names[LS_FAULT_COUNT_] = {"none", "crash", "hang", "nan", "jump",
                                                         "slow", "oom",   "corrupt-ckpt", "agent"};

const char *ls_fault_name(int kind) { return kind >= 0 && kind < LS_FAULT_COUNT_ ? fault_names[kind] : "?"; }

int ls_fault_parse(const char *s) {
    for (int k = 1; k < LS_FAULT_COUNT_; k++)
        if (!strcmp(s, fault_names[k])) return k;
    return -1;
}

/* ---------------------------------------------------------------- jumps */

void ls_jump_init(ls_jump_detector *j, double factor, int window, int min_history) {
    memset(j, 0, sizeof *j);
    j->factor = factor;
    j->window = window < 1 ? 1 : window > 64 ? 64 : window;
    j->min_history = min_history < 1 ? 1 : min_history;
}

int ls_jump_feed(ls_jump_detector *j, double v) {
    if (!isfinite(v)) return LS_FAULT_NAN;
    if (j->factor > 0 && j->n >= j->min_history) {
        double tmp[64];
        int n = j->n < j->window ? j->n : j->window;
        memcpy(tmp, j->hist, (size_t)n * sizeof(double));
        double med = ls_median(tmp, n);
        /* a jump is relative to the running level; values at ~0 never count as one */
        if (med > 1e-12 && v > j->factor * med) return LS_FAULT_JUMP;
    }
    j->hist[j->head] = v;
    j->head = (j->head + 1) % j->window;
    if (j->n < j->window) j->n++;
    return LS_FAULT_NONE;
}

/* ---------------------------------------------------------------- slow ranks */

int ls_slow_init(ls_slow_detector *s, int ranks, int window, int windows, double factor) {
    memset(s, 0, sizeof *s);
    if (ranks < 1 || ranks > LS_SLOW_MAX_RANKS || window < 1 || windows < 1 || !(factor > 1))
        return ls_err(LS_EINVAL, "slow detector: ranks %d, window %d, windows %d, factor %g out of range", ranks,
                      window, windows, factor);
    s->ranks = ranks;
    s->window = window;
    s->windows = windows;
    s->factor = factor;
    s->win_start = -1;
    s->streak_rank = -1;
    s->min_excess_s = 1e-3;
    s->t = calloc((size_t)ranks * (size_t)window, sizeof(double));
    s->cnt = calloc((size_t)ranks, sizeof(int));
    if (!s->t || !s->cnt) {
        ls_slow_free(s);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    return LS_OK;
}

void ls_slow_free(ls_slow_detector *s) {
    free(s->t);
    free(s->cnt);
    s->t = NULL;
    s->cnt = NULL;
}

/* Closes the current window. Each step's delay of a rank is compared with the median of the
 * other ranks' delays at the same step, so load that slows the whole host cancels out: the
 * rank is late at that step when it took factor x the others' median and min_excess_s more.
 * The rank late most often is an outlier when it was late in at least half of the window's
 * steps (a preemption that hits ranks at random rarely does that, a slow rank always does);
 * the same rank an outlier in `windows` consecutive windows is reported. */
static int slow_close(ls_slow_detector *s) {
    int R = s->ranks, W = s->window;
    double ex[LS_SLOW_MAX_RANKS] = {0}, sum[LS_SLOW_MAX_RANKS] = {0}, others[LS_SLOW_MAX_RANKS];
    int late[LS_SLOW_MAX_RANKS] = {0}, steps = 0;
    for (int k = 0; k < W && R > 1; k++) {
        int full = 1;
        for (int r = 0; r < R; r++) full &= !isnan(s->t[(size_t)r * (size_t)W + (size_t)k]);
        if (!full) continue; /* a step some rank did not report: not judged */
        for (int r = 0; r < R; r++) {
            double v = s->t[(size_t)r * (size_t)W + (size_t)k];
            int n = 0;
            for (int q = 0; q < R; q++)
                if (q != r) others[n++] = s->t[(size_t)q * (size_t)W + (size_t)k];
            double mo = ls_median(others, n);
            ex[r] += v - mo;
            sum[r] += v;
            late[r] += v > s->factor * mo && v - mo >= s->min_excess_s;
        }
        steps++;
    }
    if (steps == 0) return -1; /* no verdict for this window */
    int worst = 0;
    for (int r = 1; r < R; r++)
        if (late[r] > late[worst] || (late[r] == late[worst] && ex[r] > ex[worst])) worst = r;
    /* its mean delay against the others' typical (median) delay per step */
    double b = 0;
    for (int k = 0; k < W; k++) {
        int n = 0;
        for (int q = 0; q < R; q++)
            if (q != worst) others[n++] = s->t[(size_t)q * (size_t)W + (size_t)k];
        double mo = ls_median(others, n);
        if (!isnan(mo) && !isnan(s->t[(size_t)worst * (size_t)W + (size_t)k])) b += mo;
    }
    b /= steps;
    s->last_ratio = b > 0 ? sum[worst] / steps / b : 0;
    int outlier = late[worst] > 0 && 2 * late[worst] >= steps && ex[worst] / steps >= s->min_excess_s ? worst : -1;
    if (outlier >= 0 && outlier == s->streak_rank) {
        s->streak++;
    } else {
        s->streak_rank = outlier;
        s->streak = outlier >= 0 ? 1 : 0;
    }
    return s->streak_rank >= 0 && s->streak >= s->windows ? s->streak_rank : -1;
}

int ls_slow_feed(ls_slow_detector *s, const ls_robust_step *r) {
    if (r->rank < 0 || r->rank >= s->ranks || r->step < 1) return -1;
    int64_t idx = r->step - 1;
    size_t cells = (size_t)s->ranks * (size_t)s->window;
    if (s->win_start < 0) {
        s->win_start = idx - idx % s->window;
        for (size_t i = 0; i < cells; i++) s->t[i] = NAN; /* NaN: not reported */
    }
    int found = -1;
    if (idx >= s->win_start + s->window) {
        found = slow_close(s);
        memset(s->cnt, 0, (size_t)s->ranks * sizeof(int));
        for (size_t i = 0; i < cells; i++) s->t[i] = NAN;
        s->win_start = idx - idx % s->window;
    }
    if (idx < s->win_start) return found; /* a late report of a closed window */
    double *cell = &s->t[(size_t)r->rank * (size_t)s->window + (size_t)(idx - s->win_start)];
    if (isnan(*cell)) s->cnt[r->rank]++;
    *cell = r->compute_s;
    return found;
}
