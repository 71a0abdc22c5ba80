/* bpe.c - byte-level BPE encode and decode: pieces from the GPT-2 pre-tokenizer, then the
 * lowest-ranked adjacent pair merged (leftmost first) until none applies; lookup tables. */
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "text/internal.h"

static size_t pow2_above(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

int ls_bpe_alloc(ls_bpe **out, int cap) {
    *out = NULL;
    ls_bpe *t = calloc(1, sizeof *t);
    if (!t || !(t->tok = calloc((size_t)(cap > 0 ? cap : 1), sizeof *t->tok))) {
        free(t);
        return ls_err(LS_ENOMEM, "tokenizer: %d tokens", cap);
    }
    t->n_tok = 0;
    *out = t;
    return LS_OK;
}

int ls_bpe_set_token(ls_bpe *t, int id, const void *bytes, size_t len, int special) {
    if (t->tok[id].bytes) return ls_err(LS_EINVAL, "tokenizer: id %d used twice", id);
    if (!(t->tok[id].bytes = malloc(len ? len : 1))) return ls_err(LS_ENOMEM, "tokenizer token");
    if (len) memcpy(t->tok[id].bytes, bytes, len);
    t->tok[id].len = (uint32_t)len;
    t->tok[id].special = (uint8_t)special;
    if (id >= t->n_tok) t->n_tok = id + 1;
    return LS_OK;
}

int ls_bpe_find(const ls_bpe *t, const void *bytes, size_t len) {
    size_t mask = t->id_cap - 1, h = (size_t)ls_hash64(bytes, len) & mask;
    for (;; h = (h + 1) & mask) {
        int32_t id = t->id_slot[h];
        if (id < 0) return -1;
        if (t->tok[id].len == len && !memcmp(t->tok[id].bytes, bytes, len)) return id;
    }
}

static int32_t pair_rank(const ls_bpe *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t mask = t->pair_cap - 1;
    for (size_t h = (size_t)ls_bpe_mix64(key) & mask;; h = (h + 1) & mask) {
        if (t->pair_rank[h] < 0) return -1;
        if (t->pair_key[h] == key) return t->pair_rank[h];
    }
}

static int cmp_special_len(const void *x, const void *y, void *tv) {
    const ls_bpe *t = tv;
    int a = *(const int *)x, b = *(const int *)y;
    return t->tok[a].len != t->tok[b].len ? (t->tok[a].len < t->tok[b].len ? 1 : -1) : (a > b) - (a < b);
}

int ls_bpe_index(ls_bpe *t) {
    free(t->id_slot);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->special_ids);
    t->special_ids = NULL;
    t->n_special = 0;
    t->id_cap = pow2_above((size_t)t->n_tok);
    t->pair_cap = pow2_above((size_t)t->n_merge);
    t->id_slot = malloc(sizeof(int32_t) * t->id_cap);
    t->pair_key = malloc(sizeof(uint64_t) * t->pair_cap);
    t->pair_rank = malloc(sizeof(int32_t) * t->pair_cap);
    t->special_ids = malloc(sizeof(int) * (size_t)(t->n_tok ? t->n_tok : 1));
    if (!t->id_slot || !t->pair_key || !t->pair_rank || !t->special_ids) return ls_err(LS_ENOMEM, "tokenizer index");
    memset(t->id_slot, 0xff, sizeof(int32_t) * t->id_cap);
    memset(t->pair_rank, 0xff, sizeof(int32_t) * t->pair_cap);
    for (int id = 0; id < t->n_tok; id++) {
        const ls_bpe_tok *k = &t->tok[id];
        if (!k->bytes) continue;
        if (k->special) {
            if (!k->len) return ls_err(LS_EINVAL, "tokenizer: added token %d is empty", id);
            t->special_ids[t->n_special++] = id;
            continue; /* specials are matched in text, not looked up as merge results */
        }
        if (ls_bpe_find(t, k->bytes, k->len) >= 0)
            return ls_err(LS_EINVAL, "tokenizer: token %d repeats an earlier token's bytes", id);
        size_t h = (size_t)ls_hash64(k->bytes, k->len) & (t->id_cap - 1);
        while (t->id_slot[h] >= 0) h = (h + 1) & (t->id_cap - 1);
        t->id_slot[h] = id;
    }
    qsort_r(t->special_ids, (size_t)t->n_special, sizeof(int), cmp_special_len, t);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if ((t->byte_id[b] = ls_bpe_find(t, &c, 1)) < 0)
            return ls_err(LS_EINVAL, "tokenizer: byte 0x%02x has no token (byte-level BPE needs all 256)", b);
    }
    for (int r = 0; r < t->n_merge; r++) {
        const ls_bpe_merge *m = &t->merge[r];
        uint64_t key = (uint64_t)(uint32_t)m->a << 32 | (uint32_t)m->b;
        size_t h = (size_t)ls_bpe_mix64(key) & (t->pair_cap - 1);
        while (t->pair_rank[h] >= 0 && t->pair_key[h] != key) h = (h + 1) & (t->pair_cap - 1);
        if (t->pair_rank[h] < 0) t->pair_key[h] = key, t->pair_rank[h] = r; /* a repeated pair keeps its first rank */
    }
    return LS_OK;
}

