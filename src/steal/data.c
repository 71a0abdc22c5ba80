/* data.c - datasets of the steal module: Fashion-MNIST idx files, numeric CSV tables,
 * reproducible synthetic tables, splits and normalisation. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define SKLEARN_DATA_DIR "/usr/lib/python3/dist-packages/sklearn/datasets/data"

int ls_steal_data_alloc(ls_steal_data *d, int64_t n, int dim, int k) {
    memset(d, 0, sizeof *d);
    if (n < 0 || dim <= 0 || k <= 0)
        return ls_err(LS_EINVAL, "dataset: bad size n=%lld d=%d k=%d", (long long)n, dim, k);
    d->x = calloc((size_t)(n ? n : 1) * (size_t)dim, sizeof(float));
    d->y = calloc((size_t)(n ? n : 1), sizeof(int32_t));
    if (!d->x || !d->y) {
        ls_steal_data_free(d);
        return ls_err(LS_ENOMEM, "dataset: out of memory for %lld x %d", (long long)n, dim);
    }
    d->n = n;
    d->d = dim;
    d->k = k;
    d->c = 1;
    d->h = 1;
    d->w = dim;
    d->lo = 0.0f;
    d->hi = 1.0f;
    return LS_OK;
}

void ls_steal_data_free(ls_steal_data *d) {
    if (!d) return;
    free(d->x), free(d->y);
    free(d->raw_min), free(d->raw_max);
    memset(d, 0, sizeof *d);
}

/* ---------------------------------------------------------------- idx */

/* Reads a whole (optionally gzipped) file through zlib, which passes plain files through. */
static int read_gz(const char *path, unsigned char **out, size_t *len) {
    int fd;
    LS_TRY(ls_file_open_input(path, &fd, NULL)); /* regular files only: a FIFO would block */
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return ls_err(LS_EIO, "%s: cannot open (%s)", path, strerror(errno));
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        gzclose(f);
        return ls_err(LS_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap > ((size_t)1 << 32)) {
                free(buf);
                gzclose(f);
                return ls_err(LS_EFORMAT, "%s: larger than 4 GiB", path);
            }
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                gzclose(f);
                return ls_err(LS_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        int r = gzread(f, buf + n, (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n));
        if (r < 0) {
            int e;
            /* gzerror's string lives in f: format the message before gzclose frees it. */
            int rc = ls_err(LS_EFORMAT, "%s: corrupt gzip data (%s)", path, gzerror(f, &e));
            free(buf);
            gzclose(f);
            return rc;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    gzclose(f);
    *out = buf;
    *len = n;
    return LS_OK;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

int ls_steal_idx_load(const char *images_path, const char *labels_path, int64_t max_n, ls_steal_data *out) {
    memset(out, 0, sizeof *out);
    unsigned char *im = NULL, *lb = NULL;
    size_t imlen = 0, lblen = 0;
    int rc = read_gz(images_path, &im, &imlen);
    if (rc) return rc;
    rc = read_gz(labels_path, &lb, &lblen);
    if (rc) {
        free(im);
        return rc;
    }
    if (imlen < 16 || be32(im) != 0x00000803) {
        rc = ls_err(LS_EFORMAT, "%s: not an idx3 uint8 image file (magic %08x, want 00000803)", images_path,
                    imlen >= 4 ? be32(im) : 0);
        goto done;
    }
    if (lblen < 8 || be32(lb) != 0x00000801) {
        rc = ls_err(LS_EFORMAT, "%s: not an idx1 uint8 label file (magic %08x, want 00000801)", labels_path,
                    lblen >= 4 ? be32(lb) : 0);
        goto done;
    }
    uint32_t n = be32(im + 4), h = be32(im + 8), w = be32(im + 12), nl = be32(lb + 4);
    if (h == 0 || w == 0 || h > 4096 || w > 4096 || n == 0) {
        rc = ls_err(LS_EFORMAT, "%s: implausible dims %u x %u x %u", images_path, n, h, w);
        goto done;
    }
    if ((uint64_t)imlen != 16 + (uint64_t)n * h * w) {
        rc = ls_err(LS_EFORMAT, "%s: %zu bytes, header says %u images of %ux%u (%llu bytes): truncated or padded",
                    images_path, imlen, n, h, w, (unsigned long long)(16 + (uint64_t)n * h * w));
        goto done;
    }
    if ((uint64_t)lblen != 8 + (uint64_t)nl) {
        rc = ls_err(LS_EFORMAT, "%s: %zu bytes, header says %u labels: truncated or padded", labels_path, lblen, nl);
        goto done;
    }
    if (nl != n) {
        rc = ls_err(LS_EFORMAT, "%s has %u images but %s has %u labels", images_path, n, labels_path, nl);
        goto done;
    }
    int k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (lb[8 + i] > 63) {
            rc = ls_err(LS_EFORMAT, "%s: label %u of row %u is out of range (max 63)", labels_path, lb[8 + i], i);
            goto done;
        }
        if (lb[8 + i] + 1 > k) k = lb[8 + i] + 1;
    }
    int64_t use = (max_n > 0 && max_n < (int64_t)n) ? max_n : (int64_t)n;
    rc = ls_steal_data_alloc(out, use, (int)(h * w), k);
    if (rc) goto done;
    out->c = 1;
    out->h = (int)h;
    out->w = (int)w;
    for (int64_t i = 0; i < use * (int64_t)h * w; i++) out->x[i] = im[16 + i] * (1.0f / 255.0f);
    for (int64_t i = 0; i < use; i++) out->y[i] = lb[8 + i];
    snprintf(out->name, sizeof out->name, "idx");
done:
    free(im);
    free(lb);
    return rc;
}

/* ---------------------------------------------------------------- CSV */

/* Splits a line in place at commas (or semicolons/tabs); returns the field count. */
static int split_fields(char *line, char **f, int max) {
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '"') p++;
        if (n < max) f[n] = p;
        n++;
        char *e = p;
        while (*e && *e != ',' && *e != ';' && *e != '\t' && *e != '\n' && *e != '\r') e++;
        char sep = *e;
        char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '"')) t--;
        *t = '\0';
        if (sep != ',' && sep != ';' && sep != '\t') break;
        p = e + 1;
    }
    return n;
}

