/* fuzz_serve_wire.c - libFuzzer target: any bytes as a pipeline stage message (sealed first,
 * so the fuzzer gets past the checksum; magic, version and length are set too unless the
 * size is a multiple of 7) through the checks a stage runs (ls_wire_check,
 * ls_wire_forward_parse) and, when they pass, the stage's forward pass on a tiny 2-layer
 * model: the first stage (tokens in) when the header's stage field is even, else the second
 * (activations in). */
#include <stdlib.h>
#include <string.h>

#include "../tests/serve/ckpt_util.h"
#include "fuzz_util.h"
#include "llmsys/serve.h"
#include "serve/wire.h"

static ls_engine *eng[2];
static float *outbuf;
static size_t outcap;

static void init(void) {
    fuzz_quiet();
    ls_model_config cfg = {.vocab = LS_VOCAB, .n_ctx = 16, .n_layer = 2, .n_head = 2, .d_model = 8, .d_ff = 16};
    ls_model *m = make_model(&cfg, 3, 1.0f);
    char path[128];
    snprintf(path, sizeof path, "/tmp/llmsys-fuzz-wire-%d.safetensors", (int)getpid());
    if (!m || write_model_ckpt(m, path) != 0) abort();
    ls_model_free(m);
    for (int i = 0; i < 2; i++) {
        ls_engine_opts o = ls_engine_defaults();
        o.layer_begin = i;
        o.layer_end = i + 1;
        o.max_seqs = 4;
        o.nthreads = 1;
        if (ls_engine_open(&eng[i], path, &o) != LS_OK) abort();
    }
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int done;
    if (!done) init(), done = 1;
    if (size < sizeof(ls_wire_hdr) || size > (1u << 20)) return 0;
    char *msg = malloc(size); /* aligned, as the stage's own copy */
    if (!msg) return 0;
    memcpy(msg, data, size);
    if (size % 7) { /* mostly: a well-formed header around the fuzzed fields, so runs go deep */
        ls_wire_hdr *w = (ls_wire_hdr *)msg;
        w->magic = LS_WIRE_MAGIC;
        w->version = LS_WIRE_VERSION;
        w->payload_bytes = size - sizeof *w;
    }
    ls_wire_seal(msg, size);
    const ls_engine_seq *seqs;
    const void *body;
    ls_wire_hdr h;
    memcpy(&h, msg, sizeof h);
    int first = !(h.stage & 1);
    ls_engine *e = eng[first ? 0 : 1];
    if (ls_wire_check(msg, size, "fuzz") == LS_OK && h.type == LS_MSG_FORWARD &&
        ls_wire_forward_parse(msg, size, first, ls_engine_config(e)->d_model, &seqs, &body) == LS_OK) {
        size_t nout = ls_engine_out_floats(e, seqs, (int)h.nseq, 0);
        if (nout > outcap) {
            free(outbuf);
            outbuf = malloc(nout * sizeof(float) + 1);
            outcap = outbuf ? nout : 0;
        }
        if (outbuf)
            (void)ls_engine_forward(e, seqs, (int)h.nseq, first ? (const int *)body : NULL,
                                    first ? NULL : (const float *)body, outbuf, 0);
    }
    free(msg);
    return 0;
}
