/* test_bpe.c - the byte-level BPE tokenizer: pre-tokenizer pieces written out by hand, a training
 * run computed by hand, encoding against an independent reference (every merge applied in rank
 * order to the whole piece), exact round trips of arbitrary bytes, the tokenizer.json codec and
 * refusals of malformed files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "test.h"
#include "llmsys/tokenizer.h"
#include "text/internal.h"


/* Pieces of text joined by '|' must equal want. */
static void check_pieces(const char *text, const char *want) {
    char got[512] = "";
    size_t n = strlen(text), o = 0;
    for (size_t i = 0; i < n;) {
        size_t e = ls_bpe_piece_end(text, n, i);
        if (e <= i || e > n) {
            CHECK_MSG(0, "piece end %zu at %zu", e, i);
            return;
        }
        if (i) got[o++] = '|';
        memcpy(got + o, text + i, e - i);
        o += e - i;
        got[o] = '\0';
        i = e;
    }
    CHECK_MSG(!strcmp(got, want), "pieces of \"%s\": got \"%s\", want \"%s\"", text, got, want);
}

static void test_pieces(void) {
    check_pieces("Hello world", "Hello| world");
    check_pieces("it's we're I'm", "it|'s| we|'re| I|'m");
    check_pieces("a  b", "a| | b");              /* the last space of a run joins the word */
    check_pieces("a   \n\nb", "a|   \n|\n|b");     /* run minus its last character; " ?" is a space only */
    check_pieces("x  ", "x|  ");                  /* at the end the whole run */
    check_pieces("abc123 45!?", "abc|123| 45|!?");
    check_pieces(" !!  ??", " !!| | ??");
    check_pieces("''s", "''|s");
    check_pieces("caf\xc3\xa9 na\xc3\xafve", "caf\xc3\xa9| na\xc3\xafve");        /* é, ï are letters */
    check_pieces("\xce\xb1\xce\xb2\xd9\xa3x", "\xce\xb1\xce\xb2|\xd9\xa3|x");     /* αβ ٣ x */
    check_pieces("a\xe3\x80\x80" "b", "a|\xe3\x80\x80|b");                       /* U+3000 is whitespace */
    check_pieces("\xff\xfe" "ab\x80", "\xff\xfe|ab|\x80");                         /* invalid bytes: other */
    check_pieces("a\xc1\x81!", "a|\xc1\x81!"); /* overlong "A": two invalid bytes (other), not a letter */
    check_pieces("x\xe2\x80\x8b\xe2\x80\x8b!", "x|\xe2\x80\x8b\xe2\x80\x8b!"); /* U+200B is not White_Space */
}

/* Reference encoder: each merge, in rank order, applied left to right over the whole piece. */
static size_t reference_piece(const ls_bpe *t, const unsigned char *s, size_t n, int32_t *sym) {
    for (size_t i = 0; i < n; i++) sym[i] = s[i];
    for (int r = 0; r < t->n_merge; r++) {
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            if (i + 1 < n && sym[i] == t->merge[r].a && sym[i + 1] == t->merge[r].b) sym[o++] = t->merge[r].to, i++;
            else sym[o++] = sym[i];
        }
        n = o;
    }
    return n;
}

static void check_against_reference(const ls_bpe *t, const char *text, size_t len) {
    int32_t *ids, *want = malloc(sizeof(int32_t) * (len + 1)), *sym = malloc(sizeof(int32_t) * (len + 1));
    size_t n, nw = 0;
    CHECK_MSG(ls_bpe_encode(t, text, len, &ids, &n) == LS_OK, "encode");
    for (size_t i = 0; i < len;) {
        size_t e = ls_bpe_piece_end(text, len, i);
        size_t k = reference_piece(t, (const unsigned char *)text + i, e - i, sym);
        memcpy(want + nw, sym, k * sizeof *sym);
        nw += k;
        i = e;
    }
    CHECK_MSG(n == nw && !memcmp(ids, want, n * sizeof *ids), "encode vs reference: %zu vs %zu ids", n, nw);
    char *back;
    size_t blen;
    CHECK_MSG(ls_bpe_decode(t, ids, n, &back, &blen) == LS_OK && blen == len && !memcmp(back, text, len),
          "round trip of %zu bytes", len);
    free(back);
    free(ids);
    free(want);
    free(sym);
}

