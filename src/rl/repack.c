/* repack.c - dynamic repack: empty as many falling-phase rollouts as possible by moving
 * their unfinished trajectories onto other rollouts of the same weight version (bin
 * packing under a KV threshold and a decode-batch cap). Only trajectories of emptied
 * rollouts move; destinations keep theirs. */
#include <stdlib.h>
#include <string.h>

#include "llmsys/rl.h"

typedef struct {
    int r;      /* index into the views */
    int kv;     /* tokens */
    int64_t id; /* trajectory */
} item;

typedef struct {
    const ls_rl_rollout_view *v;
    const ls_rl_repack_cfg *c;
    int *cand, k;     /* candidate view indices */
    long *load, *cnt; /* per candidate: kv tokens and trajectories held (incl. received) */
    int *dest;        /* per item: candidate slot it goes to */
    item *it;
    int nit;
    long nodes, node_limit;
} ctx;

static int falling(const ls_rl_rollout_view *v, const ls_rl_repack_cfg *c) {
    return v->waiting == 0 && v->n_traj > 0 && v->n_traj <= (int)(c->falling_frac * c->max_batch + 1e-9);
}

/* A rollout that may receive: falling, or (any_dest) any rollout with a free decode slot. */
static int receiver(const ls_rl_rollout_view *v, const ls_rl_repack_cfg *c) {
    return falling(v, c) || (c->any_dest && v->waiting == 0 && v->n_traj > 0 && v->n_traj < c->max_batch);
}

static long kv_sum(const ls_rl_rollout_view *v) {
    long s = 0;
    for (int i = 0; i < v->n_traj; i++) s += v->kv[i];
    return s;
}

static int cmp_item_desc(const void *a, const void *b) {
    const item *x = a, *y = b;
    return x->kv != y->kv ? (y->kv > x->kv ? 1 : -1) : (x->id < y->id ? -1 : x->id > y->id);
}

static int fits(const ctx *x, int slot, int kv) {
    const ls_rl_rollout_view *d = &x->v[x->cand[slot]];
    return x->load[slot] + kv <= (long)(x->c->kv_threshold * d->kv_cap + 1e-9) && x->cnt[slot] + 1 <= x->c->max_batch;
}

/* Backtracking placement of items[i..) into slots not in mask; 1 if all placed. */
static int place_exact(ctx *x, int i, unsigned mask) {
    if (i == x->nit) return 1;
    if (++x->nodes > x->node_limit) return 0;
    for (int s = 0; s < x->k; s++) {
        if (mask >> s & 1u || !fits(x, s, x->it[i].kv)) continue;
        x->load[s] += x->it[i].kv, x->cnt[s]++;
        x->dest[i] = s;
        int ok = place_exact(x, i + 1, mask);
        x->load[s] -= x->it[i].kv, x->cnt[s]--;
        if (ok) return 1;
    }
    return 0;
}

/* Best-fit decreasing: each item into the fitting slot with the least room left. */
static int place_bfd(ctx *x, unsigned mask_lo, const char *is_src) {
    for (int i = 0; i < x->nit; i++) {
        int best = -1;
        long best_room = 0;
        for (int s = 0; s < x->k; s++) {
            if ((s < 32 && (mask_lo >> s & 1u)) || (is_src && is_src[s]) || !fits(x, s, x->it[i].kv)) continue;
            long room = (long)(x->c->kv_threshold * x->v[x->cand[s]].kv_cap) - x->load[s] - x->it[i].kv;
            if (best < 0 || room < best_room) best = s, best_room = room;
        }
        if (best < 0) return 0;
        x->load[best] += x->it[i].kv, x->cnt[best]++;
        x->dest[i] = best;
    }
    return 1;
}

