/* test_corpus.c - text corpus loading (split, specials, binary/empty refusal, directory
 * walk) and the batch source (pure function of step and row, disjoint shards per rank). */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/train.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-corpus-XXXXXX";

static void put(const char *name, const void *data, size_t n, char *path, size_t pn) {
    snprintf(path, pn, "%s/%s", dir, name);
    CHECK(ls_file_write_atomic(path, data, n) == LS_OK);
}

/* Deterministic pseudo-English text of about n bytes. */
static char *make_text(size_t n, uint64_t seed) {
    static const char *words[] = {"the",    "model", "learns", "to",   "predict", "next",    "byte",
                                  "of",     "text",  "and",    "a",    "license", "grants",  "you",
                                  "rights", "under", "terms",  "copy", "free",    "software"};
    char *s = malloc(n + 32);
    ls_rng r;
    ls_rng_seed(&r, seed);
    size_t k = 0;
    while (k < n) {
        const char *w = words[ls_rng_below(&r, 20)];
        k += (size_t)sprintf(s + k, "%s%s", w, ls_rng_below(&r, 12) == 0 ? ".\n" : " ");
    }
    s[n] = '\0';
    return s;
}

static void test_split_and_tokens(void) {
    char *a = make_text(20000, 1), *b = make_text(15000, 2);
    const char *docs[2] = {a, b};
    ls_corpus *c = NULL;
    CHECK(ls_corpus_from_docs(&c, "mem", docs, NULL, 2, NULL) == LS_OK);
    if (!c) return;
    size_t nt, nh, na;
    const uint16_t *tr = ls_corpus_tokens(c, LS_SPLIT_TRAIN, &nt);
    const uint16_t *ho = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &nh);
    const uint16_t *all = ls_corpus_tokens(c, LS_SPLIT_ALL, &na);
    CHECK_EQ_INT(na, 35000 + 4); /* BOS + bytes + EOS per document */
    CHECK_EQ_INT(nt + nh, na);
    CHECK(nh > 0 && (double)nh / (double)na > 0.03 && (double)nh / (double)na < 0.08);
    CHECK(all[0] == LS_TOK_BOS && all[20001] == LS_TOK_EOS && all[20002] == LS_TOK_BOS && all[na - 1] == LS_TOK_EOS);
    CHECK(all[1] == (unsigned char)a[0]);
    CHECK_EQ_INT(ls_corpus_num_docs(c), 2);
    CHECK_EQ_INT(ls_corpus_num_bytes(c, LS_SPLIT_ALL), 35000);
    CHECK_EQ_INT(ls_corpus_num_bytes(c, LS_SPLIT_TRAIN) + ls_corpus_num_bytes(c, LS_SPLIT_HELDOUT), 35000);
    (void)tr;
    (void)ho;

    /* the unigram entropy matches a direct float64 computation */
    double cnt[256] = {0}, tot = 0, h = 0;
    for (size_t i = 0; i < nh; i++)
        if (ho[i] < 256) {
            cnt[ho[i]]++;
            tot++;
        }
    for (int i = 0; i < 256; i++)
        if (cnt[i] > 0) h -= cnt[i] / tot * log2(cnt[i] / tot);
    CHECK_NEAR(ls_corpus_unigram_entropy(c, LS_SPLIT_HELDOUT), h, 1e-12);
    CHECK(h > 3.0 && h < 5.0);

    /* the split is a function of the data alone */
    ls_corpus *c2 = NULL;
    CHECK(ls_corpus_from_docs(&c2, "mem", docs, NULL, 2, NULL) == LS_OK);
    size_t nh2;
    const uint16_t *ho2 = c2 ? ls_corpus_tokens(c2, LS_SPLIT_HELDOUT, &nh2) : NULL;
    CHECK(ho2 && nh2 == nh && memcmp(ho, ho2, nh * 2) == 0);
    CHECK(c2 && ls_corpus_hash(c) == ls_corpus_hash(c2));
    ls_corpus_free(c2);
    ls_corpus_free(c);
    free(a);
    free(b);
}