static void test_train_by_hand(void) {
    /* one piece "aaabdaaabac": pairs aa 4, ab 2, ... -> merge "aa"; then (aa,a) 2 and (a,b) 2 tie and
     * the smaller ids (a,b) win -> "ab"; then (aa,ab) 2 -> "aaab" */
    const char *text = "aaabdaaabac";
    size_t len = strlen(text);
    ls_bpe_train_opts o = {256 + 3, 2, NULL, 0, 0};
    ls_bpe *t;
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &o, &t) == LS_OK, "train");
    size_t n;
    const uint8_t *b;
    CHECK_MSG(ls_bpe_n_merges(t) == 3, "3 merges, got %d", ls_bpe_n_merges(t));
    CHECK_MSG((b = ls_bpe_token(t, 256, &n)) && n == 2 && !memcmp(b, "aa", 2), "token 256 = aa");
    CHECK_MSG((b = ls_bpe_token(t, 257, &n)) && n == 2 && !memcmp(b, "ab", 2), "token 257 = ab");
    CHECK_MSG((b = ls_bpe_token(t, 258, &n)) && n == 4 && !memcmp(b, "aaab", 4), "token 258 = aaab");
    int32_t *ids;
    CHECK_MSG(ls_bpe_encode(t, text, len, &ids, &n) == LS_OK, "encode");
    int32_t want[] = {258, 'd', 258, 'a', 'c'};
    CHECK_MSG(n == 5 && !memcmp(ids, want, sizeof want), "encode by hand");
    free(ids);
    /* min_freq stops merging: nothing occurs 5 times */
    ls_bpe *t2;
    ls_bpe_train_opts o2 = {300, 5, NULL, 0, 0};
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &o2, &t2) == LS_OK && ls_bpe_n_merges(t2) == 0, "min_freq 5: no merge");
    ls_bpe_free(t2);
    /* the model's specials first (ids 256-258), the caller's after them, the merges after those */
    const char *added[] = {"<|x|>"};
    ls_bpe_train_opts o3 = {256 + 3 + 1 + 3, 2, added, 1, 0, 1};
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &o3, &t2) == LS_OK && ls_bpe_n_merges(t2) == 3, "model specials: train");
    CHECK_MSG((b = ls_bpe_token(t2, 256, &n)) && n == 7 && !memcmp(b, "<|bos|>", 7), "model specials: 256 = <|bos|>");
    CHECK_MSG((b = ls_bpe_token(t2, 258, &n)) && n == 7 && !memcmp(b, "<|pad|>", 7), "model specials: 258 = <|pad|>");
    CHECK_MSG((b = ls_bpe_token(t2, 259, &n)) && n == 5 && !memcmp(b, "<|x|>", 5), "model specials: 259 = <|x|>");
    CHECK_MSG((b = ls_bpe_token(t2, 260, &n)) && n == 2 && !memcmp(b, "aa", 2), "model specials: 260 = aa");
    ls_bpe_free(t2);
    /* the model's specials count in the size, and the caller may not give one of them again */
    ls_bpe_train_opts small = {256 + 3, 2, added, 1, 0, 1}, twice = {300, 2, (const char *[]){"<|eos|>"}, 1, 0, 1};
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &small, &t2) == LS_EINVAL && !t2, "model specials: 259 tokens refused");
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &twice, &t2) == LS_EINVAL && !t2, "model specials: <|eos|> twice refused");
    ls_bpe_train_opts negative = {300, -1, NULL, 0, 0, 0}; /* 0 is the default (2); below it is no count */
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &negative, &t2) == LS_EINVAL && !t2, "min_freq -1 refused");
    ls_bpe_free(t);
}

