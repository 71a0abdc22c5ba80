/* test_engine.c - the inference engine against ls_model_forward (fp32 and fp16 weights),
 * decode vs prefill, batch invariance, stage splits, quantized checkpoints round trip. */
#include <string.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "llmsys/serve.h"
#include "test.h"

static ls_model_config cfg;
static char ckpt[256], qckpt[256], qckpt_v1[256];

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void run_all(ls_engine *e, const int *tok, int T, float *out) {
    ls_engine_seq s = {0, 0, T};
    CHECK(ls_engine_forward(e, &s, 1, tok, NULL, out, 1) == LS_OK);
}

/* ls_engine_score: nll[t] = log sum exp(logits[t]) - logits[t][tok[t+1]] over the reference
 * model's logits, for the n - 1 positions with a next token (nll[n - 1] untouched); greedy
 * generation picks at each step the argmax of an all-logits prefill of what it has so far */
static void score_and_greedy(ls_engine *e, const int *tok, int T, const float *ref) {
    int V = cfg.vocab;
    float nll[25];
    nll[T - 1] = 12345.0f;
    CHECK(ls_engine_score(e, tok, T, nll) == LS_OK);
    double worst = 0;
    for (int t = 0; t < T - 1; t++) {
        const float *r = ref + (size_t)t * V;
        double s = 0;
        for (int v = 0; v < V; v++) s += exp((double)r[v]);
        worst = fmax(worst, fabs(nll[t] - (log(s) - r[tok[t + 1]])));
    }
    CHECK_MSG(worst < 1e-4, "score off by %g", worst);
    CHECK(nll[T - 1] == 12345.0f);
    CHECK(ls_engine_score(e, tok, 1, nll) == LS_EINVAL);
    int out[12], n_out = 0, all[16];
    CHECK(ls_engine_generate(e, tok, 4, 12, out, &n_out) == LS_OK);
    CHECK_EQ_INT(n_out, 12);
    memcpy(all, tok, 4 * sizeof(int));
    memcpy(all + 4, out, 11 * sizeof(int));
    float *lg = malloc(sizeof(float) * 15 * V);
    run_all(e, all, 15, lg);
    for (int i = 0; i < 12; i++) {
        const float *r = lg + (size_t)(3 + i) * V;
        int best = 0;
        for (int v = 1; v < V; v++) best = r[v] > r[best] ? v : best;
        CHECK_MSG(out[i] == best, "token %d: generated %d, prefill's argmax %d", i, out[i], best);
    }
    free(lg);
}

static void test_vs_model(void) {
    ls_model *m = make_model(&cfg, 42, 3.0f);
    CHECK(m != NULL);
    CHECK(write_model_ckpt(m, ckpt) == 0);
    int T = 24, V = cfg.vocab, tok[24];
    for (int i = 0; i < T; i++) tok[i] = (i * 37 + 11) % 256;
    ls_model_forward(m, tok, NULL, 1, T);
    const float *ref = ls_model_logits(m);
    float *out = malloc(sizeof(float) * T * V);
    const int bl[2] = {32, 16};
    const double tol[2] = {5e-6, 2e-3}; /* about 3-5x the observed 9.8e-7 (fp32) and 6.7e-4 (fp16) */
    for (int k = 0; k < 2; k++) {
        int bits[8];
        for (int l = 0; l < cfg.n_layer; l++) bits[l] = bl[k];
        ls_engine_opts o = ls_engine_defaults();
        o.bits = bits;
        ls_engine *e;
        CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
        run_all(e, tok, T, out);
        float d = max_abs_diff(out, ref, (size_t)T * V);
        float mag = 0;
        for (int i = 0; i < T * V; i++) mag = fmaxf(mag, fabsf(ref[i]));
        fprintf(stderr, "  bits %d: max |logit diff| %.3g (max |logit| %.3g, tol %.3g)\n", bl[k], d, mag, tol[k]);
        CHECK_NEAR(d, 0, tol[k]);
        if (k == 0) score_and_greedy(e, tok, T, ref);
        ls_engine_free(e);
    }
    free(out);
    ls_model_free(m);
}

/* prefill all-logits vs one-token decode steps (float kernels on both sides: tight; with
 * 8/4/3-bit layers decode also rounds activations to int8 per 32-block: ~1% of the logit
 * range); two sequences decoded together vs alone: bit-identical */
