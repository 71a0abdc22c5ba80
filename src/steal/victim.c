/* victim.c - the black-box models the audit attacks: logistic regression, linear SVM, CART
 * tree, random forest, k-nearest neighbours, Gaussian naive Bayes, an MLP and a small CNN
 * (cnn.c), all trained here, with the victim.bin file format (magic, version, checksum). */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "steal/internal.h"

/* cnn defaults: conv 3x3 1->16 and 16->32, fc 128, 6 epochs; picked to train on 30 000
 * Fashion-MNIST rows in under two minutes on one core (5x5 kernels took twice as long for
 * a lower test accuracy; docs/steal.md has the measurements). */
enum { CNN_CONV1 = 16, CNN_CONV2 = 32, CNN_KERNEL = 3, CNN_HIDDEN = 128, CNN_EPOCHS = 6 };

/* the most neighbours a k-NN victim votes with: knn_proba's tables hold this many */
enum { KNN_MAX_K = 64 };

static const char *type_names[LS_VICTIM_COUNT] = {"logreg", "svm", "tree", "forest", "knn", "nb", "mlp", "cnn"};

const char *ls_victim_type_name(int t) { return t >= 0 && t < LS_VICTIM_COUNT ? type_names[t] : "?"; }

int ls_victim_type_parse(const char *s) {
    for (int i = 0; i < LS_VICTIM_COUNT; i++)
        if (!strcmp(s, type_names[i])) return i;
    return -1;
}

/* A CART tree stored flat: feat < 0 marks a leaf whose class distribution starts at
 * probs[left * k]. */
typedef struct {
    int32_t nnodes, nleaves;
    int32_t *feat, *left, *right;
    float *thr;
    float *probs;
} tree_t;

struct ls_victim {
    int type, d, k, c, h, w;
    float lo, hi;
    /* logreg, svm (scores = x W^T + b), mlp */
    ls_mlp net;
    /* cnn */
    ls_cnn cnn;
    float svm_scale; /* svm: softmax(scale * margin) as its "probabilities" */
    /* tree, forest */
    int ntrees;
    tree_t *trees;
    /* knn */
    int64_t nref;
    int knn_k;
    float *ref, *ref_sq;
    int32_t *ref_y;
    /* nb */
    float *nb_mean, *nb_ivar, *nb_logc; /* (k,d), (k,d) 1/var, (k) log prior - 0.5 sum log var */
    /* the training data's min-max scaler (d each), NULL when inputs were never rescaled */
    float *raw_min, *raw_max;
};

void ls_victim_opts_default(ls_victim_opts *o, int type) {
    memset(o, 0, sizeof *o);
    o->type = type;
    o->seed = 42;
    o->epochs = type == LS_VICTIM_MLP ? 12 : type == LS_VICTIM_CNN ? CNN_EPOCHS : 8;
    o->max_depth = type == LS_VICTIM_FOREST ? 18 : 12;
    o->min_leaf = type == LS_VICTIM_FOREST ? 1 : 5;
    o->trees = 40;
    o->knn_k = 5;
    o->knn_ref = 10000;
    o->hidden = type == LS_VICTIM_CNN ? CNN_HIDDEN : 256;
    o->conv1 = CNN_CONV1;
    o->conv2 = CNN_CONV2;
    o->kernel = CNN_KERNEL;
}

int ls_victim_opts_fit(const ls_victim_opts *o) {
    int64_t max_trees = ls_mem_max_items(sizeof(tree_t) + 4 * sizeof(int32_t) + 64 * sizeof(float));
    if (o->type == LS_VICTIM_FOREST && o->trees > max_trees)
        return ls_err(LS_EINVAL, "--trees must be at most %lld here (every tree in memory), got %d",
                      (long long)max_trees, o->trees);
    if (o->type == LS_VICTIM_KNN && o->knn_k > KNN_MAX_K)
        return ls_err(LS_EINVAL, "knn_k must be at most %d, got %d", KNN_MAX_K, o->knn_k);
    if (o->type == LS_VICTIM_MLP && o->hidden > MLP_MAX_WIDTH)
        return ls_err(LS_EINVAL, "--hidden must be at most %d for an mlp, got %d", MLP_MAX_WIDTH, o->hidden);
    return LS_OK;
}

int ls_victim_kind(const ls_victim *v) { return v->type; }

void ls_victim_scaler(const ls_victim *v, const float **raw_min, const float **raw_max) {
    *raw_min = v->raw_min;
    *raw_max = v->raw_max;
}

void ls_victim_scale_inputs(const ls_victim *v, float *x, int64_t n) {
    if (v->raw_min && v->raw_max) ls_steal_scale_rows(v->raw_min, v->raw_max, v->d, v->lo, v->hi, x, n);
}

void ls_victim_info(const ls_victim *v, int *d, int *k, float *lo, float *hi, int shape[3]) {
    if (d) *d = v->d;
    if (k) *k = v->k;
    if (lo) *lo = v->lo;
    if (hi) *hi = v->hi;
    if (shape) {
        shape[0] = v->c;
        shape[1] = v->h;
        shape[2] = v->w;
    }
}

static void tree_free(tree_t *t) {
    free(t->feat);
    free(t->left);
    free(t->right);
    free(t->thr);
    free(t->probs);
    memset(t, 0, sizeof *t);
}

void ls_victim_free(ls_victim *v) {
    if (!v) return;
    ls_mlp_free(&v->net);
    ls_cnn_free(&v->cnn);
    for (int i = 0; i < v->ntrees; i++) tree_free(&v->trees[i]);
    free(v->trees);
    free(v->ref);
    free(v->ref_sq);
    free(v->ref_y);
    free(v->nb_mean);
    free(v->nb_ivar);
    free(v->nb_logc);
    free(v->raw_min);
    free(v->raw_max);
    free(v);
}

/* ---------------------------------------------------------------- linear models, mlp */

static float *one_hot(const ls_steal_data *t) {
    float *y = calloc((size_t)t->n * t->k, sizeof(float));
    if (y)
        for (int64_t i = 0; i < t->n; i++) y[i * t->k + t->y[i]] = 1.0f;
    return y;
}

/* Passes over t for the gradient-trained victims. Inputs of at most 256 features (tables,
 * 8x8 digits) get at least 15 000 Adam steps: their steps are cheap, and at o->epochs the wine,
 * iris and blobs victims stopped well short of what those models reach (blobs logreg 0.67 after
 * 14 epochs, 0.85 after 200). Larger inputs keep o->epochs (Fashion-MNIST's 30 000 rows give
 * 1880 logreg and 2820 mlp steps). */
