/* test_train.c - the training loop: same seed -> bit-identical losses, resume -> the same
 * losses and weights as an uninterrupted run, and a short run that learns (held-out
 * bits/byte clearly below the unigram entropy of the held-out text). */
#include <math.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/train.h"
#include "test.h"
#include "train/train_util.h"

static char dir[] = "/tmp/llmsys-train-XXXXXX";
static ls_corpus *corpus; /* shared by the tests: loaded once */

/* Text for the runs: Debian's license texts (every Debian system has them, base-files),
 * else generated sentences. */
static ls_corpus *load_corpus(void) {
    ls_corpus *c = NULL;
    const char *lic[1] = {"/usr/share/common-licenses"};
    if (ls_is_dir(lic[0]) && ls_corpus_load(&c, lic, 1, NULL) == LS_OK) return c;
    static const char *w[] = {"the",      "software",   "is",       "provided", "as",   "is",     "without",
                              "warranty", "of",         "any",      "kind",     "you",  "may",    "copy",
                              "and",      "distribute", "verbatim", "copies",   "this", "license"};
    c = test_sentences(w, 20, 200000, 3, 9);
    CHECK(c != NULL);
    return c;
}

static ls_train_config small_run(int steps) { return test_small_run(steps, 7, 3); }

/* Runs steps [from, to) of a trainer; losses go to out[from..to). */
static void run_steps(ls_trainer *t, ls_batch_source *s, int from, int to, float *out) {
    for (int i = from; i < to; i++) {
        CHECK_EQ_INT(ls_trainer_step_index(t), i);
        CHECK(ls_trainer_step(t, s, &out[i], NULL) == LS_OK);
    }
}

static void test_determinism_and_resume(void) {
    ls_corpus *c = corpus;
    ls_model_config mc;
    CHECK(ls_model_config_named("tiny", &mc) == LS_OK);
    enum { K = 12 };
    float la[K], lb[K], lr[K];
    ls_trainer *a = NULL, *b = NULL, *r = NULL;
    ls_batch_source *sa = NULL, *sb = NULL, *sr = NULL;
    ls_train_config tc = small_run(K), tcb = tc, tcr;
    CHECK(ls_trainer_init(&a, &mc, &tc, NULL) == LS_OK);
    CHECK(ls_trainer_init(&b, &mc, &tcb, NULL) == LS_OK);
    CHECK(ls_batch_source_corpus(&sa, c, &tc, 1) == LS_OK);
    CHECK(ls_batch_source_corpus(&sb, c, &tcb, 1) == LS_OK);
    if (!a || !b || !sa || !sb) return;
    CHECK(ls_trainer_set_shards(a, tc.shards) == LS_OK && ls_trainer_set_shards(b, tcb.shards) == LS_OK);

    /* two runs with the same seed: identical bits */
    run_steps(a, sa, 0, K, la);
    run_steps(b, sb, 0, K / 2, lb);
    CHECK(memcmp(la, lb, sizeof(float) * (K / 2)) == 0);
    CHECK(la[K - 1] < la[0] - 0.3f); /* and it learns */

    /* interrupt b half way, save, resume into a new trainer: the rest matches a exactly */
    char p[256];
    snprintf(p, sizeof p, "%s/half.safetensors", dir);
    CHECK(ls_trainer_save(b, p) == LS_OK);
    ls_trainer_free(b);
    CHECK(ls_trainer_resume(&r, p, 0, NULL) == LS_OK);
    if (!r) return;
    tcr = *ls_trainer_config(r);
    CHECK_EQ_INT(tcr.steps, K);
    CHECK_EQ_INT(tcr.shards, tc.shards);
    CHECK(tcr.seed == tc.seed && tcr.opt.lr == tc.opt.lr && tcr.opt.warmup_steps == tc.opt.warmup_steps);
    CHECK(ls_batch_source_corpus(&sr, c, &tcr, 1) == LS_OK);
    memcpy(lr, lb, sizeof(float) * (K / 2));
    if (sr) run_steps(r, sr, K / 2, K, lr);
    CHECK_MSG(memcmp(la, lr, sizeof la) == 0, "resumed losses differ: step %d %.9g vs %.9g", K - 1, la[K - 1],
              lr[K - 1]);
    size_t n = ls_model_num_params(ls_trainer_model(a));
    ls_model *ma = ls_trainer_model(a), *mr = ls_trainer_model(r);
    CHECK(memcmp(ls_model_params(ma), ls_model_params(mr), n * sizeof(float)) == 0);
    CHECK(memcmp(ls_model_adam_v(ma), ls_model_adam_v(mr), n * sizeof(float)) == 0);

    /* a different seed gives a different run */
    ls_trainer *d = NULL;
    ls_batch_source *sd = NULL;
    ls_train_config tcd = small_run(K);
    tcd.seed = 8;
    float ld[2];
    CHECK(ls_trainer_init(&d, &mc, &tcd, NULL) == LS_OK && ls_batch_source_corpus(&sd, c, &tcd, 1) == LS_OK);
    if (d && sd) run_steps(d, sd, 0, 2, ld);
    CHECK(ld[1] != la[1]);

    /* resume refuses a weights-only file and a run already past the requested steps */
    ls_trainer *x = NULL;
    char pw[256];
    snprintf(pw, sizeof pw, "%s/weights.safetensors", dir);
    CHECK(ls_ckpt_save(pw, ma, K, NULL, LS_CKPT_WEIGHTS) == LS_OK);
    CHECK(ls_trainer_resume(&x, pw, 0, NULL) == LS_EFORMAT && x == NULL);
    CHECK(ls_trainer_resume(&x, p, K / 4, NULL) == LS_EINVAL && x == NULL);
    /* one exactly at the requested steps resumes, with nothing left to run */
    CHECK(ls_trainer_resume(&x, p, K / 2, NULL) == LS_OK && x && ls_trainer_step_index(x) == K / 2);
    ls_trainer_free(x);
    x = NULL;
    /* warmup 0 means steps/10 (train.h), over a schedule of the run's steps */
    ls_train_config tw = small_run(50);
    tw.opt.warmup_steps = 0;
    CHECK(ls_trainer_init(&x, &mc, &tw, NULL) == LS_OK && x);
    if (x) CHECK(ls_trainer_config(x)->opt.warmup_steps == 5 && ls_trainer_config(x)->opt.total_steps == 50);
    ls_trainer_free(x);
    x = NULL;
    CHECK(ls_trainer_set_steps(a, K) == LS_EINVAL);
    tcd.seq = 1000;
    CHECK(ls_trainer_init(&x, &mc, &tcd, NULL) == LS_EINVAL);
    tcd.seq = 32;
    tcd.steps = 0;
    CHECK(ls_trainer_init(&x, &mc, &tcd, NULL) == LS_EINVAL);

    ls_batch_source_free(sa);
    ls_batch_source_free(sb);
    ls_batch_source_free(sr);
    ls_batch_source_free(sd);
    ls_trainer_free(a);
    ls_trainer_free(r);
    ls_trainer_free(d);
}

