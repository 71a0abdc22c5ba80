/* train.c - byte-level BPE training: count the pre-tokenizer's pieces once, then repeatedly merge
 * the most frequent adjacent pair, updating only the pieces that contain it (pair counts in a
 * hash table, candidates in a max-heap whose stale entries are re-checked when they surface). */
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "text/internal.h"

typedef struct {
    int32_t *sym;
    int32_t n;
    int64_t count;
} word;

typedef struct {
    uint64_t key; /* a << 32 | b */
    int64_t count;
    int32_t *occ; /* words that contained the pair when it was counted (may repeat, may be stale) */
    int32_t n_occ, cap_occ;
    int used;
} pair;

typedef struct {
    int64_t count;
    uint64_t key;
} heap_ent;

typedef struct {
    word *w;
    int32_t n_w, cap_w;
    int32_t *w_slot; /* piece bytes -> word, during counting */
    size_t w_cap;
    const unsigned char **w_bytes; /* piece bytes of each word, during counting */
    pair *p;
    size_t p_cap, p_n;
    heap_ent *h;
    size_t h_n, h_cap;
} trainer;

static pair *pair_get(trainer *tr, uint64_t key, int create) {
    if (create && 2 * (tr->p_n + 1) > tr->p_cap) { /* grow */
        size_t nc = tr->p_cap ? tr->p_cap * 2 : 1024;
        pair *np = calloc(nc, sizeof *np);
        if (!np) return NULL;
        for (size_t i = 0; i < tr->p_cap; i++) {
            if (!tr->p[i].used) continue;
            size_t h = (size_t)ls_bpe_mix64(tr->p[i].key) & (nc - 1);
            while (np[h].used) h = (h + 1) & (nc - 1);
            np[h] = tr->p[i];
        }
        free(tr->p);
        tr->p = np;
        tr->p_cap = nc;
    }
    if (!tr->p_cap) return NULL;
    for (size_t h = (size_t)ls_bpe_mix64(key) & (tr->p_cap - 1);; h = (h + 1) & (tr->p_cap - 1)) {
        if (tr->p[h].used && tr->p[h].key == key) return &tr->p[h];
        if (!tr->p[h].used) {
            if (!create) return NULL;
            tr->p[h].used = 1;
            tr->p[h].key = key;
            tr->p_n++;
            return &tr->p[h];
        }
    }
}

static int heap_less(const heap_ent *x, const heap_ent *y) { /* x below y: fewer, or same and larger key */
    return x->count != y->count ? x->count < y->count : x->key > y->key;
}

static int heap_push(trainer *tr, int64_t count, uint64_t key) {
    if (tr->h_n == tr->h_cap) {
        size_t nc = tr->h_cap ? tr->h_cap * 2 : 4096;
        heap_ent *nh = realloc(tr->h, nc * sizeof *nh);
        if (!nh) return ls_err(LS_ENOMEM, "tokenizer training heap");
        tr->h = nh;
        tr->h_cap = nc;
    }
    size_t i = tr->h_n++;
    tr->h[i] = (heap_ent){count, key};
    while (i && heap_less(&tr->h[(i - 1) / 2], &tr->h[i])) {
        heap_ent t = tr->h[i];
        tr->h[i] = tr->h[(i - 1) / 2];
        tr->h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
    return LS_OK;
}

static heap_ent heap_pop(trainer *tr) {
    heap_ent top = tr->h[0];
    tr->h[0] = tr->h[--tr->h_n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < tr->h_n && heap_less(&tr->h[m], &tr->h[l])) m = l;
        if (r < tr->h_n && heap_less(&tr->h[m], &tr->h[r])) m = r;
        if (m == i) break;
        heap_ent t = tr->h[i];
        tr->h[i] = tr->h[m];
        tr->h[m] = t;
        i = m;
    }
    return top;
}

static int occ_add(pair *p, int32_t w) {
    if (p->n_occ && p->occ[p->n_occ - 1] == w) return LS_OK;
    if (p->n_occ == p->cap_occ) {
        int32_t nc = p->cap_occ ? p->cap_occ * 2 : 4;
        int32_t *no = realloc(p->occ, sizeof(int32_t) * (size_t)nc);
        if (!no) return ls_err(LS_ENOMEM, "tokenizer training");
        p->occ = no;
        p->cap_occ = nc;
    }
    p->occ[p->n_occ++] = w;
    return LS_OK;
}

/* Adds sign * count to every adjacent pair of word wi; new pairs learn the word (when sign > 0). */
static int count_pairs(trainer *tr, int32_t wi, int sign) {
    word *w = &tr->w[wi];
    for (int32_t i = 0; i + 1 < w->n; i++) {
        uint64_t key = (uint64_t)(uint32_t)w->sym[i] << 32 | (uint32_t)w->sym[i + 1];
        pair *p = pair_get(tr, key, sign > 0);
        if (!p) return sign > 0 ? ls_err(LS_ENOMEM, "tokenizer training pairs") : LS_OK;
        p->count += sign * w->count;
        if (sign > 0 && occ_add(p, wi)) return LS_ENOMEM;
    }
    return LS_OK;
}

