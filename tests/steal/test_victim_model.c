/* test_victim_model.c - the victim models' contracts against references computed here: the
 * CART's depth bound, min_leaf, Gini-only splits, top bin edge and out-of-range bins (walked
 * by hand through ls_victim_tree_view); the forest as the mean of its trees (read back from
 * victim.bin), bootstrap, per-tree seeds and ceil(sqrt(d)) split candidates; the svm's
 * softmax(2 x margin) and learned bias; k-NN with k above the reference count and its |r|^2
 * term; naive Bayes' variance floor; argmax ties, chunked prediction and accuracy; and
 * victim.bin files edited (checksum recomputed) into each shape the loader must refuse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "steal/internal.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-steal-victim-model.XXXXXX";

/* victim.bin: magic (8), header (8 x uint32), lo, hi (float each), then the body */
enum { OFF_LO = 40, OFF_HI = 44, OFF_BODY = 48 };

/* A table of n rows, d features in [0, 1], k classes, shape (1, 1, d). */
static ls_steal_data table(int64_t n, int d, int k) {
    ls_steal_data t;
    CHECK_EQ_INT(ls_steal_data_alloc(&t, n, d, k), LS_OK);
    return t;
}

static ls_victim *train(int type, const ls_steal_data *t, void (*tweak)(ls_victim_opts *, int), int arg) {
    ls_victim_opts o;
    ls_victim_opts_default(&o, type);
    if (tweak) tweak(&o, arg);
    ls_victim *v = NULL;
    int rc = ls_victim_train(&o, t, &v);
    CHECK_MSG(rc == LS_OK && v, "training %s: %s", ls_victim_type_name(type), ls_errmsg());
    return v;
}

static void path_of(char *p, size_t n, const char *name) { snprintf(p, n, "%s/%s", dir, name); }

/* Reads a saved victim's bytes (NULL on failure). */
static unsigned char *read_bytes(const char *path, size_t *len) {
    char *data = NULL;
    CHECK_EQ_INT(ls_file_read(path, &data, len), LS_OK);
    return (unsigned char *)data;
}

/* Writes buf (len bytes, its last 8 the checksum) with the checksum recomputed over the rest,
 * then loads it: the load's status (the victim, if any, is freed). */
static int load_edited(const unsigned char *buf, size_t len) {
    unsigned char *b = malloc(len);
    memcpy(b, buf, len);
    uint64_t h = ls_hash64(b, len - 8);
    memcpy(b + len - 8, &h, 8);
    char p[300];
    path_of(p, sizeof p, "edited.bin");
    CHECK_EQ_INT(ls_file_write_atomic(p, b, len), LS_OK);
    free(b);
    ls_victim *v = NULL;
    int rc = ls_victim_load(p, &v);
    CHECK(rc == LS_OK ? v != NULL : v == NULL);
    ls_victim_free(v);
    return rc;
}

/* Saves v as dir/name and reads the file's bytes back (NULL on failure). */
static unsigned char *saved_bytes(const ls_victim *v, const char *name, size_t *len) {
    char p[300];
    path_of(p, sizeof p, name);
    CHECK_EQ_INT(ls_victim_save(v, p), LS_OK);
    return read_bytes(p, len);
}

