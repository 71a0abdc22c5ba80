/* test_heldout.c - the held-out tasks (determinism by seed, ranges, classes, plus and cross upright, the idx / CSV
 * files victim make-task writes read back bit for bit) and the query-distribution monitor
 * (its score against a float64 Mahalanobis distance; natural clients not flagged, uniform
 * queries and a scripted attack through ls_steal_run flagged; the image statistics view on
 * rows a Gaussian of the pixels takes for data). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "test.h"

static void test_task_determinism(void) {
    for (int t = 0; t < ls_steal_task_count(); t++) {
        const char *name = ls_steal_task_name(t);
        if (!strcmp(name, "fmnist-inv")) continue; /* a transform of installed data, checked below */
        ls_steal_data a, b, c;
        int rc = ls_steal_make_task(name, 3, 400, &a);
        if (rc == LS_EINVAL && !strcmp(name, "glyphs")) { /* built without FreeType */
            fprintf(stderr, "  glyphs skipped: %s\n", ls_errmsg());
            continue;
        }
        CHECK_EQ_INT(rc, LS_OK);
        CHECK_EQ_INT(ls_steal_make_task(name, 3, 400, &b), LS_OK);
        CHECK_EQ_INT(ls_steal_make_task(name, 4, 400, &c), LS_OK);
        CHECK(a.n == 400 && b.n == 400 && a.d == b.d && a.k == b.k);
        CHECK_MSG(!memcmp(a.x, b.x, sizeof(float) * (size_t)a.n * a.d) && !memcmp(a.y, b.y, sizeof(int32_t) * 400),
                  "%s: same seed, different rows", name);
        CHECK_MSG(memcmp(a.x, c.x, sizeof(float) * (size_t)a.n * a.d), "%s: another seed, same rows", name);
        int seen[16] = {0}, bad = 0;
        for (int64_t i = 0; i < a.n; i++) {
            if (a.y[i] < 0 || a.y[i] >= a.k) bad++;
            else seen[a.y[i]] = 1;
        }
        for (int64_t i = 0; i < a.n * a.d; i++) {
            float v = a.x[i];
            if (!isfinite(v)) bad++;
            /* images: 8-bit levels in [0, 1] */
            if (ls_steal_task_is_image(t) && (v < 0 || v > 1 || fabsf(v * 255 - roundf(v * 255)) > 1e-3f)) bad++;
        }
        int classes = 0;
        for (int k = 0; k < a.k; k++) classes += seen[k];
        CHECK_MSG(!bad && classes == a.k, "%s: %d bad values/labels, %d of %d classes", name, bad, classes, a.k);
        CHECK(ls_steal_task_is_image(t) ? (a.d == 784 && a.k == 10 && a.h == 28) : (a.h == 1 && a.d >= 8));
        ls_steal_data_free(&a);
        ls_steal_data_free(&b);
        ls_steal_data_free(&c);
    }
    ls_steal_data x;
    CHECK(ls_steal_make_task("nope", 1, 10, &x) == LS_EINVAL);
}

/* `shapes` draws the plus (class 5) and the cross (6) upright, within 20 degrees: a plus turned
 * 45 degrees is a cross. Read off the images: the foreground (above the midpoint of the image's
 * range) lies mostly along the axes through its centroid for a plus, along the diagonals for a
 * cross (each pixel at least 1.5 pixels out, counted by the nearer of the two). */
