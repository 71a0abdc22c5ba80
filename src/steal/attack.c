/* attack.c - black-box model extraction: synthetic queries (for images objects drawn from a
 * parametric prior, variations of answered objects and morphs between them; for tables
 * structured seeds, Jacobian-based steps towards other classes, mixes of differently-labelled
 * points; for both boundary bisection and selection by replica uncertainty) and replica MLP
 * training on the victim's answers, with a CART member for images when the attacker's own
 * held-back test prefers it; baselines (uniform random queries, natural samples); the replica
 * file. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llmsys/core.h"
#include "llmsys/safetensors.h"
#include "llmsys/steal.h"
#include "steal/internal.h"

void ls_steal_opts_default(ls_steal_opts *o) {
    memset(o, 0, sizeof *o);
    o->c = 1, o->h = 28, o->w = 28; /* input shape */
    o->lo = 0, o->hi = 1;
    o->k = 10;
    o->budget = 5000;
    o->strategy = LS_STEAL_SYNTH;
    o->seed = 1;
    o->batch = 256;
    o->hidden1 = 256, o->hidden2 = 128;
    o->final_epochs = 30;
    o->members = 3;
    o->use_proba = 1;
    o->tree_member = 1;
    o->cnn_member = 1;
    o->cnn_weight = LS_STEAL_CNN_WEIGHT;
    o->linear_member = 1;
    o->distill = 1;
}

/* ---------------------------------------------------------------- state */

/* The object prior (object_seed) keeps each drawn object as parameters, so that an answered
 * object can be varied (obj_vary) and two of them morphed into each other (obj_lerp) without
 * leaving the prior. */
typedef struct {
    float cy, cx, ry, rx; /* centre and radii, pixels */
    float slope;          /* trapezoid: widening per unit of height */
    int kind;             /* 0 ellipse, 1 rectangle, 2 trapezoid */
} obj_prim;

typedef struct {
    int np, sym, g, outline; /* primitives; mirrored about ax; shading grid side; outline drawn */
    float ax, base, sa, tex; /* mirror axis; fill level, shading amplitude, texture amplitude */
    float e;                 /* outline level */
    obj_prim p[4];
    float grid[25]; /* g x g shading values in [0,1] */
    int style;      /* STYLE_*: how the parameters are rendered */
    float sv[32];   /* strokes: up to 5 points (y, x), width at 10; field: angle, freq, phase, contrast, mean, kind;
                     * drawing: P->np strokes of DRAW_STRIDE numbers (draw_segments), width and ground level */
} obj_params;

/* The styles of the image prior. The prior started as objects on a dark background, a look
 * chosen on Fashion-MNIST; the other styles cover images of other character (dark objects on
 * a bright ground, thin strokes, full-frame periodic fields, line drawings of a few pen
 * strokes on a dim, noisy ground), and their shares adapt to the victim's answers
 * (style_weights): a style whose queries the victim spreads over many classes gets more of
 * the budget. */
enum { STYLE_OBJECT = 0, STYLE_INVERTED, STYLE_STROKES, STYLE_FIELD, STYLE_DRAWING, NSTYLE };
_Static_assert(NSTYLE == LS_STEAL_NSTYLE, "ls_steal_style_names lists every style");
const char *const ls_steal_style_names[LS_STEAL_NSTYLE] = {"object", "inverted", "strokes", "field", "drawing"};

typedef struct {
    const ls_steal_opts *o;
    ls_steal_oracle oracle;
    int d, k;
    int64_t n, cap; /* answered rows */
    float *x;       /* cap x d */
    int32_t *y;
    float *p; /* cap x k soft targets (one-hot when label-only) */
    int got_proba;
    int failed;
    char err[256];
    ls_rng rng;
    ls_mlp net;
    int have_net;
    ls_progress pg;
    int64_t count[64];
    int rounds;
    unsigned char *mask; /* h*w scratch for obj_fill: the object's pixels */
    float *shade;        /* h*w: its shading field */
    obj_params *par;     /* cap (images): each answered object's parameters, when has_par */
    unsigned char *has_par;
    float style_w[NSTYLE]; /* the prior's current share of each style */
    ls_cnn rank_cnn;       /* opts.cnn_rank: a CNN of the answers that ranks the candidates with net, */
    int have_rank_cnn;     /* ... when its test after the seeds kept it */
} attack_t;

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Sends up to n rows (never more than the budget left); appends the answers. Returns the
 * number answered; on an oracle failure records the message and marks the attack failed. */
static int64_t ask(attack_t *a, const float *x, int64_t n) {
    int64_t left = a->o->budget - a->n;
    if (n > left) n = left;
    int64_t done = 0;
    int bs = a->o->batch > 0 ? a->o->batch : 256;
    float *pbuf = malloc(sizeof(float) * (size_t)bs * a->k);
    if (!pbuf) {
        a->failed = 1;
        snprintf(a->err, sizeof a->err, "out of memory");
        return 0;
    }
    while (done < n && !a->failed) {
        int b = (int)(n - done < bs ? n - done : bs);
        int gp = 0;
        int32_t *lab = a->y + a->n;
        int rc = a->oracle.query(a->oracle.ctx, x + done * a->d, b, lab, a->o->use_proba ? pbuf : NULL, &gp);
        if (rc) {
            a->failed = 1;
            snprintf(a->err, sizeof a->err, "%s", ls_errmsg());
            break;
        }
        for (int i = 0; i < b; i++) {
            memcpy(a->x + (a->n + i) * a->d, x + (done + i) * a->d, sizeof(float) * (size_t)a->d);
            float *t = a->p + (a->n + i) * a->k;
            if (gp) {
                memcpy(t, pbuf + (size_t)i * a->k, sizeof(float) * (size_t)a->k);
                a->got_proba = 1;
            } else {
                memset(t, 0, sizeof(float) * (size_t)a->k);
                t[lab[i]] = 1.0f;
            }
            if (lab[i] < 64) a->count[lab[i]]++;
        }
        a->n += b;
        done += b;
        if (a->o->verbose) ls_progress_update(&a->pg, a->n, "queries");
    }
    free(pbuf);
    return done;
}

static int net_new(attack_t *a, uint64_t seed) {
    if (a->have_net) ls_mlp_free(&a->net);
    a->have_net = 0;
    int sizes[4] = {a->d, a->o->hidden1 > 0 ? a->o->hidden1 : 256, a->o->hidden2 > 0 ? a->o->hidden2 : 128, a->k};
    LS_TRY(ls_mlp_init(&a->net, 3, sizes, seed));
    a->have_net = 1;
    return LS_OK;
}

/* How the attack fits its networks: Adam, lr 1e-3 decaying to lr_end of it; label: the
 * progress bar's, shown when the attack is verbose (NULL: none). */
static ls_mlp_fit_opts fit_opts(const attack_t *a, int epochs, float lr_end, uint64_t seed, const char *label) {
    return (ls_mlp_fit_opts){.epochs = epochs,
                             .batch = 128,
                             .lr = 1e-3f,
                             .lr_end_frac = lr_end,
                             .wd = 1e-5f,
                             .lo = a->o->lo,
                             .hi = a->o->hi,
                             .seed = seed,
                             .verbose = label && a->o->verbose,
                             .label = label};
}

/* Fits a->net to every answer so far, weighted by wt (NULL = 1 each). */
static int fit_net(attack_t *a, const float *wt, int epochs, float lr_end, uint64_t seed, const char *label) {
    ls_mlp_fit_opts fo = fit_opts(a, epochs, lr_end, seed, label);
    return ls_mlp_fit(&a->net, a->x, a->p, wt, a->n, &fo, NULL);
}

static int is_image(const ls_steal_opts *o) { return o->h > 1 && o->w > 1; }

/* Epochs of a final member's fit (the replica's, the member test's, distillation's): 0 = 30. */
static int final_epochs(const ls_steal_opts *o) { return o->final_epochs > 0 ? o->final_epochs : 30; }

/* ---------------------------------------------------------------- generators */

static void obj_prim_draw(ls_rng *r, obj_prim *q, int H, int W) {
    q->cy = H * (0.2f + 0.6f * ls_rng_uniform(r));
    q->cx = W * (0.2f + 0.6f * ls_rng_uniform(r));
    q->ry = H * (0.08f + 0.3f * ls_rng_uniform(r));
    q->rx = W * (0.06f + 0.3f * ls_rng_uniform(r));
    q->kind = (int)ls_rng_below(r, 3);
    q->slope = 1.2f * (ls_rng_uniform(r) - 0.5f);
}

/* Channel 0 of x: the object's mask (into a->mask) filled with its level, shading (the
 * bilinear upsampling of its grid) and texture noise drawn from r. */
static void obj_fill(attack_t *a, const obj_params *P, ls_rng *r, float *x) {
    int H = a->o->h, W = a->o->w, g = P->g;
    unsigned char *mask = a->mask;
    float *shade = a->shade;
    memset(mask, 0, (size_t)H * W);
    for (int p = 0; p < P->np; p++) {
        const obj_prim *q = &P->p[p];
        for (int yy = 0; yy < H; yy++)
            for (int xx = 0; xx < W; xx++) {
                float dy = (yy - q->cy) / q->ry, dx = (xx - q->cx) / q->rx;
                int in = q->kind == 0   ? dy * dy + dx * dx <= 1
                         : q->kind == 1 ? fabsf(dy) <= 1 && fabsf(dx) <= 1
                                        : fabsf(dy) <= 1 && fabsf(dx) <= 1 + q->slope * dy;
                if (!in) continue;
                mask[yy * W + xx] = 1;
                int mx = (int)lroundf(2 * P->ax - xx);
                if (P->sym && mx >= 0 && mx < W) mask[yy * W + mx] = 1;
            }
    }
    for (int yy = 0; yy < H; yy++)
        for (int xx = 0; xx < W; xx++) {
            float fy = (float)yy / (H - 1) * (g - 1), fx = (float)xx / (W - 1) * (g - 1);
            int y0 = (int)fy, x0 = (int)fx;
            int y1 = y0 + 1 < g ? y0 + 1 : y0, x1 = x0 + 1 < g ? x0 + 1 : x0;
            float ty = fy - y0, tx = fx - x0;
            shade[yy * W + xx] = (1 - ty) * ((1 - tx) * P->grid[y0 * g + x0] + tx * P->grid[y0 * g + x1]) +
                                 ty * ((1 - tx) * P->grid[y1 * g + x0] + tx * P->grid[y1 * g + x1]);
        }
    for (int i = 0; i < H * W; i++)
        x[i] = mask[i] ? clampf(P->base + P->sa * (shade[i] - 0.5f) + P->tex * (ls_rng_uniform(r) - 0.5f), 0.02f, 1)
                       : 0;
}

/* After obj_fill: the outline (read from a->mask), the other channels as copies at a gain
 * drawn from r, and the scaling to [lo, hi]. */
static void obj_finish(attack_t *a, const obj_params *P, ls_rng *r, float *x) {
    const ls_steal_opts *o = a->o;
    int H = o->h, W = o->w;
    const unsigned char *mask = a->mask;
    if (P->outline && P->style <= STYLE_INVERTED)
        for (int yy = 0; yy < H; yy++)
            for (int xx = 0; xx < W; xx++) {
                int i = yy * W + xx; /* an edge reads the mask only, so x can change in place */
                if (mask[i] && (yy == 0 || xx == 0 || yy == H - 1 || xx == W - 1 || !mask[i - W] || !mask[i + W] ||
                                !mask[i - 1] || !mask[i + 1]))
                    x[i] = P->e;
            }
    if (P->style == STYLE_INVERTED)
        for (int i = 0; i < H * W; i++) x[i] = 1.0f - x[i];
    for (int ch = 1; ch < o->c; ch++) {
        float gain = 0.6f + 0.8f * ls_rng_uniform(r);
        for (int i = 0; i < H * W; i++) x[(size_t)ch * H * W + i] = clampf(gain * x[i], 0, 1);
    }
    for (int i = 0; i < a->d; i++) x[i] = o->lo + (o->hi - o->lo) * x[i];
}

/* A drawing's layout in sv: up to DRAW_MAXSTROKES strokes of DRAW_STRIDE numbers each, then
 * the pen width and the ground level. A stroke is a kind (< 0.5: polyline) and either 3 points
 * (y, x) and their count in use (2 or 3), or an elliptic arc: centre, radii, start angle, sweep. */
