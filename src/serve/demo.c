/* demo.c - the serve demo scenario: held-out bits/byte per bits map, a mixed-precision
 * plan on 2 pipeline stages served over HTTP against fp32, and the pipelined output checked
 * against single-process generation (`llmsys demo serve`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/serve.h"

/* Stops a training run once its time budget is spent. */
typedef struct {
    double t0, budget_s;
} budget_stop;

static int stop_at_budget(void *ctx, ls_trainer *t, const ls_train_step_info *info) {
    (void)t, (void)info;
    const budget_stop *b = ctx;
    return ls_now() - b->t0 >= b->budget_s;
}

/* Trains a small model on this repository's own text for budget_s seconds (used when
 * the core scenario's model is absent). */
static int demo_train(FILE *f, const char *ckpt, ls_corpus *c, int quick, double budget_s) {
    ls_model_config mc;
    LS_TRY(ls_model_config_named(quick ? "tiny" : "small", &mc));
    ls_train_config tc = ls_train_defaults();
    tc.batch = 8;
    tc.seq = mc.n_ctx;
    tc.steps = quick ? 60 : 400;
    tc.opt.lr = 3e-3f;
    tc.opt.warmup_steps = 5;
    ls_trainer *t = NULL;
    double t0 = ls_now();
    budget_stop bs = {t0, budget_s};
    ls_train_hooks hk = {.ctx = &bs, .after_step = stop_at_budget};
    ls_train_run_result r = {0};
    int rc = ls_train_corpus_run(&t, &mc, &tc, c, NULL, &hk, &r);
    if (rc == LS_OK) {
        int s = r.n_losses;
        fprintf(f, "trained a %s model for %d steps (%.1f s), last loss %.3f\n", quick ? "tiny" : "small", s,
                ls_now() - t0, s ? r.losses[s - 1] : 0.0f);
        rc = ls_ckpt_save(ckpt, ls_trainer_model(t), s, NULL, LS_CKPT_WEIGHTS);
    }
    ls_train_run_result_free(&r);
    ls_trainer_free(t);
    return rc;
}

typedef struct {
    const char *name;
    int kind; /* 0 uniform bits, 1 ends at 8 / rest 4, 2 alternate 8/4, 3 ends at 4 / rest 3 */
    int bits;
} demo_map;

static void fill_map(const demo_map *d, int L, int *b) {
    for (int l = 0; l < L; l++) {
        int end = l == 0 || l == L - 1;
        switch (d->kind) {
        case 0:
            b[l] = d->bits;
            break;
        case 1:
            b[l] = end ? 8 : 4;
            break;
        case 2:
            b[l] = l % 2 ? 4 : 8;
            break;
        default:
            b[l] = end ? 4 : 3;
            break;
        }
    }
}

static int serve_and_load(const char *self, const char *model, const ls_plan *plan, const char *const *prompts, int np,
                          int conc, int nreq, int max_tokens, ls_load_result *res, char *sample, size_t ns,
                          int *sample_tokens) {
    ls_server_opts o = ls_server_defaults();
    o.model = model;
    o.plan = plan;
    o.self = self;
    o.port = 0;
    o.max_seqs = conc > 8 ? conc : 8;
    ls_server *s;
    LS_TRY(ls_server_start(&s, &o));
    int port = ls_server_port(s);
    int rc = ls_http_load("127.0.0.1", port, prompts, np, conc, nreq, max_tokens, res);
    if (rc == LS_OK && sample)
        rc = ls_http_complete("127.0.0.1", port, prompts[0], max_tokens, 60, sample, ns, sample_tokens);
    ls_server_stop(s);
    return rc;
}

static void printable(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\t' || *s == '\r') *s = ' ';
}