/* Items of the candidates in mask, sorted by size decreasing. */
static int gather(ctx *x, const unsigned char *in_set, item *buf) {
    int n = 0;
    for (int s = 0; s < x->k; s++) {
        if (!in_set[s]) continue;
        const ls_rl_rollout_view *v = &x->v[x->cand[s]];
        for (int t = 0; t < v->n_traj; t++) buf[n++] = (item){s, v->kv[t], v->traj[t]};
    }
    qsort(buf, (size_t)n, sizeof *buf, cmp_item_desc);
    return n;
}

static void reset_loads(ctx *x, const unsigned char *in_set) {
    for (int s = 0; s < x->k; s++) {
        const ls_rl_rollout_view *v = &x->v[x->cand[s]];
        x->load[s] = in_set[s] ? 0 : kv_sum(v);
        x->cnt[s] = in_set[s] ? 0 : v->n_traj;
    }
}

static int add_moves(ctx *x, ls_rl_move **moves, int *n_moves, int *cap) {
    for (int i = 0; i < x->nit; i++) {
        if (*n_moves == *cap) {
            int nc = *cap ? *cap * 2 : 16;
            ls_rl_move *m = realloc(*moves, sizeof **moves * (size_t)nc);
            if (!m) return ls_err(LS_ENOMEM, "repack: out of memory");
            *moves = m, *cap = nc;
        }
        (*moves)[(*n_moves)++] = (ls_rl_move){x->it[i].id, x->v[x->cand[x->it[i].r]].id, x->v[x->cand[x->dest[i]]].id};
    }
    return LS_OK;
}

ls_rl_repack_cfg ls_rl_repack_defaults(int max_batch) {
    ls_rl_repack_cfg c = {0.9, max_batch, 0.5, 10, 1};
    return c;
}

