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

/* Prefill GEMM Y (M, rows) = X (M, cols) · Wᵀ for 8/4/3 bits on AVX-512 VNNI: int8
 * activations per (token, weight group) times int8 codes, int32 per group
 * (prefill_avx512.c). Call only when the CPU has LS_ISA_AVX512. */
void ls_quant_prefill_avx512(const ls_qmat *q, const float *X, int M, float *Y);

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
