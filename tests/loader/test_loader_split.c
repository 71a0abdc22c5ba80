/* test_loader_split.c - the split across ranks checked from the served batches alone (tokens
 * and cost each rank receives, read off its rows), against an independent naive split and a
 * replay of the largest-deficit mixing rule (muted sources lose their credit). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "test.h"

enum { R = 4, NCTX = 256, TPR = 2048, STEPS = 6 };
#define COST_A 1.0
#define COST_B 16.0
/* Tolerances, stated: a cost-balanced split (KK, LPT) keeps max/mean cost within 1.01 here
 * (observed at most 1.0003, KK 1.0000); the naive split on the same items is above 1.01 in most
 * steps (observed up to 1.44)
 * (a long-tailed length mix with a quadratic cost); every rank gets at least a quarter of
 * its token share under any algorithm, and naive slices are exact to one segment. */
#define BAL_MAX_MEAN 1.01
#define MIN_TOKEN_SHARE 0.25

static char dir[256];

static double cost_of(int len) { return COST_A * (double)len * len + COST_B * (double)len; }

/* Two sources: long-tailed paragraphs (most short, a few over n_ctx) and short JSONL lines. */
static void make_data(void) {
    char p[512];
    ls_rng r;
    ls_rng_seed(&r, 5);
    char *buf = malloc(1 << 20);
    int o = 0;
    for (int d = 0; d < 400; d++) {
        double u = ls_rng_uniform_f64(&r);
        int len = 4 + (int)(12.0 / pow(1.0 - 0.995 * u, 0.8));
        if (len > 700) len = 700;
        for (int i = 0; i < len; i++) buf[o++] = (char)('a' + (d + i) % 26);
        o += sprintf(buf + o, "\n\n");
    }
    buf[o] = 0;
    snprintf(p, sizeof p, "%s/long.txt", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, buf, (size_t)o), 0);
    o = 0;
    for (int i = 0; i < 300; i++) o += sprintf(buf + o, "{\"text\": \"%d*%d=%d\"}\n", i, i, i * i);
    snprintf(p, sizeof p, "%s/short.jsonl", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, buf, (size_t)o), 0);
    free(buf);
}

static int open_mix(const char *balance, ls_loader_mix *mix) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"n_ctx\": %d, \"tokens_per_rank\": %d, \"seed\": 9, \"micro_batches\": 3, \"balance\": \"%s\", "
             "\"cost\": {\"a\": %g, \"b\": %g},"
             " \"sources\": [{\"name\": \"long\", \"path\": \"long.txt\", \"split\": \"blank\", \"weight\": 0.7},"
             " {\"name\": \"short\", \"type\": \"jsonl\", \"path\": \"short.jsonl\", \"weight\": 0.3}]}",
             NCTX, TPR, balance, COST_A, COST_B);
    return ls_loader_mix_parse(json, dir, mix);
}

/* Tokens and cost of a served batch, from its rows alone: real tokens are the non-pad ones, a
 * segment is a run of equal doc ids within a row. */
static void batch_load(const ls_loader_batch *b, int64_t *tokens, double *cost) {
    int64_t t = 0;
    double c = 0;
    for (int row = 0; row < b->n_rows; row++) {
        const int32_t *tk = b->tokens + (size_t)row * b->n_ctx, *id = b->doc_ids + (size_t)row * b->n_ctx;
        int run = 0;
        for (int j = 0; j <= b->n_ctx; j++) {
            int same = j < b->n_ctx && id[j] >= 0 && run > 0 && id[j] == id[j - 1];
            if (j < b->n_ctx && tk[j] != LS_TOK_PAD) t++;
            if (!same && run > 0) {
                c += cost_of(run);
                run = 0;
            }
            if (j < b->n_ctx && id[j] >= 0) run = same ? run + 1 : 1;
        }
    }
    *tokens = t;
    *cost = c;
}

/* Independent naive split: item i goes to the slice holding its token midpoint. */
static double naive_max_mean(const ls_loader_step *st, int64_t *tok) {
    double total = 0, cum = 0, c[R] = {0}, sum = 0, mx = 0;
    for (int i = 0; i < st->n_items; i++) total += st->items[i].len;
    for (int i = 0; i < st->n_items; i++) {
        int p = (int)((cum + st->items[i].len / 2.0) * R / total);
        if (p >= R) p = R - 1;
        c[p] += cost_of(st->items[i].len);
        tok[p] += st->items[i].len;
        cum += st->items[i].len;
    }
    for (int r = 0; r < R; r++) {
        sum += c[r];
        mx = c[r] > mx ? c[r] : mx;
    }
    return mx / (sum / R);
}