static int64_t get_i64(const unsigned char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* ---------------------------------------------------------------- trees */

/* The leaf (node index) x reaches, x < thr going left; its depth in *depth. */
static int walk(const ls_tree_view *t, const float *x, int *depth) {
    int nd = 0, dep = 0;
    while (t->feat[nd] >= 0) nd = x[t->feat[nd]] < t->thr[nd] ? t->left[nd] : t->right[nd], dep++;
    if (depth) *depth = dep;
    return nd;
}

/* The deepest leaf of t (a walk over every node: children come after their parents). */
static int max_leaf_depth(const ls_tree_view *t) {
    int *dep = calloc((size_t)t->nnodes, sizeof(int)), worst = 0;
    for (int i = 0; i < t->nnodes; i++) {
        if (t->feat[i] < 0) {
            worst = dep[i] > worst ? dep[i] : worst;
            continue;
        }
        dep[t->left[i]] = dep[i] + 1;
        dep[t->right[i]] = dep[i] + 1;
    }
    free(dep);
    return worst;
}

/* A tree trained on t, checked against the rows themselves: every leaf is reached by at least
 * min_leaf training rows walked down its thresholds (so the thresholds partition the rows as
 * the bins the builder split did), holds exactly those rows' class shares, and lies at depth
 * <= max_depth. Returns the deepest leaf's depth. */
static int check_tree_rows(const ls_victim *v, const ls_steal_data *t, int min_leaf, int max_depth) {
    ls_tree_view tv;
    CHECK_EQ_INT(ls_victim_tree_view(v, &tv), LS_OK);
    int k = t->k;
    double *cnt = calloc((size_t)tv.nnodes * k, sizeof(double));
    for (int64_t i = 0; i < t->n; i++) cnt[(size_t)walk(&tv, t->x + i * t->d, NULL) * k + t->y[i]]++;
    double worst = 0;
    int small = 0;
    for (int nd = 0; nd < tv.nnodes; nd++) {
        if (tv.feat[nd] >= 0) continue;
        double m = 0;
        for (int c = 0; c < k; c++) m += cnt[(size_t)nd * k + c];
        if (m < min_leaf) small++;
        for (int c = 0; c < k && m > 0; c++)
            worst = fmax(worst, fabs(tv.probs[(size_t)tv.left[nd] * k + c] - cnt[(size_t)nd * k + c] / m));
    }
    CHECK_MSG(small == 0, "%d leaves hold fewer than min_leaf = %d training rows", small, min_leaf);
    CHECK_MSG(worst < 1e-6, "leaf distributions differ from their rows' class shares by %g", worst);
    int deepest = max_leaf_depth(&tv);
    CHECK_MSG(deepest <= max_depth, "a leaf at depth %d, max_depth %d", deepest, max_depth);
    free(cnt);
    return deepest;
}

static void set_depth_leaf(ls_victim_opts *o, int a) { o->max_depth = a & 0xff, o->min_leaf = a >> 8; }
#define DEPTH_LEAF(depth, leaf) ((depth) | (leaf) << 8)

/* Every training row predicted as its label (a tree that can separate them). */
static void check_fits(const ls_victim *v, const ls_steal_data *t, const char *what) {
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)t->n);
    CHECK_EQ_INT(ls_victim_predict(v, t->x, t->n, lab), LS_OK);
    int wrong = 0;
    for (int64_t i = 0; i < t->n; i++) wrong += lab[i] != t->y[i];
    CHECK_MSG(wrong == 0, "%s: %d of %lld training rows misclassified", what, wrong, (long long)t->n);
    free(lab);
}

/* max_depth bounds every leaf, and is reached on data that needs more splits than it allows:
 * 64 rows on one feature whose label alternates from bin to bin (32 uniform bins of [0, 1]). */
static void test_tree_depth(void) {
    ls_steal_data t = table(64, 1, 2);
    for (int i = 0; i < 64; i++) t.x[i] = ((float)i + 0.5f) / 64, t.y[i] = (i / 2) % 2;
    for (int depth = 1; depth <= 4; depth++) {
        ls_victim *v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(depth, 1));
        if (!v) continue;
        CHECK_EQ_INT(check_tree_rows(v, &t, 1, depth), depth);
        ls_victim_free(v);
    }
    /* deep enough: every row fits */
    ls_victim *v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(40, 1));
    if (v) check_fits(v, &t, "alternating bins, depth 40"), check_tree_rows(v, &t, 1, 40), ls_victim_free(v);
    ls_steal_data_free(&t);
}

/* min_leaf holds on both sides of every split: two rows of class 1 sit alone in the lowest bin
 * and two in the highest, among 40 rows of class 0; isolating either pair would be the purest
 * split, but with min_leaf = 5 every leaf must still hold >= 5 training rows. A pure node is a
 * leaf (the pure class-0 middle is never split further). */
static void test_tree_min_leaf(void) {
    ls_steal_data t = table(44, 1, 2);
    for (int i = 0; i < 40; i++) t.x[i] = 0.1f + 0.8f * (float)i / 40, t.y[i] = 0;
    t.x[40] = 0.01f, t.x[41] = 0.02f, t.x[42] = 0.98f, t.x[43] = 0.99f;
    for (int i = 40; i < 44; i++) t.y[i] = 1;
    for (int ml = 1; ml <= 5; ml += 4) {
        ls_victim *v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(20, ml));
        if (!v) continue;
        check_tree_rows(v, &t, ml, 20);
        ls_tree_view tv;
        ls_victim_tree_view(v, &tv);
        /* min_leaf 1: both pairs isolated, every row fits with three leaves (two splits) */
        if (ml == 1) {
            check_fits(v, &t, "min_leaf 1");
            CHECK_EQ_INT(tv.nleaves, 3);
        }
        ls_victim_free(v);
    }
    ls_steal_data_free(&t);
}

/* A split only where it lowers the Gini impurity: every bin holds one row of each class, so
 * every candidate split leaves both children at the parent's 50/50 mix: the tree is one leaf. */