enum { DRAW_STRIDE = 8, DRAW_MAXSTROKES = 3, DRAW_WIDTH = 30, DRAW_GROUND = 31, DRAW_ARC_CHORDS = 8 };
#define DRAW_MAXSEG (DRAW_MAXSTROKES * DRAW_ARC_CHORDS)

/* A drawing's strokes as line segments (y0, x0, y1, x1), an arc as DRAW_ARC_CHORDS chords.
 * Returns the count. */
static int draw_segments(const obj_params *P, float seg[][4]) {
    int n = 0;
    for (int s = 0; s < P->np && s < DRAW_MAXSTROKES; s++) {
        const float *v = P->sv + DRAW_STRIDE * s;
        if (v[0] < 0.5f) {
            for (int i = 0; i + 1 < (v[7] > 2.5f ? 3 : 2); i++, n++) memcpy(seg[n], v + 1 + 2 * i, sizeof seg[n]);
        } else {
            for (int i = 0; i < DRAW_ARC_CHORDS; i++, n++) {
                float t0 = v[5] + v[6] * i / DRAW_ARC_CHORDS, t1 = v[5] + v[6] * (i + 1) / DRAW_ARC_CHORDS;
                seg[n][0] = v[1] + v[3] * sinf(t0), seg[n][1] = v[2] + v[4] * cosf(t0);
                seg[n][2] = v[1] + v[3] * sinf(t1), seg[n][3] = v[2] + v[4] * cosf(t1);
            }
        }
    }
    return n;
}

/* Channel 0 of a stroke, drawing or field image: strokes are a polyline of P->np points (sv)
 * of width sv[10], level P->base, on a dark ground; a drawing is its segments (draw_segments)
 * of width sv[DRAW_WIDTH] on a ground of level sv[DRAW_GROUND]; a field is a full-frame wave at angle sv[0],
 * frequency sv[1], phase sv[2], contrast sv[3] around mean sv[4], kind sv[5] (sine, square,
 * crossed), with P->tex texture. */
static void style_fill(attack_t *a, const obj_params *P, ls_rng *r, float *x) {
    int H = a->o->h, W = a->o->w;
    const float *v = P->sv;
    int drawing = P->style == STYLE_DRAWING, nseg = 0;
    float seg[DRAW_MAXSEG][4], width = drawing ? v[DRAW_WIDTH] : v[10], ground = drawing ? v[DRAW_GROUND] : 0;
    if (drawing)
        nseg = draw_segments(P, seg);
    else if (P->style == STYLE_STROKES)
        for (; nseg + 1 < P->np; nseg++) memcpy(seg[nseg], v + 2 * nseg, sizeof seg[nseg]);
    for (int yy = 0; yy < H; yy++)
        for (int xx = 0; xx < W; xx++) {
            float val;
            if (nseg) {
                float best = 1e30f;
                for (int s = 0; s < nseg; s++) {
                    float ay = seg[s][0], ax = seg[s][1], by = seg[s][2], bx = seg[s][3];
                    float dy = by - ay, dx = bx - ax, l2 = dy * dy + dx * dx;
                    float t = l2 > 0 ? clampf(((yy - ay) * dy + (xx - ax) * dx) / l2, 0, 1) : 0;
                    float ey = yy - (ay + t * dy), ex = xx - (ax + t * dx), dd = ey * ey + ex * ex;
                    if (dd < best) best = dd;
                }
                float ink = clampf(width * 0.5f + 0.5f - sqrtf(best), 0, 1);
                val = ground + (P->base - ground) * ink;
            } else {
                float u = (float)xx / W, w = (float)yy / H, ph = v[1] * (u * cosf(v[0]) + w * sinf(v[0])) + v[2];
                float sn = sinf(ph);
                if (v[5] >= 2) sn *= sinf(v[1] * (w * cosf(v[0]) - u * sinf(v[0])) + v[2]);
                if (v[5] >= 1) sn = sn > 0 ? 1.0f : -1.0f;
                val = v[4] + v[3] * sn;
            }
            x[yy * W + xx] = clampf(val + P->tex * (ls_rng_uniform(r) - 0.5f), 0, 1);
        }
}

static void obj_render(attack_t *a, const obj_params *P, float *x) {
    if (P->style >= STYLE_STROKES)
        style_fill(a, P, &a->rng, x);
    else
        obj_fill(a, P, &a->rng, x);
    obj_finish(a, P, &a->rng, x);
}

/* Pen points (y, x) of strokes and drawings: drawn in the middle 70 % of the frame; varied by
 * Gaussian noise of s times 0.7 of the frame, kept inside it. */
static void pen_points_draw(ls_rng *r, float *pt, int n, int H, int W) {
    for (int i = 0; i < n; i++) {
        pt[2 * i] = H * (0.15f + 0.7f * ls_rng_uniform(r));
        pt[2 * i + 1] = W * (0.15f + 0.7f * ls_rng_uniform(r));
    }
}

static void pen_points_vary(ls_rng *r, float *pt, int n, float s, int H, int W) {
    for (int i = 0; i < n; i++) {
        pt[2 * i] = clampf(pt[2 * i] + s * 0.7f * H * ls_rng_normal(r), 0.15f * H, 0.85f * H);
        pt[2 * i + 1] = clampf(pt[2 * i + 1] + s * 0.7f * W * ls_rng_normal(r), 0.15f * W, 0.85f * W);
    }
}

/* Draws the stroke, drawing or field parameters of P (its style already set). */
static void style_draw(attack_t *a, obj_params *P) {
    ls_rng *r = &a->rng;
    int H = a->o->h, W = a->o->w;
    P->outline = 0;
    P->g = 0, P->sym = 0, P->ax = 0, P->sa = 0, P->e = 0; /* the object's fields, unused here */
    P->tex = 0.15f * ls_rng_uniform(r) * ls_rng_uniform(r);
    P->base = 0.5f + 0.5f * ls_rng_uniform(r);
    if (P->style == STYLE_STROKES) {
        P->np = 2 + (int)ls_rng_below(r, 4);
        pen_points_draw(r, P->sv, P->np, H, W);
        P->sv[10] = 1.0f + 0.12f * W * ls_rng_uniform(r);
    } else if (P->style == STYLE_DRAWING) {
        P->np = 1 + (int)ls_rng_below(r, DRAW_MAXSTROKES);
        for (int s = 0; s < P->np; s++) {
            float *v = P->sv + DRAW_STRIDE * s;
            v[0] = (float)ls_rng_below(r, 2);
            if (v[0] < 0.5f) {
                pen_points_draw(r, v + 1, 3, H, W);
                v[7] = 2.0f + (float)ls_rng_below(r, 2);
            } else {
                v[1] = H * (0.3f + 0.4f * ls_rng_uniform(r)), v[2] = W * (0.3f + 0.4f * ls_rng_uniform(r));
                v[3] = H * (0.08f + 0.25f * ls_rng_uniform(r)), v[4] = W * (0.08f + 0.25f * ls_rng_uniform(r));
                v[5] = 6.2831853f * ls_rng_uniform(r), v[6] = 1.5707963f + 4.712389f * ls_rng_uniform(r);
                v[7] = 0;
            }
        }
        P->sv[DRAW_WIDTH] = 1.0f + 0.1f * W * ls_rng_uniform(r);
        float u = ls_rng_uniform(r);
        P->sv[DRAW_GROUND] = 0.3f * u * u;
    } else {
        P->np = 0;
        P->sv[0] = 3.14159265f * ls_rng_uniform(r);
        P->sv[1] = 4.0f + 40.0f * ls_rng_uniform(r);
        P->sv[2] = 6.2831853f * ls_rng_uniform(r);
        P->sv[3] = 0.1f + 0.4f * ls_rng_uniform(r);
        P->sv[4] = 0.3f + 0.4f * ls_rng_uniform(r);
        P->sv[5] = (float)ls_rng_below(r, 3);
    }
}

/* Moves the stroke, drawing or field parameters by Gaussian noise of s times their range. */
static void style_vary(attack_t *a, obj_params *P, float s) {
    ls_rng *r = &a->rng;
    int H = a->o->h, W = a->o->w;
    P->base = clampf(P->base + s * 0.5f * ls_rng_normal(r), 0.5f, 1);
    if (P->style == STYLE_STROKES) {
        pen_points_vary(r, P->sv, P->np, s, H, W);
        P->sv[10] = clampf(P->sv[10] + s * 0.12f * W * ls_rng_normal(r), 1, 1 + 0.12f * W);
    } else if (P->style == STYLE_DRAWING) {
        for (int k = 0; k < P->np; k++) {
            float *v = P->sv + DRAW_STRIDE * k;
            if (v[0] < 0.5f) {
                pen_points_vary(r, v + 1, 3, s, H, W);
            } else {
                v[1] = clampf(v[1] + s * 0.4f * H * ls_rng_normal(r), 0.3f * H, 0.7f * H);
                v[2] = clampf(v[2] + s * 0.4f * W * ls_rng_normal(r), 0.3f * W, 0.7f * W);
                v[3] = clampf(v[3] + s * 0.25f * H * ls_rng_normal(r), 0.08f * H, 0.33f * H);
                v[4] = clampf(v[4] + s * 0.25f * W * ls_rng_normal(r), 0.08f * W, 0.33f * W);
                v[5] += s * 6.2831853f * ls_rng_normal(r);
                v[6] = clampf(v[6] + s * 4.712389f * ls_rng_normal(r), 1.5707963f, 6.2831853f);
            }
        }
        P->sv[DRAW_WIDTH] = clampf(P->sv[DRAW_WIDTH] + s * 0.1f * W * ls_rng_normal(r), 1, 1 + 0.1f * W);
        P->sv[DRAW_GROUND] = clampf(P->sv[DRAW_GROUND] + s * 0.3f * ls_rng_normal(r), 0.001f, 0.3f);
    } else {
        P->sv[0] += s * 3.14159265f * ls_rng_normal(r);
        P->sv[1] = clampf(P->sv[1] + s * 40 * ls_rng_normal(r), 4, 44);
        P->sv[2] += s * 6.2831853f * ls_rng_normal(r);
        P->sv[3] = clampf(P->sv[3] + s * 0.4f * ls_rng_normal(r), 0.1f, 0.5f);
        P->sv[4] = clampf(P->sv[4] + s * 0.4f * ls_rng_normal(r), 0.3f, 0.7f);
    }
}

/* A style drawn from the current shares. */
static int style_pick(attack_t *a) {
    float u = ls_rng_uniform(&a->rng), acc = 0;
    for (int s = 0; s < NSTYLE; s++) {
        acc += a->style_w[s];
        if (u < acc) return s;
    }
    return STYLE_OBJECT;
}

/* The shares from the answers so far: each style's label entropy (normalised by log k) H_s;
 * share ~ exp(8 (H_s - max H)), at least 4 % each, styles with under 20 answers kept at 1/NSTYLE. */
static void style_weights(attack_t *a) {
    if (!a->par) return;
    int k = a->k < 64 ? a->k : 64;
    int64_t hist[NSTYLE * 64] = {0}, tot[NSTYLE] = {0};
    for (int64_t i = 0; i < a->n; i++)
        if (a->has_par[i] && a->y[i] < 64) {
            hist[a->par[i].style * 64 + a->y[i]]++;
            tot[a->par[i].style]++;
        }
    double H[NSTYLE], hmax = 0, w[NSTYLE], sum = 0, sum2 = 0;
    for (int c = 0; c < NSTYLE; c++) {
        H[c] = -1;
        if (tot[c] < 20) continue;
        double e = 0;
        for (int j = 0; j < k; j++)
            if (hist[c * 64 + j]) {
                double p = (double)hist[c * 64 + j] / tot[c];
                e -= p * log(p);
            }
        H[c] = e / log((double)k);
        if (H[c] > hmax) hmax = H[c];
    }
    for (int c = 0; c < NSTYLE; c++) {
        w[c] = H[c] < 0 ? 1.0 / NSTYLE : exp(8 * (H[c] - hmax));
        sum += w[c];
    }
    for (int c = 0; c < NSTYLE; c++) {
        w[c] = w[c] / sum < 0.04 ? 0.04 : w[c] / sum;
        sum2 += w[c];
    }
    for (int c = 0; c < NSTYLE; c++) a->style_w[c] = (float)(w[c] / sum2);
}

