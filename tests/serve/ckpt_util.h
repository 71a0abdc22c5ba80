/* ckpt_util.h - test helper: writes an llmsys checkpoint of a randomly initialised model. */
#ifndef LLMSYS_TEST_CKPT_UTIL_H
#define LLMSYS_TEST_CKPT_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/model.h"
#include "llmsys/safetensors.h"

/* Writes m's parameters with the checkpoint convention; scales weights so logits are not
 * all near zero (sharper distributions make greedy decoding meaningful). 0 on success. */
static int write_model_ckpt(ls_model *m, const char *path) {
    ls_st_writer *w;
    if (ls_st_writer_init(&w)) return -1;
    for (int i = 0; i < ls_model_num_tensors(m); i++) {
        ls_param p = ls_model_tensor(m, i);
        int64_t shape[2] = {p.shape[0], p.shape[1]};
        if (ls_st_writer_add(w, p.name, LS_DT_F32, p.ndim, shape, p.data)) return -1;
    }
    char *cj = ls_model_config_to_json(ls_model_cfg(m));
    int rc = ls_st_writer_meta(w, "llmsys.config", cj) || ls_st_writer_meta(w, "llmsys.step", "0") ||
             ls_st_writer_write(w, path);
    free(cj);
    ls_st_writer_free(w);
    return rc ? -1 : 0;
}

/* A tiny model with weights stretched by gain (random GPT-2 init is nearly uniform). */
static ls_model *make_model(const ls_model_config *cfg, uint64_t seed, float gain) {
    ls_model *m;
    if (ls_model_init(&m, cfg, seed)) return NULL;
    float *p = ls_model_params(m);
    for (size_t i = 0; i < ls_model_num_params(m); i++) p[i] *= gain;
    /* LayerNorm weights back near 1 */
    for (int i = 0; i < ls_model_num_tensors(m); i++) {
        ls_param t = ls_model_tensor(m, i);
        if (t.ndim == 1 && (strstr(t.name, "ln") != NULL) && strstr(t.name, ".w"))
            for (size_t k = 0; k < t.numel; k++) t.data[k] = 1.0f + 0.1f * (t.data[k] / gain);
    }
    return m;
}

#endif
