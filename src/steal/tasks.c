/* tasks.c - the held-out tasks of the extraction audit: reproducible, seeded image tasks
 * (glyphs rendered from the installed fonts, procedural shapes, procedural textures, a
 * transformed Fashion-MNIST) and tables (moons, checker, skewed), none of which the attack was
 * designed on; and writing a task to a directory (idx images or CSV) for `victim train`. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

#ifdef LLMSYS_HAVE_FREETYPE
#include <ft2build.h>
#include FT_FREETYPE_H
#endif

#define IMG 28
#define FONT_DIR "/usr/share/fonts/truetype/dejavu"
#define TASK_IMAGES 25000 /* 20 000 train + 5 000 test */
#define TASK_ROWS 12000

static const struct {
    const char *name;
    int image; /* 1: 1x28x28 images, 10 classes; 0: a table */
    const char *what;
} tasks[] = {
    {"glyphs", 1, "letters A-J rendered from the installed DejaVu fonts, rotated, scaled, sheared, shifted"},
    {"shapes", 1, "ten procedural shapes (disk, ring, square, frame, triangle, plus, cross, star, crescent, two dots)"},
    {"textures", 1, "ten full-frame procedural textures (stripes in four directions, checks, dots, rings, ...)"},
    {"fmnist-inv", 1, "Fashion-MNIST inverted (bright background), rotated a quarter turn, gamma 0.5"},
    {"moons", 0, "three interleaved arcs in 2 dims, rotated into 10 with 4 noise dims (3 classes)"},
    {"checker", 0, "a 4x4 checkerboard of 4 classes over 2 dims, plus 6 noise dims"},
    {"skewed", 0, "log-normal amounts, counts and flags, 3 imbalanced classes (60/30/10 %) from a logistic rule"},
};
#define NTASKS ((int)(sizeof tasks / sizeof tasks[0]))

int ls_steal_task_index(const char *name) {
    for (int i = 0; i < NTASKS; i++)
        if (!strcmp(name, tasks[i].name)) return i;
    return -1;
}
int ls_steal_task_check(const char *name) {
    if (ls_steal_task_index(name) >= 0) return LS_OK;
    char known[256] = "";
    for (int i = 0; i < NTASKS; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", tasks[i].name);
    return ls_err(LS_EINVAL, "unknown task '%s' (%s)", name, known);
}
int ls_steal_task_count(void) { return NTASKS; }
const char *ls_steal_task_name(int i) { return i >= 0 && i < NTASKS ? tasks[i].name : NULL; }
int ls_steal_task_is_image(int i) { return i >= 0 && i < NTASKS && tasks[i].image; }
const char *ls_steal_task_what(int i) { return i >= 0 && i < NTASKS ? tasks[i].what : NULL; }

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }
static float unif(ls_rng *r, float a, float b) { return a + (b - a) * ls_rng_uniform(r); }

/* Quantises a frame to 8-bit levels, as a stored idx image would be (so a task written to a
 * directory loads back bit for bit). */
static void quantise(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = (float)(int)lrintf(clampf(x[i], 0, 1) * 255.0f) * (1.0f / 255.0f);
}

/* ---------------------------------------------------------------- shapes */

/* Whether (u, v) in the shape's own frame (unit size) lies inside shape s. */
static int inside_poly(const float *px, const float *py, int n, float u, float v) {
    int in = 0;
    for (int i = 0, j = n - 1; i < n; j = i++)
        if ((py[i] > v) != (py[j] > v) && u < (px[j] - px[i]) * (v - py[i]) / (py[j] - py[i]) + px[i]) in = !in;
    return in;
}