/* An object on a dark background, the generic prior for image-shaped inputs: the union of 1..4
 * primitives (ellipse, rectangle, trapezoid), mirror-symmetric about a near-vertical axis half
 * the time; filled with a base level, smooth shading and fine texture; half the time its
 * outline drawn dark or bright. Channel 0 is drawn; the others are copies at another
 * brightness. Draws x and its parameters P. (The outline is drawn after the texture, as in
 * the first version of the prior, so that its seeds are unchanged.) */
static void object_seed(attack_t *a, float *x, obj_params *P) {
    int H = a->o->h, W = a->o->w;
    ls_rng *r = &a->rng;
    P->style = style_pick(a);
    if (P->style >= STYLE_STROKES) {
        style_draw(a, P);
        obj_render(a, P, x);
        return;
    }
    P->np = 1 + (int)ls_rng_below(r, 4);
    P->sym = ls_rng_below(r, 2) == 0;
    P->ax = W * (0.4f + 0.2f * ls_rng_uniform(r));
    for (int p = 0; p < P->np; p++) obj_prim_draw(r, &P->p[p], H, W);
    P->g = 2 + (int)ls_rng_below(r, 4);
    for (int i = 0; i < P->g * P->g; i++) P->grid[i] = ls_rng_uniform(r);
    P->base = 0.2f + 0.8f * ls_rng_uniform(r);
    P->sa = 0.6f * ls_rng_uniform(r);
    P->tex = 0.25f * ls_rng_uniform(r) * ls_rng_uniform(r);
    obj_fill(a, P, r, x);
    P->outline = ls_rng_below(r, 2) == 0;
    P->e = !P->outline ? 0 : ls_rng_below(r, 2) ? 0.3f * ls_rng_uniform(r) : 1.0f;
    obj_finish(a, P, r, x);
}

/* A variation of an object: each continuous parameter moved by Gaussian noise of s times its
 * range in the prior, and kept inside that range; one time in five a primitive redrawn. The
 * number and kinds of primitives stay, so the variation can be morphed back (obj_lerp). */
static void obj_vary(attack_t *a, obj_params *P, float s) {
    ls_rng *r = &a->rng;
    int H = a->o->h, W = a->o->w;
    if (P->style >= STYLE_STROKES) {
        style_vary(a, P, s);
        return;
    }
    for (int p = 0; p < P->np; p++) {
        obj_prim *q = &P->p[p];
        q->cy = clampf(q->cy + s * 0.6f * H * ls_rng_normal(r), 0.2f * H, 0.8f * H);
        q->cx = clampf(q->cx + s * 0.6f * W * ls_rng_normal(r), 0.2f * W, 0.8f * W);
        q->ry = clampf(q->ry + s * 0.3f * H * ls_rng_normal(r), 0.08f * H, 0.38f * H);
        q->rx = clampf(q->rx + s * 0.3f * W * ls_rng_normal(r), 0.06f * W, 0.36f * W);
        q->slope = clampf(q->slope + s * 1.2f * ls_rng_normal(r), -0.6f, 0.6f);
    }
    P->ax = clampf(P->ax + s * 0.2f * W * ls_rng_normal(r), 0.4f * W, 0.6f * W);
    for (int i = 0; i < P->g * P->g; i++) P->grid[i] = clampf(P->grid[i] + s * ls_rng_normal(r), 0, 1);
    P->base = clampf(P->base + s * 0.8f * ls_rng_normal(r), 0.2f, 1);
    P->sa = clampf(P->sa + s * 0.6f * ls_rng_normal(r), 0, 0.6f);
    if (ls_rng_uniform(r) < 0.2f) obj_prim_draw(r, &P->p[ls_rng_below(r, (uint64_t)P->np)], H, W);
}

/* M = the point t of the way from A to B, B a variation of A (same primitives). */
static void obj_lerp(const obj_params *A, const obj_params *B, float t, obj_params *M) {
    *M = *A;
    for (int p = 0; A->style <= STYLE_INVERTED && p < A->np; p++) {
        const obj_prim *qa = &A->p[p], *qb = &B->p[p];
        obj_prim *qm = &M->p[p];
        qm->cy = qa->cy + t * (qb->cy - qa->cy);
        qm->cx = qa->cx + t * (qb->cx - qa->cx);
        qm->ry = qa->ry + t * (qb->ry - qa->ry);
        qm->rx = qa->rx + t * (qb->rx - qa->rx);
        qm->slope = qa->slope + t * (qb->slope - qa->slope);
        qm->kind = t < 0.5f ? qa->kind : qb->kind;
    }
    M->ax = A->ax + t * (B->ax - A->ax);
    for (int i = 0; i < A->g * A->g; i++) M->grid[i] = A->grid[i] + t * (B->grid[i] - A->grid[i]);
    M->base = A->base + t * (B->base - A->base);
    M->sa = A->sa + t * (B->sa - A->sa);
    /* the style's continuous numbers (a field's kind, sv[5], stays A's) */
    int nsv = A->style == STYLE_STROKES ? 11 : A->style == STYLE_DRAWING ? DRAW_GROUND + 1 : 5;
    for (int i = 0; i < nsv; i++) M->sv[i] = A->sv[i] + t * (B->sv[i] - A->sv[i]);
}

/* Seeds. Image-shaped inputs (h, w > 1): objects (above), whose parameters go to P.
 * Tables: uniform, Gaussian clusters, corners, skewed rows. Knows only the shape and the
 * range. */
static void gen_seed(attack_t *a, float *x, obj_params *P) {
    const ls_steal_opts *o = a->o;
    int d = a->d;
    float lo = o->lo, hi = o->hi, rg = hi - lo;
    ls_rng *r = &a->rng;
    if (is_image(o)) {
        object_seed(a, x, P);
        return;
    }
    int kind = (int)ls_rng_below(r, 4);
    if (kind == 3) {
        /* Skewed rows. Real tables' positive quantities (sizes, counts, concentrations) are
         * right-skewed, so once scaled by their min..max most rows sit near one end of each
         * feature's range, a corner that uniform and centred seeds rarely reach. Each feature
         * goes towards lo (80 %) or hi by u^p, p log-uniform in [1, 6]. */
        float pw = expf(logf(6.0f) * ls_rng_uniform(r)), sg = 0.03f * ls_rng_uniform(r);
        for (int j = 0; j < d; j++) {
            float u = powf(ls_rng_uniform(r), pw);
            if (ls_rng_uniform(r) < 0.2f) u = 1 - u;
            x[j] = clampf(lo + rg * (u + sg * ls_rng_normal(r)), lo, hi);
        }
    } else if (kind == 0) {
        for (int j = 0; j < d; j++) x[j] = lo + rg * ls_rng_uniform(r);
    } else if (kind == 1) {
        float s = 0.05f + 0.2f * ls_rng_uniform(r);
        for (int j = 0; j < d; j++) x[j] = clampf(lo + rg * (0.5f + s * ls_rng_normal(r)), lo, hi);
    } else {
        float s = 0.1f * ls_rng_uniform(r);
        for (int j = 0; j < d; j++)
            x[j] = clampf(lo + rg * ((ls_rng_below(r, 2) ? 0.8f : 0.2f) + s * ls_rng_normal(r)), lo, hi);
    }
}

/* A labelled row drawn class-balanced: a class uniformly among those seen, then a row. */
static int64_t pick_balanced(attack_t *a, int cls_wanted) {
    for (int tries = 0; tries < 64; tries++) {
        int64_t i = (int64_t)ls_rng_below(&a->rng, (uint64_t)a->n);
        if (cls_wanted < 0 || a->y[i] == cls_wanted) return i;
    }
    return (int64_t)ls_rng_below(&a->rng, (uint64_t)a->n);
}

static int seen_class(attack_t *a) {
    int seen[64], ns = 0;
    for (int j = 0; j < a->k && j < 64; j++)
        if (a->count[j] > 0) seen[ns++] = j;
    return ns ? seen[ls_rng_below(&a->rng, (uint64_t)ns)] : -1;
}

/* An answered object (images) to vary, drawn class-balanced; -1 when 64 draws found none. */
static int64_t pick_parent(attack_t *a) {
    int64_t s = -1;
    for (int t = 0; t < 64 && s < 0; t++) {
        int64_t c = pick_balanced(a, seen_class(a));
        if (a->has_par[c]) s = c;
    }
    return s;
}

/* A variation of an answered object (pick_parent) into x and P: each parameter moved by
 * Gaussian noise of up to 0.4 of its range (0.15, 0.25 and 0.6 measured against it in
 * docs/notes/steal-experiments.md, "Variations and morphs"). With no parent to vary, a fresh
 * seed instead. Returns the parent, or -1. */
static int64_t vary_answered(attack_t *a, float *x, obj_params *P) {
    int64_t s = pick_parent(a);
    if (s < 0) {
        gen_seed(a, x, P);
        return -1;
    }
    *P = a->par[s];
    obj_vary(a, P, 0.4f * (0.2f + 0.8f * ls_rng_uniform(&a->rng)));
    obj_render(a, P, x);
    return s;
}

/* Jacobian-based steps (Papernot et al.): x <- x + lambda * sign(grad(z_t - z_y)) towards a
 * target class t of the replica, repeated until the replica's label changes or steps run out.
 * Moves rows of xs (n x d) in place. */
static int jacobian_steps(attack_t *a, float *xs, int n, const int32_t *ycur, int steps) {
    int d = a->d, k = a->k;
    float *dl = calloc((size_t)n * k, sizeof(float)), *gx = malloc(sizeof(float) * (size_t)n * d);
    float *z = malloc(sizeof(float) * (size_t)n * k);
    int *tgt = malloc(sizeof(int) * (size_t)n), *done = calloc((size_t)n, sizeof(int));
    float *lam = malloc(sizeof(float) * (size_t)n);
    int rc = LS_OK;
    if (!dl || !gx || !z || !tgt || !done || !lam) {
        rc = ls_err(LS_ENOMEM, "attack: out of memory");
        goto out;
    }
    float rg = a->o->hi - a->o->lo;
    for (int i = 0; i < n; i++) {
        do tgt[i] = (int)ls_rng_below(&a->rng, (uint64_t)k);
        while (tgt[i] == ycur[i] && k > 1);
        lam[i] = rg * (0.01f + 0.05f * ls_rng_uniform(&a->rng));
    }
    for (int s = 0; s < steps; s++) {
        memset(dl, 0, sizeof(float) * (size_t)n * k);
        for (int i = 0; i < n; i++) {
            dl[(size_t)i * k + tgt[i]] = 1.0f;
            dl[(size_t)i * k + ycur[i]] = -1.0f;
        }
        int rc = ls_mlp_input_grad(&a->net, xs, n, dl, gx);
        if (rc) break;
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            for (int j = 0; j < d; j++) {
                float g = gx[(size_t)i * d + j];
                float v = xs[(size_t)i * d + j] + (g > 0 ? lam[i] : g < 0 ? -lam[i] : 0);
                xs[(size_t)i * d + j] = clampf(v, a->o->lo, a->o->hi);
            }
        }
        ls_mlp_logits(&a->net, xs, n, z);
        for (int i = 0; i < n; i++) {
            int b = 0;
            for (int j = 1; j < k; j++)
                if (z[(size_t)i * k + j] > z[(size_t)i * k + b]) b = j;
            if (b != ycur[i]) done[i] = 1;
        }
    }
out:
    free(dl);
    free(gx);
    free(z);
    free(tgt);
    free(done);
    free(lam);
    return rc;
}

typedef struct {
    float score;
    int idx;
} scored;

static int cmp_scored(const void *p, const void *q) {
    float a = ((const scored *)p)->score, b = ((const scored *)q)->score;
    return a > b ? -1 : a < b;
}

/* Halves each pair (A[t] labelled la[t], B[t] another label) `steps` times with a query
 * each, keeping the half whose ends the victim labels differently: points next to its
 * boundary. Stops early when the budget runs out. */
