/* quant_internal.h - the run-time-dispatched SIMD kernels (kernels_body.h, built per
 * level) shared by quant.c (not public API). */
#ifndef LLMSYS_QUANT_INTERNAL_H
#define LLMSYS_QUANT_INTERNAL_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "llmsys/quant.h"

/* X rows per ls_qmat_matmul call up to which prefill runs on the row kernels' path;
 * above it, the prefill GEMM. */
#define LS_QTILE_SMALL_M 8
/* Activations prepared once per call for the integer (8/4/3-bit) fast kernels, which
 * work on pairs of 32-value blocks (np = ceil(cols_pad/64) pairs per X row):
 *   xp    M × np × 64 int8: X quantized per 32-block (ls_quant_x_i8), rearranged by
 *         ls_quant_x_pairs to match how the kernel unpacks a pair of weight blocks;
 *   xsv   M × np × 8 floats: each block's x scale, in the lanes where that block's sums land;
 *   xsum  M × ngroups: Σx per group (4/3 bits, offset term), else NULL;
 *   xcorr M × ngroups: c·(Σx - Σx̂) per group, c = 8 (4 bits) or 4 (3 bits): the int8
 *         rounding error times the code centre, for the centring term; else NULL. */
typedef struct {
    const int8_t *xp;
    const float *xsv;
    const float *xsum, *xcorr;
    int decode_rows; /* W rows per tile for one X row (ls_quant_decode_rows) */
} ls_quant_act;

/* W rows per decode tile (one X row) on this CPU: 1 on AMD, else 4 (kernels_body.h). */
int ls_quant_decode_rows(void);

/* Y[m*rows + r] for r in [r0, r1), m in [0, M). 32/16 bits: X rows padded to cols_pad in
 * Xpad; 8/4/3 bits: the prepared activations a. Every output is computed the same way
 * whatever r0, r1 and M, and identically by both levels. Call only at a level the CPU has. */
void ls_quant_rows_avx2(const ls_qmat *q, int r0, int r1, const float *Xpad, int M, float *Y, const ls_quant_act *a);
void ls_quant_rows_avx512(const ls_qmat *q, int r0, int r1, const float *Xpad, int M, float *Y, const ls_quant_act *a);
/* Rearranges int8 activations xq (M × cols_pad, natural order) and their block scales xs
 * (M × cols_pad/32) into the pair layout of ls_quant_act for a bits-bit matrix. */
void ls_quant_x_pairs(int bits, const int8_t *xq, const float *xs, int M, int cols_pad, int8_t *xp, float *xsv);
/* Activations to int8 per 32-value block: xs = absmax/127 per block (M × cols_pad/32), xq
 * (M × cols_pad) = round(x/xs); columns past cols are 0. */
void ls_quant_x_i8(const float *X, int M, int cols, int cols_pad, int8_t *xq, float *xs);
/* Dequantizes row r into out[cols_pad] (same values as the reference). */
void ls_quant_dequant_row_avx2(const ls_qmat *q, int r, float *out);
void ls_quant_dequant_row_avx512(const ls_qmat *q, int r, float *out);

/* Activations of a prefill GEMM (prefill.c): X rounded to int8 per (token, weight group),
 * absmax/127, in blocks of TW tokens: xp [MB][K4][TW][4] (4 columns of one token per
 * dword; u8: code + 128, else int8), and per [MB][G][TW]: xs = absmax/127, xsum = Σx (exact),
 * xcs = -ctr·Σx̂ (when asked for). Padding tokens: code 0, zero scales and sums. */
typedef struct {
    int TW, u8, K4, G, MB;
    uint8_t *xp;
    float *xs, *xsum;
    int32_t *xcs;
} ls_quant_xpack;
int ls_quant_pack_x(const ls_qmat *q, const float *X, int M, int TW, int u8, int want_xcs, ls_quant_xpack *p);
void ls_quant_xpack_free(ls_quant_xpack *p);

enum { LS_PF_RBMAX = 32 };
/* One block of RB weight rows and the packed activations, as a level's tile reads them:
 * w[i]: cols_pad code bytes of row i (centred levels: q - ctr, 8 bits in place; others:
 * the unsigned codes, |q| for 8 bits); wq[i]: the row's packed data (8 bits: signed codes);
 * per group: s[i] scale, c[i] = m + ctr·s (NULL for 8 bits), ws[i] = 128·Σ centred codes
 * (levels with u8 activations). */
typedef struct {
    const ls_qmat *q;
    ls_quant_xpack x;
    int RB;
    const int8_t *w[LS_PF_RBMAX], *wq[LS_PF_RBMAX];
    const float *s[LS_PF_RBMAX], *c[LS_PF_RBMAX];
    const int32_t *ws[LS_PF_RBMAX];
} ls_quant_pf;
/* A level's register tile: adds the outputs of p's RB rows for token blocks tb0..tb0+ntb-1
 * to out[RB][ntb·TW] (zeroed by the caller); called with the format's RB and ntb = TB or 1,
 * or RB = ntb = 1. */
typedef void (*ls_quant_pf_tile)(const ls_quant_pf *p, int tb0, int ntb, float *out);
typedef struct {
    int TW, u8, centred;  /* tokens per block, activations as u8, centred codes */
    int RB[3], TB[3];     /* tile per format (8, 4, 3 bits): W rows x token blocks */
    ls_quant_pf_tile tile;
    int pad;              /* the tile takes RB full rows only, at stride cols_pad from w[0] (the
                             last block padded with zero rows); else the last rows go one by one */
} ls_quant_pf_level;
/* Prefill GEMM Y (M, rows) = X (M, cols) · Wᵀ (8/4/3 bits) with a level's tile. LS_ENOMEM. */
int ls_quant_prefill_run(const ls_qmat *q, const float *X, int M, float *Y, const ls_quant_pf_level *lv);
/* The integer prefill levels: AMX-INT8 (prefill_amx.c), AVX-512 VNNI (prefill_avx512.c) and
 * AVX2 (prefill_avx2.c). */
extern const ls_quant_pf_level ls_quant_pf_amx, ls_quant_pf_avx512, ls_quant_pf_avx2;
/* The AVX-512 VNNI level with its 32 x 2 tile, and the one the avx512 level runs: that one
 * (measured faster on AMD Zen 5 and on a 5th-generation Intel Xeon), or ls_quant_pf_avx512
 * (6 x 2) with LLMSYS_PF_TILE=6x2 (other values are ignored); the choice is made once, by
 * quant.c with the AUTO level (ls_quant_reselect makes it again). */
extern const ls_quant_pf_level ls_quant_pf_avx512w;
const ls_quant_pf_level *ls_quant_pf_avx512_level(void);

/* The 32 codes (0..7) of a packed 3-bit block p as bytes: byte k takes bits 2(k/8).. of
 * byte k%8, then bit k of the block's high word as bit 2. For AVX2 (and AVX-512) code. */
__attribute__((target("avx2"))) static inline __m256i ls_quant_unpack3(const uint8_t *p) {
    int64_t lo8;
    uint32_t hw;
    memcpy(&lo8, p, 8);
    memcpy(&hw, p + 8, 4);
    __m256i l = _mm256_srlv_epi64(_mm256_set1_epi64x(lo8), _mm256_setr_epi64x(0, 2, 4, 6));
    l = _mm256_and_si256(l, _mm256_set1_epi8(3));
    __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
                                   3, 3, 3);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)hw), sel);
    __m256i bitm = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bitm), bitm), _mm256_set1_epi8(4));
    return _mm256_or_si256(l, h);
}

#endif