static void test_corpus(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/text/data/unicode.txt", dir);
    char *uni;
    size_t ulen;
    CHECK_MSG(ls_file_read(path, &uni, &ulen) == LS_OK, "read %s", path);
    /* a synthetic corpus with repeats: words, numbers and the Unicode sample */
    size_t cap = 200000, len = 0;
    char *text = malloc(cap);
    ls_rng r;
    ls_rng_seed(&r, 7);
    static const char *words[] = {"the", " model", " trains", " on", " tokens", ",", " and", " it's", " 42", "\n"};
    while (len + ulen + 64 < cap / 2) len += (size_t)sprintf(text + len, "%s", words[ls_rng_below(&r, 10)]);
    memcpy(text + len, uni, ulen);
    len += ulen;
    const char *specials[] = {"<|endoftext|>", "<pad>"};
    ls_bpe_train_opts o = {400, 2, specials, 2, 0};
    ls_bpe *t;
    const char *texts[] = {text};
    CHECK_MSG(ls_bpe_train(texts, &len, 1, &o, &t) == LS_OK, "train corpus");
    CHECK_MSG(ls_bpe_vocab_size(t) == 400, "vocab %d", ls_bpe_vocab_size(t));
    check_against_reference(t, text, len);
    /* arbitrary bytes, invalid UTF-8 included, round trip exactly */
    char bytes[3000];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (char)ls_rng_below(&r, 256);
    check_against_reference(t, bytes, sizeof bytes);
    /* fewer tokens than bytes on text like the training text */
    int32_t *ids;
    size_t n;
    CHECK_MSG(ls_bpe_encode(t, text, 4000, &ids, &n) == LS_OK && n * 2 < 4000, "compression: %zu tokens", n);
    free(ids);
    /* added tokens are matched literally, the longest first, and decode back */
    const char *s = "a<|endoftext|>b<pad><pad>";
    CHECK_MSG(ls_bpe_encode(t, s, strlen(s), &ids, &n) == LS_OK && n == 5 && ids[0] == 'a' && ids[1] == 256 &&
              ids[2] == 'b' && ids[3] == 257 && ids[4] == 257,
          "specials");
    free(ids);
    CHECK_MSG(ls_bpe_encode_ex(t, s, strlen(s), LS_BPE_ORDINARY, &ids, &n) == LS_OK && n > 5, "ordinary: specials as text");
    for (size_t i = 0; i < n; i++) CHECK_MSG(ids[i] != 256 && ids[i] != 257, "ordinary id %d", ids[i]);
    free(ids);
    /* save, load: same tables, same ids */
    snprintf(path, sizeof path, "/tmp/llmsys-test-bpe-%d.json", (int)getpid());
    ls_bpe *u;
    CHECK_MSG(ls_bpe_save(t, path) == LS_OK && ls_bpe_load(path, &u) == LS_OK, "save/load");
    CHECK_MSG(u->n_tok == t->n_tok && u->n_merge == t->n_merge, "sizes after load");
    for (int i = 0; i < t->n_merge; i++)
        CHECK_MSG(u->merge[i].a == t->merge[i].a && u->merge[i].b == t->merge[i].b && u->merge[i].to == t->merge[i].to,
              "merge %d", i);
    int32_t *ids2;
    size_t n2;
    CHECK_MSG(ls_bpe_encode(t, text, len, &ids, &n) == LS_OK && ls_bpe_encode(u, text, len, &ids2, &n2) == LS_OK &&
              n == n2 && !memcmp(ids, ids2, n * sizeof *ids),
          "same ids after load");
    free(ids);
    free(ids2);
    remove(path);
    ls_bpe_free(u);
    ls_bpe_free(t);
    free(text);
    free(uni);
}

static void expect_refused(const char *json, const char *needle) {
    ls_bpe *t = NULL;
    int rc = ls_bpe_parse(json, strlen(json), &t);
    CHECK_MSG(rc != LS_OK && !t && strstr(ls_errmsg(), needle), "refuse (%s): rc %d", needle, rc);
}