static void bisect_pairs(attack_t *a, float *A, float *B, const int32_t *la, float *mid, int64_t np, int steps) {
    int d = a->d;
    for (int s = 0; s < steps && !a->failed && np > 0; s++) {
        for (int64_t t = 0; t < np; t++)
            for (int j = 0; j < d; j++) mid[t * d + j] = 0.5f * (A[t * d + j] + B[t * d + j]);
        int64_t base = a->n, got = ask(a, mid, np);
        for (int64_t t = 0; t < got; t++)
            memcpy((a->y[base + t] == la[t] ? A : B) + t * d, mid + t * d, sizeof(float) * d);
        if (got < np) break;
    }
}

/* Bisection in pixel space between a new answer (rows first..n-1) and an older row with
 * another label: `steps` halvings with a query each put points next to the victim's boundary.
 * Uses up to npairs pairs. */
static int bisect_pixels(attack_t *a, int64_t first, int64_t npairs, int steps) {
    int d = a->d;
    if (npairs < 1 || a->failed || a->n - first < 2) return LS_OK;
    float *pa = malloc(sizeof(float) * (size_t)npairs * d), *pb = malloc(sizeof(float) * (size_t)npairs * d);
    float *mid = malloc(sizeof(float) * (size_t)npairs * d);
    int32_t *la = malloc(sizeof(int32_t) * (size_t)npairs);
    int rc = LS_OK;
    if (!pa || !pb || !mid || !la) {
        rc = ls_err(LS_ENOMEM, "attack: out of memory");
        goto out;
    }
    int64_t np = 0;
    for (int64_t t = 0; t < npairs * 8 && np < npairs; t++) {
        int64_t p = first + (int64_t)ls_rng_below(&a->rng, (uint64_t)(a->n - first));
        int64_t q = pick_balanced(a, -1);
        if (a->y[p] == a->y[q]) continue;
        memcpy(pa + np * d, a->x + p * d, sizeof(float) * d);
        memcpy(pb + np * d, a->x + q * d, sizeof(float) * d);
        la[np] = a->y[p];
        np++;
    }
    bisect_pairs(a, pa, pb, la, mid, np, steps);
out:
    free(pa);
    free(pb);
    free(mid);
    free(la);
    return rc;
}

/* Morphs (images): each new answer (row first + t) that is a variation labelled unlike the
 * object it was varied from (row parent[t] >= 0) is bisected with that object in parameter
 * space, `steps` halvings with a query each. Every midpoint is an object of the prior, so
 * unlike a pixel blend it stays the kind of image the replica is asked about. Uses up to
 * npairs pairs; their number goes to *used. */
static int bisect_objects(attack_t *a, int64_t first, const int64_t *parent, int64_t nnew, int64_t npairs, int steps,
                          int64_t *used) {
    *used = 0;
    if (npairs < 1 || a->failed) return LS_OK;
    obj_params *A = malloc(sizeof(obj_params) * (size_t)npairs), *B = malloc(sizeof(obj_params) * (size_t)npairs);
    obj_params *M = malloc(sizeof(obj_params) * (size_t)npairs);
    float *mid = malloc(sizeof(float) * (size_t)npairs * a->d);
    int32_t *la = malloc(sizeof(int32_t) * (size_t)npairs);
    int rc = LS_OK;
    if (!A || !B || !M || !mid || !la) {
        rc = ls_err(LS_ENOMEM, "attack: out of memory");
        goto out;
    }
    int64_t np = 0;
    for (int64_t t = 0; t < nnew && np < npairs; t++) {
        int64_t pr = parent[t];
        if (pr < 0 || a->y[first + t] == a->y[pr]) continue;
        A[np] = a->par[pr];
        B[np] = a->par[first + t];
        la[np] = a->y[pr];
        np++;
    }
    for (int s = 0; s < steps && !a->failed && np > 0; s++) {
        for (int64_t t = 0; t < np; t++) {
            obj_lerp(&A[t], &B[t], 0.5f, &M[t]);
            obj_render(a, &M[t], mid + t * a->d);
        }
        int64_t base = a->n, got = ask(a, mid, np);
        for (int64_t t = 0; t < got; t++) {
            a->par[base + t] = M[t];
            a->has_par[base + t] = 1;
            if (a->y[base + t] == la[t])
                A[t] = M[t];
            else
                B[t] = M[t];
        }
        if (got < np) break;
    }
    *used = np;
out:
    free(A);
    free(B);
    free(M);
    free(mid);
    free(la);
    return rc;
}

/* One adaptive round: build a candidate pool, rank by replica uncertainty (and class rarity),
 * query the best and a random share, then bisect between differently-labelled pairs. */
static int round_synth(attack_t *a, int64_t want) {
    int d = a->d, k = a->k;
    /* Images draw every candidate from the object prior, in a pool of 8x the round (tables:
     * 4x) for the replica to pick from: 70 % fresh objects, 30 % variations of answered ones.
     * Leaving the prior in pixel space (Jacobian steps, mixes, noise, shifts) loses agreement
     * on natural images (docs/notes/steal-experiments.md); moving within it, in its parameters, gains. */
    int img = is_image(a->o);
    int64_t pool = want * (img ? 8 : 4);
    if (pool < 64) pool = 64;
    float *cand = malloc(sizeof(float) * (size_t)pool * d);
    int32_t *ysrc = malloc(sizeof(int32_t) * (size_t)pool);
    float *z = malloc(sizeof(float) * (size_t)pool * k);
    float *zc = a->have_rank_cnn ? malloc(sizeof(float) * (size_t)pool * k) : NULL;
    scored *sc = malloc(sizeof(scored) * (size_t)pool);
    obj_params *candP = a->par ? malloc(sizeof(obj_params) * (size_t)pool) : NULL;
    int64_t *cpar = malloc(sizeof(int64_t) * (size_t)pool); /* the answered row varied, or -1 */
    float *sel = NULL;
    int64_t *selidx = NULL, *parent = NULL;
    int rc = LS_OK;
    if (!cand || !ysrc || !z || !sc || !cpar || (a->par && !candP) || (a->have_rank_cnn && !zc)) {
        rc = ls_err(LS_ENOMEM, "attack: out of memory");
        goto out;
    }
    float lo = a->o->lo, hi = a->o->hi, rg = hi - lo;
    int64_t nj = img ? 0 : pool * 35 / 100, nmix = img ? 0 : pool * 25 / 100;
    int64_t nvary = a->par ? pool * 30 / 100 : 0;
    int64_t nseed = img ? pool - nvary : pool * 10 / 100;
    int64_t i = 0;
    /* Jacobian-based: class-balanced starting rows, stepped towards other classes. */
    for (; i < nj; i++) {
        int64_t s = pick_balanced(a, seen_class(a));
        memcpy(cand + i * d, a->x + s * d, sizeof(float) * (size_t)d);
        ysrc[i] = a->y[s];
    }
    for (int64_t s = 0; s < nj; s += 256) {
        int b = (int)(nj - s < 256 ? nj - s : 256);
        if ((rc = jacobian_steps(a, cand + s * d, b, ysrc + s, 1 + (int)ls_rng_below(&a->rng, 4)))) goto out;
    }
    /* Mixes of two rows with different labels. */
    for (; i < nj + nmix; i++) {
        int64_t p = pick_balanced(a, seen_class(a)), q = pick_balanced(a, seen_class(a));
        float al = 0.2f + 0.6f * ls_rng_uniform(&a->rng);
        for (int j = 0; j < d; j++) cand[i * d + j] = (1 - al) * a->x[p * d + j] + al * a->x[q * d + j];
        ysrc[i] = a->y[p];
    }
    /* Fresh seeds. */
    for (; i < nj + nmix + nseed; i++) {
        gen_seed(a, cand + i * d, candP ? &candP[i] : NULL);
        ysrc[i] = -1;
        cpar[i] = -1;
    }
    /* Variations of answered objects (images), class-balanced parents. */
    for (; i < nj + nmix + nseed + nvary; i++) {
        int64_t s = vary_answered(a, cand + i * d, &candP[i]);
        ysrc[i] = s < 0 ? -1 : a->y[s];
        cpar[i] = s;
    }
    /* Local perturbations (tables): Gaussian noise of random scale. */
    for (; i < pool; i++) {
        int64_t s = pick_balanced(a, seen_class(a));
        const float *src = a->x + s * d;
        float *dst = cand + i * d;
        ysrc[i] = a->y[s];
        /* A draw of the former perturbation kind, kept so that table queries (and their
         * benchmark rows) stay as they were. */
        (void)ls_rng_below(&a->rng, 3);
        float sg = rg * (0.02f + 0.15f * ls_rng_uniform(&a->rng));
        for (int j = 0; j < d; j++) dst[j] = clampf(src[j] + sg * ls_rng_normal(&a->rng), lo, hi);
    }
    /* Score: small top-2 margin of the replica = uncertain; rare predicted class = bonus. The
     * replica is the MLP, with opts.cnn_rank and a kept CNN the MLP's softmax plus the CNN's times
     * its weight w, over 1 + w. */
    if ((rc = ls_mlp_logits(&a->net, cand, pool, z))) goto out;
    ls_softmax_rows(z, pool, k);
    if (a->have_rank_cnn) {
        if ((rc = ls_cnn_logits(&a->rank_cnn, cand, pool, zc))) goto out;
        ls_softmax_rows(zc, pool, k);
        float w = (float)(a->o->cnn_weight > 0 ? a->o->cnn_weight : LS_STEAL_CNN_WEIGHT);
        for (int64_t c = 0; c < pool * k; c++) z[c] = (z[c] + w * zc[c]) / (1 + w);
    }
    int64_t maxc = 1;
    for (int j = 0; j < k && j < 64; j++) maxc = a->count[j] > maxc ? a->count[j] : maxc;
    for (int64_t c = 0; c < pool; c++) {
        float *pr = z + c * k;
        int b1 = 0;
        for (int j = 1; j < k; j++)
            if (pr[j] > pr[b1]) b1 = j;
        float p2 = 0;
        for (int j = 0; j < k; j++)
            if (j != b1 && pr[j] > p2) p2 = pr[j];
        float rare = b1 < 64 ? 1.0f - (float)a->count[b1] / (float)maxc : 0;
        sc[c].score = 1.0f - (pr[b1] - p2) + 0.5f * rare + 0.05f * ls_rng_uniform(&a->rng);
        sc[c].idx = (int)c;
    }
    qsort(sc, (size_t)pool, sizeof(scored), cmp_scored);
    /* 65% of the round by score, 20% random picks from the rest (diversity), 15% bisection. */
    int64_t ntop = want * 65 / 100, nrand = want * 20 / 100, nbis = want - ntop - nrand;
    if (nbis < 3) {
        /* Too small to bisect: spend it all on ranked candidates. */
        ntop += nbis;
        nbis = 0;
    }
    sel = malloc(sizeof(float) * (size_t)(ntop + nrand) * d);
    selidx = malloc(sizeof(int64_t) * (size_t)(ntop + nrand));
    parent = malloc(sizeof(int64_t) * (size_t)(ntop + nrand));
    if (!sel || !selidx || !parent) {
        rc = ls_err(LS_ENOMEM, "attack: out of memory");
        goto out;
    }
    int64_t ns = 0;
    for (int64_t c = 0; c < ntop && c < pool; c++) selidx[ns++] = sc[c].idx;
    for (int64_t c = 0; c < nrand && ntop < pool; c++)
        selidx[ns++] = sc[ntop + (int64_t)ls_rng_below(&a->rng, (uint64_t)(pool - ntop))].idx;
    for (int64_t c = 0; c < ns; c++) memcpy(sel + c * d, cand + selidx[c] * d, sizeof(float) * d);
    int64_t first = a->n;
    ask(a, sel, ns);
    int64_t nnew = a->n - first;
    if (a->par)
        for (int64_t t = 0; t < nnew; t++) {
            a->par[first + t] = candP[selidx[t]];
            a->has_par[first + t] = 1;
            parent[t] = cpar[selidx[t]];
        }
    /* Bisection, 3 halvings a pair: first morphs of variations labelled unlike their parent
     * (images), then pixel blends of a new answer and an older row with another label. */
    int steps = 3;
    int64_t npairs = nbis / steps, used = 0;
    if (a->par && (rc = bisect_objects(a, first, parent, nnew, npairs, steps, &used))) goto out;
    rc = bisect_pixels(a, first, npairs - used, steps);
out:
    free(cand);
    free(ysrc);
    free(z);
    free(zc);
    free(sc);
    free(candP);
    free(cpar);
    free(sel);
    free(selidx);
    free(parent);
    return rc;
}