static int epochs_for(const ls_victim_opts *o, const ls_steal_data *t, int batch) {
    int64_t steps = (t->n + batch - 1) / batch, need = t->d <= 256 ? (15000 + steps - 1) / steps : 0;
    if (need > 20000) need = 20000;
    return need > o->epochs ? (int)need : o->epochs;
}

static int train_net(ls_victim *v, const ls_victim_opts *o, const ls_steal_data *t) {
    int sizes[3] = {t->d, o->hidden, t->k};
    int nl = v->type == LS_VICTIM_MLP ? 2 : 1;
    if (nl == 1) sizes[1] = t->k;
    LS_TRY(ls_mlp_init(&v->net, nl, sizes, o->seed));
    float *y = one_hot(t);
    if (!y) return ls_err(LS_ENOMEM, "victim: out of memory");
    int epochs = epochs_for(o, t, 128);
    ls_mlp_fit_opts fo = {.epochs = epochs,
                          .batch = 128,
                          .lr = nl == 1 ? 2e-3f : 1e-3f,
                          .lr_end_frac = 0.05f,
                          .wd = nl == 1 ? 1e-4f : 2e-5f,
                          .lo = t->lo,
                          .hi = t->hi,
                          .seed = o->seed,
                          .verbose = o->verbose,
                          .label = type_names[v->type]};
    int rc = ls_mlp_fit(&v->net, t->x, y, NULL, t->n, &fo, NULL);
    free(y);
    return rc;
}

/* One-vs-rest linear SVM: squared-norm regularised hinge loss per class, minibatch Adam. */
static int train_svm(ls_victim *v, const ls_victim_opts *o, const ls_steal_data *t) {
    int sizes[2] = {t->d, t->k};
    LS_TRY(ls_mlp_init(&v->net, 1, sizes, o->seed));
    ls_mlp *m = &v->net;
    memset(m->p, 0, sizeof(float) * (size_t)m->np);
    int d = t->d, k = t->k, bs = 128;
    float *xb = malloc(sizeof(float) * (size_t)bs * d), *s = malloc(sizeof(float) * (size_t)bs * k);
    int *perm = malloc(sizeof(int) * (size_t)t->n);
    if (!xb || !s || !perm) {
        free(xb);
        free(s);
        free(perm);
        return ls_err(LS_ENOMEM, "svm: out of memory");
    }
    for (int64_t i = 0; i < t->n; i++) perm[i] = (int)i;
    ls_rng r;
    ls_rng_seed(&r, o->seed);
    const float lam = 1e-4f, b1 = 0.9f, b2 = 0.999f;
    int epochs = epochs_for(o, t, bs);
    int64_t total = ((t->n + bs - 1) / bs) * epochs, step = 0;
    ls_progress pg;
    if (o->verbose) ls_progress_start(&pg, "svm", total);
    for (int ep = 0; ep < epochs; ep++) {
        ls_rng_shuffle_int(&r, perm, (size_t)t->n);
        for (int64_t st = 0; st < t->n; st += bs) {
            int b = (int)(t->n - st < bs ? t->n - st : bs);
            for (int i = 0; i < b; i++) memcpy(xb + (size_t)i * d, t->x + (int64_t)perm[st + i] * d, sizeof(float) * d);
            for (int i = 0; i < b; i++) memcpy(s + (size_t)i * k, m->b[0], sizeof(float) * k);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, k, d, 1.0f, xb, d, m->W[0], d, 1.0f, s, k);
            for (int i = 0; i < b; i++)
                for (int j = 0; j < k; j++) {
                    float yy = t->y[perm[st + i]] == j ? 1.0f : -1.0f;
                    s[i * k + j] = yy * s[i * k + j] < 1.0f ? -yy / (float)b : 0.0f;
                }
            memset(m->g, 0, sizeof(float) * (size_t)m->np);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, d, b, 1.0f, s, k, xb, d, 0.0f, m->gW[0], d);
            for (int i = 0; i < b; i++)
                for (int j = 0; j < k; j++) m->gb[0][j] += s[i * k + j];
            for (int64_t i = 0; i < (int64_t)k * d; i++) m->gW[0][i] += lam * m->W[0][i];
            m->step++;
            float lr = 1e-3f * (float)(1.0 - 0.95 * (double)step / (double)(total > 1 ? total - 1 : 1));
            float c1 = 1 - powf(b1, (float)m->step), c2 = 1 - powf(b2, (float)m->step);
            for (int64_t i = 0; i < m->np; i++) {
                m->m[i] = b1 * m->m[i] + (1 - b1) * m->g[i];
                m->v[i] = b2 * m->v[i] + (1 - b2) * m->g[i] * m->g[i];
                m->p[i] -= lr * (m->m[i] / c1) / (sqrtf(m->v[i] / c2) + 1e-8f);
            }
            step++;
            if (o->verbose) ls_progress_update(&pg, step, NULL);
        }
    }
    if (o->verbose) ls_progress_end(&pg);
    v->svm_scale = 2.0f;
    free(xb);
    free(s);
    free(perm);
    return LS_OK;
}

/* ---------------------------------------------------------------- cnn */

static int train_cnn(ls_victim *v, const ls_victim_opts *o, const ls_steal_data *t) {
    if (t->h < 4 || t->w < 4 || (int64_t)t->c * t->h * t->w != t->d)
        return ls_err(LS_EINVAL, "cnn victim needs image-shaped data (C,H,W) with H, W >= 4; %s has shape (%d,%d,%d)",
                      t->name[0] ? t->name : "the data", t->c, t->h, t->w);
    LS_TRY(ls_cnn_init(&v->cnn, t->c, t->h, t->w, t->k, o->conv1, o->conv2, o->kernel, o->hidden, o->seed));
    ls_mlp_fit_opts fo = ls_cnn_fit_opts(epochs_for(o, t, 64), t->lo, t->hi, o->seed, o->verbose, "cnn");
    return ls_cnn_fit(&v->cnn, t->x, t->y, t->n, &fo, NULL);
}

/* ---------------------------------------------------------------- trees */

enum { NBINS = 32 };

typedef struct {
    const ls_steal_data *t;
    const uint8_t *bins; /* n x d bin indices */
    float bin_lo, bin_w;
    int max_depth, min_leaf, mtry;
    ls_rng rng;
    tree_t *tr;
    int cap, capl;
    int32_t *hist; /* d x NBINS x k */
    int *feats;
} tree_builder;