static void test_train_config_json(void) {
    ls_train_config a = small_run(77), b = ls_train_defaults();
    a.seed = 0xFFFFFFFFFFFFFFF1ull;
    a.shards = 6;
    a.opt.weight_decay = 0.01f;
    a.data_hash = 0x8000000000000001ull;
    char *j = ls_train_config_to_json(&a);
    CHECK(j && ls_train_config_from_json(j, &b) == LS_OK);
    CHECK(b.data_hash == a.data_hash);
    CHECK(b.seed == a.seed && b.steps == 77 && b.shards == 6 && b.batch == a.batch && b.seq == a.seq);
    CHECK(b.opt.lr == a.opt.lr && b.opt.weight_decay == a.opt.weight_decay && b.opt.beta2 == a.opt.beta2);
    free(j);
    CHECK(ls_train_config_from_json("{\"batch\":\"x\"}", &b) == LS_EINVAL);
    CHECK(ls_train_config_from_json("[1,2", &b) < 0);
}

/* Eval counts: bits/byte is the summed loss over text bytes; an untrained model sits
 * near ln(V) nats per token. */
static void test_eval(void) {
    ls_corpus *c = corpus;
    ls_model_config mc;
    CHECK(ls_model_config_named("tiny", &mc) == LS_OK);
    ls_model *m = NULL;
    CHECK(ls_model_init(&m, &mc, 1) == LS_OK);
    if (!m) return;
    size_t n;
    const uint16_t *ho = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
    ls_eval_result r;
    CHECK(ls_eval_tokens(m, ho, n, 32, 4, 2000, &r) == LS_OK);
    CHECK(r.tokens > 1900 && r.tokens <= 2000 && r.bytes <= r.tokens);
    CHECK_NEAR(r.loss, log(LS_VOCAB), 0.2);
    CHECK_NEAR(r.bits_per_byte, r.loss * (double)r.tokens / log(2.0) / (double)r.bytes, 1e-9);
    CHECK_NEAR(r.perplexity, exp(r.loss), 1e-9);
    /* one window by hand: the mean loss of ls_model_forward over the same tokens */
    int tok[32], tgt[32];
    for (int i = 0; i < 32; i++) {
        tok[i] = ho[i];
        tgt[i] = ho[i + 1] == LS_TOK_BOS ? -1 : ho[i + 1];
    }
    double l = ls_model_forward(m, tok, tgt, 1, 32);
    ls_eval_result r1;
    CHECK(ls_eval_tokens(m, ho, n, 32, 1, 32, &r1) == LS_OK);
    CHECK_NEAR(r1.loss, l, 1e-6);
    CHECK(ls_eval_tokens(m, ho, 10, 32, 1, 0, &r1) == LS_EINVAL);
    CHECK(ls_eval_tokens(m, ho, n, 1000, 1, 0, &r1) == LS_EINVAL);
    /* a window of T inputs needs T + 1 tokens: k*T + 1 tokens hold k windows, k*T only k - 1 */
    size_t avail = 99;
    CHECK_EQ_INT(ls_eval_windows(3 * 32 + 1, 32, 0, &avail), 3);
    CHECK_EQ_INT(avail, 3);
    CHECK_EQ_INT(ls_eval_windows(3 * 32, 32, 0, &avail), 2);
    CHECK_EQ_INT(ls_eval_windows(32, 32, 0, &avail), 0);
    CHECK_EQ_INT(ls_eval_windows(3 * 32 + 1, 32, 64, &avail), 2); /* a cap of two windows */
    CHECK_EQ_INT(ls_eval_windows(3 * 32 + 1, 32, 5, &avail), 1);  /* under one window: one */
    CHECK(ls_eval_tokens(m, ho, 32, 32, 1, 0, &r1) == LS_EINVAL);
    CHECK(n > 2 * 32);
    CHECK(ls_eval_tokens(m, ho, 2 * 32, 32, 1, 0, &r1) == LS_OK);
    int64_t want = 0; /* one window: the targets ho[1..32], BOS not counted */
    for (int i = 1; i <= 32; i++) want += ho[i] != LS_TOK_BOS;
    CHECK_EQ_INT(r1.tokens, want);
    ls_model_free(m);
}

