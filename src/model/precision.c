/* precision.c - mixed-precision Linear layers: GEMMs with both operands cast to bf16, fp16
 * or int8 and fp32 accumulation, through oneDNN (matmul primitive for bf16/fp16,
 * dnnl_gemm_u8s8s32 for int8 on VNNI CPUs), and the dispatch the model calls per Linear layer.
 *
 * Why cast on the fly: the fp32 weights stay the master copy that AdamW updates, so a
 * layer's precision can change between steps and ranks (QSync's setting: the same model,
 * a different precision plan per device). The cast of each operand is part of the
 * measured cost of a low-precision GEMM; the predictor profiles it (src/plan/trainplan.c).
 * Where oneDNN cannot build a bf16/fp16 matmul on this CPU, the operands are rounded to
 * that format and multiplied by sgemm (the same numbers, no speed-up); ls_prec_kernel
 * says which path runs.
 *
 * int8 without VNNI: oneDNN's int8 kernels there (AVX2, AVX-512 without VNNI, SSE4.1) multiply
 * the u8 operand (A plus 128) by the s8 one with vpmaddubsw, which adds each pair of products in
 * int16 and saturates past 32767 (oneDNN's "Nuances of int8 computations"): with 8-bit operands
 * 2 x 255 x 127 = 64770 does not fit, and the GEMM is wrong by up to a few percent. There the s8
 * operand, op(B), is quantized to 7 bits (|q| <= 63: 2 x 255 x 63 = 32130 fits), so the int32 sums
 * stay exact; the cost is a coarser op(B). */
#include <cblas.h>
#include <ctype.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "model/layers.h"
#include "model/precision.h"

/* ---------------------------------------------------------------- names */

static const char *prec_names[LS_PREC_COUNT] = {"fp32", "bf16", "fp16", "int8"};
static const char *lin_names[LS_LIN_COUNT] = {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"};

const char *ls_prec_name(int p) { return p >= 0 && p < LS_PREC_COUNT ? prec_names[p] : "?"; }

int ls_prec_parse(const char *s, ls_prec *out) {
    for (int p = 0; s && p < LS_PREC_COUNT; p++) {
        if (!strcasecmp(s, prec_names[p])) {
            *out = (ls_prec)p;
            return LS_OK;
        }
    }
    return ls_err(LS_EINVAL, "unknown precision '%s' (known: fp32, bf16, fp16, int8)", s ? s : "(null)");
}

const char *ls_linear_name(int i, char *buf, size_t n) {
    snprintf(buf, n, "h.%d.%s", i / LS_LIN_COUNT, lin_names[i % LS_LIN_COUNT]);
    return buf;
}

int ls_linear_find(const char *name, int n_layer) {
    char b[64];
    for (int i = 0; i < n_layer * LS_LIN_COUNT; i++)
        if (!strcmp(name, ls_linear_name(i, b, sizeof b))) return i;
    return -1;
}

/* ---------------------------------------------------------------- casts */

/* fp32 -> bf16 bits, round to nearest even (finite inputs). */
static inline uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* fp32 -> fp16 bits, round to nearest even, overflow to inf, subnormals kept. */
static inline uint16_t to_fp16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a >= 0x47800000u) return (uint16_t)(sign | (a > 0x7F800000u ? 0x7E00u : 0x7C00u)); /* >= 65536, inf, nan */
    if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
        float f;
        memcpy(&f, &a, 4);
        f = f * 16777216.0f; /* scale by 2^24: the subnormal's integer mantissa */
        uint32_t q = (uint32_t)lrintf(f);
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xFFFu + ((a >> 13) & 1u) - 0x38000000u; /* rebias 127 -> 15, round */
    return (uint16_t)(sign | ((r >> 13) > 0x7C00u ? 0x7C00u : (r >> 13)));
}

static inline float from_fp16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, u;
    if (e == 0) {
        float f = (float)mant * 5.9604644775390625e-08f; /* 2^-24 */
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7F800000u | (mant << 13);
    } else {
        u = sign | ((e + 112u) << 23) | (mant << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* A (rows, cols) block with leading dimension ld, copied compact into dst (rows*cols). */
static void cast_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld) {
#pragma omp parallel for schedule(static) if ((long)rows * cols >= 65536L)
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) d[c] = to_bf16(s[c]);
    }
}

static void cast_fp16(uint16_t *dst, const float *src, int rows, int cols, int ld) {
#pragma omp parallel for schedule(static) if ((long)rows * cols >= 65536L)
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
        for (int c = 0; c < cols; c++) d[c] = to_fp16(s[c]);
    }
}

/* Rounds through the 16-bit format and back (the fallback when oneDNN has no kernel). */
static void round_f32(float *dst, const float *src, int rows, int cols, int ld, ls_prec p) {
#pragma omp parallel for schedule(static) if ((long)rows * cols >= 65536L)
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        float *d = dst + (size_t)r * cols;
        if (p == LS_PREC_BF16)
            for (int c = 0; c < cols; c++) d[c] = from_bf16(to_bf16(s[c]));
        else
            for (int c = 0; c < cols; c++) d[c] = from_fp16(to_fp16(s[c]));
    }
}

