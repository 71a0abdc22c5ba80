/* ckpt.c - training checkpoints as safetensors: weights, optional AdamW moments, config and
 * step, written in the model's layout and read through the model's checkpoint opener. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/train.h"

int ls_ckpt_save(const char *path, ls_model *m, int64_t step, const char *train_json, int flags) {
    ls_st_writer *w = NULL;
    char *cfg_json = NULL;
    char **names = NULL; /* opt.m.* / opt.v.* names: the writer borrows them until write */
    char *tok_json = NULL;
    int n = ls_model_num_tensors(m), rc = LS_OK;
    LS_TRY(ls_st_writer_init(&w));
    cfg_json = ls_model_config_to_json(ls_model_cfg(m));
    names = calloc((size_t)(2 * n + 1), sizeof *names);
    if (!cfg_json || !names) {
        rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
    if ((rc = ls_st_writer_meta(w, "llmsys.config", cfg_json)) < 0) goto done;
    if ((rc = ls_st_writer_meta(w, "llmsys.step", stepbuf)) < 0) goto done;
    if ((rc = ls_st_writer_meta(w, "llmsys.ckpt", LS_CKPT_VERSION)) < 0) goto done;
    if (train_json && (rc = ls_st_writer_meta(w, "llmsys.train", train_json)) < 0) goto done;
    if (ls_model_tokenizer(m)) {
        if (!(tok_json = ls_bpe_to_json(ls_model_tokenizer(m)))) {
            rc = ls_err_wrap(LS_ENOMEM, "%s", path);
            goto done;
        }
        if ((rc = ls_st_writer_meta(w, "llmsys.tokenizer", tok_json)) < 0) goto done;
    }
    for (int i = 0; i < n; i++) {
        ls_param p = ls_model_tensor(m, i);
        if ((rc = ls_st_writer_add(w, p.name, LS_DT_F32, p.ndim, p.shape, p.data)) < 0) goto done;
    }
    if (flags & LS_CKPT_WITH_OPT) {
        for (int i = 0; i < n; i++) {
            ls_param p = ls_model_tensor(m, i);
            size_t len = strlen(p.name) + 8;
            if (!(names[2 * i] = malloc(len)) || !(names[2 * i + 1] = malloc(len))) {
                rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
                goto done;
            }
            snprintf(names[2 * i], len, "opt.m.%s", p.name);
            snprintf(names[2 * i + 1], len, "opt.v.%s", p.name);
            if ((rc = ls_st_writer_add(w, names[2 * i], LS_DT_F32, p.ndim, p.shape, p.adam_m)) < 0) goto done;
            if ((rc = ls_st_writer_add(w, names[2 * i + 1], LS_DT_F32, p.ndim, p.shape, p.adam_v)) < 0) goto done;
        }
    }
    rc = ls_st_writer_write(w, path);
done:
    if (names)
        for (int i = 0; i < 2 * n; i++) free(names[i]);
    free(names);
    free(cfg_json);
    ls_st_writer_free(w); /* before the strings it borrows */
    free(tok_json);
    return rc;
}

static int parse_step(const ls_st_file *f, int64_t *step) {
    const char *s = ls_st_meta(f, "llmsys.step");
    *step = 0;
    if (!s) return LS_OK;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end || v < 0) return ls_err(LS_EFORMAT, "%s: bad llmsys.step '%s'", ls_st_path(f), s);
    *step = v;
    return LS_OK;
}

/* Validates every tensor first, copies only when all are present, so a failed load
 * leaves m unchanged. */
static int load_tensors(ls_st_file *f, ls_model *m, int flags) {
    if (ls_st_meta(f, "llmsys.quant")) /* its packed layers are not the fp32 tensors looked for below */
        return ls_err(LS_EFORMAT, "%s: a quantized checkpoint; this needs the fp32 one (eval and serve read both)",
                      ls_st_path(f));
    int n = ls_model_num_tensors(m);
    const char *prefixes[3] = {"", "opt.m.", "opt.v."};
    int kinds = (flags & LS_CKPT_WITH_OPT) ? 3 : 1;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < kinds; k++) {
            for (int i = 0; i < n; i++) {
                ls_param p = ls_model_tensor(m, i);
                char name[256];
                snprintf(name, sizeof name, "%s%s", prefixes[k], p.name);
                const ls_st_tensor *t;
                int rc = ls_st_expect(f, name, LS_DT_F32, p.ndim, p.shape, &t);
                if (rc < 0) {
                    if (k > 0 && !ls_st_find(f, name))
                        return ls_err(LS_EFORMAT, "%s: no optimizer state (missing '%s'); it was saved without it",
                                      ls_st_path(f), name);
                    return rc;
                }
                if (pass == 1) {
                    float *dst = k == 0 ? p.data : k == 1 ? p.adam_m : p.adam_v;
                    memcpy(dst, t->data, p.numel * sizeof(float));
                }
            }
        }
    }
    return LS_OK;
}