static int parse_num(const char *s, double *v) {
    char *end;
    if (!*s) return 0;
    errno = 0;
    *v = strtod(s, &end);
    return *end == '\0' && errno == 0;
}

int ls_steal_csv_load(const char *path, ls_steal_data *out) {
    memset(out, 0, sizeof *out);
    /* Gzipped tables (scikit-learn's digits.csv.gz, say) are read through zlib like idx files. */
    unsigned char *raw = NULL;
    size_t len = 0;
    LS_TRY(read_gz(path, &raw, &len));
    char *text = realloc(raw, len + 1);
    if (!text) {
        free(raw);
        return ls_err(LS_ENOMEM, "%s: out of memory", path);
    }
    text[len] = '\0';
    /* First pass: count rows and columns, detect a header. */
    int ncol = -1, rows = 0, header = 0, rc = LS_OK;
    enum { MAXF = 1 << 16 };
    char **f = malloc(sizeof(char *) * MAXF);
    double *lab = NULL;
    if (!f) {
        free(text);
        return ls_err(LS_ENOMEM, "%s: out of memory", path);
    }
    char *p = text;
    int lineno = 0;
    /* Parse twice: pass 0 counts, pass 1 fills. Work on a copy per line. */
    char *copy = malloc(len + 1);
    if (!copy) {
        rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int pass = 0; pass < 2; pass++) {
        p = text;
        lineno = 0;
        int r = 0;
        while (*p) {
            char *nl = strchr(p, '\n');
            size_t ll = nl ? (size_t)(nl - p) : strlen(p);
            memcpy(copy, p, ll);
            copy[ll] = '\0';
            p = nl ? nl + 1 : p + ll;
            lineno++;
            char *s = copy;
            while (*s == ' ' || *s == '\r' || *s == '\t') s++;
            if (*s == '\0' || *s == '#') continue;
            int nf = split_fields(s, f, MAXF);
            if (nf > MAXF) {
                rc = ls_err(LS_EFORMAT, "%s:%d: more than %d columns", path, lineno, MAXF);
                goto done;
            }
            if (pass == 0 && ncol < 0) {
                /* One header line, detected by a field that is not a number. Its field count
                 * need not match the data's: scikit-learn's tables put "rows,features,class
                 * names" there. The first data row sets the column count. */
                double v;
                int numeric = 1;
                for (int i = 0; i < nf && i < MAXF; i++) numeric &= parse_num(f[i], &v);
                if (!numeric && !header) {
                    header = lineno;
                    continue;
                }
                ncol = nf;
                if (ncol < 2) {
                    rc = ls_err(LS_EFORMAT, "%s:%d: need at least one feature and a label column", path, lineno);
                    goto done;
                }
            } else if (lineno == header) {
                continue;
            }
            if (nf != ncol) {
                rc = ls_err(LS_EFORMAT, "%s:%d: %d fields, expected %d", path, lineno, nf, ncol);
                goto done;
            }
            if (pass == 1) {
                for (int i = 0; i < nf; i++) {
                    double v;
                    if (!parse_num(f[i], &v) || !isfinite(v)) {
                        rc = ls_err(LS_EFORMAT, "%s:%d: field %d ('%.20s') is not a finite number", path, lineno, i + 1,
                                    f[i]);
                        goto done;
                    }
                    if (i < nf - 1)
                        out->x[(size_t)r * (size_t)(ncol - 1) + (size_t)i] = (float)v;
                    else
                        lab[r] = v;
                }
            }
            r++;
        }
        if (pass == 0) {
            rows = r;
            if (rows < 2) {
                rc = ls_err(LS_EFORMAT, "%s: fewer than 2 data rows", path);
                goto done;
            }
            rc = ls_steal_data_alloc(out, rows, ncol - 1, 1);
            if (rc) goto done;
            lab = malloc(sizeof(double) * (size_t)rows);
            if (!lab) {
                rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
                goto done;
            }
        }
    }
    /* Remap label values to 0..k-1 in sorted order. */
    double *u = malloc(sizeof(double) * (size_t)rows);
    if (!u) {
        rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    memcpy(u, lab, sizeof(double) * (size_t)rows);
    ls_sort_doubles(u, (size_t)rows);
    int k = 0;
    for (int i = 0; i < rows; i++)
        if (i == 0 || u[i] != u[k - 1]) u[k++] = u[i];
    if (k < 2 || k > 64) {
        free(u);
        rc = ls_err(LS_EFORMAT, "%s: label column has %d distinct values (need 2..64)", path, k);
        goto done;
    }
    for (int i = 0; i < rows; i++) {
        int lo = 0, hi = k - 1;
        while (lo < hi) {
            int m = (lo + hi) / 2;
            if (u[m] < lab[i])
                lo = m + 1;
            else
                hi = m;
        }
        out->y[i] = lo;
    }
    free(u);
    out->k = k;
    snprintf(out->name, sizeof out->name, "%s", path);
done:
    free(copy);
    free(f);
    free(lab);
    free(text);
    if (rc) ls_steal_data_free(out);
    return rc;
}

int ls_steal_csv_write(const char *path, const ls_steal_data *d) {
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, path));
    FILE *fp = af.fp;
    for (int j = 0; j < d->d; j++) fprintf(fp, "f%d,", j);
    fprintf(fp, "label\n");
    for (int64_t i = 0; i < d->n; i++) {
        for (int j = 0; j < d->d; j++) fprintf(fp, "%.6g,", d->x[i * d->d + j]);
        fprintf(fp, "%d\n", d->y[i]);
    }
    if (ferror(fp)) {
        ls_atomic_abort(&af);
        return ls_err(LS_EIO, "%s: write failed", path);
    }
    return ls_atomic_commit(&af);
}