static void test_files_and_bad_input(void) {
    char p[512], sub[512], bin[512], empty[512];
    char *t = make_text(5000, 3);
    snprintf(sub, sizeof sub, "%s/d/e", dir);
    CHECK(ls_mkdirs(sub) == LS_OK);
    put("d/a.txt", t, 5000, p, sizeof p);
    put("d/e/b.txt", t, 100, p, sizeof p);
    put("d/.hidden", "hidden text", 11, p, sizeof p);
    unsigned char blob[300];
    for (int i = 0; i < 300; i++) blob[i] = (unsigned char)(i * 13);
    put("d/e/blob.bin", blob, sizeof blob, bin, sizeof bin);
    char d[512];
    snprintf(d, sizeof d, "%s/d", dir);
    snprintf(p, sizeof p, "%s/d/a.txt", dir);
    char link[512];
    snprintf(link, sizeof link, "%s/d/link.txt", dir);
    CHECK(symlink(p, link) == 0); /* skipped: would duplicate a.txt */

    const char *paths[1] = {d};
    ls_corpus *c = NULL;
    CHECK(ls_corpus_load(&c, paths, 1, NULL) == LS_OK);
    if (c) {
        CHECK_EQ_INT(ls_corpus_num_docs(c), 2); /* a.txt, e/b.txt: no dot-file, link or binary */
        CHECK_EQ_INT(ls_corpus_num_bytes(c, LS_SPLIT_ALL), 5100);
        ls_corpus_free(c);
    }
    /* max_bytes stops reading */
    ls_corpus_opts o = ls_corpus_defaults();
    o.max_bytes = 1000;
    CHECK(ls_corpus_load(&c, paths, 1, &o) == LS_OK);
    if (c) {
        CHECK_EQ_INT(ls_corpus_num_bytes(c, LS_SPLIT_ALL), 1000);
        ls_corpus_free(c);
    }

    /* binary named explicitly: refused, naming the file */
    paths[0] = bin;
    c = NULL;
    CHECK(ls_corpus_load(&c, paths, 1, NULL) == LS_EFORMAT && c == NULL);
    CHECK(strstr(ls_errmsg(), "blob.bin") && strstr(ls_errmsg(), "binary"));
    /* a NUL byte alone makes a file binary */
    char nul[512];
    put("nul.txt", "text\0text", 9, nul, sizeof nul);
    paths[0] = nul;
    CHECK(ls_corpus_load(&c, paths, 1, NULL) == LS_EFORMAT);
    /* empty file, empty directory, directory with only binary files, missing path */
    put("empty.txt", "", 0, empty, sizeof empty);
    paths[0] = empty;
    CHECK(ls_corpus_load(&c, paths, 1, NULL) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "no data"));
    char ed[512];
    snprintf(ed, sizeof ed, "%s/emptydir", dir);
    CHECK(ls_mkdirs(ed) == LS_OK);
    paths[0] = ed;
    CHECK(ls_corpus_load(&c, paths, 1, NULL) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "emptydir") && strstr(ls_errmsg(), "no text files"));
    paths[0] = "/nonexistent/corpus";
    CHECK(ls_corpus_load(&c, paths, 1, NULL) == LS_ENOTFOUND);
    CHECK(strstr(ls_errmsg(), "/nonexistent/corpus"));
    CHECK(ls_corpus_load(&c, paths, 0, NULL) == LS_EINVAL);
    o = ls_corpus_defaults();
    o.heldout_frac = 0.9;
    paths[0] = d;
    CHECK(ls_corpus_load(&c, paths, 1, &o) == LS_EINVAL);
    free(t);
}

