/* chunk.c - versioned weight blobs in checksummed chunks: splitting and reassembly with
 * rejection of corrupt chunks and of versions that go backwards. */
#include <stdlib.h>
#include <string.h>

#include "llmsys/rl.h"

struct ls_rl_asm {
    /* newest complete version */
    int64_t latest;
    uint8_t *done;
    size_t done_len;
    /* version being assembled */
    int64_t cur;
    uint8_t *buf, *have;
    uint64_t total, vhash;
    uint32_t count, got;
};

int ls_rl_asm_init(ls_rl_asm **out) {
    ls_rl_asm *a = calloc(1, sizeof *a);
    if (!a) return ls_err(LS_ENOMEM, "relay: out of memory");
    a->latest = -1;
    a->cur = -1;
    *out = a;
    return LS_OK;
}

void ls_rl_asm_free(ls_rl_asm *a) {
    if (!a) return;
    free(a->done), free(a->buf), free(a->have);
    free(a);
}

int64_t ls_rl_asm_latest(const ls_rl_asm *a, const void **data, size_t *len) {
    if (data) *data = a->done;
    if (len) *len = a->done_len;
    return a->latest;
}

int64_t ls_rl_asm_partial(const ls_rl_asm *a) { return a->cur; }

static void drop_partial(ls_rl_asm *a) {
    free(a->buf), free(a->have);
    a->buf = a->have = NULL;
    a->cur = -1;
    a->got = a->count = 0;
}

int ls_rl_asm_add(ls_rl_asm *a, const ls_rl_chunk_hdr *h, const void *data) {
    if (h->version <= a->latest) {
        if (h->version == a->latest) return 0; /* a repeat of what we hold: harmless */
        return ls_err(LS_ERANGE, "weights: version %lld goes backwards (newest held is %lld)", (long long)h->version,
                      (long long)a->latest);
    }
    /* a chunk holds at least one byte, so a version has no more chunks than bytes */
    if (h->count == 0 || h->index >= h->count || h->total == 0 || h->total > ((uint64_t)1 << 36) ||
        h->count > h->total || h->offset > h->total || h->len > h->total - h->offset)
        return ls_err(LS_EFORMAT, "weights: chunk %u/%u of version %lld has inconsistent extents", h->index, h->count,
                      (long long)h->version);
    if (ls_hash64(data, (size_t)h->len) != h->chunk_hash)
        return ls_err(LS_ECHECKSUM, "weights: chunk %u/%u of version %lld fails its checksum", h->index, h->count,
                      (long long)h->version);
    if (h->version < a->cur) return 0; /* an older partial version than the one in progress: skip */
    if (h->version > a->cur) {
        drop_partial(a);
        a->buf = malloc((size_t)h->total);
        a->have = calloc(h->count, 1);
        if (!a->buf || !a->have) {
            drop_partial(a);
            return ls_err(LS_ENOMEM, "weights: out of memory for version %lld", (long long)h->version);
        }
        a->cur = h->version;
        a->total = h->total;
        a->vhash = h->version_hash;
        a->count = h->count;
    } else if (h->total != a->total || h->count != a->count || h->version_hash != a->vhash) {
        return ls_err(LS_EFORMAT, "weights: chunk %u of version %lld disagrees with its version's size or hash",
                      h->index, (long long)h->version);
    }
    if (a->have[h->index]) return 0;
    memcpy(a->buf + h->offset, data, (size_t)h->len);
    a->have[h->index] = 1;
    a->got++;
    if (a->got < a->count) return 0;
    if (ls_hash64(a->buf, (size_t)a->total) != a->vhash) {
        int64_t v = a->cur;
        drop_partial(a);
        return ls_err(LS_ECHECKSUM, "weights: version %lld reassembled with a wrong whole checksum", (long long)v);
    }
    free(a->done);
    a->done = a->buf;
    a->done_len = (size_t)a->total;
    a->latest = a->cur;
    a->buf = NULL;
    drop_partial(a);
    return 1;
}

int ls_rl_chunk_split(int64_t version, const void *data, size_t len, size_t chunk, ls_rl_chunk_hdr **hdrs, int *n) {
    *hdrs = NULL;
    *n = 0;
    if (len == 0 || chunk == 0) return ls_err(LS_EINVAL, "weights: empty blob or chunk size");
    size_t cnt = (len + chunk - 1) / chunk;
    ls_rl_chunk_hdr *h = calloc(cnt, sizeof *h);
    if (!h) return ls_err(LS_ENOMEM, "weights: out of memory");
    uint64_t vh = ls_hash64(data, len);
    for (size_t i = 0; i < cnt; i++) {
        h[i].version = version;
        h[i].index = (uint32_t)i;
        h[i].count = (uint32_t)cnt;
        h[i].offset = i * chunk;
        h[i].len = i + 1 < cnt ? chunk : len - i * chunk;
        h[i].total = len;
        h[i].chunk_hash = ls_hash64((const uint8_t *)data + h[i].offset, (size_t)h[i].len);
        h[i].version_hash = vh;
    }
    *hdrs = h;
    *n = (int)cnt;
    return LS_OK;
}
