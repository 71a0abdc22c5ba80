/* test_layout.c - what the model module owns for every other module: the checkpoint
 * layout table (against the model's own tensors), the checkpoint opener's checks, the
 * shared Adam update (against a float64 reference) and the inference pass with both
 * kernel sets (against the training forward). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "llmsys/model.h"
#include "test.h"

static void test_table(void) {
    const char *names[2] = {"tiny", "small"};
    for (int n = 0; n < 2; n++) {
        ls_model_config c;
        ls_model *m;
        CHECK(ls_model_config_named(names[n], &c) == LS_OK);
        CHECK(ls_model_init(&m, &c, 1) == LS_OK);
        int count = ls_model_layout_count(&c);
        CHECK_EQ_INT(count, ls_model_num_tensors(m));
        size_t total = 0;
        for (int i = 0; i < count; i++) {
            ls_tensor_spec s;
            ls_param p = ls_model_tensor(m, i);
            CHECK(ls_model_layout(&c, i, &s) == LS_OK);
            CHECK_MSG(strcmp(s.name, p.name) == 0, "tensor %d: %s vs %s", i, s.name, p.name);
            CHECK(s.ndim == p.ndim && s.shape[0] == p.shape[0] && s.shape[1] == p.shape[1] && s.numel == p.numel);
            total += s.numel;
            int l, k;
            if (s.layer >= 0) {
                CHECK(ls_model_layout_parse(s.name, &l, &k) == 1 && l == s.layer && k == s.kind);
                CHECK_EQ_INT(ls_model_layout_index(&c, l, k), i);
                if (s.linear >= 0) {
                    int rows, cols;
                    ls_model_linear_shape(&c, s.linear, &rows, &cols);
                    CHECK(s.ndim == 2 && rows == s.shape[0] && cols == s.shape[1]);
                    CHECK_EQ_INT(ls_model_linear_tensor(s.linear), s.kind);
                }
            } else {
                CHECK(ls_model_layout_parse(s.name, &l, &k) == 0);
                CHECK_EQ_INT(ls_model_layout_index(&c, -1, s.kind), i);
            }
        }
        CHECK(total == ls_model_num_params(m));
        ls_tensor_spec s;
        CHECK(ls_model_layout(&c, count, &s) == LS_EINVAL);
        CHECK(ls_model_layout(&c, ls_model_layout_index(&c, -1, LS_GT_LNFB), &s) == LS_OK && !strcmp(s.name, "lnf.b"));
        ls_model_free(m);
    }
    int l, k;
    CHECK(ls_model_layout_parse("h.3.mlp.proj.w", &l, &k) == 1 && l == 3 && k == LS_LT_FCPW);
    CHECK(ls_model_layout_parse("h.3.mlp.proj.w.q", &l, &k) == 0);
    CHECK(ls_model_layout_parse("h.-1.ln1.w", &l, &k) == 0);
    CHECK(ls_model_layout_parse("h.x.ln1.w", &l, &k) == 0);
    CHECK(ls_model_linear_of(LS_LT_QKVB) == -1 && ls_model_linear_of(LS_LT_FCW) == LS_LIN_FC);
}

/* Writes a weightless file with the given metadata (NULL values are left out). */
static void write_meta(const char *path, const char *cfg, const char *ver, const char *quant, const char *tok) {
    ls_st_writer *w;
    float x = 1.0f;
    int64_t one = 1;
    CHECK(ls_st_writer_init(&w) == LS_OK);
    if (cfg) CHECK(ls_st_writer_meta(w, "llmsys.config", cfg) == LS_OK);
    if (ver) CHECK(ls_st_writer_meta(w, "llmsys.ckpt", ver) == LS_OK);
    if (quant) CHECK(ls_st_writer_meta(w, "llmsys.quant", quant) == LS_OK);
    if (tok) CHECK(ls_st_writer_meta(w, "llmsys.tokenizer", tok) == LS_OK);
    CHECK(ls_st_writer_add(w, "x", LS_DT_F32, 1, &one, &x) == LS_OK);
    CHECK(ls_st_writer_write(w, path) == LS_OK);
    ls_st_writer_free(w);
}