static void test_tree_no_gain(void) {
    ls_steal_data t = table(64, 1, 2);
    for (int i = 0; i < 64; i++) t.x[i] = ((float)(i / 2) + 0.5f) / 32, t.y[i] = i % 2;
    ls_victim *v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(8, 1));
    if (v) {
        ls_tree_view tv;
        ls_victim_tree_view(v, &tv);
        CHECK_EQ_INT(tv.nnodes, 1);
        CHECK(tv.feat[0] < 0 && tv.probs[0] == 0.5f && tv.probs[1] == 0.5f);
        ls_victim_free(v);
    }
    /* control: the same rows with the labels of the upper half swapped do split */
    for (int i = 32; i < 64; i++) t.y[i] = 1;
    for (int i = 0; i < 32; i++) t.y[i] = 0;
    v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(8, 1));
    if (v) check_fits(v, &t, "halves"), ls_victim_free(v);
    ls_steal_data_free(&t);
}

/* The top bin edge (31/32 of the range) is a candidate threshold: class 1 only in the last bin,
 * class 0 in every other bin (the last-but-one included) is separable there and only there. */
static void test_tree_last_edge(void) {
    ls_steal_data t = table(66, 1, 2);
    for (int i = 0; i < 62; i++) t.x[i] = ((float)(i / 2) + 0.5f) / 32, t.y[i] = 0;
    for (int i = 62; i < 66; i++) t.x[i] = 31.25f / 32 + 0.005f * (float)(i - 62), t.y[i] = 1;
    ls_victim *v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(6, 1));
    if (v) {
        check_fits(v, &t, "class 1 in the top bin");
        check_tree_rows(v, &t, 1, 6);
        ls_tree_view tv;
        ls_victim_tree_view(v, &tv);
        CHECK(tv.feat[0] == 0 && fabsf(tv.thr[0] - 31.0f / 32) < 1e-6f);
        ls_victim_free(v);
    }
    ls_steal_data_free(&t);
}

/* Values at the top of the range (x == hi, one past the last bin's lower edge by a full bin)
 * fall in the last bin, not the first: class 1 at exactly hi, class 0 spread over the lower
 * half (and none in the first bin); the tree fits every row and its thresholds send each row
 * to the leaf whose class shares it was counted in. */
static void test_tree_top_value(void) {
    ls_steal_data t = table(34, 1, 2);
    for (int i = 0; i < 28; i++) t.x[i] = ((float)(2 + i / 2) + 0.5f) / 32, t.y[i] = 0;
    for (int i = 28; i < 34; i++) t.x[i] = 1.0f, t.y[i] = 1;
    ls_victim *v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(6, 1));
    if (v) {
        check_fits(v, &t, "class 1 at hi");
        check_tree_rows(v, &t, 1, 6);
        ls_victim_free(v);
    }
    ls_steal_data_free(&t);
}

/* ---------------------------------------------------------------- forest */

typedef struct {
    int ntrees;
    ls_tree_view *t;
} forest_file;

/* The trees of a saved tree/forest victim, read from victim.bin's body: ntrees, then per tree
 * counted arrays feat, left, right, thr (nnodes each) and probs (nleaves x k). The views point
 * into buf. */
static int read_forest(const unsigned char *buf, size_t len, int k, forest_file *f) {
    size_t off = OFF_BODY;
    f->ntrees = (int)get_i64(buf + off), off += 8;
    f->t = calloc((size_t)f->ntrees, sizeof(ls_tree_view));
    for (int i = 0; i < f->ntrees; i++) {
        const void *arr[5];
        int64_t cnt[5];
        for (int a = 0; a < 5; a++) {
            if (off + 8 > len) return -1;
            cnt[a] = get_i64(buf + off), off += 8;
            arr[a] = buf + off, off += (size_t)cnt[a] * 4;
            if (off > len) return -1;
        }
        f->t[i] = (ls_tree_view){(int32_t)cnt[0], (int32_t)(cnt[4] / k), arr[0], arr[1], arr[2], arr[3], arr[4]};
    }
    return 0;
}

/* v saved as dir/name, its trees read back into f (views into the returned bytes, which the
 * caller frees with f->t); checks there are ntrees of them. */
static unsigned char *saved_forest(const ls_victim *v, const char *name, int k, int ntrees, forest_file *f) {
    size_t len;
    unsigned char *buf = saved_bytes(v, name, &len);
    *f = (forest_file){0};
    CHECK_EQ_INT(buf ? read_forest(buf, len, k, f) : -1, 0);
    CHECK_EQ_INT(f->ntrees, ntrees);
    return buf;
}

static int same_tree(const ls_tree_view *a, const ls_tree_view *b, int k) {
    return a->nnodes == b->nnodes && a->nleaves == b->nleaves && !memcmp(a->feat, b->feat, 4 * (size_t)a->nnodes) &&
           !memcmp(a->thr, b->thr, 4 * (size_t)a->nnodes) && !memcmp(a->probs, b->probs, 4 * (size_t)a->nleaves * k);
}

static void set_forest(ls_victim_opts *o, int a) { o->trees = a & 0xfff, o->max_depth = a >> 12, o->min_leaf = 1; }
#define FOREST(trees, depth) ((trees) | (depth) << 12)

