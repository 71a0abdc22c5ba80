/* cpu.c - one CPU-feature probe (cpuid via the compiler's builtins) and the SIMD level a
 * kernel family should use, overridable with LLMSYS_ISA for tests and benchmarks. */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "llmsys/core.h"

char *openblas_get_corename(void); /* OpenBLAS (dynamic-arch builds): the kernels it runs */

/* AMX-TILE and AMX-INT8 (cpuid leaf 7, EDX bits 24 and 25) and the kernel's leave to use the
 * tile data (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) once per process;
 * then XCR0 bits 17-18). 0 when any step fails; ls_cpu_features asks once and keeps it. */
static int amx_usable(void) {
    unsigned a, b, c, d;
    int ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24)) && (d & (1u << 25));
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (ok && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) ok = 0;
#else
    ok = 0;
#endif
    if (ok) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        ok = (lo & (3u << 17)) == (3u << 17);
    }
    return ok;
}

unsigned ls_cpu_features(void) {
    /* probed once: cpuid traps to the hypervisor in a VM (several µs a call), and the
     * kernels ask on every call */
    static _Atomic unsigned known; /* the bits + 1u << 31 once probed */
    unsigned k = known;
    if (k) return k & ~(1u << 31);
    __builtin_cpu_init();
    unsigned f = 0;
    if (__builtin_cpu_supports("avx2")) f |= LS_CPU_AVX2;
    if (__builtin_cpu_supports("fma")) f |= LS_CPU_FMA;
    unsigned a, b, c, d; /* F16C from cpuid leaf 1 (ECX bit 29): clang's builtin does not know "f16c" */
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29))) f |= LS_CPU_F16C;
    if (__builtin_cpu_supports("avx512f")) f |= LS_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw")) f |= LS_CPU_AVX512BW;
    if (__builtin_cpu_supports("avx512vl")) f |= LS_CPU_AVX512VL;
    if (__builtin_cpu_supports("avx512vnni")) f |= LS_CPU_AVX512VNNI;
    if (__builtin_cpu_supports("avx512bf16")) f |= LS_CPU_AVX512BF16;
    if (amx_usable()) f |= LS_CPU_AMXINT8;
    known = f | 1u << 31;
    return f;
}

const char *ls_cpu_features_str(unsigned f, char *buf, size_t n) {
    static const char *const names[] = {"avx2",     "fma",      "f16c",       "avx512f",
                                        "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "amx-int8"};
    size_t o = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++) {
        if (!(f & (1u << i)) || o + strlen(names[i]) + 2 > n) continue;
        o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? "," : "", names[i]);
    }
    if (o == 0 && n > 4) snprintf(buf, n, "none");
    return buf;
}

int ls_cpu_isa_supported(ls_isa isa) {
    unsigned f = ls_cpu_features();
    unsigned avx2 = LS_CPU_AVX2 | LS_CPU_FMA | LS_CPU_F16C;
    unsigned avx512 = avx2 | LS_CPU_AVX512F | LS_CPU_AVX512BW | LS_CPU_AVX512VL | LS_CPU_AVX512VNNI;
    switch (isa) {
    case LS_ISA_SCALAR: return 1;
    case LS_ISA_AVX2: return (f & avx2) == avx2;
    case LS_ISA_AVX512: return (f & avx512) == avx512;
    case LS_ISA_AMX: return (f & (avx512 | LS_CPU_AMXINT8)) == (avx512 | LS_CPU_AMXINT8);
    default: return 0;
    }
}

const char *ls_isa_name(ls_isa isa) {
    switch (isa) {
    case LS_ISA_SCALAR: return "scalar";
    case LS_ISA_AVX2: return "avx2";
    case LS_ISA_AVX512: return "avx512";
    case LS_ISA_AMX: return "amx";
    default: return "?";
    }
}

ls_isa ls_cpu_isa_upto(ls_isa top) {
    int i = top;
    while (i > LS_ISA_SCALAR && !ls_cpu_isa_supported((ls_isa)i)) i--;
    return (ls_isa)i;
}

ls_isa ls_cpu_isa(void) {
    ls_isa best = ls_cpu_isa_upto(LS_ISA_AMX);
    const char *e = getenv("LLMSYS_ISA");
    if (!e || !*e) return best;
    for (int i = LS_ISA_SCALAR; i <= LS_ISA_AMX; i++)
        if (!strcmp(e, ls_isa_name((ls_isa)i))) return (ls_isa)i <= best ? (ls_isa)i : best;
    return best; /* unknown names are ignored: the best level is always safe */
}

/* OpenBLAS picks its kernels once, as it loads, from the CPU's model number. A model newer
 * than the library gets its generic fallback, the Prescott (SSE3) kernels: Debian 12's
 * OpenBLAS 0.3.21 does this on a 5th-generation Xeon (family 6, model 207), where its sgemm
 * then runs at a fifth of the AVX-512 kernels' speed (docs/training.md). The kernels this
 * CPU's features can run instead, or NULL where OpenBLAS's own pick stands. */
const char *ls_cpu_blas_core(const char *picked, unsigned f) {
    if (!picked || strcmp(picked, "Prescott")) return NULL;
    unsigned avx512 = LS_CPU_AVX512F | LS_CPU_AVX512BW | LS_CPU_AVX512VL;
    if ((f & avx512) == avx512) return "SkylakeX";
    if ((f & (LS_CPU_AVX2 | LS_CPU_FMA)) == (LS_CPU_AVX2 | LS_CPU_FMA)) return "Haswell";
    return NULL;
}

const char *ls_cpu_blas_core_picked(void) { return openblas_get_corename(); }
