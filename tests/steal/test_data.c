/* test_data.c - idx and CSV loaders (good and bad files), splits, normalisation, tables. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cblas.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-steal-data.XXXXXX";

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void write_gz(const char *path, const unsigned char *data, size_t n) {
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(gzwrite(f, data, (unsigned)n) == (int)n);
    gzclose(f);
}

/* Writes an idx image file of n images h x w (pixel = (i*7+j) % 256) and a label file. */
static void write_idx(const char *img, const char *lab, uint32_t n, uint32_t h, uint32_t w, uint32_t magic_img,
                      uint32_t nlab, int truncate) {
    size_t sz = 16 + (size_t)n * h * w;
    unsigned char *b = malloc(sz);
    put_be32(b, magic_img);
    put_be32(b + 4, n);
    put_be32(b + 8, h);
    put_be32(b + 12, w);
    for (size_t i = 0; i < (size_t)n * h * w; i++) b[16 + i] = (unsigned char)((i * 7) % 256);
    write_gz(img, b, truncate ? sz - 5 : sz);
    free(b);
    unsigned char *l = malloc(8 + nlab);
    put_be32(l, 0x00000801);
    put_be32(l + 4, nlab);
    for (uint32_t i = 0; i < nlab; i++) l[8 + i] = (unsigned char)(i % 3);
    write_gz(lab, l, 8 + nlab);
    free(l);
}

static void test_idx(void) {
    char img[300], lab[300];
    snprintf(img, sizeof img, "%s/img.gz", dir);
    snprintf(lab, sizeof lab, "%s/lab.gz", dir);
    ls_steal_data d;
    write_idx(img, lab, 5, 4, 3, 0x00000803, 5, 0);
    CHECK_EQ_INT(ls_steal_idx_load(img, lab, 0, &d), LS_OK);
    CHECK_EQ_INT(d.n, 5);
    CHECK_EQ_INT(d.d, 12);
    CHECK_EQ_INT(d.h, 4);
    CHECK_EQ_INT(d.w, 3);
    CHECK_EQ_INT(d.k, 3);
    CHECK_NEAR(d.x[13], (13 * 7 % 256) / 255.0, 1e-6);
    CHECK_EQ_INT(d.y[4], 1);
    ls_steal_data_free(&d);
    /* max_n */
    CHECK_EQ_INT(ls_steal_idx_load(img, lab, 2, &d), LS_OK);
    CHECK_EQ_INT(d.n, 2);
    ls_steal_data_free(&d);
    /* bad magic, truncated, label-count mismatch, missing file */
    write_idx(img, lab, 5, 4, 3, 0x00000802, 5, 0);
    CHECK_EQ_INT(ls_steal_idx_load(img, lab, 0, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "magic") != NULL);
    write_idx(img, lab, 5, 4, 3, 0x00000803, 5, 1);
    CHECK_EQ_INT(ls_steal_idx_load(img, lab, 0, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "truncated") != NULL);
    write_idx(img, lab, 5, 4, 3, 0x00000803, 4, 0);
    CHECK_EQ_INT(ls_steal_idx_load(img, lab, 0, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "labels") != NULL);
    CHECK_EQ_INT(ls_steal_idx_load("/nonexistent/x.gz", lab, 0, &d), LS_ENOTFOUND);
    /* labels up to 63 (64 classes), 64 refused; an image side over 4096 is implausible */
    unsigned char l[13];
    put_be32(l, 0x00000801), put_be32(l + 4, 5);
    const unsigned char labs[2][5] = {{0, 1, 2, 63, 0}, {0, 1, 2, 64, 0}};
    write_idx(img, lab, 5, 4, 3, 0x00000803, 5, 0);
    for (int t = 0; t < 2; t++) {
        memcpy(l + 8, labs[t], 5);
        write_gz(lab, l, 13);
        CHECK_EQ_INT(ls_steal_idx_load(img, lab, 0, &d), t ? LS_EFORMAT : LS_OK);
        if (t == 0) {
            CHECK_EQ_INT(d.k, 64);
            ls_steal_data_free(&d);
        }
        if (t == 1) CHECK(strstr(ls_errmsg(), "label 64 of row 3") != NULL);
    }
    write_idx(img, lab, 1, 4097, 1, 0x00000803, 1, 0);
    CHECK_EQ_INT(ls_steal_idx_load(img, lab, 0, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "implausible") != NULL);
}