/* A short tiny run learns more than byte frequencies: held-out bits/byte clearly below
 * the held-out text's own unigram entropy (the best any context-free model can do). */
static void test_learns(void) {
    ls_corpus *c = corpus;
    ls_model_config mc;
    CHECK(ls_model_config_named("tiny", &mc) == LS_OK);
    ls_train_config tc = small_run(300);
    tc.batch = 16;
    ls_trainer *t = NULL;
    ls_batch_source *s = NULL;
    CHECK(ls_trainer_init(&t, &mc, &tc, NULL) == LS_OK && ls_batch_source_corpus(&s, c, &tc, 1) == LS_OK);
    if (!t || !s) return;
    double t0 = ls_now();
    float loss = 0;
    for (int i = 0; i < tc.steps; i++) CHECK(ls_trainer_step(t, s, &loss, NULL) == LS_OK);
    size_t n;
    const uint16_t *ho = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
    ls_eval_result r;
    CHECK(ls_eval_tokens(ls_trainer_model(t), ho, n, 64, 8, 20000, &r) == LS_OK);
    double h = ls_corpus_unigram_entropy(c, LS_SPLIT_HELDOUT);
    fprintf(stderr, "  %d steps in %.1f s: final train loss %.3f, held-out %.3f bits/byte vs unigram entropy %.3f\n",
            tc.steps, ls_now() - t0, loss, r.bits_per_byte, h);
    CHECK_MSG(r.bits_per_byte < h - 0.5, "held-out %.3f bits/byte is not 0.5 below the unigram entropy %.3f",
              r.bits_per_byte, h);
    ls_batch_source_free(s);
    ls_trainer_free(t);
}

int main(void) {
    if (test_train_begin(dir, &corpus, load_corpus) < 0) return 1;
    RUN(test_train_config_json);
    RUN(test_determinism_and_resume);
    RUN(test_eval);
    RUN(test_learns);
    ls_corpus_free(corpus);
    return TEST_RESULT_RMTREE(dir);
}