static int inside_shape(int s, float u, float v, float t) {
    float r2 = u * u + v * v;
    switch (s) {
    case 0: return r2 < 1.0f; /* disk */
    case 1: return r2 < 1.0f && r2 > (1 - t) * (1 - t); /* ring */
    case 2: return fabsf(u) < 0.85f && fabsf(v) < 0.85f; /* square */
    case 3: return fabsf(u) < 0.9f && fabsf(v) < 0.9f && (fabsf(u) > 0.9f - t || fabsf(v) > 0.9f - t); /* frame */
    case 4: { /* triangle */
        float px[3] = {0, 0.95f, -0.95f}, py[3] = {-1, 0.75f, 0.75f};
        return inside_poly(px, py, 3, u, v);
    }
    case 5: return (fabsf(u) < t * 0.6f && fabsf(v) < 1) || (fabsf(v) < t * 0.6f && fabsf(u) < 1); /* plus */
    case 6: { /* cross (x) */
        float a = (u + v) * 0.7071f, b = (u - v) * 0.7071f;
        return (fabsf(a) < t * 0.6f && fabsf(b) < 1) || (fabsf(b) < t * 0.6f && fabsf(a) < 1);
    }
    case 7: { /* five-pointed star */
        float px[10], py[10];
        for (int i = 0; i < 10; i++) {
            float rr = i % 2 ? 0.42f : 1.0f, a = (float)i * 3.14159265f / 5 - 1.5707963f;
            px[i] = rr * cosf(a), py[i] = rr * sinf(a);
        }
        return inside_poly(px, py, 10, u, v);
    }
    case 8: return r2 < 1.0f && (u - 0.45f) * (u - 0.45f) + v * v > 0.6f; /* crescent */
    default: /* two dots */
        return (u - 0.5f) * (u - 0.5f) + v * v < 0.2f || (u + 0.5f) * (u + 0.5f) + v * v < 0.2f;
    }
}

static void render_shape(ls_rng *r, int cls, float *img) {
    float bg = unif(r, 0.0f, 0.25f), fg = unif(r, 0.55f, 1.0f), scale = unif(r, 6.0f, 12.0f);
    float cx = 13.5f + unif(r, -4, 4), cy = 13.5f + unif(r, -4, 4), ang = unif(r, 0, 6.2831853f);
    if (cls == 5 || cls == 6) ang = unif(r, -0.35f, 0.35f); /* a plus turned 45 degrees is a cross */
    float t = unif(r, 0.25f, 0.45f), ca = cosf(ang), sa = sinf(ang), noise = unif(r, 0.0f, 0.08f);
    for (int y = 0; y < IMG; y++)
        for (int x = 0; x < IMG; x++) {
            int hit = 0;
            for (int sy = 0; sy < 2; sy++)
                for (int sx = 0; sx < 2; sx++) {
                    float dx = ((float)x + 0.25f + 0.5f * sx - cx) / scale, dy = ((float)y + 0.25f + 0.5f * sy - cy) / scale;
                    hit += inside_shape(cls, ca * dx + sa * dy, -sa * dx + ca * dy, t);
                }
            img[y * IMG + x] = bg + (fg - bg) * (float)hit / 4.0f + noise * ls_rng_normal(r);
        }
}

/* ---------------------------------------------------------------- textures */