static int tree_new_node(tree_builder *b) {
    tree_t *t = b->tr;
    if (t->nnodes == b->cap) {
        int nc = b->cap ? b->cap * 2 : 256;
        int32_t *f = realloc(t->feat, sizeof(int32_t) * nc);
        if (f) t->feat = f;
        int32_t *l = realloc(t->left, sizeof(int32_t) * nc);
        if (l) t->left = l;
        int32_t *r = realloc(t->right, sizeof(int32_t) * nc);
        if (r) t->right = r;
        float *th = realloc(t->thr, sizeof(float) * nc);
        if (th) t->thr = th;
        if (!f || !l || !r || !th) return ls_err(LS_ENOMEM, "tree: out of memory");
        b->cap = nc;
    }
    return t->nnodes++;
}

static int tree_make_leaf(tree_builder *b, int node, const int *cnt, int n) {
    tree_t *t = b->tr;
    int k = b->t->k;
    if (t->nleaves == b->capl) {
        int nc = b->capl ? b->capl * 2 : 128;
        float *p = realloc(t->probs, sizeof(float) * (size_t)nc * k);
        if (!p) return ls_err(LS_ENOMEM, "tree: out of memory");
        t->probs = p;
        b->capl = nc;
    }
    t->feat[node] = -1;
    t->left[node] = t->nleaves;
    t->right[node] = -1;
    t->thr[node] = 0;
    for (int j = 0; j < k; j++) t->probs[(size_t)t->nleaves * k + j] = n > 0 ? (float)cnt[j] / (float)n : 1.0f / k;
    t->nleaves++;
    return LS_OK;
}

static int tree_build(tree_builder *b, int *idx, int n, int depth, int *node_out) {
    int k = b->t->k, d = b->t->d;
    int node = tree_new_node(b);
    if (node < 0) return node;
    *node_out = node;
    int cnt[64] = {0};
    for (int i = 0; i < n; i++) cnt[b->t->y[idx[i]]]++;
    int nonzero = 0;
    for (int j = 0; j < k; j++) nonzero += cnt[j] > 0;
    if (depth >= b->max_depth || n < 2 * b->min_leaf || nonzero <= 1) return tree_make_leaf(b, node, cnt, n);
    /* Candidate features: all, or mtry drawn without replacement (forest). */
    int nf = b->mtry > 0 && b->mtry < d ? b->mtry : d;
    if (nf < d) {
        for (int j = 0; j < d; j++) b->feats[j] = j;
        for (int j = 0; j < nf; j++) {
            int r = j + (int)ls_rng_below(&b->rng, (uint64_t)(d - j));
            int tmp = b->feats[j];
            b->feats[j] = b->feats[r];
            b->feats[r] = tmp;
        }
    } else {
        for (int j = 0; j < d; j++) b->feats[j] = j;
    }
    memset(b->hist, 0, sizeof(int32_t) * (size_t)nf * NBINS * k);
    for (int i = 0; i < n; i++) {
        const uint8_t *row = b->bins + (int64_t)idx[i] * d;
        int y = b->t->y[idx[i]];
        for (int f = 0; f < nf; f++) b->hist[((size_t)f * NBINS + row[b->feats[f]]) * k + y]++;
    }
    /* Best Gini split: minimise sum over children of n_c * (1 - sum p^2) = n_c - sum cnt^2/n_c. */
    double best = 0, parent = 0;
    for (int j = 0; j < k; j++) parent += (double)cnt[j] * cnt[j];
    parent = n - parent / n;
    best = parent - 1e-9;
    int bf = -1, bbin = -1;
    int lc[64];
    for (int f = 0; f < nf; f++) {
        memset(lc, 0, sizeof(int) * k);
        int nlft = 0;
        for (int bin = 0; bin < NBINS - 1; bin++) {
            const int32_t *h = b->hist + ((size_t)f * NBINS + bin) * k;
            for (int j = 0; j < k; j++) {
                lc[j] += h[j];
                nlft += h[j];
            }
            int nr = n - nlft;
            if (nlft < b->min_leaf) continue;
            if (nr < b->min_leaf) break;
            double sl = 0, sr = 0;
            for (int j = 0; j < k; j++) {
                sl += (double)lc[j] * lc[j];
                double rj = cnt[j] - lc[j];
                sr += rj * rj;
            }
            double g = (nlft - sl / nlft) + (nr - sr / nr);
            if (g < best) {
                best = g;
                bf = b->feats[f];
                bbin = bin;
            }
        }
    }
    if (bf < 0) return tree_make_leaf(b, node, cnt, n);
    /* Partition idx: bin <= bbin goes left. */
    int i = 0, j = n - 1;
    while (i <= j) {
        if (b->bins[(int64_t)idx[i] * d + bf] <= bbin)
            i++;
        else {
            int tmp = idx[i];
            idx[i] = idx[j];
            idx[j] = tmp;
            j--;
        }
    }
    int nl = i, l, r;
    LS_TRY(tree_build(b, idx, nl, depth + 1, &l));
    LS_TRY(tree_build(b, idx + nl, n - nl, depth + 1, &r));
    tree_t *t = b->tr;
    t->feat[node] = bf;
    t->thr[node] = b->bin_lo + (float)(bbin + 1) * b->bin_w; /* x < thr goes left */
    t->left[node] = l;
    t->right[node] = r;
    return LS_OK;
}