/* Max |x| per row (axis 0), per column (axis 1) or over all (axis -1) of a (rows, cols)
 * block into amax (rows, cols or 1 entries). */
static void absmax(float *amax, const float *src, int rows, int cols, int ld, int axis) {
    if (axis == 0) {
#pragma omp parallel for schedule(static) if ((long)rows * cols >= 65536L)
        for (int r = 0; r < rows; r++) {
            const float *s = src + (size_t)r * ld;
            float m = 0.0f;
#pragma omp simd reduction(max : m)
            for (int c = 0; c < cols; c++) m = fabsf(s[c]) > m ? fabsf(s[c]) : m;
            amax[r] = m;
        }
        return;
    }
    int nc = axis == 1 ? cols : 1;
    for (int c = 0; c < nc; c++) amax[c] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        if (axis == 1) {
#pragma omp simd
            for (int c = 0; c < cols; c++) amax[c] = fabsf(s[c]) > amax[c] ? fabsf(s[c]) : amax[c];
        } else {
            float m = amax[0];
#pragma omp simd reduction(max : m)
            for (int c = 0; c < cols; c++) m = fabsf(s[c]) > m ? fabsf(s[c]) : m;
            amax[0] = m;
        }
    }
}

/* amax -> scale (amax/qmax: the largest |q|, 127 or 63; 1 for an all-zero channel) and its
 * inverse, in place. */
static void scales(float *s, float *inv, int n, float qmax) {
    for (int i = 0; i < n; i++) {
        s[i] = s[i] > 0.0f ? s[i] / qmax : 1.0f;
        inv[i] = 1.0f / s[i];
    }
}

/* q = clamp(round(x / s), -127, 127) (+ off: 0 for s8, 128 for u8 storage), s indexed by row
 * (axis 0), column (1) or single (-1). The body is compiled for AVX-512 and AVX2 too and
 * chosen at run time (cpuid); the rounding is the same on every path. */
#define Q8(dst, x, ir)                                                                                                 \
    do {                                                                                                               \
        float v_ = (x) * (ir);                                                                                         \
        v_ = v_ > 127.0f ? 127.0f : (v_ < -127.0f ? -127.0f : v_);                                                     \
        v_ = (v_ + 12582912.0f) - 12582912.0f; /* round to nearest even */                                             \
        (dst) = (uint8_t)((int)v_ + off);                                                                              \
    } while (0)
#define QUANT_BODY                                                                                                     \
    _Pragma("omp parallel for schedule(static) if ((long)rows * cols >= 65536L)") for (int r = 0; r < rows; r++) {     \
        const float *s = src + (size_t)r * ld;                                                                         \
        uint8_t *d = dst + (size_t)r * cols;                                                                           \
        if (axis == 1) {                                                                                               \
            for (int c = 0; c < cols; c++) Q8(d[c], s[c], inv[c]);                                                     \
        } else {                                                                                                       \
            float ir = axis == 0 ? inv[r] : inv[0];                                                                    \
            for (int c = 0; c < cols; c++) Q8(d[c], s[c], ir);                                                         \
        }                                                                                                              \
    }

#define QUANT_ARGS uint8_t *dst, const float *src, int rows, int cols, int ld, const float *inv, int axis, int off
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define QUANT_X86 1
__attribute__((target("avx512f,avx512bw,avx512vl"), optimize("tree-vectorize"))) static void quant_avx512(QUANT_ARGS) {
    QUANT_BODY
}
__attribute__((target("avx2,fma"), optimize("tree-vectorize"))) static void quant_avx2(QUANT_ARGS) { QUANT_BODY }
#endif
static void quant_base(QUANT_ARGS) { QUANT_BODY }

static void quant_i8(void *dst, const float *src, int rows, int cols, int ld, const float *inv, int axis, int off) {
#ifdef QUANT_X86
    static int isa = -1; /* 2 avx512, 1 avx2, 0 baseline */
    if (isa < 0)
        isa = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") ? 2
              : __builtin_cpu_supports("avx2")                                         ? 1
                                                                                       : 0;
    if (isa == 2) return quant_avx512(dst, src, rows, cols, ld, inv, axis, off);
    if (isa == 1) return quant_avx2(dst, src, rows, cols, ld, inv, axis, off);
#endif
    quant_base(dst, src, rows, cols, ld, inv, axis, off);
}

/* Per row of a (rows, cols) block in one pass while the row is in cache: its scale
 * (absmax/127, 1 for an all-zero row) into sa[r], then q = round(x / s) + off, as quant_i8
 * with axis 0 (same rounding). */