static void render_texture(ls_rng *r, int cls, float *img) {
    float f = unif(r, 0.35f, 0.9f), ph = unif(r, 0, 6.2831853f), c = unif(r, 0.25f, 0.5f), m = unif(r, 0.3f, 0.7f);
    float jit = unif(r, -0.25f, 0.25f), cx = 13.5f + unif(r, -6, 6), cy = 13.5f + unif(r, -6, 6);
    float g[5][5]; /* smooth random field for the "blotches" class */
    for (int i = 0; i < 25; i++) g[i / 5][i % 5] = ls_rng_normal(r);
    for (int y = 0; y < IMG; y++)
        for (int x = 0; x < IMG; x++) {
            float u = (float)x, v = (float)y, s;
            switch (cls) {
            case 0: s = sinf(f * v + ph + jit * u * 0.1f); break;           /* horizontal stripes */
            case 1: s = sinf(f * u + ph + jit * v * 0.1f); break;           /* vertical stripes */
            case 2: s = sinf(f * 0.7071f * (u + v) + ph); break;            /* diagonal / */
            case 3: s = sinf(f * 0.7071f * (u - v) + ph); break;            /* diagonal \ */
            case 4: s = sinf(f * 0.8f * u + ph) * sinf(f * 0.8f * v + ph) > 0 ? 1.0f : -1.0f; break; /* checks */
            case 5: s = sinf(f * 1.2f * u + ph) * sinf(f * 1.2f * v + ph) > 0.5f ? 1.0f : -0.6f; break; /* dots */
            case 6: s = sinf(f * sqrtf((u - cx) * (u - cx) + (v - cy) * (v - cy)) + ph); break; /* rings */
            case 7: s = sinf(3.0f * atan2f(v - cy, u - cx) + 0.3f * f * sqrtf((u - cx) * (u - cx) + (v - cy) * (v - cy)) + ph); break; /* spiral */
            case 8: { /* blotches: a bilinear 5x5 random field */
                float gu = u / 27.0f * 4, gv = v / 27.0f * 4;
                int iu = gu >= 4 ? 3 : (int)gu, iv = gv >= 4 ? 3 : (int)gv;
                float a = gu - iu, b = gv - iv;
                s = (1 - a) * (1 - b) * g[iv][iu] + a * (1 - b) * g[iv][iu + 1] + (1 - a) * b * g[iv + 1][iu] +
                    a * b * g[iv + 1][iu + 1];
                s *= 0.8f;
                break;
            }
            default: s = (ls_rng_uniform(r) < 0.5f ? -1.0f : 1.0f) * 0.8f; break; /* salt and pepper */
            }
            img[y * IMG + x] = m + c * s + 0.05f * ls_rng_normal(r);
        }
}

/* ---------------------------------------------------------------- glyphs */

#ifdef LLMSYS_HAVE_FREETYPE
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The .ttf files of FONT_DIR, sorted by name (the task depends on which fonts are installed;
 * Debian's fonts-dejavu-core and -extra give 22). */
static int list_fonts(char ***out, int *n) {
    DIR *d = opendir(FONT_DIR);
    if (!d) return ls_err(LS_ENOTFOUND, "%s: no fonts (the glyphs task renders Debian's fonts-dejavu)", FONT_DIR);
    char **names = NULL;
    int cnt = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".ttf")) continue;
        char **nn = realloc(names, sizeof(char *) * (size_t)(cnt + 1));
        if (!nn) break;
        names = nn;
        names[cnt] = malloc(l + sizeof FONT_DIR + 2);
        if (!names[cnt]) break;
        snprintf(names[cnt], l + sizeof FONT_DIR + 2, "%s/%s", FONT_DIR, e->d_name);
        cnt++;
    }
    closedir(d);
    if (!cnt) return ls_err(LS_ENOTFOUND, "%s: no .ttf fonts", FONT_DIR);
    qsort(names, (size_t)cnt, sizeof(char *), cmp_str);
    *out = names, *n = cnt;
    return LS_OK;
}