static void test_shapes_plus_cross(void) {
    ls_steal_data a;
    CHECK_EQ_INT(ls_steal_make_task("shapes", 5, 2000, &a), LS_OK);
    int right[2] = {0}, total[2] = {0};
    for (int64_t i = 0; i < a.n; i++) {
        int cls = a.y[i];
        if (cls != 5 && cls != 6) continue;
        const float *x = a.x + i * a.d;
        float lo = 1, hi = 0;
        for (int j = 0; j < a.d; j++) lo = x[j] < lo ? x[j] : lo, hi = x[j] > hi ? x[j] : hi;
        double sx = 0, sy = 0, sw = 0, axis = 0, diag = 0;
        for (int j = 0; j < a.d; j++)
            if (x[j] > 0.5f * (lo + hi)) sx += j % 28, sy += j / 28, sw += 1;
        for (int j = 0; sw > 0 && j < a.d; j++) {
            double dx = j % 28 - sx / sw, dy = j / 28 - sy / sw;
            if (x[j] <= 0.5f * (lo + hi) || dx * dx + dy * dy < 2.25) continue;
            double t = fmod(atan2(dy, dx) + 2 * M_PI, M_PI / 2); /* 0..90 degrees */
            if (t < M_PI / 8 || t > 3 * M_PI / 8)
                axis += 1;
            else
                diag += 1;
        }
        total[cls - 5]++;
        right[cls - 5] += cls == 5 ? axis > diag : diag > axis;
    }
    fprintf(stderr, "  shapes: %d of %d pluses along the axes, %d of %d crosses along the diagonals\n", right[0],
            total[0], right[1], total[1]);
    CHECK(total[0] >= 100 && total[1] >= 100);
    CHECK_MSG(right[0] >= 0.95 * total[0] && right[1] >= 0.95 * total[1], "plus and cross are not told apart");
    ls_steal_data_free(&a);
}

/* victim make-task's files read back as the dataset the name opens. */
static void test_task_files(void) {
    char dir[] = "/tmp/llmsys-heldout.XXXXXX", desc[2400], spec[128];
    CHECK(mkdtemp(dir) != NULL);
    CHECK_EQ_INT(ls_steal_write_task("shapes", 1, dir, desc, sizeof desc), LS_OK);
    ls_steal_data tr1, te1, tr2, te2;
    snprintf(spec, sizeof spec, "fmnist:%s", dir);
    CHECK_EQ_INT(ls_steal_dataset_open(spec, 3000, &tr1, &te1), LS_OK);
    CHECK_EQ_INT(ls_steal_dataset_open("shapes", 3000, &tr2, &te2), LS_OK);
    CHECK(tr1.n == 3000 && tr2.n == 3000 && te1.n == 5000 && te2.n == 5000);
    CHECK_MSG(!memcmp(tr1.x, tr2.x, sizeof(float) * 3000 * 784) && !memcmp(tr1.y, tr2.y, sizeof(int32_t) * 3000) &&
                  !memcmp(te1.x, te2.x, sizeof(float) * 5000 * 784),
              "idx files differ from the generated task");
    ls_steal_data_free(&tr1), ls_steal_data_free(&te1), ls_steal_data_free(&tr2), ls_steal_data_free(&te2);
    CHECK_EQ_INT(ls_steal_write_task("moons", 1, dir, desc, sizeof desc), LS_OK);
    snprintf(spec, sizeof spec, "%s/moons.csv", dir);
    ls_steal_data csv, gen;
    CHECK_EQ_INT(ls_steal_csv_load(spec, &csv), LS_OK);
    CHECK_EQ_INT(ls_steal_make_task("moons", 1, 0, &gen), LS_OK);
    double err = 0;
    for (int64_t i = 0; i < gen.n * gen.d; i++) err = fmax(err, fabs(csv.x[i] - gen.x[i]) / (1 + fabs(gen.x[i])));
    CHECK(csv.n == gen.n && csv.d == gen.d && !memcmp(csv.y, gen.y, sizeof(int32_t) * (size_t)gen.n));
    CHECK_MSG(err < 1e-5, "csv round trip error %g", err);
    ls_steal_data_free(&csv), ls_steal_data_free(&gen);
    CHECK(test_rmtree(dir) == 0);
}