#define QROWS_BODY                                                                                                     \
    _Pragma("omp parallel for schedule(static) if ((long)rows * cols >= 65536L)") for (int r = 0; r < rows; r++) {     \
        const float *s = src + (size_t)r * ld;                                                                         \
        uint8_t *d = dst + (size_t)r * cols;                                                                           \
        float m = 0.0f;                                                                                                \
        _Pragma("omp simd reduction(max : m)") for (int c = 0; c < cols; c++) m = fabsf(s[c]) > m ? fabsf(s[c]) : m;   \
        float sc = m > 0.0f ? m / 127.0f : 1.0f, ir = 1.0f / sc;                                                       \
        sa[r] = sc;                                                                                                    \
        for (int c = 0; c < cols; c++) Q8(d[c], s[c], ir);                                                             \
    }
#define QROWS_ARGS uint8_t *dst, float *sa, const float *src, int rows, int cols, int ld, int off
#ifdef QUANT_X86
__attribute__((target("avx512f,avx512bw,avx512vl"), optimize("tree-vectorize"))) static void qrows_avx512(QROWS_ARGS) {
    QROWS_BODY
}
__attribute__((target("avx2,fma"), optimize("tree-vectorize"))) static void qrows_avx2(QROWS_ARGS) { QROWS_BODY }
#endif
static void qrows_base(QROWS_ARGS) { QROWS_BODY }

static void quant_rows(void *dst, float *sa, const float *src, int rows, int cols, int ld, int off) {
#ifdef QUANT_X86
    static int isa = -1;
    if (isa < 0)
        isa = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") ? 2
              : __builtin_cpu_supports("avx2")                                         ? 1
                                                                                       : 0;
    if (isa == 2) return qrows_avx512(dst, sa, src, rows, cols, ld, off);
    if (isa == 1) return qrows_avx2(dst, sa, src, rows, cols, ld, off);
#endif
    qrows_base(dst, sa, src, rows, cols, ld, off);
}

/* 1 when oneDNN runs its AVX512-VNNI kernels here (the CPU has them and DNNL_MAX_CPU_ISA does
 * not rule them out): they add four u8 x s8 products straight into int32, so its u8 x s8 GEMM is
 * exact with 8-bit operands and is its fastest int8 form. Else 0: 7-bit op(B) (file comment).
 * oneDNN's AVX-VNNI (avx2_vnni) is not counted: whether its GEMM uses it is not documented. */
static int has_vnni(void) {
#ifdef QUANT_X86
    static int v = -1;
    if (v < 0) v = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni;
    return v;
#else
    return 0;
#endif
}

/* ---------------------------------------------------------------- context */

#define PRIM_CACHE 48

typedef struct {
    int used;
    int dt, M, N, K, ta, tb, beta, ldc, smask; /* smask: int8 output scales, 0 one, 2 per column */
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a_md, b_md, c_md, s_md;
} prim_entry;

struct ls_prec_ctx {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int dnnl_ok;
    int has_kernel[LS_PREC_COUNT]; /* -1 unknown, 0 emulated, 1 oneDNN */
    prim_entry cache[PRIM_CACHE];
    int next;
    void *buf_a, *buf_b, *buf_c;
    size_t cap_a, cap_b, cap_c;
    float *sa, *sb, *ia, *ib;
    size_t cap_s;
    double split[3]; /* seconds: operand casts, GEMM kernel, dequantisation (ls_prec_ctx_split) */
    int int8_matmul; /* force the oneDNN matmul primitive for int8 */
};

void ls_prec_ctx_split(ls_prec_ctx *c, double out[3]) {
    memcpy(out, c->split, sizeof c->split);
    memset(c->split, 0, sizeof c->split);
}

void ls_prec_ctx_set_int8_matmul(ls_prec_ctx *c, int on) { c->int8_matmul = on; }

static size_t ctx_bytes(const ls_prec_ctx *c) { return c->cap_a + c->cap_b + c->cap_c + 4 * c->cap_s * sizeof(float); }

int ls_prec_ctx_new(ls_prec_ctx **out) {
    *out = NULL;
    ls_prec_ctx *c = calloc(1, sizeof *c);
    if (!c) return ls_err(LS_ENOMEM, "precision: out of memory");
    c->dnnl_ok = dnnl_engine_create(&c->eng, dnnl_cpu, 0) == dnnl_success &&
                 dnnl_stream_create(&c->stream, c->eng, dnnl_stream_default_flags) == dnnl_success;
    for (int p = 0; p < LS_PREC_COUNT; p++) c->has_kernel[p] = -1;
    c->has_kernel[LS_PREC_FP32] = 1;
    *out = c;
    return LS_OK;
}

void ls_prec_ctx_free(ls_prec_ctx *c) {
    if (!c) return;
    for (int i = 0; i < PRIM_CACHE; i++)
        if (c->cache[i].used) dnnl_primitive_destroy(c->cache[i].prim);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->eng) dnnl_engine_destroy(c->eng);
    ls_aligned_free(c->buf_a);
    ls_aligned_free(c->buf_b);
    ls_aligned_free(c->buf_c);
    free(c->sa);
    free(c);
}