/* A forest's probabilities are the mean of its trees' leaf distributions (each tree, read
 * back from victim.bin, walked by hand); its trees differ from each other: on one feature
 * (ceil(sqrt(1)) = 1 candidate, so no feature sampling) only each tree's own bootstrap sample,
 * drawn from its own seed, can make them differ. */
static void test_forest_mean(void) {
    ls_steal_data t = table(200, 1, 3);
    ls_rng r;
    ls_rng_seed(&r, 7);
    for (int i = 0; i < 200; i++) {
        t.x[i] = (float)ls_rng_uniform(&r);
        t.y[i] = t.x[i] < 0.3f ? 0 : t.x[i] < 0.7f ? 1 : 2;
        if (ls_rng_below(&r, 4) == 0) t.y[i] = (int32_t)ls_rng_below(&r, 3); /* label noise */
    }
    int nt = 8;
    ls_victim *v = train(LS_VICTIM_FOREST, &t, set_forest, FOREST(nt, 5));
    if (!v) return;
    forest_file f;
    unsigned char *buf = saved_forest(v, "forest.bin", 3, nt, &f);
    if (f.ntrees == nt) {
        int nq = 101, distinct = 0;
        float q[101], pr[101 * 3];
        for (int i = 0; i < nq; i++) q[i] = (float)i / 100;
        CHECK_EQ_INT(ls_victim_predict_proba(v, q, nq, pr), LS_OK);
        double worst = 0;
        for (int i = 0; i < nq; i++)
            for (int c = 0; c < 3; c++) {
                double s = 0;
                for (int tr = 0; tr < nt; tr++)
                    s += f.t[tr].probs[(size_t)f.t[tr].left[walk(&f.t[tr], &q[i], NULL)] * 3 + c];
                worst = fmax(worst, fabs(pr[i * 3 + c] - s / nt));
            }
        CHECK_MSG(worst < 1e-6, "forest probabilities differ from the mean of its trees by %g", worst);
        for (int a = 0; a < nt; a++) {
            int dup = 0;
            for (int b = 0; b < a; b++) dup |= same_tree(&f.t[a], &f.t[b], 3);
            distinct += !dup;
        }
        CHECK_MSG(distinct == nt, "only %d distinct trees among %d", distinct, nt);
    }
    free(f.t);
    free(buf);
    ls_victim_free(v);
    ls_steal_data_free(&t);
}

/* Each forest split draws ceil(sqrt(d)) candidate features: with d = 16 (4 candidates) and
 * only feature 0 informative (it separates the classes exactly), a depth-1 tree's root is on
 * feature 0 exactly when feature 0 was drawn, with probability 4/16: about 50 of 200 roots
 * (the binomial's 3.5-sigma band is [30, 70]; one candidate would give about 12). */
static void test_forest_mtry(void) {
    int d = 16, n = 120, nt = 200;
    ls_steal_data t = table(n, d, 2);
    ls_rng r;
    ls_rng_seed(&r, 11);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < d; j++) t.x[i * d + j] = (float)ls_rng_uniform(&r);
        t.y[i] = t.x[i * d] >= 0.5f;
    }
    ls_victim *v = train(LS_VICTIM_FOREST, &t, set_forest, FOREST(nt, 1));
    if (!v) return;
    forest_file f;
    unsigned char *buf = saved_forest(v, "mtry.bin", 2, nt, &f);
    int on0 = 0, split = 0;
    for (int i = 0; i < f.ntrees; i++) on0 += f.t[i].feat[0] == 0, split += f.t[i].feat[0] >= 0;
    CHECK_MSG(on0 >= 30 && on0 <= 70, "%d of %d roots on the informative feature, expected about 50", on0, nt);
    CHECK_MSG(split > on0, "every split root is on feature 0 (%d)", on0);
    free(f.t);
    free(buf);
    ls_victim_free(v);
    ls_steal_data_free(&t);
}

/* ---------------------------------------------------------------- svm */

/* The svm's scores are x W^T + b and its probabilities softmax(2 x score) (W, b read back from
 * victim.bin: nl, sizes, then W (k x d) and b (k)); trained to convergence on separable data
 * that needs an offset (class 1 iff x0 > 0.6, x1 noise; no line through the origin separates
 * them), it classifies every training row and puts nearly all of them outside the hinge margin
 * (y s >= 1 for the one-vs-rest score of each class). */