static void test_fmnist(void) {
    ls_steal_data tr, te;
    if (!ls_is_file("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
        fprintf(stderr, "  (skip: dataset-fashion-mnist not installed)\n");
        return;
    }
    CHECK_EQ_INT(ls_steal_dataset_open("fmnist", 500, &tr, &te), LS_OK);
    CHECK_EQ_INT(tr.n, 500);
    CHECK_EQ_INT(te.n, 10000);
    CHECK_EQ_INT(tr.d, 784);
    CHECK_EQ_INT(tr.k, 10);
    CHECK_EQ_INT(tr.h, 28);
    float mx = 0;
    for (int64_t i = 0; i < tr.n * tr.d; i++) mx = tr.x[i] > mx ? tr.x[i] : mx;
    CHECK(mx <= 1.0f && mx > 0.9f);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
}

static void write_text(const char *path, const char *s) {
    CHECK_EQ_INT(ls_file_write_atomic(path, s, strlen(s)), LS_OK);
}

static void test_csv(void) {
    char p[300];
    snprintf(p, sizeof p, "%s/t.csv", dir);
    ls_steal_data d;
    write_text(p, "a,b,label\n1,2,10\n3,4,20\n5,6,10\n# comment\n\n7,8,30\n");
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_OK);
    CHECK_EQ_INT(d.n, 4);
    CHECK_EQ_INT(d.d, 2);
    CHECK_EQ_INT(d.k, 3);
    CHECK_EQ_INT(d.y[1], 1);
    CHECK_EQ_INT(d.y[3], 2);
    CHECK_NEAR(d.x[6], 7, 0);
    ls_steal_data_free(&d);
    write_text(p, "1,2,0\n3,4,1\n"); /* no header */
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_OK);
    CHECK_EQ_INT(d.n, 2);
    ls_steal_data_free(&d);
    write_text(p, "1,2,0\n3,4\n");
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), ":2:") != NULL);
    write_text(p, "1,2,0\n3,x,1\n5,6,1\n");
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT);
    write_text(p, "1,2,0\n3,4,0\n");
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT); /* one class */
    write_text(p, "1,nan,0\n3,4,1\n");
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT);
    write_text(p, "");
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT);
    /* scikit-learn's layout: a header of "rows,features,class names" (another field count). */
    write_text(p, "3,2,class_0,class_1\n1,2,0\n3,4,1\n5,6,1\n");
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_OK);
    CHECK_EQ_INT(d.n, 3);
    CHECK_EQ_INT(d.d, 2);
    CHECK_EQ_INT(d.k, 2);
    ls_steal_data_free(&d);
    write_text(p, "a,b,c\nd,e,f\n1,2,0\n3,4,1\n"); /* only one header line */
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), ":2:") != NULL);
    write_text(p, "a,b\n1\n"); /* the first data row sets the width */
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT);
    /* quoted fields, semicolons and tabs */
    const char *seps[] = {"\"a\",\"b\",\"y\"\n\"1\",\"2\",\"0\"\n\"3\", \"4\",\"1\"\n", "1;2;0\n3;4;1\n",
                          "1\t2\t0\n3\t4\t1\n"};
    for (int i = 0; i < 3; i++) {
        write_text(p, seps[i]);
        CHECK_MSG(ls_steal_csv_load(p, &d) == LS_OK, "%s", seps[i]);
        CHECK(d.n == 2 && d.d == 2 && d.k == 2 && d.x[0] == 1 && d.x[3] == 4 && d.y[1] == 1);
        ls_steal_data_free(&d);
    }
    write_text(p, "a,b,y\n1,2,0\n"); /* one data row */
    CHECK_EQ_INT(ls_steal_csv_load(p, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "fewer than 2 data rows") != NULL);
    /* 64 classes, and 65 refused */
    char many[2048];
    for (int k = 64; k <= 65; k++) {
        int o = 0;
        for (int i = 0; i < k; i++) o += snprintf(many + o, sizeof many - (size_t)o, "%d,%d\n", i, 100 + i);
        write_text(p, many);
        CHECK_EQ_INT(ls_steal_csv_load(p, &d), k == 64 ? LS_OK : LS_EFORMAT);
        if (k == 64) {
            CHECK(d.k == 64 && d.y[63] == 63);
            ls_steal_data_free(&d);
        }
    }
    /* Gzipped CSV, as zlib writes it; a corrupt gzip stream is an error, not a table. */
    char pz[310];
    snprintf(pz, sizeof pz, "%s/t.csv.gz", dir);
    const char *csv = "f1,f2,y\n0.5,1,3\n2,2.5,4\n1,1,3\n";
    gzFile g = gzopen(pz, "wb");
    CHECK(g != NULL);
    CHECK_EQ_INT(gzwrite(g, csv, (unsigned)strlen(csv)), (int)strlen(csv));
    gzclose(g);
    CHECK_EQ_INT(ls_steal_csv_load(pz, &d), LS_OK);
    CHECK_EQ_INT(d.n, 3);
    CHECK_EQ_INT(d.k, 2);
    CHECK_NEAR(d.x[2], 2, 0);
    CHECK_EQ_INT(d.y[1], 1);
    ls_steal_data_free(&d);
    char *gzb = NULL;
    size_t gzn = 0;
    CHECK_EQ_INT(ls_file_read(pz, &gzb, &gzn), LS_OK);
    for (size_t i = 10; i < gzn; i++) gzb[i] ^= 0x5a; /* header intact, deflate data scrambled */
    CHECK_EQ_INT(ls_file_write_atomic(pz, gzb, gzn), LS_OK);
    free(gzb);
    CHECK_EQ_INT(ls_steal_csv_load(pz, &d), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "gzip") != NULL);
}

