/* test_model.c - the GPT end to end on `tiny`: config round trip and validation, KV-cache
 * decoding vs the full forward, determinism, overfitting a repeated string, sampling
 * filters, bad input. */
#include "llmsys/model.h"
#include "test.h"

#include <limits.h>
#include <stdint.h>

static ls_model *tiny(uint64_t seed) {
    ls_model_config c;
    ls_model *m = NULL;
    CHECK(ls_model_config_named("tiny", &c) == LS_OK);
    CHECK(ls_model_init(&m, &c, seed) == LS_OK);
    return m;
}

static void test_config(void) {
    ls_model_config t, s, r;
    CHECK(ls_model_config_named("tiny", &t) == LS_OK);
    CHECK(ls_model_config_named("small", &s) == LS_OK);
    CHECK(ls_model_config_named("huge", &r) == LS_EINVAL);
    size_t nt = ls_model_config_num_params(&t), ns = ls_model_config_num_params(&s);
    fprintf(stderr, "  tiny %zu params, small %zu params\n", nt, ns);
    CHECK(nt <= 500000);
    CHECK(ns >= 5000000 && ns <= 10000000);
    char *j = ls_model_config_to_json(&s);
    CHECK(j != NULL);
    CHECK(strcmp(j, "{\"vocab\":259,\"n_ctx\":128,\"n_layer\":7,\"n_head\":8,\"d_model\":256,\"d_ff\":1024}") == 0);
    CHECK(ls_model_config_from_json(j, &r) == LS_OK);
    CHECK(memcmp(&r, &s, sizeof r) == 0);
    free(j);
    CHECK(ls_model_config_from_json("{\"vocab\":259,\"n_ctx\":8,\"n_layer\":1,\"n_head\":3,\"d_model\":8,\"d_ff\":8}",
                                    &r) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "divisible") != NULL);
    CHECK(ls_model_config_from_json("{\"vocab\":259,\"n_ctx\":8,\"n_layer\":1,\"n_head\":2,\"d_model\":8}", &r) ==
          LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "d_ff") != NULL);
    CHECK(ls_model_config_from_json(
              "{\"vocab\":259,\"n_ctx\":8,\"n_layer\":1,\"n_head\":2,\"d_model\":8,\"d_ff\":8,\"x\":1}", &r) ==
          LS_EFORMAT);
    CHECK(ls_model_config_from_json("[1,2]", &r) == LS_EFORMAT);
    CHECK(ls_model_config_from_json("{\"vocab\":259,", &r) == LS_EFORMAT);
    ls_model_config bad = t;
    bad.n_ctx = 0;
    CHECK(ls_model_config_validate(&bad) == LS_EINVAL && strstr(ls_errmsg(), "n_ctx"));
    bad = t;
    bad.vocab = 258; /* below bytes + BOS/EOS/PAD */
    CHECK(ls_model_config_validate(&bad) == LS_EINVAL && strstr(ls_errmsg(), "vocab"));
    bad.vocab = 65537; /* ids are stored as uint16 */
    CHECK(ls_model_config_validate(&bad) == LS_EINVAL && strstr(ls_errmsg(), "vocab"));
    bad.vocab = 4096; /* a BPE vocabulary */
    CHECK(ls_model_config_validate(&bad) == LS_OK);
    bad = t;
    bad.d_ff = 65536; /* the largest hidden width, inside the parameter bound at tiny's other sizes */
    CHECK(ls_model_config_validate(&bad) == LS_OK);
    bad.d_ff = 65537;
    CHECK(ls_model_config_validate(&bad) == LS_EINVAL && strstr(ls_errmsg(), "d_ff"));
    bad.d_ff = 0;
    CHECK(ls_model_config_validate(&bad) == LS_EINVAL && strstr(ls_errmsg(), "d_ff"));
    /* the batch that fits this machine's memory is per rank: n rows alone, 2n over 2 ranks */
    CHECK(ls_model_batch_fit(&s, INT_MAX, 1, 128) == LS_EINVAL);
    const char *most = strstr(ls_errmsg(), "at most ");
    long long n1 = most ? atoll(most + 8) : 0;
    CHECK_MSG(n1 >= 1 && n1 < INT_MAX / 4, "%s", ls_errmsg());
    if (n1 >= 1 && n1 < INT_MAX / 4) {
        CHECK(ls_model_batch_fit(&s, (int)n1, 1, 128) == LS_OK);
        CHECK(ls_model_batch_fit(&s, (int)n1 + 1, 1, 128) == LS_EINVAL);
        CHECK(ls_model_batch_fit(&s, 2 * (int)n1, 2, 128) == LS_OK);
        CHECK(ls_model_batch_fit(&s, 2 * (int)n1 + 2, 2, 128) == LS_EINVAL);
    }

    ls_model *m = tiny(1);
    CHECK_EQ_INT(ls_model_num_params(m), nt);
    CHECK_EQ_INT(ls_model_num_tensors(m), 2 + 12 * t.n_layer + 2);
    size_t sum = 0;
    for (int i = 0; i < ls_model_num_tensors(m); i++) {
        ls_param p = ls_model_tensor(m, i);
        CHECK(p.data == ls_model_params(m) + sum);
        sum += p.numel;
    }
    CHECK_EQ_INT(sum, nt);
    ls_param q = ls_model_tensor(m, ls_model_find_tensor(m, "h.1.attn.qkv.w"));
    CHECK(q.ndim == 2 && q.shape[0] == 3 * t.d_model && q.shape[1] == t.d_model);
    CHECK(ls_model_find_tensor(m, "lnf.b") == ls_model_num_tensors(m) - 1);
    ls_model_free(m);
}