int ls_rl_repack_plan(const ls_rl_rollout_view *r, int n, const ls_rl_repack_cfg *c, ls_rl_move **moves, int *n_moves,
                      int *freed) {
    *moves = NULL;
    *n_moves = 0;
    *freed = 0;
    if (n <= 0) return LS_OK;
    if (c->max_batch < 1 || !(c->kv_threshold > 0) || c->kv_threshold > 1.0)
        return ls_err(LS_EINVAL, "repack: need max_batch >= 1 and kv_threshold in (0, 1]");
    int exact_limit = c->exact_limit > 0 ? c->exact_limit : 10;
    if (exact_limit > 20) exact_limit = 20;
    int total_items = 0;
    for (int i = 0; i < n; i++) total_items += r[i].n_traj;
    ctx x = {0};
    x.v = r, x.c = c;
    x.cand = malloc(sizeof(int) * (size_t)n);
    x.load = malloc(sizeof(long) * (size_t)n);
    x.cnt = malloc(sizeof(long) * (size_t)n);
    x.dest = malloc(sizeof(int) * (size_t)(total_items + 1));
    x.it = malloc(sizeof(item) * (size_t)(total_items + 1));
    item *best_it = malloc(sizeof(item) * (size_t)(total_items + 1));
    int *best_dest = malloc(sizeof(int) * (size_t)(total_items + 1));
    unsigned char *in_set = calloc((size_t)n, 1);
    char *done = calloc((size_t)n, 1);
    int rc = LS_OK, cap = 0;
    if (!x.cand || !x.load || !x.cnt || !x.dest || !x.it || !best_it || !best_dest || !in_set || !done) {
        rc = ls_err(LS_ENOMEM, "repack: out of memory");
        goto out;
    }
    for (int g = 0; g < n && rc == LS_OK; g++) {
        if (done[g] || !falling(&r[g], c)) continue;
        /* the candidates of this version: falling ones (sources or receivers) and other receivers */
        x.k = 0;
        for (int i = 0; i < n; i++)
            if (!done[i] && r[i].version == r[g].version && receiver(&r[i], c)) {
                x.cand[x.k++] = i;
                done[i] = 1;
            }
        if (x.k < 2) continue;
        if (x.k <= exact_limit) {
            /* every subset of sources; keep the largest feasible one, then the fewest moved tokens */
            int best_n = 0, best_cnt = -1;
            long best_moved = 0;
            for (unsigned mask = 1; mask < (1u << x.k) - 1; mask++) {
                int cnt = __builtin_popcount(mask), src_ok = 1;
                for (int s = 0; s < x.k; s++) src_ok &= !(mask >> s & 1u) || falling(&r[x.cand[s]], c);
                if (!src_ok) continue;
                long moved = 0;
                for (int s = 0; s < x.k; s++) {
                    in_set[s] = mask >> s & 1u;
                    if (in_set[s]) moved += kv_sum(&r[x.cand[s]]);
                }
                if (cnt < best_cnt || (cnt == best_cnt && moved >= best_moved)) continue;
                x.nit = gather(&x, in_set, x.it);
                reset_loads(&x, in_set);
                x.nodes = 0, x.node_limit = 200000;
                int ok = place_exact(&x, 0, mask);
                if (!ok && x.nodes > x.node_limit) { /* too large for exact: best-fit */
                    reset_loads(&x, in_set);
                    ok = place_bfd(&x, mask, NULL);
                }
                if (ok) {
                    best_cnt = cnt, best_moved = moved, best_n = x.nit;
                    memcpy(best_it, x.it, sizeof(item) * (size_t)x.nit);
                    memcpy(best_dest, x.dest, sizeof(int) * (size_t)x.nit);
                }
            }
            if (best_cnt > 0) {
                x.nit = best_n;
                memcpy(x.it, best_it, sizeof(item) * (size_t)best_n);
                memcpy(x.dest, best_dest, sizeof(int) * (size_t)best_n);
                rc = add_moves(&x, moves, n_moves, &cap);
                *freed += best_cnt;
            }
        } else {
            /* greedy: try to empty the lightest candidates first, best-fit decreasing */
            char *is_src = calloc((size_t)x.k, 1);
            long *ld = malloc(sizeof(long) * (size_t)x.k), *cn = malloc(sizeof(long) * (size_t)x.k);
            if (!is_src || !ld || !cn) {
                free(is_src), free(ld), free(cn);
                rc = ls_err(LS_ENOMEM, "repack: out of memory");
                break;
            }
            memset(in_set, 0, (size_t)n);
            reset_loads(&x, in_set);
            for (int pass = 0; pass < x.k && rc == LS_OK; pass++) {
                int s = -1; /* lightest remaining non-source candidate that is not a destination */
                for (int q = 0; q < x.k; q++)
                    if (!is_src[q] && x.cnt[q] == r[x.cand[q]].n_traj && falling(&r[x.cand[q]], c) &&
                        (s < 0 || x.load[q] < x.load[s]))
                        s = q;
                if (s < 0) break;
                memcpy(ld, x.load, sizeof(long) * (size_t)x.k);
                memcpy(cn, x.cnt, sizeof(long) * (size_t)x.k);
                memset(in_set, 0, (size_t)n);
                in_set[s] = 1;
                x.nit = gather(&x, in_set, x.it);
                is_src[s] = 1;
                x.load[s] = 0, x.cnt[s] = 0;
                if (place_bfd(&x, 0, is_src)) {
                    rc = add_moves(&x, moves, n_moves, &cap);
                    (*freed)++;
                } else {
                    memcpy(x.load, ld, sizeof(long) * (size_t)x.k);
                    memcpy(x.cnt, cn, sizeof(long) * (size_t)x.k);
                    is_src[s] = 0;
                    break; /* the lightest cannot be emptied: heavier ones rarely can */
                }
            }
            free(is_src), free(ld), free(cn);
        }
    }
out:
    free(x.cand), free(x.load), free(x.cnt), free(x.dest), free(x.it), free(best_it), free(best_dest), free(in_set),
        free(done);
    if (rc != LS_OK) {
        free(*moves);
        *moves = NULL;
        *n_moves = 0;
        *freed = 0;
    }
    return rc;
}
