/* fuzz_http_serve.c - libFuzzer target: any bytes as the body of POST /v1/completions and
 * /v1/chat/completions through serve's request parser (parse_completion, reached by
 * including server.c), for a server whose model has a 32-token context; the first byte
 * picks completion or chat. */
#include "../src/serve/server.c"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ls_server s;
    static int done;
    if (!done) {
        fuzz_quiet();
        s.cfg.n_ctx = 32;
        s.cfg.vocab = LS_VOCAB;
        snprintf(s.name, sizeof s.name, "m");
        done = 1;
    }
    if (size < 1) return 0;
    req r;
    memset(&r, 0, sizeof r);
    r.chat = data[0] & 1;
    char err[256];
    char *body = fuzz_str(data + 1, size - 1);
    if (parse_completion(&s, body, size - 1, &r, err, sizeof err) == 0) {
        /* an accepted request is within the model's limits */
        if (r.n_prompt < 1 || r.n_prompt >= s.cfg.n_ctx || r.max_tokens < 1 || r.max_tokens > s.cfg.n_ctx) abort();
        for (int i = 0; i < r.n_prompt; i++)
            if (r.prompt[i] < 0 || r.prompt[i] >= s.cfg.vocab) abort();
    }
    free(r.prompt);
    free(body);
    return 0;
}