static void test_refusals(void) {
    /* a valid minimal file: the 256 byte tokens come from a trained zero-merge tokenizer */
    expect_refused("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "WordPiece");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Whitespace\"}}",
                   "Whitespace");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":"
                   "\"ByteLevel\"}}",
                   "byte 0x00");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1e12},\"merges\":[]},\"pre_tokenizer\":{\"type\":"
                   "\"ByteLevel\"}}",
                   "not an integer");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xe4\xb8\xad\":0},\"merges\":[]},\"pre_tokenizer\":{"
                   "\"type\":\"ByteLevel\"}}",
                   "not byte-level");
    expect_refused("{\"normalizer\":{\"type\":\"NFC\"},\"model\":{\"type\":\"BPE\"}}", "normalizer");
    expect_refused("[1,2", "invalid JSON");
    /* a merge naming unknown tokens, and one whose result is missing */
    const char *text = "ab ab ab";
    size_t len = strlen(text);
    ls_bpe_train_opts o = {257, 2, NULL, 0, 0};
    ls_bpe *t;
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &o, &t) == LS_OK, "train");
    char path[256];
    snprintf(path, sizeof path, "/tmp/llmsys-test-bpe-r-%d.json", (int)getpid());
    CHECK_MSG(ls_bpe_save(t, path) == LS_OK, "save");
    char *json;
    size_t jl;
    CHECK_MSG(ls_file_read(path, &json, &jl) == LS_OK, "read");
    char *m = strstr(json, "\"merges\"");
    CHECK_MSG(m != NULL, "merges key");
    if (m) {
        char *bad = malloc(jl + 64);
        snprintf(bad, jl + 64, "%.*s\"merges\": [\"q \xc4\x80zz\"]}}", (int)(m - json), json);
        expect_refused(bad, "not in the vocab");
        snprintf(bad, jl + 64, "%.*s\"merges\": [\"b a\"]}}", (int)(m - json), json);
        expect_refused(bad, "makes a token not in the vocab");
        free(bad);
    }
    free(json);
    remove(path);
    ls_bpe_free(t);
    ls_bpe_train_opts small = {100, 2, NULL, 0, 0};
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &small, &t) != LS_OK, "vocab below 256 refused");
    /* an added token given twice would take two ids: refused, by the file trainer before reading */
    const char *twice[] = {"<a>", "<b>", "<a>"};
    ls_bpe_train_opts dup = {300, 2, twice, 3, 0};
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &dup, &t) == LS_EINVAL && t == NULL, "a token added twice refused");
    CHECK_MSG(strstr(ls_errmsg(), "'<a>' is given twice (ids 256 and 258)") != NULL, "message: %s", ls_errmsg());
    const char *none[] = {"/nonexistent/llmsys-bpe-input"};
    CHECK_MSG(ls_bpe_train_files(none, 1, &dup, &t) == LS_EINVAL, "checked before the inputs are read");
    dup.n_specials = 2;
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &dup, &t) == LS_OK, "two different tokens train");
    ls_bpe_free(t);
}

/* Reference trainer: before each merge every adjacent pair of every piece is counted afresh;
 * the most frequent pair wins (ties to the smaller left id, then right id) and is merged left
 * to right in every piece. No heap, no incremental counts. Returns the merges found. */