/* Counts one piece into the word table (new piece bytes are kept by pointer into the text). */
static int add_piece(trainer *tr, const unsigned char *s, size_t len) {
    if (2 * ((size_t)tr->n_w + 1) > tr->w_cap) {
        size_t nc = tr->w_cap ? tr->w_cap * 2 : 4096;
        int32_t *ns = malloc(nc * sizeof *ns);
        if (!ns) return ls_err(LS_ENOMEM, "tokenizer training words");
        memset(ns, 0xff, nc * sizeof *ns);
        for (int32_t i = 0; i < tr->n_w; i++) {
            size_t h = (size_t)ls_hash64(tr->w_bytes[i], (size_t)tr->w[i].n) & (nc - 1);
            while (ns[h] >= 0) h = (h + 1) & (nc - 1);
            ns[h] = i;
        }
        free(tr->w_slot);
        tr->w_slot = ns;
        tr->w_cap = nc;
    }
    size_t h = (size_t)ls_hash64(s, len) & (tr->w_cap - 1);
    for (; tr->w_slot[h] >= 0; h = (h + 1) & (tr->w_cap - 1)) {
        word *w = &tr->w[tr->w_slot[h]];
        if ((size_t)w->n == len && !memcmp(tr->w_bytes[tr->w_slot[h]], s, len)) {
            w->count++;
            return LS_OK;
        }
    }
    if (tr->n_w == tr->cap_w) {
        int32_t nc = tr->cap_w ? tr->cap_w * 2 : 4096;
        word *nw = realloc(tr->w, sizeof(word) * (size_t)nc);
        const unsigned char **nb = nw ? realloc(tr->w_bytes, sizeof(char *) * (size_t)nc) : NULL;
        if (nw) tr->w = nw;
        if (!nb) return ls_err(LS_ENOMEM, "tokenizer training words");
        tr->w_bytes = nb;
        tr->cap_w = nc;
    }
    tr->w_slot[h] = tr->n_w;
    tr->w_bytes[tr->n_w] = s;
    tr->w[tr->n_w++] = (word){NULL, (int32_t)len, 1};
    return LS_OK;
}

static void trainer_free(trainer *tr) {
    for (int32_t i = 0; i < tr->n_w; i++) free(tr->w[i].sym);
    for (size_t i = 0; i < tr->p_cap; i++) free(tr->p[i].occ);
    free(tr->w);
    free(tr->w_slot);
    free(tr->w_bytes);
    free(tr->p);
    free(tr->h);
}

/* Merges (a, b) -> to in every word that still holds it. */
static int apply_merge(trainer *tr, pair *pp, int32_t to) {
    int32_t a = (int32_t)(pp->key >> 32), b = (int32_t)(uint32_t)pp->key;
    int32_t n_occ = pp->n_occ, *occ = pp->occ; /* the pair table may move while we count */
    pp->occ = NULL;
    pp->n_occ = pp->cap_occ = 0;
    int rc = LS_OK;
    for (int32_t k = 0; k < n_occ && rc == LS_OK; k++) {
        word *w = &tr->w[occ[k]];
        int has = 0;
        for (int32_t i = 0; i + 1 < w->n && !has; i++) has = w->sym[i] == a && w->sym[i + 1] == b;
        if (!has) continue;
        count_pairs(tr, occ[k], -1);
        int32_t o = 0;
        for (int32_t i = 0; i < w->n; i++) {
            if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) w->sym[o++] = to, i++;
            else w->sym[o++] = w->sym[i];
        }
        w->n = o;
        if ((rc = count_pairs(tr, occ[k], +1))) break;
        for (int32_t i = 0; i + 1 < w->n && rc == LS_OK; i++) {
            if (w->sym[i] != to && w->sym[i + 1] != to) continue;
            uint64_t key = (uint64_t)(uint32_t)w->sym[i] << 32 | (uint32_t)w->sym[i + 1];
            pair *p = pair_get(tr, key, 0);
            rc = heap_push(tr, p->count, key);
        }
    }
    free(occ);
    return rc;
}

/* The added tokens in id order: the model's own first when asked for, then the caller's. */
static int n_specials(const ls_bpe_train_opts *o) { return o->n_specials + (o->model_specials ? 3 : 0); }

static const char *special(const ls_bpe_train_opts *o, int i) {
    static const char *const model[] = LS_BPE_SPECIALS;
    int k = o->model_specials ? 3 : 0;
    return i < k ? model[i] : o->specials[i - k];
}

/* The options' sizes, and each added token once (a token given twice would take two ids). */
static int check_opts(const ls_bpe_train_opts *o) {
    int ns = n_specials(o);
    if (o->vocab_size < 256 + ns || o->vocab_size > LS_BPE_MAX_VOCAB)
        return ls_err(LS_EINVAL, "tokenizer: vocabulary size %d outside [%d, %d] (256 bytes + %d added tokens)",
                      o->vocab_size, 256 + ns, LS_BPE_MAX_VOCAB, ns);
    if (o->min_freq < 0) return ls_err(LS_EINVAL, "tokenizer: minimum pair count %d is negative", o->min_freq);
    for (int s = 1; s < ns; s++)
        for (int k = 0; k < s; k++)
            if (!strcmp(special(o, k), special(o, s)))
                return ls_err(LS_EINVAL, "tokenizer: added token '%s' is given twice (ids %d and %d)", special(o, s),
                              256 + k, 256 + s);
    return LS_OK;
}