static void make_batch(int *tok, int *tgt, int B, int T, uint64_t seed) {
    ls_rng r;
    ls_rng_seed(&r, seed);
    for (int i = 0; i < B * T; i++) tok[i] = (int)ls_rng_below(&r, LS_VOCAB);
    for (int i = 0; i < B * T; i++) tgt[i] = (int)ls_rng_below(&r, LS_VOCAB);
}

static void test_kv_matches_forward(void) {
    ls_model *m = tiny(7);
    int T = 40;
    int tok[64], tgt[64];
    make_batch(tok, tgt, 1, T, 3);
    ls_model_forward(m, tok, NULL, 1, T);
    const int V = LS_VOCAB;
    float *full = malloc((size_t)T * V * sizeof(float));
    memcpy(full, ls_model_logits(m), (size_t)T * V * sizeof(float));
    CHECK(ls_model_kv_reset(m) == LS_OK);
    double maxd = 0;
    for (int t = 0; t < T; t++) {
        const float *l = ls_model_kv_step(m, tok[t]);
        CHECK(l != NULL);
        if (!l) break;
        for (int i = 0; i < V; i++) maxd = fmax(maxd, fabs(l[i] - full[(size_t)t * V + i]));
    }
    fprintf(stderr, "  kv-cache vs full forward: max |dlogit| = %.3g\n", maxd);
    CHECK(maxd < 1e-4);
    free(full);
    ls_model_free(m);
}

static void test_bad_input(void) {
    ls_model *m = tiny(1);
    int tok[4] = {1, 2, 3, 300}, tgt[4] = {1, 2, -1, 4};
    CHECK(isnan(ls_model_forward(m, tok, tgt, 1, 4)));
    CHECK(strstr(ls_errmsg(), "token 300") != NULL);
    tok[3] = 4;
    tgt[0] = -2;
    CHECK(isnan(ls_model_forward(m, tok, tgt, 1, 4)));
    CHECK(isnan(ls_model_forward(m, tok, NULL, 1, 65)));
    CHECK(isnan(ls_model_forward(m, tok, NULL, 0, 4)));
    CHECK(ls_model_backward_checked(m) == LS_ESTATE);
    ls_model_free(m);
}

/* Activations regrow and shrink with (B, T): results never depend on earlier shapes;
 * per-position losses sum to the mean loss times the valid count. */
static void test_shapes_and_losses(void) {
    ls_model *a = tiny(4), *b = tiny(4);
    int tok[200], tgt[200];
    make_batch(tok, tgt, 3, 60, 12);
    ls_model_forward(a, tok, tgt, 2, 16);
    ls_model_forward(a, tok, tgt, 3, 60);
    tgt[2] = -1;
    float la = ls_model_forward(a, tok, tgt, 1, 5);
    float lb = ls_model_forward(b, tok, tgt, 1, 5);
    CHECK(la == lb);
    CHECK(memcmp(ls_model_logits(a), ls_model_logits(b), 5 * LS_VOCAB * sizeof(float)) == 0);
    const float *pl = ls_model_losses(a);
    CHECK(pl != NULL);
    if (pl) {
        double sum = 0;
        for (int i = 0; i < 5; i++) sum += pl[i];
        CHECK(pl[2] == 0.0f);
        CHECK_NEAR(sum, 4.0 * la, 1e-5);
    }
    ls_model_forward(a, tok, NULL, 1, 5);
    CHECK(ls_model_losses(a) == NULL);
    for (int i = 0; i < 5; i++) tgt[i] = -1; /* no valid target: loss 0, zero gradient */
    ls_model_zero_grad(a);
    CHECK(ls_model_forward(a, tok, tgt, 1, 5) == 0.0f);
    CHECK(ls_model_backward_checked(a) == LS_OK);
    CHECK(ls_model_grad_norm(a) == 0.0f);
    ls_model_free(a);
    ls_model_free(b);
}