static int cmp_int_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Replays how a rank's items become rows and micro-batches (loader.h): first-fit decreasing
 * into rows of n_ctx tokens (a segment fits a row while the row's tokens plus its length stay
 * <= n_ctx), then rows to micro-batches by LPT on their cost. The served batch must have the
 * same row fills and the same per-micro-batch costs (both compared as sorted lists). */
static void check_rows(const ls_loader_step *st, int rank, const ls_loader_batch *b) {
    int n = 0, rows = 0, M = st->micro_batches;
    int *len = malloc(sizeof(int) * (size_t)(st->n_items + 1)), *fill = calloc((size_t)st->n_items + 1, sizeof(int));
    int *got = calloc((size_t)b->n_rows + 1, sizeof(int));
    double *rc = calloc((size_t)st->n_items + 1, sizeof(double)), mb[16] = {0}, mb_got[16] = {0};
    for (int i = 0; i < st->n_items; i++)
        if (st->part[i] == rank) len[n++] = st->items[i].len;
    qsort(len, (size_t)n, sizeof *len, cmp_int_desc);
    for (int k = 0; k < n; k++) {
        int r = 0;
        while (r < rows && fill[r] + len[k] > st->n_ctx) r++;
        if (r == rows) rows++;
        fill[r] += len[k];
        rc[r] += cost_of(len[k]);
    }
    CHECK_EQ_INT(b->n_rows, rows);
    for (int r = 0; r < rows; r++) { /* LPT: heaviest row first, to the lightest micro-batch */
        int h = 0;
        for (int q = 1; q < rows; q++) h = rc[q] > rc[h] ? q : h;
        int best = 0;
        for (int m = 1; m < M; m++) best = mb[m] < mb[best] ? m : best;
        mb[best] += rc[h];
        rc[h] = -1;
    }
    for (int row = 0; row < b->n_rows && row < rows; row++) {
        int64_t t;
        double c;
        ls_loader_batch one = *b;
        one.n_rows = 1;
        one.tokens = b->tokens + (size_t)row * b->n_ctx;
        one.doc_ids = b->doc_ids + (size_t)row * b->n_ctx;
        batch_load(&one, &t, &c);
        got[row] = (int)t;
        mb_got[b->row_micro[row]] += c;
    }
    qsort(fill, (size_t)rows, sizeof *fill, cmp_int_desc);
    qsort(got, (size_t)b->n_rows, sizeof *got, cmp_int_desc);
    for (int r = 0; r < rows && r < b->n_rows; r++)
        CHECK_MSG(got[r] == fill[r], "rank %d: row fill %d served, first-fit decreasing gives %d", rank, got[r],
                  fill[r]);
    qsort(mb, (size_t)M, sizeof *mb, cmp_dbl);
    qsort(mb_got, (size_t)M, sizeof *mb_got, cmp_dbl);
    for (int m = 0; m < M; m++) CHECK_NEAR(mb_got[m], mb[m], 1e-9 * (mb[m] + 1));
    free(len), free(fill), free(got), free(rc);
}

static void check_algo(const char *name, ls_balance_algo algo) {
    ls_loader_mix mix;
    CHECK_EQ_INT(open_mix(name, &mix), 0);
    CHECK_EQ_INT(mix.balance, algo);
    ls_loader *ld = NULL;
    CHECK_EQ_INT(ls_loader_open(&ld, &mix, R, NULL), 0);
    if (!ld) return;
    int naive_worse = 0;
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        ls_loader_step *st = NULL;
        CHECK_EQ_INT(ls_loader_next_step(ld, &st), 0);
        if (!st) break;
        int64_t tok[R], tok_sum = 0, naive_tok[R] = {0};
        double cost[R], cost_sum = 0, cost_max = 0, item_cost = 0;
        for (int r = 0; r < R; r++) {
            ls_loader_batch b;
            CHECK_EQ_INT(ls_loader_step_batch(st, r, &b), 0);
            batch_load(&b, &tok[r], &cost[r]);
            check_rows(st, r, &b);
            ls_loader_batch_free(&b);
            tok_sum += tok[r];
            cost_sum += cost[r];
            cost_max = cost[r] > cost_max ? cost[r] : cost_max;
        }
        for (int i = 0; i < st->n_items; i++) item_cost += cost_of(st->items[i].len);
        /* nothing lost or duplicated: the ranks' rows hold the whole global batch */
        CHECK_MSG(tok_sum == (int64_t)TPR * R, "%s step %d: ranks hold %lld tokens, global batch %d", name, s,
                  (long long)tok_sum, TPR * R);
        CHECK_NEAR(cost_sum, item_cost, 1e-9 * item_cost);
        for (int r = 0; r < R; r++)
            CHECK_MSG(tok[r] >= MIN_TOKEN_SHARE * TPR, "%s step %d: rank %d got %lld tokens (share %d)", name, s, r,
                      (long long)tok[r], TPR);
        double mm = cost_max / (cost_sum / R), nv = naive_max_mean(st, naive_tok);
        worst = mm > worst ? mm : worst;
        if (algo == LS_BALANCE_NAIVE) {
            /* the configured naive split: each rank's tokens are exactly its slice's */
            for (int r = 0; r < R; r++)
                CHECK_MSG(tok[r] == naive_tok[r], "naive step %d rank %d: %lld tokens, slice has %lld", s, r,
                          (long long)tok[r], (long long)naive_tok[r]);
            CHECK_NEAR(mm, nv, 1e-9);
        } else {
            CHECK_MSG(mm <= BAL_MAX_MEAN, "%s step %d: max/mean cost %.4f > %.2f", name, s, mm, BAL_MAX_MEAN);
            CHECK_MSG(mm <= nv + 1e-12, "%s step %d: max/mean %.4f worse than naive %.4f", name, s, mm, nv);
        }
        naive_worse += nv > BAL_MAX_MEAN;
        ls_loader_step_free(st);
    }
    fprintf(stderr, "  %s: worst max/mean cost %.4f over %d steps (naive above %.2f in %d)\n", name, worst, STEPS,
            BAL_MAX_MEAN, naive_worse);
    /* the data make the balancer matter: the naive split misses the bound in most steps */
    CHECK(naive_worse >= STEPS / 2);
    ls_loader_close(ld);
    ls_loader_mix_free(&mix);
}