/* With rank = d the score is the Mahalanobis distance / d under the ridged sample covariance. */
static void test_qmon_score(void) {
    enum { N = 3000, D = 3 };
    ls_steal_data ref;
    CHECK_EQ_INT(ls_steal_data_alloc(&ref, N, D, 2), LS_OK);
    ls_rng r;
    ls_rng_seed(&r, 9);
    for (int i = 0; i < N; i++) {
        float a = ls_rng_normal(&r), b = ls_rng_normal(&r), c = ls_rng_normal(&r);
        ref.x[i * D] = 0.5f + 0.1f * a, ref.x[i * D + 1] = 0.3f + 0.05f * a + 0.02f * b, ref.x[i * D + 2] = 0.01f * c;
    }
    ls_qmon_opts o;
    ls_qmon_opts_default(&o);
    ls_qmon_ref *q;
    CHECK_EQ_INT(ls_qmon_fit(&ref, &o, &q), LS_OK);
    double mu[D] = {0}, C[D][D] = {{0}}, tr = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) mu[j] += ref.x[i * D + j] / (double)N;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++)
            for (int l = 0; l < D; l++) C[j][l] += (ref.x[i * D + j] - mu[j]) * (ref.x[i * D + l] - mu[l]) / N;
    for (int j = 0; j < D; j++) tr += C[j][j];
    for (int j = 0; j < D; j++) C[j][j] += 1e-3 * tr / D + 1e-8;
    /* inverse by the adjugate */
    double det = C[0][0] * (C[1][1] * C[2][2] - C[1][2] * C[2][1]) - C[0][1] * (C[1][0] * C[2][2] - C[1][2] * C[2][0]) +
                 C[0][2] * (C[1][0] * C[2][1] - C[1][1] * C[2][0]), Cinv[D][D];
    for (int j = 0; j < D; j++)
        for (int l = 0; l < D; l++) {
            int j1 = (l + 1) % 3, j2 = (l + 2) % 3, l1 = (j + 1) % 3, l2 = (j + 2) % 3;
            Cinv[j][l] = (C[j1][l1] * C[j2][l2] - C[j1][l2] * C[j2][l1]) / det;
        }
    float pts[4 * D] = {0.5f, 0.3f, 0, 0.7f, 0.3f, 0.01f, 0.5f, 0.5f, 0, 0.2f, 0.1f, -0.03f};
    double sc[4];
    int out[4];
    CHECK_EQ_INT(ls_qmon_score(q, pts, 4, sc, out), LS_OK);
    for (int p = 0; p < 4; p++) {
        double m = 0;
        for (int j = 0; j < D; j++)
            for (int l = 0; l < D; l++) m += (pts[p * D + j] - mu[j]) * Cinv[j][l] * (pts[p * D + l] - mu[l]);
        CHECK_MSG(fabs(sc[p] - m / D) <= 1e-3 * (1 + m / D), "point %d: score %g, float64 %g", p, sc[p], m / D);
    }
    CHECK(!out[0] && out[2] && out[3]); /* the mean is typical; 2 and 3 are far off the data */
    ls_qmon_ref_free(q);
    ls_steal_data_free(&ref);
}

/* With rank < d the score adds the energy outside the principal subspace: rows in a plane of 6
 * dimensions (plus noise 100x smaller), rank 2; a point on the plane scores as the mean does,
 * one off it by 1 in four directions is an outlier by the residual alone. */
