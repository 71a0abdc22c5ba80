/* test_rl_pg.c - the policy-gradient loss: per-token terms and clipping by hand, the
 * gradient of the whole tiny model against finite differences of a float64 reference,
 * importance weights against float64, GRPO advantages, trajectories packed into a batch,
 * and the engine's in-memory weight load against the training model's forward. */
#include "llmsys/model.h"
#include "llmsys/rl.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"
#include "model/ref_gpt.h"
#include "test.h"

static void test_token_terms(void) {
    ls_pg_config c = {0.2f, 0.0f};
    float d;
    /* r = 1, is = 1: L = -A, dL/dnll = A */
    CHECK_NEAR(ls_pg_token(-1.0f, -1.0f, -1.0f, 2.0f, &c, &d), -2.0, 1e-6);
    CHECK_NEAR(d, 2.0, 1e-6);
    /* r = e^0.5 > 1.2 with A > 0: clipped, L = -1.2 A, no gradient */
    CHECK_NEAR(ls_pg_token(-0.5f, -1.0f, -1.0f, 1.0f, &c, &d), -1.2, 1e-6);
    CHECK_NEAR(d, 0.0, 0);
    /* same ratio with A < 0: the unclipped branch is the minimum, gradient flows */
    CHECK_NEAR(ls_pg_token(-0.5f, -1.0f, -1.0f, -1.0f, &c, &d), exp(0.5), 1e-5);
    CHECK_NEAR(d, -exp(0.5), 1e-5);
    /* r = e^-0.5 < 0.8 with A < 0: clipped at 0.8 */
    CHECK_NEAR(ls_pg_token(-1.5f, -1.0f, -1.0f, -1.0f, &c, &d), 0.8, 1e-6);
    CHECK_NEAR(d, 0.0, 0);
    /* importance weight e^1 truncated at 2 */
    ls_pg_config t = {0.2f, 2.0f};
    CHECK_NEAR(ls_pg_token(-1.0f, -1.0f, -2.0f, 1.0f, &t, &d), -2.0, 1e-6);
    CHECK_NEAR(d, 2.0, 1e-6);
}

static void test_is_weights(void) {
    ls_rng r;
    ls_rng_seed(&r, 5);
    double worst = 0;
    for (int i = 0; i < 10000; i++) {
        float a = -8.0f * ls_rng_uniform(&r), b = -8.0f * ls_rng_uniform(&r), cap = i % 3 ? 4.0f : 0.0f;
        double ref = exp((double)a - (double)b);
        if (cap > 0 && ref > cap) ref = cap;
        double got = ls_rl_is_weight(a, b, cap);
        worst = fmax(worst, fabs(got - ref) / ref);
    }
    fprintf(stderr, "  importance weights: worst relative error vs float64 %.3g\n", worst);
    CHECK(worst < 2e-6);
}

static void test_advantages(void) {
    float rw[4] = {1, 0, 0, 1}, adv[4];
    ls_rl_group_advantages(rw, 4, 0, adv);
    CHECK_NEAR(adv[0], 0.5, 1e-6);
    CHECK_NEAR(adv[1], -0.5, 1e-6);
    ls_rl_group_advantages(rw, 4, 1, adv); /* sample std of {1,0,0,1} = 0.57735 */
    CHECK_NEAR(adv[0], 0.5 / (0.5773503 + 1e-6), 1e-4);
    float same[3] = {0.3f, 0.3f, 0.3f};
    ls_rl_group_advantages(same, 3, 1, adv);
    CHECK_NEAR(adv[0], 0, 0);
}

/* Float64 objective: mean over valid positions of ls_pg_token's formula in double. */
static double ref_objective(const ls_model_config *cfg, const double *pd, const int *tok, const int *tgt, int B, int T,
                            const float *prox, const float *behav, const float *adv, double eps, double cap,
                            double *logits) {
    ref_gpt_forward(cfg, pd, tok, tgt, B, T, logits);
    double sum = 0;
    int n = 0, V = cfg->vocab;
    for (int i = 0; i < B * T; i++) {
        if (tgt[i] < 0) continue;
        const double *l = logits + (size_t)i * V;
        double mx = l[0], s = 0;
        for (int v = 1; v < V; v++) mx = fmax(mx, l[v]);
        for (int v = 0; v < V; v++) s += exp(l[v] - mx);
        double lp = l[tgt[i]] - mx - log(s);
        double r = exp(lp - prox[i]), is = fmin(exp((double)prox[i] - behav[i]), cap);
        double rc = fmin(fmax(r, 1 - eps), 1 + eps);
        sum += -is * fmin(r * adv[i], rc * adv[i]);
        n++;
    }
    return sum / n;
}