/* The CNN member's shape and training (opts.cnn_member): two 5x5 conv layers of 16 and 32
 * channels, a hidden layer of 128, Adam on the hard labels for opts.cnn_epochs (default
 * LS_STEAL_CNN_EPOCHS) epochs, on the answers as asked or moved by up to opts.cnn_shift pixels. */
enum { CNN_C1 = 16, CNN_C2 = 32, CNN_KS = 5, CNN_HIDDEN = 128 };

/* Trains a fresh CNN member on n rows of x with labels y (o's shape, range and seed). */
static int cnn_train(const attack_t *a, const float *x, const int32_t *y, int64_t n, uint64_t seed, ls_cnn *m) {
    const ls_steal_opts *o = a->o;
    LS_TRY(ls_cnn_init(m, o->c, o->h, o->w, a->k, CNN_C1, CNN_C2, CNN_KS, CNN_HIDDEN, seed));
    ls_mlp_fit_opts fo = ls_cnn_fit_opts(o->cnn_epochs > 0 ? o->cnn_epochs : LS_STEAL_CNN_EPOCHS, o->lo, o->hi,
                                         seed + 1, o->verbose, "cnn member");
    fo.shift = o->cnn_shift;
    int rc = ls_cnn_fit(m, x, y, n, &fo, NULL);
    if (rc) ls_cnn_free(m);
    return rc;
}

static int argmax_row(const float *z, int k) {
    int b = 0;
    for (int j = 1; j < k; j++)
        if (z[j] > z[b]) b = j;
    return b;
}

/* Trains a fresh linear member, a softmax regression (one layer d -> k), on every answer
 * weighted by wt (NULL = 1 each): Adam at LS_STEAL_LINEAR_LR for LS_STEAL_LINEAR_EPOCHS. */
static int linear_train(attack_t *a, const float *wt, uint64_t seed, ls_mlp *m) {
    int sizes[2] = {a->d, a->k};
    LS_TRY(ls_mlp_init(m, 1, sizes, seed));
    ls_mlp_fit_opts fo = fit_opts(a, LS_STEAL_LINEAR_EPOCHS, 0.02f, seed + 1, "linear member");
    fo.lr = LS_STEAL_LINEAR_LR;
    int rc = ls_mlp_fit(m, a->x, a->p, wt, a->n, &fo, NULL);
    if (rc) ls_mlp_free(m);
    return rc;
}

/* The test of a candidate member whose softmax rows zc on the held-back fifth ho would join the
 * MLP's, zm, in the replica's sum times w: zc becomes that sum and lab its labels; *better and
 * *worse count the rows the sum gets right and the MLP wrong, and the other way round. 1 (keep)
 * when the gain is past two standard errors of that paired count (a one-sided sign test at
 * z = 2), not for a difference of a few rows. */
static int sum_test(const float *zm, float *zc, float w, const ls_steal_data *ho, int k, int32_t *lab, int64_t *better,
                    int64_t *worse) {
    int64_t nh = ho->n, b = 0, wo = 0;
    for (int64_t i = 0; i < nh * k; i++) zc[i] = zm[i] + w * zc[i];
    for (int64_t i = 0; i < nh; i++) {
        int e = argmax_row(zc + i * k, k), m = argmax_row(zm + i * k, k);
        b += e == ho->y[i] && m != ho->y[i];
        wo += m == ho->y[i] && e != ho->y[i];
        lab[i] = e;
    }
    *better = b, *worse = wo;
    return (double)(b - wo) > 2.0 * sqrt((double)(b + wo));
}

/* The attacker's own test data: 4 of every 5 answers (fit) and every 5th (ho, held back); an
 * MLP of the replica's shape trained as member 0 is on the four fifths (a->net, which
 * ls_steal_run frees), its softmax rows on ho (zm) and its accuracy there; wt weighs each answer
 * 1, the held-back ones 0; zc and lab are scratch for a candidate's softmax rows and labels. */
typedef struct {
    ls_steal_data fit, ho;
    float *wt, *zm, *zc;
    int32_t *lab;
    double mlp_acc;
} heldout;

static void heldout_free(heldout *h) {
    ls_steal_data_free(&h->fit);
    ls_steal_data_free(&h->ho);
    free(h->wt), free(h->zm), free(h->zc), free(h->lab);
}

/* Fills h from a's answers (at least 100 of them: 20 held back). */
static int heldout_init(attack_t *a, heldout *h) {
    const ls_steal_opts *o = a->o;
    int d = a->d, k = a->k;
    int64_t nh = a->n / 5, nt = a->n - nh;
    memset(h, 0, sizeof *h);
    int rc = ls_steal_data_alloc(&h->fit, nt, d, k);
    if (!rc) rc = ls_steal_data_alloc(&h->ho, nh, d, k);
    if (!rc) {
        h->wt = malloc(sizeof(float) * (size_t)a->n);
        h->zm = malloc(sizeof(float) * (size_t)nh * k);
        h->zc = malloc(sizeof(float) * (size_t)nh * k);
        h->lab = malloc(sizeof(int32_t) * (size_t)nh);
        if (!h->wt || !h->zm || !h->zc || !h->lab) rc = ls_err(LS_ENOMEM, "steal: out of memory");
    }
    if (rc) {
        heldout_free(h);
        return rc;
    }
    ls_steal_data *fit = &h->fit, *ho = &h->ho;
    fit->lo = ho->lo = o->lo, fit->hi = ho->hi = o->hi;
    fit->c = ho->c = o->c, fit->h = ho->h = o->h, fit->w = ho->w = o->w;
    for (int64_t i = 0, f = 0, b = 0; i < a->n; i++) {
        ls_steal_data *dst = i % 5 == 4 ? ho : fit; /* n / 5 = nh such rows */
        int64_t j = dst == ho ? b++ : f++;
        memcpy(dst->x + j * d, a->x + i * d, sizeof(float) * (size_t)d);
        dst->y[j] = a->y[i];
        h->wt[i] = i % 5 == 4 ? 0.0f : 1.0f;
    }
    if ((rc = net_new(a, o->seed + 99)) || (rc = fit_net(a, h->wt, final_epochs(o), 0.02f, o->seed + 5, NULL)) ||
        (rc = ls_mlp_logits(&a->net, ho->x, nh, h->zm))) {
        heldout_free(h);
        return rc;
    }
    ls_softmax_rows(h->zm, nh, k);
    for (int64_t i = 0; i < nh; i++) h->lab[i] = argmax_row(h->zm + i * k, k);
    h->mlp_acc = ls_steal_label_accuracy(h->lab, ho);
    return LS_OK;
}

/* The CNN's test on h: a CNN trained on the four fifths, its softmax times the CNN's weight
 * added to the MLP's (sum_test). *keep, the counts and the sum's held-back accuracy out. */
static int cnn_test(const attack_t *a, heldout *h, int *keep, int64_t *better, int64_t *worse, double *acc) {
    const ls_steal_opts *o = a->o;
    ls_cnn cnn;
    LS_TRY(cnn_train(a, h->fit.x, h->fit.y, h->fit.n, o->seed + 313, &cnn));
    int rc = ls_cnn_logits(&cnn, h->ho.x, h->ho.n, h->zc);
    ls_cnn_free(&cnn);
    if (rc) return rc;
    ls_softmax_rows(h->zc, h->ho.n, a->k);
    float cw = (float)(o->cnn_weight > 0 ? o->cnn_weight : LS_STEAL_CNN_WEIGHT);
    *keep = sum_test(h->zm, h->zc, cw, &h->ho, a->k, h->lab, better, worse);
    *acc = ls_steal_label_accuracy(h->lab, &h->ho);
    return LS_OK;
}

/* The tree member's test on h: a CART fitted on the four fifths, its accuracy on the fifth held
 * back (*acc); 1 (keep) when it predicts those rows better than the MLP alone, else 0, or a
 * negative LS_E* code. */
static int cart_test(const heldout *h, double *acc) {
    ls_victim_opts vo;
    ls_victim *cart = NULL;
    ls_victim_opts_default(&vo, LS_VICTIM_TREE);
    int rc = ls_victim_train(&vo, &h->fit, &cart);
    if (!rc) rc = ls_victim_accuracy(cart, &h->ho, acc);
    ls_victim_free(cart);
    return rc ? rc : *acc > h->mlp_acc;
}

/* opts.cnn_rank, once the seeds are answered: with opts.tree_member, first the CART's test on
 * them (a CART that wins there would be kept in a replica that the CNN's ranking does not
 * serve: no ranking), then the CNN's; kept, a CNN fitted on every answer ranks the rounds'
 * candidates with the MLP (a->rank_cnn). The tests' MLP is then a->net, which the caller
 * replaces. */
static int cnn_rank_test(attack_t *a, ls_steal_result *res) {
    if (a->n / 5 < 20) return LS_OK;
    heldout h;
    int keep = 0, rc = LS_OK;
    LS_TRY(heldout_init(a, &h));
    res->cnn_rank_answers = a->n, res->cnn_rank_mlp_acc = h.mlp_acc;
    if (a->o->tree_member) {
        if ((rc = cart_test(&h, &res->cnn_rank_cart_acc)) < 0) {
            heldout_free(&h);
            return rc;
        }
        res->cnn_rank_cart_tested = 1, res->cnn_rank_cart_won = rc, rc = LS_OK;
    }
    if (!res->cnn_rank_cart_won) {
        rc = cnn_test(a, &h, &keep, &res->cnn_rank_better, &res->cnn_rank_worse, &res->cnn_rank_acc);
        res->cnn_rank_tested = !rc;
    }
    heldout_free(&h);
    if (rc || !keep) return rc;
    LS_TRY(cnn_train(a, a->x, a->y, a->n, a->o->seed + 317, &a->rank_cnn));
    a->have_rank_cnn = 1;
    res->cnn_rank_kept = 1;
    return LS_OK;
}

/* Before a round after the first: the ranking CNN refitted (warm) for opts.cnn_rank epochs on
 * every answer so far. */
static int cnn_rank_refit(attack_t *a) {
    const ls_steal_opts *o = a->o;
    ls_mlp_fit_opts fo =
        ls_cnn_fit_opts(o->cnn_rank, o->lo, o->hi, o->seed + 900 + (uint64_t)a->rounds, o->verbose, "ranking cnn");
    return ls_cnn_fit(&a->rank_cnn, a->x, a->y, a->n, &fo, NULL);
}

/* The member tests (images): models other than MLPs join r only when the attacker's own data
 * says they model the victim better. 4 of every 5 answers train an MLP of the replica's shape
 * (as member 0 is trained) and each candidate; the 5th is held back.
 *   opts.tree_member: a CART of the queries, kept when it alone predicts the 5th better than
 *     the MLP. Meant to keep it for tree victims, whose natural inputs it and its average with
 *     the members extrapolate to better, and drop it for the others, which it costs.
 *   opts.cnn_member: a small CNN, kept when the MLP's softmax plus the CNN's predicts the 5th
 *     better than the MLP's alone, by more than two standard errors of the paired difference. Its convolutions
 * extrapolate from the prior's images to natural ones another way than the MLPs do, which helps where the victim's
 * decisions are not smooth in the pixels (trees, forests, nearest neighbours) and costs where an MLP already matches
 * the victim (linear and MLP victims).
 *   opts.linear_member: a softmax regression, kept by the same test as the CNN. Where the victim's
 * classes are split by hyperplanes (linear victims) it extrapolates from the prior's images to
 * natural ones as the victim does, which an MLP fitted on the same answers does only near them.
 * A kept member is refitted on every answer. */
