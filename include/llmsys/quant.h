/*
 * quant.h - group-wise weight quantization (16/8/4/3 bits) and the matrix kernels that
 * run on quantized weights: mat-vec for decode, mat-mat for prefill (after LLM-PQ and
 * SplitQuant, docs/references.md §3: every layer at its own bit width).
 *
 * A weight matrix W (rows = out, cols = in; y = x·Wᵀ as in model.h) is stored as an
 * ls_qmat in one of five formats:
 *
 *   bits 32  F32 as is (reference / "no quantization")
 *   bits 16  IEEE fp16 storage, computed in fp32
 *   bits 8   int8 symmetric per group: w = scale·q, q in [-127, 127]
 *   bits 4   uint4 asymmetric per group: w = scale·q + min, q in [0, 15]
 *   bits 3   uint3 asymmetric per group: w = scale·q + min, q in [0, 7]
 *
 * with an fp16 scale (and, 4/3 bits, an fp16 min) per group: at group 64, 8.25, 4.5 and
 * 3.5 bits per weight (ggml's q8_0 and q4_0 take 8.5 and 4.5). The fp16 min is rounded
 * down and the scale up, so every weight of a group stays inside its code range.
 *
 * Groups are `group` consecutive input columns of one row (group ∈ {32, 64, 128, 256}).
 * Rows are padded to a whole number of groups (cols_pad); padding holds zeros and the
 * kernels pad x with zeros, so any cols works. Packed layout per 32-value block:
 *   8 bits: 32 bytes, value i in byte i (int8)
 *   4 bits: 16 bytes, byte j holds value j (low nibble) and j+16 (high nibble)
 *   3 bits: 12 bytes, bytes 0..7 hold the low 2 bits (byte j: values j, j+8, j+16, j+24
 *           at bit 0, 2, 4, 6), bytes 8..11 a little-endian word whose bit i is bit 2 of
 *           value i.
 * Quantization is round-to-nearest; |w - dequant(w)| <= scale/2 (+ float rounding).
 *
 *     ls_qmat q;
 *     ls_qmat_quantize(&q, w, rows, cols, 4, 64);       // from fp32
 *     ls_qmat_matvec(&q, x, y);                         // y[rows] = W·x, fastest kernel
 *     ls_qmat_free(&q);
 *
 * Every kernel exists as a scalar reference (LS_QIMPL_REF) and SIMD paths for AVX2/FMA/
 * F16C and for AVX-512 (F/BW/VL + VNNI), and a prefill GEMM on AMX-INT8 tiles, chosen at
 * run time from cpuid (ls_cpu_isa(): LLMSYS_ISA=scalar|avx2|avx512|amx forces a lower level,
 * LLMSYS_NO_SIMD=1 the reference; LLMSYS_PF_TILE=6x2|32x2 the AVX-512 prefill tile; these
 * three are read once, at the first call that needs them: see ls_quant_reselect).
 * The SIMD paths compute each output with a fixed reduction order that does not depend
 * on how many rows are batched together, nor on the level, so batched decode is
 * bit-identical to one-at-a-time decode on every machine with AVX2.
 */
#ifndef LLMSYS_QUANT_H
#define LLMSYS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "llmsys/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the quantized checkpoint format (serve.h) this build writes: 2 stores the
 * scales and minima as F16; version 1 files (F32) still load, rounded to fp16. */
#define LS_QUANT_FORMAT_VERSION 2

/* AUTO: the level ls_cpu_isa() picks (env honoured); REF: scalar; FAST: the best the CPU
 * has (amx where usable); AVX2 / AVX512 / AMX: that level, or the best lower one the CPU has. */
typedef enum {
    LS_QIMPL_AUTO = 0,
    LS_QIMPL_REF = 1,
    LS_QIMPL_FAST = 2,
    LS_QIMPL_AVX2 = 3,
    LS_QIMPL_AVX512 = 4,
    LS_QIMPL_DEQUANT = 5, /* ls_qmat_matmul only: dequantize + sgemm at the AUTO level (a baseline) */
    LS_QIMPL_AMX = 6      /* avx512, with the prefill GEMM (more than 8 rows) on AMX-INT8 tiles */
} ls_qimpl;

typedef struct {
    int bits;          /* 32, 16, 8, 4, 3 */
    int rows, cols;    /* logical shape (out, in) */
    int group;         /* columns per group (8/4/3 bits) */
    int cols_pad;      /* cols rounded up to a multiple of group (32 for 32/16 bits) */
    int ngroups;       /* cols_pad / group */
    size_t row_bytes;  /* bytes of packed data per row */
    uint8_t *data;     /* rows * row_bytes, 32-byte aligned, owned */
    uint16_t *hscale;  /* rows * ngroups fp16 scales (8/4/3 bits; + 8 slack), owned */
    uint16_t *hmin;    /* rows * ngroups fp16 minima (4/3 bits; + 8 slack), owned */
} ls_qmat;