/* ---------------------------------------------------------------- split, normalise */

int ls_scaler_dup(const float *mn, const float *mx, int d, float **omin, float **omax) {
    *omin = *omax = NULL;
    if (!mn || !mx) return LS_OK;
    *omin = malloc(sizeof(float) * (size_t)d);
    *omax = malloc(sizeof(float) * (size_t)d);
    if (!*omin || !*omax) {
        free(*omin), free(*omax);
        *omin = *omax = NULL;
        return LS_ENOMEM;
    }
    memcpy(*omin, mn, sizeof(float) * (size_t)d);
    memcpy(*omax, mx, sizeof(float) * (size_t)d);
    return LS_OK;
}

static int take_rows(const ls_steal_data *src, const int *idx, int64_t n, ls_steal_data *out) {
    LS_TRY(ls_steal_data_alloc(out, n, src->d, src->k));
    out->c = src->c;
    out->h = src->h;
    out->w = src->w;
    out->lo = src->lo;
    out->hi = src->hi;
    memcpy(out->name, src->name, sizeof out->name);
    if (ls_scaler_dup(src->raw_min, src->raw_max, src->d, &out->raw_min, &out->raw_max)) {
        ls_steal_data_free(out);
        return ls_err(LS_ENOMEM, "dataset: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        memcpy(out->x + i * src->d, src->x + (int64_t)idx[i] * src->d, sizeof(float) * (size_t)src->d);
        out->y[i] = src->y[idx[i]];
    }
    return LS_OK;
}

int ls_steal_data_split(const ls_steal_data *all, double test_frac, uint64_t seed, ls_steal_data *train,
                        ls_steal_data *test) {
    if (!(test_frac > 0 && test_frac < 1)) return ls_err(LS_EINVAL, "split: test fraction %g not in (0,1)", test_frac);
    int64_t nt = (int64_t)llround(test_frac * (double)all->n);
    if (nt < 1 || nt >= all->n) return ls_err(LS_EINVAL, "split: %lld rows too few to split", (long long)all->n);
    int *idx = malloc(sizeof(int) * (size_t)all->n);
    if (!idx) return ls_err(LS_ENOMEM, "split: out of memory");
    for (int64_t i = 0; i < all->n; i++) idx[i] = (int)i;
    ls_rng r;
    ls_rng_seed(&r, seed);
    ls_rng_shuffle_int(&r, idx, (size_t)all->n);
    int rc = take_rows(all, idx, all->n - nt, train);
    if (!rc) rc = take_rows(all, idx + (all->n - nt), nt, test);
    if (rc) ls_steal_data_free(train);
    free(idx);
    return rc;
}

int ls_steal_data_subset(const ls_steal_data *src, int64_t n, uint64_t seed, ls_steal_data *out) {
    if (n <= 0 || n > src->n) n = src->n;
    int *idx = malloc(sizeof(int) * (size_t)(src->n ? src->n : 1));
    if (!idx) return ls_err(LS_ENOMEM, "subset: out of memory");
    for (int64_t i = 0; i < src->n; i++) idx[i] = (int)i;
    ls_rng r;
    ls_rng_seed(&r, seed);
    if (n < src->n) ls_rng_shuffle_int(&r, idx, (size_t)src->n);
    int rc = take_rows(src, idx, n, out);
    free(idx);
    return rc;
}

void ls_steal_scale_rows(const float *raw_min, const float *raw_max, int d, float lo, float hi, float *x, int64_t n) {
    for (int j = 0; j < d; j++) {
        float mn = raw_min[j], mx = raw_max[j];
        float scale = mx > mn ? (hi - lo) / (mx - mn) : 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float *v = &x[i * d + j];
            float t = scale > 0 ? lo + (*v - mn) * scale : 0.5f * (lo + hi);
            *v = t < lo ? lo : t > hi ? hi : t;
        }
    }
}