/* Overfit: a tiny model learns a short repeated string. */
static void test_overfit(void) {
    ls_model *m = tiny(42);
    const char *s = "hello llmsys! ";
    int B = 4, T = 32, tok[128], tgt[128];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int p = b * 3 + t;
            tok[b * T + t] = (unsigned char)s[p % 14];
            tgt[b * T + t] = (unsigned char)s[(p + 1) % 14];
        }
    ls_adamw_config oc = ls_adamw_defaults();
    oc.lr = 3e-3f;
    oc.warmup_steps = 5;
    oc.total_steps = 80;
    float first = 0, last = 0;
    for (int step = 0; step < 80; step++) {
        ls_model_zero_grad(m);
        float loss = ls_model_forward(m, tok, tgt, B, T);
        ls_model_backward(m);
        ls_model_adamw_step(m, &oc, step);
        if (step == 0) first = loss;
        last = loss;
    }
    fprintf(stderr, "  overfit: loss %.4f -> %.4f\n", first, last);
    CHECK(first > 5.0f); /* ~ln(259) = 5.56 at init */
    CHECK(last < 0.1f);  /* memorised */
    /* greedy generation continues the string */
    int prompt[3] = {'h', 'e', 'l'}, out[16], n = 0;
    ls_sample_config sc = {0.0f, 0, 1.0f};
    ls_rng r;
    ls_rng_seed(&r, 1);
    CHECK(ls_model_generate(m, prompt, 3, 8, &sc, &r, out, &n) == LS_OK);
    CHECK_EQ_INT(n, 8);
    char got[9] = {0};
    for (int i = 0; i < n && i < 8; i++) got[i] = (char)out[i];
    fprintf(stderr, "  greedy continuation of 'hel': '%s'\n", got);
    CHECK(strcmp(got, "lo llmsy") == 0);
    ls_model_free(m);
}

/* Same seed, data and thread count -> bit-identical losses and parameters. Another thread
 * count splits the sgemm row blocks differently (OpenBLAS then blocks some products
 * differently), so there only float tolerance holds. */
static void run_losses(int threads, float *losses, int steps, float *final_param) {
    ls_model_set_threads(threads);
    ls_model *m = tiny(5);
    int B = 3, T = 33, tok[99], tgt[99]; /* odd sizes: uneven thread splits */
    ls_adamw_config oc = ls_adamw_defaults();
    oc.total_steps = steps;
    for (int s = 0; s < steps; s++) {
        make_batch(tok, tgt, B, T, 100 + (uint64_t)s);
        tgt[s] = -1;
        ls_model_zero_grad(m);
        losses[s] = ls_model_forward(m, tok, tgt, B, T);
        ls_model_backward(m);
        ls_model_adamw_step(m, &oc, s);
    }
    *final_param = ls_model_params(m)[12345];
    ls_model_free(m);
}

static void test_determinism(void) {
    enum { S = 6 };
    float a[S], b[S], c[S], pa, pb, pc;
    run_losses(2, a, S, &pa);
    run_losses(2, b, S, &pb);
    run_losses(1, c, S, &pc);
    ls_model_set_threads(2);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(&pa, &pb, sizeof pa) == 0);
    for (int s = 0; s < S; s++) CHECK_NEAR(a[s], c[s], 1e-5);
    CHECK_NEAR(pa, pc, 1e-5);
    for (int s = 0; s < S; s++) fprintf(stderr, "  step %d loss %.9g / %.9g / %.9g (1 thread)\n", s, a[s], b[s], c[s]);
}

