/* engine.c - the data constructor: source loaders (document index, shuffle, cursor),
 * per-step mixing by largest deficit, the global batch and its cost-balanced split across ranks, and the
 * resume state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "llmsys/model.h"
#include "loader/loader_internal.h"

#define STATE_MAGIC "LSLDSTv1"
#define STATE_VERSION 1u
#define MAX_PENDING 16

/* One source loader: the only copy of this source's access state. The cursor (epoch, pos,
 * off) is what a resume needs. Steps are built from the document index alone (token
 * counts are known at open); the tokens are read once, straight from the mapped files
 * into each rank's batch (ls_loader_step_batch), so no read-ahead queue or copy is kept. */
typedef struct {
    ls_src *src; /* NULL when a hub's workers read the source */
    ls_loader_hub *hub;
    int idx;
    uint32_t ndocs;
    uint64_t epoch, pos, off; /* next: document perm[pos] of epoch, token off within it */
    double deficit;           /* target tokens minus drawn tokens (mixing) */
    uint32_t *perm;
    uint64_t perm_epoch;
    int perm_valid;
    ls_src_reader rd; /* with a tokenizer: the current document, encoded (sequence number cur_q) */
    uint64_t cur_q;
    uint32_t cur_len;
    int cur_ok;
} srcl;

typedef struct {
    int64_t at;
    int clear;
    double w[LS_LOADER_MAX_SOURCES];
} pending_w;

struct ls_loader {
    const ls_loader_mix *mix;
    const ls_bpe *bpe;
    int n_ranks;
    int64_t step;
    srcl *s;
    int override_on;
    double override_w[LS_LOADER_MAX_SOURCES];
    int n_pending;
    pending_w pending[MAX_PENDING];
    uint64_t sig;
};

/* ---------------------------------------------------------------- source loaders */

