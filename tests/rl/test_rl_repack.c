/* test_rl_repack.c - dynamic repack against a brute-force optimum on small random cases
 * (every assignment of every trajectory), plus the constraints of the best-fit path. */
#include "llmsys/rl.h"
#include "test.h"

enum { MAXR = 5, MAXT = 4 };

typedef struct {
    int n;
    int cnt[MAXR], kv[MAXR][MAXT], version[MAXR];
    int64_t id[MAXR][MAXT];
} scase;

/* Brute force: for each rollout subset S to empty (falling, same version as its receivers),
 * try every assignment of S's trajectories to rollouts outside S. Best: max |S|, then min moved. */
static void brute(const scase *c, const ls_rl_repack_cfg *cfg, int *best_n, long *best_moved) {
    *best_n = 0;
    *best_moved = 0;
    for (unsigned mask = 1; mask < (1u << c->n); mask++) {
        int ok = 1, ns = 0, items = 0, ir[MAXR * MAXT], ikv[MAXR * MAXT];
        long moved = 0;
        for (int r = 0; r < c->n; r++)
            if (mask >> r & 1u) {
                if (c->cnt[r] == 0 || c->cnt[r] > cfg->falling_frac * cfg->max_batch) ok = 0;
                ns++;
                for (int t = 0; t < c->cnt[r]; t++) ir[items] = r, ikv[items++] = c->kv[r][t], moved += c->kv[r][t];
            }
        if (!ok || ns == c->n) continue;
        if (ns < *best_n || (ns == *best_n && moved >= *best_moved)) continue;
        /* enumerate destinations: base-n counter over items */
        int dest[MAXR * MAXT] = {0}, found = 0;
        for (;;) {
            long load[MAXR];
            int cnt[MAXR], good = 1;
            for (int r = 0; r < c->n; r++) {
                load[r] = 0;
                cnt[r] = mask >> r & 1u ? 0 : c->cnt[r];
                for (int t = 0; t < cnt[r]; t++) load[r] += c->kv[r][t];
            }
            for (int i = 0; i < items && good; i++) {
                int d = dest[i];
                /* receivers: outside S, same version as the source, falling (or, with any_dest, with a
                 * free slot) */
                int lim = cfg->any_dest ? cfg->max_batch - 1 : (int)(cfg->falling_frac * cfg->max_batch);
                if (mask >> d & 1u || c->version[d] != c->version[ir[i]] || c->cnt[d] == 0 || c->cnt[d] > lim)
                    good = 0;
                load[d] += ikv[i], cnt[d]++;
            }
            for (int r = 0; r < c->n && good; r++)
                if (!(mask >> r & 1u) && (load[r] > (long)(cfg->kv_threshold * 100) || cnt[r] > cfg->max_batch)) {
                    /* only receivers are bound; a rollout receiving nothing keeps what it had */
                    int received = 0;
                    for (int i = 0; i < items; i++) received |= dest[i] == r;
                    if (received) good = 0;
                }
            if (good) {
                found = 1;
                break;
            }
            int i = 0;
            while (i < items && ++dest[i] == c->n) dest[i++] = 0;
            if (i == items) break;
        }
        if (found) *best_n = ns, *best_moved = moved;
    }
}