int ls_bpe_train(const char *const *texts, const size_t *lens, int n, const ls_bpe_train_opts *o, ls_bpe **out) {
    *out = NULL;
    int min_freq = o->min_freq > 0 ? o->min_freq : 2;
    LS_TRY(check_opts(o));
    trainer tr = {0};
    ls_bpe *t = NULL;
    int rc = ls_bpe_alloc(&t, o->vocab_size);
    for (int b = 0; b < 256 && rc == LS_OK; b++) {
        uint8_t c = (uint8_t)b;
        rc = ls_bpe_set_token(t, b, &c, 1, 0);
    }
    for (int s = 0; s < n_specials(o) && rc == LS_OK; s++) /* ids 256.. (llmsys's BOS, EOS, PAD when asked for) */
        rc = ls_bpe_set_token(t, t->n_tok, special(o, s), strlen(special(o, s)), 1);
    int want = o->vocab_size - 256 - n_specials(o);
    if (rc == LS_OK && !(t->merge = malloc(sizeof(ls_bpe_merge) * (size_t)(want > 0 ? want : 1))))
        rc = ls_err(LS_ENOMEM, "tokenizer merges");
    for (int f = 0; f < n && rc == LS_OK; f++)
        for (size_t i = 0; i < lens[f] && rc == LS_OK;) {
            size_t e = ls_bpe_piece_end(texts[f], lens[f], i);
            rc = add_piece(&tr, (const unsigned char *)texts[f] + i, e - i);
            i = e;
        }
    for (int32_t i = 0; i < tr.n_w && rc == LS_OK; i++) {
        word *w = &tr.w[i];
        if (!(w->sym = malloc(sizeof(int32_t) * (size_t)(w->n ? w->n : 1)))) rc = ls_err(LS_ENOMEM, "tokenizer words");
        for (int32_t k = 0; rc == LS_OK && k < w->n; k++) w->sym[k] = tr.w_bytes[i][k];
        if (rc == LS_OK) rc = count_pairs(&tr, i, +1);
    }
    for (size_t i = 0; i < tr.p_cap && rc == LS_OK; i++)
        if (tr.p[i].used && tr.p[i].count > 0) rc = heap_push(&tr, tr.p[i].count, tr.p[i].key);
    ls_progress bar;
    if (o->progress) ls_progress_start(&bar, "bpe merges", want);
    while (rc == LS_OK && t->n_merge < want && tr.h_n) {
        heap_ent top = heap_pop(&tr);
        pair *p = pair_get(&tr, top.key, 0);
        if (!p || p->count != top.count) { /* stale: its count moved since it was pushed */
            if (p && p->count > 0 && p->count < top.count) rc = heap_push(&tr, p->count, top.key);
            continue;
        }
        if (top.count < min_freq) break;
        int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(uint32_t)top.key, to = t->n_tok;
        size_t la = t->tok[a].len, lb = t->tok[b].len;
        if (la + lb > LS_BPE_MAX_TOKEN) { /* never merge past the token length limit */
            p->count = 0;
            continue;
        }
        uint8_t *cat = malloc(la + lb);
        if (!cat) {
            rc = ls_err(LS_ENOMEM, "tokenizer token");
            break;
        }
        memcpy(cat, t->tok[a].bytes, la);
        memcpy(cat + la, t->tok[b].bytes, lb);
        rc = ls_bpe_set_token(t, to, cat, la + lb, 0);
        free(cat);
        if (rc == LS_OK) {
            t->merge[t->n_merge++] = (ls_bpe_merge){a, b, to};
            rc = apply_merge(&tr, p, to);
        }
        if (o->progress) ls_progress_update(&bar, t->n_merge, "count %lld", (long long)top.count);
    }
    if (o->progress) ls_progress_end(&bar);
    if (rc == LS_OK) rc = ls_bpe_index(t);
    trainer_free(&tr);
    if (rc) {
        ls_bpe_free(t);
        return rc;
    }
    *out = t;
    return LS_OK;
}

int ls_bpe_train_files(const char *const *paths, int n, const ls_bpe_train_opts *o, ls_bpe **out) {
    *out = NULL;
    LS_TRY(check_opts(o)); /* before the inputs are read */
    char **texts = calloc((size_t)(n > 0 ? n : 1), sizeof *texts);
    size_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof *lens);
    int rc = texts && lens ? LS_OK : ls_err(LS_ENOMEM, "tokenizer inputs");
    for (int i = 0; i < n && rc == LS_OK; i++)
        if ((rc = ls_file_read(paths[i], &texts[i], &lens[i]))) ls_err_wrap(rc, "tokenizer training input %s", paths[i]);
    if (rc == LS_OK) rc = ls_bpe_train((const char *const *)texts, lens, n, o, out);
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(lens);
    return rc;
}