static void test_opener(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/llmsys-layout-%d.safetensors", (int)getpid());
    const char *cfg = "{\"vocab\":259,\"n_ctx\":16,\"n_layer\":3,\"n_head\":2,\"d_model\":8,\"d_ff\":32}";
    ls_st_file *f;
    ls_model_config c;
    int bits[3], group;
    write_meta(path, cfg, "1", NULL, NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_OK && c.n_layer == 3 && c.d_ff == 32);
    CHECK_EQ_INT(ls_ckpt_quant_meta(f, 3, &group, bits), 0);
    CHECK(group == 64 && bits[0] == 32 && bits[2] == 32);
    const float *d;
    CHECK(ls_ckpt_tensor(f, &c, 0, &d) == LS_EFORMAT); /* no "wte" */
    ls_st_close(f);
    write_meta(path, cfg, NULL, "{\"version\":1,\"group\":32,\"bits\":[8,4,3]}", NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_OK);
    CHECK_EQ_INT(ls_ckpt_quant_meta(f, 3, &group, bits), 1);
    CHECK(group == 32 && bits[0] == 8 && bits[1] == 4 && bits[2] == 3);
    CHECK(ls_ckpt_quant_meta(f, 2, &group, bits) == LS_EFORMAT);
    ls_st_close(f);
    write_meta(path, cfg, NULL, "{\"version\":3,\"group\":32,\"bits\":[8,4,3]}", NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_OK);
    CHECK(ls_ckpt_quant_meta(f, 3, &group, bits) == LS_EFORMAT && strstr(ls_errmsg(), "format version 3"));
    ls_st_close(f);
    write_meta(path, cfg, NULL, "{\"version\":0,\"group\":32,\"bits\":[8,4,3]}", NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_OK);
    CHECK(ls_ckpt_quant_meta(f, 3, &group, bits) == LS_EFORMAT && strstr(ls_errmsg(), "format version 0"));
    ls_st_close(f);
    write_meta(path, cfg, NULL, "{\"version\":1,\"group\":32,\"bits\":[8,5,3]}", NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_OK);
    CHECK(ls_ckpt_quant_meta(f, 3, &group, bits) == LS_EFORMAT && strstr(ls_errmsg(), "bits[1]"));
    ls_st_close(f);
    write_meta(path, cfg, "2", NULL, NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_EUNSUPPORTED && strstr(ls_errmsg(), "version 2"));
    write_meta(path, NULL, "1", NULL, NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_EFORMAT && strstr(ls_errmsg(), "not an llmsys checkpoint"));
    write_meta(path, "{\"vocab\":259,\"n_ctx\":16,\"n_layer\":3,\"n_head\":3,\"d_model\":8,\"d_ff\":32}", NULL, NULL,
               NULL);
    CHECK(ls_ckpt_open(path, &f, &c) == LS_EFORMAT);
    /* the vocabulary: bytes need no tokenizer; any other size needs one of exactly that size */
    const char *text = "abababab cdcdcdcd abcdabcd";
    size_t tl = strlen(text);
    ls_bpe_train_opts bo = {.vocab_size = 262, .model_specials = 1};
    ls_bpe *bpe = NULL, *got = (ls_bpe *)&got;
    CHECK(ls_bpe_train(&text, &tl, 1, &bo, &bpe) == LS_OK && bpe);
    char *tj = bpe ? ls_bpe_to_json(bpe) : NULL;
    const int V = bpe ? ls_bpe_vocab_size(bpe) : 0;
    char vcfg[160], ocfg[160];
    snprintf(vcfg, sizeof vcfg, "{\"vocab\":%d,\"n_ctx\":16,\"n_layer\":3,\"n_head\":2,\"d_model\":8,\"d_ff\":32}", V);
    snprintf(ocfg, sizeof ocfg, "{\"vocab\":%d,\"n_ctx\":16,\"n_layer\":3,\"n_head\":2,\"d_model\":8,\"d_ff\":32}",
             V + 1);
    write_meta(path, cfg, NULL, NULL, NULL);
    CHECK(ls_ckpt_tokenizer_load(path, NULL, &got) == LS_OK && got == NULL);
    write_meta(path, vcfg, NULL, NULL, tj);
    CHECK(ls_ckpt_tokenizer_load(path, NULL, &got) == LS_OK && got && ls_bpe_vocab_size(got) == V);
    ls_bpe_free(got);
    write_meta(path, vcfg, NULL, NULL, NULL);
    CHECK(ls_ckpt_tokenizer_load(path, NULL, &got) == LS_EFORMAT && !got && strstr(ls_errmsg(), "no llmsys.tokenizer"));
    write_meta(path, ocfg, NULL, NULL, tj);
    CHECK(ls_ckpt_tokenizer_load(path, NULL, &got) == LS_EFORMAT && !got && strstr(ls_errmsg(), "for a vocabulary of"));
    free(tj);
    ls_bpe_free(bpe);
    unlink(path);
}

/* Both bias-correction forms against float64 Adam over 5 steps. */
static void test_adam(void) {
    enum { N = 257, STEPS = 5 };
    for (int recip = 0; recip < 2; recip++) {
        float p[N], g[N], m[N] = {0}, v[N] = {0};
        double pd[N], md[N] = {0}, vd[N] = {0};
        ls_rng r;
        ls_rng_seed(&r, 7);
        for (int i = 0; i < N; i++) pd[i] = p[i] = ls_rng_normal(&r);
        for (int t = 1; t <= STEPS; t++) {
            for (int i = 0; i < N; i++) g[i] = ls_rng_normal(&r);
            ls_adam_hparams h = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, t, recip};
            ls_adam_update(p, g, m, v, N, &h);
            for (int i = 0; i < N; i++) {
                double gi = 0.5 * g[i];
                md[i] = 0.9 * md[i] + 0.1 * gi;
                vd[i] = 0.999 * vd[i] + 0.001 * gi * gi;
                double mh = md[i] / (1 - pow(0.9, t)), vh = vd[i] / (1 - pow(0.999, t));
                pd[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * pd[i]);
            }
        }
        double worst = 0;
        for (int i = 0; i < N; i++) worst = fmax(worst, fabs(p[i] - pd[i]));
        fprintf(stderr, "  adam (recip %d): max |p - p64| = %.2g\n", recip, worst);
        CHECK_MSG(worst < 1e-5, "recip %d: max |p - p64| = %g", recip, worst);
    }
}