static void test_svm(void) {
    int n = 200, d = 2, k = 2;
    ls_steal_data t = table(n, d, k);
    ls_rng r;
    ls_rng_seed(&r, 5);
    for (int i = 0; i < n; i++) {
        t.y[i] = i % 3 == 0;
        t.x[i * d] = t.y[i] ? 0.8f + 0.2f * (float)ls_rng_uniform(&r) : 0.4f * (float)ls_rng_uniform(&r);
        t.x[i * d + 1] = (float)ls_rng_uniform(&r);
    }
    ls_victim *v = train(LS_VICTIM_SVM, &t, NULL, 0);
    if (!v) return;
    size_t len;
    unsigned char *buf = saved_bytes(v, "svm.bin", &len);
    size_t off = OFF_BODY;
    CHECK_EQ_INT(get_i64(buf + off), 1);
    off += 8;
    CHECK_EQ_INT(get_i64(buf + off), 2);
    off += 8 + 2 * sizeof(int);
    CHECK_EQ_INT(get_i64(buf + off), k * d + k);
    off += 8;
    float W[4], b[2];
    memcpy(W, buf + off, sizeof W), memcpy(b, buf + off + sizeof W, sizeof b);
    float *pr = malloc(sizeof(float) * (size_t)n * k);
    CHECK_EQ_INT(ls_victim_predict_proba(v, t.x, n, pr), LS_OK);
    double worst = 0;
    int wrong = 0, inside = 0;
    for (int i = 0; i < n; i++) {
        double s[2], mx = -INFINITY, z = 0;
        for (int c = 0; c < k; c++) {
            s[c] = b[c];
            for (int j = 0; j < d; j++) s[c] += (double)t.x[i * d + j] * W[c * d + j];
            mx = fmax(mx, 2 * s[c]);
            inside += (t.y[i] == c ? 1 : -1) * s[c] < 0.99;
        }
        for (int c = 0; c < k; c++) z += exp(2 * s[c] - mx);
        for (int c = 0; c < k; c++) worst = fmax(worst, fabs(pr[i * k + c] - exp(2 * s[c] - mx) / z));
        wrong += (s[1] > s[0]) != t.y[i];
    }
    CHECK_MSG(worst < 1e-5, "svm probabilities differ from softmax(2 (x W^T + b)) by %g", worst);
    CHECK_MSG(wrong == 0, "%d of %d separable training rows misclassified", wrong, n);
    CHECK_MSG(inside <= n * k / 20, "%d of %d one-vs-rest scores inside the margin", inside, n * k);
    free(pr);
    free(buf);
    ls_victim_free(v);
    ls_steal_data_free(&t);
}

/* ---------------------------------------------------------------- knn, nb */

static void set_knn(ls_victim_opts *o, int kk) { o->knn_k = kk, o->knn_ref = 1000; }

/* k-NN by brute force on cases test_units.c's k = 5 check misses: k above the reference count
 * votes with every reference (and the model still saves and loads, k clamped to the count),
 * and k = 1 on references whose norms differ, where dropping |r|^2 from the distance would
 * pick the wrong neighbour. Votes 1 + 0.001 x (m - rank), m the neighbours used. */
static void test_knn(void) {
    ls_steal_data t = table(4, 2, 2);
    float rows[8] = {0.1f, 0.1f, 0.9f, 0.8f, 0.3f, 0.9f, 0.6f, 0.6f};
    int32_t ys[4] = {0, 1, 1, 0};
    memcpy(t.x, rows, sizeof rows), memcpy(t.y, ys, sizeof ys);
    float q[6] = {0.5f, 0.5f, 0.0f, 0.0f, 1.0f, 1.0f};
    for (int kk = 10; kk >= 1; kk -= 9) {
        ls_victim *v = train(LS_VICTIM_KNN, &t, set_knn, kk);
        if (!v) continue;
        char p[300];
        path_of(p, sizeof p, "knn.bin");
        CHECK_EQ_INT(ls_victim_save(v, p), LS_OK);
        ls_victim *back = NULL;
        CHECK_MSG(ls_victim_load(p, &back) == LS_OK, "knn with k=%d over 4 refs does not reload: %s", kk, ls_errmsg());
        for (int pass = 0; pass < 2; pass++) {
            const ls_victim *m = pass ? back : v;
            if (!m) continue;
            float pr[6];
            CHECK_EQ_INT(ls_victim_predict_proba(m, q, 3, pr), LS_OK);
            int use = kk < 4 ? kk : 4;
            double worst = 0;
            for (int i = 0; i < 3; i++) {
                double dist[4], want[2] = {0, 0}, z = 0;
                int order[4] = {0, 1, 2, 3};
                for (int r = 0; r < 4; r++)
                    dist[r] = pow(q[2 * i] - rows[2 * r], 2) + pow(q[2 * i + 1] - rows[2 * r + 1], 2);
                for (int a = 1; a < 4; a++)
                    for (int b = a; b > 0 && dist[order[b]] < dist[order[b - 1]]; b--) {
                        int tmp = order[b];
                        order[b] = order[b - 1], order[b - 1] = tmp;
                    }
                for (int qq = 0; qq < use; qq++) {
                    double w = 1.0 + 1e-3 * (use - qq);
                    want[ys[order[qq]]] += w, z += w;
                }
                for (int c = 0; c < 2; c++) worst = fmax(worst, fabs(pr[i * 2 + c] - want[c] / z));
            }
            CHECK_MSG(worst < 1e-5, "k=%d (%s): k-NN probabilities differ from brute force by %g", kk,
                      pass ? "reloaded" : "trained", worst);
        }
        ls_victim_free(back);
        ls_victim_free(v);
    }
    ls_steal_data_free(&t);
}

