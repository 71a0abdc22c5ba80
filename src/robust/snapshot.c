/* snapshot.c - in-memory trainer checkpoints: the full state as one flat, checksummed buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/robust.h"

#define SNAP_MAGIC "LSSNAP1"
#define SNAP_VERSION 1u

/* state: a writer marks the buffer WRITING before it copies and COPIED after; a reader that
 * sees the same step and COPIED before and after its own copy has a consistent one, which it
 * SEALS with the checksum (the writer never pays for hashing). */
enum { SNAP_WRITING = 1, SNAP_COPIED = 2, SNAP_SEALED = 3 };

typedef struct {
    char magic[8];
    uint32_t version, state;
    int64_t step;
    uint64_t n_params, cfg_len, train_len, total, checksum;
} snap_hdr;

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

static size_t layout(size_t np, size_t cl, size_t tl, size_t *floats_at) {
    size_t off = align16(sizeof(snap_hdr) + cl + tl);
    *floats_at = off;
    return off + 3 * np * sizeof(float);
}

size_t ls_snapshot_size(ls_trainer *t) {
    ls_model *m = ls_trainer_model(t);
    char *cj = ls_model_config_to_json(ls_model_cfg(m)), *tj = ls_train_config_to_json(ls_trainer_config(t));
    size_t fa, n = layout(ls_model_num_params(m), cj ? strlen(cj) : 0, tj ? strlen(tj) : 0, &fa);
    free(cj);
    free(tj);
    return n + 4096; /* room for the JSON settings to grow (a step count with more digits) */
}

static uint64_t snap_hash(const unsigned char *buf, size_t total) {
    return ls_hash64(buf + sizeof(snap_hdr), total - sizeof(snap_hdr));
}

int ls_snapshot_copy(ls_trainer *t, void *buf, size_t cap, size_t *len) {
    ls_model *m = ls_trainer_model(t);
    char *cj = ls_model_config_to_json(ls_model_cfg(m)), *tj = ls_train_config_to_json(ls_trainer_config(t));
    if (!cj || !tj) {
        free(cj);
        free(tj);
        return ls_err(LS_ENOMEM, "snapshot: out of memory");
    }
    size_t np = ls_model_num_params(m), cl = strlen(cj), tl = strlen(tj), fa;
    size_t total = layout(np, cl, tl, &fa);
    if (total > cap) {
        free(cj);
        free(tj);
        return ls_err(LS_ERANGE, "snapshot: needs %zu bytes, buffer has %zu", total, cap);
    }
    unsigned char *b = buf;
    snap_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, SNAP_MAGIC, 8);
    h.version = SNAP_VERSION;
    h.state = SNAP_WRITING;
    h.step = ls_trainer_step_index(t);
    h.n_params = np;
    h.cfg_len = cl;
    h.train_len = tl;
    h.total = total;
    memcpy(b, &h, sizeof h);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    memcpy(b + sizeof h, cj, cl);
    memcpy(b + sizeof h + cl, tj, tl);
    memset(b + sizeof h + cl + tl, 0, fa - (sizeof h + cl + tl));
    memcpy(b + fa, ls_model_params(m), np * sizeof(float));
    memcpy(b + fa + np * sizeof(float), ls_model_adam_m(m), np * sizeof(float));
    memcpy(b + fa + 2 * np * sizeof(float), ls_model_adam_v(m), np * sizeof(float));
    free(cj);
    free(tj);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    h.state = SNAP_COPIED;
    memcpy(b, &h, sizeof h);
    *len = total;
    return LS_OK;
}

int ls_snapshot_seal(void *buf, size_t len, ls_snapshot_info *info) {
    snap_hdr h;
    if (len < sizeof h) return ls_err(LS_EFORMAT, "snapshot: %zu bytes is shorter than its header", len);
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, SNAP_MAGIC, 8) != 0 || h.total > len || h.total < sizeof h)
        return ls_err(LS_EFORMAT, "snapshot: not a complete snapshot");
    if (h.state == SNAP_SEALED) return ls_snapshot_check(buf, len, info);
    if (h.state != SNAP_COPIED) return ls_err(LS_ESTATE, "snapshot: still being written");
    size_t fa;
    if (h.n_params > ((size_t)1 << 40) || h.cfg_len > len || h.train_len > len ||
        layout((size_t)h.n_params, (size_t)h.cfg_len, (size_t)h.train_len, &fa) != h.total)
        return ls_err(LS_EFORMAT, "snapshot: inconsistent sizes (%zu bytes given)", len);
    h.state = SNAP_SEALED;
    h.checksum = 0;
    memcpy(buf, &h, sizeof h);
    h.checksum = snap_hash(buf, (size_t)h.total);
    memcpy(buf, &h, sizeof h);
    if (info) {
        info->step = h.step;
        info->params = (size_t)h.n_params;
        info->bytes = (size_t)h.total;
    }
    return LS_OK;
}

