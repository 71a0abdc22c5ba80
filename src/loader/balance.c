/* balance.c - splitting a step's items across ranks to minimise the largest per-rank cost:
 * naive sequential slices, greedy LPT and multiway Karmarkar–Karp (largest differencing). */
#include <stdlib.h>
#include <string.h>

#include "llmsys/loader.h"

static int naive(const double *cost, const int *weight, int n, int k, int *part) {
    (void)cost;
    double total = 0, cum = 0;
    for (int i = 0; i < n; i++) total += weight ? weight[i] : 1;
    for (int i = 0; i < n; i++) {
        double w = weight ? weight[i] : 1;
        /* The item belongs to the slice holding its midpoint: equal token slices in draw order. */
        int p = total > 0 ? (int)((cum + w / 2) * k / total) : 0;
        part[i] = p < k ? p : k - 1;
        cum += w;
    }
    return LS_OK;
}

/* qsort_r is a GNU extension; sort (cost, index) pairs instead to stay portable C11. */
typedef struct {
    double c;
    int i;
} ci_pair;

static int cmp_ci_desc(const void *a, const void *b) {
    const ci_pair *x = a, *y = b;
    if (x->c != y->c) return x->c < y->c ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i); /* deterministic ties: draw order */
}

static int lpt(const double *cost, int n, int k, int *part) {
    ci_pair *o = malloc((size_t)(n ? n : 1) * sizeof *o);
    double *sum = calloc((size_t)k, sizeof *sum);
    if (!o || !sum) {
        free(o);
        free(sum);
        return ls_err(LS_ENOMEM, "balance: out of memory");
    }
    for (int i = 0; i < n; i++) o[i] = (ci_pair){cost[i], i};
    qsort(o, (size_t)n, sizeof *o, cmp_ci_desc);
    for (int t = 0; t < n; t++) {
        int best = 0;
        for (int p = 1; p < k; p++)
            if (sum[p] < sum[best]) best = p;
        part[o[t].i] = best;
        sum[best] += o[t].c;
    }
    free(o);
    free(sum);
    return LS_OK;
}

/* Karmarkar–Karp for k parts. Each state is a k-tuple of subsets kept sorted by sum,
 * descending; its key is the spread max - min. Repeatedly merge the two states of largest
 * spread, pairing the heaviest subset of one with the lightest of the other, which
 * cancels as much of the two spreads as possible. Subsets are linked lists of items so a
 * merge costs O(k log k), not O(items). */
typedef struct {
    int k;
    double *sum; /* [state * k + j] */
    int *head, *tail;
    int *next;      /* item -> next item in its subset, -1 ends */
    int *heap;      /* state ids, max-heap on spread */
    double *spread; /* per state: largest minus smallest sum, cached for the heap */
    int nheap;
} kk_ctx;

static void kk_set_spread(kk_ctx *c, int s) {
    c->spread[s] = c->sum[(size_t)s * c->k] - c->sum[(size_t)s * c->k + c->k - 1];
}

static int kk_before(const kk_ctx *c, int a, int b) {
    double x = c->spread[a], y = c->spread[b];
    if (x != y) return x > y;
    return a < b;
}

static void kk_push(kk_ctx *c, int s) {
    int i = c->nheap++;
    c->heap[i] = s;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!kk_before(c, c->heap[i], c->heap[p])) break;
        int t = c->heap[i];
        c->heap[i] = c->heap[p];
        c->heap[p] = t;
        i = p;
    }
}

static int kk_pop(kk_ctx *c) {
    int top = c->heap[0];
    c->heap[0] = c->heap[--c->nheap];
    int i = 0;
    for (;;) {
        /* the larger child, then against the parent: the same order as any comparison
         * sequence (kk_before is a strict total order), written so it compiles to selects */
        int l = 2 * i + 1, r = l + 1;
        if (l >= c->nheap) break;
        int m = r < c->nheap && kk_before(c, c->heap[r], c->heap[l]) ? r : l;
        if (!kk_before(c, c->heap[m], c->heap[i])) break;
        int t = c->heap[i];
        c->heap[i] = c->heap[m];
        c->heap[m] = t;
        i = m;
    }
    return top;
}

typedef struct {
    double sum;
    int head, tail;
} kk_sub;

static int cmp_sub_desc(const void *a, const void *b) {
    const kk_sub *x = a, *y = b;
    if (x->sum != y->sum) return x->sum < y->sum ? 1 : -1;
    return (x->head > y->head) - (x->head < y->head);
}

static int sub_before(const kk_sub *x, const kk_sub *y) {
    if (x->sum != y->sum) return x->sum > y->sum;
    return x->head < y->head;
}

/* Sorts k subsets by sum descending, then head: insertion sort, as k is small and the
 * merged list is nearly sorted (ties are only empty subsets, which are identical). */
static void sort_subs(kk_sub *t, int k) {
    for (int i = 1; i < k; i++) {
        kk_sub v = t[i];
        int j = i;
        while (j > 0 && sub_before(&v, &t[j - 1])) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = v;
    }
}

