/* internal.h - shared pieces of the steal module: a small dense MLP (victim "mlp" and the
 * attacker's replica), trained with Adam on soft targets, and a small CNN (victim "cnn");
 * matmuls and convolutions (im2col) through cblas_sgemm. */
#ifndef LLMSYS_STEAL_INTERNAL_H
#define LLMSYS_STEAL_INTERNAL_H

#include <stdint.h>

#include "llmsys/steal.h"

#define MLP_MAX_LAYERS 4
#define MLP_MAX_WIDTH (1 << 20) /* units of a layer */

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
    int shift;         /* CNN only: each training image moved by a random offset of up to shift
                          pixels each way, drawn per row and minibatch (edges replicated); 0 = none,
                          and so is a shift not below the image's height or width */
    float lo, hi;      /* clip noisy inputs into range */
    uint64_t seed;
    int verbose;
    const char *label;
} ls_mlp_fit_opts;

/* The parameter block of steal's networks: allocates params buf[0], gradients buf[1] and
 * Adam moments buf[2], buf[3] (zeroed) for nl layers of W (out[l], in[l]) then b (out[l])
 * each, points W, b, gW, gb into them and He-initialises every W from seed; *np gets the
 * parameter count. LS_ENOMEM (message names what, nothing left allocated) on failure. */
int ls_net_alloc(const char *what, int nl, const int *out, const int *in, uint64_t seed, int64_t *np, float *buf[4],
                 float **W, float **b, float **gW, float **gb);
int ls_mlp_init(ls_mlp *m, int nl, const int *sizes, uint64_t seed);
void ls_mlp_free(ls_mlp *m);
/* Trains on n rows with soft targets (n*k rows summing to 1; hard labels as one-hot) and
 * optional per-row weights (NULL = 1). Returns the mean loss of the last epoch in *loss. */
int ls_mlp_fit(ls_mlp *m, const float *x, const float *targets, const float *weights, int64_t n,
               const ls_mlp_fit_opts *o, double *loss);
/* The loss ls_mlp_fit minimises on n rows (soft cross-entropy, weighted mean; weights NULL =
 * 1) into *loss, its gradient into m->g, and the input gradient into dx (n*d) when non-NULL. */
int ls_mlp_loss_grad(ls_mlp *m, const float *x, int n, const float *targets, const float *weights, double *loss,
                     float *dx);
/* Logits (n*k), chunked; reentrant. */
int ls_mlp_logits(const ls_mlp *m, const float *x, int64_t n, float *logits);
/* dx (n*d) = d(sum_i dlogits_i . logits_i)/dx for n rows. */
int ls_mlp_input_grad(const ls_mlp *m, const float *x, int n, const float *dlogits, float *dx);
/* Row softmax in place. */
void ls_softmax_rows(float *z, int64_t n, int k);
/* Minibatch of b rows of x (d wide) listed in rows, into xb, with o->input_noise (clipped to
 * [o->lo, o->hi]) drawn from r when set. Shared by the MLP and CNN fits. */
void ls_fit_gather(const float *x, int d, const int *rows, int b, const ls_mlp_fit_opts *o, ls_rng *r, float *xb);
/* Learning rate at step t of total: o->lr falling linearly to o->lr * o->lr_end_frac. */
float ls_fit_lr(const ls_mlp_fit_opts *o, int64_t t, int64_t total);
/* A network for ls_fit_run: its parameters, gradients and Adam state, and grad, which
 * overwrites g with the gradient of one minibatch (inputs xb, b rows, their indices rows
 * in the training set) and adds the batch's summed loss and weight to *loss, *weight. */
typedef struct {
    float *p, *g, *m, *v;
    int64_t np, *step;
    int (*grad)(void *ctx, const float *xb, const int *rows, int b, double *loss, double *weight);
    void *ctx;
} ls_fit_net;
/* The one training loop of steal's networks: o->epochs passes over n rows of x (d wide) in
 * shuffled minibatches of bs (ls_fit_gather: input noise), Adam (b1 0.9, b2 0.999, eps
 * 1e-8, decoupled weight decay o->wd) at ls_fit_lr, a progress bar when o->verbose.
 * *loss (may be NULL): the last epoch's loss per unit of weight. */
int ls_fit_run(const ls_fit_net *net, const float *x, int d, int64_t n, int bs, const ls_mlp_fit_opts *o,
               const char *label, double *loss);

/* A small CNN for (C,H,W) images (cnn.c): conv ks x ks (C -> c1, same padding) -> ReLU ->
 * 2x2 max-pool -> conv ks x ks (c1 -> c2) -> ReLU -> 2x2 max-pool -> fc (-> hidden) -> ReLU ->
 * fc (-> k), or one fc (-> k) when hidden = 0. Parameters in one allocation: W[0], b[0] conv 1
 * with W (c1, ks, ks, C); W[1], b[1] conv 2 (c2, ks, ks, c1); W[2..] the fc layers (out, in),
 * whose first input is the pooled map flattened as (H/4, W/4, c2). */