static void brute_force_cases(int any_dest) {
    ls_rng r;
    ls_rng_seed(&r, 42);
    ls_rl_repack_cfg cfg = {0.9, 4, 0.5, 10, any_dest};
    int agree = 0, cases = 300, freed_total = 0;
    for (int cs = 0; cs < cases; cs++) {
        scase c = {0};
        c.n = 2 + (int)ls_rng_below(&r, MAXR - 1);
        ls_rl_rollout_view v[MAXR];
        for (int q = 0; q < c.n; q++) {
            c.cnt[q] = (int)ls_rng_below(&r, 4); /* 0..3: some not falling (3 > 0.5·4) */
            c.version[q] = (int)ls_rng_below(&r, 2);
            for (int t = 0; t < c.cnt[q]; t++) c.kv[q][t] = 5 + (int)ls_rng_below(&r, 40), c.id[q][t] = q * 10 + t;
            v[q] = (ls_rl_rollout_view){q, c.version[q], 0, c.cnt[q], c.kv[q], 100, c.id[q]};
        }
        ls_rl_move *mv;
        int nm, freed;
        CHECK(ls_rl_repack_plan(v, c.n, &cfg, &mv, &nm, &freed) == LS_OK);
        /* constraints of the plan, checked independently */
        long load[MAXR] = {0};
        int cnt[MAXR], recv[MAXR] = {0}, gone[MAXR] = {0};
        long moved = 0;
        for (int q = 0; q < c.n; q++) {
            cnt[q] = c.cnt[q];
            for (int t = 0; t < c.cnt[q]; t++) load[q] += c.kv[q][t];
        }
        for (int i = 0; i < nm; i++) {
            int f = mv[i].from, d = mv[i].to, kv = -1;
            for (int t = 0; t < c.cnt[f]; t++)
                if (c.id[f][t] == mv[i].traj) kv = c.kv[f][t];
            CHECK(kv > 0);
            CHECK_EQ_INT(c.version[f], c.version[d]);
            load[f] -= kv, cnt[f]--, load[d] += kv, cnt[d]++, recv[d] = 1, moved += kv;
        }
        int emptied = 0;
        for (int q = 0; q < c.n; q++) {
            if (recv[q]) CHECK(load[q] <= 90 && cnt[q] <= 4);
            if (c.cnt[q] > 0 && cnt[q] == 0) emptied++, gone[q] = 1;
            if (recv[q]) CHECK(!gone[q]);
        }
        CHECK_EQ_INT(emptied, freed);
        int bn;
        long bm;
        /* brute force per version, summed */
        int bn_total = 0;
        long bm_total = 0;
        for (int ver = 0; ver < 2; ver++) {
            scase s = c;
            for (int q = 0; q < c.n; q++)
                if (c.version[q] != ver) s.cnt[q] = 0; /* other versions take no part */
            brute(&s, &cfg, &bn, &bm);
            bn_total += bn, bm_total += bm;
        }
        agree += bn_total == freed && bm_total == moved;
        if (bn_total != freed || bm_total != moved)
            fprintf(stderr, "  case %d: plan frees %d moving %ld, optimum %d moving %ld\n", cs, freed, moved, bn_total,
                    bm_total);
        freed_total += freed;
        free(mv);
    }
    fprintf(stderr, "  %d/%d cases equal to the brute-force optimum (%d rollouts freed in all)\n", agree, cases,
            freed_total);
    CHECK_EQ_INT(agree, cases);
    CHECK(freed_total > 50);
}

/* Receivers: falling rollouts only, then any rollout with a free slot (the runtime's setting). */
static void test_brute_force(void) {
    brute_force_cases(0);
    brute_force_cases(1);
}

static void test_best_fit_path(void) {
    /* 30 falling rollouts of one version (beyond the exact limit): constraints hold, some freed */
    enum { N = 30 };
    int kv[N][2];
    int64_t id[N][2];
    ls_rl_rollout_view v[N];
    ls_rng r;
    ls_rng_seed(&r, 3);
    for (int q = 0; q < N; q++) {
        int n = 1 + (int)ls_rng_below(&r, 2);
        for (int t = 0; t < n; t++) kv[q][t] = 10 + (int)ls_rng_below(&r, 60), id[q][t] = q * 2 + t;
        v[q] = (ls_rl_rollout_view){q, 7, 0, n, kv[q], 400, id[q]};
    }
    ls_rl_repack_cfg cfg = {0.9, 8, 0.5, 10};
    ls_rl_move *mv;
    int nm, freed;
    CHECK(ls_rl_repack_plan(v, N, &cfg, &mv, &nm, &freed) == LS_OK);
    long load[N] = {0};
    int cnt[N];
    for (int q = 0; q < N; q++) {
        cnt[q] = v[q].n_traj;
        for (int t = 0; t < v[q].n_traj; t++) load[q] += kv[q][t];
    }
    for (int i = 0; i < nm; i++) {
        int f = mv[i].from, d = mv[i].to, k = (int)(mv[i].traj % 2);
        load[f] -= kv[f][k], cnt[f]--, load[d] += kv[f][k], cnt[d]++;
    }
    int emptied = 0;
    for (int q = 0; q < N; q++) {
        CHECK(load[q] <= 360 && cnt[q] <= 8);
        emptied += cnt[q] == 0;
    }
    fprintf(stderr, "  best-fit: %d of %d rollouts freed with %d moves\n", freed, N, nm);
    CHECK_EQ_INT(emptied, freed);
    CHECK(freed >= N / 2);
    free(mv);
    /* bad config */
    ls_rl_repack_cfg badc = {1.5, 8, 0.5, 10};
    CHECK(ls_rl_repack_plan(v, N, &badc, &mv, &nm, &freed) == LS_EINVAL);
}

int main(void) {
    RUN(test_brute_force);
    RUN(test_best_fit_path);
    return TEST_RESULT();
}
