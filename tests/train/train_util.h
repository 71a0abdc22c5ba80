/* train_util.h - what the training tests share: their setup, a corpus of generated
 * sentences and the settings of a small run. */
#ifndef LLMSYS_TESTS_TRAIN_UTIL_H
#define LLMSYS_TESTS_TRAIN_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "llmsys/train.h"

/* n bytes of words w[0..nw) drawn with seed, a sentence ending on average every `period`
 * words, as one document; NULL on failure. */
static inline ls_corpus *test_sentences(const char *const *w, int nw, size_t n, uint64_t seed, int period) {
    char *s = malloc(n + 32);
    if (!s) return NULL;
    ls_rng r;
    ls_rng_seed(&r, seed);
    size_t k = 0;
    while (k < n)
        k += (size_t)sprintf(s + k, "%s%s", w[ls_rng_below(&r, (uint64_t)nw)],
                             ls_rng_below(&r, (uint64_t)period) ? " " : ".\n");
    const char *docs[1] = {s};
    size_t lens[1] = {n};
    ls_corpus *c = NULL;
    if (ls_corpus_from_docs(&c, "generated", docs, lens, 1, NULL) != LS_OK) c = NULL;
    free(s);
    return c;
}

/* A small run: global batch 4 x 32 tokens, lr 3e-3, the given steps, seed and warmup. */
static inline ls_train_config test_small_run(int steps, uint64_t seed, int warmup) {
    ls_train_config tc = ls_train_defaults();
    tc.batch = 4;
    tc.seq = 32;
    tc.steps = steps;
    tc.seed = seed;
    tc.opt.lr = 3e-3f;
    tc.opt.warmup_steps = warmup;
    return tc;
}

/* main's setup: the scratch directory from the template dir (mkdtemp), one kernel thread
 * (bit-reproducible runs), *corpus from make; -1 when any fails. */
static inline int test_train_begin(char *dir, ls_corpus **corpus, ls_corpus *(*make)(void)) {
    if (!mkdtemp(dir)) return -1;
    ls_model_set_threads(1);
    return (*corpus = make()) ? 0 : -1;
}

#endif