static int reference_train(const char *text, size_t len, int want, int min_freq, int32_t (*merge)[2]) {
    int32_t *sym = malloc(sizeof(int32_t) * len);
    size_t *start = malloc(sizeof(size_t) * (len + 1)), *n = malloc(sizeof(size_t) * (len + 1)), np = 0;
    for (size_t i = 0; i < len;) { /* pieces as runs of sym; byte tokens first */
        size_t e = ls_bpe_piece_end(text, len, i);
        start[np] = i, n[np++] = e - i;
        for (size_t k = i; k < e; k++) sym[k] = (unsigned char)text[k];
        i = e;
    }
    int V = 256 + want, done = 0;
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)V * V);
    for (; done < want; done++) {
        memset(cnt, 0, sizeof(int64_t) * (size_t)V * V);
        for (size_t p = 0; p < np; p++)
            for (size_t k = 0; k + 1 < n[p]; k++) cnt[(size_t)sym[start[p] + k] * V + sym[start[p] + k + 1]]++;
        int64_t best = 0;
        int ba = -1, bb = -1;
        for (int a = 0; a < V; a++)
            for (int b = 0; b < V; b++)
                if (cnt[(size_t)a * V + b] > best) best = cnt[(size_t)a * V + b], ba = a, bb = b;
        if (best < min_freq) break;
        merge[done][0] = ba, merge[done][1] = bb;
        for (size_t p = 0; p < np; p++) {
            int32_t *w = sym + start[p];
            size_t o = 0;
            for (size_t k = 0; k < n[p]; k++) {
                if (k + 1 < n[p] && w[k] == ba && w[k + 1] == bb)
                    w[o++] = 256 + done, k++;
                else
                    w[o++] = w[k];
            }
            n[p] = o;
        }
    }
    free(cnt), free(sym), free(start), free(n);
    return done;
}

/* Training against the reference on text whose pairs overlap a lot (runs over a three-letter
 * alphabet), so merges keep lowering the counts of pairs already queued. */
static void test_train_reference(void) {
    enum { LEN = 6000, WANT = 120 };
    char *text = malloc(LEN);
    ls_rng r;
    ls_rng_seed(&r, 19);
    size_t len = 0;
    while (len + 12 < LEN) {
        if (len) text[len++] = ' ';
        int w = 2 + (int)ls_rng_below(&r, 7);
        for (int k = 0; k < w; k++) text[len++] = "aab"[ls_rng_below(&r, 3)] + (ls_rng_below(&r, 5) == 0);
    }
    int32_t(*want)[2] = malloc(sizeof *want * WANT);
    int nw = reference_train(text, len, WANT, 2, want);
    ls_bpe_train_opts o = {256 + WANT, 2, NULL, 0, 0};
    ls_bpe *t;
    const char *texts[] = {text};
    CHECK_MSG(ls_bpe_train(texts, &len, 1, &o, &t) == LS_OK, "train");
    CHECK_MSG(nw == WANT && ls_bpe_n_merges(t) == nw, "merges: %d, reference %d", ls_bpe_n_merges(t), nw);
    int first_bad = -1;
    for (int i = 0; i < nw && i < ls_bpe_n_merges(t) && first_bad < 0; i++)
        if (t->merge[i].a != want[i][0] || t->merge[i].b != want[i][1] || t->merge[i].to != 256 + i) first_bad = i;
    CHECK_MSG(first_bad < 0, "merge %d: (%d, %d), reference (%d, %d)", first_bad,
              first_bad >= 0 ? t->merge[first_bad].a : 0, first_bad >= 0 ? t->merge[first_bad].b : 0,
              first_bad >= 0 ? want[first_bad][0] : 0, first_bad >= 0 ? want[first_bad][1] : 0);
    ls_bpe_free(t);
    free(want);
    free(text);
}

/* Encodes text and compares with the n ids of want. */
static void check_ids(const ls_bpe *t, const char *text, const int32_t *want, size_t n, const char *what) {
    int32_t *ids;
    size_t got;
    CHECK_MSG(ls_bpe_encode(t, text, strlen(text), &ids, &got) == LS_OK && got == n &&
                  !memcmp(ids, want, n * sizeof *ids),
              "%s: %zu ids, want %zu", what, got, n);
    free(ids);
}

/* Added tokens where one is a prefix of another (the longer wins wherever both match, in either
 * order of declaration); ids past the vocabulary are refused by decode. */
