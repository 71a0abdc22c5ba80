/* kernels_avx2.c - the quantized kernels (kernels_body.h) for AVX2/FMA/F16C CPUs. */
#define LS_KTARGET "avx2,fma,f16c"
#define LS_KVNNI 0
#define LS_KFN(name) name##_avx2
#include "quant/kernels_body.h"