static void test_qmon_residual(void) {
    enum { N = 2000, D = 6 };
    ls_steal_data ref;
    CHECK_EQ_INT(ls_steal_data_alloc(&ref, N, D, 2), LS_OK);
    ls_rng r;
    ls_rng_seed(&r, 10);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) ref.x[i * D + j] = (j < 2 ? 1.0f : 0.01f) * ls_rng_normal(&r);
    ls_qmon_opts o;
    ls_qmon_opts_default(&o);
    o.rank = 2;
    ls_qmon_ref *q;
    CHECK_EQ_INT(ls_qmon_fit(&ref, &o, &q), LS_OK);
    float pts[2 * D] = {0.5f, -0.5f, 0, 0, 0, 0, 0.5f, -0.5f, 1, 1, 1, 1};
    double sc[2];
    int out[2];
    CHECK_EQ_INT(ls_qmon_score(q, pts, 2, sc, out), LS_OK);
    fprintf(stderr, "  rank 2 of 6: score on the plane %.3f, off it %.1f\n", sc[0], sc[1]);
    CHECK(!out[0] && out[1]);
    CHECK(sc[0] < 1 && sc[1] > 1000); /* 4 / (4 x 1e-4) = 1e4 from the residual */
    ls_qmon_ref_free(q);
    ls_steal_data_free(&ref);
}

/* The threshold comes from rows the profile was not fitted on: with 300 rows in 40 dimensions
 * an in-sample threshold would sit far too low (each row pulls the fit towards itself), so
 * fresh rows of the same Gaussian would pass it far more often than 1 - quantile = 1 %. */
static void test_qmon_out_of_fold(void) {
    enum { N = 300, D = 40, M = 20000 };
    ls_steal_data ref;
    CHECK_EQ_INT(ls_steal_data_alloc(&ref, N, D, 2), LS_OK);
    ls_rng r;
    ls_rng_seed(&r, 11);
    for (int i = 0; i < N * D; i++) ref.x[i] = ls_rng_normal(&r);
    ls_qmon_opts o;
    ls_qmon_opts_default(&o);
    o.rank = D;
    ls_qmon_ref *q;
    CHECK_EQ_INT(ls_qmon_fit(&ref, &o, &q), LS_OK);
    float *x = malloc(sizeof(float) * (size_t)M * D);
    double *sc = malloc(sizeof(double) * M);
    int *out = malloc(sizeof(int) * M);
    for (int i = 0; i < M * D; i++) x[i] = ls_rng_normal(&r);
    CHECK_EQ_INT(ls_qmon_score(q, x, M, sc, out), LS_OK);
    int k = 0;
    for (int i = 0; i < M; i++) k += out[i];
    fprintf(stderr, "  fresh rows past the out-of-fold threshold: %.2f %% (nominal 1 %%)\n", 100.0 * k / M);
    CHECK(k <= 0.03 * M);
    free(x), free(sc), free(out);
    ls_qmon_ref_free(q);
    ls_steal_data_free(&ref);
}

/* An oracle over a victim in process that feeds every query to a monitor. */
typedef struct {
    const ls_victim *v;
    ls_qmon *mon;
} mon_oracle;
static int mon_query(void *ctx, const float *x, int n, int32_t *labels, float *proba, int *got) {
    mon_oracle *o = ctx;
    (void)proba;
    *got = 0;
    LS_TRY(ls_victim_predict(o->v, x, n, labels));
    return ls_qmon_observe(o->mon, x, n) < 0 ? LS_EIO : LS_OK;
}

