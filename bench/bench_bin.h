/* bench_bin.h - benchmarks that start llmsys processes find the binary next to their own;
 * the serving benchmarks build the 8-bit two-stage model they serve. */
#ifndef LLMSYS_BENCH_BIN_H
#define LLMSYS_BENCH_BIN_H

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

/* given (from --llmsys) or <this binary's directory>/llmsys, in buf; NULL (after one line on
 * stderr naming prog) when that is not a file. */
static const char *bench_llmsys_bin(const char *prog, const char *given, char *buf, size_t n) {
    if (!given) {
        char self[4096];
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0) return NULL;
        self[k] = '\0';
        snprintf(buf, n, "%s/llmsys", dirname(self));
        given = buf;
    }
    if (!ls_is_file(given)) {
        fprintf(stderr, "%s: no llmsys binary at %s (use --llmsys)\n", prog, given);
        return NULL;
    }
    return given;
}

/* A fresh `config` GPT (seed 1) saved to ckpt, quantized to 8 bits in q8, and *two: a plan
 * of two stages, half the layers each, with micro-batches mbp (prefill) and mbd (decode). */
static int bench_q8_two_stages(const char *config, const char *ckpt, const char *q8, int mbp, int mbd,
                               ls_model_config *cfg, ls_plan *two) {
    ls_model *m = NULL;
    LS_TRY(ls_model_config_named(config, cfg));
    int rc = ls_model_init(&m, cfg, 1), *bits = malloc(sizeof(int) * cfg->n_layer);
    if (rc == LS_OK) rc = ls_ckpt_save(ckpt, m, 0, NULL, LS_CKPT_WEIGHTS);
    ls_model_free(m);
    if (rc == LS_OK && !bits) rc = ls_err(LS_ENOMEM, "out of memory");
    for (int l = 0; rc == LS_OK && l < cfg->n_layer; l++) bits[l] = 8;
    if (rc == LS_OK) rc = ls_quant_checkpoint(ckpt, bits, cfg->n_layer, 64, q8);
    if (rc == LS_OK) rc = ls_plan_single(two, cfg->n_layer, bits, mbp, mbd);
    free(bits);
    if (rc != LS_OK) return rc;
    two->n_stages = 2;
    two->stages[0].layer_end = cfg->n_layer / 2;
    two->stages[1] = two->stages[0];
    two->stages[1].layer_begin = cfg->n_layer / 2;
    two->stages[1].layer_end = cfg->n_layer;
    return LS_OK;
}

#endif
