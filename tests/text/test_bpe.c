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
}

int main(void) {
    const char *dir = getenv("LLMSYS_SOURCE_DIR") ? getenv("LLMSYS_SOURCE_DIR") : LLMSYS_SOURCE_DIR;
    test_pieces();
    test_train_by_hand();
    test_corpus(dir);
    test_refusals();
    return TEST_RESULT();
}
