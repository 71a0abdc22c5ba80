/* quant_internal.h - the run-time-dispatched AVX2 kernels shared by quant.c and the
 * engine (not public API). */
#ifndef LLMSYS_QUANT_INTERNAL_H
#define LLMSYS_QUANT_INTERNAL_H

#include "llmsys/quant.h"

/* 1 if the CPU has AVX2, FMA and F16C (ignores LLMSYS_NO_SIMD). */
int ls_quant_cpu_fast(void);
/* Y[m*rows + r] for r in [r0, r1), m in [0, M): X rows padded to cols_pad; xsum (M ×
 * ngroups) holds each X row's per-group sums for the 4/3-bit offset term (else NULL).
 * AVX2 only. */
void ls_quant_rows_avx2(const ls_qmat *q, int r0, int r1, const float *Xpad, int M, float *Y, const float *xsum);
/* Dequantizes row r into out[cols_pad] (same values as the reference). AVX2 only. */
void ls_quant_dequant_row_avx2(const ls_qmat *q, int r, float *out);

#endif