static int grow(void **p, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return LS_OK;
    ls_aligned_free(*p);
    *p = ls_aligned_alloc(64, bytes);
    *cap = *p ? bytes : 0;
    return *p ? LS_OK : ls_err(LS_ENOMEM, "precision: cannot allocate %zu bytes of GEMM scratch", bytes);
}

static int grow_scales(ls_prec_ctx *c, size_t n) {
    if (n <= c->cap_s) return LS_OK;
    free(c->sa);
    c->sa = malloc(4 * n * sizeof(float));
    if (!c->sa) {
        c->cap_s = 0;
        return ls_err(LS_ENOMEM, "precision: out of memory");
    }
    c->ia = c->sa + n;
    c->sb = c->sa + 2 * n;
    c->ib = c->sa + 3 * n;
    c->cap_s = n;
    return LS_OK;
}

/* A oneDNN matmul C(M,N) [+]= A(M,K)·B(K,N) of data type dt on compact operands stored
 * transposed or not; cached by shape. NULL when oneDNN cannot build it here. */
static prim_entry *matmul_prim(ls_prec_ctx *c, dnnl_data_type_t dt, int M, int N, int K, int ta, int tb, int beta,
                               int ldc, int smask) {
    for (int i = 0; i < PRIM_CACHE; i++) {
        prim_entry *e = &c->cache[i];
        if (e->used && e->dt == (int)dt && e->M == M && e->N == N && e->K == K && e->ta == ta && e->tb == tb &&
            e->beta == beta && e->ldc == ldc && e->smask == smask)
            return e;
    }
    if (!c->dnnl_ok) return NULL;
    prim_entry e = {1, (int)dt, M, N, K, ta, tb, beta, ldc, smask, NULL, {0}, {0}, {0}, {0}};
    dnnl_dims_t ad = {M, K}, as = {ta ? 1 : K, ta ? M : 1};
    dnnl_dims_t bd = {K, N}, bs = {tb ? 1 : N, tb ? K : 1};
    dnnl_dims_t cd = {M, N}, cs = {ldc, 1};
    if (dnnl_memory_desc_init_by_strides(&e.a_md, 2, ad, dt, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&e.b_md, 2, bd, dt, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&e.c_md, 2, cd, dnnl_f32, cs) != dnnl_success)
        return NULL;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &e.a_md, &e.b_md, NULL, &e.c_md) != dnnl_success) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
    int ok = 1;
    if (beta)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (ok && dt == dnnl_s8) {
        const float rt = DNNL_RUNTIME_F32_VAL;
        dnnl_dims_t sd = {smask ? N : 1};
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, smask, &rt) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&e.s_md, 1, sd, dnnl_f32, dnnl_a) == dnnl_success;
    }
    if (!ok) {
        if (po) dnnl_post_ops_destroy(po);
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, c->eng, NULL);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return NULL;
    /* a reference (non-JIT) implementation is far slower than rounding + sgemm: refuse it */
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (impl && strstr(impl, "ref")) {
        dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    st = dnnl_primitive_create(&e.prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) return NULL;
    prim_entry *slot = &c->cache[c->next];
    c->next = (c->next + 1) % PRIM_CACHE;
    if (slot->used) dnnl_primitive_destroy(slot->prim);
    *slot = e;
    return slot;
}

static int run_matmul(ls_prec_ctx *c, prim_entry *e, void *a, void *b, float *C, float *scales) {
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    int ok = dnnl_memory_create(&ma, &e->a_md, c->eng, a) == dnnl_success &&
             dnnl_memory_create(&mb, &e->b_md, c->eng, b) == dnnl_success &&
             dnnl_memory_create(&mc, &e->c_md, c->eng, C) == dnnl_success &&
             (!scales || dnnl_memory_create(&ms, &e->s_md, c->eng, scales) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_ATTR_OUTPUT_SCALES, ms}};
        ok = dnnl_primitive_execute(e->prim, c->stream, scales ? 4 : 3, args) == dnnl_success &&
             dnnl_stream_wait(c->stream) == dnnl_success;
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (ms) dnnl_memory_destroy(ms);
    return ok ? LS_OK : ls_err(LS_EUNSUPPORTED, "precision: oneDNN matmul failed");
}

const char *ls_prec_kernel(ls_prec_ctx *c, ls_prec p) {
    if (p == LS_PREC_FP32) return "openblas sgemm";
    if (p == LS_PREC_INT8) {
        if (has_vnni() && !c->int8_matmul) return "onednn gemm_u8s8s32 (VNNI, int32 acc)";
        if (c->has_kernel[p] < 0) c->has_kernel[p] = matmul_prim(c, dnnl_s8, 64, 64, 64, 0, 1, 0, 64, 2) != NULL;
        if (!has_vnni())
            return c->has_kernel[p] ? "onednn matmul s8, 7-bit B (int32 acc)"
                                    : "onednn gemm_s8s8s32, 7-bit B (int32 acc)";
        return c->has_kernel[p] ? "onednn matmul s8 (int32 acc)" : "onednn gemm_s8s8s32 (int32 acc)";
    }
    if (c->has_kernel[p] < 0) {
        dnnl_data_type_t dt = p == LS_PREC_BF16 ? dnnl_bf16 : dnnl_f16;
        c->has_kernel[p] = matmul_prim(c, dt, 64, 64, 64, 0, 1, 0, 64, 0) != NULL;
    }
    if (p == LS_PREC_BF16) return c->has_kernel[p] ? "onednn matmul bf16 (fp32 acc)" : "bf16 rounding + sgemm";
    return c->has_kernel[p] ? "onednn matmul fp16 (fp32 acc)" : "fp16 rounding + sgemm";
}