static int member_tests(attack_t *a, ls_replica *r, ls_steal_result *res) {
    const ls_steal_opts *o = a->o;
    int d = a->d, k = a->k;
    int64_t nh = a->n / 5;
    if (nh < 20) return LS_OK;
    heldout h;
    LS_TRY(heldout_init(a, &h));
    res->mlp_acc = h.mlp_acc;
    int rc = LS_OK;
    ls_steal_data all = {.n = a->n, .d = d, .k = k, .c = o->c, .h = o->h, .w = o->w, .lo = o->lo, .hi = o->hi};
    all.x = a->x, all.y = a->y;
    if (o->tree_member) {
        if ((rc = cart_test(&h, &res->tree_acc)) < 0) goto out;
        res->tree_tested = 1;
        if (rc) { /* kept: refitted on every answer */
            ls_victim_opts vo;
            ls_victim_opts_default(&vo, LS_VICTIM_TREE);
            if ((rc = ls_victim_train(&vo, &all, &r->tree))) goto out;
            res->tree_kept = 1;
        }
        rc = LS_OK;
    }
    if (o->cnn_member) {
        int keep = 0;
        if ((rc = cnn_test(a, &h, &keep, &res->cnn_better, &res->cnn_worse, &res->cnn_acc))) goto out;
        res->cnn_tested = 1;
        if (keep) { /* refitted on every answer */
            if (!(r->cnn = calloc(1, sizeof *r->cnn))) {
                rc = ls_err(LS_ENOMEM, "steal: out of memory");
                goto out;
            }
            if ((rc = cnn_train(a, a->x, a->y, a->n, o->seed + 317, r->cnn))) {
                free(r->cnn);
                r->cnn = NULL;
                goto out;
            }
            r->cnn_weight = (float)(o->cnn_weight > 0 ? o->cnn_weight : LS_STEAL_CNN_WEIGHT);
            res->cnn_kept = 1;
        }
    }
    if (o->linear_member) { /* fitted on the same 4 of 5 (wt) */
        ls_mlp lin;
        if ((rc = linear_train(a, h.wt, o->seed + 331, &lin))) goto out;
        rc = ls_mlp_logits(&lin, h.ho.x, nh, h.zc);
        ls_mlp_free(&lin);
        if (rc) goto out;
        ls_softmax_rows(h.zc, nh, k);
        int keep = sum_test(h.zm, h.zc, 1.0f, &h.ho, k, h.lab, &res->linear_better, &res->linear_worse);
        res->linear_tested = 1, res->linear_acc = ls_steal_label_accuracy(h.lab, &h.ho);
        if (keep) { /* refitted on every answer */
            if (!(r->lin = malloc(sizeof *r->lin))) {
                rc = ls_err(LS_ENOMEM, "steal: out of memory");
                goto out;
            }
            if ((rc = linear_train(a, NULL, o->seed + 337, r->lin))) {
                free(r->lin);
                r->lin = NULL;
                goto out;
            }
            res->linear_kept = 1;
        }
    }
out:
    heldout_free(&h);
    return rc;
}

/* opts.distill: the replica's members replaced by new ones (other initialisations and
 * orders) trained on every answer plus u = distill x answers draws of the prior that cost no
 * query: 70 % fresh objects at the final style shares, 30 % variations of answered ones (as in a
 * round's pool), each the replica's own output as its soft target: the members' mean softmax,
 * and when the CNN member is kept, that plus its softmax times its weight w, over 1 + w. The
 * draws carry the replica's decisions to regions of the prior between the answers, where each
 * member alone extrapolates its own way; with the CNN in the teacher the new members learn its
 * way there too. The CNN, the linear member and the CART, when kept, are left as they are
 * (distillation runs only without the CART; the linear member is not in the teacher). */
static int distill_members(attack_t *a, ls_replica *r, ls_steal_result *res) {
    const ls_steal_opts *o = a->o;
    int d = a->d, k = a->k;
    int64_t u = (int64_t)(o->distill * (double)a->n), n = a->n + u;
    if (u < 1) return LS_OK;
    float *x = malloc(sizeof(float) * (size_t)n * d), *t = malloc(sizeof(float) * (size_t)n * k);
    float *z = malloc(sizeof(float) * (size_t)u * k);
    ls_mlp nets[LS_REPLICA_MAX_MEMBERS];
    int made = 0, rc = LS_OK;
    if (!x || !t || !z) {
        rc = ls_err(LS_ENOMEM, "steal: out of memory for %lld distillation draws", (long long)u);
        goto out;
    }
    memcpy(x, a->x, sizeof(float) * (size_t)a->n * d);
    memcpy(t, a->p, sizeof(float) * (size_t)a->n * k);
    style_weights(a);
    for (int64_t i = 0; i < u; i++) {
        float *xi = x + (a->n + i) * d;
        obj_params P;
        if (ls_rng_uniform(&a->rng) < 0.3f)
            vary_answered(a, xi, &P);
        else
            gen_seed(a, xi, &P);
    }
    float *tu = t + a->n * k;
    memset(tu, 0, sizeof(float) * (size_t)u * k);
    for (int m = 0; m < r->members && !rc; m++) {
        rc = ls_mlp_logits(&r->net[m], x + a->n * d, u, z);
        ls_softmax_rows(z, u, k);
        for (int64_t i = 0; i < u * k && !rc; i++) tu[i] += z[i] / (float)r->members;
    }
    if (r->cnn && !rc && !(rc = ls_cnn_logits(r->cnn, x + a->n * d, u, z))) { /* ... with the kept CNN */
        ls_softmax_rows(z, u, k);
        for (int64_t i = 0; i < u * k; i++) tu[i] = (tu[i] + r->cnn_weight * z[i]) / (1.0f + r->cnn_weight);
    }
    for (int m = 0; m < r->members && !rc; m++) {
        if ((rc = net_new(a, o->seed + 7777 + 1000 * (uint64_t)m))) break;
        ls_mlp_fit_opts fo = fit_opts(a, final_epochs(o), 0.02f, o->seed + 55 + (uint64_t)m, "distill");
        if ((rc = ls_mlp_fit(&a->net, x, t, NULL, n, &fo, NULL))) break;
        nets[made++] = a->net;
        a->have_net = 0;
    }
    if (!rc) { /* every new member trained: they replace the old ones */
        for (int m = 0; m < r->members; m++) {
            ls_mlp_free(&r->net[m]);
            r->net[m] = nets[m];
        }
        res->distilled = 1;
    } else
        for (int m = 0; m < made; m++) ls_mlp_free(&nets[m]);
out:
    free(x);
    free(t);
    free(z);
    return rc;
}

int ls_steal_run(const ls_steal_opts *o, ls_steal_oracle oracle, ls_replica **out, ls_steal_result *res) {
    *out = NULL;
    memset(res, 0, sizeof *res);
    /* each side bounded before the product, which could otherwise overflow int */
    if (o->c <= 0 || o->h <= 0 || o->w <= 0 || o->c > (1 << 22) || o->h > (1 << 22) || o->w > (1 << 22) ||
        (int64_t)o->c * o->h > (1 << 22) || (int64_t)o->c * o->h * o->w > (1 << 22))
        return ls_err(LS_EINVAL, "steal: bad input shape (C*H*W must be in [1, 2^22])");
    int d = o->c * o->h * o->w;
    if (o->k < 2 || o->k > 64) return ls_err(LS_EINVAL, "steal: classes must be 2..64, got %d", o->k);
    if (!(o->hi > o->lo)) return ls_err(LS_EINVAL, "steal: input range must have lo < hi");
    if (o->budget < 1) return ls_err(LS_EINVAL, "steal: budget must be >= 1");
    if (o->members < 1 || o->members > LS_REPLICA_MAX_MEMBERS)
        return ls_err(LS_EINVAL, "steal: replica members must be 1..%d, got %d", LS_REPLICA_MAX_MEMBERS, o->members);
    if (!(o->distill >= 0 && o->distill <= 8))
        return ls_err(LS_EINVAL, "steal: distillation draws per answer must be in [0, 8], got %g", o->distill);
    if (o->cnn_shift < 0 || o->cnn_shift > 8 || o->cnn_epochs < 0 || o->cnn_epochs > 1000)
        return ls_err(LS_EINVAL,
                      "steal: the CNN member's shift must be 0..8 pixels and its epochs 0..1000, got %d and %d",
                      o->cnn_shift, o->cnn_epochs);
    if (o->cnn_rank < 0 || o->cnn_rank > LS_STEAL_CNN_RANK_MAX || (o->cnn_rank && !o->cnn_member))
        return ls_err(LS_EINVAL, "steal: ranking with the CNN takes 0..%d epochs a round and the CNN member, got %d%s",
                      LS_STEAL_CNN_RANK_MAX, o->cnn_rank, o->cnn_member ? "" : " without it");
    if (!(o->cnn_weight >= 0 && o->cnn_weight <= 10))
        return ls_err(LS_EINVAL, "steal: the CNN member's weight must be in [0, 10] (0: %g), got %g",
                      LS_STEAL_CNN_WEIGHT, o->cnn_weight);
    if (o->strategy == LS_STEAL_NATURAL && (!o->natural || o->natural->d != d))
        return ls_err(LS_EINVAL, "steal: the natural-data reference needs samples of %d features", d);
    double t0 = ls_now();
    attack_t a = {0};
    a.o = o;
    a.oracle = oracle;
    a.d = d;
    a.k = o->k;
    a.cap = o->budget;
    a.x = malloc(sizeof(float) * (size_t)a.cap * d);
    a.y = malloc(sizeof(int32_t) * (size_t)a.cap);
    a.p = malloc(sizeof(float) * (size_t)a.cap * o->k);
    a.mask = malloc((size_t)o->h * o->w);
    a.shade = malloc(sizeof(float) * (size_t)o->h * o->w);
    int objects = is_image(o) && o->strategy == LS_STEAL_SYNTH;
    if (objects) {
        a.par = malloc(sizeof(obj_params) * (size_t)a.cap);
        a.has_par = calloc((size_t)a.cap, 1);
    }
    int rc = LS_OK;
    if (!a.x || !a.y || !a.p || !a.mask || !a.shade || (objects && (!a.par || !a.has_par))) {
        rc = ls_err(LS_ENOMEM, "steal: out of memory for %lld queries", (long long)a.cap);
        goto done;
    }
    ls_rng_seed(&a.rng, o->seed);
    if (o->verbose) ls_progress_start(&a.pg, "steal", o->budget);
    float *buf = malloc(sizeof(float) * (size_t)(o->budget < 4096 ? o->budget : 4096) * d);
    if (!buf) {
        rc = ls_err(LS_ENOMEM, "steal: out of memory");
        goto done;
    }
    if (o->strategy == LS_STEAL_RANDOM || o->strategy == LS_STEAL_NATURAL) {
        int64_t nat = 0;
        while (a.n < o->budget && !a.failed) {
            int64_t b = o->budget - a.n < 4096 ? o->budget - a.n : 4096;
            for (int64_t i = 0; i < b; i++) {
                if (o->strategy == LS_STEAL_RANDOM) {
                    for (int j = 0; j < d; j++) buf[i * d + j] = o->lo + (o->hi - o->lo) * ls_rng_uniform(&a.rng);
                } else {
                    memcpy(buf + i * d, o->natural->x + (nat % o->natural->n) * d, sizeof(float) * d);
                    nat++;
                }
            }
            ask(&a, buf, b);
        }
        a.rounds = 1;
    } else {
        /* Seeds: 30% of the budget for images, 10% for tables (at least 20 per class). */
        int64_t n0 = is_image(o) ? o->budget * 3 / 10 : o->budget / 10;
        if (n0 < 20 * o->k) n0 = 20 * o->k;
        if (n0 > o->budget) n0 = o->budget;
        for (int s = 0; s < NSTYLE; s++) a.style_w[s] = 1.0f / NSTYLE;
        int64_t probe = n0 * 4 / 10; /* the first 40 % of the seeds probe every style evenly */
        for (int64_t s = 0; s < n0 && !a.failed;) {
            int64_t b = n0 - s < 4096 ? n0 - s : 4096;
            if (s < probe && s + b > probe) b = probe - s;
            if (s >= probe) style_weights(&a);
            s += b;
            for (int64_t i = 0; i < b; i++) gen_seed(&a, buf + i * d, a.par ? &a.par[a.n + i] : NULL);
            int64_t first = a.n;
            ask(&a, buf, b);
            if (a.par) memset(a.has_par + first, 1, (size_t)(a.n - first));
        }
        a.rounds = 1;
        if (objects && o->cnn_rank && !a.failed) rc = cnn_rank_test(&a, res);
        if (!rc) rc = net_new(&a, o->seed + 17);
        /* Rounds grow with what is known. Images: many small ones (1/40 of the budget to
         * start, each ~10% larger: 15 after the seeds at 20k), so the replica that ranks the
         * candidates is refitted often. Tables keep fewer, larger ones (1/12, ~30% larger
         * each): small rounds moved their agreement only within a seed's spread. */
        int img = is_image(o);
        int64_t rsz = o->budget / (img ? 40 : 12);
        if (rsz < 50) rsz = 50;
        while (!rc && !a.failed && a.n < o->budget && a.n > 0) {
            rc = fit_net(&a, NULL, a.rounds == 1 ? 6 : 3, 0.1f, o->seed + (uint64_t)a.rounds, NULL);
            if (!rc && a.have_rank_cnn && a.rounds > 1) rc = cnn_rank_refit(&a);
            if (rc) break;
            res->cnn_rank_rounds += a.have_rank_cnn;
            style_weights(&a);
            int64_t want = o->budget - a.n < rsz ? o->budget - a.n : rsz;
            int64_t before = a.n;
            rc = round_synth(&a, want);
            a.rounds++;
            if (a.n == before) break; /* nothing more could be asked: stop rather than spin */
            rsz = rsz * (img ? 11 : 13) / 10;
        }
    }
    free(buf);
    if (o->verbose) ls_progress_end(&a.pg);
    if (rc) goto done;
    if (a.n == 0) {
        rc = ls_err(LS_EPEER, "steal: no answer gathered: %s", a.err[0] ? a.err : "empty budget");
        goto done;
    }
    /* Final replica: fresh weights, trained on everything gathered. Several members from
     * different initialisations, averaged: each fits the answers about equally well but
     * extrapolates differently to inputs unlike the queries (natural images), and the average
     * of those extrapolations agrees with the victim more often than any one of them. */
    ls_replica *r = calloc(1, sizeof *r);
    if (!r) {
        rc = ls_err(LS_ENOMEM, "steal: out of memory");
        goto done;
    }
    for (int m = 0; m < o->members && !rc; m++) {
        rc = net_new(&a, o->seed + 99 + 1000 * (uint64_t)m);
        if (rc) break;
        rc = fit_net(&a, NULL, final_epochs(o), 0.02f, o->seed + 5 + (uint64_t)m, "replica");
        if (rc) break;
        r->net[m] = a.net;
        r->members = m + 1;
        a.have_net = 0;
    }
    if (rc) {
        ls_replica_free(r);
        goto done;
    }
    if (objects && (o->tree_member || o->cnn_member || o->linear_member) && (rc = member_tests(&a, r, res))) {
        ls_replica_free(r);
        goto done;
    }
    if (objects && o->distill > 0 && !r->tree && (rc = distill_members(&a, r, res))) {
        ls_replica_free(r);
        goto done;
    }
    r->c = o->c;
    r->h = o->h;
    r->w = o->w;
    r->k = o->k;
    r->lo = o->lo;
    r->hi = o->hi;
    *out = r;
    res->queries = a.n;
    res->rounds = a.rounds;
    res->used_proba = a.got_proba;
    res->stopped_early = a.failed;
    snprintf(res->error, sizeof res->error, "%s", a.err);
    memcpy(res->class_count, a.count, sizeof a.count);
    if (a.par) {
        int64_t per[NSTYLE] = {0}, blends = 0;
        for (int64_t i = 0; i < a.n; i++)
            if (a.has_par[i])
                per[a.par[i].style]++;
            else
                blends++;
        for (int s = 0; s < NSTYLE; s++) res->style_share[s] = (double)per[s] / (double)a.n;
        res->blend_share = (double)blends / (double)a.n;
    }
done:
    res->seconds = ls_now() - t0;
    if (a.have_net) ls_mlp_free(&a.net);
    if (a.have_rank_cnn) ls_cnn_free(&a.rank_cnn);
    free(a.x);
    free(a.y);
    free(a.p);
    free(a.mask);
    free(a.shade);
    free(a.par);
    free(a.has_par);
    return rc;
}