static int karmarkar_karp(const double *cost, int n, int k, int *part) {
    kk_ctx c = {.k = k};
    size_t nk = (size_t)n * (size_t)k;
    c.sum = calloc(nk, sizeof *c.sum);
    c.head = malloc(nk * sizeof *c.head);
    c.tail = malloc(nk * sizeof *c.tail);
    c.next = malloc((size_t)n * sizeof *c.next);
    c.heap = malloc((size_t)n * sizeof *c.heap);
    c.spread = malloc((size_t)n * sizeof *c.spread);
    kk_sub *tmp = malloc((size_t)k * sizeof *tmp);
    int rc = LS_OK;
    if (!c.sum || !c.head || !c.tail || !c.next || !c.heap || !c.spread || !tmp) {
        rc = ls_err(LS_ENOMEM, "balance: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        size_t b = (size_t)i * k;
        for (int j = 0; j < k; j++) c.head[b + j] = c.tail[b + j] = -1;
        c.sum[b] = cost[i];
        c.head[b] = c.tail[b] = i;
        c.next[i] = -1;
        kk_set_spread(&c, i);
        kk_push(&c, i);
    }
    while (c.nheap > 1) {
        int a = kk_pop(&c), bb = kk_pop(&c);
        size_t A = (size_t)a * k, B = (size_t)bb * k;
        for (int j = 0; j < k; j++) {
            size_t x = A + j, y = B + (k - 1 - j);
            kk_sub s = {c.sum[x] + c.sum[y], c.head[x], c.tail[x]};
            if (c.head[y] >= 0) {
                if (s.head < 0)
                    s.head = c.head[y];
                else
                    c.next[s.tail] = c.head[y];
                s.tail = c.tail[y];
            }
            tmp[j] = s;
        }
        if (k > 32)
            qsort(tmp, (size_t)k, sizeof *tmp, cmp_sub_desc);
        else
            sort_subs(tmp, k);
        for (int j = 0; j < k; j++) {
            c.sum[A + j] = tmp[j].sum;
            c.head[A + j] = tmp[j].head;
            c.tail[A + j] = tmp[j].tail;
        }
        kk_set_spread(&c, a);
        kk_push(&c, a); /* state b is consumed */
    }
    if (n > 0) {
        size_t A = (size_t)c.heap[0] * k;
        for (int j = 0; j < k; j++)
            for (int it = c.head[A + j]; it >= 0; it = c.next[it]) part[it] = j;
    }
done:
    free(c.sum);
    free(c.head);
    free(c.tail);
    free(c.next);
    free(c.heap);
    free(c.spread);
    free(tmp);
    return rc;
}

int ls_balance_partition(ls_balance_algo algo, const double *cost, const int *weight, int n, int k, int *part) {
    if (n < 0 || k < 1) return ls_err(LS_EINVAL, "balance: need n >= 0 items and k >= 1 parts (n=%d, k=%d)", n, k);
    switch (algo) {
    case LS_BALANCE_NAIVE:
        return naive(cost, weight, n, k, part);
    case LS_BALANCE_LPT:
        return lpt(cost, n, k, part);
    case LS_BALANCE_KK:
        /* KK keeps k sums per item (O(n·k) memory); past 64 M entries LPT, within 4/3 of
         * the optimum, takes over rather than exhausting memory. */
        if ((size_t)n * (size_t)k > ((size_t)1 << 26)) return lpt(cost, n, k, part);
        return karmarkar_karp(cost, n, k, part);
    }
    return ls_err(LS_EINVAL, "balance: unknown algorithm %d", (int)algo);
}

double ls_balance_imbalance(const double *cost, const int *part, int n, int k, double *max_out) {
    double sums[1024] = {0}, *s = k <= 1024 ? sums : calloc((size_t)k, sizeof *s);
    double total = 0, mx = 0;
    if (!s) return -1;
    for (int i = 0; i < n; i++) {
        s[part[i]] += cost[i];
        total += cost[i];
    }
    for (int p = 0; p < k; p++)
        if (s[p] > mx) mx = s[p];
    if (s != sums) free(s);
    if (max_out) *max_out = mx;
    return total > 0 ? mx / (total / k) : 1.0;
}

/* Depth-first search over assignments with two prunings: item 0 goes to part 0 and an
 * item opens at most one new (empty) part (symmetry), and a branch stops once its
 * running maximum reaches the best complete solution. */
typedef struct {
    const double *cost;
    int n, k;
    double sum[8];
    int cur[12], best_part[12];
    double best;
} bf_ctx;

static void bf(bf_ctx *c, int i, int used, double mx) {
    if (mx >= c->best) return;
    if (i == c->n) {
        c->best = mx;
        memcpy(c->best_part, c->cur, sizeof c->cur);
        return;
    }
    int lim = used < c->k ? used + 1 : c->k;
    for (int p = 0; p < lim; p++) {
        c->sum[p] += c->cost[i];
        c->cur[i] = p;
        bf(c, i + 1, p == used ? used + 1 : used, c->sum[p] > mx ? c->sum[p] : mx);
        c->sum[p] -= c->cost[i];
    }
}

double ls_balance_brute_force(const double *cost, int n, int k, int *part) {
    LS_ASSERT(n >= 0 && n <= 12 && k >= 1 && k <= 8);
    bf_ctx c = {.cost = cost, .n = n, .k = k, .best = 1e300};
    if (n == 0) return 0;
    bf(&c, 0, 0, 0);
    if (part) memcpy(part, c.best_part, (size_t)n * sizeof *part);
    return c.best;
}