int ls_serve_demo(FILE *f, const char *workdir, const char *self, int quick) {
    char dir[4096], ckpt[4200], qckpt[4200], plan_path[4200], core[4200];
    snprintf(dir, sizeof dir, "%s/serve", workdir);
    snprintf(core, sizeof core, "%s/core/model.safetensors", workdir);
    snprintf(qckpt, sizeof qckpt, "%s/mixed.safetensors", dir);
    snprintf(plan_path, sizeof plan_path, "%s/plan.json", dir);
    LS_TRY(ls_mkdirs(dir));
    /* held-out text: this repository's own sources and docs */
    const char *paths[3] = {LLMSYS_SOURCE_DIR "/include", LLMSYS_SOURCE_DIR "/docs", LLMSYS_SOURCE_DIR "/src"};
    ls_corpus_opts co = ls_corpus_defaults();
    co.max_bytes = quick ? (size_t)200 << 10 : (size_t)1 << 20;
    ls_corpus *c;
    LS_TRY(ls_corpus_load(&c, paths, 3, &co));
    int rc = LS_OK;
    if (ls_is_file(core)) {
        snprintf(ckpt, sizeof ckpt, "%s", core);
        fprintf(f, "model: %s (from the core scenario)\n", ckpt);
    } else {
        snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
        fprintf(f, "model: no %s; training one on the repository's text\n", core);
        fflush(f);
        rc = demo_train(f, ckpt, c, quick, quick ? 3.0 : 25.0);
    }
    ls_model_config cfg;
    int *fb = NULL;
    if (rc == LS_OK) rc = ls_ckpt_info(ckpt, &cfg, &fb, NULL);
    free(fb);
    if (rc != LS_OK) {
        ls_corpus_free(c);
        return rc;
    }
    int L = cfg.n_layer;
    size_t ntok;
    const uint16_t *held = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &ntok);
    size_t cap = quick ? 1500 : 8000;
    /* 1. quality: held-out bits/byte per bits map (engine eval == `llmsys eval`) */
    static const demo_map maps[] = {{"fp32", 0, 32},           {"16 uniform", 0, 16},     {"8 uniform", 0, 8},
                                    {"4 uniform", 0, 4},       {"3 uniform", 0, 3},       {"8 ends, 4 middle", 1, 0},
                                    {"8/4 alternating", 2, 0}, {"4 ends, 3 middle", 3, 0}};
    int nmaps = (int)(sizeof maps / sizeof maps[0]);
    int *bits = malloc(sizeof(int) * L);
    double bpb[8] = {0}, mib[8] = {0};
    fprintf(f, "\nheld-out bits/byte (%zu tokens of the repository's text, group 64, round-to-nearest):\n",
            ntok < cap ? ntok : cap);
    fprintf(f, "  %-18s %10s %10s %8s\n", "bits map", "weights", "bits/byte", "vs fp32");
    for (int i = 0; i < nmaps && rc == LS_OK; i++) {
        fill_map(&maps[i], L, bits);
        ls_engine_opts eo = ls_engine_defaults();
        eo.bits = bits;
        ls_engine *e;
        ls_eval_result r;
        rc = ls_engine_open(&e, ckpt, &eo);
        if (rc == LS_OK) {
            rc = ls_engine_eval_tokens(e, held, ntok, cfg.n_ctx, cap, &r);
            mib[i] = ls_engine_weight_bytes(e) / 1048576.0;
            ls_engine_free(e);
        }
        if (rc == LS_OK) {
            bpb[i] = r.bits_per_byte;
            fprintf(f, "  %-18s %7.2f MiB %10.4f %+8.4f\n", maps[i].name, mib[i], bpb[i], bpb[i] - bpb[0]);
        }
    }
    /* 2. the mixed plan: two stages, first/last layers at 8 bits, the rest at 4 */
    ls_plan plan;
    if (rc == LS_OK) {
        fill_map(&maps[5], L, bits);
        rc = ls_quant_checkpoint(ckpt, bits, L, 64, qckpt);
    }
    int split = (L + 1) / 2;
    if (rc == LS_OK) rc = ls_plan_single(&plan, L, bits, 2, 4);
    if (rc == LS_OK) {
        snprintf(plan.model_name, sizeof plan.model_name, "%.200s", ckpt);
        plan.n_stages = L > 1 ? 2 : 1;
        for (int sidx = 0; sidx < plan.n_stages; sidx++) {
            ls_plan_stage *st = &plan.stages[sidx];
            snprintf(st->device, sizeof st->device, "cpu%d", sidx);
            st->layer_begin = sidx == 0 ? 0 : split;
            st->layer_end = plan.n_stages == 1 || sidx == 1 ? L : split;
        }
        rc = ls_plan_write(plan_path, &plan);
        if (rc == LS_OK)
            fprintf(f, "\nplan %s: %d stages, layers [0,%d) and [%d,%d), bits 8 at the ends, 4 inside\n", plan_path,
                    plan.n_stages, split, split, L);
    }
    /* 3. serve fp32 (one process) and the mixed plan (two stages) over HTTP */
    static const char *const prompts[] = {"#include <", "int ls_", "/* The ", "The model ", "static void ", "return "};
    int conc = quick ? 4 : 8, nreq = quick ? 4 : 16, mt = quick ? 8 : 32;
    ls_load_result rf = {0}, rq = {0};
    char sf[512] = "", sq[512] = "";
    int tf[64] = {0}, tq[64] = {0};
    if (rc == LS_OK) rc = serve_and_load(self, ckpt, NULL, prompts, 6, conc, nreq, mt, &rf, sf, sizeof sf, tf);
    if (rc == LS_OK) rc = serve_and_load(self, qckpt, &plan, prompts, 6, conc, nreq, mt, &rq, sq, sizeof sq, tq);
    /* 4. the pipelined server's greedy tokens == single-process generation, same bits */
    int same = 0;
    if (rc == LS_OK) {
        ls_engine *e;
        rc = ls_engine_open(&e, qckpt, NULL);
        int prompt[64], np = 0, out[64], no = 0;
        prompt[np++] = LS_TOK_BOS;
        for (const char *p = prompts[0]; *p; p++) prompt[np++] = (unsigned char)*p;
        if (rc == LS_OK) rc = ls_engine_generate(e, prompt, np, mt, out, &no);
        same = rc == LS_OK && !memcmp(out, tq, sizeof(int) * no);
        ls_engine_free(e);
    }
    if (rc == LS_OK) {
        printable(sf);
        printable(sq);
        fprintf(f, "\nserving %d requests x %d tokens, %d concurrent, through HTTP:\n", nreq, mt, conc);
        fprintf(f, "  %-26s %10s %10s %12s %12s\n", "server", "bits/byte", "weights", "tokens/s", "ms/token");
        fprintf(f, "  %-26s %10.4f %6.2f MiB %12.1f %12.2f\n", "fp32, 1 process", bpb[0], mib[0], rf.tokens_per_s,
                rf.mean_tpot_s * 1e3);
        fprintf(f, "  %-26s %10.4f %6.2f MiB %12.1f %12.2f\n", "mixed 8/4, 2 stages", bpb[5], mib[5], rq.tokens_per_s,
                rq.mean_tpot_s * 1e3);
        fprintf(f, "  sample (fp32):  \"%s\" -> \"%s\"\n", prompts[0], sf);
        fprintf(f, "  sample (mixed): \"%s\" -> \"%s\"\n", prompts[0], sq);
        fprintf(f, "  pipelined greedy output identical to single-process generation: %s\n", same ? "yes" : "NO");
        if (!same) rc = ls_err(LS_ESTATE, "pipelined output differs from single-process generation");
    }
    free(bits);
    ls_corpus_free(c);
    return rc;
}
