/* fuzz_replica_file.c - libFuzzer target: any bytes as a replica file (`steal --out`, a
 * safetensors file whose "llmsys.steal" metadata gives shape, range, members and tree) through
 * ls_replica_load, the checksum optional (LLMSYS_ALLOW_UNCHECKED, so mutated headers reach the
 * replica's own checks). A replica that loads predicts two rows (labels within its classes) and
 * is freed. */
#include <stdlib.h>

#include "fuzz_util.h"
#include "llmsys/steal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int done;
    if (!done) {
        fuzz_quiet();
        setenv("LLMSYS_ALLOW_UNCHECKED", "1", 1);
        done = 1;
    }
    const char *path = fuzz_file(data, size, ".safetensors");
    ls_replica *r;
    if (ls_replica_load(path, &r) == LS_OK) {
        int d, k;
        ls_replica_info(r, &d, &k);
        if (d < 1 || k < 1) abort();
        float *x = calloc(2 * (size_t)d, sizeof(float));
        int32_t y[2];
        if (!x) abort();
        for (int i = 0; i < d; i++) x[d + i] = 1.0f;
        if (ls_replica_predict(r, x, 2, y) == LS_OK)
            for (int i = 0; i < 2; i++)
                if (y[i] < 0 || y[i] >= k) abort();
        free(x);
        ls_replica_free(r);
    }
    fuzz_file_done();
    return 0;
}