/* Natural clients (test rows) not flagged; uniform queries and the attack flagged early. */
static void detector_case(const char *data, int64_t train_n, int64_t budget, int64_t attack_within) {
    ls_steal_data tr, te;
    CHECK_EQ_INT(ls_steal_dataset_open(data, train_n, &tr, &te), LS_OK);
    ls_qmon_opts o;
    ls_qmon_opts_default(&o);
    ls_qmon_ref *prof;
    CHECK_EQ_INT(ls_qmon_fit(&tr, &o, &prof), LS_OK);
    ls_qmon *nat, *uni, *atk;
    CHECK_EQ_INT(ls_qmon_init(prof, &nat), LS_OK);
    CHECK_EQ_INT(ls_qmon_init(prof, &uni), LS_OK);
    CHECK_EQ_INT(ls_qmon_init(prof, &atk), LS_OK);
    int64_t nn = te.n < 2000 ? te.n : 2000;
    for (int64_t s = 0; s < nn; s += 100) CHECK(ls_qmon_observe(nat, te.x + s * te.d, (int)(nn - s < 100 ? nn - s : 100)) >= 0);
    float *u = malloc(sizeof(float) * 100 * (size_t)tr.d);
    ls_rng r;
    ls_rng_seed(&r, 4);
    for (int i = 0; i < 100 * tr.d; i++) u[i] = ls_rng_uniform(&r);
    CHECK(ls_qmon_observe(uni, u, 100) == 1);
    free(u);
    ls_victim_opts vo;
    ls_victim_opts_default(&vo, LS_VICTIM_LOGREG);
    vo.epochs = 2;
    ls_victim *v;
    CHECK_EQ_INT(ls_victim_train(&vo, &tr, &v), LS_OK);
    mon_oracle mo = {v, atk};
    ls_steal_opts so;
    ls_steal_opts_default(&so);
    ls_steal_opts_for_data(&so, &tr);
    so.budget = budget;
    so.final_epochs = 2;
    so.members = 1;
    so.hidden1 = 32, so.hidden2 = 16;
    so.cnn_member = 0; /* the CNN member has its own test (steal.test_attack) */
    ls_replica *rep;
    ls_steal_result res;
    CHECK_EQ_INT(ls_steal_run(&so, (ls_steal_oracle){&mo, mon_query}, &rep, &res), LS_OK);
    ls_replica_free(rep);
    int64_t q, k;
    double z, mz;
    ls_qmon_state(nat, &q, &k, &z, &mz);
    fprintf(stderr, "  %s natural: %lld queries, %lld outliers, max z %.2f\n", data, (long long)q, (long long)k, mz);
    CHECK_MSG(ls_qmon_flagged_at(nat, 0) < 0, "%s: natural client flagged", data);
    ls_qmon_state(atk, &q, &k, &z, &mz);
    fprintf(stderr, "  %s attack: %lld queries, %lld outliers, flagged at %lld\n", data, (long long)q, (long long)k,
            (long long)ls_qmon_flagged_at(atk, 0));
    /* z of the one-sided binomial test at p0 = the null rate */
    double p0 = o.null_rate;
    CHECK_NEAR(z, ((double)k - p0 * (double)q) / sqrt((double)q * p0 * (1 - p0)), 1e-9 * (1 + fabs(z)));
    CHECK(q == budget && mz >= z);
    CHECK_MSG(ls_qmon_flagged_at(atk, 0) > 0 && ls_qmon_flagged_at(atk, 0) <= attack_within, "%s: attack not flagged",
              data);
    ls_qmon_free(nat), ls_qmon_free(uni), ls_qmon_free(atk);
    ls_victim_free(v);
    ls_qmon_ref_free(prof);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
}

static void test_qmon_detector(void) {
    detector_case("blobs", 3000, 800, 800);
    detector_case("moons", 3000, 800, 800);
    detector_case("fmnist", 2000, 600, 600);
}

/* The outlier share of n rows of x under profile p. */
static double outlier_share(const ls_qmon_ref *p, const float *x, int64_t n) {
    double *sc = malloc(sizeof(double) * (size_t)n);
    int *out = malloc(sizeof(int) * (size_t)n);
    CHECK_EQ_INT(ls_qmon_score(p, x, n, sc, out), LS_OK);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += out[i];
    free(sc), free(out);
    return (double)k / (double)n;
}

/* The statistics view on textures, whose training images spread over the whole pixel cube:
 * two kinds of row that a Gaussian of the pixels takes for data must be outliers of the
 * statistics view, and the task's test images must not: (a) a grey disc on a dark frame (the
 * look of the attack's object style), (b) one bright bar on a dark frame (its stroke style). */