typedef struct {
    int c, h, w, k;         /* input shape, classes */
    int c1, c2, ks, hidden; /* conv channels, odd kernel size, fc hidden width (0 = none) */
    int nfc;                /* fc layers: 2 with a hidden layer, else 1 */
    int64_t np;             /* parameter count */
    float *p, *g, *m, *v;   /* params, grads, Adam moments (one allocation each) */
    float *W[4], *b[4];     /* into p */
    float *gW[4], *gb[4];   /* into g */
    int64_t step;
} ls_cnn;

/* Checks the shape (C 1..64, H and W >= 4, odd ks) and He-initialises; LS_EINVAL or LS_ENOMEM
 * with a message on failure (then nothing to free). */
int ls_cnn_init(ls_cnn *m, int c, int h, int w, int k, int c1, int c2, int ks, int hidden, uint64_t seed);
void ls_cnn_free(ls_cnn *m);
/* The parameter count ls_cnn_init gives these sizes, in double so that no forged size
 * overflows: file readers compare it with what the file holds before allocating. */
double ls_cnn_param_count(int c, int h, int w, int k, int c1, int c2, int ks, int hidden);
/* dst (c, h, w) = src moved by dy rows and dx columns: pixel (y, x) takes (y - dy, x - dx),
 * clamped to the frame (the edge rows and columns are repeated). dst must not overlap src. */
void ls_image_shift(const float *src, int c, int h, int w, int dy, int dx, float *dst);
/* Trains on n CHW rows with hard labels y in [0,k) by minibatch Adam (o: epochs, batch,
 * lr decayed linearly to lr_end_frac*lr, wd, input_noise clipped to [lo,hi], shift, seed,
 * verbose, label). *loss (may be NULL): mean cross-entropy of the last epoch. */
int ls_cnn_fit(ls_cnn *m, const float *x, const int32_t *y, int64_t n, const ls_mlp_fit_opts *o, double *loss);
/* How steal trains its CNNs (the cnn victim, the replica's CNN member): minibatches of 64, Adam
 * at 1e-3 decayed linearly to 5 % of it, weight decay 1e-4, no input noise. */
ls_mlp_fit_opts ls_cnn_fit_opts(int epochs, float lo, float hi, uint64_t seed, int verbose, const char *label);
/* Logits (n*k) of n CHW rows, in 64-row chunks; reentrant (own workspace per call). */
int ls_cnn_logits(const ls_cnn *m, const float *x, int64_t n, float *logits);
/* Mean softmax cross-entropy of n rows against y in *loss; overwrites m->g with its gradient
 * and, when dx is non-NULL, writes d loss / d x (n CHW rows). Used by the fit and the tests. */
int ls_cnn_loss_grad(ls_cnn *m, const float *x, int n, const int32_t *y, double *loss, float *dx);
/* One same-padded convolution, NHWC: y (n,h,w,cout) = b + conv(x (n,h,w,cin), W (cout,ks,ks,cin));
 * cols is scratch of n*h*w*ks*ks*cin floats (the im2col matrix). No ReLU. */
void ls_cnn_conv2d(const float *x, int n, int h, int w, int cin, const float *W, const float *b, int cout, int ks,
                   float *cols, float *y);

/* Copies a scaler (per-feature raw minima and maxima of d features) into fresh arrays; both
 * NULL when mn or mx is. LS_ENOMEM (nothing allocated) when out of memory. */
int ls_scaler_dup(const float *mn, const float *mx, int d, float **omin, float **omax);

/* A single CART's flat arrays (a tree victim): nnodes nodes, feat < 0 marking a leaf whose
 * row of probs (nleaves x k) is left[i]; x goes left when x[feat] < thr. */
typedef struct {
    int32_t nnodes, nleaves;
    const int32_t *feat, *left, *right;
    const float *thr, *probs;
} ls_tree_view;
/* The arrays of v, which must be a tree victim (else LS_EINVAL); they stay v's. */
int ls_victim_tree_view(const ls_victim *v, ls_tree_view *out);
/* A tree victim (d = c*h*w features, k classes, range [lo, hi]) from copies of t's arrays,
 * checked as victim.bin's loader checks a tree; LS_EFORMAT naming `what` otherwise. */
int ls_victim_tree_from(const ls_tree_view *t, int d, int k, int c, int h, int w, float lo, float hi,
                        const char *what, ls_victim **out);

struct ls_replica {
    ls_mlp net[LS_REPLICA_MAX_MEMBERS]; /* members; their softmax outputs are averaged */
    int members;
    ls_victim *tree; /* ls_steal_opts.tree_member: a CART fitted on the queries, its leaf probabilities
                        added to that average (NULL otherwise) */
    ls_cnn *cnn;     /* ls_steal_opts.cnn_member: a CNN trained on the answers, its softmax added too
                        (NULL otherwise) */
    float cnn_weight; /* ... times this weight (ls_steal_opts.cnn_weight) */
    ls_mlp *lin;      /* ls_steal_opts.linear_member: a softmax regression (one layer) of the answers,
                         its softmax added too, with weight 1 (NULL otherwise) */
    int c, h, w, k;
    float lo, hi;
};

#endif