static void test_specials_and_ids(void) {
    const char *text = "ab";
    size_t len = 2;
    const char *sp1[] = {"<x>", "<x>y"}, *sp2[] = {"<x>y", "<x>"};
    for (int order = 0; order < 2; order++) {
        ls_bpe_train_opts o = {258, 2, order ? sp2 : sp1, 2, 0};
        ls_bpe *t;
        CHECK_MSG(ls_bpe_train(&text, &len, 1, &o, &t) == LS_OK, "train");
        int32_t x = order ? 257 : 256, xy = order ? 256 : 257;
        int32_t want[] = {'a', xy, x, 'b', x, xy};
        check_ids(t, "a<x>y<x>b<x><x>y", want, 6, "overlapping added tokens");
        char *back;
        size_t blen;
        int32_t bad[] = {'a', ls_bpe_vocab_size(t)}, neg[] = {-1};
        CHECK_MSG(ls_bpe_decode(t, bad, 2, &back, &blen) == LS_EINVAL, "decode of id = vocab size refused");
        CHECK_MSG(ls_bpe_decode(t, neg, 1, &back, &blen) == LS_EINVAL, "decode of id -1 refused");
        CHECK(ls_bpe_token(t, ls_bpe_vocab_size(t), NULL) == NULL);
        ls_bpe_free(t);
    }
}

/* add_prefix_space (a tokenizer.json setting): text not starting with a space is encoded as if
 * it did; text that starts with one is left as it is. */
static void test_prefix_space(void) {
    const char *text = "hi there hi there hi there";
    size_t len = strlen(text);
    ls_bpe_train_opts o = {270, 2, NULL, 0, 0};
    ls_bpe *t, *u = NULL;
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &o, &t) == LS_OK, "train");
    char *js = ls_bpe_to_json(t);
    const char *key = "\"add_prefix_space\":false"; /* the first is the pre-tokenizer's */
    char *at = js ? strstr(js, key) : NULL;
    CHECK_MSG(at != NULL, "pre_tokenizer add_prefix_space in %s", js ? js : "(null)");
    if (at) {
        size_t jl = strlen(js), kl = strlen(key);
        char *mod = malloc(jl + 1);
        size_t o1 = (size_t)(at - js);
        memcpy(mod, js, o1);
        int n = sprintf(mod + o1, "\"add_prefix_space\":true");
        memcpy(mod + o1 + n, at + kl, jl - o1 - kl + 1);
        CHECK_MSG(ls_bpe_parse(mod, strlen(mod), &u) == LS_OK, "parse with add_prefix_space");
        free(mod);
    }
    if (u) {
        int32_t *a, *b;
        size_t na, nb;
        CHECK(ls_bpe_encode(u, "hi there", 8, &a, &na) == LS_OK && ls_bpe_encode(t, " hi there", 9, &b, &nb) == LS_OK);
        CHECK_MSG(na == nb && !memcmp(a, b, na * sizeof *a), "prefixed: %zu ids vs %zu", na, nb);
        free(a), free(b);
        CHECK(ls_bpe_encode(u, " hi", 3, &a, &na) == LS_OK && ls_bpe_encode(t, " hi", 3, &b, &nb) == LS_OK);
        CHECK_MSG(na == nb && !memcmp(a, b, na * sizeof *a), "a leading space is not doubled: %zu ids vs %zu", na, nb);
        free(a), free(b);
        /* the setting is written out with the tokenizer: its copy prefixes too */
        char *js2 = ls_bpe_to_json(u);
        ls_bpe *v = NULL;
        CHECK(js2 && ls_bpe_parse(js2, strlen(js2), &v) == LS_OK);
        if (v) {
            CHECK(ls_bpe_encode(v, "hi there", 8, &a, &na) == LS_OK &&
                  ls_bpe_encode(t, " hi there", 9, &b, &nb) == LS_OK);
            CHECK_MSG(na == nb && !memcmp(a, b, na * sizeof *a), "copy prefixed: %zu ids vs %zu", na, nb);
            free(a), free(b);
            ls_bpe_free(v);
        }
        free(js2);
        ls_bpe_free(u);
    }
    free(js);
    ls_bpe_free(t);
}

/* Streaming text of byte tokens (t == NULL): a character split across tokens waits for its last
 * byte; invalid sequences become U+FFFD, one per byte that starts none. */
