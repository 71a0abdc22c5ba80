/* quant.c - group-wise quantization formats, packing, dequantization, the scalar
 * reference kernels and the dispatch to the SIMD paths (kernels_body.h). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/quant.h"
#include "quant/quant_internal.h"

int ls_quant_bits_valid(int bits) { return bits == 32 || bits == 16 || bits == 8 || bits == 4 || bits == 3; }

int ls_quant_group_valid(int group) { return group == 32 || group == 64 || group == 128 || group == 256; }

size_t ls_quant_row_bytes(int bits, int cols_pad) {
    switch (bits) {
    case 32: return (size_t)cols_pad * 4;
    case 16: return (size_t)cols_pad * 2;
    case 8: return (size_t)cols_pad;
    case 4: return (size_t)cols_pad / 2;
    case 3: return (size_t)cols_pad / 32 * 12;
    default: return 0;
    }
}

/* What the environment picks (LLMSYS_NO_SIMD, LLMSYS_ISA, LLMSYS_PF_TILE), read once by
 * the first call that asks and again by ls_quant_reselect, never per matmul: getenv walks
 * the whole environment, and it races a setenv in another thread. Bits 0-1: the AUTO level,
 * ENV_TILE32: the avx512 level's 32x2 tile, ENV_READ: read. */
enum { ENV_ISA = 3, ENV_TILE32 = 4, ENV_READ = 8 };
static _Atomic int env_picks;

static int read_env(void) {
    const char *e = getenv("LLMSYS_NO_SIMD"), *t = getenv("LLMSYS_PF_TILE");
    int isa = e && *e && strcmp(e, "0") != 0 ? LS_ISA_SCALAR : ls_cpu_isa();
    int w = !(t && !strcmp(t, "6x2")); /* 32x2 unless 6x2 is asked for; other values ignored */
    return ENV_READ | isa | (w ? ENV_TILE32 : 0);
}

static int env(void) {
    int k = env_picks;
    if (!k) env_picks = k = read_env(); /* racing first calls store the same value */
    return k;
}

void ls_quant_reselect(void) { env_picks = read_env(); }

ls_isa ls_quant_isa(void) { return (ls_isa)(env() & ENV_ISA); }

const ls_quant_pf_level *ls_quant_pf_avx512_level(void) {
    return env() & ENV_TILE32 ? &ls_quant_pf_avx512w : &ls_quant_pf_avx512;
}

int ls_quant_have_fast(void) { return ls_quant_isa() != LS_ISA_SCALAR; }

const char *ls_quant_impl_name(void) {
    ls_isa i = ls_quant_isa();
    return i == LS_ISA_AMX      ? "amx-int8+avx512"
           : i == LS_ISA_AVX512 ? "avx512+vnni"
           : i == LS_ISA_AVX2   ? "avx2+fma+f16c"
                                : "scalar";
}

const char *ls_quant_prefill_tile(void) { return ls_quant_pf_avx512_level() == &ls_quant_pf_avx512w ? "32x2" : "6x2"; }

float ls_qmat_scale(const ls_qmat *q, int r, int g) {
    return q->hscale ? ls_f16_to_f32(q->hscale[(size_t)r * q->ngroups + g]) : 0.0f;
}

float ls_qmat_min(const ls_qmat *q, int r, int g) {
    return q->hmin ? ls_f16_to_f32(q->hmin[(size_t)r * q->ngroups + g]) : 0.0f;
}

/* ---------------------------------------------------------------- fp16 */

uint16_t ls_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0)); /* inf/nan */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: overflow */
    if (ax < 0x38800000u) {
        /* subnormal half (or zero): value = m * 2^-24; round to nearest even */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        int shift = (int)(126 - e); /* value = m·2^(e-150), half subnormal step 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = (ax >> 23) - 127 + 15, m = ax & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* carry into exponent is correct */
    return (uint16_t)(sign | h);
}

float ls_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    if (e == 31) x = sign | 0x7f800000u | (m << 13);
    else x = sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ---------------------------------------------------------------- layout */