void ls_steal_unscale_rows(const float *raw_min, const float *raw_max, int d, float lo, float hi, float *x, int64_t n) {
    for (int j = 0; j < d; j++) {
        double mn = raw_min[j], span = (double)raw_max[j] - raw_min[j];
        for (int64_t i = 0; i < n; i++) {
            float *v = &x[i * d + j];
            *v = span > 0 ? (float)(mn + ((double)*v - lo) * span / ((double)hi - lo)) : (float)mn;
        }
    }
}

int ls_steal_data_normalize(ls_steal_data *train, ls_steal_data *test, float lo, float hi) {
    int d = train->d;
    ls_steal_data *sets[2] = {train, test};
    float *mm[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int s = 0; s < 2; s++)
        if (sets[s]) {
            mm[s][0] = malloc(sizeof(float) * (size_t)d);
            mm[s][1] = malloc(sizeof(float) * (size_t)d);
            if (!mm[s][0] || !mm[s][1]) {
                for (int t = 0; t < 2; t++) free(mm[t][0]), free(mm[t][1]);
                return ls_err(LS_ENOMEM, "normalise: out of memory");
            }
        }
    float *mn = mm[0][0], *mx = mm[0][1];
    for (int j = 0; j < d; j++) {
        mn[j] = INFINITY, mx[j] = -INFINITY;
        for (int64_t i = 0; i < train->n; i++) {
            float v = train->x[i * d + j];
            if (v < mn[j]) mn[j] = v;
            if (v > mx[j]) mx[j] = v;
        }
    }
    for (int s = 0; s < 2; s++) {
        if (!sets[s]) continue;
        ls_steal_scale_rows(mn, mx, d, lo, hi, sets[s]->x, sets[s]->n);
        memcpy(mm[s][0], mn, sizeof(float) * (size_t)d);
        memcpy(mm[s][1], mx, sizeof(float) * (size_t)d);
        free(sets[s]->raw_min);
        free(sets[s]->raw_max);
        sets[s]->raw_min = mm[s][0];
        sets[s]->raw_max = mm[s][1];
        sets[s]->lo = lo;
        sets[s]->hi = hi;
    }
    return LS_OK;
}