/* 1 if bits is a storage format (32, 16, 8, 4, 3). */
int ls_quant_bits_valid(int bits);
/* 1 if group is a supported group size (32, 64, 128, 256). */
int ls_quant_group_valid(int group);
/* Bytes per row of packed data for a format. */
size_t ls_quant_row_bytes(int bits, int cols_pad);
/* 1 when a SIMD path can run here and neither LLMSYS_NO_SIMD nor LLMSYS_ISA=scalar is set. */
int ls_quant_have_fast(void);
/* The level LS_QIMPL_AUTO uses ("scalar", "avx2" or "avx512"; LLMSYS_NO_SIMD honoured). */
ls_isa ls_quant_isa(void);
/* "amx-int8+avx512", "avx512+vnni", "avx2+fma+f16c" or "scalar": what LS_QIMPL_AUTO uses. */
const char *ls_quant_impl_name(void);
/* The tile of the AVX-512 VNNI prefill GEMM here, rows x 16-token blocks: "32x2" unless
 * LLMSYS_PF_TILE=6x2 forces the other (LLMSYS_PF_TILE=32x2 is the default). The two give
 * bit-identical outputs. */
const char *ls_quant_prefill_tile(void);
/* Reads LLMSYS_NO_SIMD, LLMSYS_ISA and LLMSYS_PF_TILE again and picks the AUTO level and
 * the AVX-512 prefill tile from them. The kernels read them once, at the first call that
 * needs them, never per matmul; a program that changes them later (a test) calls this, with
 * no quantized call running in another thread (such a call may run with either pick). */
void ls_quant_reselect(void);
/* Group g's scale and min (0 for 8 bits) of row r as fp32. */
float ls_qmat_scale(const ls_qmat *q, int r, int g);
float ls_qmat_min(const ls_qmat *q, int r, int g);

/* fp16 <-> fp32, round to nearest even (scalar, no F16C needed). */
uint16_t ls_f32_to_f16(float f);
float ls_f16_to_f32(uint16_t h);

/* Quantizes a row-major fp32 matrix (rows, cols) into q (allocated here). Errors:
 * LS_EINVAL for unsupported bits/group/shape, LS_ENOMEM. */
int ls_qmat_quantize(ls_qmat *q, const float *w, int rows, int cols, int bits, int group);
/* Allocates an empty matrix of the format (data zeroed), for loading packed data. */
int ls_qmat_alloc(ls_qmat *q, int rows, int cols, int bits, int group);
void ls_qmat_free(ls_qmat *q);
/* Reconstructs row r into out[cols] (reference dequantization). */
void ls_qmat_dequant_row(const ls_qmat *q, int r, float *out);
/* Bytes of weight storage (packed data + scales + mins). */
size_t ls_qmat_bytes(const ls_qmat *q);

/* y[rows] = W·x, x has cols entries. */
void ls_qmat_matvec(const ls_qmat *q, const float *x, float *y);
void ls_qmat_matvec_impl(const ls_qmat *q, const float *x, float *y, ls_qimpl impl);
/* Y (M, rows) = X (M, cols) · Wᵀ, row-major, every output row computed exactly like
 * ls_qmat_matvec of that X row (decode batches: weights streamed once for M rows).
 * nthreads > 1 splits W's rows over OpenMP threads (each output computed by one thread
 * the same way: results are identical for any nthreads). */
void ls_qmat_matmul_rows(const ls_qmat *q, const float *X, int M, float *Y, int nthreads, ls_qimpl impl);
/* Prefill GEMM: Y (M, rows) = X (M, cols) · Wᵀ. 8/4/3 bits at a SIMD level: M <= 8 as
 * ls_qmat_matmul_rows; M > 8 an integer GEMM (avx512: VNNI, avx2: vpmaddubsw), X rounded
 * to int8 per (row, weight group), int32 sums per group (error within Σ|w − group code
 * centre|·absmax/254 per group of the exact product). 32/16 bits, LS_QIMPL_DEQUANT and the
 * scalar level without REF: tiles of W dequantized to fp32 and OpenBLAS sgemm. Results
 * may depend on M; the reference impl is a scalar triple loop. */
void ls_qmat_matmul(const ls_qmat *q, const float *X, int M, float *Y, ls_qimpl impl);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_QUANT_H */
