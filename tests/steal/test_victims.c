/* test_victims.c - every victim type learns (well above chance) on a synthetic table and a
 * small Fashion-MNIST subset (the cnn: images only, a table is refused); victim.bin round
 * trip and corrupt files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-steal-victims.XXXXXX";

static void check_learns(const char *spec, int64_t ntrain, int64_t ntest, double min_acc) {
    ls_steal_data tr, tef, te;
    /* callers skip only when the data is absent; any error opening it is a failure */
    int rc = ls_steal_dataset_open(spec, ntrain, &tr, &tef);
    CHECK_MSG(rc == LS_OK, "%s: %s", spec, ls_errmsg());
    if (rc != LS_OK) return;
    CHECK_EQ_INT(ls_steal_data_subset(&tef, ntest, 1, &te), LS_OK);
    for (int t = 0; t < LS_VICTIM_COUNT; t++) {
        ls_victim_opts o;
        ls_victim_opts_default(&o, t);
        o.trees = 10;
        o.knn_ref = 2000;
        if (t == LS_VICTIM_CNN) o.epochs = 3; /* keeps the test quick; ~1.5 s an epoch on 2000 rows */
        ls_victim *v = NULL;
        if (t == LS_VICTIM_CNN && tr.h == 1) {
            /* A table's (1,1,d) shape: refused with a message that says why. */
            CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_EINVAL);
            CHECK_MSG(strstr(ls_errmsg(), "cnn victim needs image-shaped data (C,H,W)") != NULL, "message: %s",
                      ls_errmsg());
            CHECK(v == NULL);
            continue;
        }
        CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_OK);
        if (!v) continue;
        double acc = 0;
        CHECK_EQ_INT(ls_victim_accuracy(v, &te, &acc), LS_OK);
        fprintf(stderr, "  %-6s on %-6s: test accuracy %.3f (chance %.3f)\n", ls_victim_type_name(t), spec, acc,
                1.0 / te.k);
        CHECK_MSG(acc >= min_acc, "%s on %s: accuracy %.3f < %.3f", ls_victim_type_name(t), spec, acc, min_acc);
        /* The cnn should beat the pixel-level models even on 2000 images and 3 epochs. */
        if (t == LS_VICTIM_CNN) CHECK_MSG(acc >= 0.72, "cnn on %s: accuracy %.3f < 0.72", spec, acc);
        /* Probabilities are distributions and agree with the labels. */
        float p[4 * 64];
        int32_t lab[4];
        CHECK_EQ_INT(ls_victim_predict_proba(v, te.x, 4, p), LS_OK);
        CHECK_EQ_INT(ls_victim_predict(v, te.x, 4, lab), LS_OK);
        for (int i = 0; i < 4; i++) {
            double s = 0;
            int b = 0;
            for (int j = 0; j < te.k; j++) {
                s += p[i * te.k + j];
                if (p[i * te.k + j] > p[i * te.k + b]) b = j;
            }
            CHECK_NEAR(s, 1.0, 1e-4);
            CHECK_EQ_INT(b, lab[i]);
        }
        /* Round trip through victim.bin gives identical predictions. */
        char path[300];
        snprintf(path, sizeof path, "%s/%s.bin", dir, ls_victim_type_name(t));
        CHECK_EQ_INT(ls_victim_save(v, path), LS_OK);
        ls_victim *back = NULL;
        CHECK_EQ_INT(ls_victim_load(path, &back), LS_OK);
        if (back) {
            int32_t *a = malloc(sizeof(int32_t) * (size_t)te.n), *b = malloc(sizeof(int32_t) * (size_t)te.n);
            ls_victim_predict(v, te.x, te.n, a);
            ls_victim_predict(back, te.x, te.n, b);
            CHECK(memcmp(a, b, sizeof(int32_t) * (size_t)te.n) == 0);
            free(a);
            free(b);
            ls_victim_free(back);
        }
        ls_victim_free(v);
    }
    ls_steal_data_free(&tr);
    ls_steal_data_free(&tef);
    ls_steal_data_free(&te);
}

static void test_blobs(void) { check_learns("blobs", 3000, 1000, 0.60); }
static void test_fmnist_small(void) {
    if (!ls_is_file("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
        fprintf(stderr, "  (skip: dataset-fashion-mnist not installed)\n");
        return;
    }
    check_learns("fmnist", 2000, 1000, 0.55);
}

static void test_corrupt(void) {
    ls_steal_data tr, te;
    CHECK_EQ_INT(ls_steal_dataset_open("blobs", 500, &tr, &te), LS_OK);
    ls_victim_opts o;
    ls_victim_opts_default(&o, LS_VICTIM_TREE);
    ls_victim *v;
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_OK);
    char path[300];
    snprintf(path, sizeof path, "%s/c.bin", dir);
    CHECK_EQ_INT(ls_victim_save(v, path), LS_OK);
    char *data;
    size_t len;
    CHECK_EQ_INT(ls_file_read(path, &data, &len), LS_OK);
    ls_victim *bad = NULL;
    data[len / 2] ^= 0x5a; /* a flipped byte */
    CHECK_EQ_INT(ls_file_write_atomic(path, data, len), LS_OK);
    CHECK_EQ_INT(ls_victim_load(path, &bad), LS_ECHECKSUM);
    data[len / 2] ^= 0x5a;
    CHECK_EQ_INT(ls_file_write_atomic(path, data, len / 3), LS_OK); /* truncated */
    CHECK(ls_victim_load(path, &bad) < 0);
    memcpy(data, "NOTVICTM", 8);
    CHECK_EQ_INT(ls_file_write_atomic(path, data, len), LS_OK);
    CHECK_EQ_INT(ls_victim_load(path, &bad), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "magic") != NULL);
    CHECK(bad == NULL);
    free(data);
    ls_victim_free(v);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    openblas_set_num_threads(1); /* small matmuls; threads only spin on shared cores */
    RUN(test_blobs);
    RUN(test_fmnist_small);
    RUN(test_corrupt);
    return TEST_RESULT_RMTREE(dir);
}