/* ---------------------------------------------------------------- synthetic tables */

int64_t ls_steal_table_max_rows(int d) {
    int64_t n = ls_mem_max_items(4.0 * d + 4);
    return n < LS_TABLE_MAX_ROWS ? n : LS_TABLE_MAX_ROWS;
}

int ls_steal_make_table(const char *kind, int64_t n, int d, int k, uint64_t seed, ls_steal_data *out) {
    if (strcmp(kind, "blobs") && strcmp(kind, "rings")) /* before the rows are allocated */
        return ls_err(LS_EINVAL, "make_table: unknown kind '%s' (blobs, rings)", kind);
    /* bounds keep n·d and 2k (the blobs' clusters) in range, and the rows in memory; named by
     * the flags of `llmsys victim make-data` */
    if (d < 2 || d > LS_TABLE_MAX_DIM)
        return ls_err(LS_EINVAL, "--features must be in [2, %d], got %d", LS_TABLE_MAX_DIM, d);
    if (k < 2 || k > LS_TABLE_MAX_DIM)
        return ls_err(LS_EINVAL, "--classes must be in [2, %d], got %d", LS_TABLE_MAX_DIM, k);
    if (n < 2 || n > ls_steal_table_max_rows(d))
        return ls_err(LS_EINVAL, "--n must be in [2, %lld] for %d features here, got %lld",
                      (long long)ls_steal_table_max_rows(d), d, (long long)n);
    LS_TRY(ls_steal_data_alloc(out, n, d, k));
    ls_rng r;
    ls_rng_seed(&r, seed);
    if (!strcmp(kind, "blobs")) {
        int inf = d < 8 ? d : 8, red = (d - inf) < 4 ? d - inf : 4;
        int ncl = 2 * k;
        float *cent = malloc(sizeof(float) * (size_t)ncl * (size_t)inf);
        float *mix = malloc(sizeof(float) * (size_t)inf * (size_t)(red > 0 ? red : 1));
        if (!cent || !mix) {
            free(cent);
            free(mix);
            ls_steal_data_free(out);
            return ls_err(LS_ENOMEM, "make_table: out of memory");
        }
        /* Cluster centres at random vertices of a hypercube of side 2 (class_sep 1). */
        for (int c = 0; c < ncl * inf; c++) cent[c] = (ls_rng_below(&r, 2) ? 1.0f : -1.0f);
        for (int i = 0; i < inf * red; i++) mix[i] = 2.0f * ls_rng_uniform(&r) - 1.0f;
        for (int64_t i = 0; i < n; i++) {
            int cl = (int)ls_rng_below(&r, (uint64_t)ncl);
            float *x = out->x + i * d;
            for (int j = 0; j < inf; j++) x[j] = cent[cl * inf + j] + 0.6f * ls_rng_normal(&r);
            for (int j = 0; j < red; j++) {
                float s = 0;
                for (int t = 0; t < inf; t++) s += mix[t * red + j] * x[t];
                x[inf + j] = s;
            }
            for (int j = inf + red; j < d; j++) x[j] = ls_rng_normal(&r);
            out->y[i] = cl % k;
            if (ls_rng_uniform(&r) < 0.03f) out->y[i] = (int32_t)ls_rng_below(&r, (uint64_t)k);
        }
        free(cent);
        free(mix);
    } else if (!strcmp(kind, "rings")) {
        int inf = d < 6 ? d : 6;
        /* Quantiles of chi-square(inf) radius, estimated from a pilot sample. */
        enum { PILOT = 20000 };
        double *rad = malloc(sizeof(double) * PILOT);
        if (!rad) {
            ls_steal_data_free(out);
            return ls_err(LS_ENOMEM, "make_table: out of memory");
        }
        ls_rng pr = ls_rng_split(&r, 99);
        for (int i = 0; i < PILOT; i++) {
            double s = 0;
            for (int j = 0; j < inf; j++) {
                double z = ls_rng_normal(&pr);
                s += z * z;
            }
            rad[i] = s;
        }
        ls_sort_doubles(rad, PILOT);
        for (int64_t i = 0; i < n; i++) {
            float *x = out->x + i * d;
            double s = 0;
            for (int j = 0; j < inf; j++) {
                x[j] = ls_rng_normal(&r);
                s += (double)x[j] * x[j];
            }
            for (int j = inf; j < d; j++) x[j] = ls_rng_normal(&r);
            int c = 0;
            while (c < k - 1 && s > rad[(size_t)((c + 1) * (double)PILOT / k)]) c++;
            out->y[i] = c;
        }
        free(rad);
    }
    snprintf(out->name, sizeof out->name, "%s", kind);
    return LS_OK;
}