static void test_qmon_image_stats(void) {
    ls_steal_data tr, te;
    CHECK_EQ_INT(ls_steal_dataset_open("textures", 2000, &tr, &te), LS_OK);
    enum { N = 400 };
    int d = tr.d;
    float *disc = calloc(N * (size_t)d, sizeof(float)), *bar = calloc(N * (size_t)d, sizeof(float));
    ls_rng r;
    ls_rng_seed(&r, 12);
    for (int i = 0; i < N; i++) {
        float *a = disc + (int64_t)i * d, *b = bar + (int64_t)i * d;
        float cy = 10 + 8 * ls_rng_uniform(&r), cx = 10 + 8 * ls_rng_uniform(&r), rad = 4 + 6 * ls_rng_uniform(&r);
        float lv = 0.4f + 0.5f * ls_rng_uniform(&r);
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++)
                if ((y - cy) * (y - cy) + (x - cx) * (x - cx) <= rad * rad) a[y * 28 + x] = lv;
        int y = 4 + (int)ls_rng_below(&r, 20), w = 2 + (int)ls_rng_below(&r, 2);
        for (int yy = y; yy < y + w; yy++)
            for (int x = 3; x < 25; x++) b[yy * 28 + x] = 0.9f;
    }
    /* (c) test images with their rows shuffled, (d) with their columns shuffled: the same
     * levels and the same differences along one axis, noise along the other */
    float *rows = malloc(sizeof(float) * N * (size_t)d), *cols = malloc(sizeof(float) * N * (size_t)d);
    for (int i = 0; i < N; i++) {
        int perm[28];
        for (int k = 0; k < 28; k++) perm[k] = k;
        ls_rng_shuffle_int(&r, perm, 28);
        const float *src = te.x + (int64_t)i * d;
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++) {
                rows[(int64_t)i * d + y * 28 + x] = src[perm[y] * 28 + x];
                cols[(int64_t)i * d + y * 28 + x] = src[y * 28 + perm[x]];
            }
    }
    double share[2][5];
    for (int v = 0; v < 2; v++) {
        ls_qmon_opts o;
        ls_qmon_opts_default(&o);
        o.image_stats = v;
        ls_qmon_ref *p;
        CHECK_EQ_INT(ls_qmon_fit(&tr, &o, &p), LS_OK);
        share[v][0] = outlier_share(p, te.x, te.n);
        share[v][1] = outlier_share(p, disc, N);
        share[v][2] = outlier_share(p, bar, N);
        share[v][3] = outlier_share(p, rows, N);
        share[v][4] = outlier_share(p, cols, N);
        fprintf(stderr,
                "  textures, %s: outlier share of test rows %.3f, discs %.3f, bars %.3f, rows shuffled %.3f, columns "
                "shuffled %.3f\n",
                v ? "pixels + statistics" : "pixels alone", share[v][0], share[v][1], share[v][2], share[v][3],
                share[v][4]);
        ls_qmon_ref_free(p);
    }
    CHECK(share[0][1] < 0.15 && share[0][2] < 0.15); /* the pixels alone take them for data */
    CHECK(share[1][1] > 0.8 && share[1][2] > 0.99);
    /* shuffled rows (columns) keep the levels and the differences along rows (columns): what
     * flags them is the differences across, 0.11 and 0.10 here against 0.04 without them */
    CHECK(share[1][3] > 0.07 && share[1][4] > 0.07);
    /* natural rows: one 1 % threshold, or two; under the z-test's null rate of 5 % */
    CHECK(share[0][0] < 0.02 && share[1][0] < 0.035);
    free(disc), free(bar), free(rows), free(cols);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
}

int main(void) {
    openblas_set_num_threads(1); /* small matmuls; threads only spin on shared cores */
    RUN(test_task_determinism);
    RUN(test_shapes_plus_cross);
    RUN(test_task_files);
    RUN(test_qmon_score);
    RUN(test_qmon_residual);
    RUN(test_qmon_out_of_fold);
    RUN(test_qmon_detector);
    RUN(test_qmon_image_stats);
    return TEST_RESULT();
}