/* The named scikit-learn tables (Debian's python3-sklearn, installed by scripts/setup.sh):
 * sizes, the 80/20 split, [0,1] scaling and digits' declared 8x8 shape. */
static void test_real_tables(void) {
    if (!ls_is_file("/usr/lib/python3/dist-packages/sklearn/datasets/data/wine_data.csv")) {
        fprintf(stderr, "  (python3-sklearn missing: real tables skipped)\n");
        return;
    }
    static const struct {
        const char *spec;
        int64_t n;
        int d, k, h;
    } want[] = {{"wine", 178, 13, 3, 1}, {"cancer", 569, 30, 2, 1}, {"digits", 1797, 64, 10, 8}};
    for (int i = 0; i < 3; i++) {
        ls_steal_data tr, te;
        CHECK_EQ_INT(ls_steal_dataset_open(want[i].spec, 0, &tr, &te), LS_OK);
        CHECK_EQ_INT(tr.n + te.n, want[i].n);
        CHECK_EQ_INT(te.n, (int64_t)(0.2 * (double)want[i].n + 0.5)); /* 36, 114, 359 */
        CHECK_EQ_INT(tr.d, want[i].d);
        CHECK_EQ_INT(tr.k, want[i].k);
        CHECK_EQ_INT(tr.h, want[i].h);
        CHECK_EQ_INT(te.h, want[i].h);
        CHECK_EQ_INT(tr.c * tr.h * tr.w, tr.d);
        CHECK(strcmp(tr.name, want[i].spec) == 0);
        float mn = 1, mx = 0;
        for (int64_t j = 0; j < tr.n * tr.d; j++) {
            mn = tr.x[j] < mn ? tr.x[j] : mn;
            mx = tr.x[j] > mx ? tr.x[j] : mx;
        }
        CHECK_NEAR(mn, 0, 0);
        CHECK_NEAR(mx, 1, 1e-6);
        ls_steal_data_free(&tr);
        ls_steal_data_free(&te);
    }
}

/* Rows whose every value is their index: a split's two sides together hold every row once,
 * a subset is drawn at random (not the first rows), and the scaler spans the last row too. */
