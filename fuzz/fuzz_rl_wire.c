/* fuzz_rl_wire.c - libFuzzer target: the bytes an rl worker takes off the network.
 * 1. The input's tail as a message payload of the type its first byte names, sealed (so the
 *    fuzzer gets past the checksum; a size that is a multiple of 7 flips one header byte
 *    after sealing instead), opened with rl_msg_open and read field by field, the field
 *    kinds chosen by the payload's own bytes, until the reader goes bad.
 * 2. The input as a stream of weight chunks for the reassembler: each record is a header
 *    (version, index, count, offset, len, total from the input; total under 1 MiB, the
 *    chunk's hash set right unless a flag bit says not) and its bytes. Checked: the newest
 *    complete version never goes backwards, and the bytes it holds hash to the whole-version
 *    hash its chunks were sent with. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "llmsys/rl.h"
#include "rl/internal.h"

static uint64_t take(const uint8_t **p, size_t *n, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && *n; i++, (*p)++, (*n)--) v |= (uint64_t) * *p << (8 * i);
    return v;
}

static void messages(const uint8_t *data, size_t size) {
    rl_buf b = {0};
    rl_msg_begin(&b, data[0] % (M_ACK + 2));
    rl_put(&b, data + 1, size - 1);
    if (rl_msg_end(&b) != LS_OK) {
        rl_buf_free(&b);
        return;
    }
    if (size % 7 == 0) b.p[size % sizeof(rl_hdr)] ^= 0x20;
    rl_rd r;
    if (rl_msg_open(b.p, b.n, "fuzz", &r) == LS_OK) {
        char s[64];
        for (size_t k = 0; !r.bad && k < 4096; k++) {
            switch (r.p[r.off % (r.n ? r.n : 1)] & 3) {
            case 0:
                (void)rl_get_i32(&r);
                break;
            case 1:
                (void)rl_get_i64(&r);
                break;
            case 2:
                (void)rl_get_f64(&r);
                break;
            default:
                (void)rl_get_str(&r, s, sizeof s);
                break;
            }
            if (r.n == 0) break;
        }
    }
    rl_buf_free(&b);
}

static void chunks(const uint8_t *p, size_t n) {
    ls_rl_asm *a;
    if (ls_rl_asm_init(&a) != LS_OK) return;
    int64_t newest = -1;
    uint64_t newest_hash = 0;
    while (n >= 16) {
        ls_rl_chunk_hdr h = {0};
        int flags = (int)take(&p, &n, 1);
        h.version = (int64_t)(take(&p, &n, 1) % 8) - 1;
        h.count = (uint32_t)take(&p, &n, 2);
        h.index = (uint32_t)take(&p, &n, 2);
        h.total = take(&p, &n, 3) % (1u << 20);
        h.offset = take(&p, &n, 3);
        h.len = take(&p, &n, 2);
        h.version_hash = take(&p, &n, 2);
        if (flags & 1) h.count %= 4, h.index %= 4; /* mostly small versions, so some complete */
        if (flags & 2) h.total %= 64, h.offset %= 64, h.len %= 64;
        size_t have = h.len < n ? (size_t)h.len : n;
        uint8_t *d = malloc(h.len ? (size_t)h.len : 1); /* the chunk's bytes: the input's, then zeros */
        if (!d) break;
        memset(d, 0, h.len ? (size_t)h.len : 1);
        memcpy(d, p, have);
        p += have, n -= have;
        if (!(flags & 4)) h.chunk_hash = ls_hash64(d, (size_t)h.len);
        if (flags & 8) h.version_hash = ls_hash64(d, (size_t)h.len); /* a one-chunk version that checks */
        int rc = ls_rl_asm_add(a, &h, d);
        free(d);
        const void *bytes;
        size_t len;
        int64_t latest = ls_rl_asm_latest(a, &bytes, &len);
        if (latest < newest) abort(); /* the newest complete version went backwards */
        if (rc == 1) {
            if (latest != h.version || ls_hash64(bytes, len) != h.version_hash) abort();
            newest_hash = h.version_hash;
        }
        if (latest >= 0 && ls_hash64(bytes, len) != newest_hash) abort();
        newest = latest;
    }
    ls_rl_asm_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) fuzz_quiet(), quiet = 1;
    if (size == 0 || size > (1u << 20)) return 0;
    messages(data, size);
    chunks(data, size);
    return 0;
}
