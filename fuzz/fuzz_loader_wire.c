/* fuzz_loader_wire.c - libFuzzer target for the loader service's messages. The first byte
 * picks: 0 a batch reply through the trainer's decoder (ls_loader_batch_decode); 1 a raw
 * request frame, 2 a well-framed request (type, step, rank, payload from the input) through
 * the service's request handler, on a real service over a tiny mix (its static functions
 * are reached by including service.c). */
#include "../src/loader/service.c"

#include "fuzz_util.h"

static ls_loader_server *srv;
static ls_loader_mix mix;

static char dir[128];

static void remove_dir(void) {
    char f[200];
    for (int i = 0; i < 3; i++) snprintf(f, sizeof f, "%s/d%d.txt", dir, i), unlink(f);
    rmdir(dir);
}

static void init(void) {
    fuzz_quiet();
    char f[160];
    snprintf(dir, sizeof dir, "/tmp/llmsys-fuzz-loader-%d", (int)getpid());
    atexit(remove_dir);
    if (ls_mkdirs(dir) != LS_OK) abort();
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "%s/d%d.txt", dir, i);
        FILE *fp = fopen(f, "w");
        if (!fp) abort();
        for (int k = 0; k < 40 * (i + 1); k++) fprintf(fp, "document %d line %d of fuzz text\n", i, k);
        fclose(fp);
    }
    const char *js = "{\"n_ctx\": 32, \"tokens_per_rank\": 64, \"micro_batches\": 1, \"seed\": 1,"
                     " \"sources\": [{\"name\": \"a\", \"path\": \".\"}, {\"name\": \"b\", \"path\": \".\"}]}";
    ls_loader_serve_opts o = {2, 2, 1, NULL};
    if (ls_loader_mix_parse(js, dir, &mix) != LS_OK ||
        ls_loader_server_open(&srv, &mix, 2, NULL, 0, &o, NULL, 0) != LS_OK)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int done;
    if (!done) init(), done = 1;
    if (size < 1) return 0;
    int mode = data[0] % 3;
    data++, size--;
    if (mode == 0) {
        ls_loader_batch b;
        if (ls_loader_batch_decode(data, size, &b) == LS_OK) ls_loader_batch_free(&b);
        return 0;
    }
    uint8_t *frame = NULL;
    size_t n = 0;
    if (mode == 1) {
        frame = malloc(size + 1);
        if (!frame) return 0;
        memcpy(frame, data, size);
        n = size;
    } else {
        if (size < 13) return 0;
        int64_t step;
        int32_t rank;
        memcpy(&step, data + 1, 8);
        memcpy(&rank, data + 9, 4);
        int type = data[0] % 3 + 1; /* batch, control, info (a shutdown would end the constructor) */
        if (frame_req(type, step, rank, data + 13, size - 13, &frame, &n) != LS_OK) return 0;
    }
    zmq_msg_t body;
    zmq_msg_init_size(&body, n);
    if (n) memcpy(zmq_msg_data(&body), frame, n);
    handle(srv, NULL, 0, &body);
    zmq_msg_close(&body);
    free(frame);
    atomic_store(&srv->stop, 0);
    return 0;
}
