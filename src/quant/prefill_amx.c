/* prefill_amx.c - the tile of the integer prefill GEMM on AMX-INT8 (prefill.c packs the
 * operands and loops over the tiles; the decode kernels stay AVX-512's).
 *
 * One tdpbssd multiplies a 16 × 64 tile of signed bytes (A: 16 weight rows × 64 centred
 * codes, rows at stride cols_pad) by a 16 × 64 tile (B: 16 column quads × 16 tokens × 4
 * bytes, exactly the avx512 level's activation packing, but signed: no +128 offset) into
 * 16 × 16 int32 sums (weight rows × tokens). A group of g columns takes g/64 of them (one
 * of 32 rows for a group of 32), then the sums are stored and turned into fp32 once per
 * group with the same operations, in the same order, as the avx512 tile: the two levels'
 * outputs are bit-identical. Tiles: 32 weight rows × 2 token blocks (4 accumulator tiles,
 * 2 A, 2 B: all 8 tile registers). The tile configuration is loaded per call and the
 * tiles released at its end. Needs the OS's leave (ls_cpu_isa_supported(LS_ISA_AMX)). */
#include <immintrin.h>
#include <string.h>

#include "quant/quant_internal.h"

#define TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,amx-tile,amx-int8")))

enum { RBA = 32, TBA = 2 };

/* The 64-byte tile configuration of palette 1. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* fp32 outputs of one 16-row accumulator tile c (rows i0.., token block t) for group g. */
TARGET static inline __attribute__((always_inline)) void rescale(const ls_quant_pf *p, const int32_t *c, int i0, int t,
                                                                 int ntb, int tb0, int g, float *out) {
    const ls_quant_xpack *a = &p->x;
    size_t xo = ((size_t)(tb0 + t) * a->G + g) * 16;
    __m512 xs = _mm512_load_ps(a->xs + xo), xsum = _mm512_load_ps(a->xsum + xo);
    for (int i = 0; i < 16; i++) {
        float *o = out + (size_t)(i0 + i) * ntb * 16 + t * 16;
        __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + 16 * i))),
                                   _mm512_mul_ps(_mm512_set1_ps(p->s[i0 + i][g]), xs), _mm512_load_ps(o));
        if (p->c[0]) f = _mm512_fmadd_ps(_mm512_set1_ps(p->c[i0 + i][g]), xsum, f);
        _mm512_store_ps(o, f);
    }
}

TARGET static void tile_amx(const ls_quant_pf *p, int tb0, int ntb, float *out /* [RBA][ntb*16], zeroed */) {
    const ls_quant_xpack *a = &p->x;
    int gs = p->q->group, kc = gs < 64 ? gs : 64, K = p->q->cols_pad;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 2; t++) cfg.rows[t] = 16, cfg.colsb[t] = (uint16_t)kc;     /* A: 16 W rows × kc codes */
    for (int t = 2; t < 4; t++) cfg.rows[t] = (uint8_t)(kc / 4), cfg.colsb[t] = 64; /* B: kc/4 quads × 16 tokens */
    for (int t = 4; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;                /* C: 16 W rows × 16 tokens */
    _tile_loadconfig(&cfg);
    int32_t cb[4][256] __attribute__((aligned(64)));
    const int8_t *w0 = p->w[0], *w1 = p->w[0] + 16 * (size_t)K;
    const uint8_t *x0 = a->xp + (size_t)tb0 * a->K4 * 64, *x1 = x0 + (size_t)a->K4 * 64;
    for (int g = 0; g < a->G; g++) {
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        for (int c = g * gs; c < (g + 1) * gs; c += kc) {
            _tile_loadd(0, w0 + c, K);
            _tile_loadd(1, w1 + c, K);
            _tile_loadd(2, x0 + (size_t)c * 16, 64);
            _tile_dpbssd(4, 0, 2);
            _tile_dpbssd(5, 1, 2);
            if (ntb == 2) {
                _tile_loadd(3, x1 + (size_t)c * 16, 64);
                _tile_dpbssd(6, 0, 3);
                _tile_dpbssd(7, 1, 3);
            }
        }
        _tile_stored(4, cb[0], 64);
        _tile_stored(5, cb[1], 64);
        if (ntb == 2) {
            _tile_stored(6, cb[2], 64);
            _tile_stored(7, cb[3], 64);
        }
        for (int t = 0; t < ntb; t++) {
            rescale(p, cb[2 * t], 0, t, ntb, tb0, g, out);
            rescale(p, cb[2 * t + 1], 16, t, ntb, tb0, g, out);
        }
    }
    _tile_release();
}

const ls_quant_pf_level ls_quant_pf_amx = {16, 0, 1, {RBA, RBA, RBA}, {TBA, TBA, TBA}, tile_amx, 1};