static void test_split_naive(void) { check_algo("naive", LS_BALANCE_NAIVE); }
static void test_split_lpt(void) { check_algo("lpt", LS_BALANCE_LPT); }
static void test_split_kk(void) { check_algo("kk", LS_BALANCE_KK); }

/* Replays the largest-deficit rule over the drawn items: each draw takes the unmuted source
 * with the largest deficit (first on ties), then every unmuted source gains w·len and the
 * drawn one loses len; a muted source's deficit is reset to 0 (no stale credit). Weights
 * alternate so that source 1 is muted every third step and unmuted after. */
static void test_mute_replay(void) {
    ls_loader_mix mix;
    CHECK_EQ_INT(open_mix("kk", &mix), 0);
    ls_loader *ld = NULL;
    CHECK_EQ_INT(ls_loader_open(&ld, &mix, R, NULL), 0);
    if (!ld) return;
    double d[2] = {0, 0};
    int mismatch = 0, draws = 0, resets = 0;
    for (int s = 0; s < 12; s++) {
        double w[2];
        if (s % 3 == 1)
            w[0] = 1, w[1] = 0;
        else if (s % 3 == 2)
            w[0] = 0.2, w[1] = 0.8;
        else
            w[0] = 0.6, w[1] = 0.4;
        CHECK_EQ_INT(ls_loader_set_weights(ld, w, -1), 0);
        ls_loader_step *st = NULL;
        CHECK_EQ_INT(ls_loader_next_step(ld, &st), 0);
        if (!st) break;
        for (int k = 0; k < 2; k++)
            if (w[k] <= 0) {
                resets += fabs(d[k]) > 0;
                d[k] = 0;
            }
        int64_t drawn[2] = {0, 0};
        for (int i = 0; i < st->n_items; i++) {
            int best = -1;
            for (int k = 0; k < 2; k++)
                if (w[k] > 0 && (best < 0 || d[k] > d[best])) best = k;
            if (st->items[i].source != best && mismatch++ < 3)
                fprintf(stderr, "  step %d item %d: drawn from %d, largest deficit %d (%.1f / %.1f)\n", s, i,
                        st->items[i].source, best, d[0], d[1]);
            int k_drawn = st->items[i].source;
            for (int k = 0; k < 2; k++)
                if (w[k] > 0) d[k] += w[k] * st->items[i].len;
            d[k_drawn] -= st->items[i].len;
            drawn[k_drawn] += st->items[i].len;
            draws++;
        }
        CHECK_MSG(w[1] > 0 || drawn[1] == 0, "step %d: muted source drew %lld tokens", s, (long long)drawn[1]);
        /* each source within one segment of its share of the step */
        for (int k = 0; k < 2; k++)
            CHECK_MSG(fabs((double)drawn[k] - w[k] * TPR * R) <= 2.0 * NCTX,
                      "step %d source %d: %lld tokens, target %.0f", s, k, (long long)drawn[k], w[k] * TPR * R);
        ls_loader_step_free(st);
    }
    CHECK_MSG(mismatch == 0, "%d of %d draws differ from the largest-deficit replay", mismatch, draws);
    CHECK(resets >= 2); /* the mute actually dropped some credit */
    ls_loader_close(ld);
    ls_loader_mix_free(&mix);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys-split-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    make_data();
    RUN(test_split_naive);
    RUN(test_split_lpt);
    RUN(test_split_kk);
    RUN(test_mute_replay);
    return TEST_RESULT_RMTREE(dir);
}
