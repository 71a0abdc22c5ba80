/* fuzz_victim_file.c - libFuzzer target: any bytes as a victim file (`victim train --out`,
 * victim.bin) through ls_victim_load, sealed first (its trailing 64-bit hash appended, so the
 * fuzzer gets past the checksum to the header and body parsers). A victim that loads predicts
 * two rows (labels within its classes; probabilities too, for the memory they touch) and is freed. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "llmsys/steal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int done;
    if (!done) fuzz_quiet(), done = 1;
    uint8_t *sealed = malloc(size + 8);
    if (!sealed) abort();
    if (size) memcpy(sealed, data, size);
    uint64_t h = ls_hash64(sealed, size);
    memcpy(sealed + size, &h, 8);
    const char *path = fuzz_file(sealed, size + 8, ".bin");
    free(sealed);
    ls_victim *v;
    if (ls_victim_load(path, &v) == LS_OK) {
        int d, k, shape[3];
        float lo, hi;
        ls_victim_info(v, &d, &k, &lo, &hi, shape);
        if (d < 1 || k < 2 || !(hi > lo)) abort();
        float *x = malloc(sizeof(float) * 2 * (size_t)d), *p = malloc(sizeof(float) * 2 * (size_t)k);
        int32_t y[2];
        if (!x || !p) abort();
        for (int i = 0; i < d; i++) x[i] = lo, x[d + i] = hi; /* the two corners of the input range */
        if (ls_victim_predict(v, x, 2, y) == LS_OK)
            for (int i = 0; i < 2; i++)
                if (y[i] < 0 || y[i] >= k) abort();
        (void)ls_victim_predict_proba(v, x, 2, p); /* values unchecked: a forged file may hold NaN weights */
        free(x);
        free(p);
        ls_victim_free(v);
    }
    fuzz_file_done();
    return 0;
}