/* Naive Bayes' variance floor: every class-feature variance it uses is at least eps = 0.05 x
 * the largest variance + 1e-9 >= 1e-9, so no stored inverse variance (victim.bin's nb body:
 * counted means, then counted inverse variances, k x d each) exceeds 1e9. Each table here has
 * one feature, constant within each class at values around 10^3 to 10^4, where float64's
 * E[x^2] - E[x]^2 rounds to either side of zero by about 1e-9: the floor, not that rounding,
 * must decide the variance. */
static void test_nb_floor(void) {
    double worst = 0, least = INFINITY;
    for (int s = 0; s < 60; s++) {
        int n = 6 + 2 * (s % 5);
        ls_steal_data t = table(n, 1, 2);
        float a = 1000.0f + 157.31f * (float)s, bb = a * 1.5f;
        for (int i = 0; i < n; i++) t.x[i] = i % 2 ? bb : a, t.y[i] = i % 2;
        t.hi = 1e5f;
        ls_victim *v = train(LS_VICTIM_NB, &t, NULL, 0);
        char p[300];
        path_of(p, sizeof p, "nb.bin");
        if (v) CHECK_EQ_INT(ls_victim_save(v, p), LS_OK);
        ls_victim_free(v);
        size_t len;
        unsigned char *buf = v ? read_bytes(p, &len) : NULL;
        if (buf) {
            size_t off = OFF_BODY + 8 + 2 * 4;
            CHECK_EQ_INT(get_i64(buf + off), 2);
            float iv[2];
            memcpy(iv, buf + off + 8, sizeof iv);
            for (int c = 0; c < 2; c++) worst = fmax(worst, iv[c]), least = fmin(least, iv[c]);
            free(buf);
        }
        ls_steal_data_free(&t);
    }
    CHECK_MSG(worst <= 1e9 * (1 + 1e-6), "an inverse variance of %g: a variance below the 1e-9 floor", worst);
    CHECK_MSG(least > 1e8, "an inverse variance of %g: the constant classes' variances are not near the floor", least);
}

/* ---------------------------------------------------------------- predict, accuracy, train */

/* predict's argmax breaks ties towards the lowest class index. */
static void test_argmax_ties(void) {
    int32_t feat = -1, left = 0, right = -1;
    float thr = 0;
    float probs2[2] = {0.5f, 0.5f}, probs3[3] = {0.0f, 0.5f, 0.5f}, x[2] = {0.5f, 0.5f};
    for (int k = 2; k <= 3; k++) {
        ls_tree_view tv = {1, 1, &feat, &left, &right, &thr, k == 2 ? probs2 : probs3};
        ls_victim *v = NULL;
        CHECK_EQ_INT(ls_victim_tree_from(&tv, 2, k, 1, 1, 2, 0, 1, "tie", &v), LS_OK);
        int32_t lab = -1;
        if (v) {
            CHECK_EQ_INT(ls_victim_predict(v, x, 1, &lab), LS_OK);
            CHECK_EQ_INT(lab, k - 2);
        }
        ls_victim_free(v);
    }
}

/* More rows than predict's internal chunk (1024) give the labels of predicting each row on
 * its own; accuracy is exactly the share of rows whose label matches. */
static void test_predict_chunks(void) {
    ls_steal_data t = table(64, 1, 2);
    for (int i = 0; i < 64; i++) t.x[i] = ((float)i + 0.5f) / 64, t.y[i] = (i / 2) % 2;
    ls_victim *v = train(LS_VICTIM_TREE, &t, set_depth_leaf, DEPTH_LEAF(40, 1));
    if (!v) return;
    int n = 2600;
    ls_steal_data q = table(n, 1, 2);
    ls_rng r;
    ls_rng_seed(&r, 3);
    for (int i = 0; i < n; i++) q.x[i] = (float)ls_rng_uniform(&r), q.y[i] = (int32_t)ls_rng_below(&r, 2);
    int32_t *all = malloc(sizeof(int32_t) * (size_t)n);
    CHECK_EQ_INT(ls_victim_predict(v, q.x, n, all), LS_OK);
    int differ = 0, ok = 0;
    for (int i = 0; i < n; i++) {
        int32_t one = -1;
        ls_victim_predict(v, q.x + i, 1, &one);
        differ += one != all[i];
        ok += one == q.y[i];
    }
    CHECK_MSG(differ == 0, "%d of %d labels differ from row-by-row prediction", differ, n);
    double acc = -1;
    CHECK_EQ_INT(ls_victim_accuracy(v, &q, &acc), LS_OK);
    CHECK(acc == (double)ok / n);
    CHECK_EQ_INT(ls_victim_accuracy(v, &t, &acc), LS_OK);
    CHECK(acc == 1.0);
    for (int i = 0; i < 3; i++) t.y[i] ^= 1; /* three wrong labels of 64 */
    CHECK_EQ_INT(ls_victim_accuracy(v, &t, &acc), LS_OK);
    CHECK(acc == 61.0 / 64);
    free(all);
    ls_victim_free(v);
    ls_steal_data_free(&q);
    ls_steal_data_free(&t);
}