static int train_trees(ls_victim *v, const ls_victim_opts *o, const ls_steal_data *t) {
    int d = t->d, k = t->k;
    int ntrees = v->type == LS_VICTIM_FOREST ? (o->trees > 0 ? o->trees : 40) : 1;
    uint8_t *bins = malloc((size_t)t->n * d);
    int *idx = malloc(sizeof(int) * (size_t)t->n);
    int32_t *hist = malloc(sizeof(int32_t) * (size_t)d * NBINS * k);
    int *feats = malloc(sizeof(int) * (size_t)d);
    v->trees = calloc((size_t)ntrees, sizeof(tree_t));
    int rc = LS_OK;
    if (!bins || !idx || !hist || !feats || !v->trees) {
        rc = ls_err(LS_ENOMEM, "tree: out of memory");
        goto done;
    }
    /* Uniform bins over the declared range; thresholds fall on bin edges. */
    float bw = (t->hi - t->lo) / NBINS;
    for (int64_t i = 0; i < t->n * d; i++) {
        int bi = (int)((t->x[i] - t->lo) / bw);
        bins[i] = (uint8_t)(bi < 0 ? 0 : bi >= NBINS ? NBINS - 1 : bi);
    }
    ls_progress pg;
    if (o->verbose) ls_progress_start(&pg, type_names[v->type], ntrees);
    for (int tr = 0; tr < ntrees; tr++) {
        tree_builder b = {.t = t,
                          .bins = bins,
                          .bin_lo = t->lo,
                          .bin_w = bw,
                          .max_depth = o->max_depth,
                          .min_leaf = o->min_leaf > 0 ? o->min_leaf : 1,
                          .tr = &v->trees[tr],
                          .hist = hist,
                          .feats = feats};
        ls_rng_seed(&b.rng, o->seed * 1000003u + (uint64_t)tr);
        int64_t n = t->n;
        if (ntrees > 1) {
            b.mtry = (int)ceil(sqrt((double)d));
            for (int64_t i = 0; i < n; i++) idx[i] = (int)ls_rng_below(&b.rng, (uint64_t)t->n); /* bootstrap */
        } else {
            for (int64_t i = 0; i < n; i++) idx[i] = (int)i;
        }
        int root;
        v->ntrees = tr + 1;
        rc = tree_build(&b, idx, (int)n, 0, &root);
        if (rc) goto done;
        if (o->verbose) ls_progress_update(&pg, tr + 1, "%d nodes", v->trees[tr].nnodes);
    }
    if (o->verbose) ls_progress_end(&pg);
done:
    free(bins);
    free(idx);
    free(hist);
    free(feats);
    return rc;
}

static const float *tree_leaf(const tree_t *t, const float *x, int k) {
    int n = 0;
    while (t->feat[n] >= 0) n = x[t->feat[n]] < t->thr[n] ? t->left[n] : t->right[n];
    return t->probs + (size_t)t->left[n] * k;
}

/* ---------------------------------------------------------------- knn, nb */

static int train_knn(ls_victim *v, const ls_victim_opts *o, const ls_steal_data *t) {
    ls_steal_data sub;
    LS_TRY(ls_steal_data_subset(t, o->knn_ref, o->seed, &sub));
    v->nref = sub.n;
    v->ref = sub.x;
    v->ref_y = sub.y;
    free(sub.raw_min); /* the subset's copy of the scaler: the victim keeps its own */
    free(sub.raw_max);
    v->knn_k = o->knn_k > 0 ? o->knn_k : 5;
    if (v->knn_k > v->nref) v->knn_k = (int)v->nref;
    v->ref_sq = malloc(sizeof(float) * (size_t)sub.n);
    if (!v->ref_sq) return ls_err(LS_ENOMEM, "knn: out of memory");
    for (int64_t i = 0; i < sub.n; i++) {
        double s = 0;
        for (int j = 0; j < t->d; j++) s += (double)sub.x[i * t->d + j] * sub.x[i * t->d + j];
        v->ref_sq[i] = (float)s;
    }
    return LS_OK;
}

static int train_nb(ls_victim *v, const ls_steal_data *t) {
    int d = t->d, k = t->k;
    v->nb_mean = calloc((size_t)k * d, sizeof(float));
    v->nb_ivar = calloc((size_t)k * d, sizeof(float));
    v->nb_logc = calloc((size_t)k, sizeof(float));
    double *s1 = calloc((size_t)k * d, sizeof(double)), *s2 = calloc((size_t)k * d, sizeof(double));
    int64_t cnt[64] = {0};
    if (!v->nb_mean || !v->nb_ivar || !v->nb_logc || !s1 || !s2) {
        free(s1);
        free(s2);
        return ls_err(LS_ENOMEM, "nb: out of memory");
    }
    double maxvar = 0;
    for (int64_t i = 0; i < t->n; i++) {
        int y = t->y[i];
        cnt[y]++;
        for (int j = 0; j < d; j++) {
            double x = t->x[i * d + j];
            s1[(size_t)y * d + j] += x;
            s2[(size_t)y * d + j] += x * x;
        }
    }
    for (int64_t j = 0; j < (int64_t)k * d; j++) {
        int c = (int)(j / d);
        if (!cnt[c]) continue;
        double mu = s1[j] / cnt[c], var = s2[j] / cnt[c] - mu * mu;
        if (var > maxvar) maxvar = var;
    }
    /* Variance smoothing, as a fraction of the largest feature variance: it keeps constant
     * pixels (always 0 in a class) from dominating the likelihood. */
    double eps = 0.05 * maxvar + 1e-9;
    for (int c = 0; c < k; c++) {
        double logc = log(cnt[c] > 0 ? (double)cnt[c] / (double)t->n : 1e-12);
        for (int j = 0; j < d; j++) {
            size_t q = (size_t)c * d + j;
            double mu = cnt[c] ? s1[q] / cnt[c] : 0, var = (cnt[c] ? s2[q] / cnt[c] - mu * mu : 0) + eps;
            if (var < eps) var = eps;
            v->nb_mean[q] = (float)mu;
            v->nb_ivar[q] = (float)(1.0 / var);
            logc -= 0.5 * log(var);
        }
        v->nb_logc[c] = (float)logc;
    }
    free(s1);
    free(s2);
    return LS_OK;
}

/* ---------------------------------------------------------------- train, predict */

int ls_victim_train(const ls_victim_opts *o, const ls_steal_data *t, ls_victim **out) {
    *out = NULL;
    if (o->type < 0 || o->type >= LS_VICTIM_COUNT) return ls_err(LS_EINVAL, "victim: unknown type %d", o->type);
    if (t->n < 2 || t->k < 2 || t->k > 64) return ls_err(LS_EINVAL, "victim: need >= 2 rows and 2..64 classes");
    LS_TRY(ls_victim_opts_fit(o));
    ls_victim *v = calloc(1, sizeof *v);
    if (!v) return ls_err(LS_ENOMEM, "victim: out of memory");
    v->type = o->type;
    v->d = t->d;
    v->k = t->k;
    v->c = t->c;
    v->h = t->h;
    v->w = t->w;
    v->lo = t->lo;
    v->hi = t->hi;
    /* the scaler is part of the model: the API takes the training data's own units */
    if (ls_scaler_dup(t->raw_min, t->raw_max, t->d, &v->raw_min, &v->raw_max)) {
        ls_victim_free(v);
        return ls_err(LS_ENOMEM, "victim: out of memory");
    }
    int rc;
    switch (o->type) {
    case LS_VICTIM_LOGREG:
    case LS_VICTIM_MLP:
        rc = train_net(v, o, t);
        break;
    case LS_VICTIM_SVM:
        rc = train_svm(v, o, t);
        break;
    case LS_VICTIM_TREE:
    case LS_VICTIM_FOREST:
        rc = train_trees(v, o, t);
        break;
    case LS_VICTIM_KNN:
        rc = train_knn(v, o, t);
        break;
    case LS_VICTIM_CNN:
        rc = train_cnn(v, o, t);
        break;
    default:
        rc = train_nb(v, t);
        break;
    }
    if (rc) {
        ls_victim_free(v);
        return rc;
    }
    *out = v;
    return LS_OK;
}