static void test_sampling(void) {
    enum { V = 10 };
    float logits[V] = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, 0.0f, -3.0f, 1.0f, 0.9f, 0.2f};
    float p[V];
    ls_rng r;
    ls_rng_seed(&r, 3);
    /* greedy: argmax, first of equal maxima */
    ls_sample_config g = {0.0f, 0, 1.0f};
    CHECK_EQ_INT(ls_sample_logits(logits, V, &g, &r), 1);
    CHECK_EQ_INT(ls_sample_probs(logits, V, &g, p), 1);
    CHECK(p[1] == 1.0f);
    /* plain temperature: softmax(l/T) exactly */
    ls_sample_config t = {0.7f, 0, 1.0f};
    CHECK_EQ_INT(ls_sample_probs(logits, V, &t, p), V);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i] / 0.7);
    for (int i = 0; i < V; i++) CHECK_NEAR(p[i], exp(logits[i] / 0.7) / z, 1e-6);
    /* top-k = 3 keeps {1, 3, 4} (ties by lower index), renormalised */
    ls_sample_config k = {1.0f, 3, 1.0f};
    CHECK_EQ_INT(ls_sample_probs(logits, V, &k, p), 3);
    double zk = exp(2.0) * 2 + exp(1.5);
    for (int i = 0; i < V; i++) {
        double want = (i == 1 || i == 3) ? exp(2.0) / zk : i == 4 ? exp(1.5) / zk : 0.0;
        CHECK_NEAR(p[i], want, 1e-6);
    }
    /* top-p: the smallest prefix by probability whose mass reaches p */
    double full[V], sorted[V];
    for (int i = 0; i < V; i++) full[i] = exp(logits[i]) / 1.0;
    z = 0;
    for (int i = 0; i < V; i++) z += full[i];
    for (int i = 0; i < V; i++) full[i] /= z;
    /* sorted order: 1,3,4,7,8,0,9,5,2,6 */
    const int order[V] = {1, 3, 4, 7, 8, 0, 9, 5, 2, 6};
    double cum = 0;
    for (int i = 0; i < V; i++) sorted[i] = (cum += full[order[i]]);
    for (int n = 1; n <= 4; n++) {
        /* a threshold just above the mass of n-1 tokens keeps exactly n */
        float tp = (float)(n == 1 ? 0.05 : sorted[n - 2] + 0.01);
        ls_sample_config pp = {1.0f, 0, tp};
        CHECK_EQ_INT(ls_sample_probs(logits, V, &pp, p), n);
        for (int i = 0; i < n; i++) CHECK_NEAR(p[order[i]], full[order[i]] / sorted[n - 1], 1e-6); /* renormalised */
        for (int i = n; i < V; i++) CHECK(p[order[i]] == 0.0f);
    }
    /* a threshold just below the mass of n tokens keeps exactly n (no slack past top_p) */
    for (int n = 1; n <= 4; n++) {
        ls_sample_config pp = {1.0f, 0, (float)(sorted[n - 1] - 1e-4)};
        CHECK_EQ_INT(ls_sample_probs(logits, V, &pp, p), n);
    }
    /* top-k then top-p */
    ls_sample_config kp = {1.0f, 2, 0.99f};
    CHECK_EQ_INT(ls_sample_probs(logits, V, &kp, p), 2);
    /* draws follow the kept distribution (4 tokens; 20000 draws; 4-sigma bounds) */
    ls_sample_config s4 = {1.0f, 4, 1.0f};
    CHECK_EQ_INT(ls_sample_probs(logits, V, &s4, p), 4);
    int cnt[V] = {0}, n = 20000;
    for (int i = 0; i < n; i++) {
        int tok = ls_sample_logits(logits, V, &s4, &r);
        CHECK(tok >= 0 && tok < V);
        if (tok >= 0 && tok < V) cnt[tok]++;
    }
    for (int i = 0; i < V; i++) {
        double sd = sqrt(n * p[i] * (1 - p[i]));
        CHECK_MSG(fabs(cnt[i] - n * p[i]) <= 4 * sd + (p[i] == 0 ? 0 : 1), "token %d: %d draws, expected %.1f", i,
                  cnt[i], n * p[i]);
    }
    /* bad configs */
    ls_sample_config bad1 = {-1.0f, 0, 1.0f}, bad2 = {1.0f, -2, 1.0f}, bad3 = {1.0f, 0, 0.0f};
    CHECK(ls_sample_probs(logits, V, &bad1, p) == LS_EINVAL);
    CHECK(ls_sample_logits(logits, V, &bad2, &r) == LS_EINVAL);
    CHECK(ls_sample_logits(logits, V, &bad3, &r) == LS_EINVAL);
}

