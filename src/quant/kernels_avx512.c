/* kernels_avx512.c - the quantized kernels (kernels_body.h) for CPUs with AVX-512
 * F/BW/VL and VNNI: the same 256-bit tiles with vpdpbusd for the integer dot products. */
#define LS_KTARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define LS_KVNNI 1
#define LS_KFN(name) name##_avx512
#include "quant/kernels_body.h"