static void test_batch_source(void) {
    char *a = make_text(40000, 4);
    const char *docs[1] = {a};
    ls_corpus *c = NULL;
    CHECK(ls_corpus_from_docs(&c, "mem", docs, NULL, 1, NULL) == LS_OK);
    if (!c) return;
    size_t n;
    const uint16_t *tr = ls_corpus_tokens(c, LS_SPLIT_TRAIN, &n);
    ls_train_config tc = ls_train_defaults();
    tc.batch = 8;
    tc.seq = 32;
    tc.seed = 11;
    ls_batch_source *s1 = NULL, *s4 = NULL;
    ls_train_config t1 = tc, t4 = tc;
    CHECK(ls_batch_source_corpus(&s1, c, &t1, 1) == LS_OK);
    CHECK(ls_batch_source_corpus(&s4, c, &t4, 4) == LS_OK);
    CHECK_EQ_INT(t1.shards, 8);
    CHECK_EQ_INT(t4.shards, 8);
    if (!s1 || !s4) return;
    int T = 32, tok[8 * 32], tgt[8 * 32], tok4[8 * 32], tgt4[8 * 32];
    for (int step = 0; step < 3; step++) {
        CHECK(s1->fill(s1, step, 0, 8, T, tok, tgt) == LS_OK);
        /* four ranks fetching two rows each see exactly the one-rank global batch */
        for (int r = 0; r < 4; r++) CHECK(s4->fill(s4, step, 2 * r, 2, T, tok4 + 2 * r * T, tgt4 + 2 * r * T) == LS_OK);
        CHECK(memcmp(tok, tok4, sizeof tok) == 0 && memcmp(tgt, tgt4, sizeof tgt) == 0);
        for (int j = 0; j < 8; j++) {
            /* targets are the next tokens; row j lies inside shard j (8 shards for 8 rows) */
            const int *row = tok + j * T;
            CHECK(tgt[j * T] == row[1] && tgt[j * T + T - 2] == row[T - 1]);
            size_t lo = n * (size_t)j / 8, hi = n * (size_t)(j + 1) / 8;
            int found = 0;
            for (size_t off = lo; off + (size_t)T < hi && !found; off++) {
                int eq = 1;
                for (int i = 0; i < T && eq; i++) eq = tr[off + (size_t)i] == (uint16_t)row[i];
                found = eq && tr[off + (size_t)T] == (uint16_t)tgt[j * T + T - 1];
            }
            CHECK_MSG(found, "step %d row %d not inside its shard", step, j);
        }
    }
    /* another step gives another batch; the same step the same batch */
    int again[8 * 32], dummy[8 * 32];
    CHECK(s1->fill(s1, 1, 0, 8, T, again, dummy) == LS_OK);
    CHECK(memcmp(again, tok, sizeof tok) != 0);
    CHECK(s1->fill(s1, 2, 0, 8, T, again, dummy) == LS_OK);
    CHECK(memcmp(again, tok, sizeof tok) == 0);
    CHECK(s1->fill(s1, 2, 6, 4, T, again, dummy) == LS_EINVAL); /* rows beyond the batch */
    ls_batch_source_free(s1);
    ls_batch_source_free(s4);

    /* windows as long as the shortest shard allows: there a row's only window is the whole
     * shard (its last target the shard's last token), in the others one of two */
    size_t shortest = n;
    for (int j = 0; j < 8; j++) {
        size_t len = n * (size_t)(j + 1) / 8 - n * (size_t)j / 8;
        shortest = len < shortest ? len : shortest;
    }
    ls_train_config tw = tc;
    tw.seq = (int)shortest - 1;
    tw.shards = 8;
    ls_batch_source *sw = NULL;
    CHECK(ls_batch_source_corpus(&sw, c, &tw, 1) == LS_OK);
    int *wtok = malloc(sizeof(int) * 8 * shortest), *wtgt = malloc(sizeof(int) * 8 * shortest), outside = 0;
    for (int step = 0; sw && step < 4; step++) {
        CHECK(sw->fill(sw, step, 0, 8, tw.seq, wtok, wtgt) == LS_OK);
        for (int j = 0; j < 8; j++) {
            size_t lo = n * (size_t)j / 8, hi = n * (size_t)(j + 1) / 8, T2 = (size_t)tw.seq;
            int found = 0;
            for (size_t off = lo; off + T2 < hi && !found; off++) {
                found = tr[off + T2] == (uint16_t)wtgt[(size_t)j * T2 + T2 - 1];
                for (size_t i = 0; i < T2 && found; i++) found = tr[off + i] == (uint16_t)wtok[(size_t)j * T2 + i];
            }
            outside += !found;
        }
    }
    CHECK_MSG(outside == 0, "%d rows of whole-shard windows reach past their shard", outside);
    free(wtok), free(wtgt);
    ls_batch_source_free(sw);

    /* ranks that do not divide the shards, too little data, more ranks than shards */
    ls_batch_source *s = NULL;
    ls_train_config bad = tc;
    bad.shards = 8;
    CHECK(ls_batch_source_corpus(&s, c, &bad, 3) == LS_EINVAL);
    const char *tinydoc[1] = {"just a few bytes of text, far fewer than a window needs"};
    ls_corpus *small = NULL;
    CHECK(ls_corpus_from_docs(&small, "mem", tinydoc, NULL, 1, NULL) == LS_OK);
    bad = tc;
    bad.seq = 64;
    CHECK(small && ls_batch_source_corpus(&s, small, &bad, 1) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "too little training data"));
    bad = tc;
    bad.seq = 20; /* 2 windows fit */
    CHECK(small && ls_batch_source_corpus(&s, small, &bad, 4) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "more ranks (4) than data shards"));
    ls_corpus_free(small);
    ls_corpus_free(c);
    free(a);
}

static int split_parses(const char *s) {
    ls_split sp;
    return ls_split_parse(s, &sp) == LS_OK;
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    test_choice_list(LS_SPLITS, 3, split_parses);
    RUN(test_split_and_tokens);
    RUN(test_files_and_bad_input);
    RUN(test_batch_source);
    return TEST_RESULT_RMTREE(dir);
}