/* ---------------------------------------------------------------- replica */

void ls_replica_free(ls_replica *r) {
    if (!r) return;
    for (int m = 0; m < r->members; m++) ls_mlp_free(&r->net[m]);
    ls_victim_free(r->tree);
    ls_replica_drop_cnn(r);
    ls_replica_drop_linear(r);
    free(r);
}

void ls_replica_info(const ls_replica *r, int *d, int *k) {
    if (d) *d = r->net[0].sizes[0];
    if (k) *k = r->k;
}

int ls_replica_predict(const ls_replica *r, const float *x, int64_t n, int32_t *labels) {
    int k = r->k, d = r->net[0].sizes[0];
    enum { CH = 1024 };
    float *z = malloc(sizeof(float) * CH * (size_t)k), *avg = malloc(sizeof(float) * CH * (size_t)k);
    if (!z || !avg) {
        free(z);
        free(avg);
        return ls_err(LS_ENOMEM, "replica: out of memory");
    }
    int rc = LS_OK;
    for (int64_t s = 0; s < n && !rc; s += CH) {
        int b = (int)(n - s < CH ? n - s : CH);
        memset(avg, 0, sizeof(float) * (size_t)b * k);
        for (int m = 0; m < r->members && !rc; m++) {
            rc = ls_mlp_logits(&r->net[m], x + s * d, b, z);
            ls_softmax_rows(z, b, k);
            for (int i = 0; i < b * k; i++) avg[i] += z[i];
        }
        for (int i = 0; i < b * k; i++) avg[i] /= (float)r->members;
        if (r->tree && !rc) { /* the members' mean plus the tree's leaf probabilities */
            rc = ls_victim_predict_proba(r->tree, x + s * d, b, z);
            for (int i = 0; i < b * k && !rc; i++) avg[i] += z[i];
        }
        if (r->cnn && !rc) { /* ... plus the CNN's softmax times its weight */
            rc = ls_cnn_logits(r->cnn, x + s * d, b, z);
            ls_softmax_rows(z, b, k);
            for (int i = 0; i < b * k && !rc; i++) avg[i] += r->cnn_weight * z[i];
        }
        if (r->lin && !rc) { /* ... plus the linear member's softmax */
            rc = ls_mlp_logits(r->lin, x + s * d, b, z);
            ls_softmax_rows(z, b, k);
            for (int i = 0; i < b * k && !rc; i++) avg[i] += z[i];
        }
        for (int i = 0; i < b && !rc; i++) {
            int best = 0;
            for (int j = 1; j < k; j++)
                if (avg[i * k + j] > avg[i * k + best]) best = j;
            labels[s + i] = best;
        }
    }
    free(z);
    free(avg);
    return rc;
}

/* Tensor name of layer l's weights ('w') or bias ('b') of member m: member 0 keeps the
 * single-network names, so one-member files are what earlier versions wrote and read. */
static void member_name(char *buf, size_t n, int m, int l, char wb) {
    if (m == 0)
        snprintf(buf, n, "fc%d.%c", l, wb);
    else
        snprintf(buf, n, "m%d.fc%d.%c", m, l, wb);
}

int ls_replica_save(const ls_replica *r, const char *path, const char *meta_json) {
    ls_st_writer *w;
    LS_TRY(ls_st_writer_init(&w));
    int rc = LS_OK;
    int32_t arch[4] = {0}; /* the writer keeps pointers until it writes */
    if (r->tree) { /* the CART member: its node arrays and leaf table */
        ls_tree_view t;
        rc = ls_victim_tree_view(r->tree, &t);
        int64_t ns[1] = {t.nnodes}, ps[2] = {t.nleaves, r->k};
        if (!rc) rc = ls_st_writer_add(w, "tree.feat", LS_DT_I32, 1, ns, t.feat);
        if (!rc) rc = ls_st_writer_add(w, "tree.left", LS_DT_I32, 1, ns, t.left);
        if (!rc) rc = ls_st_writer_add(w, "tree.right", LS_DT_I32, 1, ns, t.right);
        if (!rc) rc = ls_st_writer_add(w, "tree.thr", LS_DT_F32, 1, ns, t.thr);
        if (!rc) rc = ls_st_writer_add(w, "tree.probs", LS_DT_F32, 2, ps, t.probs);
    }
    if (r->cnn && !rc) { /* the CNN member: its widths and its parameters in ls_cnn order */
        arch[0] = r->cnn->c1, arch[1] = r->cnn->c2, arch[2] = r->cnn->ks, arch[3] = r->cnn->hidden;
        int64_t as[1] = {4}, ps[1] = {r->cnn->np};
        rc = ls_st_writer_add(w, "cnn.arch", LS_DT_I32, 1, as, arch);
        if (!rc) rc = ls_st_writer_add(w, "cnn.params", LS_DT_F32, 1, ps, r->cnn->p);
    }
    if (r->lin && !rc) { /* the linear member: one layer, k x d and k */
        int64_t ws[2] = {r->k, r->lin->sizes[0]}, bs[1] = {r->k};
        rc = ls_st_writer_add(w, "lin.w", LS_DT_F32, 2, ws, r->lin->W[0]);
        if (!rc) rc = ls_st_writer_add(w, "lin.b", LS_DT_F32, 1, bs, r->lin->b[0]);
    }
    for (int m = 0; m < r->members && !rc; m++) {
        const ls_mlp *net = &r->net[m];
        for (int l = 0; l < net->nl && !rc; l++) {
            int64_t ws[2] = {net->sizes[l + 1], net->sizes[l]}, bs[1] = {net->sizes[l + 1]};
            char nm[32];
            member_name(nm, sizeof nm, m, l, 'w');
            rc = ls_st_writer_add(w, nm, LS_DT_F32, 2, ws, net->W[l]);
            member_name(nm, sizeof nm, m, l, 'b');
            if (!rc) rc = ls_st_writer_add(w, nm, LS_DT_F32, 1, bs, net->b[l]);
        }
    }
    char meta[512], cw[48] = "";
    if (r->cnn) snprintf(cw, sizeof cw, ",\"cnn_weight\":%.9g", r->cnn_weight);
    snprintf(meta, sizeof meta,
             "{\"layers\":%d,\"members\":%d,\"tree\":%d,\"cnn\":%d%s,\"linear\":%d,\"input_shape\":[%d,%d,%d],"
             "\"input_range\":[%g,%g],\"classes\":%d}",
             r->net[0].nl, r->members, r->tree != NULL, r->cnn != NULL, cw, r->lin != NULL, r->c, r->h, r->w, r->lo,
             r->hi, r->k);
    if (!rc) rc = ls_st_writer_meta(w, "llmsys.steal", meta);
    if (!rc && meta_json) rc = ls_st_writer_meta(w, "llmsys.steal.report", meta_json);
    if (!rc) rc = ls_st_writer_write(w, path);
    ls_st_writer_free(w);
    return rc;
}

/* Reads member m (layer count nl) of a replica file into net: shapes must chain, the input
 * width must match the declared shape d, and the output width the class count of member 0
 * (k, or 0 when reading member 0). */
static int load_member(ls_st_file *f, const char *path, int m, int nl, int d, int k, ls_mlp *net) {
    int sizes[MLP_MAX_LAYERS + 1];
    char nm[32];
    for (int l = 0; l < nl; l++) {
        member_name(nm, sizeof nm, m, l, 'w');
        const ls_st_tensor *t = ls_st_find(f, nm);
        if (!t || t->dtype != LS_DT_F32 || t->ndim != 2) return ls_err(LS_EFORMAT, "%s: missing or bad %s", path, nm);
        if (t->shape[0] < 1 || t->shape[0] > (1 << 20) || t->shape[1] < 1 || t->shape[1] > (1 << 20))
            return ls_err(LS_EFORMAT, "%s: %s has a size outside [1, 2^20]", path, nm);
        if (l == 0)
            sizes[0] = (int)t->shape[1];
        else if (t->shape[1] != sizes[l])
            return ls_err(LS_EFORMAT, "%s: %s does not chain", path, nm);
        sizes[l + 1] = (int)t->shape[0];
    }
    if (sizes[0] != d)
        return ls_err(LS_EFORMAT, "%s: input shape disagrees with %s", path, m ? "a member's fc0.w" : "fc0.w");
    if (k && sizes[nl] != k)
        return ls_err(LS_EFORMAT, "%s: member %d has %d classes, member 0 %d", path, m, sizes[nl], k);
    LS_TRY(ls_mlp_init(net, nl, sizes, 0));
    for (int l = 0; l < nl; l++) {
        const ls_st_tensor *t;
        int64_t ws[2] = {sizes[l + 1], sizes[l]}, bs[1] = {sizes[l + 1]};
        member_name(nm, sizeof nm, m, l, 'w');
        int rc = ls_st_expect(f, nm, LS_DT_F32, 2, ws, &t);
        if (!rc) memcpy(net->W[l], t->data, t->nbytes);
        member_name(nm, sizeof nm, m, l, 'b');
        if (!rc) rc = ls_st_expect(f, nm, LS_DT_F32, 1, bs, &t);
        if (!rc) memcpy(net->b[l], t->data, t->nbytes);
        if (rc) {
            ls_mlp_free(net);
            return rc;
        }
    }
    return LS_OK;
}

