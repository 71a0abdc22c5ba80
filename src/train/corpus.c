/* corpus.c - text files as byte tokens with a deterministic held-out split, and the
 * sharded, seeded batch source that training reads from. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llmsys/train.h"

struct ls_corpus {
    uint16_t *tok[3]; /* train, held-out, all */
    size_t ntok[3];
    size_t nbytes[3];
    double entropy[3];
    int ndocs;
    uint64_t hash;
};

ls_corpus_opts ls_corpus_defaults(void) {
    ls_corpus_opts o = {0.05, (size_t)256 << 20};
    return o;
}

/* ---------------------------------------------------------------- building */

typedef struct {
    uint16_t *t;
    size_t n, cap;
    size_t bytes; /* text bytes so far */
    int ndocs;
    size_t max_bytes;
    const ls_bpe *tok; /* NULL: byte tokens */
} builder;

/* An empty builder under o's byte cap and tokenizer (corpora store 16-bit token ids). */
static int builder_init(builder *b, const ls_corpus_opts *o) {
    *b = (builder){0};
    b->max_bytes = o->max_bytes ? o->max_bytes : ls_corpus_defaults().max_bytes;
    b->tok = o->tokenizer;
    if (b->tok && ls_bpe_vocab_size(b->tok) > 65536)
        return ls_err(LS_EINVAL, "tokenizer of %d tokens: corpora hold at most 65536", ls_bpe_vocab_size(b->tok));
    return LS_OK;
}

static int builder_reserve(builder *b, size_t extra) {
    if (b->n + extra <= b->cap) return LS_OK;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + extra) cap *= 2;
    uint16_t *nt = realloc(b->t, cap * sizeof *nt);
    if (!nt) return ls_err(LS_ENOMEM, "out of memory for %zu tokens", cap);
    b->t = nt;
    b->cap = cap;
    return LS_OK;
}

/* Appends one document as BOS <bytes> EOS; stops at max_bytes. */
static int builder_add(builder *b, const unsigned char *d, size_t len) {
    if (b->bytes >= b->max_bytes) return LS_OK;
    if (len > b->max_bytes - b->bytes) len = b->max_bytes - b->bytes;
    if (len == 0) return LS_OK;
    int32_t *ids = NULL;
    size_t n = len;
    if (b->tok) LS_TRY(ls_bpe_encode_ex(b->tok, (const char *)d, len, LS_BPE_ORDINARY, &ids, &n));
    int rc = builder_reserve(b, n + 2);
    if (rc) {
        free(ids);
        return rc;
    }
    b->t[b->n++] = LS_TOK_BOS;
    for (size_t i = 0; i < n; i++) b->t[b->n++] = ids ? (uint16_t)ids[i] : d[i];
    b->t[b->n++] = LS_TOK_EOS;
    free(ids);
    b->bytes += len;
    b->ndocs++;
    return LS_OK;
}