static int make_glyphs(ls_rng *r, ls_steal_data *o) {
    char **fonts = NULL;
    int nf = 0;
    LS_TRY(list_fonts(&fonts, &nf));
    FT_Library lib = NULL;
    FT_Face *faces = calloc((size_t)nf, sizeof(FT_Face));
    int rc = faces && !FT_Init_FreeType(&lib) ? LS_OK : ls_err(LS_EIO, "freetype: cannot initialise");
    for (int i = 0; !rc && i < nf; i++)
        if (FT_New_Face(lib, fonts[i], 0, &faces[i])) rc = ls_err(LS_EFORMAT, "%s: freetype cannot open it", fonts[i]);
    for (int64_t i = 0; !rc && i < o->n; i++) {
        int cls = (int)(i % 10);
        FT_Face f = faces[ls_rng_below(r, (uint64_t)nf)];
        float ang = unif(r, -0.25f, 0.25f), sh = unif(r, -0.2f, 0.2f), sz = unif(r, 14, 22);
        FT_Matrix m = {(FT_Fixed)(cosf(ang) * 65536), (FT_Fixed)((-sinf(ang) + sh) * 65536),
                       (FT_Fixed)(sinf(ang) * 65536), (FT_Fixed)(cosf(ang) * 65536)};
        FT_Set_Pixel_Sizes(f, 0, (FT_UInt)sz);
        FT_Set_Transform(f, &m, NULL);
        if (FT_Load_Char(f, (FT_ULong)('A' + cls), FT_LOAD_RENDER)) {
            rc = ls_err(LS_EFORMAT, "freetype: cannot render '%c'", 'A' + cls);
            break;
        }
        FT_Bitmap *b = &f->glyph->bitmap;
        float *img = o->x + i * IMG * IMG, fg = unif(r, 0.6f, 1.0f), bg = unif(r, 0.0f, 0.15f);
        int ox = (IMG - (int)b->width) / 2 + (int)unif(r, -3, 4), oy = (IMG - (int)b->rows) / 2 + (int)unif(r, -3, 4);
        for (int p = 0; p < IMG * IMG; p++) img[p] = bg;
        for (int y = 0; y < (int)b->rows; y++)
            for (int x = 0; x < (int)b->width; x++) {
                int X = ox + x, Y = oy + y;
                if (X < 0 || Y < 0 || X >= IMG || Y >= IMG) continue;
                float a = b->buffer[y * b->pitch + x] / 255.0f;
                img[Y * IMG + X] = bg + (fg - bg) * a;
            }
        for (int p = 0; p < IMG * IMG; p++) img[p] += 0.03f * ls_rng_normal(r);
        o->y[i] = cls;
    }
    for (int i = 0; i < nf; i++) {
        if (faces && faces[i]) FT_Done_Face(faces[i]);
        free(fonts[i]);
    }
    if (lib) FT_Done_FreeType(lib);
    free(faces);
    free(fonts);
    return rc;
}
#else
static int make_glyphs(ls_rng *r, ls_steal_data *o) {
    (void)r, (void)o;
    return ls_err(LS_EINVAL, "the glyphs task needs FreeType (libfreetype-dev) at build time");
}
#endif

/* Fashion-MNIST with its statistics changed: inverted, a quarter turn, gamma 0.5. */
static int make_fmnist_inv(ls_steal_data *o) {
    ls_steal_data tr, te;
    LS_TRY(ls_steal_dataset_open("fmnist", 20000, &tr, &te));
    for (int64_t i = 0; i < o->n; i++) {
        const ls_steal_data *s = i < 20000 ? &tr : &te;
        int64_t j = i < 20000 ? i % tr.n : (i - 20000) % te.n;
        const float *src = s->x + j * IMG * IMG;
        float *img = o->x + i * IMG * IMG;
        for (int y = 0; y < IMG; y++)
            for (int x = 0; x < IMG; x++) img[y * IMG + x] = sqrtf(1.0f - src[(IMG - 1 - x) * IMG + y]);
        o->y[i] = s->y[j];
    }
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    return LS_OK;
}

/* ---------------------------------------------------------------- tables */