static void test_gradient(void) {
    ls_model_config cfg;
    CHECK(ls_model_config_named("tiny", &cfg) == LS_OK);
    ls_model *m = NULL;
    CHECK(ls_model_init(&m, &cfg, 3) == LS_OK);
    if (!m) return;
    size_t np = ls_model_num_params(m);
    float *pf = ls_model_params(m);
    ls_rng r;
    ls_rng_seed(&r, 17);
    for (size_t i = 0; i < np; i++) pf[i] += 0.05f * ls_rng_normal(&r);
    double *pd = malloc(np * sizeof(double));
    for (size_t i = 0; i < np; i++) pd[i] = pf[i];
    enum { B = 2, T = 10 };
    int tok[B * T], tgt[B * T];
    float lp[B * T], prox[B * T], behav[B * T], adv[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)ls_rng_below(&r, LS_VOCAB);
        tgt[i] = i % T < 3 ? -1 : (int)ls_rng_below(&r, LS_VOCAB); /* a prompt, then a response */
    }
    CHECK(ls_model_logprobs(m, tok, tgt, B, T, lp) == LS_OK);
    /* ratios well inside and well outside [0.8, 1.2], both advantage signs, some capped weights */
    const float offs[4] = {0.05f, 0.5f, -0.5f, -0.03f};
    int n_clipped = 0;
    for (int i = 0; i < B * T; i++) {
        prox[i] = lp[i] + offs[i % 4];
        behav[i] = prox[i] + 0.6f * (ls_rng_uniform(&r) - 0.5f) - (i % 7 == 0 ? 1.0f : 0.0f);
        adv[i] = (i / 2) % 2 ? 1.3f : -0.7f;
    }
    ls_pg_config c = {0.2f, 1.5f};
    for (int i = 0; i < B * T; i++) {
        float d;
        if (tgt[i] >= 0) ls_pg_token(lp[i], prox[i], behav[i], adv[i], &c, &d), n_clipped += d == 0.0f;
    }
    CHECK(n_clipped > 0);
    ls_pg_stats st;
    ls_model_zero_grad(m);
    CHECK(ls_model_pg_loss(m, tok, tgt, B, T, prox, behav, adv, &c, &st) == LS_OK);
    double *lg = malloc(sizeof(double) * B * T * LS_VOCAB);
    double J = ref_objective(&cfg, pd, tok, tgt, B, T, prox, behav, adv, 0.2, 1.5, lg);
    fprintf(stderr, "  PG loss %.7f vs float64 %.7f (%d tokens, clip frac %.2f)\n", st.loss, J, st.n_tokens,
            st.clip_frac);
    CHECK_NEAR(st.loss, J, 1e-5);
    const float *g = ls_model_grads(m);
    int bad = 0, checked = 0;
    double gmax = 0;
    for (int ti = 0; ti < ls_model_num_tensors(m); ti++) {
        ls_param p = ls_model_tensor(m, ti);
        size_t off = (size_t)(p.data - pf);
        for (int k = 0; k < 3; k++) {
            size_t i = off + (k == 0 ? 0 : (size_t)ls_rng_below(&r, p.numel));
            if (k == 0) /* the largest gradient entry of the tensor */
                for (size_t j = 1; j < p.numel; j++)
                    if (fabs(g[off + j]) > fabs(g[i])) i = off + j;
            double x0 = pd[i];
            pd[i] = x0 + 1e-4;
            double jp = ref_objective(&cfg, pd, tok, tgt, B, T, prox, behav, adv, 0.2, 1.5, lg);
            pd[i] = x0 - 1e-4;
            double jm = ref_objective(&cfg, pd, tok, tgt, B, T, prox, behav, adv, 0.2, 1.5, lg);
            pd[i] = x0;
            double num = (jp - jm) / 2e-4;
            gmax = fmax(gmax, fabs(num));
            checked++;
            if (fabs(num - g[i]) > 1e-6 + 2e-3 * fabs(num)) {
                bad++;
                fprintf(stderr, "    %s: analytic %.7g numeric %.7g\n", p.name, g[i], num);
            }
        }
    }
    fprintf(stderr, "  %d gradient entries vs finite differences, max |grad| %.3g, %d off\n", checked, gmax, bad);
    CHECK(gmax > 1e-4);
    CHECK_EQ_INT(bad, 0);
    free(pd), free(lg);
    ls_model_free(m);
}

