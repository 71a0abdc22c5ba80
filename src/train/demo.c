/* demo.c - the core demo scenario: train the small GPT on local text for a time budget,
 * save, reload, evaluate on held-out text and sample (`llmsys demo core`). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmsys/train.h"

/* Text every Debian 12 machine with the setup.sh packages has: license texts and the C
 * library headers. Paths that do not exist are skipped. */
static int demo_collect(char ***paths, int *n, size_t budget) {
    static const char *const dirs[] = {"/usr/share/common-licenses", "/usr/include"};
    *paths = NULL;
    *n = 0;
    int cap = 0;
    size_t total = 0;
    for (int k = 0; k < 2 && total < budget; k++) {
        DIR *d = opendir(dirs[k]);
        if (!d) continue;
        char **names = NULL;
        int nn = 0, nc = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (e->d_name[0] == '.') continue;
            if (k == 1 && (l < 3 || strcmp(e->d_name + l - 2, ".h") != 0)) continue;
            if (nn == nc) {
                nc = nc ? 2 * nc : 64;
                char **t = realloc(names, (size_t)nc * sizeof *t);
                if (!t) break;
                names = t;
            }
            if (!(names[nn] = strdup(e->d_name))) break;
            nn++;
        }
        closedir(d);
        for (int i = 0; i < nn; i++)
            for (int j = i + 1; j < nn; j++)
                if (strcmp(names[i], names[j]) > 0) {
                    char *t = names[i];
                    names[i] = names[j];
                    names[j] = t;
                }
        for (int i = 0; i < nn; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dirs[k], names[i]);
            struct stat st;
            /* regular files only, no symlinks: GPL -> GPL-3 would put one text in both splits */
            if (total < budget && lstat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && access(p, R_OK) == 0) {
                if (*n == cap) {
                    cap = cap ? 2 * cap : 64;
                    char **t = realloc(*paths, (size_t)cap * sizeof *t);
                    if (!t) break;
                    *paths = t;
                }
                if (!((*paths)[*n] = strdup(p))) break;
                (*n)++;
                total += (size_t)st.st_size;
            }
            free(names[i]);
        }
        free(names);
    }
    return (int)(total > budget ? budget : total);
}

/* Fallback corpus: generated arithmetic, "17 + 25 = 42." lines. */
static int demo_generate_text(const char *path, size_t bytes) {
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, path));
    ls_rng r;
    ls_rng_seed(&r, 7);
    size_t n = 0;
    while (n < bytes) {
        int a = (int)ls_rng_below(&r, 100), b = (int)ls_rng_below(&r, 100), op = (int)ls_rng_below(&r, 3);
        int c = op == 0 ? a + b : op == 1 ? a - b : a * b;
        int w = fprintf(af.fp, "%d %c %d = %d.\n", a, "+-*"[op], b, c);
        if (w < 0) {
            ls_atomic_abort(&af);
            return ls_err(LS_EIO, "%s: write failed", path);
        }
        n += (size_t)w;
    }
    return ls_atomic_commit(&af);
}

/* Prints text with control bytes shown as spaces, so a sample cannot mess up the terminal. */
static void print_sample(FILE *f, const char *prefix, const int *t, int n) {
    fprintf(f, "%s", prefix);
    for (int i = 0; i < n; i++) {
        int c = t[i];
        if (c == '\n')
            fprintf(f, "\n%s", prefix);
        else if (c >= 32 && c < 127)
            fputc(c, f);
        else if (c >= 128 && c < 256)
            fputc(c, f); /* UTF-8 continuation of a character */
        else if (c < 256)
            fputc(' ', f);
    }
    fputc('\n', f);
}

/* The core demo's training: a time budget turned into a schedule length from the measured
 * step time, first after a few steps (the first ones pay for allocation), then refined once
 * at a quarter of the budget; log lines every eighth of the run. */
typedef struct {
    FILE *f;
    double budget_s, t0, t_warm, tokens;
    int calib, steps, max_points, refined, next_log;
    ls_progress pb;
} core_run;