static int knn_proba(const ls_victim *v, const float *x, int64_t n, float *proba) {
    enum { CH = 128 };
    int d = v->d, k = v->k, kk = v->knn_k;
    float *dist = malloc(sizeof(float) * (size_t)CH * v->nref);
    if (!dist) return ls_err(LS_ENOMEM, "knn: out of memory");
    for (int64_t s = 0; s < n; s += CH) {
        int b = (int)(n - s < CH ? n - s : CH);
        /* |q - r|^2 = |q|^2 + |r|^2 - 2 q.r ; |q|^2 is constant per row, dropped. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, (int)v->nref, d, -2.0f, x + s * d, d, v->ref, d, 0.0f,
                    dist, (int)v->nref);
        for (int i = 0; i < b; i++) {
            float *di = dist + (size_t)i * v->nref;
            float bd[KNN_MAX_K];
            int bi[KNN_MAX_K], m = 0;
            for (int64_t r = 0; r < v->nref; r++) {
                float dv = di[r] + v->ref_sq[r];
                if (m < kk || dv < bd[m - 1]) {
                    int p = m < kk ? m++ : m - 1;
                    while (p > 0 && bd[p - 1] > dv) {
                        bd[p] = bd[p - 1];
                        bi[p] = bi[p - 1];
                        p--;
                    }
                    bd[p] = dv;
                    bi[p] = (int)r;
                }
            }
            float *pr = proba + (s + i) * k;
            for (int j = 0; j < k; j++) pr[j] = 0;
            /* Votes, with a tiny bonus for nearer neighbours so ties go to the nearest. */
            for (int q = 0; q < m; q++) pr[v->ref_y[bi[q]]] += 1.0f + 1e-3f * (float)(m - q);
            float sum = 0;
            for (int j = 0; j < k; j++) sum += pr[j];
            for (int j = 0; j < k; j++) pr[j] /= sum;
        }
    }
    free(dist);
    return LS_OK;
}

int ls_victim_predict_proba(const ls_victim *v, const float *x, int64_t n, float *proba) {
    int d = v->d, k = v->k;
    switch (v->type) {
    case LS_VICTIM_LOGREG:
    case LS_VICTIM_MLP:
        LS_TRY(ls_mlp_logits(&v->net, x, n, proba));
        ls_softmax_rows(proba, n, k);
        return LS_OK;
    case LS_VICTIM_SVM:
        LS_TRY(ls_mlp_logits(&v->net, x, n, proba));
        for (int64_t i = 0; i < n * k; i++) proba[i] *= v->svm_scale;
        ls_softmax_rows(proba, n, k);
        return LS_OK;
    case LS_VICTIM_TREE:
    case LS_VICTIM_FOREST:
        for (int64_t i = 0; i < n; i++) {
            float *pr = proba + i * k;
            for (int j = 0; j < k; j++) pr[j] = 0;
            for (int t = 0; t < v->ntrees; t++) {
                const float *lp = tree_leaf(&v->trees[t], x + i * d, k);
                for (int j = 0; j < k; j++) pr[j] += lp[j] / (float)v->ntrees;
            }
        }
        return LS_OK;
    case LS_VICTIM_KNN:
        return knn_proba(v, x, n, proba);
    case LS_VICTIM_CNN:
        LS_TRY(ls_cnn_logits(&v->cnn, x, n, proba));
        ls_softmax_rows(proba, n, k);
        return LS_OK;
    case LS_VICTIM_NB:
        for (int64_t i = 0; i < n; i++) {
            float *pr = proba + i * k;
            for (int c = 0; c < k; c++) {
                double s = v->nb_logc[c];
                const float *mu = v->nb_mean + (size_t)c * d, *iv = v->nb_ivar + (size_t)c * d;
                for (int j = 0; j < d; j++) {
                    double e = x[i * d + j] - mu[j];
                    s -= 0.5 * e * e * iv[j];
                }
                pr[c] = (float)s;
            }
            ls_softmax_rows(pr, 1, k);
        }
        return LS_OK;
    }
    return ls_err(LS_ESTATE, "victim: bad type %d", v->type);
}

int ls_victim_predict(const ls_victim *v, const float *x, int64_t n, int32_t *labels) {
    enum { CH = 1024 };
    float *p = malloc(sizeof(float) * (size_t)CH * v->k);
    if (!p) return ls_err(LS_ENOMEM, "victim: out of memory");
    for (int64_t s = 0; s < n; s += CH) {
        int b = (int)(n - s < CH ? n - s : CH);
        int rc = ls_victim_predict_proba(v, x + s * v->d, b, p);
        if (rc) {
            free(p);
            return rc;
        }
        for (int i = 0; i < b; i++) {
            int best = 0;
            for (int j = 1; j < v->k; j++)
                if (p[i * v->k + j] > p[i * v->k + best]) best = j;
            labels[s + i] = best;
        }
    }
    free(p);
    return LS_OK;
}

int ls_victim_accuracy(const ls_victim *v, const ls_steal_data *d, double *acc) {
    if (d->d != v->d) return ls_err(LS_EINVAL, "victim expects %d features, data has %d", v->d, d->d);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)(d->n ? d->n : 1));
    if (!lab) return ls_err(LS_ENOMEM, "victim: out of memory");
    int rc = ls_victim_predict(v, d->x, d->n, lab);
    if (!rc) {
        int64_t ok = 0;
        for (int64_t i = 0; i < d->n; i++) ok += lab[i] == d->y[i];
        *acc = d->n ? (double)ok / (double)d->n : 0;
    }
    free(lab);
    return rc;
}

/* ---------------------------------------------------------------- victim.bin */

#define VICTIM_MAGIC "LSVICTIM"
#define VICTIM_VERSION 2u /* 2: the scaler follows the body; 1 (no scaler) still loads */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom;
} buf_t;

static void put(buf_t *b, const void *data, size_t n) {
    if (b->oom || !n) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->len + n) nc *= 2;
        unsigned char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_i64(buf_t *b, int64_t v) { put(b, &v, 8); }