void ls_loader_perm(uint64_t seed, int idx, uint64_t epoch, uint32_t *perm, uint32_t n) {
    /* Each (source, epoch) has its own stream, so an order is reproducible from the state. */
    ls_rng base;
    ls_rng_seed(&base, seed);
    ls_rng r = ls_rng_split(&base, ((uint64_t)idx << 40) ^ epoch);
    for (uint32_t i = 0; i < n; i++) perm[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)ls_rng_below(&r, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

/* Takes up to max tokens of the current document; fills seg (metadata only when the loader reads
 * the source itself; from a hub, the segment's tokens go to dst). */
static int take(srcl *l, uint64_t seed, const ls_bpe *bpe, int max, ls_loader_seg *seg, int32_t *dst) {
    if (!l->perm_valid || l->perm_epoch != l->epoch) {
        ls_loader_perm(seed, l->idx, l->epoch, l->perm, l->ndocs);
        l->perm_epoch = l->epoch;
        l->perm_valid = 1;
    }
    uint32_t doc = l->perm[l->pos];
    const int32_t *tok = NULL;
    uint32_t hlen = 0;
    uint64_t q = l->epoch * l->ndocs + l->pos;
    if (l->hub) {
        LS_TRY(ls_hub_doc(l->hub, l->idx, l->epoch, l->pos, doc, &tok, &hlen));
    } else if (bpe) { /* encoded once, when the document comes up (it may span steps) */
        if (!l->cur_ok || l->cur_q != q) {
            l->cur_ok = 0;
            LS_TRY(ls_src_encode_doc(l->src, &l->rd, doc, bpe, &l->cur_len));
            l->cur_q = q, l->cur_ok = 1;
        }
        tok = l->rd.ids, hlen = l->cur_len;
    } else if (l->pos + 4 < l->ndocs) /* the shuffled order makes each index entry a cache miss: ask early */
        ls_src_prefetch_meta(l->src, l->perm[l->pos + 4]);
    uint64_t len = tok ? hlen : ls_src_doc_tokens(l->src, doc);
    if (l->off >= len) /* only a doctored state blob gets here */
        return ls_err(LS_EFORMAT, "loader state: offset %llu beyond document %u of source %d",
                      (unsigned long long)l->off, doc, l->idx);
    int n = (int)(len - l->off);
    if (n > max) n = max;
    *seg = (ls_loader_seg){l->idx, -1, -1, n, (uint32_t)l->epoch, doc, (uint32_t)l->off};
    if (tok) memcpy(dst, tok + l->off, (size_t)n * sizeof *dst);
    l->off += (uint64_t)n;
    if (l->off == len) {
        if (l->hub) ls_hub_consumed(l->hub, l->idx);
        l->off = 0;
        if (++l->pos == l->ndocs) l->pos = 0, l->epoch++;
    }
    return LS_OK;
}

/* ---------------------------------------------------------------- open / close */

static uint64_t mix_signature(const ls_loader *ld) {
    const ls_loader_mix *m = ld->mix;
    uint64_t v[6 + 2 * LS_LOADER_MAX_SOURCES] = {
        m->seed,      (uint64_t)m->n_ctx, (uint64_t)m->tokens_per_rank, (uint64_t)ld->n_ranks, (uint64_t)m->n_sources,
        STATE_VERSION};
    for (int i = 0; i < m->n_sources; i++) {
        v[6 + 2 * i] = ls_hash64(m->src[i].name, strlen(m->src[i].name));
        v[7 + 2 * i] = ld->s[i].ndocs;
    }
    return ls_hash64(v, sizeof v);
}

int ls_loader_open(ls_loader **out, const ls_loader_mix *mix, int n_ranks, const ls_loader_opts *opts) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > LS_LOADER_MAX_RANKS)
        return ls_err(LS_EINVAL, "ranks must be in [1, %d], got %d", LS_LOADER_MAX_RANKS, n_ranks);
    if ((int64_t)mix->tokens_per_rank * n_ranks > (1 << 28)) return ls_err(LS_EINVAL, "global batch too large");
    ls_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return ls_err(LS_ENOMEM, "out of memory");
    ld->mix = mix;
    ld->n_ranks = n_ranks;
    ls_loader_hub *hub = opts ? opts->hub : NULL; /* else no read-ahead: mapped files straight into batches */
    ld->s = calloc((size_t)mix->n_sources, sizeof *ld->s);
    if (!ld->s) {
        free(ld);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    int rc = LS_OK;
    for (int i = 0; i < mix->n_sources && rc == LS_OK; i++) {
        srcl *l = &ld->s[i];
        l->idx = i;
        l->hub = hub;
        if (hub) {
            ls_loader_hub_source hs;
            ls_loader_hub_source_info(hub, i, &hs);
            l->ndocs = (uint32_t)hs.docs;
        } else {
            rc = ls_src_open(&l->src, &mix->src[i], mix->strict);
            if (rc < 0) break;
            l->ndocs = ls_src_ndocs(l->src);
        }
        l->perm = malloc((size_t)l->ndocs * sizeof *l->perm);
        if (!l->perm) rc = ls_err(LS_ENOMEM, "out of memory");
    }
    if (rc < 0) {
        ls_loader_close(ld);
        return rc;
    }
    ld->sig = mix_signature(ld);
    if ((ld->bpe = opts ? opts->tokenizer : NULL)) { /* a state for other tokens is another run's */
        uint64_t v[2] = {ld->sig, ls_loader_tokenizer_print(ld->bpe)};
        ld->sig = ls_hash64(v, sizeof v);
    }
    *out = ld;
    return LS_OK;
}

void ls_loader_close(ls_loader *ld) {
    if (!ld) return;
    for (int i = 0; i < ld->mix->n_sources; i++) {
        srcl *l = &ld->s[i];
        free(l->perm);
        ls_src_reader_free(&l->rd);
        ls_src_close(l->src);
    }
    free(ld->s);
    free(ld);
}

uint64_t ls_loader_tokenizer_print(const ls_bpe *t) {
    char *js = ls_bpe_to_json(t);
    uint64_t h = js ? ls_hash64(js, strlen(js)) : 0;
    free(js);
    return h ? h : 1;
}

int64_t ls_loader_step_index(const ls_loader *ld) { return ld->step; }
int ls_loader_pending_count(const ls_loader *ld) { return ld->n_pending; }
int64_t ls_loader_source_docs(const ls_loader *ld, int s) { return ld->s[s].ndocs; }
int64_t ls_loader_source_skipped(const ls_loader *ld, int s) {
    if (!ld->s[s].hub) return ls_src_skipped(ld->s[s].src);
    ls_loader_hub_source hs;
    ls_loader_hub_source_info(ld->s[s].hub, s, &hs);
    return hs.skipped;
}

size_t ls_loader_state_bytes(const ls_loader *ld) {
    size_t b = sizeof *ld;
    for (int i = 0; i < ld->mix->n_sources; i++) {
        srcl *l = &ld->s[i];
        b += sizeof *l + (l->src ? ls_src_state_bytes(l->src) : 0) + (size_t)l->ndocs * sizeof *l->perm;
    }
    return b;
}

/* ---------------------------------------------------------------- weights */

int ls_loader_set_weights(ls_loader *ld, const double *w, int64_t at) {
    int n = ld->mix->n_sources;
    if (at < 0) at = ld->step;
    if (at < ld->step)
        return ls_err(LS_ESTATE, "weights cannot change at step %lld: steps up to %lld are already built",
                      (long long)at, (long long)ld->step - 1);
    if (w) LS_TRY(ls_loader_weights_check(w, n, "new weights"));
    if (ld->n_pending == MAX_PENDING) return ls_err(LS_EBUSY, "too many pending weight changes (%d)", MAX_PENDING);
    /* Keep the list sorted by step; a later change at the same step wins (stable insert). */
    int k = ld->n_pending;
    while (k > 0 && ld->pending[k - 1].at > at) {
        ld->pending[k] = ld->pending[k - 1];
        k--;
    }
    pending_w *p = &ld->pending[k];
    p->at = at;
    p->clear = w == NULL;
    double s = 0;
    for (int i = 0; w && i < n; i++) s += w[i];
    for (int i = 0; i < n; i++) p->w[i] = w ? w[i] / s : 0;
    ld->n_pending++;
    return LS_OK;
}

static void weights_for_step(ls_loader *ld, double *w) {
    while (ld->n_pending > 0 && ld->pending[0].at <= ld->step) {
        ld->override_on = !ld->pending[0].clear;
        memcpy(ld->override_w, ld->pending[0].w, sizeof ld->override_w);
        memmove(&ld->pending[0], &ld->pending[1], (size_t)(ld->n_pending - 1) * sizeof ld->pending[0]);
        ld->n_pending--;
    }
    if (ld->override_on)
        memcpy(w, ld->override_w, (size_t)ld->mix->n_sources * sizeof *w);
    else
        ls_loader_mix_weights_at(ld->mix, ld->step, w);
}

/* ---------------------------------------------------------------- state blob */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void put(wbuf *b, const void *v, size_t n) {
    if (b->n + n <= b->cap) memcpy(b->p + b->n, v, n);
    b->n += n;
}

static size_t write_state(const ls_loader *ld, uint8_t *dst, size_t cap) {
    wbuf b = {dst, 0, cap};
    uint32_t u32;
    int n = ld->mix->n_sources;
    put(&b, STATE_MAGIC, 8);
    u32 = STATE_VERSION, put(&b, &u32, 4);
    u32 = (uint32_t)n, put(&b, &u32, 4);
    put(&b, &ld->step, 8);
    put(&b, &ld->sig, 8);
    for (int i = 0; i < n; i++) {
        const srcl *l = &ld->s[i];
        put(&b, &l->epoch, 8);
        put(&b, &l->pos, 8);
        put(&b, &l->off, 8);
        put(&b, &l->deficit, 8);
    }
    u32 = (uint32_t)ld->override_on, put(&b, &u32, 4);
    u32 = (uint32_t)ld->n_pending, put(&b, &u32, 4);
    put(&b, ld->override_w, (size_t)n * 8);
    for (int k = 0; k < ld->n_pending; k++) {
        put(&b, &ld->pending[k].at, 8);
        u32 = (uint32_t)ld->pending[k].clear, put(&b, &u32, 4);
        put(&b, ld->pending[k].w, (size_t)n * 8);
    }
    uint64_t h = b.n <= cap ? ls_hash64(dst, b.n) : 0;
    put(&b, &h, 8);
    return b.n;
}

int ls_loader_get_state(const ls_loader *ld, uint8_t **blob, size_t *len) {
    size_t n = write_state(ld, NULL, 0);
    *blob = malloc(n);
    if (!*blob) return ls_err(LS_ENOMEM, "out of memory");
    *len = write_state(ld, *blob, n);
    return LS_OK;
}

typedef struct {
    const uint8_t *p;
    size_t n, at;
    int bad;
} rbuf;

static void get(rbuf *b, void *v, size_t n) {
    if (b->at + n > b->n) {
        b->bad = 1;
        memset(v, 0, n);
        return;
    }
    memcpy(v, b->p + b->at, n);
    b->at += n;
}

int ls_loader_set_state(ls_loader *ld, const uint8_t *blob, size_t len) {
    int n = ld->mix->n_sources;
    if (len < 40 || memcmp(blob, STATE_MAGIC, 8) != 0)
        return ls_err(LS_EFORMAT, "loader state: not a loader state blob (bad magic)");
    uint64_t h;
    memcpy(&h, blob + len - 8, 8);
    if (ls_hash64(blob, len - 8) != h) return ls_err(LS_ECHECKSUM, "loader state: checksum mismatch (corrupt blob)");
    rbuf b = {blob, len - 8, 8, 0};
    uint32_t ver, ns, ovr, np;
    int64_t step;
    uint64_t sig;
    get(&b, &ver, 4);
    get(&b, &ns, 4);
    get(&b, &step, 8);
    get(&b, &sig, 8);
    if (ver != STATE_VERSION) return ls_err(LS_EFORMAT, "loader state: unsupported version %u", ver);
    if (ns != (uint32_t)n || sig != ld->sig)
        return ls_err(LS_EINVAL,
                      "loader state: saved for another mix (sources, documents, seed, n_ctx, batch or ranks differ)");
    uint64_t cur[LS_LOADER_MAX_SOURCES][3];
    double def[LS_LOADER_MAX_SOURCES];
    for (int i = 0; i < n; i++) {
        get(&b, &cur[i][0], 8);
        get(&b, &cur[i][1], 8);
        get(&b, &cur[i][2], 8);
        get(&b, &def[i], 8);
    }
    get(&b, &ovr, 4);
    get(&b, &np, 4);
    double ow[LS_LOADER_MAX_SOURCES] = {0};
    get(&b, ow, (size_t)n * 8);
    if (np > MAX_PENDING) b.bad = 1;
    pending_w pend[MAX_PENDING];
    memset(pend, 0, sizeof pend);
    for (uint32_t k = 0; k < np && !b.bad; k++) {
        uint32_t c;
        get(&b, &pend[k].at, 8);
        get(&b, &c, 4);
        pend[k].clear = (int)c;
        get(&b, pend[k].w, (size_t)n * 8);
    }
    if (b.bad || b.at != b.n || step < 0) return ls_err(LS_EFORMAT, "loader state: truncated or inconsistent blob");
    for (int i = 0; i < n; i++)
        if (cur[i][1] >= ld->s[i].ndocs) return ls_err(LS_EFORMAT, "loader state: source %d position out of range", i);
    ld->step = step;
    ld->override_on = (int)ovr;
    memcpy(ld->override_w, ow, sizeof ow);
    ld->n_pending = (int)np;
    memcpy(ld->pending, pend, sizeof pend);
    for (int i = 0; i < n; i++) {
        ld->s[i].epoch = cur[i][0];
        ld->s[i].pos = cur[i][1];
        ld->s[i].off = cur[i][2];
        ld->s[i].deficit = def[i];
    }
    return LS_OK;
}

/* ---------------------------------------------------------------- steps */

void ls_loader_step_free(ls_loader_step *st) {
    if (!st) return;
    free(st->items), free(st->item_cost);
    free(st->part), free(st->rank_cost);
    free(st->source_tokens), free(st->weights);
    free(st->state_after);
    free(st->tokens), free(st->item_off);
    free(st);
}

int ls_loader_step_rebalance(ls_loader_step *st, ls_balance_algo algo) {
    int *len = malloc((size_t)(st->n_items ? st->n_items : 1) * sizeof *len);
    if (!len) return ls_err(LS_ENOMEM, "out of memory");
    for (int i = 0; i < st->n_items; i++) len[i] = st->items[i].len;
    int rc = ls_balance_partition(algo, st->item_cost, len, st->n_items, st->n_ranks, st->part);
    free(len);
    LS_TRY(rc);
    memset(st->rank_cost, 0, (size_t)st->n_ranks * sizeof *st->rank_cost);
    for (int i = 0; i < st->n_items; i++) st->rank_cost[st->part[i]] += st->item_cost[i];
    return LS_OK;
}

int ls_loader_next_step(ls_loader *ld, ls_loader_step **out) {
    *out = NULL;
    const ls_loader_mix *m = ld->mix;
    int n = m->n_sources, R = ld->n_ranks;
    int64_t G = (int64_t)m->tokens_per_rank * R;
    ls_loader_step *st = calloc(1, sizeof *st);
    if (!st) return ls_err(LS_ENOMEM, "out of memory");
    st->step = ld->step;
    st->n_ranks = R;
    st->n_ctx = m->n_ctx;
    st->micro_batches = m->micro_batches;
    st->n_sources = n;
    st->cost_a = m->cost_a;
    st->cost_b = m->cost_b;
    st->loader = ld;
    int items_cap = 1024; /* grown on demand: a step of G tokens rarely has G items */
    st->items = malloc((size_t)items_cap * sizeof *st->items);
    st->rank_cost = calloc((size_t)R, sizeof *st->rank_cost);
    st->source_tokens = calloc((size_t)n, sizeof *st->source_tokens);
    st->weights = calloc((size_t)n, sizeof *st->weights);
    ls_loader_hub *hub = ld->s[0].hub;
    int own = hub || ld->bpe; /* preprocessed tokens (workers' or BPE): the step keeps its own */
    if (own) st->tokens = malloc((size_t)G * sizeof *st->tokens);
    if (!st->items || !st->rank_cost || !st->source_tokens || !st->weights || (own && !st->tokens)) {
        ls_loader_step_free(st);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    /* The step is built from the document index alone: no token is read here. */
    weights_for_step(ld, st->weights);
    if (hub) ls_hub_plan(hub, st->weights);
    for (int k = 0; k < n; k++)
        if (st->weights[k] <= 0) ld->s[k].deficit = 0; /* a muted source keeps no stale credit */
    int64_t filled = 0;
    int rc = LS_OK;
    while (filled < G) {
        /* Largest deficit first (Megatron's largest sampling error, over tokens): after
         * every draw each source's drawn tokens are within one segment of its target. */
        int best = -1;
        for (int k = 0; k < n; k++)
            if (st->weights[k] > 0 && (best < 0 || ld->s[k].deficit > ld->s[best].deficit)) best = k;
        int max = G - filled < m->n_ctx ? (int)(G - filled) : m->n_ctx;
        if (st->n_items == items_cap) {
            ls_loader_seg *grown = realloc(st->items, (size_t)items_cap * 2 * sizeof *grown);
            if (!grown) {
                rc = ls_err(LS_ENOMEM, "out of memory");
                break;
            }
            st->items = grown;
            items_cap *= 2;
        }
        ls_loader_seg *seg = &st->items[st->n_items];
        rc = take(&ld->s[best], m->seed, hub ? NULL : ld->bpe, max, seg, own ? st->tokens + filled : NULL);
        if (rc < 0) break;
        for (int k = 0; k < n; k++)
            if (st->weights[k] > 0) ld->s[k].deficit += st->weights[k] * seg->len;
        ld->s[best].deficit -= seg->len;
        st->source_tokens[best] += seg->len;
        filled += seg->len;
        st->n_items++;
    }
    if (rc == LS_OK) {
        st->item_cost = malloc((size_t)st->n_items * sizeof *st->item_cost);
        st->part = malloc((size_t)st->n_items * sizeof *st->part);
        if (own && (st->item_off = malloc((size_t)st->n_items * sizeof *st->item_off)))
            for (int64_t i = 0, at = 0; i < st->n_items; at += st->items[i].len, i++) st->item_off[i] = at;
        if (!st->item_cost || !st->part || (own && !st->item_off)) rc = ls_err(LS_ENOMEM, "out of memory");
    }
    if (rc == LS_OK) {
        for (int i = 0; i < st->n_items; i++) st->item_cost[i] = ls_loader_cost(m->cost_a, m->cost_b, st->items[i].len);
        rc = ls_loader_step_rebalance(st, m->balance);
    }
    if (rc == LS_OK) {
        ld->step++;
        rc = ls_loader_get_state(ld, &st->state_after, &st->state_len);
    }
    if (rc < 0) {
        ls_loader_step_free(st);
        return rc;
    }
    *out = st;
    return LS_OK;
}

/* ---------------------------------------------------------------- one rank's batch */

void ls_loader_batch_free(ls_loader_batch *b) {
    free(b->tokens);
    free(b->doc_ids);
    free(b->row_micro);
    free(b->segs);
    free(b->state);
    free(b->positions);
    memset(b, 0, sizeof *b);
}

/* dst[0..n) = v (a run of one segment's doc id). */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void fill_i32_avx2(int32_t *dst, int32_t v, int n) {
    const __m256i x = _mm256_set1_epi32(v);
    int t = 0;
    for (; t + 8 <= n; t += 8) _mm256_storeu_si256((__m256i *)(void *)(dst + t), x);
    for (; t < n; t++) dst[t] = v;
}
#define HAVE_AVX2_PATH 1
#endif

static void fill_i32(int32_t *dst, int32_t v, int n) {
    int t = 0;
#ifdef HAVE_AVX2_PATH
    if (n >= 64 && __builtin_cpu_supports("avx2")) {
        fill_i32_avx2(dst, v, n);
        return;
    }
#endif
#ifdef __SSE2__
    const __m128i x = _mm_set1_epi32(v);
    for (; t + 4 <= n; t += 4) _mm_storeu_si128((__m128i *)(void *)(dst + t), x);
#endif
    for (; t < n; t++) dst[t] = v;
}

int ls_loader_step_item_tokens(const ls_loader_step *st, int i, int32_t *dst) {
    if (i < 0 || i >= st->n_items) return ls_err(LS_EINVAL, "item %d out of range [0, %d)", i, st->n_items);
    const ls_loader_seg *g = &st->items[i];
    if (st->tokens) {
        memcpy(dst, st->tokens + st->item_off[i], (size_t)g->len * sizeof *dst);
        return LS_OK;
    }
    return ls_src_copy_tokens(st->loader->s[g->source].src, g->doc, g->doc_off, g->len, dst);
}

typedef struct {
    int len, i;
} len_idx;

static int cmp_len_desc(const void *a, const void *b) {
    const len_idx *x = a, *y = b;
    if (x->len != y->len) return y->len - x->len;
    return x->i - y->i;
}

int ls_loader_step_batch(const ls_loader_step *st, int rank, ls_loader_batch *out) {
    memset(out, 0, sizeof *out);
    if (rank < 0 || rank >= st->n_ranks) return ls_err(LS_EINVAL, "rank %d out of range [0, %d)", rank, st->n_ranks);
    int T = st->n_ctx, cnt = 0;
    for (int i = 0; i < st->n_items; i++) cnt += st->part[i] == rank;
    len_idx *o = malloc((size_t)(cnt ? cnt : 1) * sizeof *o);
    int *fill = malloc((size_t)(cnt ? cnt : 1) * sizeof *fill); /* rows <= items */
    double *rcost = calloc((size_t)(cnt ? cnt : 1), sizeof *rcost);
    out->segs = malloc((size_t)(cnt ? cnt : 1) * sizeof *out->segs);
    int rc = (!o || !fill || !rcost || !out->segs) ? ls_err(LS_ENOMEM, "out of memory") : LS_OK;
    const int local = st->tokens == NULL; /* read from the mapped files (else the step holds the tokens) */
    int rows = 0;
    if (rc == LS_OK) {
        for (int i = 0, k = 0; i < st->n_items; i++)
            if (st->part[i] == rank) o[k++] = (len_idx){st->items[i].len, i};
        /* First-fit decreasing into rows of T tokens: segments never straddle rows. */
        qsort(o, (size_t)cnt, sizeof *o, cmp_len_desc);
        for (int k = 0; k < cnt; k++) {
            int r = 0;
            while (r < rows && fill[r] + o[k].len > T) r++;
            if (r == rows) fill[rows++] = 0;
            ls_loader_seg sg = st->items[o[k].i];
            sg.row = r;
            sg.col = fill[r];
            fill[r] += sg.len;
            rcost[r] += st->item_cost[o[k].i];
            out->segs[k] = sg;
            out->cost += st->item_cost[o[k].i];
            out->n_tokens += sg.len;
        }
        out->tokens = malloc((size_t)(rows ? rows : 1) * T * sizeof *out->tokens);
        out->doc_ids = malloc((size_t)(rows ? rows : 1) * T * sizeof *out->doc_ids);
        out->row_micro = malloc((size_t)(rows ? rows : 1) * sizeof *out->row_micro);
        out->state = malloc(st->state_len);
        if (!out->tokens || !out->doc_ids || !out->row_micro || !out->state) rc = ls_err(LS_ENOMEM, "out of memory");
    }
    if (rc == LS_OK) {
        /* Rows to micro-batches by LPT on row cost; then rows are renumbered so that each
         * micro-batch's rows are contiguous. */
        int M = st->micro_batches, *mb = malloc((size_t)(rows ? rows : 1) * sizeof *mb),
            *newrow = malloc((size_t)(rows ? rows : 1) * sizeof *newrow);
        if (!mb || !newrow) rc = ls_err(LS_ENOMEM, "out of memory");
        if (rc == LS_OK) rc = ls_balance_partition(LS_BALANCE_LPT, rcost, NULL, rows, M, mb);
        if (rc == LS_OK) {
            int r2 = 0;
            for (int b = 0; b < M; b++)
                for (int r = 0; r < rows; r++)
                    if (mb[r] == b) newrow[r] = r2, out->row_micro[r2++] = b;
            /* Segments fill each row from column 0; only the tail after them is padding. */
            for (int r = 0; r < rows; r++) {
                fill_i32(out->tokens + (size_t)newrow[r] * T + fill[r], LS_TOK_PAD, T - fill[r]);
                fill_i32(out->doc_ids + (size_t)newrow[r] * T + fill[r], -1, T - fill[r]);
            }
            int *nseg = calloc((size_t)(rows ? rows : 1), sizeof *nseg);
            if (!nseg) rc = ls_err(LS_ENOMEM, "out of memory");
            const srcl *sl = st->loader->s;
            /* Documents are in shuffled order, so each segment's index entry and text are
             * cache misses: ask for index entries 8 segments ahead and text 3 ahead. */
            enum { AHEAD_META = 8, AHEAD = 3 };
            for (int k = 0; local && k < cnt && k < AHEAD_META; k++)
                ls_src_prefetch_meta(sl[out->segs[k].source].src, out->segs[k].doc);
            for (int k = 0; local && k < cnt && k < AHEAD; k++)
                ls_src_prefetch(sl[out->segs[k].source].src, out->segs[k].doc, out->segs[k].doc_off, out->segs[k].len);
            for (int k = 0; k < cnt && rc == LS_OK; k++) {
                ls_loader_seg *sg = &out->segs[k];
                if (local && k + AHEAD_META < cnt)
                    ls_src_prefetch_meta(sl[out->segs[k + AHEAD_META].source].src, out->segs[k + AHEAD_META].doc);
                if (local && k + AHEAD < cnt) {
                    const ls_loader_seg *nx = &out->segs[k + AHEAD];
                    ls_src_prefetch(sl[nx->source].src, nx->doc, nx->doc_off, nx->len);
                }
                sg->row = newrow[sg->row];
                int32_t *dt = out->tokens + (size_t)sg->row * T + sg->col,
                        *dd = out->doc_ids + (size_t)sg->row * T + sg->col;
                /* Read and tokenize straight into the row; doc ids are one run per segment. */
                if (local)
                    rc = ls_src_copy_tokens(sl[sg->source].src, sg->doc, sg->doc_off, sg->len, dt);
                else
                    memcpy(dt, st->tokens + st->item_off[o[k].i], (size_t)sg->len * sizeof *dt);
                fill_i32(dd, nseg[sg->row]++, sg->len);
            }
            free(nseg);
        }
        free(mb);
        free(newrow);
    }
    free(o);
    free(fill);
    free(rcost);
    if (rc < 0) {
        ls_loader_batch_free(out);
        return rc;
    }
    out->step = st->step;
    out->rank = rank;
    out->n_ranks = st->n_ranks;
    out->n_ctx = T;
    out->n_rows = rows;
    out->micro_batches = st->micro_batches;
    out->n_segs = cnt;
    memcpy(out->state, st->state_after, st->state_len);
    out->state_len = st->state_len;
    return LS_OK;
}