static void test_utf8_stream(void) {
    const int e_acute[] = {0xC3, 0xA9}, euro[] = {'a', 0xE2, 0x82, 0xAC}, smile[] = {0xF0, 0x9F, 0x98, 0x80};
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, e_acute, 0, 1, 0), 0);
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, e_acute, 0, 2, 0), 2);
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, e_acute, 0, 1, 1), 1); /* final: everything */
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, euro, 0, 3, 0), 1);
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, euro, 0, 4, 0), 4);
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, smile, 0, 3, 0), 0);
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, smile, 0, 4, 0), 4);
    char *s = ls_text_utf8(NULL, euro, 0, 4);
    CHECK_MSG(s && !strcmp(s, "a\xE2\x82\xAC"), "euro: %s", s ? s : "(null)");
    free(s);
    const int bad[] = {0xE2, 0x82, 'A', 0xA9, 'b'};
    s = ls_text_utf8(NULL, bad, 0, 5);
    CHECK_MSG(s && !strcmp(s, "\xEF\xBF\xBD\xEF\xBF\xBD"
                              "A\xEF\xBF\xBD"
                              "b"),
              "invalid bytes: %s", s ? s : "(null)");
    free(s);
    CHECK_EQ_INT(ls_text_utf8_ready(NULL, bad, 0, 3, 0), 3);
}

/* js with the first `from` replaced by `to` (malloc'd), or NULL when js lacks it. */
static char *edit(const char *js, const char *from, const char *to) {
    const char *at = js ? strstr(js, from) : NULL;
    if (!at) return NULL;
    size_t a = (size_t)(at - js), fl = strlen(from), tl = strlen(to), n = strlen(js) - fl + tl;
    char *out = malloc(n + 1);
    memcpy(out, js, a);
    memcpy(out + a, to, tl);
    memcpy(out + a + tl, at + fl, strlen(at + fl) + 1);
    return out;
}

/* The vocab of js has key (a token as shown) with id. */
static int has_entry(const char *js, const char *key, int id) {
    char want[64];
    snprintf(want, sizeof want, "\"%s\":%d", key, id);
    const char *at = js ? strstr(js, want) : NULL;
    return at && (at[-1] == '{' || at[-1] == ',') && (at[strlen(want)] == ',' || at[strlen(want)] == '}');
}

/* The vocab of js with entries inserted first (a "key":id list ending with a comma), and merges and
 * added tokens replaced; parsed into *t (NULL on failure). */
static int parse_edited(const char *js, const char *entries, const char *merges, const char *added, ls_bpe **t) {
    char *a = edit(js, "\"vocab\":{", entries), *b = edit(a, "\"merges\":[]", merges),
         *c = edit(b, "\"added_tokens\":[]", added);
    *t = NULL;
    int rc = c ? ls_bpe_parse(c, strlen(c), t) : LS_ENOMEM;
    free(a), free(b), free(c);
    return rc;
}

/* The tokenizer.json codec against GPT-2's byte-to-character table (bytes 0x21-0x7E, 0xA1-0xAC
 * and 0xAE-0xFF shown as themselves, the other 68 as U+0100 onwards in byte order: 0x00 Ā, 0x0A
 * Ċ, 0x20 Ġ, 0x7F ġ, 0xA0 ł, 0xAD Ń), and the edges of what it reads: a token of 4096 bytes
 * is taken and one of 4097 refused, as is a merge whose two sides make more than 4096; ByteLevel
 * with use_regex false and BPE dropout are refused; an added token equal to its vocab entry
 * marks it special, one that only starts like it is refused. */