/* Training needs at least two rows; a k-NN at most 64 neighbours (its tables' size, as
 * victim.bin's loader bounds k), however many reference rows it keeps. */
static void test_train_rows(void) {
    for (int n = 1; n <= 2; n++) {
        ls_steal_data t = table(n, 2, 2);
        t.x[0] = 0.2f, t.y[0] = 0;
        if (n == 2) t.x[2] = 0.8f, t.y[1] = 1;
        ls_victim_opts o;
        ls_victim_opts_default(&o, LS_VICTIM_NB);
        ls_victim *v = NULL;
        CHECK_EQ_INT(ls_victim_train(&o, &t, &v), n < 2 ? LS_EINVAL : LS_OK);
        CHECK((v != NULL) == (n == 2));
        ls_victim_free(v);
        ls_steal_data_free(&t);
    }
    ls_steal_data t = table(100, 1, 2);
    for (int i = 0; i < 100; i++) t.x[i] = (float)i / 100, t.y[i] = i % 2;
    for (int kk = 64; kk <= 65; kk++) {
        ls_victim_opts o;
        ls_victim_opts_default(&o, LS_VICTIM_KNN);
        o.knn_k = kk;
        ls_victim *v = NULL;
        CHECK_EQ_INT(ls_victim_train(&o, &t, &v), kk <= 64 ? LS_OK : LS_EINVAL);
        float q = 0.5f, pr[2];
        if (v) CHECK_EQ_INT(ls_victim_predict_proba(v, &q, 1, pr), LS_OK);
        ls_victim_free(v);
    }
    ls_steal_data_free(&t);
}

/* ---------------------------------------------------------------- victim.bin refusals */

/* Saved victims edited byte by byte, checksum recomputed: each edit the loader must refuse
 * (LS_EFORMAT), each against the unedited file loading. k-NN body: k (int64), the counted
 * reference rows (nref x d floats), the counted labels (nref int32). */