typedef struct {
    int32_t *v;
    size_t n, cap;
} idbuf;

static int idbuf_push(idbuf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        int32_t *nv = realloc(b->v, nc * sizeof *nv);
        if (!nv) return ls_err(LS_ENOMEM, "tokenizer: %zu ids", nc);
        b->v = nv;
        b->cap = nc;
    }
    b->v[b->n++] = id;
    return LS_OK;
}

/* Encodes one piece: its bytes as byte tokens, then merges in rank order. sym and rank have room
 * for len; rank[i] is the merge rank of (sym[i], sym[i + 1]), kept up to date around each merge. */
static int encode_piece(const ls_bpe *t, const unsigned char *s, size_t len, int32_t *sym, int32_t *rank, idbuf *out) {
    size_t n = len;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[s[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(t, sym[i], sym[i + 1]);
    while (n > 1) {
        int32_t best = INT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] >= 0 && rank[i] < best) best = rank[i], at = i;
        if (best == INT32_MAX) break;
        sym[at] = t->merge[best].to;
        memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof *sym);
        memmove(rank + at + 1, rank + at + 2, (n - at - 2 > 0 ? n - at - 2 : 0) * sizeof *rank);
        n--;
        if (at > 0) rank[at - 1] = pair_rank(t, sym[at - 1], sym[at]);
        if (at + 1 < n) rank[at] = pair_rank(t, sym[at], sym[at + 1]);
    }
    for (size_t i = 0; i < n; i++)
        if (idbuf_push(out, sym[i])) return LS_ENOMEM;
    return LS_OK;
}

/* Pieces already encoded in this call: piece bytes (in the text) -> ids (in the output). */
typedef struct {
    uint64_t hash;
    size_t at, len; /* the piece's first occurrence in the text */
    size_t id0, nid; /* its ids in the output */
} piece_memo;

#define MEMO_SLOTS 65536 /* power of two; a full table just stops remembering */
#define MEMO_MAX_PIECE 64

typedef struct {
    int32_t *sym, *rank;
    size_t cap;
    piece_memo *memo;
    size_t n_memo;
} scratch;

/* Encodes text without added tokens; text is the whole input (memo entries point into it). */
static int encode_plain(const ls_bpe *t, const char *text, size_t from, size_t to, scratch *w, idbuf *out) {
    for (size_t i = from; i < to;) {
        size_t e = from + ls_bpe_piece_end(text + from, to - from, i - from), len = e - i;
        piece_memo *slot = NULL;
        uint64_t h = 0;
        if (w->memo && len >= 2 && len <= MEMO_MAX_PIECE) {
            h = ls_hash64(text + i, len);
            for (size_t k = (size_t)h & (MEMO_SLOTS - 1);; k = (k + 1) & (MEMO_SLOTS - 1)) {
                piece_memo *m = &w->memo[k];
                if (!m->len) {
                    slot = 2 * w->n_memo < MEMO_SLOTS ? m : NULL;
                    break;
                }
                if (m->hash == h && m->len == len && !memcmp(text + m->at, text + i, len)) {
                    for (size_t q = 0; q < m->nid; q++)
                        if (idbuf_push(out, out->v[m->id0 + q])) return LS_ENOMEM;
                    goto next;
                }
            }
        }
        if (len > w->cap) {
            int32_t *ns = realloc(w->sym, len * sizeof *ns), *nr = ns ? realloc(w->rank, len * sizeof *nr) : NULL;
            if (ns) w->sym = ns;
            if (!nr) return ls_err(LS_ENOMEM, "tokenizer: piece of %zu bytes", len);
            w->rank = nr;
            w->cap = len;
        }
        size_t id0 = out->n;
        int rc = encode_piece(t, (const unsigned char *)text + i, len, w->sym, w->rank, out);
        if (rc) return rc;
        if (slot) {
            *slot = (piece_memo){h, i, len, id0, out->n - id0};
            w->n_memo++;
        }
    next:
        i = e;
    }
    return LS_OK;
}

/* The first added token in text[from, len): its position, or len. */
static size_t next_special(const ls_bpe *t, const char *text, size_t from, size_t len, int *id) {
    for (size_t i = from; i < len; i++)
        for (int k = 0; k < t->n_special; k++) {
            const ls_bpe_tok *s = &t->tok[t->special_ids[k]];
            if (s->len <= len - i && (unsigned char)text[i] == s->bytes[0] && !memcmp(text + i, s->bytes, s->len)) {
                *id = t->special_ids[k];
                return i;
            }
        }
    return len;
}