static void decode_batch(const int *bits, double tol) {
    ls_engine_opts o = ls_engine_defaults();
    o.bits = bits;
    ls_engine *e;
    CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
    int T = 16, V = cfg.vocab, tok[16], tok2[16];
    for (int i = 0; i < T; i++) tok[i] = (i * 53 + 7) % 259, tok2[i] = (i * 17 + 3) % 256;
    float *all = malloc(sizeof(float) * T * V), *step = malloc(sizeof(float) * T * V);
    float *pair = malloc(sizeof(float) * 2 * V), *solo = malloc(sizeof(float) * 2 * V);
    run_all(e, tok, T, all);
    for (int t = 0; t < T; t++) {
        ls_engine_seq s = {1, t, 1};
        CHECK(ls_engine_forward(e, &s, 1, &tok[t], NULL, step + (size_t)t * V, 0) == LS_OK);
    }
    CHECK_NEAR(max_abs_diff(all, step, (size_t)T * V), 0, tol);
    /* prefill 8 of each in two slots, then decode both together vs separately */
    ls_engine_seq pre[2] = {{2, 0, 8}, {3, 0, 8}};
    int ptok[16];
    memcpy(ptok, tok, 8 * sizeof(int));
    memcpy(ptok + 8, tok2, 8 * sizeof(int));
    CHECK(ls_engine_forward(e, pre, 2, ptok, NULL, pair, 0) == LS_OK);
    /* a prefill's one row of logits is its last token's: row 7 of the 16-token all-logits run */
    CHECK_NEAR(max_abs_diff(pair, all + (size_t)7 * V, (size_t)V), 0, tol);
    ls_engine_seq s1 = {4, 0, 8};
    CHECK(ls_engine_forward(e, &s1, 1, tok2, NULL, solo, 0) == LS_OK);
    CHECK(memcmp(solo, pair + V, sizeof(float) * V) == 0);
    for (int t = 8; t < 12; t++) {
        ls_engine_seq d2[2] = {{2, t, 1}, {3, t, 1}};
        int dt[2] = {tok[t], tok2[t]};
        CHECK(ls_engine_forward(e, d2, 2, dt, NULL, pair, 0) == LS_OK);
        ls_engine_seq d1 = {4, t, 1};
        CHECK(ls_engine_forward(e, &d1, 1, &tok2[t], NULL, solo, 0) == LS_OK);
        CHECK(memcmp(solo, pair + V, sizeof(float) * V) == 0);
    }
    free(all), free(step), free(pair), free(solo);
    ls_engine_free(e);
}

static void test_decode_batch(void) {
    int f16[8] = {16, 16, 16, 16}, mixed[8] = {4, 8, 3, 16};
    decode_batch(f16, 1e-4);
    decode_batch(mixed, 0.06);
}

