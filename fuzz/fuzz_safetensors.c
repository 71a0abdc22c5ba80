/* fuzz_safetensors.c - libFuzzer target: any bytes as a safetensors file through the reader
 * (ls_st_open, every tensor touched) and the checkpoint probe every loader uses (ls_ckpt_info). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "llmsys/safetensors.h"
#include "llmsys/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        fuzz_quiet();
        setenv("LLMSYS_ALLOW_UNCHECKED", "1", 1); /* reach the parser behind the checksum */
        init = 1;
    }
    const char *path = fuzz_file(data, size, ".safetensors");
    ls_st_file *f;
    if (ls_st_open_ex(path, LS_ST_ALLOW_UNCHECKED, &f) == LS_OK) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < ls_st_count(f); i++) {
            const ls_st_tensor *t = ls_st_get(f, i);
            if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
            if (ls_st_find(f, t->name) == NULL) abort(); /* every listed tensor can be found by name */
        }
        (void)ls_st_meta(f, "llmsys.config");
        ls_st_close(f);
    }
    ls_model_config cfg;
    int *bits = NULL, group = 0;
    if (ls_ckpt_info(path, &cfg, &bits, &group) == LS_OK) free(bits);
    fuzz_file_done();
    return 0;
}