int ls_qmat_alloc(ls_qmat *q, int rows, int cols, int bits, int group) {
    memset(q, 0, sizeof *q);
    if (!ls_quant_bits_valid(bits)) return ls_err(LS_EINVAL, "unsupported bit width %d (use 16, 8, 4 or 3)", bits);
    if (bits <= 8 && !ls_quant_group_valid(group))
        return ls_err(LS_EINVAL, "unsupported group size %d (use 32, 64, 128 or 256)", group);
    if (rows <= 0 || cols <= 0) return ls_err(LS_EINVAL, "bad matrix shape (%d, %d)", rows, cols);
    if (bits > 8) group = 32;
    q->bits = bits;
    q->rows = rows;
    q->cols = cols;
    q->group = group;
    q->cols_pad = (cols + group - 1) / group * group;
    q->ngroups = q->cols_pad / group;
    q->row_bytes = ls_quant_row_bytes(bits, q->cols_pad);
    q->data = ls_aligned_calloc(32, q->row_bytes * (size_t)rows);
    if (!q->data) return ls_err(LS_ENOMEM, "quantized matrix: out of memory");
    if (bits <= 8) {
        /* 8 halves of slack: the kernels convert whole vectors of 8 */
        q->hscale = calloc((size_t)rows * q->ngroups + 8, sizeof(uint16_t));
        if (bits < 8) q->hmin = calloc((size_t)rows * q->ngroups + 8, sizeof(uint16_t));
        if (!q->hscale || (bits < 8 && !q->hmin)) {
            ls_qmat_free(q);
            return ls_err(LS_ENOMEM, "quantized matrix: out of memory");
        }
    }
    return LS_OK;
}

void ls_qmat_free(ls_qmat *q) {
    if (!q) return;
    ls_aligned_free(q->data);
    free(q->hscale);
    free(q->hmin);
    memset(q, 0, sizeof *q);
}

size_t ls_qmat_bytes(const ls_qmat *q) {
    size_t n = q->row_bytes * (size_t)q->rows;
    if (q->hscale) n += (size_t)q->rows * q->ngroups * 2;
    if (q->hmin) n += (size_t)q->rows * q->ngroups * 2;
    return n;
}

/* Stores quantized value v (already in range) at index i of a row of packed data. */
static void put_q(uint8_t *row, int bits, int i, int v) {
    int blk = i / 32, k = i % 32;
    if (bits == 8) {
        row[i] = (uint8_t)(int8_t)v;
    } else if (bits == 4) {
        uint8_t *b = row + blk * 16;
        if (k < 16) b[k] = (uint8_t)((b[k] & 0xf0) | v);
        else b[k - 16] = (uint8_t)((b[k - 16] & 0x0f) | (v << 4));
    } else { /* 3 */
        uint8_t *b = row + blk * 12;
        int j = k % 8, sh = 2 * (k / 8);
        b[j] = (uint8_t)((b[j] & ~(3 << sh)) | ((v & 3) << sh));
        if (v & 4) b[8 + k / 8] |= (uint8_t)(1u << (k % 8));
        else b[8 + k / 8] &= (uint8_t)~(1u << (k % 8));
    }
}

static int get_q(const uint8_t *row, int bits, int i) {
    int blk = i / 32, k = i % 32;
    if (bits == 8) return (int8_t)row[i];
    if (bits == 4) {
        const uint8_t *b = row + blk * 16;
        return k < 16 ? (b[k] & 15) : (b[k - 16] >> 4);
    }
    const uint8_t *b = row + blk * 12;
    int lo = (b[k % 8] >> (2 * (k / 8))) & 3;
    int hi = (b[8 + k / 8] >> (k % 8)) & 1;
    return lo | (hi << 2);
}

/* fp16 of f rounded toward -inf (dir < 0) or +inf (dir > 0); f finite. */
static uint16_t f16_dir(float f, int dir) {
    uint16_t h = ls_f32_to_f16(f);
    float g = ls_f16_to_f32(h);
    if (dir < 0 && g > f) h = (h & 0x8000) ? (uint16_t)(h + 1) : h == 0 ? 0x8001 : (uint16_t)(h - 1);
    if (dir > 0 && g < f) h = (h & 0x8000) ? (h == 0x8000 ? 1 : (uint16_t)(h - 1)) : (uint16_t)(h + 1);
    return h;
}