static void put_arr(buf_t *b, const void *data, int64_t count, size_t elem) {
    put_i64(b, count);
    put(b, data, (size_t)count * elem);
}

int ls_victim_save(const ls_victim *v, const char *path) {
    buf_t b = {0};
    put(&b, VICTIM_MAGIC, 8);
    uint32_t hdr[8] = {VICTIM_VERSION, (uint32_t)v->type, (uint32_t)v->d, (uint32_t)v->k,
                       (uint32_t)v->c, (uint32_t)v->h,    (uint32_t)v->w, 0};
    put(&b, hdr, sizeof hdr);
    put(&b, &v->lo, 4);
    put(&b, &v->hi, 4);
    switch (v->type) {
    case LS_VICTIM_LOGREG:
    case LS_VICTIM_SVM:
    case LS_VICTIM_MLP:
        put_i64(&b, v->net.nl);
        put_arr(&b, v->net.sizes, v->net.nl + 1, sizeof(int));
        put_arr(&b, v->net.p, v->net.np, sizeof(float));
        put(&b, &v->svm_scale, 4);
        break;
    case LS_VICTIM_TREE:
    case LS_VICTIM_FOREST:
        put_i64(&b, v->ntrees);
        for (int t = 0; t < v->ntrees; t++) {
            const tree_t *tr = &v->trees[t];
            put_arr(&b, tr->feat, tr->nnodes, 4);
            put_arr(&b, tr->left, tr->nnodes, 4);
            put_arr(&b, tr->right, tr->nnodes, 4);
            put_arr(&b, tr->thr, tr->nnodes, 4);
            put_arr(&b, tr->probs, (int64_t)tr->nleaves * v->k, 4);
        }
        break;
    case LS_VICTIM_KNN:
        put_i64(&b, v->knn_k);
        put_arr(&b, v->ref, v->nref * v->d, 4);
        put_arr(&b, v->ref_y, v->nref, 4);
        break;
    case LS_VICTIM_CNN: {
        /* shape (c, h, w, k are in the header), then the parameters in ls_cnn order */
        int32_t arch[4] = {v->cnn.c1, v->cnn.c2, v->cnn.ks, v->cnn.hidden};
        put_arr(&b, arch, 4, sizeof(int32_t));
        put_arr(&b, v->cnn.p, v->cnn.np, sizeof(float));
        break;
    }
    case LS_VICTIM_NB:
        put_arr(&b, v->nb_mean, (int64_t)v->k * v->d, 4);
        put_arr(&b, v->nb_ivar, (int64_t)v->k * v->d, 4);
        put_arr(&b, v->nb_logc, v->k, 4);
        break;
    }
    /* version 2: the scaler, as two arrays of d (or 0) raw minima and maxima */
    int64_t ns = v->raw_min && v->raw_max ? v->d : 0;
    put_arr(&b, v->raw_min, ns, 4);
    put_arr(&b, v->raw_max, ns, 4);
    uint64_t h = b.oom ? 0 : ls_hash64(b.p, b.len);
    put(&b, &h, 8);
    if (b.oom) {
        free(b.p);
        return ls_err(LS_ENOMEM, "%s: out of memory while serialising", path);
    }
    int rc = ls_file_write_atomic(path, b.p, b.len);
    free(b.p);
    return rc;
}

typedef struct {
    const unsigned char *p;
    size_t len, off;
    const char *path;
} rd_t;

static int get(rd_t *r, void *dst, size_t n) {
    if (r->off + n > r->len) return ls_err(LS_EFORMAT, "%s: truncated victim file", r->path);
    memcpy(dst, r->p + r->off, n);
    r->off += n;
    return LS_OK;
}

/* Reads a counted array, checking the count against what the header implies. */
static int get_arr(rd_t *r, void **dst, int64_t want, size_t elem) {
    int64_t cnt = 0;
    LS_TRY(get(r, &cnt, 8));
    if (cnt < 0 || (want >= 0 && cnt != want) || (uint64_t)cnt * elem > r->len - r->off)
        return ls_err(LS_EFORMAT, "%s: array of %lld entries where %lld expected", r->path, (long long)cnt,
                      (long long)want);
    *dst = malloc((size_t)(cnt ? cnt : 1) * elem);
    if (!*dst) return ls_err(LS_ENOMEM, "%s: out of memory", r->path);
    return get(r, *dst, (size_t)cnt * elem);
}

/* Checks, before anything is allocated for them, that the file still holds the np floats
 * (after their 8-byte count, and `after` more bytes) that the header's sizes imply: a forged
 * header declaring huge layers is refused by the file's own length, not by a failed (or
 * worse, a successful) allocation. The stored count is compared with the network later. */
static int expect_params(const rd_t *r, double np, size_t after, const char *what) {
    double avail = (double)(r->len - r->off) - 8.0 - (double)after;
    if (4.0 * np > avail)
        return ls_err(LS_EFORMAT, "the header implies %.0f %s params, the file holds at most %.0f", np, what,
                      avail > 0 ? avail / 4 : 0);
    return LS_OK;
}

/* Every child index and feature of t in bounds, children after their parent (so a walk
 * from the root ends): prediction walks them. */
static int tree_check(const tree_t *t, int d, const char *path) {
    for (int64_t i = 0; i < t->nnodes; i++) {
        if (t->feat[i] < 0) {
            if (t->left[i] < 0 || t->left[i] >= t->nleaves) return ls_err(LS_EFORMAT, "%s: leaf index out of range", path);
        } else if (t->feat[i] >= d || t->left[i] <= i || t->right[i] <= i || t->left[i] >= t->nnodes ||
                   t->right[i] >= t->nnodes) {
            return ls_err(LS_EFORMAT, "%s: tree node %lld out of range", path, (long long)i);
        }
    }
    return LS_OK;
}

int ls_victim_tree_view(const ls_victim *v, ls_tree_view *out) {
    if (v->type != LS_VICTIM_TREE || v->ntrees != 1) return ls_err(LS_EINVAL, "victim: not a single tree");
    const tree_t *t = &v->trees[0];
    *out = (ls_tree_view){t->nnodes, t->nleaves, t->feat, t->left, t->right, t->thr, t->probs};
    return LS_OK;
}