/* ---------------------------------------------------------------- GEMM */

static int gemm_16(ls_prec_ctx *c, ls_prec p, int ta, int tb, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    /* stored shapes: A is (M,K), or (K,M) when transposed; B is (K,N), or (N,K) */
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    dnnl_data_type_t dt = p == LS_PREC_BF16 ? dnnl_bf16 : dnnl_f16;
    if (c->has_kernel[p] < 0) (void)ls_prec_kernel(c, p);
    prim_entry *e = c->has_kernel[p] ? matmul_prim(c, dt, M, N, K, ta, tb, beta != 0.0f, ldc, 0) : NULL;
    double t0 = ls_now();
    if (e) {
        LS_TRY(grow(&c->buf_a, &c->cap_a, (size_t)ar * ac * 2));
        LS_TRY(grow(&c->buf_b, &c->cap_b, (size_t)br * bc * 2));
        if (p == LS_PREC_BF16) {
            cast_bf16(c->buf_a, A, ar, ac, lda);
            cast_bf16(c->buf_b, B, br, bc, ldb);
        } else {
            cast_fp16(c->buf_a, A, ar, ac, lda);
            cast_fp16(c->buf_b, B, br, bc, ldb);
        }
        double t1 = ls_now();
        int rc = run_matmul(c, e, c->buf_a, c->buf_b, C, NULL);
        c->split[0] += t1 - t0, c->split[1] += ls_now() - t1;
        return rc;
    }
    /* emulated: the operands rounded to the format, multiplied in fp32 */
    LS_TRY(grow(&c->buf_a, &c->cap_a, (size_t)ar * ac * 4));
    LS_TRY(grow(&c->buf_b, &c->cap_b, (size_t)br * bc * 4));
    round_f32(c->buf_a, A, ar, ac, lda, p);
    round_f32(c->buf_b, B, br, bc, ldb, p);
    double t1 = ls_now();
    ls_sgemm_rows(ta, tb, M, N, K, 1.0f, c->buf_a, ac, c->buf_b, bc, beta, C, ldc);
    c->split[0] += t1 - t0, c->split[1] += ls_now() - t1;
    return LS_OK;
}

static int gemm_i8(ls_prec_ctx *c, int per_channel, int ta, int tb, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    /* per channel: one scale per column of op(B) (output channel: a stored row of B when
     * transposed); op(A) has one scale, or one per row (below). Both factor out of the K-sum, and oneDNN's matmul
     * applies them to the int32 result (output scales). */
    int axa = -1, axb = per_channel ? (tb ? 0 : 1) : -1;
    LS_TRY(grow(&c->buf_a, &c->cap_a, (size_t)ar * ac));
    LS_TRY(grow(&c->buf_b, &c->cap_b, (size_t)br * bc));
    LS_TRY(grow(&c->buf_c, &c->cap_c, (size_t)M * N * sizeof(int32_t)));
    LS_TRY(grow_scales(c, (size_t)(M > N ? M : N)));
    /* VNNI: A stored as u8 = q + 128 and oneDNN subtracts the offset (ao = 128) exactly, so the
     * int32 sums equal the s8 x s8 ones; no primitive, no reorder. With per-channel scales
     * and op(A) not transposed, op(A) gets one scale per row, found and applied in one pass
     * (the dequantisation below is ours on that path). */
    double t0 = ls_now();
    int vnni = has_vnni() && !c->int8_matmul, rows_a = vnni && per_channel && !ta;
    if (rows_a) {
        axa = 0;
        quant_rows(c->buf_a, c->sa, A, ar, ac, lda, 128);
    } else {
        absmax(c->sa, A, ar, ac, lda, axa);
    }
    absmax(c->sb, B, br, bc, ldb, axb);
    int na = axa < 0 ? 1 : M, nb = axb < 0 ? 1 : N;
    if (!rows_a) scales(c->sa, c->ia, na, 127.0f);
    scales(c->sb, c->ib, nb, has_vnni() ? 127.0f : 63.0f); /* 7 bits where pairs add in int16 */
    if (!rows_a) quant_i8(c->buf_a, A, ar, ac, lda, c->ia, axa, vnni ? 128 : 0);
    quant_i8(c->buf_b, B, br, bc, ldb, c->ib, axb, 0);
    int32_t co = 0, *acc = c->buf_c;
    dnnl_status_t st;
    double t1 = ls_now();
    c->split[0] += t1 - t0;
    if (vnni) {
        st = dnnl_gemm_u8s8s32(ta ? 'T' : 'N', tb ? 'T' : 'N', 'F', M, N, K, 1.0f, c->buf_a, ac, 128, c->buf_b, bc, 0,
                               0.0f, acc, N, &co);
        goto dequant;
    }
    if (c->has_kernel[LS_PREC_INT8] < 0) (void)ls_prec_kernel(c, LS_PREC_INT8);
    prim_entry *e = c->has_kernel[LS_PREC_INT8]
                        ? matmul_prim(c, dnnl_s8, M, N, K, ta, tb, beta != 0.0f, ldc, nb > 1 ? 2 : 0)
                        : NULL;
    if (e) {
        for (int n = 0; n < nb; n++) c->ib[n] = c->sa[0] * c->sb[n]; /* output scales */
        int rc = run_matmul(c, e, c->buf_a, c->buf_b, C, c->ib);
        c->split[1] += ls_now() - t1;
        return rc;
    }
    st = dnnl_gemm_s8s8s32(ta ? 'T' : 'N', tb ? 'T' : 'N', 'F', M, N, K, 1.0f, c->buf_a, ac, 0, c->buf_b, bc, 0, 0.0f,
                           acc, N, &co);
dequant:;
    double t2 = ls_now();
    c->split[1] += t2 - t1;
    if (st != dnnl_success) return ls_err(LS_EUNSUPPORTED, "precision: oneDNN int8 GEMM failed (status %d)", (int)st);
    const float *sa = c->sa, *sb = c->sb;
#pragma omp parallel for schedule(static) if ((long)M * N >= 65536L)
    for (int m = 0; m < M; m++) {
        float am = sa[na == 1 ? 0 : m];
        const int32_t *a = acc + (size_t)m * N;
        float *o = C + (size_t)m * ldc;
        if (beta != 0.0f) {
#pragma omp simd
            for (int n = 0; n < N; n++) o[n] += am * sb[nb == 1 ? 0 : n] * (float)a[n];
        } else {
#pragma omp simd
            for (int n = 0; n < N; n++) o[n] = am * sb[nb == 1 ? 0 : n] * (float)a[n];
        }
    }
    c->split[2] += ls_now() - t2;
    return LS_OK;
}

