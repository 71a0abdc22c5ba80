/* fuzz_tokenizer.c - libFuzzer target: any bytes as a tokenizer.json through the BPE loader
 * (ls_bpe_parse); a tokenizer it accepts then encodes and decodes a fixed text. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "llmsys/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int done;
    if (!done) fuzz_quiet(), done = 1;
    char *s = fuzz_str(data, size);
    ls_bpe *t;
    if (ls_bpe_parse(s, size, &t) == LS_OK) {
        static const char text[] = "The loader mixes sources; 12+30=42.\n\xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82";
        int32_t *ids = NULL;
        size_t n = 0, len = 0;
        char *back = NULL;
        if (ls_bpe_encode(t, text, sizeof text - 1, &ids, &n) == LS_OK) {
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= ls_bpe_vocab_size(t)) abort(); /* ids within the vocabulary */
            if (ls_bpe_decode(t, ids, n, &back, &len) == LS_OK) free(back);
        }
        free(ids);
        ls_bpe_free(t);
    }
    free(s);
    return 0;
}
