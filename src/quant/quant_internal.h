/* quant_internal.h - the run-time-dispatched AVX2 kernels shared by quant.c and the
 * engine (not public API). */
#ifndef LLMSYS_QUANT_INTERNAL_H
#define LLMSYS_QUANT_INTERNAL_H

#include <stdint.h>

#include "llmsys/quant.h"

/* 1 if the CPU has AVX2, FMA and F16C (ignores LLMSYS_NO_SIMD). */
int ls_quant_cpu_fast(void);
/* Y[m*rows + r] for r in [r0, r1), m in [0, M): X rows padded to cols_pad; xsum (M ×
 * ngroups) holds each X row's per-group sums for the 4/3-bit offset term (else NULL);
 * for 8/4/3 bits xq/xs are X quantized to int8 per 32-block (ls_quant_x_i8) and, for 4/3
 * bits, xqsum (M × ngroups) the per-group rounding error Σx - Σx̂ of those int8 values.
 * AVX2 only. */
void ls_quant_rows_avx2(const ls_qmat *q, int r0, int r1, const float *Xpad, int M, float *Y, const float *xsum,
                        const int8_t *xq, const float *xs, const float *xqsum);
/* Activations to int8 per 32-value block: xs = absmax/127 per block (M × cols_pad/32), xq
 * (M × cols_pad) = round(x/xs); columns past cols are 0. */
void ls_quant_x_i8(const float *X, int M, int cols, int cols_pad, int8_t *xq, float *xs);
/* Dequantizes row r into out[cols_pad] (same values as the reference). AVX2 only. */
void ls_quant_dequant_row_avx2(const ls_qmat *q, int r, float *out);

#endif
