/* internal.h - shared pieces of the steal module: a small dense MLP (victim "mlp" and the
 * attacker's replica), trained with Adam on soft targets, matmuls through cblas_sgemm. */
#ifndef LLMSYS_STEAL_INTERNAL_H
#define LLMSYS_STEAL_INTERNAL_H

#include <stdint.h>

#include "llmsys/steal.h"

#define MLP_MAX_LAYERS 4

typedef struct {
    int nl;                                       /* linear layers */
    int sizes[MLP_MAX_LAYERS + 1];                /* sizes[0] = input, sizes[nl] = classes */
    int64_t np;                                   /* parameter count */
    float *p, *g, *m, *v;                         /* params, grads, Adam moments (one allocation each) */
    float *W[MLP_MAX_LAYERS], *b[MLP_MAX_LAYERS]; /* into p: W (out,in), b (out) */
    float *gW[MLP_MAX_LAYERS], *gb[MLP_MAX_LAYERS];
    int64_t step;
} ls_mlp;

typedef struct {
    int epochs;
    int batch;
    float lr; /* Adam step, decayed linearly to lr_end_frac * lr over the call */
    float lr_end_frac;
    float wd;          /* decoupled weight decay */
    float input_noise; /* Gaussian std added to inputs while training */
    float lo, hi;      /* clip noisy inputs into range */
    uint64_t seed;
    int verbose;
    const char *label;
} ls_mlp_fit_opts;

int ls_mlp_init(ls_mlp *m, int nl, const int *sizes, uint64_t seed);
void ls_mlp_free(ls_mlp *m);
/* Trains on n rows with soft targets (n*k rows summing to 1; hard labels as one-hot) and
 * optional per-row weights (NULL = 1). Returns the mean loss of the last epoch in *loss. */
int ls_mlp_fit(ls_mlp *m, const float *x, const float *targets, const float *weights, int64_t n,
               const ls_mlp_fit_opts *o, double *loss);
/* Logits (n*k), chunked; reentrant. */
int ls_mlp_logits(const ls_mlp *m, const float *x, int64_t n, float *logits);
/* dx (n*d) = d(sum_i dlogits_i . logits_i)/dx for n rows. */
int ls_mlp_input_grad(const ls_mlp *m, const float *x, int n, const float *dlogits, float *dx);
/* Row softmax in place. */
void ls_softmax_rows(float *z, int64_t n, int k);

struct ls_replica {
    ls_mlp net[LS_REPLICA_MAX_MEMBERS]; /* members; their softmax outputs are averaged */
    int members;
    int c, h, w, k;
    float lo, hi;
};

#endif