/* ---------------------------------------------------------------- dataset specs */

int ls_steal_dataset_open(const char *spec, int64_t max_train, ls_steal_data *train, ls_steal_data *test) {
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (ls_steal_task_index(spec) >= 0) return ls_steal_task_split(spec, max_train, train, test);
    if (!strncmp(spec, "fmnist", 6) && (spec[6] == '\0' || spec[6] == ':')) {
        const char *dir = spec[6] == ':' ? spec + 7 : FMNIST_DIR;
        char a[1024], b[1024];
        ls_steal_data full;
        snprintf(a, sizeof a, "%s/train-images-idx3-ubyte.gz", dir);
        snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte.gz", dir);
        LS_TRY(ls_steal_idx_load(a, b, 0, &full));
        int rc = ls_steal_data_subset(&full, max_train, 7, train);
        ls_steal_data_free(&full);
        if (rc) return rc;
        snprintf(a, sizeof a, "%s/t10k-images-idx3-ubyte.gz", dir);
        snprintf(b, sizeof b, "%s/t10k-labels-idx1-ubyte.gz", dir);
        rc = ls_steal_idx_load(a, b, 0, test);
        if (!rc && (test->d != train->d || test->k > train->k))
            rc = ls_err(LS_EFORMAT, "%s: test images differ in shape from train", dir);
        if (rc) {
            ls_steal_data_free(train);
            ls_steal_data_free(test);
            return rc;
        }
        test->k = train->k;
        /* name what the user gave: the directory of a custom copy */
        snprintf(train->name, sizeof train->name, "%s", spec[6] == ':' ? dir : "fmnist");
        snprintf(test->name, sizeof test->name, "%s", spec[6] == ':' ? dir : "fmnist");
        return LS_OK;
    }
    /* Real tables shipped by Debian's python3-sklearn (installed by scripts/setup.sh): UCI
     * wine (178 x 13, 3 classes), Wisconsin breast cancer (569 x 30, 2) and the 8x8 digits
     * (1797 x 64, 10). Their first line is scikit-learn's "rows,features,names" header. */
    static const struct {
        const char *name, *file;
        int h, w; /* declared image shape, 0 for a plain table */
    } real[] = {
        {"wine", "wine_data.csv", 0, 0}, {"cancer", "breast_cancer.csv", 0, 0}, {"digits", "digits.csv.gz", 8, 8}};
    int ri = -1;
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++)
        if (!strcmp(spec, real[i].name)) ri = (int)i;
    ls_steal_data all;
    if (ri >= 0) {
        char tpath[512];
        snprintf(tpath, sizeof tpath, "%s/%s", SKLEARN_DATA_DIR, real[ri].file);
        int rc = ls_steal_csv_load(tpath, &all);
        if (rc == LS_ENOTFOUND)
            return ls_err(rc, "%s: not found; the '%s' table comes from Debian's python3-sklearn (scripts/setup.sh)",
                          tpath, real[ri].name);
        if (rc) return rc;
    } else if (!strcmp(spec, "blobs")) {
        LS_TRY(ls_steal_make_table("blobs", 12000, 20, 5, 11, &all));
    } else if (!strcmp(spec, "rings")) {
        LS_TRY(ls_steal_make_table("rings", 12000, 10, 4, 12, &all));
    } else {
        LS_TRY(ls_steal_csv_load(spec, &all));
    }
    ls_steal_data tr;
    int rc = ls_steal_data_split(&all, 0.2, 1234, &tr, test);
    char name[sizeof all.name];
    memcpy(name, all.name, sizeof name);
    ls_steal_data_free(&all);
    if (rc) return rc;
    /* Statistics of the whole train split, so every max_train sees the same input space. */
    rc = ls_steal_data_normalize(&tr, test, 0.0f, 1.0f);
    if (!rc) rc = ls_steal_data_subset(&tr, max_train, 7, train);
    ls_steal_data_free(&tr);
    if (rc) {
        ls_steal_data_free(test);
        return rc;
    }
    if (ri >= 0) snprintf(name, sizeof name, "%s", real[ri].name);
    else if (strcmp(spec, "blobs") && strcmp(spec, "rings")) snprintf(name, sizeof name, "%s", spec); /* the path */
    snprintf(train->name, sizeof train->name, "%s", name);
    snprintf(test->name, sizeof test->name, "%s", name);
    if (ri >= 0 && real[ri].h > 0 && real[ri].h * real[ri].w == train->d) {
        /* The digits are 8x8 images: declare that shape, as an image API would. */
        train->h = test->h = real[ri].h;
        train->w = test->w = real[ri].w;
    }
    return LS_OK;
}