int ls_prec_gemm(ls_prec_ctx *c, ls_prec p, int per_channel, int trans_a, int trans_b, int M, int N, int K,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (beta != 0.0f && beta != 1.0f) return ls_err(LS_EINVAL, "precision GEMM: beta must be 0 or 1");
    if (M <= 0 || N <= 0 || K <= 0) return LS_OK;
    switch (p) {
    case LS_PREC_FP32:
        ls_sgemm_rows(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return LS_OK;
    case LS_PREC_BF16:
    case LS_PREC_FP16:
        return gemm_16(c, p, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
    case LS_PREC_INT8:
        return gemm_i8(c, per_channel, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
    default:
        return ls_err(LS_EINVAL, "precision GEMM: unknown precision %d", (int)p);
    }
}

int ls_prec_cast(ls_prec_ctx *c, ls_prec p, const float *x, int rows, int cols) {
    if (p == LS_PREC_FP32 || rows <= 0 || cols <= 0) return LS_OK;
    if (p == LS_PREC_INT8) {
        LS_TRY(grow(&c->buf_a, &c->cap_a, (size_t)rows * cols));
        LS_TRY(grow_scales(c, 1));
        absmax(c->sa, x, rows, cols, cols, -1);
        scales(c->sa, c->ia, 1, 127.0f);
        quant_i8(c->buf_a, x, rows, cols, cols, c->ia, -1, has_vnni() ? 128 : 0);
        return LS_OK;
    }
    if (c->has_kernel[p] < 0) (void)ls_prec_kernel(c, p);
    if (!c->has_kernel[p]) {
        LS_TRY(grow(&c->buf_a, &c->cap_a, (size_t)rows * cols * 4));
        round_f32(c->buf_a, x, rows, cols, cols, p);
        return LS_OK;
    }
    LS_TRY(grow(&c->buf_a, &c->cap_a, (size_t)rows * cols * 2));
    if (p == LS_PREC_BF16)
        cast_bf16(c->buf_a, x, rows, cols, cols);
    else
        cast_fp16(c->buf_a, x, rows, cols, cols);
    return LS_OK;
}

/* ---------------------------------------------------------------- model state */

void ls_model_prec_free(ls_model_prec *mp) {
    if (!mp) return;
    ls_prec_ctx_free(mp->ctx);
    free(mp->prec);
    free(mp);
}

static int prec_state(ls_model *m, ls_model_prec **out) {
    ls_model_prec **slot = ls_model_prec_slot(m);
    if (!*slot) {
        ls_model_prec *mp = calloc(1, sizeof *mp);
        int n = ls_model_cfg(m)->n_layer * LS_LIN_COUNT;
        if (!mp || !(mp->prec = calloc((size_t)n, 1))) {
            free(mp);
            return ls_err(LS_ENOMEM, "precision: out of memory");
        }
        if (ls_prec_ctx_new(&mp->ctx) < 0) {
            free(mp->prec);
            free(mp);
            return LS_ENOMEM;
        }
        mp->n = n;
        *slot = mp;
    }
    *out = *slot;
    return LS_OK;
}

int ls_model_set_precision(ls_model *m, const uint8_t *prec, int n, int int8_per_channel) {
    int want = ls_model_cfg(m)->n_layer * LS_LIN_COUNT;
    if (prec && n != want) return ls_err(LS_EINVAL, "precision plan has %d Linear layers, the model has %d", n, want);
    for (int i = 0; prec && i < n; i++)
        if (prec[i] >= LS_PREC_COUNT) return ls_err(LS_EINVAL, "precision plan: layer %d has precision %d", i, prec[i]);
    ls_model_prec *mp;
    LS_TRY(prec_state(m, &mp));
    for (int i = 0; i < mp->n; i++) mp->prec[i] = prec ? prec[i] : LS_PREC_FP32;
    mp->per_channel = int8_per_channel != 0;
    return LS_OK;
}

size_t ls_model_prec_scratch_bytes(const ls_model *m) {
    ls_model_prec *mp = *ls_model_prec_slot((ls_model *)m);
    return mp && mp->ctx ? ctx_bytes(mp->ctx) : 0;
}

ls_prec ls_model_precision(const ls_model *m, int i) {
    ls_model_prec *mp = *ls_model_prec_slot((ls_model *)m);
    return mp && i >= 0 && i < mp->n ? (ls_prec)mp->prec[i] : LS_PREC_FP32;
}

int ls_model_set_linear_observer(ls_model *m, ls_linear_observer fn, void *user) {
    ls_model_prec *mp;
    LS_TRY(prec_state(m, &mp));
    mp->obs = fn;
    mp->obs_user = user;
    return LS_OK;
}

int ls_model_set_linear_timer(ls_model *m, double *acc) {
    ls_model_prec *mp;
    LS_TRY(prec_state(m, &mp));
    mp->timer = acc;
    return LS_OK;
}

/* ---------------------------------------------------------------- dispatch */

static ls_prec lin_prec(const ls_model_prec *mp, int lin) {
    return mp && lin >= 0 && lin < mp->n ? (ls_prec)mp->prec[lin] : LS_PREC_FP32;
}

static void fell_back(ls_model_prec *mp, int lin) {
    if (!mp->warned)
        LS_WARN("Linear layer %d: %s GEMM failed, ran fp32 instead: %s", lin, ls_prec_name(mp->prec[lin]), ls_errmsg());
    mp->warned = 1;
}

/* out rows = [residual] + [bias], the beta = 1 start of a GEMM (what ls_matmul_forward fuses). */
static void init_rows(float *out, const float *bias, const float *residual, int N, int OC) {
#pragma omp parallel for schedule(static) if ((long)N * OC >= 65536L)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        const float *r = residual ? residual + (size_t)n * OC : NULL;
        if (r && bias)
            for (int c = 0; c < OC; c++) o[c] = r[c] + bias[c];
        else if (bias)
            memcpy(o, bias, (size_t)OC * sizeof(float));
        else if (r != o)
            memcpy(o, r, (size_t)OC * sizeof(float));
    }
}

static void lin_forward_run(ls_model_prec *mp, int lin, float *out, const float *inp, const float *w, const float *bias,
                            const float *residual, int N, int IC, int OC) {
    ls_prec p = lin_prec(mp, lin);
    if (p != LS_PREC_FP32) {
        // out (N,OC) = [residual] + [bias] + inp (N,IC) · wᵀ, the product in precision p
        float beta = bias || residual ? 1.0f : 0.0f;
        if (beta != 0.0f) init_rows(out, bias, residual, N, OC);
        if (ls_prec_gemm(mp->ctx, p, mp->per_channel, 0, 1, N, OC, IC, inp, IC, w, IC, beta, out, OC) == LS_OK) return;
        fell_back(mp, lin);
        residual = beta != 0.0f ? out : NULL; /* rows already hold residual + bias */
        bias = NULL;
    }
    ls_matmul_forward(out, inp, w, bias, residual, N, IC, OC);
}

static void lin_gelu_forward_run(ls_model_prec *mp, int lin, float *pre, float *out, const float *inp, const float *w,
                                 const float *bias, int N, int IC, int OC) {
    ls_prec p = lin_prec(mp, lin);
    if (p != LS_PREC_FP32) {
        if (bias) init_rows(pre, bias, NULL, N, OC);
        if (ls_prec_gemm(mp->ctx, p, mp->per_channel, 0, 1, N, OC, IC, inp, IC, w, IC, bias ? 1.0f : 0.0f, pre, OC) ==
            LS_OK) {
            ls_gelu_forward(out, pre, N * OC);
            return;
        }
        fell_back(mp, lin);
    }
    ls_matmul_gelu_forward(pre, out, inp, w, bias, N, IC, OC);
}

/* dbias (OC) += column sums of dout (N,OC), channel blocks per thread, rows in order. */
static void bias_grad(float *dbias, const float *dout, int N, int OC) {
    int nblk = (OC + 31) / 32;
#pragma omp parallel for schedule(static) if ((long)N * OC >= 65536L)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 32, c1 = c0 + 32 < OC ? c0 + 32 : OC;
        float g[32] = {0};
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
            for (int c = c0; c < c1; c++) g[c - c0] += d[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] += g[c - c0];
    }
}

/* Both backward GEMMs of Linear layer lin in precision p: dinp (N,IC) = dinp_beta·dinp +
 * dout·w, then dw (OC,IC) += doutᵀ·inp. A failing GEMM falls back to fp32 (nothing of it
 * was written). Returns 1 when the fp32 fallback already applied GELU's derivative to dinp. */
static int backward_lp(ls_model_prec *mp, int lin, ls_prec p, float *dinp, float dinp_beta, float *dw,
                       const float *dout, const float *inp, const float *w, const float *gelu_pre, int N, int IC,
                       int OC) {
    if (dinp &&
        ls_prec_gemm(mp->ctx, p, mp->per_channel, 0, 0, N, IC, OC, dout, OC, w, IC, dinp_beta, dinp, IC) != LS_OK) {
        fell_back(mp, lin);
        if (gelu_pre) {
            ls_matmul_gelu_backward(dinp, dw, NULL, dout, inp, w, gelu_pre, N, IC, OC);
            return 1;
        }
        ls_matmul_backward(dinp, dw, NULL, dout, inp, w, N, IC, OC);
        return 0;
    }
    if (ls_prec_gemm(mp->ctx, p, mp->per_channel, 1, 0, OC, IC, N, dout, OC, inp, IC, 1.0f, dw, IC) != LS_OK) {
        fell_back(mp, lin);
        ls_matmul_backward(NULL, dw, NULL, dout, inp, w, N, IC, OC);
    }
    return 0;
}

static void lin_backward_run(ls_model_prec *mp, int lin, float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int N, int IC, int OC) {
    if (mp && mp->obs && lin >= 0 && lin < mp->n) mp->obs(mp->obs_user, lin, inp, w, dout, N, IC, OC);
    ls_prec p = lin_prec(mp, lin);
    if (p == LS_PREC_FP32) {
        ls_matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC);
        return;
    }
    backward_lp(mp, lin, p, dinp, 1.0f, dw, dout, inp, w, NULL, N, IC, OC);
    if (dbias) bias_grad(dbias, dout, N, OC);
}