static int core_step(void *ctx, ls_trainer *t, const ls_train_step_info *in) {
    core_run *c = ctx;
    FILE *f = c->f;
    int s = (int)in->step - 1;
    float loss = in->loss;
    double el = ls_now() - c->t0;
    if (s + 1 == 2) c->t_warm = el;
    if (s + 1 == c->calib || (!c->refined && s + 1 > c->calib && el > c->budget_s / 4)) {
        double per = (el - c->t_warm) / (s + 1 - 2);
        int want = (int)((c->budget_s - c->t_warm) / per) + 2;
        if (want < s + 4) want = s + 4;
        if (want > c->max_points) want = c->max_points;
        if (s + 1 > c->calib) c->refined = 1;
        if (want != c->steps) {
            c->steps = want;
            LS_TRY(ls_trainer_set_steps(t, c->steps));
            c->pb.total = c->steps;
            if (c->pb.enabled) fputs("\r\033[K", stderr);
            fprintf(f, "%s: %.3f s/step -> %d steps\n", c->refined ? "re-calibrated" : "calibrated", per, c->steps);
            fflush(f);
        }
        if (!c->refined) c->next_log = s + 1 + (c->steps / 8 > 0 ? c->steps / 8 : 1);
    }
    double tps = (double)(s + 1) * c->tokens / (el > 0 ? el : 1e-9);
    ls_progress_update(&c->pb, s + 1, "loss %.4f  %.0f tok/s", loss, tps);
    if ((c->next_log > 0 && s + 1 >= c->next_log) || s + 1 == c->steps) {
        if (c->pb.enabled) fputs("\r\033[K", stderr);
        fprintf(f, "  step %5d/%d  loss %.4f  (%.2f bits/byte)  %6.0f tok/s  %5.1f s\n", s + 1, c->steps, loss,
                loss / log(2.0), tps, el);
        fflush(f);
        c->next_log = s + 1 + (c->steps / 8 > 0 ? c->steps / 8 : 1);
    }
    return 0;
}