static int add_file(builder *b, const char *path, int explicit_path, int *added) {
    char *data;
    size_t len;
    LS_TRY(ls_file_read(path, &data, &len));
    int rc = LS_OK;
    if (ls_is_binary(data, len)) { /* core.h: the rule of every text input */
        if (explicit_path)
            rc = ls_err(LS_EFORMAT, "%s: binary data (NUL or control bytes), expected text", path);
        else
            LS_DEBUG("%s: skipped (binary)", path);
    } else {
        rc = builder_add(b, (const unsigned char *)data, len);
        if (rc == LS_OK && len > 0) (*added)++;
    }
    free(data);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Recursive walk in sorted order. Symlinks and dot-files inside directories are skipped
 * (Debian's license directory links GPL -> GPL-3: following would duplicate texts
 * across the train/held-out split). */
static int add_dir(builder *b, const char *dir, int depth, int *added) {
    if (depth > 32) return ls_err(LS_EINVAL, "%s: directories nested too deep", dir);
    DIR *d = opendir(dir);
    if (!d) return ls_err(ls_file_input_status(errno), "%s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = LS_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                rc = ls_err(LS_ENOMEM, "out of memory");
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == LS_OK && n > 1) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; rc == LS_OK && i < n && b->bytes < b->max_bytes; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *p = malloc(len);
        if (!p) {
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        snprintf(p, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (lstat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                rc = add_dir(b, p, depth + 1, added);
            else if (S_ISREG(st.st_mode)) {
                rc = add_file(b, p, 0, added);
                /* an unreadable file inside a tree is skipped, not fatal */
                if (rc == LS_EIO || rc == LS_ENOTFOUND) {
                    LS_DEBUG("%s", ls_errmsg());
                    rc = LS_OK;
                }
            }
        }
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static double entropy_bits(const size_t *count, size_t total) {
    if (!total) return 0;
    double h = 0;
    for (int i = 0; i < 256; i++)
        if (count[i]) {
            double p = (double)count[i] / (double)total;
            h -= p * log2(p);
        }
    return h;
}

/* Splits b's stream into blocks; every k-th block (offset k/2) is held out. The block
 * size grows with the corpus (about 200 blocks, 64..8192 tokens) so even small inputs
 * get a held-out part. */
static int corpus_finish(builder *b, const char *what, const ls_corpus_opts *o, ls_corpus **out) {
    if (b->bytes == 0) {
        free(b->t);
        return ls_err(LS_EINVAL, "%s: no data (every file is empty)", what);
    }
    double frac = o->heldout_frac;
    if (!(frac > 0 && frac <= 0.5)) {
        free(b->t);
        return ls_err(LS_EINVAL, "held-out fraction must be in (0, 0.5], got %g", frac);
    }
    ls_corpus *c = calloc(1, sizeof *c);
    if (!c) {
        free(b->t);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    c->tok[LS_SPLIT_ALL] = b->t;
    c->ntok[LS_SPLIT_ALL] = b->n;
    c->ndocs = b->ndocs;
    size_t bs = b->n / 200;
    if (bs < 64) bs = 64;
    if (bs > 8192) bs = 8192;
    size_t k = (size_t)lround(1.0 / frac);
    if (k < 2) k = 2;
    c->tok[0] = malloc(b->n * sizeof(uint16_t));
    c->tok[1] = malloc(b->n * sizeof(uint16_t));
    if (!c->tok[0] || !c->tok[1]) {
        ls_corpus_free(c);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    size_t count[3][256] = {{0}};
    for (size_t blk = 0, i = 0; i < b->n; blk++, i += bs) {
        size_t len = b->n - i < bs ? b->n - i : bs;
        int s = blk % k == k / 2 ? LS_SPLIT_HELDOUT : LS_SPLIT_TRAIN;
        memcpy(c->tok[s] + c->ntok[s], b->t + i, len * sizeof(uint16_t));
        c->ntok[s] += len;
        for (size_t j = i; j < i + len; j++) {
            size_t nb = ls_text_token_bytes(b->tok, b->t[j]);
            const uint8_t *tb = b->tok ? ls_bpe_token(b->tok, b->t[j], NULL) : NULL;
            for (size_t q = 0; q < nb; q++) {
                uint8_t byte = tb ? tb[q] : (uint8_t)b->t[j];
                count[s][byte]++;
                count[LS_SPLIT_ALL][byte]++;
            }
            c->nbytes[s] += nb;
        }
    }
    c->nbytes[LS_SPLIT_ALL] = c->nbytes[0] + c->nbytes[1];
    for (int s = 0; s < 3; s++) c->entropy[s] = entropy_bits(count[s], c->nbytes[s]);
    c->hash = ls_hash64(b->t, b->n * sizeof(uint16_t));
    *out = c;
    return LS_OK;
}

int ls_corpus_load(ls_corpus **out, const char *const *paths, int n, const ls_corpus_opts *o) {
    ls_corpus_opts def = ls_corpus_defaults();
    if (!o) o = &def;
    if (n <= 0) return ls_err(LS_EINVAL, "no data paths given");
    builder b;
    LS_TRY(builder_init(&b, o));
    for (int i = 0; i < n; i++) {
        int added = 0, rc;
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            rc = ls_err(ls_file_input_status(errno), "%s: %s", paths[i], strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = add_dir(&b, paths[i], 0, &added);
            if (rc == LS_OK && added == 0 && b.bytes < b.max_bytes)
                rc = ls_err(LS_EINVAL, "%s: no text files in this directory", paths[i]);
        } else {
            rc = add_file(&b, paths[i], 1, &added);
        }
        if (rc < 0) {
            free(b.t);
            return rc;
        }
    }
    return corpus_finish(&b, n == 1 ? paths[0] : "data", o, out);
}

int ls_corpus_from_docs(ls_corpus **out, const char *what, const char *const *docs, const size_t *lens, int n,
                        const ls_corpus_opts *o) {
    ls_corpus_opts def = ls_corpus_defaults();
    if (!o) o = &def;
    builder b;
    LS_TRY(builder_init(&b, o));
    for (int i = 0; i < n; i++) {
        size_t len = lens ? lens[i] : strlen(docs[i]);
        int rc = LS_OK;
        if (ls_is_binary(docs[i], len))
            rc = ls_err(LS_EFORMAT, "%s: document %d is binary data, expected text", what, i);
        if (rc == LS_OK) rc = builder_add(&b, (const unsigned char *)docs[i], len);
        if (rc < 0) {
            free(b.t);
            return rc;
        }
    }
    return corpus_finish(&b, what, o, out);
}

void ls_corpus_free(ls_corpus *c) {
    if (!c) return;
    for (int s = 0; s < 3; s++) free(c->tok[s]);
    free(c);
}

const uint16_t *ls_corpus_tokens(const ls_corpus *c, ls_split s, size_t *n) {
    *n = c->ntok[s];
    return c->tok[s];
}
int ls_corpus_num_docs(const ls_corpus *c) { return c->ndocs; }
size_t ls_corpus_num_bytes(const ls_corpus *c, ls_split s) { return c->nbytes[s]; }
double ls_corpus_unigram_entropy(const ls_corpus *c, ls_split s) { return c->entropy[s]; }
uint64_t ls_corpus_hash(const ls_corpus *c) { return c->hash; }

/* ---------------------------------------------------------------- batch source */

typedef struct {
    const uint16_t *tok;
    size_t n;
    int shards, global, T;
    ls_rng base;
} corpus_src;

static int corpus_fill(ls_batch_source *s, int64_t step, int row0, int rows, int T, int *tokens, int *targets) {
    corpus_src *c = s->ctx;
    if (T != c->T) return ls_err(LS_EINVAL, "batch source built for seq %d, asked for %d", c->T, T);
    if (row0 < 0 || rows < 0 || row0 + rows > c->global)
        return ls_err(LS_EINVAL, "rows [%d, %d) outside the global batch of %d", row0, row0 + rows, c->global);
    for (int r = 0; r < rows; r++) {
        int64_t j = row0 + r;
        int shard = (int)(j * c->shards / c->global);
        size_t lo = c->n * (size_t)shard / (size_t)c->shards, hi = c->n * (size_t)(shard + 1) / (size_t)c->shards;
        ls_rng g = ls_rng_split(&c->base, (uint64_t)step * (uint64_t)c->global + (uint64_t)j);
        size_t off = lo + (size_t)ls_rng_below(&g, hi - lo - (size_t)T);
        for (int i = 0; i < T; i++) {
            tokens[r * T + i] = c->tok[off + i];
            targets[r * T + i] = c->tok[off + i + 1];
        }
    }
    return LS_OK;
}

static void corpus_destroy(ls_batch_source *s) { free(s->ctx); }

int ls_batch_source_corpus(ls_batch_source **out, const ls_corpus *c, ls_train_config *tc, int ranks) {
    size_t n;
    const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_TRAIN, &n);
    int T = tc->seq, G = tc->batch;
    if (ranks < 1 || T < 1 || G < 1) return ls_err(LS_EINVAL, "bad batch source settings");
    size_t windows = n / (size_t)(T + 1);
    if (windows == 0)
        return ls_err(LS_EINVAL, "too little training data: %zu tokens, need at least seq+1 = %d", n, T + 1);
    int S = tc->shards;
    if (S <= 0) {
        S = windows < (size_t)G ? (int)windows : G;
        S -= S % ranks;
    }
    if (S < ranks || (size_t)S > windows)
        return ls_err(LS_EINVAL,
                      "more ranks (%d) than data shards (%d): the training split holds %zu tokens, %zu windows of "
                      "seq+1 = %d; use fewer ranks or more data",
                      ranks, (int)(windows < (size_t)G ? windows : (size_t)G), n, windows, T + 1);
    if (S % ranks != 0) return ls_err(LS_EINVAL, "%d data shards cannot be split evenly over %d ranks", S, ranks);
    ls_batch_source *s;
    LS_TRY(ls_batch_source_new(&s, "corpus", 1, corpus_fill, corpus_destroy, sizeof(corpus_src)));
    corpus_src *cs = s->ctx;
    cs->tok = tok;
    cs->n = n;
    cs->shards = S;
    cs->global = G;
    cs->T = T;
    ls_rng root;
    ls_rng_seed(&root, tc->seed);
    cs->base = ls_rng_split(&root, 0xDA7A); /* data stream, independent of the model-init stream */
    tc->shards = S;
    *out = s;
    return LS_OK;
}

int ls_batch_source_new(ls_batch_source **out, const char *name, int exact,
                        int (*fill)(ls_batch_source *, int64_t, int, int, int, int *, int *),
                        void (*destroy)(ls_batch_source *), size_t ctx_size) {
    ls_batch_source *s = calloc(1, sizeof *s);
    void *ctx = calloc(1, ctx_size ? ctx_size : 1);
    if (!s || !ctx) {
        free(s);
        free(ctx);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    *s = (ls_batch_source){name, exact, fill, destroy, ctx};
    *out = s;
    return LS_OK;
}

void ls_batch_source_free(ls_batch_source *s) {
    if (!s) return;
    if (s->destroy) s->destroy(s);
    free(s);
}

static const char *const split_names[] = {"train", "heldout", "all"};

const char *ls_split_name(ls_split s) { return s >= LS_SPLIT_TRAIN && s <= LS_SPLIT_ALL ? split_names[s] : "?"; }

int ls_split_parse(const char *name, ls_split *out) {
    for (int s = LS_SPLIT_TRAIN; s <= LS_SPLIT_ALL; s++)
        if (!strcmp(name, split_names[s])) {
            *out = (ls_split)s;
            return LS_OK;
        }
    return ls_err(LS_EINVAL, "--split must be heldout, train or all, got '%s'", name);
}

int ls_corpus_load_for(const char *ckpt, const char *const *paths, int n, const ls_corpus_opts *o, ls_corpus **out,
                       ls_bpe **bpe) {
    ls_corpus_opts co = o ? *o : ls_corpus_defaults();
    *out = NULL;
    *bpe = NULL;
    LS_TRY(ls_ckpt_tokenizer_load(ckpt, NULL, bpe));
    co.tokenizer = *bpe;
    int rc = ls_corpus_load(out, paths, n, &co);
    if (rc) ls_bpe_free(*bpe), *bpe = NULL;
    return rc;
}