static void lin_gelu_backward_run(ls_model_prec *mp, int lin, float *dinp, float *dw, float *dbias, const float *dout,
                                  const float *inp, const float *w, const float *gelu_pre, int N, int IC, int OC) {
    if (mp && mp->obs && lin >= 0 && lin < mp->n) mp->obs(mp->obs_user, lin, inp, w, dout, N, IC, OC);
    ls_prec p = lin_prec(mp, lin);
    if (p == LS_PREC_FP32) {
        ls_matmul_gelu_backward(dinp, dw, dbias, dout, inp, w, gelu_pre, N, IC, OC);
        return;
    }
    if (!backward_lp(mp, lin, p, dinp, 0.0f, dw, dout, inp, w, gelu_pre, N, IC, OC))
        ls_gelu_backward_inplace(dinp, gelu_pre, N * IC);
    if (dbias) bias_grad(dbias, dout, N, OC);
}

/* ---------------------------------------------------------------- timed entry points */

#define TIMED(call)                                                                                                    \
    do {                                                                                                               \
        double t0_ = mp && mp->timer && lin >= 0 && lin < mp->n ? ls_now() : 0;                                        \
        call;                                                                                                          \
        if (t0_ > 0) mp->timer[lin] += ls_now() - t0_;                                                                 \
    } while (0)

void ls_lin_forward(ls_model_prec *mp, int lin, float *out, const float *inp, const float *w, const float *bias,
                    const float *residual, int N, int IC, int OC) {
    TIMED(lin_forward_run(mp, lin, out, inp, w, bias, residual, N, IC, OC));
}

void ls_lin_gelu_forward(ls_model_prec *mp, int lin, float *pre, float *out, const float *inp, const float *w,
                         const float *bias, int N, int IC, int OC) {
    TIMED(lin_gelu_forward_run(mp, lin, pre, out, inp, w, bias, N, IC, OC));
}

void ls_lin_backward(ls_model_prec *mp, int lin, float *dinp, float *dw, float *dbias, const float *dout,
                     const float *inp, const float *w, int N, int IC, int OC) {
    TIMED(lin_backward_run(mp, lin, dinp, dw, dbias, dout, inp, w, N, IC, OC));
}

void ls_lin_gelu_backward(ls_model_prec *mp, int lin, float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, const float *w, const float *gelu_pre, int N, int IC, int OC) {
    TIMED(lin_gelu_backward_run(mp, lin, dinp, dw, dbias, dout, inp, w, gelu_pre, N, IC, OC));
}