/* Rewrites the quantized checkpoint src as format version 1 (F32 scales and minima). */
static int write_v1(const char *src, const char *dst) {
    ls_st_file *f;
    ls_st_writer *w;
    if (ls_st_open(src, &f) || ls_st_writer_init(&w)) return -1;
    float *tmp[64] = {0};
    int nt = 0, rc = 0;
    for (int i = 0; i < ls_st_count(f) && !rc; i++) {
        const ls_st_tensor *t = ls_st_get(f, i);
        size_t n = strlen(t->name);
        int sm = t->dtype == LS_DT_F16 &&
                 ((n > 6 && !strcmp(t->name + n - 6, ".scale")) || (n > 4 && !strcmp(t->name + n - 4, ".min")));
        if (!sm) {
            rc = ls_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        if (nt == 64) { rc = -1; break; }
        float *v = tmp[nt++] = malloc(sizeof(float) * (size_t)t->numel);
        for (int64_t k = 0; k < t->numel; k++) v[k] = ls_f16_to_f32(((const uint16_t *)t->data)[k]);
        rc = ls_st_writer_add(w, t->name, LS_DT_F32, t->ndim, t->shape, v);
    }
    char meta[256];
    snprintf(meta, sizeof meta, "%s", ls_st_meta(f, "llmsys.quant"));
    char *vp = strstr(meta, "\"version\":2");
    if (!vp) rc = -1;
    else vp[10] = '1';
    if (!rc)
        rc = ls_st_writer_meta(w, "llmsys.quant", meta) ||
             ls_st_writer_meta(w, "llmsys.config", ls_st_meta(f, "llmsys.config")) || ls_st_writer_write(w, dst);
    for (int i = 0; i < nt; i++) free(tmp[i]);
    ls_st_writer_free(w);
    ls_st_close(f);
    return rc ? -1 : 0;
}

/* quantized checkpoint == quantize on load; 2 stages == whole model; bad opens */
static void test_qckpt_and_stages(void) {
    int bits[8] = {4, 8, 3, 16};
    CHECK(ls_quant_checkpoint(ckpt, bits, cfg.n_layer, 64, qckpt) == LS_OK);
    ls_engine_opts o = ls_engine_defaults();
    ls_engine *eq, *el, *a, *b;
    CHECK(ls_engine_open(&eq, qckpt, &o) == LS_OK);
    for (int l = 0; l < cfg.n_layer; l++) CHECK_EQ_INT(ls_engine_layer_bits(eq, l), bits[l]);
    o.bits = bits;
    CHECK(ls_engine_open(&el, ckpt, &o) == LS_OK);
    int T = 12, V = cfg.vocab, C = cfg.d_model, tok[12];
    for (int i = 0; i < T; i++) tok[i] = (i * 29 + 5) % 256;
    float *x = malloc(sizeof(float) * T * V), *y = malloc(sizeof(float) * T * V), *h = malloc(sizeof(float) * T * C);
    run_all(eq, tok, T, x);
    run_all(el, tok, T, y);
    CHECK(memcmp(x, y, sizeof(float) * T * V) == 0);
    ls_engine_opts oa = ls_engine_defaults(), ob = ls_engine_defaults();
    oa.layer_end = 1;
    ob.layer_begin = 1;
    CHECK(ls_engine_open(&a, qckpt, &oa) == LS_OK);
    CHECK(ls_engine_open(&b, qckpt, &ob) == LS_OK);
    ls_engine_seq s = {0, 0, T};
    CHECK(ls_engine_forward(a, &s, 1, tok, NULL, h, 1) == LS_OK);
    CHECK(ls_engine_forward(b, &s, 1, NULL, h, y, 1) == LS_OK);
    CHECK(memcmp(x, y, sizeof(float) * T * V) == 0);
    /* a version-1 file (F32 scales and minima) still loads, to the same logits: its
     * values are the fp16 ones widened, so rounding back is exact */
    CHECK(write_v1(qckpt, qckpt_v1) == 0);
    ls_engine *e1;
    CHECK(ls_engine_open(&e1, qckpt_v1, NULL) == LS_OK);
    run_all(e1, tok, T, y);
    CHECK(memcmp(x, y, sizeof(float) * T * V) == 0);
    ls_engine_free(e1);
    /* refusals */
    int other[8] = {8, 8, 8, 8};
    ls_engine *bad;
    o.bits = other;
    CHECK(ls_engine_open(&bad, qckpt, &o) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "stored at 4 bits") != NULL);
    ls_engine_opts orng = ls_engine_defaults();
    orng.layer_begin = 1, orng.layer_end = 9;
    CHECK(ls_engine_open(&bad, qckpt, &orng) == LS_EINVAL);
    orng.layer_end = 1; /* an empty range: no layers to hold */
    CHECK(ls_engine_open(&bad, qckpt, &orng) == LS_EINVAL);
    int five[8] = {5, 5, 5, 5};
    CHECK(ls_quant_checkpoint(ckpt, five, cfg.n_layer, 64, qckpt) == LS_EINVAL);
    CHECK(ls_quant_checkpoint(ckpt, bits, cfg.n_layer - 1, 64, qckpt) == LS_EINVAL);
    /* greedy generation agrees between the quantized file and quantize-on-load */
    int o1[20], o2[20], n1, n2;
    CHECK(ls_engine_generate(eq, tok, 4, 20, o1, &n1) == LS_OK);
    CHECK(ls_engine_generate(el, tok, 4, 20, o2, &n2) == LS_OK);
    CHECK_EQ_INT(n1, n2);
    CHECK(memcmp(o1, o2, sizeof(int) * n1) == 0);
    free(x), free(y), free(h);
    ls_engine_free(eq), ls_engine_free(el), ls_engine_free(a), ls_engine_free(b);
}

/* Stage engines: the widths given are the stage's own, indexed from its first layer; layers
 * outside it report 0. The weight bytes, by hand: per layer qkv 192x64 + proj 64x64 + fc
 * 160x64 + mproj 64x160 = 36864 weights, 2 bytes each at 16 bits, 4 at 32. A range below 0
 * is refused by name; load_params only into an all-fp32 engine. */