static void test_load_refusals(void) {
    int n = 80, d = 2, k = 2;
    ls_steal_data t = table(n, d, k);
    for (int i = 0; i < n; i++) t.x[i * d] = (float)i / n, t.x[i * d + 1] = 0.5f, t.y[i] = i >= n / 2;
    ls_victim *v = train(LS_VICTIM_KNN, &t, set_knn, 5);
    char p[300];
    path_of(p, sizeof p, "knnload.bin");
    if (v) CHECK_EQ_INT(ls_victim_save(v, p), LS_OK);
    ls_victim_free(v);
    size_t len;
    unsigned char *buf = read_bytes(p, &len), *e = malloc(len + 4);
    if (!buf) return;
    CHECK_EQ_INT(load_edited(buf, len), LS_OK);
    /* k above 64 (the neighbour table's size), though below the 80 references */
    memcpy(e, buf, len);
    int64_t kk = 65;
    memcpy(e + OFF_BODY, &kk, 8);
    CHECK_EQ_INT(load_edited(e, len), LS_EFORMAT);
    kk = 64;
    memcpy(e + OFF_BODY, &kk, 8);
    CHECK_EQ_INT(load_edited(e, len), LS_OK);
    /* a reference label >= k */
    size_t lab = OFF_BODY + 8 + 8 + (size_t)n * d * 4 + 8;
    CHECK_EQ_INT(get_i64(buf + lab - 8), n);
    memcpy(e, buf, len);
    int32_t bad = k;
    memcpy(e + lab + 4 * 7, &bad, 4);
    CHECK_EQ_INT(load_edited(e, len), LS_EFORMAT);
    bad = k - 1;
    memcpy(e + lab + 4 * 7, &bad, 4);
    CHECK_EQ_INT(load_edited(e, len), LS_OK);
    /* four bytes after the scaler, before the checksum */
    memcpy(e, buf, len - 8);
    memset(e + len - 8, 0, 12);
    CHECK_EQ_INT(load_edited(e, len + 4), LS_EFORMAT);
    /* a range with hi <= lo */
    float lo, hi;
    memcpy(&lo, buf + OFF_LO, 4), memcpy(&hi, buf + OFF_HI, 4);
    CHECK(lo == 0 && hi == 1);
    for (int c = 0; c < 2; c++) {
        memcpy(e, buf, len);
        float h2 = c ? -1.0f : lo;
        memcpy(e + OFF_HI, &h2, 4);
        CHECK_EQ_INT(load_edited(e, len), LS_EFORMAT);
    }
    free(buf);
    free(e);

    /* a tree's leaf table not a multiple of k: its last float cut from the file (the count
     * too). Tree body: ntrees, then counted feat, left, right, thr (nnodes each), probs. */
    ls_steal_data tt = table(64, 1, 2);
    for (int i = 0; i < 64; i++) tt.x[i] = ((float)i + 0.5f) / 64, tt.y[i] = i >= 40;
    v = train(LS_VICTIM_TREE, &tt, set_depth_leaf, DEPTH_LEAF(4, 1));
    path_of(p, sizeof p, "treeload.bin");
    if (v) CHECK_EQ_INT(ls_victim_save(v, p), LS_OK);
    ls_victim_free(v);
    buf = read_bytes(p, &len);
    if (buf) {
        CHECK_EQ_INT(load_edited(buf, len), LS_OK);
        size_t off = OFF_BODY + 8;
        int64_t nn = get_i64(buf + off);
        off += 4 * (8 + (size_t)nn * 4);
        int64_t np = get_i64(buf + off);
        CHECK(np > 0 && np % k == 0);
        e = malloc(len);
        size_t cut = off + 8 + (size_t)np * 4 - 4; /* the last leaf float */
        memcpy(e, buf, cut);
        memcpy(e + cut, buf + cut + 4, len - cut - 4);
        np--;
        memcpy(e + off, &np, 8);
        CHECK_EQ_INT(load_edited(e, len - 4), LS_EFORMAT);
        free(e);
        free(buf);
    }
    ls_steal_data_free(&tt);
    ls_steal_data_free(&t);
}

/* ls_victim_tree_from refuses a child that is not after its parent (a walk could loop or
 * revisit) and a non-finite leaf probability; the same tree with those fixed is accepted. */
static void test_tree_from_refusals(void) {
    /* 0: x0 < 0.5 ? 1 : 2;  1: leaf 0;  2: x0 < 0.75 ? 3 : 4;  3: leaf 1;  4: leaf 2 */
    int32_t feat[5] = {0, -1, 0, -1, -1}, left[5] = {1, 0, 3, 1, 2}, right[5] = {2, -1, 4, -1, -1};
    float thr[5] = {0.5f, 0, 0.75f, 0, 0}, probs[6] = {1, 0, 0, 1, 0.5f, 0.5f};
    ls_tree_view tv = {5, 3, feat, left, right, thr, probs};
    ls_victim *v = NULL;
    CHECK_EQ_INT(ls_victim_tree_from(&tv, 1, 2, 1, 1, 1, 0, 1, "ok", &v), LS_OK);
    ls_victim_free(v);
    left[2] = 1; /* node 2's left child is node 1, before it */
    CHECK_EQ_INT(ls_victim_tree_from(&tv, 1, 2, 1, 1, 1, 0, 1, "order", &v), LS_EFORMAT);
    CHECK(v == NULL);
    left[2] = 3, right[2] = 2; /* itself */
    CHECK_EQ_INT(ls_victim_tree_from(&tv, 1, 2, 1, 1, 1, 0, 1, "self", &v), LS_EFORMAT);
    right[2] = 4;
    probs[3] = NAN;
    CHECK_EQ_INT(ls_victim_tree_from(&tv, 1, 2, 1, 1, 1, 0, 1, "nan", &v), LS_EFORMAT);
    CHECK(v == NULL);
    probs[3] = INFINITY;
    CHECK_EQ_INT(ls_victim_tree_from(&tv, 1, 2, 1, 1, 1, 0, 1, "inf", &v), LS_EFORMAT);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    openblas_set_num_threads(1);
    RUN(test_tree_depth);
    RUN(test_tree_min_leaf);
    RUN(test_tree_no_gain);
    RUN(test_tree_last_edge);
    RUN(test_tree_top_value);
    RUN(test_forest_mean);
    RUN(test_forest_mtry);
    RUN(test_svm);
    RUN(test_knn);
    RUN(test_nb_floor);
    RUN(test_argmax_ties);
    RUN(test_predict_chunks);
    RUN(test_train_rows);
    RUN(test_load_refusals);
    RUN(test_tree_from_refusals);
    return TEST_RESULT_RMTREE(dir);
}