static void make_table(int t, ls_rng *r, ls_steal_data *o) {
    int d = o->d;
    if (!strcmp(tasks[t].name, "moons")) {
        float mix[4][2]; /* 4 redundant dims: noisy linear mixes of the 2 informative ones */
        for (int i = 0; i < 8; i++) mix[i / 2][i % 2] = ls_rng_normal(r);
        for (int64_t i = 0; i < o->n; i++) {
            int c = (int)ls_rng_below(r, 3);
            float a = unif(r, 0, 3.14159265f), *x = o->x + i * d;
            x[0] = cosf(a) + (float)c + 0.12f * ls_rng_normal(r);
            x[1] = (c == 1 ? 0.4f - sinf(a) : sinf(a)) + 0.12f * ls_rng_normal(r);
            for (int j = 2; j < 6; j++) x[j] = mix[j - 2][0] * x[0] + mix[j - 2][1] * x[1] + 0.3f * ls_rng_normal(r);
            for (int j = 6; j < d; j++) x[j] = ls_rng_normal(r);
            o->y[i] = c;
        }
    } else if (!strcmp(tasks[t].name, "checker")) {
        for (int64_t i = 0; i < o->n; i++) {
            float *x = o->x + i * d;
            for (int j = 0; j < d; j++) x[j] = j < 2 ? unif(r, 0, 4) : ls_rng_normal(r);
            int cx = (int)x[0], cy = (int)x[1];
            o->y[i] = (cx + cy) % 2 + 2 * ((cx / 2 + cy / 2) % 2);
        }
    } else { /* skewed: amounts (log-normal), counts (geometric), flags (Bernoulli) */
        float wt[3][12];
        for (int c = 0; c < 3; c++)
            for (int j = 0; j < 12; j++) wt[c][j] = ls_rng_normal(r);
        for (int64_t i = 0; i < o->n; i++) {
            float u = ls_rng_uniform(r);
            int c = u < 0.6f ? 0 : u < 0.9f ? 1 : 2;
            float *x = o->x + i * d;
            for (int j = 0; j < d; j++) {
                float z = ls_rng_normal(r) + 0.9f * wt[c][j % 12];
                if (j % 3 == 0) x[j] = expf(1.2f * z);                         /* amount */
                else if (j % 3 == 1) x[j] = floorf(-logf(ls_rng_uniform(r) + 1e-6f) * expf(0.5f * z)); /* count */
                else x[j] = ls_rng_uniform(r) < 1 / (1 + expf(-z)) ? 1.0f : 0.0f; /* flag */
            }
            o->y[i] = c;
        }
    }
}

/* ---------------------------------------------------------------- entry points */

