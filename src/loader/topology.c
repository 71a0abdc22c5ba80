/* topology.c - placing a data-parallel rank's batch on the trainer's DP x PP x TP x CP grid
 * (OVERLORD's distribute(axis, group_size)): every member of a tensor-parallel group gets the
 * same batch, context-parallel ranks get their shard of every sequence (two chunks of each segment
 * in zigzag order, so causal attention costs the same on every CP rank), and pipeline stages after
 * the first get nothing. Global ranks are numbered as Megatron does: TP fastest, then CP, then DP,
 * then PP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/loader.h"
#include "llmsys/model.h"

int ls_topology_parse(const char *s, ls_topology *t) {
    *t = (ls_topology){1, 1, 1, 1};
    int seen[4] = {0};
    const char *p = s;
    while (p && *p) {
        char key[8];
        int v, n = 0;
        if (sscanf(p, "%7[a-z]=%d%n", key, &v, &n) != 2 || n == 0)
            return ls_err(LS_EINVAL, "topology '%s': expected dp=D,pp=P,tp=T,cp=C", s);
        int *dst = !strcmp(key, "dp") ? &t->dp : !strcmp(key, "pp") ? &t->pp : !strcmp(key, "tp") ? &t->tp
                 : !strcmp(key, "cp") ? &t->cp : NULL;
        if (!dst) return ls_err(LS_EINVAL, "topology '%s': unknown axis '%s' (dp, pp, tp, cp)", s, key);
        int k = (int)(dst - &t->dp);
        if (seen[k]++) return ls_err(LS_EINVAL, "topology '%s': axis '%s' given twice", s, key);
        if (v < 1 || v > 65536) return ls_err(LS_EINVAL, "topology '%s': %s=%d outside [1, 65536]", s, key, v);
        *dst = v;
        p += n;
        if (*p == ',') p++;
        else if (*p) return ls_err(LS_EINVAL, "topology '%s': expected ',' after %s=%d", s, key, v);
    }
    if ((long long)t->dp * t->pp * t->tp * t->cp > (1 << 20))
        return ls_err(LS_EINVAL, "topology '%s': more than 2^20 processes", s);
    return LS_OK;
}

int ls_topology_size(const ls_topology *t) { return t->dp * t->pp * t->tp * t->cp; }

void ls_topology_coords(const ls_topology *t, int g, ls_topology *at) {
    at->tp = g % t->tp;
    g /= t->tp;
    at->cp = g % t->cp;
    g /= t->cp;
    at->dp = g % t->dp;
    at->pp = g / t->dp;
}

/* Chunk k of 2C of a segment of len tokens: [lo, hi). */
static void chunk(int len, int C, int k, int *lo, int *hi) {
    *lo = (int)((long long)k * len / (2 * C));
    *hi = (int)((long long)(k + 1) * len / (2 * C));
}

/* The end of the segment that starts at column i of a row's doc ids d (n columns). */
static int seg_end(const int32_t *d, int n, int i) {
    int j = i;
    while (j < n && d[j] == d[i]) j++;
    return j;
}

/* Tokens CP rank c holds of row r (its two chunks of every segment). */
static int shard_len(const ls_loader_batch *b, int r, int C, int c) {
    int n = 0;
    const int32_t *d = b->doc_ids + (size_t)r * b->n_ctx;
    for (int i = 0; i < b->n_ctx;) {
        if (d[i] < 0) {
            i++;
            continue;
        }
        int j = seg_end(d, b->n_ctx, i), lo, hi, lo2, hi2;
        chunk(j - i, C, c, &lo, &hi);
        chunk(j - i, C, 2 * C - 1 - c, &lo2, &hi2);
        n += (hi - lo) + (hi2 - lo2);
        i = j;
    }
    return n;
}

int ls_loader_batch_place(const ls_topology *t, int g, const ls_loader_batch *b, ls_loader_batch *out) {
    memset(out, 0, sizeof *out);
    if (g < 0 || g >= ls_topology_size(t))
        return ls_err(LS_EINVAL, "process %d outside the topology's %d processes", g, ls_topology_size(t));
    ls_topology at;
    ls_topology_coords(t, g, &at);
    out->step = b->step;
    out->rank = b->rank;
    out->n_ranks = b->n_ranks;
    out->micro_batches = b->micro_batches;
    out->cp_rank = at.cp;
    out->cp_size = t->cp;
    if (at.pp > 0) return LS_OK; /* later pipeline stages take activations, not data */
    int C = t->cp, W = b->n_ctx;
    if (C > 1) { /* the shard's width: the longest any CP rank holds of any row, the same for all */
        W = 0;
        for (int r = 0; r < b->n_rows; r++)
            for (int c = 0; c < C; c++) {
                int n = shard_len(b, r, C, c);
                if (n > W) W = n;
            }
        if (W == 0) W = 1;
    }
    size_t cells = (size_t)b->n_rows * (size_t)W;
    out->n_rows = b->n_rows;
    out->n_ctx = W;
    out->tokens = malloc(sizeof(int32_t) * (cells ? cells : 1));
    out->doc_ids = malloc(sizeof(int32_t) * (cells ? cells : 1));
    out->row_micro = malloc(sizeof(int32_t) * (size_t)(b->n_rows ? b->n_rows : 1));
    out->segs = malloc(sizeof(ls_loader_seg) * (size_t)(b->n_segs ? b->n_segs : 1));
    out->state = malloc(b->state_len ? b->state_len : 1);
    if (C > 1) out->positions = malloc(sizeof(int32_t) * (cells ? cells : 1));
    if (!out->tokens || !out->doc_ids || !out->row_micro || !out->segs || !out->state || (C > 1 && !out->positions)) {
        ls_loader_batch_free(out);
        return ls_err(LS_ENOMEM, "placed batch of %zu tokens", cells);
    }
    memcpy(out->row_micro, b->row_micro, sizeof(int32_t) * (size_t)b->n_rows);
    memcpy(out->segs, b->segs, sizeof(ls_loader_seg) * (size_t)b->n_segs);
    memcpy(out->state, b->state, b->state_len);
    out->n_segs = b->n_segs;
    out->state_len = b->state_len;
    out->cost = b->cost;
    if (C == 1) {
        memcpy(out->tokens, b->tokens, sizeof(int32_t) * cells);
        memcpy(out->doc_ids, b->doc_ids, sizeof(int32_t) * cells);
        out->n_tokens = b->n_tokens;
        return LS_OK;
    }
    int64_t real = 0;
    for (int r = 0; r < b->n_rows; r++) {
        const int32_t *tok = b->tokens + (size_t)r * b->n_ctx, *d = b->doc_ids + (size_t)r * b->n_ctx;
        int32_t *ot = out->tokens + (size_t)r * W, *od = out->doc_ids + (size_t)r * W, *op = out->positions + (size_t)r * W;
        int o = 0;
        for (int i = 0; i < b->n_ctx;) {
            if (d[i] < 0) {
                i++;
                continue;
            }
            int j = seg_end(d, b->n_ctx, i);
            for (int half = 0; half < 2; half++) {
                int lo, hi;
                chunk(j - i, C, half ? 2 * C - 1 - at.cp : at.cp, &lo, &hi);
                for (int k = lo; k < hi; k++, o++) ot[o] = tok[i + k], od[o] = d[i + k], op[o] = i + k;
            }
            i = j;
        }
        real += o;
        for (; o < W; o++) ot[o] = LS_TOK_PAD, od[o] = -1, op[o] = -1;
    }
    out->n_tokens = real;
    return LS_OK;
}