/* The inference pass over the model's own fp32 weights, with the scalar and the sgemm
 * kernels, against the training forward's logits (two sequences in one micro-batch:
 * one prefilled whole, one decoded token by token). */
static void test_inference_pass(void) {
    ls_model_config c;
    ls_model *m;
    CHECK(ls_model_config_named("tiny", &c) == LS_OK);
    CHECK(ls_model_init(&m, &c, 3) == LS_OK);
    enum { T = 12 };
    int tok[T];
    for (int t = 0; t < T; t++) tok[t] = (t * 37 + 11) % 256;
    ls_model_forward(m, tok, NULL, 1, T);
    int V = c.vocab, C = c.d_model, Tn = c.n_ctx;
    float *ref = malloc(sizeof(float) * T * V), *out = malloc(sizeof(float) * (T + 1) * V);
    float *kv = calloc((size_t)c.n_layer * 2 * 2 * Tn * C, sizeof(float));
    ls_gpt_block *b = calloc((size_t)c.n_layer, sizeof *b);
    CHECK(ref && out && kv && b);
    memcpy(ref, ls_model_logits(m), sizeof(float) * T * V);
    for (int l = 0; l < c.n_layer; l++) {
#define W(k) ls_model_tensor(m, ls_model_layout_index(&c, l, k)).data
        b[l] = (ls_gpt_block){W(LS_LT_LN1W), W(LS_LT_LN1B), W(LS_LT_LN2W), W(LS_LT_LN2B), {{0}}, NULL, NULL};
        for (int j = 0; j < LS_LIN_COUNT; j++) {
            int k = ls_model_linear_tensor(j), rows, cols;
            ls_model_linear_shape(&c, j, &rows, &cols);
            b[l].lin[j] = (ls_linear){W(k), NULL, W(k + 1), rows, cols};
        }
#undef W
        b[l].kcache = kv + (size_t)l * 4 * Tn * C;
        b[l].vcache = b[l].kcache + (size_t)2 * Tn * C;
    }
    int nt = ls_model_layout_count(&c);
    for (int blas = 0; blas < 2; blas++) {
        ls_gpt_weights w = {c, 0, c.n_layer, b, ls_model_tensor(m, 0).data, ls_model_tensor(m, 1).data,
                            ls_model_tensor(m, nt - 2).data, ls_model_tensor(m, nt - 1).data,
                            {ls_model_tensor(m, 0).data, NULL, NULL, V, C}, 2, 1, blas};
        ls_gpt_scratch sc = {0};
        /* slot 1: the first T-1 tokens prefilled with all logits */
        ls_gpt_seq pre = {1, 0, T - 1};
        CHECK(ls_gpt_forward(&w, &sc, &pre, 1, tok, NULL, out, 1) == LS_OK);
        double worst = 0;
        for (size_t i = 0; i < (size_t)(T - 1) * V; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
        /* slot 0 decoded one token at a time, next to slot 1's last token */
        for (int t = 0; t < T; t++) {
            ls_gpt_seq d[2] = {{0, t, 1}, {1, T - 1, 1}};
            int two[2] = {tok[t], tok[T - 1]};
            int n = t == T - 1 ? 2 : 1;
            CHECK(ls_gpt_forward(&w, &sc, d, n, two, NULL, out, 0) == LS_OK);
            for (int v = 0; v < V; v++) worst = fmax(worst, fabs(out[v] - ref[(size_t)t * V + v]));
            if (n == 2)
                for (int v = 0; v < V; v++) worst = fmax(worst, fabs(out[V + v] - ref[(size_t)t * V + v]));
        }
        fprintf(stderr, "  inference pass (kernels %d): max |logit - forward| = %.2g\n", blas, worst);
        CHECK_MSG(worst < 1e-4, "kernels %d: max |logit - forward| = %g", blas, worst);
        ls_gpt_seq bad = {2, 0, 1};
        CHECK(ls_gpt_forward(&w, &sc, &bad, 1, tok, NULL, out, 0) == LS_EINVAL);
        bad = (ls_gpt_seq){0, Tn - 1, 2};
        CHECK(ls_gpt_forward(&w, &sc, &bad, 1, tok, NULL, out, 0) == LS_EINVAL);
        ls_gpt_scratch_free(&sc);
    }
    free(ref), free(out), free(kv), free(b);
    ls_model_free(m);
}

int main(void) {
    ls_model_set_threads(2);
    RUN(test_table);
    RUN(test_opener);
    RUN(test_adam);
    RUN(test_inference_pass);
    return TEST_RESULT();
}