static void test_json_codec(void) {
    const char *text = "ab";
    size_t len = 2;
    ls_bpe_train_opts o = {256, 2, NULL, 0, 0};
    ls_bpe *t, *u;
    CHECK_MSG(ls_bpe_train(&text, &len, 1, &o, &t) == LS_OK, "train");
    char *js = ls_bpe_to_json(t);
    ls_bpe_free(t);
    static const struct {
        const char *shown;
        int byte;
    } table[] = {{"\xc4\x80", 0x00}, {"\xc4\x8a", 0x0A}, {"\xc4\xa0", 0x20}, {"!", 0x21},        {"~", 0x7E},
                 {"\xc4\xa1", 0x7F}, {"\xc4\xa2", 0x80}, {"\xc5\x82", 0xA0}, {"\xc2\xa1", 0xA1}, {"\xc2\xac", 0xAC},
                 {"\xc5\x83", 0xAD}, {"\xc2\xae", 0xAE}, {"\xc3\xbf", 0xFF}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        CHECK_MSG(has_entry(js, table[i].shown, table[i].byte), "byte 0x%02X not shown as \"%s\"", table[i].byte,
                  table[i].shown);
    /* 4096 bytes in a token; a merge of 4000 + 96 bytes */
    char *a4096 = malloc(4098), *entries = malloc(20000), *merges = malloc(10000);
    memset(a4096, 'a', 4097), a4096[4097] = '\0';
    snprintf(entries, 20000, "\"vocab\":{\"%.4000s\":256,\"%.96s\":257,\"%.4096s\":258,\"%.97s\":259,", a4096, a4096,
             a4096, a4096);
    snprintf(merges, 10000, "\"merges\":[\"%.4000s %.96s\"]", a4096, a4096);
    CHECK_MSG(parse_edited(js, entries, merges, "\"added_tokens\":[]", &u) == LS_OK, "4096 bytes: %s", ls_errmsg());
    size_t tl = 0;
    CHECK(u && ls_bpe_token(u, 258, &tl) && tl == 4096 && ls_bpe_n_merges(u) == 1);
    ls_bpe_free(u);
    snprintf(merges, 10000, "\"merges\":[\"%.4000s %.97s\"]", a4096, a4096);
    CHECK(parse_edited(js, entries, merges, "\"added_tokens\":[]", &u) == LS_EFORMAT && !u);
    CHECK_MSG(strstr(ls_errmsg(), "merge 0 (") && strstr(ls_errmsg(), "makes a token of 4097 bytes (at most 4096)"),
              "%s", ls_errmsg());
    snprintf(entries, 20000, "\"vocab\":{\"%s\":256,", a4096);
    CHECK(parse_edited(js, entries, "\"merges\":[]", "\"added_tokens\":[]", &u) == LS_EFORMAT && !u);
    CHECK_MSG(strstr(ls_errmsg(), "is not byte-level (or too long)"), "%s", ls_errmsg());
    free(a4096), free(entries), free(merges);
    /* added tokens over vocab entries */
    const char *end = "\"added_tokens\":[{\"id\":256,\"content\":\"<|end|>\"}]";
    CHECK_MSG(parse_edited(js, "\"vocab\":{\"<|end|>\":256,", "\"merges\":[]", end, &u) == LS_OK, "%s", ls_errmsg());
    if (u) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(ls_bpe_encode(u, "x<|end|>", 8, &ids, &n) == LS_OK && n == 2 && ids[0] == 'x' && ids[1] == 256);
        free(ids);
        ls_bpe_free(u);
    }
    CHECK(parse_edited(js, "\"vocab\":{\"<|end\":256,", "\"merges\":[]", end, &u) == LS_EFORMAT && !u);
    CHECK_MSG(strstr(ls_errmsg(), "added token 256 differs from vocab entry 256"), "%s", ls_errmsg());
    /* settings outside byte-level BPE */
    char *re = edit(js, "\"use_regex\":true", "\"use_regex\":false"),
         *drop = edit(js, "\"dropout\":null", "\"dropout\":0.1");
    CHECK(re && drop);
    if (re) expect_refused(re, "pre_tokenizer with use_regex false not supported");
    if (drop) expect_refused(drop, "dropout");
    free(re), free(drop);
    free(js);
}

int main(void) {
    const char *dir = getenv("LLMSYS_SOURCE_DIR") ? getenv("LLMSYS_SOURCE_DIR") : LLMSYS_SOURCE_DIR;
    test_pieces();
    test_train_by_hand();
    test_corpus(dir);
    test_refusals();
    test_train_reference();
    test_specials_and_ids();
    test_prefix_space();
    test_utf8_stream();
    test_json_codec();
    return TEST_RESULT();
}
