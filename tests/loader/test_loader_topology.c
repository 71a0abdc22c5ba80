/* test_loader_topology.c - placement of a DP rank's batch on DP x PP x TP x CP: the topology
 * string, rank coordinates against the Megatron formula, TP copies, empty later pipeline
 * stages, and CP shards that partition every row exactly once with equal causal-attention cost
 * (checked against the contiguous split, which is unbalanced). */
#include <stdlib.h>
#include <string.h>

#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "test.h"

static void test_parse(void) {
    ls_topology t;
    CHECK(ls_topology_parse("dp=4,pp=2,tp=8,cp=2", &t) == LS_OK && t.dp == 4 && t.pp == 2 && t.tp == 8 && t.cp == 2);
    CHECK(ls_topology_parse("tp=8,dp=2", &t) == LS_OK && t.dp == 2 && t.pp == 1 && t.tp == 8 && t.cp == 1);
    CHECK_EQ_INT(ls_topology_size(&t), 16);
    CHECK(ls_topology_parse("dp=0", &t) == LS_EINVAL);
    CHECK(ls_topology_parse("dp=2,dp=2", &t) == LS_EINVAL);
    CHECK(ls_topology_parse("ep=2", &t) == LS_EINVAL);
    CHECK(ls_topology_parse("dp=2;tp=2", &t) == LS_EINVAL);
    CHECK(ls_topology_parse("dp=", &t) == LS_EINVAL);
    CHECK(ls_topology_parse("dp=1024,tp=1024,cp=2", &t) == LS_EINVAL); /* 2^21 processes */
}

static void test_coords(void) {
    ls_topology t = {3, 2, 4, 2}, at;
    int seen[48] = {0};
    for (int g = 0; g < ls_topology_size(&t); g++) {
        ls_topology_coords(&t, g, &at);
        int back = ((at.pp * t.dp + at.dp) * t.cp + at.cp) * t.tp + at.tp;
        CHECK_EQ_INT(back, g);
        CHECK(at.dp < 3 && at.pp < 2 && at.tp < 4 && at.cp < 2);
        seen[back]++;
    }
    for (int g = 0; g < 48; g++) CHECK_EQ_INT(seen[g], 1);
}

/* A DP rank's batch by hand: rows of segments of the given lengths, then padding. */
static ls_loader_batch make_batch(int rows, int n_ctx, const int *seglen, int nseg_per_row) {
    ls_loader_batch b = {0};
    b.n_rows = rows;
    b.n_ctx = n_ctx;
    b.tokens = malloc(sizeof(int32_t) * (size_t)(rows * n_ctx));
    b.doc_ids = malloc(sizeof(int32_t) * (size_t)(rows * n_ctx));
    b.row_micro = calloc((size_t)rows, sizeof(int32_t));
    b.segs = calloc(1, sizeof(ls_loader_seg));
    b.state = malloc(4);
    memcpy(b.state, "blob", 4);
    b.state_len = 4;
    for (int r = 0; r < rows; r++) {
        int c = 0;
        for (int s = 0; s < nseg_per_row; s++) {
            int len = seglen[(r + s) % nseg_per_row];
            for (int k = 0; k < len && c < n_ctx; k++, c++) {
                b.tokens[r * n_ctx + c] = (r * 131 + c * 7) % 256;
                b.doc_ids[r * n_ctx + c] = s;
                b.n_tokens++;
            }
        }
        for (; c < n_ctx; c++) b.tokens[r * n_ctx + c] = LS_TOK_PAD, b.doc_ids[r * n_ctx + c] = -1;
    }
    return b;
}

/* Causal-attention cost of the tokens at columns cols of row r: each attends to the tokens of its
 * segment up to itself. */
static double cost_of(const ls_loader_batch *b, int r, const int32_t *cols, int n) {
    double c = 0;
    for (int i = 0; i < n; i++) {
        if (cols[i] < 0) continue;
        int col = cols[i], start = col;
        while (start > 0 && b->doc_ids[r * b->n_ctx + start - 1] == b->doc_ids[r * b->n_ctx + col]) start--;
        c += col - start + 1;
    }
    return c;
}

