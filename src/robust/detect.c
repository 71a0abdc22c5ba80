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

/* Closes the current window: the rank whose mean time is factor x above the median of the
 * other ranks' means extends (or starts) the streak. */
static int slow_close(ls_slow_detector *s) {
    double med[LS_SLOW_MAX_RANKS], all[LS_SLOW_MAX_RANKS];
    int have = 0;
    for (int r = 0; r < s->ranks; r++) {
        if (s->cnt[r] == 0) return -1; /* a rank without samples: no verdict for this window */
        /* the mean, not the median: a CPU quota stalls a rank in bursts (a few steps of a
         * window take the whole wait), which a median would hide */
        double sum = 0;
        for (int k = 0; k < s->cnt[r]; k++) sum += s->t[(size_t)r * (size_t)s->window + (size_t)k];
        med[r] = sum / s->cnt[r];
        all[have++] = med[r];
    }
    int worst = 0;
    for (int r = 1; r < s->ranks; r++)
        if (med[r] > med[worst]) worst = r;
    /* compared with the other ranks' median: the candidate must not pull its own reference */
    have = 0;
    for (int r = 0; r < s->ranks; r++)
        if (r != worst) all[have++] = med[r];
    double m = have > 0 ? ls_median(all, have) : 0;
    s->last_ratio = m > 0 ? med[worst] / m : 0;
    int outlier = s->ranks > 1 && m > 0 && med[worst] > s->factor * m ? worst : -1;
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
    if (s->win_start < 0) s->win_start = idx - idx % s->window;
    int found = -1;
    if (idx >= s->win_start + s->window) {
        found = slow_close(s);
        memset(s->cnt, 0, (size_t)s->ranks * sizeof(int));
        s->win_start = idx - idx % s->window;
    }
    if (idx < s->win_start) return found; /* a late report of a closed window */
    int k = s->cnt[r->rank];
    if (k < s->window) {
        s->t[(size_t)r->rank * (size_t)s->window + (size_t)k] = r->compute_s;
        s->cnt[r->rank] = k + 1;
    }
    return found;
}