static void test_rows_by_id(void) {
    enum { N = 40 };
    ls_steal_data all, tr, te, sub;
    CHECK_EQ_INT(ls_steal_data_alloc(&all, N, 3, 2), LS_OK);
    for (int i = 0; i < N * 3; i++) all.x[i] = (float)(i / 3);
    for (int i = 0; i < N; i++) all.y[i] = i % 2;
    CHECK_EQ_INT(ls_steal_data_split(&all, 0.25, 4, &tr, &te), LS_OK);
    CHECK(tr.n == 30 && te.n == 10);
    int seen[N] = {0};
    for (int64_t i = 0; i < tr.n; i++) seen[(int)tr.x[i * 3]]++;
    for (int64_t i = 0; i < te.n; i++) seen[(int)te.x[i * 3]]++;
    for (int i = 0; i < N; i++) CHECK_MSG(seen[i] == 1, "row %d in the split %d times", i, seen[i]);
    CHECK_EQ_INT(ls_steal_data_subset(&all, 5, 4, &sub), LS_OK);
    int first = 1;
    for (int64_t i = 0; i < sub.n; i++) first &= (int)sub.x[i * 3] == i;
    CHECK_MSG(sub.n == 5 && !first, "a subset of 5 of 40 rows was rows 0-4");
    ls_steal_data_free(&sub);
    ls_steal_data_free(&tr), ls_steal_data_free(&te);
    CHECK_EQ_INT(ls_steal_data_normalize(&all, NULL, 0, 1), LS_OK);
    CHECK(all.raw_min[0] == 0 && all.raw_max[2] == N - 1 && all.x[(N - 1) * 3] == 1);
    ls_steal_data_free(&all);
}

static void test_split_norm_tables(void) {
    ls_steal_data all, tr, te;
    CHECK_EQ_INT(ls_steal_make_table("blobs", 1000, 12, 4, 5, &all), LS_OK);
    CHECK_EQ_INT(all.k, 4);
    int seen[4] = {0};
    for (int64_t i = 0; i < all.n; i++) seen[all.y[i]]++;
    for (int c = 0; c < 4; c++) CHECK(seen[c] > 150);
    CHECK_EQ_INT(ls_steal_data_split(&all, 0.25, 9, &tr, &te), LS_OK);
    CHECK_EQ_INT(tr.n, 750);
    CHECK_EQ_INT(te.n, 250);
    ls_steal_data_normalize(&tr, &te, 0, 1);
    for (int j = 0; j < tr.d; j++) {
        float mn = 1, mx = 0;
        for (int64_t i = 0; i < tr.n; i++) {
            mn = tr.x[i * tr.d + j] < mn ? tr.x[i * tr.d + j] : mn;
            mx = tr.x[i * tr.d + j] > mx ? tr.x[i * tr.d + j] : mx;
        }
        CHECK_NEAR(mn, 0, 1e-6);
        CHECK_NEAR(mx, 1, 1e-6);
    }
    for (int64_t i = 0; i < te.n * te.d; i++) CHECK(te.x[i] >= 0 && te.x[i] <= 1);
    /* Same seed, same split. */
    ls_steal_data tr2, te2;
    CHECK_EQ_INT(ls_steal_data_split(&all, 0.25, 9, &tr2, &te2), LS_OK);
    CHECK_EQ_INT(te2.y[17], te.y[17]);
    /* CSV round trip. */
    char p[300];
    snprintf(p, sizeof p, "%s/rt.csv", dir);
    CHECK_EQ_INT(ls_steal_csv_write(p, &te2), LS_OK);
    ls_steal_data back;
    CHECK_EQ_INT(ls_steal_csv_load(p, &back), LS_OK);
    CHECK_EQ_INT(back.n, te2.n);
    CHECK_NEAR(back.x[5], te2.x[5], 1e-4);
    ls_steal_data_free(&tr2);
    CHECK_EQ_INT(ls_steal_make_table("rings", 500, 8, 3, 5, &tr2) == LS_OK, 1);
    ls_steal_data_free(&te2);
    CHECK_EQ_INT(ls_steal_make_table("nope", 500, 8, 3, 5, &te2), LS_EINVAL);
    /* an unknown kind is refused before its rows are allocated (here 2^31-1 x 65536 floats) */
    CHECK_EQ_INT(ls_steal_make_table("nope", LS_TABLE_MAX_ROWS, LS_TABLE_MAX_DIM, 3, 5, &te2), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "unknown kind") != NULL);
    ls_steal_data_free(&back);
    ls_steal_data_free(&tr2);
    ls_steal_data_free(&all);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    ls_steal_data_free(&te2);
}

int main(void) {
    openblas_set_num_threads(1); /* small matmuls; threads only spin on shared cores */
    if (!mkdtemp(dir)) return 1;
    RUN(test_idx);
    RUN(test_fmnist);
    RUN(test_csv);
    RUN(test_split_norm_tables);
    RUN(test_rows_by_id);
    RUN(test_real_tables);
    return TEST_RESULT_RMTREE(dir);
}
