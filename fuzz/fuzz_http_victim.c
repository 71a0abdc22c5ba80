/* fuzz_http_victim.c - libFuzzer target: any bytes as the body of the victim service's
 * POST /predict through its query parser (parse_inputs, reached by including
 * steal/server.c), for a 2x3 input in [0, 1] with a batch limit of 8. */
#include "../src/steal/server.c"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ls_victim_server s;
    static int done;
    if (!done) {
        fuzz_quiet();
        ls_victim_server_opts_default(&s.o);
        s.o.max_batch = 8;
        s.d = 6;
        s.shape[0] = 1, s.shape[1] = 2, s.shape[2] = 3;
        s.lo = 0.0f, s.hi = 1.0f;
        done = 1;
    }
    char msg[256];
    float *x = NULL;
    int n = 0;
    char *body = fuzz_str(data, size);
    if (parse_inputs(&s, body, size, &x, &n, msg, sizeof msg) == 0) {
        if (n < 1 || n > s.o.max_batch || !x) abort();
        for (int i = 0; i < n * s.d; i++)
            if (!(x[i] >= s.lo && x[i] <= s.hi)) abort(); /* clamped into the input range */
    }
    free(x);
    free(body);
    return 0;
}
