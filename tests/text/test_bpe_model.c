/* test_bpe_model.c - a model on a BPE vocabulary end to end in the library: the corpus keeps the
 * same text bytes and byte statistics as with byte tokens, an untrained model scores
 * log2(V) bits per token converted to bits per byte by the token/byte ratio, training lowers
 * held-out bits/byte, and the checkpoint carries the tokenizer back. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "test.h"
#include "llmsys/model.h"
#include "llmsys/tokenizer.h"
#include "llmsys/train.h"


/* The repository's doc pages as documents. */
static int load_docs(const char *src, char ***docs, size_t **lens) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/docs", src);
    DIR *d = opendir(dir);
    int n = 0;
    *docs = calloc(64, sizeof **docs);
    *lens = calloc(64, sizeof **lens);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 64) {
        size_t k = strlen(e->d_name);
        if (k < 4 || strcmp(e->d_name + k - 3, ".md")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (ls_file_read(path, &(*docs)[n], &(*lens)[n]) == LS_OK) n++;
    }
    if (d) closedir(d);
    return n;
}

int main(void) {
    const char *src = getenv("LLMSYS_SOURCE_DIR") ? getenv("LLMSYS_SOURCE_DIR") : LLMSYS_SOURCE_DIR;
    char **docs;
    size_t *lens;
    int nd = load_docs(src, &docs, &lens);
    CHECK_MSG(nd >= 3, "doc pages under %s/docs: %d", src, nd);
    if (nd < 3) return 1;

    const int V = 512;
    const char *specials[] = LS_BPE_SPECIALS;
    ls_bpe_train_opts to = {V, 2, specials, 3, 0};
    ls_bpe *tok;
    CHECK_MSG(ls_bpe_train((const char *const *)docs, lens, nd, &to, &tok) == LS_OK && ls_bpe_vocab_size(tok) == V,
          "train tokenizer");
    size_t len;
    const uint8_t *b = ls_bpe_token(tok, LS_TOK_BOS, &len);
    CHECK_MSG(b && len == 7 && !memcmp(b, "<|bos|>", 7), "BOS is id 256");

    /* the same documents as bytes and as BPE ids */
    ls_corpus_opts co = ls_corpus_defaults(), cb = co;
    co.tokenizer = tok;
    ls_corpus *cbyte, *cbpe;
    CHECK_MSG(ls_corpus_from_docs(&cbyte, "docs", (const char *const *)docs, lens, nd, &cb) == LS_OK, "byte corpus");
    CHECK_MSG(ls_corpus_from_docs(&cbpe, "docs", (const char *const *)docs, lens, nd, &co) == LS_OK, "bpe corpus");
    size_t nb, np;
    ls_corpus_tokens(cbyte, LS_SPLIT_ALL, &nb);
    const uint16_t *all = ls_corpus_tokens(cbpe, LS_SPLIT_ALL, &np);
    CHECK_MSG(ls_corpus_num_bytes(cbyte, LS_SPLIT_ALL) == ls_corpus_num_bytes(cbpe, LS_SPLIT_ALL), "same text bytes");
    CHECK_MSG(fabs(ls_corpus_unigram_entropy(cbyte, LS_SPLIT_ALL) - ls_corpus_unigram_entropy(cbpe, LS_SPLIT_ALL)) < 1e-9,
          "same byte entropy");
    CHECK_MSG(np * 10 < nb * 7, "BPE shortens the corpus: %zu vs %zu tokens", np, nb);
    int max_id = 0;
    for (size_t i = 0; i < np; i++) max_id = all[i] > max_id ? all[i] : max_id;
    CHECK_MSG(max_id < V && max_id > 400, "ids within the vocabulary and using it (max %d)", max_id);

    /* a tiny model on the BPE vocabulary */
    ls_model_config mc;
    ls_model_config_named("tiny", &mc);
    mc.vocab = V;
    ls_train_config tc = ls_train_defaults();
    tc.batch = 8;
    tc.seq = 32;
    tc.steps = 100;
    tc.opt.lr = 3e-3f;
    ls_trainer *t;
    ls_batch_source *bs;
    CHECK_MSG(ls_trainer_init(&t, &mc, &tc, NULL) == LS_OK, "trainer");
    ls_bpe *copy;
    char *json = ls_bpe_to_json(tok);
    CHECK_MSG(json && ls_bpe_parse(json, strlen(json), &copy) == LS_OK, "tokenizer copy");
    free(json);
    ls_model *m = ls_trainer_model(t);
    CHECK_MSG(ls_model_set_tokenizer(m, copy) == LS_OK && ls_model_tokenizer(m), "model tokenizer");
    CHECK_MSG(ls_batch_source_corpus(&bs, cbpe, &tc, 1) == LS_OK, "batch source");

    size_t nh;
    const uint16_t *held = ls_corpus_tokens(cbpe, LS_SPLIT_HELDOUT, &nh);
    ls_eval_result e0, e1;
    CHECK_MSG(ls_eval_tokens(m, held, nh, 32, 8, 8192, &e0) == LS_OK, "eval before");
    /* untrained: about ln(V) nats per token, so bits/byte = log2(V) * tokens / bytes */
    double want = log2((double)V) * (double)e0.tokens / (double)e0.bytes;
    CHECK_MSG(fabs(e0.bits_per_byte / want - 1) < 0.05, "untrained bits/byte %.3f vs %.3f", e0.bits_per_byte, want);
    CHECK_MSG(e0.bytes * 2 > e0.tokens * 3, "bytes counted per token's text: %zu bytes for %zu tokens", e0.bytes, e0.tokens);
    for (int s = 0; s < tc.steps; s++) {
        float loss, gn;
        if (ls_trainer_step(t, bs, &loss, &gn) != LS_OK) {
            CHECK_MSG(0, "step %d", s);
            break;
        }
    }
    CHECK_MSG(ls_eval_tokens(m, held, nh, 32, 8, 8192, &e1) == LS_OK, "eval after");
    CHECK_MSG(e1.bits_per_byte < e0.bits_per_byte - 0.5 && e1.bytes == e0.bytes, "trained: %.3f -> %.3f bits/byte",
          e0.bits_per_byte, e1.bits_per_byte);
    printf("bpe model: V %d, %zu -> %zu tokens (%.2f bytes/token); held-out bits/byte %.3f -> %.3f\n", V, nb, np,
           (double)ls_corpus_num_bytes(cbpe, LS_SPLIT_ALL) / (double)np, e0.bits_per_byte, e1.bits_per_byte);

    /* the checkpoint carries the tokenizer */
    char path[256];
    snprintf(path, sizeof path, "/tmp/llmsys-test-bpe-model-%d.safetensors", (int)getpid());
    ls_model *back = NULL;
    ls_eval_result e2;
    CHECK_MSG(ls_ckpt_save(path, m, tc.steps, NULL, LS_CKPT_WEIGHTS) == LS_OK, "save");
    CHECK_MSG(ls_ckpt_load(path, LS_CKPT_WEIGHTS, &back, NULL) == LS_OK && ls_model_tokenizer(back), "load");
    if (back) {
        CHECK_MSG(ls_eval_tokens(back, held, nh, 32, 8, 8192, &e2) == LS_OK && e2.bits_per_byte == e1.bits_per_byte,
              "same bits/byte after load");
        int *ids;
        size_t n;
        char *text;
        size_t tl;
        const char *s = "The loader mixes sources; the planner picks bits.";
        CHECK_MSG(ls_text_encode(ls_model_tokenizer(back), s, strlen(s), &ids, &n) == LS_OK && n < strlen(s), "encode");
        CHECK_MSG(ls_text_decode(ls_model_tokenizer(back), ids, n, &text, &tl) == LS_OK && tl == strlen(s) &&
                  !memcmp(text, s, tl),
              "decode");
        free(ids);
        free(text);
        ls_model_free(back);
    }
    /* a wrong-size tokenizer is refused */
    ls_bpe *small;
    ls_bpe_train_opts so = {300, 2, specials, 3, 0};
    CHECK_MSG(ls_bpe_train((const char *const *)docs, lens, nd, &so, &small) == LS_OK, "small tokenizer");
    CHECK_MSG(ls_model_set_tokenizer(m, small) != LS_OK, "size mismatch refused");
    remove(path);
    ls_batch_source_free(bs);
    ls_trainer_free(t);
    ls_corpus_free(cbyte);
    ls_corpus_free(cbpe);
    ls_bpe_free(tok);
    for (int i = 0; i < nd; i++) free(docs[i]);
    free(docs);
    free(lens);
    return TEST_RESULT();
}