int ls_bpe_encode(const ls_bpe *t, const char *text, size_t len, int32_t **ids, size_t *n) {
    return ls_bpe_encode_ex(t, text, len, 0, ids, n);
}

int ls_bpe_encode_ex(const ls_bpe *t, const char *text, size_t len, int flags, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    idbuf out = {0};
    scratch w = {0};
    char *prefixed = NULL;
    int rc = LS_OK;
    if (t->add_prefix_space && len && text[0] != ' ') {
        if (!(prefixed = malloc(len + 1))) return ls_err(LS_ENOMEM, "tokenizer: %zu bytes", len);
        prefixed[0] = ' ';
        memcpy(prefixed + 1, text, len);
        text = prefixed;
        len++;
    }
    if (len > 4096) w.memo = calloc(MEMO_SLOTS, sizeof *w.memo); /* optional: encodes without it */
    for (size_t i = 0; i < len && rc == LS_OK;) {
        int sid = -1;
        size_t at = t->n_special && !(flags & LS_BPE_ORDINARY) ? next_special(t, text, i, len, &sid) : len;
        rc = encode_plain(t, text, i, at, &w, &out);
        if (rc == LS_OK && at < len) rc = idbuf_push(&out, sid);
        i = at < len ? at + t->tok[sid].len : len;
    }
    free(w.sym);
    free(w.rank);
    free(w.memo);
    free(prefixed);
    if (rc) {
        free(out.v);
        return rc;
    }
    *ids = out.v ? out.v : malloc(sizeof(int32_t));
    *n = out.n;
    return *ids ? LS_OK : ls_err(LS_ENOMEM, "tokenizer");
}

int ls_bpe_decode(const ls_bpe *t, const int32_t *ids, size_t n, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_tok || !t->tok[ids[i]].bytes)
            return ls_err(LS_EINVAL, "tokenizer: id %d at position %zu is not in the vocabulary (size %d)", ids[i], i,
                          t->n_tok);
        total += t->tok[ids[i]].len;
    }
    char *s = malloc(total + 1);
    if (!s) return ls_err(LS_ENOMEM, "tokenizer: %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + o, t->tok[ids[i]].bytes, t->tok[ids[i]].len);
        o += t->tok[ids[i]].len;
    }
    s[o] = '\0';
    *text = s;
    *len = o;
    return LS_OK;
}

int ls_bpe_vocab_size(const ls_bpe *t) { return t->n_tok; }
int ls_bpe_n_merges(const ls_bpe *t) { return t->n_merge; }

const uint8_t *ls_bpe_token(const ls_bpe *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_tok || !t->tok[id].bytes) return NULL;
    if (len) *len = t->tok[id].len;
    return t->tok[id].bytes;
}

void ls_bpe_free(ls_bpe *t) {
    if (!t) return;
    for (int i = 0; i < t->n_tok; i++) free(t->tok[i].bytes);
    free(t->tok);
    free(t->merge), free(t->pair_key), free(t->pair_rank);
    free(t->id_slot);
    free(t->special_ids);
    free(t);
}

_Static_assert(sizeof(int) == sizeof(int32_t), "token ids: int is 32 bits");

int ls_text_encode(const ls_bpe *t, const char *text, size_t len, int **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    if (!t) {
        int *v = malloc(sizeof(int) * (len ? len : 1));
        if (!v) return ls_err(LS_ENOMEM, "tokens of %zu bytes", len);
        for (size_t i = 0; i < len; i++) v[i] = (unsigned char)text[i];
        *ids = v;
        *n = len;
        return LS_OK;
    }
    int32_t *v;
    LS_TRY(ls_bpe_encode_ex(t, text, len, LS_BPE_ORDINARY, &v, n));
    *ids = (int *)v;
    return LS_OK;
}

size_t ls_text_token_bytes(const ls_bpe *t, int id) {
    if (!t) return id >= 0 && id < 256;
    return id >= 0 && id < t->n_tok && t->tok[id].bytes && !t->tok[id].special ? t->tok[id].len : 0;
}

int ls_text_decode(const ls_bpe *t, const int *ids, size_t n, char **text, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += ls_text_token_bytes(t, ids[i]);
    char *s = malloc(total + 1);
    if (!s) return ls_err(LS_ENOMEM, "text of %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = ls_text_token_bytes(t, ids[i]);
        if (!k) continue;
        if (t) memcpy(s + o, t->tok[ids[i]].bytes, k);
        else s[o] = (char)ids[i];
        o += k;
    }
    s[o] = '\0';
    *text = s;
    *len = o;
    return LS_OK;
}