static int fill_state(ls_st_file *f, ls_ckpt_state *st) {
    int64_t step;
    LS_TRY(parse_step(f, &step));
    if (!st) return LS_OK;
    st->step = step;
    st->train_json = NULL;
    const char *tj = ls_st_meta(f, "llmsys.train");
    if (tj && !(st->train_json = strdup(tj))) return ls_err(LS_ENOMEM, "out of memory");
    return LS_OK;
}

static int same_config(const ls_model_config *a, const ls_model_config *b) {
    return a->vocab == b->vocab && a->n_ctx == b->n_ctx && a->n_layer == b->n_layer && a->n_head == b->n_head &&
           a->d_model == b->d_model && a->d_ff == b->d_ff;
}

int ls_ckpt_load_into(const char *path, ls_model *m, int flags, ls_ckpt_state *st) {
    ls_st_file *f;
    ls_model_config cfg;
    LS_TRY(ls_ckpt_open(path, &f, &cfg));
    int rc = LS_OK;
    if (!same_config(&cfg, ls_model_cfg(m))) {
        char *want = ls_model_config_to_json(ls_model_cfg(m));
        rc = ls_err(LS_EFORMAT, "%s: model config %s does not match %s", path, ls_st_meta(f, "llmsys.config"),
                    want ? want : "the model");
        free(want);
    }
    if (rc == LS_OK) rc = parse_step(f, &(int64_t){0});
    if (rc == LS_OK) rc = load_tensors(f, m, flags);
    if (rc == LS_OK) rc = fill_state(f, st);
    ls_st_close(f);
    return rc;
}

int ls_ckpt_load(const char *path, int flags, ls_model **out, ls_ckpt_state *st) {
    ls_st_file *f;
    ls_model_config cfg;
    ls_model *m = NULL;
    LS_TRY(ls_ckpt_open(path, &f, &cfg));
    ls_bpe *tok = NULL;
    int rc = parse_step(f, &(int64_t){0});
    if (rc == LS_OK) rc = ls_ckpt_tokenizer(f, &cfg, &tok);
    if (rc == LS_OK) rc = ls_model_init(&m, &cfg, 0);
    if (rc == LS_OK) rc = ls_model_set_tokenizer(m, tok);
    else ls_bpe_free(tok);
    if (rc == LS_OK) rc = load_tensors(f, m, flags);
    if (rc == LS_OK) rc = fill_state(f, st);
    ls_st_close(f);
    if (rc < 0) {
        if (m) ls_model_free(m);
        return rc;
    }
    *out = m;
    return LS_OK;
}

void ls_ckpt_state_free(ls_ckpt_state *st) {
    if (!st) return;
    free(st->train_json);
    st->train_json = NULL;
}

int ls_generate_checkpoint(const char *path, const char *prompt, int n_new, const ls_sample_config *s, uint64_t seed,
                           FILE *out, const char *report) {
    if (!(s->temperature >= 0 && s->temperature <= 100))
        return ls_err(LS_EINVAL, "--temperature must be in [0, 100], got %g", s->temperature);
    if (!(s->top_p > 0 && s->top_p <= 1)) return ls_err(LS_EINVAL, "--top-p must be in (0, 1], got %g", s->top_p);
    if (report) LS_TRY(ls_out_path_check("report", report)); /* before the work */
    ls_model *m;
    LS_TRY(ls_ckpt_load(path, LS_CKPT_WEIGHTS, &m, NULL));
    int *ids = malloc((size_t)n_new * sizeof(int)), got = 0;
    ls_rng rng;
    ls_rng_seed(&rng, seed);
    double t0 = ls_now();
    int rc = ids ? ls_model_generate_text(m, prompt, n_new, s, &rng, ids, &got) : ls_err(LS_ENOMEM, "out of memory");
    double el = ls_now() - t0;
    char *text = NULL;
    size_t tl = 0;
    if (rc == LS_OK) rc = ls_text_decode(ls_model_tokenizer(m), ids, (size_t)got, &text, &tl);
    if (rc == LS_OK) {
        fputs(prompt, out);
        fwrite(text, 1, tl, out);
        fputc('\n', out);
        fflush(out);
    }
    if (rc == LS_OK && report) rc = ls_generate_report_write(report, m, path, prompt, ids, got, el);
    free(text);
    free(ids);
    ls_model_free(m);
    return rc;
}