int ls_train_demo_core(FILE *f, const char *workdir, int quick, int *learned) {
    *learned = 0;
    char dir[4096], ckpt[4200], gen[4200];
    snprintf(dir, sizeof dir, "%s/core", workdir);
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
    snprintf(gen, sizeof gen, "%s/generated.txt", dir);
    LS_TRY(ls_mkdirs(dir));

    /* 1. corpus: what the machine has, else generated text */
    size_t budget = quick ? (size_t)300 << 10 : (size_t)3 << 20;
    char **paths = NULL;
    int np = 0;
    int have = demo_collect(&paths, &np, budget);
    if ((size_t)have < ((size_t)100 << 10)) {
        fprintf(f, "little local text found (%d bytes): adding generated arithmetic\n", have);
        int rc = demo_generate_text(gen, budget - (size_t)have);
        char **t = realloc(paths, (size_t)(np + 1) * sizeof *t);
        if (rc < 0 || !t) {
            for (int i = 0; i < np; i++) free(paths[i]);
            free(t ? t : paths);
            return rc < 0 ? rc : ls_err(LS_ENOMEM, "out of memory");
        }
        paths = t;
        paths[np++] = strdup(gen);
    }
    ls_corpus *c = NULL;
    ls_corpus_opts co = ls_corpus_defaults();
    co.max_bytes = budget;
    int rc = ls_corpus_load(&c, (const char *const *)paths, np, &co);
    for (int i = 0; i < np; i++) free(paths[i]);
    free(paths);
    if (rc < 0) return rc;
    double h_held = ls_corpus_unigram_entropy(c, LS_SPLIT_HELDOUT);
    fprintf(f,
            "corpus: %d documents (license texts, C headers), %zu train / %zu held-out bytes, held-out unigram entropy "
            "%.3f "
            "bits/byte\n",
            ls_corpus_num_docs(c), ls_corpus_num_bytes(c, LS_SPLIT_TRAIN), ls_corpus_num_bytes(c, LS_SPLIT_HELDOUT),
            h_held);

    /* 2. train for a time budget: time the first steps, then fix the cosine schedule */
    ls_model_config mc;
    ls_model_config_named(quick ? "tiny" : "small", &mc);
    ls_train_config tc = ls_train_defaults();
    tc.batch = 8;
    tc.seq = mc.n_ctx;
    tc.steps = 1000000;
    tc.seed = 1;
    tc.opt.lr = quick ? 3e-3f : 2e-3f;
    tc.opt.warmup_steps = quick ? 5 : 20;
    tc.opt.min_lr_frac = 0.1f;
    double budget_s = quick ? 4.0 : 110.0;
    ls_model_set_threads(0);
    ls_trainer *t = NULL;
    ls_batch_source *src = NULL;
    rc = ls_trainer_init(&t, &mc, &tc, NULL);
    if (rc == LS_OK) rc = ls_batch_source_corpus(&src, c, &tc, 1);
    if (rc < 0) goto fail;
    fprintf(f, "model: %s config, %zu parameters; global batch %d x %d tokens; %.0f s budget\n",
            quick ? "tiny" : "small", ls_model_num_params(ls_trainer_model(t)), tc.batch, tc.seq, budget_s);
    fflush(f);
    /* The schedule length comes from the measured step time (core_step). */
    core_run cr = {.f = f,
                   .budget_s = budget_s,
                   .calib = 6,
                   .steps = 1000000,
                   .max_points = 1 << 20,
                   .tokens = (double)tc.batch * tc.seq};
    ls_progress_start(&cr.pb, "core", 0);
    ls_train_hooks hk = {.ctx = &cr, .after_step = core_step};
    ls_trainer_set_hooks(t, &hk);
    ls_train_run_opts ro = {.quiet = 1};
    ls_train_run_result res;
    cr.t0 = ls_now();
    rc = ls_train_run(t, src, NULL, &ro, &res);
    ls_progress_end(&cr.pb);
    double train_s = ls_now() - cr.t0;
    if (rc < 0) goto fail;
    float *losses = res.losses;
    int nl = res.n_losses;
    /* 3. save, reload (what later scenarios and `llmsys eval` see), evaluate, sample */
    char *tj = ls_train_config_to_json(ls_trainer_config(t));
    rc = ls_ckpt_save(ckpt, ls_trainer_model(t), ls_trainer_step_index(t), tj, LS_CKPT_WEIGHTS);
    free(tj);
    ls_model *m = NULL;
    ls_eval_result ev;
    if (rc == LS_OK) rc = ls_ckpt_load(ckpt, LS_CKPT_WEIGHTS, &m, NULL);
    if (rc == LS_OK) {
        size_t n;
        const uint16_t *ho = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
        rc = ls_eval_tokens(m, ho, n, mc.n_ctx, 8, quick ? 8192 : 32768, &ev);
    }
    int out[400], got = 0;
    const char *prompt = "This program is free software";
    if (rc == LS_OK) {
        ls_sample_config sc = {0.7f, 40, 0.95f};
        ls_rng rng;
        ls_rng_seed(&rng, 1);
        rc = ls_model_generate_text(m, prompt, quick ? 80 : 300, &sc, &rng, out, &got);
    }
    if (rc < 0) {
        if (m) ls_model_free(m);
        ls_train_run_result_free(&res);
        goto fail;
    }
    struct stat st;
    double mib = stat(ckpt, &st) == 0 ? (double)st.st_size / 1048576.0 : 0;
    int avg = nl >= 10 ? 10 : nl;
    double first = 0, last = 0;
    for (int i = 0; i < avg; i++) {
        first += losses[i] / avg;
        last += losses[nl - 1 - i] / avg;
    }
    int below = ev.bits_per_byte < h_held;
    fprintf(f, "\n  %-34s %s\n", "checkpoint", ckpt);
    fprintf(f, "  %-34s %.1f MiB (weights, config, xxh3 checksum)\n", "checkpoint size", mib);
    fprintf(f, "  %-34s %d in %.1f s, %.0f tokens/s\n", "steps", nl, train_s, (double)nl * tc.batch * tc.seq / train_s);
    fprintf(f, "  %-34s %.3f -> %.3f (mean of first/last %d steps)\n", "train loss (nats/token)", first, last, avg);
    fprintf(f, "  %-34s %.3f bits/byte over %zu bytes\n", "held-out", ev.bits_per_byte, ev.bytes);
    fprintf(f, "  %-34s %.3f bits/byte -> %s\n", "held-out unigram entropy", h_held,
            below ? "below it: the model uses context" : "model is NOT below it");
    fprintf(f, "  %-34s %.3f\n", "held-out perplexity (per token)", ev.perplexity);
    fprintf(f, "\nsample (temperature 0.7, top-k 40, top-p 0.95):\n");
    int pt[256], npt = 0;
    for (const char *p = prompt; *p && npt < 256; p++) pt[npt++] = (unsigned char)*p;
    int all[700], na = 0;
    for (int i = 0; i < npt; i++) all[na++] = pt[i];
    for (int i = 0; i < got; i++) all[na++] = out[i];
    print_sample(f, "  | ", all, na);
    ls_model_free(m);
    ls_train_run_result_free(&res);
    ls_batch_source_free(src);
    ls_trainer_free(t);
    ls_corpus_free(c);
    *learned = below;
    return LS_OK;
fail:
    ls_batch_source_free(src);
    ls_trainer_free(t);
    ls_corpus_free(c);
    return rc;
}