int ls_qmat_quantize(ls_qmat *q, const float *w, int rows, int cols, int bits, int group) {
    LS_TRY(ls_qmat_alloc(q, rows, cols, bits, group));
    for (int r = 0; r < rows; r++) {
        const float *wr = w + (size_t)r * cols;
        uint8_t *row = q->data + (size_t)r * q->row_bytes;
        if (bits == 32) {
            memcpy(row, wr, (size_t)cols * 4);
            continue;
        }
        if (bits == 16) {
            uint16_t *h = (uint16_t *)row;
            for (int c = 0; c < cols; c++) h[c] = ls_f32_to_f16(wr[c]);
            continue;
        }
        for (int g = 0; g < q->ngroups; g++) {
            int c0 = g * q->group, c1 = c0 + q->group < cols ? c0 + q->group : cols;
            uint16_t *sc = &q->hscale[(size_t)r * q->ngroups + g];
            if (c0 >= cols) { /* pure padding group */
                *sc = 0;
                if (q->hmin) q->hmin[(size_t)r * q->ngroups + g] = 0;
                continue;
            }
            if (bits == 8) {
                float amax = 0.0f;
                for (int c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(wr[c]));
                /* fp16 scale rounded up: amax / scale <= 127, no code clips */
                *sc = f16_dir(amax / 127.0f, 1);
                float s = ls_f16_to_f32(*sc), inv = s > 0 ? 1.0f / s : 0.0f;
                for (int c = c0; c < c1; c++) {
                    int v = (int)lrintf(wr[c] * inv);
                    put_q(row, 8, c, v < -127 ? -127 : v > 127 ? 127 : v);
                }
            } else {
                float lo = wr[c0], hi = wr[c0];
                for (int c = c0; c < c1; c++) {
                    lo = fminf(lo, wr[c]);
                    hi = fmaxf(hi, wr[c]);
                }
                int qmax = (1 << bits) - 1;
                /* fp16 min rounded down, scale up: [lo, hi] stays inside the code range */
                uint16_t hlo = f16_dir(lo, -1);
                lo = ls_f16_to_f32(hlo);
                *sc = hi > lo ? f16_dir((hi - lo) / (float)qmax, 1) : 0;
                float s = ls_f16_to_f32(*sc), inv = s > 0 ? 1.0f / s : 0.0f;
                q->hmin[(size_t)r * q->ngroups + g] = hlo;
                for (int c = c0; c < c1; c++) {
                    int v = (int)lrintf((wr[c] - lo) * inv);
                    put_q(row, bits, c, v < 0 ? 0 : v > qmax ? qmax : v);
                }
                /* padding columns of a ragged last group: q = 0 (x is zero there anyway) */
            }
        }
    }
    return LS_OK;
}

/* Dequantizes one padded row (cols_pad values) exactly as the fast kernels do. */
static void dequant_row_pad(const ls_qmat *q, int r, float *out) {
    const uint8_t *row = q->data + (size_t)r * q->row_bytes;
    if (q->bits == 32) {
        memcpy(out, row, (size_t)q->cols * 4);
        for (int c = q->cols; c < q->cols_pad; c++) out[c] = 0.0f;
        return;
    }
    if (q->bits == 16) {
        const uint16_t *h = (const uint16_t *)row;
        for (int c = 0; c < q->cols_pad; c++) out[c] = ls_f16_to_f32(h[c]);
        return;
    }
    for (int c = 0; c < q->cols_pad; c++) {
        int g = c / q->group;
        float s = ls_qmat_scale(q, r, g);
        int v = get_q(row, q->bits, c);
        if (q->bits == 8) out[c] = s * (float)v;
        else out[c] = fmaf((float)v, s, ls_qmat_min(q, r, g));
    }
}

void ls_qmat_dequant_row(const ls_qmat *q, int r, float *out) {
    float *tmp = malloc((size_t)q->cols_pad * sizeof(float));
    LS_ASSERT(tmp);
    dequant_row_pad(q, r, tmp);
    memcpy(out, tmp, (size_t)q->cols * sizeof(float));
    free(tmp);
}

/* ---------------------------------------------------------------- reference kernels */

static void matmul_ref(const ls_qmat *q, const float *X, int M, float *Y) {
    float *w = malloc((size_t)q->cols_pad * sizeof(float));
    LS_ASSERT(w);
    for (int r = 0; r < q->rows; r++) {
        dequant_row_pad(q, r, w);
        for (int m = 0; m < M; m++) {
            const float *x = X + (size_t)m * q->cols;
            double acc = 0.0;
            for (int c = 0; c < q->cols; c++) acc += (double)w[c] * (double)x[c];
            Y[(size_t)m * q->rows + r] = (float)acc;
        }
    }
    free(w);
}