/* Generation: stops after EOS and at the context end; seeded sampling is reproducible. */
static void test_generate_limits(void) {
    ls_model *m = tiny(9);
    /* make EOS overwhelmingly likely: a large embedding row aligned with the head */
    ls_param wte = ls_model_tensor(m, 0);
    int C = (int)wte.shape[1];
    int prompt[70], out[80], n = 0;
    for (int i = 0; i < 70; i++) prompt[i] = 'a' + i % 26;
    ls_sample_config s = {0.9f, 40, 0.95f};
    ls_rng r1, r2;
    ls_rng_seed(&r1, 17);
    ls_rng_seed(&r2, 17);
    int out2[80], n2 = 0;
    CHECK(ls_model_generate(m, prompt, 10, 30, &s, &r1, out, &n) == LS_OK);
    CHECK(ls_model_generate(m, prompt, 10, 30, &s, &r2, out2, &n2) == LS_OK);
    CHECK(n == n2 && memcmp(out, out2, (size_t)n * sizeof(int)) == 0);
    /* context end: a 60-token prompt in a 64 context leaves room for 5 new tokens */
    ls_sample_config g = {0.0f, 0, 1.0f};
    CHECK(ls_model_generate(m, prompt, 60, 30, &g, &r1, out, &n) == LS_OK);
    CHECK_EQ_INT(n, 5);
    CHECK(ls_model_generate(m, prompt, 65, 3, &g, &r1, out, &n) == LS_EINVAL);
    CHECK(ls_model_generate(m, prompt, 0, 3, &g, &r1, out, &n) == LS_EINVAL);
    /* EOS: make the final LayerNorm output point at wte[EOS] */
    ls_param lnfw = ls_model_tensor(m, ls_model_find_tensor(m, "lnf.w")),
             lnfb = ls_model_tensor(m, ls_model_find_tensor(m, "lnf.b"));
    for (int c = 0; c < C; c++) {
        lnfw.data[c] = 0.0f;
        lnfb.data[c] = wte.data[(size_t)LS_TOK_EOS * C + c] * 100.0f;
    }
    CHECK(ls_model_generate(m, prompt, 3, 30, &g, &r1, out, &n) == LS_OK);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(out[0], LS_TOK_EOS);
    ls_model_free(m);
}

/* Text generation's first window: a prompt that leaves room keeps its BOS; one that fills the
 * context but one token does not; a longer one keeps its last n_ctx - 1 bytes. One greedy token
 * each, against ls_model_generate on that window written out by hand. */
static void test_generate_text_window(void) {
    ls_model *m = tiny(5);
    int ctx = ls_model_cfg(m)->n_ctx;
    char text[200];
    int win[200], out[4], ref[4], got, n;
    ls_sample_config g = {0.0f, 0, 1.0f};
    ls_rng r;
    ls_rng_seed(&r, 1);
    for (int i = 0; i < 199; i++) text[i] = (char)('a' + (i * 7) % 26);
    const int lens[] = {ctx - 2, ctx - 1, ctx + 10};
    for (int k = 0; k < 3; k++) {
        int len = lens[k], nw = 0;
        text[len] = '\0';
        if (len + 1 < ctx) win[nw++] = LS_TOK_BOS;
        for (int i = len > ctx - 1 ? len - (ctx - 1) : 0; i < len; i++) win[nw++] = (unsigned char)text[i];
        CHECK(ls_model_generate(m, win, nw, 1, &g, &r, ref, &n) == LS_OK && n == 1);
        CHECK(ls_model_generate_text(m, text, 1, &g, &r, out, &got) == LS_OK);
        CHECK_MSG(got == 1 && out[0] == ref[0], "prompt of %d bytes: %d tokens, first %d, reference %d", len, got,
                  got > 0 ? out[0] : -1, ref[0]);
        text[len] = (char)('a' + (len * 7) % 26);
    }
    ls_model_free(m);
}

