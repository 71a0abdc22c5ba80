/* precision.h - internal: the mixed-precision dispatch at the model's Linear call sites
 * (gpt.c) and the per-model precision state. Public API in llmsys/model.h. */
#ifndef LLMSYS_MODEL_PRECISION_H
#define LLMSYS_MODEL_PRECISION_H

#include <stdint.h>

#include "llmsys/model.h"

typedef struct ls_model_prec {
    ls_prec_ctx *ctx;
    uint8_t *prec; /* n entries, LS_LIN(l, kind) */
    int n, per_channel;
    ls_linear_observer obs;
    void *obs_user;
    double *timer; /* per-layer wall seconds, when timing (ls_model_set_linear_timer) */
    int warned;
} ls_model_prec;

/* The slot in the model that holds its precision state (gpt.c owns the struct). */
ls_model_prec **ls_model_prec_slot(ls_model *m);
void ls_model_prec_free(ls_model_prec *mp);

/* Same contracts as ls_matmul_forward / _gelu_forward / _backward / _gelu_backward in
 * layers.h, with Linear layer `lin` run in its precision (mp NULL or fp32: those very
 * functions). A failing low-precision GEMM (out of memory) falls back to fp32 with one
 * warning. */
void ls_lin_forward(ls_model_prec *mp, int lin, float *out, const float *inp, const float *w, const float *bias,
                    const float *residual, int N, int IC, int OC);
void ls_lin_gelu_forward(ls_model_prec *mp, int lin, float *pre, float *out, const float *inp, const float *w,
                         const float *bias, int N, int IC, int OC);
void ls_lin_backward(ls_model_prec *mp, int lin, float *dinp, float *dw, float *dbias, const float *dout,
                     const float *inp, const float *w, int N, int IC, int OC);
void ls_lin_gelu_backward(ls_model_prec *mp, int lin, float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, const float *w, const float *gelu_pre, int N, int IC, int OC);

#endif