int ls_quant_decode_rows(void) {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") ? 1 : 4;
}

/* The level a call runs at. */
static ls_isa impl_isa(ls_qimpl impl) {
    switch (impl) {
    case LS_QIMPL_REF: return LS_ISA_SCALAR;
    case LS_QIMPL_AUTO: return ls_quant_isa();
    case LS_QIMPL_AVX2: return ls_cpu_isa_upto(LS_ISA_AVX2);
    case LS_QIMPL_DEQUANT: return ls_quant_isa();
    case LS_QIMPL_AVX512: return ls_cpu_isa_upto(LS_ISA_AVX512);
    default: return ls_cpu_isa_upto(LS_ISA_AMX); /* FAST, AMX */
    }
}

static void rows_simd(ls_isa isa, const ls_qmat *q, int r0, int r1, const float *Xpad, int M, float *Y,
                      const ls_quant_act *a) {
    if (isa >= LS_ISA_AVX512) ls_quant_rows_avx512(q, r0, r1, Xpad, M, Y, a); /* amx: the same decode kernels */
    else ls_quant_rows_avx2(q, r0, r1, Xpad, M, Y, a);
}

void ls_quant_x_i8(const float *X, int M, int cols, int cols_pad, int8_t *xq, float *xs) {
    int nb = cols_pad / 32;
    for (int m = 0; m < M; m++)
        for (int b = 0; b < nb; b++) {
            const float *x = X + (size_t)m * cols + (size_t)b * 32;
            int n = cols - b * 32 < 32 ? cols - b * 32 : 32;
            float amax = 0.0f;
            for (int k = 0; k < n; k++) amax = fmaxf(amax, fabsf(x[k]));
            float sc = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
            int8_t *o = xq + (size_t)m * cols_pad + (size_t)b * 32;
            for (int k = 0; k < 32; k++) {
                int v = k < n ? (int)lrintf(x[k] * inv) : 0;
                o[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            }
            xs[(size_t)m * nb + b] = sc;
        }
}

/* Activations in the pair kernels' layout; see quant_internal.h. Plain C: runs once per
 * call, O(M·cols), while the kernels stream rows·cols weights. */
void ls_quant_x_pairs(int bits, const int8_t *xq, const float *xs, int M, int cols_pad, int8_t *xp, float *xsv) {
    int nb = cols_pad / 32, np = (nb + 1) / 2;
    for (int m = 0; m < M; m++) {
        const int8_t *x = xq + (size_t)m * cols_pad;
        const float *s = xs + (size_t)m * nb;
        int8_t *o = xp + (size_t)m * np * 64;
        float *v = xsv + (size_t)m * np * 8;
        for (int p = 0; p < np; p++) {
            int b = 2 * p, two = b + 1 < nb;
            float s0 = s[b], s1 = two ? s[b + 1] : 0.0f;
            if (bits == 4) {
                /* [b 0..15 | b+1 0..15] [b 16..31 | b+1 16..31]: what the low and high
                 * nibbles of 32 packed bytes (blocks b, b+1) hold */
                for (int k = 0; k < 16; k++) {
                    o[64 * p + k] = x[32 * b + k];
                    o[64 * p + 32 + k] = x[32 * b + 16 + k];
                    o[64 * p + 16 + k] = two ? x[32 * b + 32 + k] : 0;
                    o[64 * p + 48 + k] = two ? x[32 * b + 48 + k] : 0;
                }
                for (int k = 0; k < 8; k++) v[8 * p + k] = k < 4 ? s0 : s1;
            } else {
                for (int k = 0; k < 64; k++) o[64 * p + k] = k < 32 || two ? x[32 * b + k] : 0;
                /* lanes of merge_pair(block b, block b+1) */
                for (int k = 0; k < 8; k++) v[8 * p + k] = (k & 1) ? s1 : s0;
            }
        }
    }
}

/* Scalar reference of the int8-activation decode kernel: the same products in the same
 * grouping (Σ q·xq exact in integers per block, scaled per block, then per group). */
static void rows_i8_ref(const ls_qmat *q, const int8_t *xq, const float *xs, const float *xsum, int M, float *Y) {
    int nb = q->cols_pad / 32, bpg = q->group / 32;
    for (int r = 0; r < q->rows; r++) {
        const uint8_t *row = q->data + (size_t)r * q->row_bytes;
        for (int m = 0; m < M; m++) {
            float acc = 0.0f, extra = 0.0f;
            for (int g = 0; g < q->ngroups; g++) {
                float ag = 0.0f;
                for (int b = g * bpg; b < (g + 1) * bpg; b++) {
                    int32_t is = 0, ctr = q->bits == 8 ? 0 : 1 << (q->bits - 1); /* centred codes */
                    for (int k = 0; k < 32; k++)
                        is += (get_q(row, q->bits, b * 32 + k) - ctr) * xq[(size_t)m * q->cols_pad + (size_t)b * 32 + k];
                    ag += (float)is * xs[(size_t)m * nb + b];
                }
                float sg = ls_qmat_scale(q, r, g);
                acc += sg * ag;
                if (q->hmin)
                    extra += (ls_qmat_min(q, r, g) + (float)(1 << (q->bits - 1)) * sg) * xsum[(size_t)m * q->ngroups + g];
            }
            Y[(size_t)m * q->rows + r] = acc + extra;
        }
    }
}

void ls_qmat_matmul_rows(const ls_qmat *q, const float *X, int M, float *Y, int nthreads, ls_qimpl impl) {
    if (M <= 0) return;
    ls_isa isa = impl_isa(impl);
    int fast = isa != LS_ISA_SCALAR;
    if (q->bits >= 16 && !fast) {
        matmul_ref(q, X, M, Y);
        return;
    }
    /* the fast kernels read whole 32-value blocks: pad X rows with zeros when ragged */
    const float *Xp = X;
    float *pad = NULL;
    if (q->cols_pad != q->cols) {
        pad = ls_aligned_calloc(32, (size_t)M * q->cols_pad * sizeof(float));
        LS_ASSERT(pad);
        for (int m = 0; m < M; m++) memcpy(pad + (size_t)m * q->cols_pad, X + (size_t)m * q->cols, (size_t)q->cols * 4);
        Xp = pad;
    }
    float *xsum = NULL, *xs = NULL, *xqsum = NULL;
    int8_t *xq = NULL, *xp = NULL;
    float *xsv = NULL;
    if (q->hmin) {
        /* Σx per group, shared by every W row (the offset term of asymmetric formats) */
        xsum = malloc(sizeof(float) * (size_t)M * q->ngroups);
        LS_ASSERT(xsum);
        for (int m = 0; m < M; m++)
            for (int g = 0; g < q->ngroups; g++) {
                const float *x = Xp + (size_t)m * q->cols_pad + (size_t)g * q->group;
                float s = 0.0f;
                for (int k = 0; k < q->group; k++) s += x[k];
                xsum[(size_t)m * q->ngroups + g] = s;
            }
    }
    if (q->bits <= 8) {
        /* integer formats: activations to int8 per 32-block, products in integers */
        xq = ls_aligned_alloc(32, (size_t)M * q->cols_pad);
        xs = malloc(sizeof(float) * (size_t)M * (q->cols_pad / 32));
        LS_ASSERT(xq && xs);
        ls_quant_x_i8(Xp, M, q->cols_pad, q->cols_pad, xq, xs);
        if (q->hmin) {
            /* per-group sums of the rounded activations, for the kernels' centring term */
            int bpg = q->group / 32, nb = q->cols_pad / 32;
            xqsum = malloc(sizeof(float) * (size_t)M * q->ngroups);
            LS_ASSERT(xqsum);
            for (int m = 0; m < M; m++)
                for (int g = 0; g < q->ngroups; g++) {
                    float s = 0.0f;
                    for (int b = g * bpg; b < (g + 1) * bpg; b++) {
                        int32_t is = 0;
                        for (int k = 0; k < 32; k++) is += xq[(size_t)m * q->cols_pad + (size_t)b * 32 + k];
                        s += (float)is * xs[(size_t)m * nb + b];
                    }
                    /* what the kernels need is Σx - Σx̂, the rounding error per group */
                    xqsum[(size_t)m * q->ngroups + g] = xsum[(size_t)m * q->ngroups + g] - s;
                }
        }
        if (!fast) {
            rows_i8_ref(q, xq, xs, xsum, M, Y);
            goto done;
        }
        int np = (q->cols_pad / 32 + 1) / 2;
        xp = ls_aligned_alloc(32, (size_t)M * np * 64);
        xsv = ls_aligned_alloc(32, sizeof(float) * (size_t)M * np * 8);
        LS_ASSERT(xp && xsv);
        ls_quant_x_pairs(q->bits, xq, xs, M, q->cols_pad, xp, xsv);
        if (xqsum) /* the fast kernels take the centring term premultiplied by the code centre */
            for (size_t i = 0; i < (size_t)M * q->ngroups; i++) xqsum[i] *= (float)(1 << (q->bits - 1));
    }
    ls_quant_act act = {xp, xsv, xsum, xqsum, ls_quant_decode_rows()};
    if (nthreads <= 1 || q->rows < 64) {
        rows_simd(isa, q, 0, q->rows, Xp, M, Y, &act);
    } else {
        /* rows split over threads in chunks of whole 4-row blocks; each output is computed
         * by one thread the same way whatever the split (no cross-thread reduction) */
        int nchunk = nthreads * 4, nblk = (q->rows + 3) / 4;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
        for (int ch = 0; ch < nchunk; ch++) {
            int r0 = 4 * (int)((int64_t)nblk * ch / nchunk), r1 = 4 * (int)((int64_t)nblk * (ch + 1) / nchunk);
            if (r1 > q->rows) r1 = q->rows;
            if (r1 > r0) rows_simd(isa, q, r0, r1, Xp, M, Y, &act);
        }
    }
done:
    free(xsum);
    free(xqsum);
    free(xs);
    ls_aligned_free(xq);
    ls_aligned_free(xp);
    ls_aligned_free(xsv);
    ls_aligned_free(pad);
}

void ls_qmat_matvec_impl(const ls_qmat *q, const float *x, float *y, ls_qimpl impl) {
    ls_qmat_matmul_rows(q, x, 1, y, 1, impl);
}

void ls_qmat_matvec(const ls_qmat *q, const float *x, float *y) { ls_qmat_matmul_rows(q, x, 1, y, 1, LS_QIMPL_AUTO); }

enum { TILE_ROWS = 64 };

void ls_qmat_matmul(const ls_qmat *q, const float *X, int M, float *Y, ls_qimpl impl) {
    if (M <= 0) return;
    ls_isa isa = impl_isa(impl);
    if (impl == LS_QIMPL_REF) {
        matmul_ref(q, X, M, Y);
        return;
    }
    if (q->bits <= 8 && isa != LS_ISA_SCALAR && impl != LS_QIMPL_DEQUANT) {
        /* a few rows: the decode kernels (weights streamed once for all rows); more: the
         * level's integer GEMM */
        if (M <= LS_QTILE_SMALL_M) ls_qmat_matmul_rows(q, X, M, Y, 1, impl);
        else
            LS_ASSERT(ls_quant_prefill_run(q, X, M, Y,
                                           isa == LS_ISA_AMX      ? &ls_quant_pf_amx
                                           : isa == LS_ISA_AVX512 ? ls_quant_pf_avx512_level()
                                                                  : &ls_quant_pf_avx2) == LS_OK);
        return;
    }
    if (q->bits == 32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, q->rows, q->cols, 1.0f, X, q->cols,
                    (const float *)q->data, (int)(q->row_bytes / 4), 0.0f, Y, q->rows);
        return;
    }
    /* dequantize TILE_ROWS rows of W at a time into an L2-resident buffer, then sgemm */
    float *buf = ls_aligned_alloc(32, (size_t)TILE_ROWS * q->cols_pad * sizeof(float));
    LS_ASSERT(buf);
    for (int r0 = 0; r0 < q->rows; r0 += TILE_ROWS) {
        int nr = q->rows - r0 < TILE_ROWS ? q->rows - r0 : TILE_ROWS;
        for (int r = 0; r < nr; r++) {
            if (isa >= LS_ISA_AVX512) ls_quant_dequant_row_avx512(q, r0 + r, buf + (size_t)r * q->cols_pad);
            else if (isa == LS_ISA_AVX2) ls_quant_dequant_row_avx2(q, r0 + r, buf + (size_t)r * q->cols_pad);
            else dequant_row_pad(q, r0 + r, buf + (size_t)r * q->cols_pad);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nr, q->cols, 1.0f, X, q->cols, buf, q->cols_pad, 0.0f,
                    Y + r0, q->rows);
    }
    ls_aligned_free(buf);
}