static void test_engine_params(void) {
    ls_model_config cfg = ls_rl_model_config();
    ls_model *a = NULL, *b = NULL;
    CHECK(ls_model_init(&a, &cfg, 1) == LS_OK && ls_model_init(&b, &cfg, 2) == LS_OK);
    if (!a || !b) return;
    const char *path = "test_rl_engine.safetensors";
    CHECK(ls_ckpt_save(path, a, 0, NULL, LS_CKPT_WEIGHTS) == LS_OK);
    ls_engine *e = NULL;
    ls_engine_opts o = ls_engine_defaults();
    o.max_seqs = 2;
    CHECK(ls_engine_open(&e, path, &o) == LS_OK);
    if (e) {
        CHECK(ls_engine_load_params(e, ls_model_params(b), ls_model_num_params(b)) == LS_OK);
        CHECK(ls_engine_load_params(e, ls_model_params(b), 5) == LS_EINVAL);
        int tok[9] = {LS_TOK_BOS, 'c', 'o', 'p', 'y', ':', 'a', 'b', '='};
        float out[9 * LS_VOCAB];
        ls_engine_seq s = {1, 0, 9};
        CHECK(ls_engine_forward(e, &s, 1, tok, NULL, out, 1) == LS_OK);
        ls_model_forward(b, tok, NULL, 1, 9);
        const float *ref = ls_model_logits(b);
        double worst = 0;
        for (int i = 0; i < 9 * LS_VOCAB; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
        fprintf(stderr, "  engine after load_params vs model forward: max |logit diff| %.3g\n", worst);
        CHECK(worst < 1e-4);
        /* a rollout's engine: built from the config alone (zeros), then given b's params, or from
         * them at once; both must give the opened engine's logits bit for bit */
        ls_engine *z = NULL, *d = NULL;
        CHECK(ls_engine_new(&z, &cfg, NULL, &o) == LS_OK && ls_engine_new(&d, &cfg, ls_model_params(b), &o) == LS_OK);
        if (z && d) {
            float zo[9 * LS_VOCAB], dout[9 * LS_VOCAB];
            CHECK(ls_engine_forward(z, &s, 1, tok, NULL, zo, 1) == LS_OK);
            int zeros = 1;
            for (int i = 0; i < 9 * LS_VOCAB; i++) zeros &= zo[i] == 0.0f;
            CHECK_MSG(zeros, "an engine without params must hold zeros");
            CHECK(ls_engine_load_params(z, ls_model_params(b), ls_model_num_params(b)) == LS_OK);
            CHECK(ls_engine_forward(z, &s, 1, tok, NULL, zo, 1) == LS_OK);
            CHECK(ls_engine_forward(d, &s, 1, tok, NULL, dout, 1) == LS_OK);
            CHECK(!memcmp(zo, out, sizeof out) && !memcmp(dout, out, sizeof out));
            CHECK_EQ_INT(ls_engine_max_seqs(d), 2);
        }
        ls_engine_free(z), ls_engine_free(d);
        ls_engine_opts bad = o;
        bad.layer_end = 1;
        CHECK(ls_engine_new(&z, &cfg, NULL, &bad) == LS_EINVAL && !z);
        ls_model_config wrong = cfg;
        wrong.d_model = 63;
        CHECK(ls_engine_new(&z, &wrong, NULL, &o) == LS_EINVAL && !z);
        ls_engine_free(e);
    }
    remove(path);
    ls_model_free(a), ls_model_free(b);
}

/* Trajectories into a batch, every cell written out by hand: two rows of different lengths,
 * targets exactly at the response positions (the first response token included), each with
 * its own behaviour log-prob and the row's advantage, PAD past a row's end; refusals. */
static void test_batch_pack(void) {
    int t0[] = {LS_TOK_BOS, 'a', 'b', 'X', 'Y', 'Z'}, t1[] = {LS_TOK_BOS, 'c', 'Q'};
    float l0[] = {-0.5f, -1.5f, -2.5f}, l1[] = {-3.0f};
    ls_rl_traj tr[2] = {{.id = 7, .n_prompt = 3, .n_gen = 3, .adv = 0.25f, .tok = t0, .lp = l0},
                        {.id = 8, .n_prompt = 2, .n_gen = 1, .adv = -1.0f, .tok = t1, .lp = l1}};
    ls_rl_batch b;
    CHECK_EQ_INT(ls_rl_batch_pack(tr, 2, 16, &b), LS_OK);
    CHECK_EQ_INT(b.B, 2);
    CHECK_EQ_INT(b.T, 6);
    const int tok[12] = {LS_TOK_BOS, 'a', 'b', 'X', 'Y', 'Z', LS_TOK_BOS, 'c', 'Q', LS_TOK_PAD, LS_TOK_PAD, LS_TOK_PAD};
    const int tgt[12] = {-1, -1, 'X', 'Y', 'Z', -1, -1, 'Q', -1, -1, -1, -1};
    const float lp[12] = {0, 0, -0.5f, -1.5f, -2.5f, 0, 0, -3.0f, 0, 0, 0, 0};
    const float adv[12] = {0, 0, 0.25f, 0.25f, 0.25f, 0, 0, -1.0f, 0, 0, 0, 0};
    int bad = 0;
    for (int k = 0; k < 12; k++)
        bad += b.tokens[k] != tok[k] || b.targets[k] != tgt[k] ||
               (tgt[k] >= 0 && (b.logp_behav[k] != lp[k] || b.adv[k] != adv[k]));
    CHECK_MSG(bad == 0, "%d of 12 cells differ from the hand-written batch", bad);
    ls_rl_batch_free(&b);
    CHECK_EQ_INT(ls_rl_batch_pack(tr, 2, 5, &b), LS_EINVAL); /* the 6-token row exceeds n_ctx 5 */
    CHECK(b.tokens == NULL);
    CHECK_EQ_INT(ls_rl_batch_pack(tr, 0, 16, &b), LS_EINVAL);
}

int main(void) {
    ls_model_set_threads(1);
    RUN(test_batch_pack);
    RUN(test_token_terms);
    RUN(test_is_weights);
    RUN(test_advantages);
    RUN(test_gradient);
    RUN(test_engine_params);
    return TEST_RESULT();
}