int ls_snapshot_peek(const void *buf, size_t len, int64_t *step) {
    snap_hdr h;
    if (len < sizeof h) return 0;
    memcpy(&h, buf, sizeof h);
    *step = h.step;
    return memcmp(h.magic, SNAP_MAGIC, 8) == 0 && (h.state == SNAP_COPIED || h.state == SNAP_SEALED);
}

int ls_snapshot_write(ls_trainer *t, void *buf, size_t cap, size_t *len) {
    LS_TRY(ls_snapshot_copy(t, buf, cap, len));
    return ls_snapshot_seal(buf, *len, NULL);
}

int ls_snapshot_check(const void *buf, size_t len, ls_snapshot_info *info) {
    snap_hdr h;
    if (len < sizeof h) return ls_err(LS_EFORMAT, "snapshot: %zu bytes is shorter than its header", len);
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, SNAP_MAGIC, 8) != 0) return ls_err(LS_EFORMAT, "snapshot: bad magic (not an llmsys snapshot)");
    if (h.version != SNAP_VERSION)
        return ls_err(LS_EUNSUPPORTED, "snapshot: version %u, this build reads %u", h.version, SNAP_VERSION);
    size_t fa;
    if (h.n_params > ((size_t)1 << 40) || h.cfg_len > len || h.train_len > len ||
        layout((size_t)h.n_params, (size_t)h.cfg_len, (size_t)h.train_len, &fa) != h.total || h.total > len)
        return ls_err(LS_EFORMAT, "snapshot: inconsistent sizes (%zu bytes given)", len);
    if (h.state != SNAP_SEALED) return ls_err(LS_ESTATE, "snapshot: not sealed (no checksum yet)");
    if (snap_hash(buf, (size_t)h.total) != h.checksum) return ls_err(LS_ECHECKSUM, "snapshot: checksum mismatch");
    if (info) {
        info->step = h.step;
        info->params = (size_t)h.n_params;
        info->bytes = (size_t)h.total;
    }
    return LS_OK;
}

int ls_snapshot_to_ckpt(const void *buf, size_t len, const char *path) {
    LS_TRY(ls_snapshot_check(buf, len, NULL));
    snap_hdr h;
    memcpy(&h, buf, sizeof h);
    const char *b = buf;
    char *cj = strndup(b + sizeof h, (size_t)h.cfg_len), *tj = strndup(b + sizeof h + h.cfg_len, (size_t)h.train_len);
    ls_model_config mc;
    ls_model *m = NULL;
    int rc = cj && tj ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK) rc = ls_model_config_from_json(cj, &mc);
    if (rc == LS_OK) rc = ls_model_init(&m, &mc, 0);
    if (rc == LS_OK && ls_model_num_params(m) != h.n_params)
        rc = ls_err(LS_EFORMAT, "snapshot: %llu parameters, its config has %zu", (unsigned long long)h.n_params,
                    ls_model_num_params(m));
    if (rc == LS_OK) {
        size_t fa, np = (size_t)h.n_params;
        layout(np, (size_t)h.cfg_len, (size_t)h.train_len, &fa);
        memcpy(ls_model_params(m), b + fa, np * sizeof(float));
        memcpy(ls_model_adam_m(m), b + fa + np * sizeof(float), np * sizeof(float));
        memcpy(ls_model_adam_v(m), b + fa + 2 * np * sizeof(float), np * sizeof(float));
        rc = ls_ckpt_save(path, m, h.step, tj, LS_CKPT_WITH_OPT);
    }
    if (m) ls_model_free(m);
    free(cj);
    free(tj);
    return rc;
}
