/* wire.c - sealing and checking pipeline messages (magic, version, checksum). */
#include "serve/wire.h"

#include <string.h>

static uint64_t msg_hash(const void *msg, size_t len) {
    ls_wire_hdr h;
    memcpy(&h, msg, sizeof h);
    h.checksum = 0;
    /* hash the header copy and the payload separately, then combine */
    uint64_t a = ls_hash64(&h, sizeof h);
    uint64_t b = ls_hash64((const char *)msg + sizeof h, len - sizeof h);
    return a ^ (b * 0x9E3779B97F4A7C15ull);
}

void ls_wire_seal(void *msg, size_t len) {
    ls_wire_hdr *h = msg;
    h->checksum = 0;
    h->checksum = msg_hash(msg, len);
}

int ls_wire_check(const void *msg, size_t len, const char *what) {
    if (len < sizeof(ls_wire_hdr)) return ls_err(LS_EFORMAT, "%s: message of %zu bytes is shorter than a header", what, len);
    ls_wire_hdr h;
    memcpy(&h, msg, sizeof h);
    if (h.magic != LS_WIRE_MAGIC) return ls_err(LS_EFORMAT, "%s: bad magic 0x%08x (not an llmsys pipeline message)", what, h.magic);
    if (h.version != LS_WIRE_VERSION) return ls_err(LS_EFORMAT, "%s: wire version %u, expected %d", what, h.version, LS_WIRE_VERSION);
    if (h.payload_bytes != len - sizeof h)
        return ls_err(LS_EFORMAT, "%s: payload of %zu bytes, header says %llu", what, len - sizeof h, (unsigned long long)h.payload_bytes);
    if (msg_hash(msg, len) != h.checksum) return ls_err(LS_ECHECKSUM, "%s: message checksum mismatch", what);
    return LS_OK;
}

int ls_wire_forward_parse(const void *msg, size_t len, int first, int d_model, const ls_engine_seq **seqs,
                          const void **body) {
    ls_wire_hdr h;
    memcpy(&h, msg, sizeof h);
    size_t pb = len - sizeof h; /* ls_wire_check: payload_bytes == pb */
    const char *bad = "malformed micro-batch (sequence table and payload disagree)";
    if (h.nseq < 1 || h.nseq > pb / sizeof(ls_engine_seq)) return ls_err(LS_EFORMAT, "%s", bad);
    const ls_engine_seq *sq = (const ls_engine_seq *)((const char *)msg + sizeof h);
    uint64_t ntok = 0;
    for (uint32_t i = 0; i < h.nseq; i++) {
        if (sq[i].n < 0) return ls_err(LS_EFORMAT, "%s", bad);
        ntok += (uint64_t)sq[i].n;
    }
    if (ntok != h.ntok || d_model < 1) return ls_err(LS_EFORMAT, "%s", bad);
    uint64_t want = first ? ntok * sizeof(int32_t) : ntok * (uint64_t)d_model * sizeof(float);
    if (pb != h.nseq * sizeof(ls_engine_seq) + want) return ls_err(LS_EFORMAT, "%s", bad);
    *seqs = sq;
    *body = (const char *)msg + sizeof h + h.nseq * sizeof(ls_engine_seq);
    return LS_OK;
}