static void test_lr_schedule(void) {
    ls_adamw_config c = {.lr = 1.0f, .warmup_steps = 4, .total_steps = 14, .min_lr_frac = 0.1f}; /* all it reads */
    CHECK_NEAR(ls_lr_at(&c, 0), 0.25, 1e-7);
    CHECK_NEAR(ls_lr_at(&c, 3), 1.0, 1e-7);
    CHECK_NEAR(ls_lr_at(&c, 4), 1.0, 1e-7);                                     /* cosine starts at the peak */
    CHECK_NEAR(ls_lr_at(&c, 9), 0.1 + 0.9 * 0.5, 1e-6);                         /* halfway */
    CHECK_NEAR(ls_lr_at(&c, 14), 0.1, 1e-7);                                    /* floor at the end */
    CHECK_NEAR(ls_lr_at(&c, 100), 0.1, 1e-7);                                   /* and after */
    for (int s = 4; s < 14; s++) CHECK(ls_lr_at(&c, s + 1) <= ls_lr_at(&c, s)); /* monotone decay */
    c.total_steps = 0;
    CHECK_NEAR(ls_lr_at(&c, 50), 1.0, 1e-7); /* no horizon: constant after warmup */
    c.total_steps = c.warmup_steps;          /* a horizon that ends with warmup: no decay phase either */
    for (int s = 3; s < 8; s++) CHECK_NEAR(ls_lr_at(&c, s), 1.0, 1e-7);
}

/* AdamW against a scalar float64 re-implementation: bias correction, decay on 2-D tensors
 * only, clipping by the global norm. */
static void adamw_run(float clip) {
    ls_model *m = tiny(3);
    size_t n = ls_model_num_params(m);
    double *w = malloc(n * sizeof(double)), *mm = calloc(n, sizeof(double)), *vv = calloc(n, sizeof(double));
    unsigned char *decay = malloc(n);
    for (int i = 0; i < ls_model_num_tensors(m); i++) {
        ls_param p = ls_model_tensor(m, i);
        memset(decay + (p.data - ls_model_params(m)), p.ndim == 2, p.numel);
    }
    for (size_t i = 0; i < n; i++) w[i] = ls_model_params(m)[i];
    ls_adamw_config c = ls_adamw_defaults(); /* the shipped betas and eps */
    c.lr = 0.01f, c.weight_decay = 0.5f, c.grad_clip = clip, c.warmup_steps = 2, c.total_steps = 5;
    ls_rng r;
    ls_rng_seed(&r, 8);
    for (int step = 0; step < 4; step++) {
        float *g = ls_model_grads(m);
        double gs = step % 2 ? 0.001 : 0.1; /* clipped on even steps only */
        double ss = 0;
        for (size_t i = 0; i < n; i++) {
            g[i] = (float)(gs * ls_rng_normal(&r));
            ss += (double)g[i] * g[i];
        }
        /* a clip <= 0 is no clipping */
        double norm = sqrt(ss), scale = clip > 0 && norm > c.grad_clip ? c.grad_clip / norm : 1.0;
        CHECK((step % 2 == 0) == (norm > 2.0));
        float got = ls_model_adamw_step(m, &c, step);
        CHECK_NEAR(got, norm, 1e-5 * norm);
        double lr = ls_lr_at(&c, step), t = step + 1;
        double maxd = 0;
        for (size_t i = 0; i < n; i++) {
            double gi = g[i] * scale;
            mm[i] = c.beta1 * mm[i] + (1 - c.beta1) * gi;
            vv[i] = c.beta2 * vv[i] + (1 - c.beta2) * gi * gi;
            double mh = mm[i] / (1 - pow(c.beta1, t)), vh = vv[i] / (1 - pow(c.beta2, t));
            w[i] -= lr * (mh / (sqrt(vh) + c.eps) + (decay[i] ? c.weight_decay * w[i] : 0.0));
            maxd = fmax(maxd, fabs(w[i] - ls_model_params(m)[i]));
        }
        fprintf(stderr, "  step %d: lr %.4f norm %.4f, max |param - float64 ref| %.3g\n", step, lr, norm, maxd);
        CHECK(maxd < 1e-6);
    }
    free(w), free(mm), free(vv), free(decay);
    ls_model_free(m);
}

static void test_adamw(void) {
    adamw_run(2.0f);
    adamw_run(0.0f);
}

int main(void) {
    ls_model_set_threads(2);
    RUN(test_config);
    RUN(test_kv_matches_forward);
    RUN(test_bad_input);
    RUN(test_shapes_and_losses);
    RUN(test_overfit);
    RUN(test_lr_schedule);
    RUN(test_adamw);
    RUN(test_determinism);
    RUN(test_sampling);
    RUN(test_generate_limits);
    RUN(test_generate_text_window);
    return TEST_RESULT();
}