static void test_stage_bits_and_bytes(void) {
    int bits[8] = {16, 32, 16, 32}, sb[4] = {32, 16, 4, 4}; /* the stage [1, 3) takes sb[0], sb[1] */
    ls_engine_opts o = ls_engine_defaults(), os = ls_engine_defaults();
    o.bits = bits;
    os.layer_begin = 1, os.layer_end = 3, os.bits = sb;
    ls_engine *e, *s, *bad;
    CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
    CHECK(ls_engine_open(&s, ckpt, &os) == LS_OK);
    CHECK_EQ_INT(ls_engine_weight_bytes(e), 36864 * (2 + 4 + 2 + 4));
    CHECK_EQ_INT(ls_engine_weight_bytes(s), 36864 * (4 + 2));
    CHECK_EQ_INT(ls_engine_layer_bits(s, 0), 0);
    CHECK_EQ_INT(ls_engine_layer_bits(s, 1), 32);
    CHECK_EQ_INT(ls_engine_layer_bits(s, 2), 16);
    CHECK_EQ_INT(ls_engine_layer_bits(s, 3), 0);
    CHECK_EQ_INT(ls_engine_layer_bits(e, 4), 0);
    int b = -1, en = -1;
    ls_engine_range(s, &b, &en);
    CHECK(b == 1 && en == 3);
    size_t n = ls_model_config_num_params(&cfg);
    float *zero = calloc(n, sizeof(float));
    CHECK(ls_engine_load_params(e, zero, n) == LS_EUNSUPPORTED); /* layers held at 16 bits */
    free(zero);
    os.layer_begin = -1, os.layer_end = 2, os.bits = NULL;
    CHECK(ls_engine_open(&bad, ckpt, &os) == LS_EINVAL && strstr(ls_errmsg(), "layer range [-1, 2)"));
    ls_engine_free(e), ls_engine_free(s);
}

/* Greedy generation stops at EOS, and at the context. Zero blocks, a zero final LayerNorm
 * weight and bias e_0: every position's logits are wte[:, 0], so 0 everywhere but EOS's row
 * (wte[EOS][0] = w). w = 1: EOS at once; w = -1: token 0 until the context is full (a
 * 30-token prompt in 32 positions: 3 tokens, the last predicted at position 31). */
static void test_generate_stops(void) {
    size_t n = ls_model_config_num_params(&cfg);
    for (int w = 1; w >= -1; w -= 2) {
        float *p = calloc(n, sizeof(float)), *q = p;
        for (int i = 0; i < ls_model_layout_count(&cfg); i++) {
            ls_tensor_spec s;
            CHECK(ls_model_layout(&cfg, i, &s) == LS_OK);
            if (s.layer < 0 && s.kind == LS_GT_WTE) q[(size_t)LS_TOK_EOS * cfg.d_model] = (float)w;
            if (s.layer < 0 && s.kind == LS_GT_LNFB) q[0] = 1;
            q += s.numel;
        }
        ls_engine *e;
        CHECK(ls_engine_new(&e, &cfg, p, NULL) == LS_OK);
        int prompt[30], out[8] = {0}, n_out = -1;
        for (int i = 0; i < 30; i++) prompt[i] = 'a' + i % 26;
        CHECK(ls_engine_generate(e, prompt, w > 0 ? 3 : 30, 8, out, &n_out) == LS_OK);
        if (w > 0) {
            CHECK_EQ_INT(n_out, 1);
            CHECK_EQ_INT(out[0], LS_TOK_EOS);
        } else {
            CHECK_EQ_INT(n_out, 3);
            CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0);
        }
        ls_engine_free(e);
        free(p);
    }
}