static void test_place(void) {
    const int seglen[] = {512, 100, 37, 300};
    ls_loader_batch b = make_batch(5, 1024, seglen, 4);
    ls_topology t = {2, 2, 2, 4};
    /* later pipeline stage: nothing; TP ranks: the same batch */
    ls_loader_batch o;
    ls_topology at;
    for (int g = 0; g < ls_topology_size(&t); g++) {
        ls_topology_coords(&t, g, &at);
        CHECK(ls_loader_batch_place(&t, g, &b, &o) == LS_OK);
        if (at.pp > 0) CHECK(o.n_rows == 0 && o.n_tokens == 0);
        else CHECK(o.n_rows == 5 && o.cp_rank == at.cp && o.cp_size == 4 && o.positions);
        ls_loader_batch_free(&o);
    }
    CHECK(ls_loader_batch_place(&t, 32, &b, &o) == LS_EINVAL && ls_loader_batch_place(&t, -1, &b, &o) == LS_EINVAL);
    ls_topology tp_only = {1, 1, 8, 1};
    CHECK(ls_loader_batch_place(&tp_only, 5, &b, &o) == LS_OK);
    CHECK(o.n_ctx == b.n_ctx && !o.positions && !memcmp(o.tokens, b.tokens, sizeof(int32_t) * 5 * 1024) &&
          !memcmp(o.doc_ids, b.doc_ids, sizeof(int32_t) * 5 * 1024) && o.state_len == 4);
    ls_loader_batch_free(&o);

    /* CP: the shards partition every row's tokens, widths agree, costs balance */
    const int C = 4;
    ls_topology tc = {1, 1, 1, C};
    ls_loader_batch sh[4];
    for (int c = 0; c < C; c++) CHECK(ls_loader_batch_place(&tc, c, &b, &sh[c]) == LS_OK);
    int64_t total = 0;
    double worst_zig = 0, worst_naive = 0;
    for (int r = 0; r < b.n_rows; r++) {
        int owner[1024];
        for (int k = 0; k < 1024; k++) owner[k] = -1;
        double cz[4], cn[4], sum_z = 0, sum_n = 0;
        for (int c = 0; c < C; c++) {
            CHECK_EQ_INT(sh[c].n_ctx, sh[0].n_ctx);
            const int32_t *pos = sh[c].positions + (size_t)r * sh[c].n_ctx;
            for (int k = 0; k < sh[c].n_ctx; k++) {
                if (pos[k] < 0) continue;
                CHECK(owner[pos[k]] == -1);
                owner[pos[k]] = c;
                CHECK(sh[c].tokens[r * sh[c].n_ctx + k] == b.tokens[r * b.n_ctx + pos[k]]);
                total++;
            }
            cz[c] = cost_of(&b, r, pos, sh[c].n_ctx);
            sum_z += cz[c];
            /* the contiguous split: CP rank c takes quarter c of each segment */
            int32_t cols[1024], n = 0;
            for (int i = 0; i < b.n_ctx;) {
                int d = b.doc_ids[r * b.n_ctx + i];
                if (d < 0) {
                    i++;
                    continue;
                }
                int j = i;
                while (j < b.n_ctx && b.doc_ids[r * b.n_ctx + j] == d) j++;
                for (int k = i + (j - i) * c / C; k < i + (j - i) * (c + 1) / C; k++) cols[n++] = k;
                i = j;
            }
            cn[c] = cost_of(&b, r, cols, n);
            sum_n += cn[c];
        }
        for (int k = 0; k < 1024; k++) CHECK(owner[k] >= 0 || b.doc_ids[r * 1024 + k] < 0);
        for (int c = 0; c < C; c++) {
            worst_zig = cz[c] / (sum_z / C) > worst_zig ? cz[c] / (sum_z / C) : worst_zig;
            worst_naive = cn[c] / (sum_n / C) > worst_naive ? cn[c] / (sum_n / C) : worst_naive;
        }
    }
    CHECK(total == b.n_tokens);
    /* the width is the longest shard any CP rank holds of any row: some shard fills it */
    int full = 0;
    for (int c = 0; c < C; c++)
        for (int r = 0; r < b.n_rows; r++) full |= sh[c].positions[(size_t)r * sh[c].n_ctx + sh[c].n_ctx - 1] >= 0;
    CHECK_MSG(full, "no shard fills the width %d", sh[0].n_ctx);
    /* zigzag within 2% of the mean cost (segments of >= 37 tokens in 8 chunks); contiguous: the last
     * quarter of a segment costs 7/4 of the mean */
    CHECK_MSG(worst_zig < 1.02, "zigzag max/mean %.4f", worst_zig);
    CHECK_MSG(worst_naive > 1.6, "contiguous max/mean %.4f", worst_naive);
    CHECK(sh[0].n_ctx <= b.n_ctx / C + 2 * 4); /* about a quarter of the row each */
    for (int c = 0; c < C; c++) ls_loader_batch_free(&sh[c]);
    ls_loader_batch_free(&b);
}

int main(void) {
    RUN(test_parse);
    RUN(test_coords);
    RUN(test_place);
    return TEST_RESULT();
}