int ls_victim_tree_from(const ls_tree_view *t, int d, int k, int c, int h, int w, float lo, float hi,
                        const char *what, ls_victim **out) {
    *out = NULL;
    if (t->nnodes < 1 || t->nnodes > (1 << 26) || t->nleaves < 1 || t->nleaves > t->nnodes || k < 2 || k > 64 ||
        d < 1 || (int64_t)c * h * w != d)
        return ls_err(LS_EFORMAT, "%s: a tree of %d nodes and %d leaves (%d classes, %d features)", what, t->nnodes,
                      t->nleaves, k, d);
    for (int64_t i = 0; i < (int64_t)t->nleaves * k; i++)
        if (!isfinite(t->probs[i])) return ls_err(LS_EFORMAT, "%s: a leaf probability is not finite", what);
    ls_victim *v = calloc(1, sizeof *v);
    tree_t *tr = v ? calloc(1, sizeof *tr) : NULL;
    size_t nn = (size_t)t->nnodes, pk = (size_t)t->nleaves * k;
    if (v) v->trees = tr;
    if (tr) {
        tr->feat = malloc(4 * nn), tr->left = malloc(4 * nn), tr->right = malloc(4 * nn);
        tr->thr = malloc(4 * nn), tr->probs = malloc(4 * pk);
    }
    if (!tr || !tr->feat || !tr->left || !tr->right || !tr->thr || !tr->probs) {
        if (tr) tree_free(tr);
        free(tr);
        free(v);
        return ls_err(LS_ENOMEM, "%s: out of memory", what);
    }
    v->type = LS_VICTIM_TREE, v->d = d, v->k = k, v->c = c, v->h = h, v->w = w, v->lo = lo, v->hi = hi, v->ntrees = 1;
    memcpy(tr->feat, t->feat, 4 * nn);
    memcpy(tr->left, t->left, 4 * nn);
    memcpy(tr->right, t->right, 4 * nn);
    memcpy(tr->thr, t->thr, 4 * nn);
    memcpy(tr->probs, t->probs, 4 * pk);
    tr->nnodes = t->nnodes, tr->nleaves = t->nleaves;
    int rc = tree_check(tr, d, what);
    if (rc)
        ls_victim_free(v);
    else
        *out = v;
    return rc;
}

static int load_body(rd_t *r, ls_victim *v) {
    switch (v->type) {
    case LS_VICTIM_LOGREG:
    case LS_VICTIM_SVM:
    case LS_VICTIM_MLP: {
        int64_t nl = 0;
        LS_TRY(get(r, &nl, 8));
        if (nl < 1 || nl > MLP_MAX_LAYERS) return ls_err(LS_EFORMAT, "%s: %lld layers", r->path, (long long)nl);
        int *sizes;
        LS_TRY(get_arr(r, (void **)&sizes, nl + 1, sizeof(int)));
        int ok = sizes[0] == v->d && sizes[nl] == v->k;
        double np = 0;
        for (int l = 0; ok && l < nl; l++) {
            ok = sizes[l + 1] >= 1 && sizes[l + 1] <= (1 << 20);
            np += (double)sizes[l + 1] * sizes[l] + sizes[l + 1];
        }
        int rc = !ok ? ls_err(LS_EFORMAT, "%s: layer sizes disagree or exceed 2^20", r->path) : LS_OK;
        if (!rc && expect_params(r, np, 4, "mlp")) {
            char why[256]; /* ls_err writes the buffer ls_errmsg reads: copy it first */
            snprintf(why, sizeof why, "%s", ls_errmsg());
            rc = ls_err(LS_EFORMAT, "%s: bad mlp shape: %s", r->path, why);
        }
        if (!rc) rc = ls_mlp_init(&v->net, (int)nl, sizes, 0);
        free(sizes);
        LS_TRY(rc);
        int64_t cnt = 0;
        LS_TRY(get(r, &cnt, 8));
        if (cnt != v->net.np)
            return ls_err(LS_EFORMAT, "%s: %lld params, expected %lld", r->path, (long long)cnt, (long long)v->net.np);
        LS_TRY(get(r, v->net.p, sizeof(float) * (size_t)cnt));
        return get(r, &v->svm_scale, 4);
    }
    case LS_VICTIM_TREE:
    case LS_VICTIM_FOREST: {
        int64_t nt = 0;
        LS_TRY(get(r, &nt, 8));
        /* each tree stores at least five counted arrays of one entry */
        if (nt < 1 || nt > 100000 || (uint64_t)nt * 5 * 12 > r->len - r->off)
            return ls_err(LS_EFORMAT, "%s: %lld trees (or truncated)", r->path, (long long)nt);
        v->trees = calloc((size_t)nt, sizeof(tree_t));
        if (!v->trees) return ls_err(LS_ENOMEM, "%s: out of memory", r->path);
        v->ntrees = (int)nt;
        for (int t = 0; t < nt; t++) {
            tree_t *tr = &v->trees[t];
            int64_t nn;
            if (r->off + 8 > r->len) return ls_err(LS_EFORMAT, "%s: truncated", r->path);
            memcpy(&nn, r->p + r->off, 8);
            if (nn < 1 || nn > (1 << 26)) return ls_err(LS_EFORMAT, "%s: tree of %lld nodes", r->path, (long long)nn);
            LS_TRY(get_arr(r, (void **)&tr->feat, nn, 4));
            LS_TRY(get_arr(r, (void **)&tr->left, nn, 4));
            LS_TRY(get_arr(r, (void **)&tr->right, nn, 4));
            LS_TRY(get_arr(r, (void **)&tr->thr, nn, 4));
            tr->nnodes = (int32_t)nn;
            int64_t np;
            if (r->off + 8 > r->len) return ls_err(LS_EFORMAT, "%s: truncated", r->path);
            memcpy(&np, r->p + r->off, 8);
            if (np < v->k || np % v->k) return ls_err(LS_EFORMAT, "%s: bad leaf table", r->path);
            LS_TRY(get_arr(r, (void **)&tr->probs, np, 4));
            tr->nleaves = (int32_t)(np / v->k);
            LS_TRY(tree_check(tr, v->d, r->path));
        }
        return LS_OK;
    }
    case LS_VICTIM_KNN: {
        int64_t kk = 0, cnt = 0;
        LS_TRY(get(r, &kk, 8));
        if (r->off + 8 > r->len) return ls_err(LS_EFORMAT, "%s: truncated", r->path);
        memcpy(&cnt, r->p + r->off, 8);
        if (cnt <= 0 || cnt % v->d) return ls_err(LS_EFORMAT, "%s: bad reference set", r->path);
        v->nref = cnt / v->d;
        if (kk < 1 || kk > KNN_MAX_K || kk > v->nref) return ls_err(LS_EFORMAT, "%s: k=%lld", r->path, (long long)kk);
        v->knn_k = (int)kk;
        LS_TRY(get_arr(r, (void **)&v->ref, cnt, 4));
        LS_TRY(get_arr(r, (void **)&v->ref_y, v->nref, 4));
        for (int64_t i = 0; i < v->nref; i++)
            if (v->ref_y[i] < 0 || v->ref_y[i] >= v->k) return ls_err(LS_EFORMAT, "%s: label out of range", r->path);
        v->ref_sq = malloc(sizeof(float) * (size_t)v->nref);
        if (!v->ref_sq) return ls_err(LS_ENOMEM, "%s: out of memory", r->path);
        for (int64_t i = 0; i < v->nref; i++) {
            double s = 0;
            for (int j = 0; j < v->d; j++) s += (double)v->ref[i * v->d + j] * v->ref[i * v->d + j];
            v->ref_sq[i] = (float)s;
        }
        return LS_OK;
    }
    case LS_VICTIM_CNN: {
        int32_t *arch;
        LS_TRY(get_arr(r, (void **)&arch, 4, sizeof(int32_t)));
        /* ls_cnn_init range-checks every size, and the file must hold the parameters those
         * sizes imply, so a forged header cannot size the buffers. */
        int rc =
            expect_params(r, ls_cnn_param_count(v->c, v->h, v->w, v->k, arch[0], arch[1], arch[2], arch[3]), 0, "cnn");
        if (!rc) rc = ls_cnn_init(&v->cnn, v->c, v->h, v->w, v->k, arch[0], arch[1], arch[2], arch[3], 0);
        free(arch);
        if (rc) {
            char why[256]; /* ls_err writes the buffer ls_errmsg reads: copy it first */
            snprintf(why, sizeof why, "%s", ls_errmsg());
            return ls_err(LS_EFORMAT, "%s: bad cnn shape: %s", r->path, why);
        }
        int64_t cnt = 0;
        LS_TRY(get(r, &cnt, 8));
        if (cnt != v->cnn.np)
            return ls_err(LS_EFORMAT, "%s: %lld cnn params, expected %lld", r->path, (long long)cnt,
                          (long long)v->cnn.np);
        return get(r, v->cnn.p, sizeof(float) * (size_t)cnt);
    }
    case LS_VICTIM_NB:
        LS_TRY(get_arr(r, (void **)&v->nb_mean, (int64_t)v->k * v->d, 4));
        LS_TRY(get_arr(r, (void **)&v->nb_ivar, (int64_t)v->k * v->d, 4));
        return get_arr(r, (void **)&v->nb_logc, v->k, 4);
    }
    return ls_err(LS_EFORMAT, "%s: unknown victim type %d", r->path, v->type);
}