/* eval through the engine (fp32 weights) == the training module's evaluator */
static void test_eval_matches_train(void) {
    const char *docs[2] = {"the quick brown fox jumps over the lazy dog. the end of one document.",
                           "a second, shorter document: 0123456789 and some more words to fill it up well."};
    size_t lens[2] = {strlen(docs[0]), strlen(docs[1])};
    ls_corpus_opts co = ls_corpus_defaults();
    co.heldout_frac = 0.5;
    ls_corpus *c;
    CHECK(ls_corpus_from_docs(&c, "docs", docs, lens, 2, &co) == LS_OK);
    size_t n;
    const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_ALL, &n);
    ls_model *m;
    CHECK(ls_ckpt_load(ckpt, LS_CKPT_WEIGHTS, &m, NULL) == LS_OK);
    ls_eval_result rf, re, r4;
    CHECK(ls_eval_tokens(m, tok, n, 16, 4, 0, &rf) == LS_OK);
    int b32[8] = {32, 32, 32, 32}, b4[8] = {4, 4, 4, 4};
    ls_engine_opts o = ls_engine_defaults();
    o.bits = b32;
    ls_engine *e, *e4;
    CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
    o.bits = b4;
    CHECK(ls_engine_open(&e4, ckpt, &o) == LS_OK);
    CHECK(ls_engine_eval_tokens(e, tok, n, 16, 0, &re) == LS_OK);
    CHECK(ls_engine_eval_tokens(e4, tok, n, 16, 0, &r4) == LS_OK);
    CHECK_EQ_INT(re.tokens, rf.tokens);
    CHECK_EQ_INT(re.bytes, rf.bytes);
    CHECK_NEAR(re.bits_per_byte, rf.bits_per_byte, 1e-4);
    fprintf(stderr, "  bits/byte: ls_eval_tokens %.5f, engine fp32 %.5f, engine 4-bit %.5f\n", rf.bits_per_byte,
            re.bits_per_byte, r4.bits_per_byte);
    CHECK(fabs(r4.bits_per_byte - rf.bits_per_byte) > 1e-6); /* quantization changes something */
    /* max_tokens = 32 at seq 16: two whole windows spread over the text, at 0 and at window
     * avail/2, every target in them but BOS; the same windows as ls_eval_tokens with a cap */
    if (n > 40) {
        ls_eval_result rm, rmf;
        CHECK(ls_engine_eval_tokens(e, tok, n, 16, 32, &rm) == LS_OK);
        CHECK(ls_eval_tokens(m, tok, n, 16, 4, 32, &rmf) == LS_OK);
        size_t avail = (n - 1) / 16, second = (avail / 2) * 16;
        CHECK(avail > 2);
        int64_t want = 0;
        for (int i = 1; i <= 16; i++) want += (tok[i] != LS_TOK_BOS) + (tok[second + (size_t)i] != LS_TOK_BOS);
        CHECK_EQ_INT(rm.tokens, want);
        CHECK_EQ_INT(rmf.tokens, want);
        CHECK_EQ_INT(rm.bytes, rmf.bytes);
        CHECK_NEAR(rm.bits_per_byte, rmf.bits_per_byte, 1e-4);
    } else {
        CHECK_MSG(0, "corpus of %zu tokens too short for the max_tokens check", n);
    }
    /* windows of the whole context (32) are allowed, and agree too */
    ls_eval_result rc32, rf32;
    CHECK(ls_engine_eval_tokens(e, tok, n, 32, 0, &rc32) == LS_OK);
    CHECK(ls_eval_tokens(m, tok, n, 32, 4, 0, &rf32) == LS_OK);
    CHECK(rc32.tokens > 0 && rc32.tokens == rf32.tokens);
    CHECK_NEAR(rc32.bits_per_byte, rf32.bits_per_byte, 1e-4);
    CHECK(ls_engine_eval_tokens(e, tok, n, 33, 0, &rc32) == LS_EINVAL);
    CHECK_EQ_INT(ls_ckpt_is_quantized(ckpt), 0);
    ls_engine_free(e), ls_engine_free(e4);
    ls_model_free(m);
    ls_corpus_free(c);
}

int main(void) {
    cfg = (ls_model_config){.vocab = LS_VOCAB, .n_ctx = 32, .n_layer = 4, .n_head = 4, .d_model = 64, .d_ff = 160};
    snprintf(ckpt, sizeof ckpt, "/tmp/llmsys_test_engine_%d.safetensors", (int)getpid());
    snprintf(qckpt, sizeof qckpt, "/tmp/llmsys_test_engine_q_%d.safetensors", (int)getpid());
    snprintf(qckpt_v1, sizeof qckpt_v1, "/tmp/llmsys_test_engine_q1_%d.safetensors", (int)getpid());
    RUN(test_vs_model);
    RUN(test_decode_batch);
    RUN(test_qckpt_and_stages);
    RUN(test_stage_bits_and_bytes);
    RUN(test_generate_stops);
    RUN(test_eval_matches_train);
    unlink(ckpt);
    unlink(qckpt);
    unlink(qckpt_v1);
    return TEST_RESULT();
}