int ls_steal_make_task(const char *name, uint64_t seed, int64_t n, ls_steal_data *out) {
    LS_TRY(ls_steal_task_check(name));
    int t = ls_steal_task_index(name);
    ls_rng r;
    ls_rng_seed(&r, seed * 0x9E3779B97F4A7C15ull + (uint64_t)t);
    int rc;
    if (tasks[t].image) {
        LS_TRY(ls_steal_data_alloc(out, n > 0 ? n : TASK_IMAGES, IMG * IMG, 10));
        out->h = out->w = IMG;
        if (!strcmp(name, "glyphs"))
            rc = make_glyphs(&r, out);
        else if (!strcmp(name, "fmnist-inv"))
            rc = make_fmnist_inv(out);
        else {
            rc = LS_OK;
            for (int64_t i = 0; i < out->n; i++) {
                int cls = (int)ls_rng_below(&r, 10);
                (name[0] == 's' ? render_shape : render_texture)(&r, cls, out->x + i * IMG * IMG);
                out->y[i] = cls;
            }
        }
        if (!rc) quantise(out->x, (int)(out->n * IMG * IMG));
    } else {
        int d = !strcmp(name, "moons") ? 10 : !strcmp(name, "checker") ? 8 : 15;
        int k = !strcmp(name, "checker") ? 4 : 3;
        LS_TRY(ls_steal_data_alloc(out, n > 0 ? n : TASK_ROWS, d, k));
        make_table(t, &r, out);
        rc = LS_OK;
    }
    if (rc) {
        ls_steal_data_free(out);
        return rc;
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    return LS_OK;
}

int ls_steal_task_split(const char *name, int64_t max_train, ls_steal_data *train, ls_steal_data *test) {
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    ls_steal_data all;
    LS_TRY(ls_steal_make_task(name, 1, 0, &all));
    int rc;
    if (ls_steal_task_is_image(ls_steal_task_index(name))) {
        /* iid rows: the first 20 000 train, the rest test, as the idx files of write_task */
        ls_steal_data tr = all, te = all;
        tr.n = 20000, te.n = all.n - 20000;
        te.x = all.x + tr.n * all.d, te.y = all.y + tr.n;
        rc = ls_steal_data_subset(&tr, max_train, 7, train);
        if (!rc) rc = ls_steal_data_subset(&te, 0, 3, test);
    } else {
        ls_steal_data tr;
        rc = ls_steal_data_split(&all, 0.2, 1234, &tr, test);
        if (!rc) rc = ls_steal_data_normalize(&tr, test, 0.0f, 1.0f);
        if (!rc) rc = ls_steal_data_subset(&tr, max_train, 7, train);
        ls_steal_data_free(&tr);
    }
    ls_steal_data_free(&all);
    if (rc) {
        ls_steal_data_free(train);
        ls_steal_data_free(test);
        return rc;
    }
    snprintf(train->name, sizeof train->name, "%s", name);
    snprintf(test->name, sizeof test->name, "%s", name);
    return LS_OK;
}

/* One gzipped idx file: images (magic 0x803, n x 28 x 28 bytes) or labels (0x801, n bytes). */
static int write_idx(const char *path, const ls_steal_data *d, int64_t from, int64_t n, int labels) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gzFile g = gzopen(tmp, "wb");
    if (!g) return ls_err(LS_EIO, "%s: cannot write", tmp);
    unsigned char hdr[16] = {0, 0, 8, labels ? 1 : 3};
    uint32_t dims[3] = {(uint32_t)n, IMG, IMG};
    int nd = labels ? 1 : 3, ok = 1;
    for (int i = 0; i < nd; i++)
        for (int b = 0; b < 4; b++) hdr[4 + 4 * i + b] = (unsigned char)(dims[i] >> (24 - 8 * b));
    ok = gzwrite(g, hdr, (unsigned)(4 + 4 * nd)) == 4 + 4 * nd;
    unsigned char px[IMG * IMG];
    for (int64_t i = from; ok && i < from + n; i++) {
        if (labels) {
            px[0] = (unsigned char)d->y[i];
            ok = gzwrite(g, px, 1) == 1;
        } else {
            for (int p = 0; p < IMG * IMG; p++) px[p] = (unsigned char)lrintf(clampf(d->x[i * d->d + p], 0, 1) * 255.0f);
            ok = gzwrite(g, px, IMG * IMG) == IMG * IMG;
        }
    }
    if (gzclose(g) != Z_OK) ok = 0;
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        return ls_err(LS_EIO, "%s: write failed", path);
    }
    return LS_OK;
}

int ls_steal_write_task(const char *name, uint64_t seed, const char *dir, char *desc, size_t ndesc) {
    ls_steal_data all;
    LS_TRY(ls_steal_make_task(name, seed, 0, &all));
    int rc = ls_mkdirs(dir);
    char p[1100];
    if (!rc && ls_steal_task_is_image(ls_steal_task_index(name))) {
        const char *f[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                            "t10k-labels-idx1-ubyte.gz"};
        for (int i = 0; !rc && i < 4; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, f[i]);
            rc = write_idx(p, &all, i < 2 ? 0 : 20000, i < 2 ? 20000 : all.n - 20000, i % 2);
        }
        snprintf(desc, ndesc, "%s: 20000 train + %lld test 28x28 images, 10 classes, as gzipped idx (fmnist:%s)", dir,
                 (long long)(all.n - 20000), dir);
    } else if (!rc) {
        snprintf(p, sizeof p, "%s/%s.csv", dir, name);
        rc = ls_steal_csv_write(p, &all);
        snprintf(desc, ndesc, "%s: %lld rows, %d features, %d classes", p, (long long)all.n, all.d, all.k);
    }
    ls_steal_data_free(&all);
    return rc;
}

int ls_steal_write_table(const char *kind, int64_t n, int d, int k, uint64_t seed, const char *path) {
    ls_steal_data t;
    LS_TRY(ls_steal_make_table(kind, n, d, k, seed, &t));
    int rc = ls_steal_csv_write(path, &t);
    ls_steal_data_free(&t);
    return rc;
}