int ls_steal_dataset_is_named(const char *spec) {
    static const char *named[] = {"blobs", "rings", "wine", "cancer", "digits"};
    if (!strncmp(spec, "fmnist", 6) && (spec[6] == '\0' || spec[6] == ':')) return 1;
    if (ls_steal_task_index(spec) >= 0) return 1;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(spec, named[i])) return 1;
    return 0;
}

int ls_steal_testset_open(const char *spec, double test_split, ls_steal_data *train, ls_steal_data *test, char *desc,
                          size_t n) {
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (ls_steal_dataset_is_named(spec)) {
        if (test_split != 0)
            return ls_err(LS_EINVAL, "a test split applies to CSV files; %s has its own held-out test split", spec);
        LS_TRY(ls_steal_dataset_open(spec, 0, train, test));
        snprintf(desc, n, "the held-out test split of %s (%lld rows)", test->name, (long long)test->n);
        return LS_OK;
    }
    if (test_split < 0 || test_split >= 1)
        return ls_err(LS_EINVAL, "test split %g is not a fraction in (0, 1)", test_split);
    ls_steal_data all;
    LS_TRY(ls_steal_csv_load(spec, &all));
    if (test_split == 0) {
        /* the file is the test set: every row, in its own units */
        *test = all;
        train->d = all.d, train->k = all.k, train->c = all.c, train->h = all.h, train->w = all.w;
        snprintf(train->name, sizeof train->name, "%s", all.name);
        snprintf(desc, n, "all %lld rows of %s", (long long)test->n, spec);
        return LS_OK;
    }
    int rc = ls_steal_data_split(&all, test_split, 1234, train, test);
    int64_t total = all.n;
    ls_steal_data_free(&all);
    if (!rc) rc = ls_steal_data_normalize(train, test, 0.0f, 1.0f);
    if (rc) {
        ls_steal_data_free(train);
        ls_steal_data_free(test);
        return rc;
    }
    snprintf(desc, n, "a %g test split of %s (%lld of %lld rows, seed 1234, as victim train splits at 0.2)", test_split,
             spec, (long long)test->n, (long long)total);
    return LS_OK;
}