/* The CART member of a replica file, when its metadata says "tree": 1: five tensors whose
 * shapes agree with each other and with r's classes, checked by ls_victim_tree_from. */
static int load_tree(ls_st_file *f, const cJSON *meta, const char *path, ls_replica *r) {
    int has = 0;
    LS_TRY(ls_json_get_int(meta, "tree", 0, &has)); /* absent: 0 */
    if (has != 0 && has != 1) return ls_err(LS_EFORMAT, "%s: \"tree\" must be 0 or 1, got %d", path, has);
    if (!has) return LS_OK;
    const ls_st_tensor *t = ls_st_find(f, "tree.feat"), *p = ls_st_find(f, "tree.probs");
    if (!t || t->ndim != 1 || t->shape[0] < 1 || t->shape[0] > (1 << 26))
        return ls_err(LS_EFORMAT, "%s: missing or bad tree.feat", path);
    if (!p || p->ndim != 2 || p->shape[1] != r->k || p->shape[0] < 1 || p->shape[0] > t->shape[0])
        return ls_err(LS_EFORMAT, "%s: missing or bad tree.probs (leaves x %d classes)", path, r->k);
    int64_t ns[1] = {t->shape[0]}, ps[2] = {p->shape[0], r->k};
    const ls_st_tensor *feat, *left, *right, *thr, *probs;
    LS_TRY(ls_st_expect(f, "tree.feat", LS_DT_I32, 1, ns, &feat));
    LS_TRY(ls_st_expect(f, "tree.left", LS_DT_I32, 1, ns, &left));
    LS_TRY(ls_st_expect(f, "tree.right", LS_DT_I32, 1, ns, &right));
    LS_TRY(ls_st_expect(f, "tree.thr", LS_DT_F32, 1, ns, &thr));
    LS_TRY(ls_st_expect(f, "tree.probs", LS_DT_F32, 2, ps, &probs));
    ls_tree_view v = {(int32_t)ns[0], (int32_t)ps[0], feat->data, left->data, right->data, thr->data, probs->data};
    return ls_victim_tree_from(&v, r->c * r->h * r->w, r->k, r->c, r->h, r->w, r->lo, r->hi, path, &r->tree);
}

/* The CNN member of a replica file, when its metadata says "cnn": 1: cnn.arch (4 widths) and
 * cnn.params holding exactly the parameters those widths give r's shape and classes, counted
 * before anything is allocated; "cnn_weight" in (0, 10] (absent: 1, as files before it were read). */
static int load_cnn(ls_st_file *f, const cJSON *meta, const char *path, ls_replica *r) {
    int has = 0;
    double cw = 1;
    LS_TRY(ls_json_get_int(meta, "cnn", 0, &has)); /* absent: 0 */
    if (has != 0 && has != 1) return ls_err(LS_EFORMAT, "%s: \"cnn\" must be 0 or 1, got %d", path, has);
    if (!has) return LS_OK;
    if (ls_json_get_double(meta, "cnn_weight", 1, &cw) != LS_OK || !(cw > 0 && cw <= 10))
        return ls_err(LS_EFORMAT, "%s: \"cnn_weight\" must be a number in (0, 10]", path);
    r->cnn_weight = (float)cw;
    const ls_st_tensor *arch, *p = ls_st_find(f, "cnn.params");
    int64_t as[1] = {4};
    LS_TRY(ls_st_expect(f, "cnn.arch", LS_DT_I32, 1, as, &arch));
    if (!p || p->dtype != LS_DT_F32 || p->ndim != 1) return ls_err(LS_EFORMAT, "%s: missing or bad cnn.params", path);
    int32_t a[4];
    memcpy(a, arch->data, sizeof a);
    if (ls_cnn_param_count(r->c, r->h, r->w, r->k, a[0], a[1], a[2], a[3]) != (double)p->shape[0])
        return ls_err(LS_EFORMAT, "%s: cnn.params holds %lld values, not what cnn.arch's widths need", path,
                      (long long)p->shape[0]);
    if (!(r->cnn = calloc(1, sizeof *r->cnn))) return ls_err(LS_ENOMEM, "%s: out of memory", path);
    int rc = ls_cnn_init(r->cnn, r->c, r->h, r->w, r->k, a[0], a[1], a[2], a[3], 0);
    if (rc) {
        char why[256]; /* ls_err writes the buffer ls_errmsg reads: copy it first */
        snprintf(why, sizeof why, "%s", ls_errmsg());
        free(r->cnn);
        r->cnn = NULL;
        return ls_err(LS_EFORMAT, "%s: bad cnn member: %s", path, why);
    }
    memcpy(r->cnn->p, p->data, sizeof(float) * (size_t)r->cnn->np);
    return LS_OK;
}

/* The linear member (lin.w, lin.b) when "linear" is 1; absent or 0: none. */
static int load_linear(ls_st_file *f, const cJSON *meta, const char *path, ls_replica *r) {
    int has = 0;
    LS_TRY(ls_json_get_int(meta, "linear", 0, &has)); /* absent: 0 */
    if (has != 0 && has != 1) return ls_err(LS_EFORMAT, "%s: \"linear\" must be 0 or 1, got %d", path, has);
    if (!has) return LS_OK;
    int d = r->net[0].sizes[0], sizes[2] = {d, r->k};
    int64_t ws[2] = {r->k, d}, bs[1] = {r->k};
    const ls_st_tensor *tw, *tb;
    LS_TRY(ls_st_expect(f, "lin.w", LS_DT_F32, 2, ws, &tw));
    LS_TRY(ls_st_expect(f, "lin.b", LS_DT_F32, 1, bs, &tb));
    if (!(r->lin = malloc(sizeof *r->lin))) return ls_err(LS_ENOMEM, "%s: out of memory", path);
    if (ls_mlp_init(r->lin, 1, sizes, 0)) {
        free(r->lin);
        r->lin = NULL;
        return ls_err(LS_ENOMEM, "%s: out of memory for the linear member", path);
    }
    memcpy(r->lin->W[0], tw->data, tw->nbytes);
    memcpy(r->lin->b[0], tb->data, tb->nbytes);
    return LS_OK;
}

int ls_replica_has_tree(const ls_replica *r) { return r->tree != NULL; }
int ls_replica_has_cnn(const ls_replica *r) { return r->cnn != NULL; }
int ls_replica_has_linear(const ls_replica *r) { return r->lin != NULL; }

void ls_replica_drop_cnn(ls_replica *r) {
    if (!r->cnn) return;
    ls_cnn_free(r->cnn);
    free(r->cnn);
    r->cnn = NULL;
}

void ls_replica_drop_linear(ls_replica *r) {
    if (!r->lin) return;
    ls_mlp_free(r->lin);
    free(r->lin);
    r->lin = NULL;
}

int ls_replica_load(const char *path, ls_replica **out) {
    *out = NULL;
    ls_st_file *f;
    LS_TRY(ls_st_open(path, &f));
    const char *meta = ls_st_meta(f, "llmsys.steal");
    cJSON *j = NULL;
    int rc = meta ? ls_json_parse(meta, strlen(meta), path, &j)
                  : ls_err(LS_EFORMAT, "%s: not a replica (no llmsys.steal metadata)", path);
    ls_replica *r = NULL;
    if (rc) goto done;
    int nl = 0, members = 1;
    rc = ls_json_get_int(j, "layers", 0, &nl);
    if (!rc && (nl < 1 || nl > MLP_MAX_LAYERS)) rc = ls_err(LS_EFORMAT, "%s: %d layers", path, nl);
    /* Files written before ensembles have no "members": one network. */
    if (!rc && cJSON_GetObjectItemCaseSensitive(j, "members")) rc = ls_json_get_int(j, "members", 0, &members);
    if (!rc && (members < 1 || members > LS_REPLICA_MAX_MEMBERS))
        rc = ls_err(LS_EFORMAT, "%s: %d members (1..%d)", path, members, LS_REPLICA_MAX_MEMBERS);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "input_shape");
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(j, "input_range");
    if (!rc && (cJSON_GetArraySize(shape) != 3 || cJSON_GetArraySize(range) != 2))
        rc = ls_err(LS_EFORMAT, "%s: bad input_shape/input_range metadata", path);
    if (!rc) { /* the range queries were drawn from: finite floats, low below high */
        const cJSON *lo = cJSON_GetArrayItem(range, 0), *hi = cJSON_GetArrayItem(range, 1);
        if (!cJSON_IsNumber(lo) || !cJSON_IsNumber(hi) || !(fabs(lo->valuedouble) <= FLT_MAX) ||
            !(fabs(hi->valuedouble) <= FLT_MAX) || !(lo->valuedouble < hi->valuedouble))
            rc = ls_err(LS_EFORMAT, "%s: bad input_range metadata (finite, low < high)", path);
    }
    if (rc) goto done;
    r = calloc(1, sizeof *r);
    if (!r) {
        rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    r->c = cJSON_GetArrayItem(shape, 0)->valueint;
    r->h = cJSON_GetArrayItem(shape, 1)->valueint;
    r->w = cJSON_GetArrayItem(shape, 2)->valueint;
    r->lo = (float)cJSON_GetArrayItem(range, 0)->valuedouble;
    r->hi = (float)cJSON_GetArrayItem(range, 1)->valuedouble;
    int64_t d = 0;
    if (r->c <= 0 || r->h <= 0 || r->w <= 0 || r->c > (1 << 22) || r->h > (1 << 22) || r->w > (1 << 22) ||
        (int64_t)r->c * r->h > (1 << 22) || (d = (int64_t)r->c * r->h * r->w) > (1 << 22)) {
        rc = ls_err(LS_EFORMAT, "%s: bad input_shape metadata", path);
        goto done;
    }
    for (int m = 0; m < members && !rc; m++) {
        rc = load_member(f, path, m, nl, (int)d, m ? r->k : 0, &r->net[m]);
        if (rc) break;
        r->members = m + 1;
        if (m == 0) r->k = r->net[0].sizes[nl];
        if (r->k < 2) rc = ls_err(LS_EFORMAT, "%s: %d output classes (at least 2)", path, r->k);
    }
    if (!rc) rc = load_tree(f, j, path, r);
    if (!rc) rc = load_cnn(f, j, path, r);
    if (!rc) rc = load_linear(f, j, path, r);
done:
    cJSON_Delete(j);
    ls_st_close(f);
    if (rc)
        ls_replica_free(r);
    else
        *out = r;
    return rc;
}

int ls_steal_agreement(const ls_replica *r, const ls_steal_data *test, const int32_t *vlabels, double *agreement,
                       double *accuracy) {
    if (test->d != r->net[0].sizes[0])
        return ls_err(LS_EINVAL, "replica expects %d features, test data has %d", r->net[0].sizes[0], test->d);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)(test->n ? test->n : 1));
    if (!lab) return ls_err(LS_ENOMEM, "agreement: out of memory");
    int rc = ls_replica_predict(r, test->x, test->n, lab);
    if (!rc) {
        int64_t ag = 0, ac = 0;
        for (int64_t i = 0; i < test->n; i++) {
            ag += vlabels && lab[i] == vlabels[i];
            ac += lab[i] == test->y[i];
        }
        if (agreement) *agreement = test->n ? (double)ag / test->n : 0;
        if (accuracy) *accuracy = test->n ? (double)ac / test->n : 0;
    }
    free(lab);
    return rc;
}