/* Version 2's scaler: two arrays of d finite raw bounds (min <= max), or two empty ones. */
static int load_scaler(rd_t *r, ls_victim *v) {
    int64_t cnt = 0;
    if (r->off + 8 > r->len) return ls_err(LS_EFORMAT, "%s: truncated (no scaler)", r->path);
    memcpy(&cnt, r->p + r->off, 8);
    if (cnt != 0 && cnt != v->d)
        return ls_err(LS_EFORMAT, "%s: scaler of %lld features, expected %d or 0", r->path, (long long)cnt, v->d);
    LS_TRY(get_arr(r, (void **)&v->raw_min, cnt, 4));
    LS_TRY(get_arr(r, (void **)&v->raw_max, cnt, 4));
    for (int64_t j = 0; j < cnt; j++)
        if (!isfinite(v->raw_min[j]) || !isfinite(v->raw_max[j]) || v->raw_min[j] > v->raw_max[j])
            return ls_err(LS_EFORMAT, "%s: scaler feature %lld has range [%g, %g]", r->path, (long long)j,
                          v->raw_min[j], v->raw_max[j]);
    if (!cnt) {
        free(v->raw_min), free(v->raw_max);
        v->raw_min = v->raw_max = NULL;
    }
    return LS_OK;
}

int ls_victim_load(const char *path, ls_victim **out) {
    *out = NULL;
    char *data;
    size_t len;
    LS_TRY(ls_file_read(path, &data, &len));
    int rc = LS_OK;
    ls_victim *v = NULL;
    if (len < 8 + 32 + 8 + 8 || memcmp(data, VICTIM_MAGIC, 8)) {
        rc = ls_err(LS_EFORMAT, "%s: not a victim file (bad magic)", path);
        goto done;
    }
    uint64_t h;
    memcpy(&h, data + len - 8, 8);
    if (h != ls_hash64(data, len - 8)) {
        rc = ls_err(LS_ECHECKSUM, "%s: checksum mismatch (corrupt victim file)", path);
        goto done;
    }
    rd_t r = {(const unsigned char *)data, len - 8, 8, path};
    uint32_t hdr[8];
    get(&r, hdr, sizeof hdr);
    if (hdr[0] < 1 || hdr[0] > VICTIM_VERSION) {
        rc = ls_err(LS_EFORMAT, "%s: version %u, this build reads 1 to %u", path, hdr[0], VICTIM_VERSION);
        goto done;
    }
    v = calloc(1, sizeof *v);
    if (!v) {
        rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    v->type = (int)hdr[1];
    v->d = (int)hdr[2];
    v->k = (int)hdr[3];
    v->c = (int)hdr[4];
    v->h = (int)hdr[5];
    v->w = (int)hdr[6];
    get(&r, &v->lo, 4);
    get(&r, &v->hi, 4);
    /* every dimension positive and bounded before their product is formed */
    if (v->type < 0 || v->type >= LS_VICTIM_COUNT || v->d <= 0 || v->d > (1 << 22) || v->k < 2 || v->k > 64 ||
        v->c < 1 || v->h < 1 || v->w < 1 || v->c > v->d || v->h > v->d || v->w > v->d || (int64_t)v->c * v->h > v->d ||
        (int64_t)v->c * v->h * v->w != v->d || !(v->hi > v->lo)) {
        rc = ls_err(LS_EFORMAT, "%s: bad header (type %d, d %d, k %d, shape %d,%d,%d)", path, v->type, v->d, v->k, v->c,
                    v->h, v->w);
        goto done;
    }
    rc = load_body(&r, v);
    if (!rc && hdr[0] >= 2) rc = load_scaler(&r, v);
    if (!rc && r.off != r.len) rc = ls_err(LS_EFORMAT, "%s: %zu trailing bytes", path, r.len - r.off);
done:
    free(data);
    if (rc)
        ls_victim_free(v);
    else
        *out = v;
    return rc;
}
