/* service.c - the loader service over ZeroMQ: a ROUTER front end, a constructor thread
 * building steps ahead into a bounded window, idempotent batch requests, control messages,
 * and the client API trainers use. */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "llmsys/model.h"
#include "llmsys/zsec.h"
#include "loader/loader_internal.h"

#define REQ_MAGIC "LSLQ"
#define REP_MAGIC "LSLR"
#define WIRE_VERSION 1
#define BATCH_MAGIC "LSBATv01"
#define MAX_PARKED 4096
#define MAX_ENVELOPE 4

enum { MSG_BATCH = 1, MSG_CONTROL = 2, MSG_INFO = 3, MSG_SHUTDOWN = 4, MSG_STATE = 5 };

typedef struct {
    char magic[4];
    uint16_t version, type;
    int64_t step;
    int32_t rank;
    uint32_t len;
} req_hdr;

typedef struct {
    char magic[4];
    uint16_t version, type;
    int32_t status;
    uint32_t len;
} rep_hdr;

/* ---------------------------------------------------------------- batch encoding */

typedef struct {
    char magic[8];
    int64_t step;
    int32_t rank, n_ranks, n_ctx, n_rows, micro_batches, n_segs;
    uint32_t state_len, pad;
    double cost;
    int64_t n_tokens;
} batch_hdr;

#define BATCH_CP_SHARD 1u /* flags (the header's pad word): a CP shard; cp rank and size, doc ids and positions follow */
#define BATCH_BPE 2u      /* tokens of a BPE vocabulary: any u16 (else bytes and specials, < LS_VOCAB) */

static size_t batch_size(const batch_hdr *h) {
    size_t cells = (size_t)h->n_rows * h->n_ctx;
    return sizeof *h + cells * 2 + (size_t)h->n_rows * 4 + (size_t)h->n_segs * 7 * 4 + h->state_len +
           (h->pad & BATCH_CP_SHARD ? 8 + cells * 8 : 0);
}

int ls_loader_batch_encode(const ls_loader_batch *b, uint8_t **buf, size_t *len) {
    uint32_t wide = 0;
    for (size_t i = 0; i < (size_t)b->n_rows * b->n_ctx && !wide; i++) wide = b->tokens[i] >= LS_VOCAB ? BATCH_BPE : 0;
    batch_hdr h = {{0},
                   b->step,
                   b->rank,
                   b->n_ranks,
                   b->n_ctx,
                   b->n_rows,
                   b->micro_batches,
                   b->n_segs,
                   (uint32_t)b->state_len,
                   (b->positions ? BATCH_CP_SHARD : 0) | wide,
                   b->cost,
                   b->n_tokens};
    memcpy(h.magic, BATCH_MAGIC, 8);
    size_t n = batch_size(&h);
    uint8_t *p = malloc(n);
    if (!p) return ls_err(LS_ENOMEM, "out of memory");
    uint8_t *q = p;
    memcpy(q, &h, sizeof h), q += sizeof h;
    for (size_t i = 0; i < (size_t)b->n_rows * b->n_ctx; i++) {
        uint16_t t = (uint16_t)b->tokens[i];
        memcpy(q, &t, 2), q += 2;
    }
    for (int r = 0; r < b->n_rows; r++) {
        uint32_t m = (uint32_t)b->row_micro[r];
        memcpy(q, &m, 4), q += 4;
    }
    for (int s = 0; s < b->n_segs; s++) {
        const ls_loader_seg *g = &b->segs[s];
        uint32_t v[7] = {(uint32_t)g->source, (uint32_t)g->row, (uint32_t)g->col, (uint32_t)g->len, g->epoch, g->doc,
                         g->doc_off};
        memcpy(q, v, sizeof v), q += sizeof v;
    }
    if (b->state_len) memcpy(q, b->state, b->state_len);
    q += b->state_len;
    if (b->positions) {
        int32_t cp[2] = {b->cp_rank, b->cp_size};
        size_t cells = (size_t)b->n_rows * b->n_ctx;
        memcpy(q, cp, sizeof cp), q += sizeof cp;
        memcpy(q, b->doc_ids, cells * 4), q += cells * 4;
        memcpy(q, b->positions, cells * 4);
    }
    *buf = p;
    *len = n;
    return LS_OK;
}

/* The arrays of a CP shard (after the state): its segments are those of the full row, so doc ids
 * and positions travel explicitly; each checked against the header. */
static int decode_shard(const batch_hdr *h, const uint8_t *q, ls_loader_batch *out) {
    size_t cells = (size_t)h->n_rows * h->n_ctx;
    int32_t cp[2];
    memcpy(cp, q, sizeof cp);
    if (cp[1] < 2 || cp[1] > 65536 || cp[0] < 0 || cp[0] >= cp[1])
        return ls_err(LS_EFORMAT, "batch: CP rank %d of %d", cp[0], cp[1]);
    out->cp_rank = cp[0];
    out->cp_size = cp[1];
    if (!(out->positions = malloc((cells ? cells : 1) * 4))) return ls_err(LS_ENOMEM, "out of memory");
    memcpy(out->doc_ids, q + 8, cells * 4);
    memcpy(out->positions, q + 8 + cells * 4, cells * 4);
    int64_t real = 0;
    for (size_t i = 0; i < cells; i++) {
        if ((out->positions[i] < 0) != (out->doc_ids[i] < 0) || out->positions[i] >= 65536 || out->doc_ids[i] >= h->n_segs)
            return ls_err(LS_EFORMAT, "batch: CP shard cell %zu out of range", i);
        real += out->positions[i] >= 0;
    }
    if (real != h->n_tokens) return ls_err(LS_EFORMAT, "batch: CP shard token count mismatch");
    return LS_OK;
}

int ls_loader_batch_decode(const uint8_t *buf, size_t len, ls_loader_batch *out) {
    memset(out, 0, sizeof *out);
    batch_hdr h;
    if (len < sizeof h) return ls_err(LS_EFORMAT, "batch: message too short (%zu bytes)", len);
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, BATCH_MAGIC, 8) != 0) return ls_err(LS_EFORMAT, "batch: bad magic");
    if (h.n_ctx < 1 || h.n_ctx > 65536 || h.n_rows < 0 || h.n_rows > (1 << 24) || h.n_segs < 0 ||
        h.n_segs > (1 << 26) || h.micro_batches < 1 || h.n_ranks < 1 || h.rank < 0 || h.rank >= h.n_ranks ||
        h.state_len > (1u << 20) || (int64_t)h.n_rows * h.n_ctx > (1 << 28) ||
        (h.pad & ~(BATCH_CP_SHARD | BATCH_BPE)) || batch_size(&h) != len)
        return ls_err(LS_EFORMAT, "batch: inconsistent header (rows %d, n_ctx %d, segments %d, %zu bytes)", h.n_rows,
                      h.n_ctx, h.n_segs, len);
    size_t ntok = (size_t)h.n_rows * h.n_ctx;
    out->tokens = malloc((ntok ? ntok : 1) * sizeof *out->tokens);
    out->doc_ids = malloc((ntok ? ntok : 1) * sizeof *out->doc_ids);
    out->row_micro = malloc((size_t)(h.n_rows ? h.n_rows : 1) * sizeof *out->row_micro);
    out->segs = malloc((size_t)(h.n_segs ? h.n_segs : 1) * sizeof *out->segs);
    out->state = malloc(h.state_len ? h.state_len : 1);
    int *fill = calloc((size_t)(h.n_rows ? h.n_rows : 1), sizeof *fill);
    int *nseg = calloc((size_t)(h.n_rows ? h.n_rows : 1), sizeof *nseg);
    int rc = (!out->tokens || !out->doc_ids || !out->row_micro || !out->segs || !out->state || !fill || !nseg)
                 ? ls_err(LS_ENOMEM, "out of memory")
                 : LS_OK;
    const uint8_t *q = buf + sizeof h;
    for (size_t i = 0; rc == LS_OK && i < ntok; i++) {
        uint16_t t;
        memcpy(&t, q + 2 * i, 2);
        if (t >= LS_VOCAB && !(h.pad & BATCH_BPE)) rc = ls_err(LS_EFORMAT, "batch: token %u out of range", t);
        out->tokens[i] = t;
        out->doc_ids[i] = -1;
    }
    q += ntok * 2;
    const int shard = (h.pad & BATCH_CP_SHARD) != 0; /* segments describe the full rows, not these */
    for (int r = 0; rc == LS_OK && r < h.n_rows; r++) {
        uint32_t m;
        memcpy(&m, q + 4 * (size_t)r, 4);
        if (m >= (uint32_t)h.micro_batches)
            rc = ls_err(LS_EFORMAT, "batch: row %d in micro-batch %u of %d", r, m, h.micro_batches);
        out->row_micro[r] = (int32_t)m;
    }
    q += (size_t)h.n_rows * 4;
    int64_t ntokens = 0;
    for (int s = 0; rc == LS_OK && s < h.n_segs; s++) {
        uint32_t v[7];
        memcpy(v, q + (size_t)s * sizeof v, sizeof v);
        ls_loader_seg g = {(int)v[0], (int)v[1], (int)v[2], (int)v[3], v[4], v[5], v[6]};
        /* Segments of a row are packed from column 0 in order: anything else is corrupt. */
        if (shard) {
            if (v[0] >= LS_LOADER_MAX_SOURCES || v[1] >= (uint32_t)h.n_rows || v[3] == 0 || v[3] > 65536) {
                rc = ls_err(LS_EFORMAT, "batch: segment %d out of place", s);
                break;
            }
            out->segs[s] = g;
            continue;
        }
        if (v[0] >= LS_LOADER_MAX_SOURCES || v[1] >= (uint32_t)h.n_rows || v[3] == 0 || v[3] > (uint32_t)h.n_ctx ||
            g.col != fill[g.row] || g.col + g.len > h.n_ctx) {
            rc = ls_err(LS_EFORMAT, "batch: segment %d out of place", s);
            break;
        }
        fill[g.row] += g.len;
        int id = nseg[g.row]++;
        for (int t = 0; t < g.len; t++) out->doc_ids[(size_t)g.row * h.n_ctx + g.col + t] = id;
        out->segs[s] = g;
        ntokens += g.len;
    }
    q += (size_t)h.n_segs * 28;
    if (rc == LS_OK && shard) rc = decode_shard(&h, q + h.state_len, out);
    else if (rc == LS_OK && ntokens != h.n_tokens) rc = ls_err(LS_EFORMAT, "batch: token count mismatch");
    if (rc == LS_OK) {
        memcpy(out->state, q, h.state_len);
        out->step = h.step;
        out->rank = h.rank;
        out->n_ranks = h.n_ranks;
        out->n_ctx = h.n_ctx;
        out->n_rows = h.n_rows;
        out->micro_batches = h.micro_batches;
        out->n_segs = h.n_segs;
        out->state_len = h.state_len;
        out->cost = h.cost;
        out->n_tokens = h.n_tokens;
    }
    free(fill);
    free(nseg);
    if (rc < 0) ls_loader_batch_free(out);
    return rc;
}

/* ---------------------------------------------------------------- frames */

/* A frame is header | payload | xxh3 of both: fills *out (malloc'd) and *olen. The header
 * already carries its magic, version and payload length. */
int ls_lwire_pack(const void *hdr, size_t hlen, const void *payload, size_t plen, uint8_t **out, size_t *olen) {
    size_t n = hlen + plen + 8;
    uint8_t *p = malloc(n);
    if (!p) return ls_err(LS_ENOMEM, "out of memory");
    memcpy(p, hdr, hlen);
    if (plen) memcpy(p + hlen, payload, plen);
    uint64_t c = ls_hash64(p, hlen + plen);
    memcpy(p + hlen + plen, &c, 8);
    *out = p;
    *olen = n;
    return LS_OK;
}

static int frame_req(int type, int64_t step, int rank, const void *payload, size_t plen, uint8_t **out, size_t *olen) {
    req_hdr h = {{0}, WIRE_VERSION, (uint16_t)type, step, rank, (uint32_t)plen};
    memcpy(h.magic, REQ_MAGIC, 4);
    return ls_lwire_pack(&h, sizeof h, payload, plen, out, olen);
}

static int frame_rep(int type, int status, const void *payload, size_t plen, uint8_t **out, size_t *olen) {
    rep_hdr h = {{0}, WIRE_VERSION, (uint16_t)type, status, (uint32_t)plen};
    memcpy(h.magic, REP_MAGIC, 4);
    return ls_lwire_pack(&h, sizeof h, payload, plen, out, olen);
}

/* Validates magic, version, length and checksum of a frame; points *payload into it. */
int ls_lwire_check(const uint8_t *p, size_t n, const char *magic, size_t hdr_size, uint32_t len_field,
                   const uint8_t **payload) {
    if (n < hdr_size + 8 || memcmp(p, magic, 4) != 0)
        return ls_err(LS_EFORMAT, "not a loader message (bad magic or size)");
    uint16_t ver;
    memcpy(&ver, p + 4, 2);
    if (ver != WIRE_VERSION) return ls_err(LS_EFORMAT, "unsupported loader wire version %u", ver);
    if ((size_t)len_field != n - hdr_size - 8) return ls_err(LS_EFORMAT, "loader message length mismatch");
    uint64_t c;
    memcpy(&c, p + n - 8, 8);
    if (ls_hash64(p, n - 8) != c) return ls_err(LS_ECHECKSUM, "loader message checksum mismatch");
    *payload = p + hdr_size;
    return LS_OK;
}

/* ---------------------------------------------------------------- server */

typedef struct {
    size_t n_env;
    zmq_msg_t env[MAX_ENVELOPE];
    int64_t step;
    int rank;
} parked_req;

struct ls_loader_server {
    const ls_loader_mix *mix;
    int R, W, prefetch, port;
    ls_loader *ld;
    ls_loader_hub *hub; /* source workers (NULL: the service reads its sources) */
    int vocab;          /* LS_VOCAB, or the tokenizer's */
    uint64_t tok_print; /* the tokenizer's fingerprint (0: byte tokens) */
    void *zctx, *sock, *wake_rx, *wake_tx;
    pthread_t builder;
    int builder_on;
    pthread_mutex_t mu, ldmu;
    pthread_cond_t cv;
    int64_t lo, hi, front;
    ls_loader_step **ring;
    int G;                /* client processes: R, or the topology's size */
    ls_topology topo;     /* {R, 1, 1, 1} without a topology */
    uint8_t *fetched;     /* [slot * G + process] */
    ls_loader_batch *dpb; /* [slot * R + dp]: each DP group's batch, read once, placed on its members */
    uint8_t *dpb_ok;
    int64_t read_tokens, read_batches, served_tokens, served_batches;
    atomic_int stop;
    int build_err;
    char build_msg[256];
    parked_req *parked;
    int n_parked;
    const char *journal; /* NULL: acknowledged weight changes are not journaled */
    cJSON *changes;      /* every acknowledged weight change, in order (the journal's entries) */
    uint8_t *lo_state;   /* loader state at the start of step lo */
    size_t lo_state_len;
    /* shadow mode: follow a primary's state until the first batch request, then take over */
    char *shadow_of;
    int shadow_ms, passive, follower_on;
    pthread_t follower;
    uint8_t *peer_state; /* the primary's state at its oldest unfetched step, and its changes */
    size_t peer_state_len;
    char *peer_changes;
    int64_t pulls, peer_step;
    double takeover_s; /* wall time of the takeover (0: none) */
};

static int all_fetched(const ls_loader_server *s, int64_t step) {
    const uint8_t *f = s->fetched + (size_t)(step % s->W) * s->G;
    for (int r = 0; r < s->G; r++)
        if (!f[r]) return 0;
    return 1;
}

/* The oldest step some rank still needs: the window can slide up to it. */
static int64_t first_unfetched(const ls_loader_server *s) {
    int64_t l = s->lo;
    while (l < s->hi && all_fetched(s, l)) l++;
    return l;
}

static void *builder_main(void *arg) {
    ls_loader_server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!atomic_load(&s->stop)) {
        int can = !s->build_err && s->hi < s->front + s->prefetch;
        if (can && s->hi - s->lo == s->W) {
            /* The window is full: the oldest step leaves only once every rank has it. */
            if (all_fetched(s, s->lo)) {
                size_t slot = (size_t)(s->lo % s->W);
                uint8_t *next = malloc(s->ring[slot]->state_len);
                if (next) { /* the state at the start of the new oldest step */
                    memcpy(next, s->ring[slot]->state_after, s->ring[slot]->state_len);
                    free(s->lo_state);
                    s->lo_state = next;
                    s->lo_state_len = s->ring[slot]->state_len;
                }
                ls_loader_step_free(s->ring[slot]);
                s->ring[slot] = NULL;
                for (int d = 0; d < s->R; d++)
                    if (s->dpb_ok[slot * s->R + d]) ls_loader_batch_free(&s->dpb[slot * s->R + d]);
                memset(s->dpb_ok + slot * s->R, 0, (size_t)s->R);
                s->lo++;
            } else {
                can = 0;
            }
        }
        if (!can) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        ls_loader_step *st = NULL;
        pthread_mutex_lock(&s->ldmu);
        int rc = ls_loader_next_step(s->ld, &st);
        pthread_mutex_unlock(&s->ldmu);
        pthread_mutex_lock(&s->mu);
        if (rc < 0) {
            s->build_err = rc;
            snprintf(s->build_msg, sizeof s->build_msg, "%s", ls_errmsg());
        } else {
            size_t slot = (size_t)(s->hi % s->W);
            s->ring[slot] = st;
            memset(s->fetched + slot * s->G, 0, (size_t)s->G);
            s->hi++;
        }
        zmq_send(s->wake_tx, "w", 1, ZMQ_DONTWAIT); /* wakes the front end to answer parked requests */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void ls_loader_server_close(ls_loader_server *s) {
    if (!s) return;
    atomic_store(&s->stop, 1);
    if (s->follower_on) pthread_join(s->follower, NULL);
    free(s->lo_state);
    free(s->shadow_of);
    free(s->peer_state);
    free(s->peer_changes);
    if (s->builder_on) {
        pthread_mutex_lock(&s->mu);
        atomic_store(&s->stop, 1);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->builder, NULL);
    }
    for (int i = 0; i < s->n_parked; i++)
        for (size_t k = 0; k < s->parked[i].n_env; k++) zmq_msg_close(&s->parked[i].env[k]);
    free(s->parked);
    if (s->ring)
        for (int i = 0; i < s->W; i++) ls_loader_step_free(s->ring[i]);
    if (s->dpb)
        for (size_t i = 0; i < (size_t)s->W * s->R; i++)
            if (s->dpb_ok[i]) ls_loader_batch_free(&s->dpb[i]);
    free(s->dpb);
    free(s->dpb_ok);
    free(s->ring);
    free(s->fetched);
    if (s->sock) zmq_close(s->sock);
    if (s->wake_rx) zmq_close(s->wake_rx);
    if (s->wake_tx) zmq_close(s->wake_tx);
    if (s->zctx) zmq_ctx_term(s->zctx);
    ls_loader_close(s->ld);
    ls_loader_hub_close(s->hub);
    cJSON_Delete(s->changes);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->ldmu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* ---------------------------------------------------------------- weight-change journal */

/* A state blob holds the weight changes acknowledged before its step was built; a change
 * acknowledged later lives only in the service's memory. The journal keeps every
 * acknowledged change, in order, so a restart from an older blob can replay the rest. */

static int journal_write(const ls_loader_server *s) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return ls_err(LS_ENOMEM, "out of memory");
    cJSON_AddStringToObject(o, "format", "llmsys-loader-journal");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddItemReferenceToObject(o, "changes", s->changes);
    int rc = ls_json_write_file(s->journal, o);
    cJSON_Delete(o);
    return rc;
}

/* Parses one journal entry {"at": step, "weights": {name: w} | null} into w (NULL: clear). */
static int journal_entry(const ls_loader_server *s, const cJSON *e, int64_t *at, double *w, int *clear,
                         const char *what) {
    const cJSON *ja = cJSON_GetObjectItemCaseSensitive(e, "at"), *jw = cJSON_GetObjectItemCaseSensitive(e, "weights");
    if (!ls_json_as_i64(ja, 0, LS_JSON_INT_MAX, at) || !(cJSON_IsNull(jw) || cJSON_IsObject(jw)))
        return ls_err(LS_EFORMAT, "%s: malformed change entry", what);
    *clear = cJSON_IsNull(jw);
    for (int k = 0; k < s->mix->n_sources; k++) w[k] = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, jw) {
        int k = ls_loader_mix_find(s->mix, x->string);
        if (k < 0 || !cJSON_IsNumber(x))
            return ls_err(LS_EFORMAT, "%s: change for unknown source '%s' (another mix?)", what, x->string);
        w[k] = x->valuedouble;
    }
    return LS_OK;
}

/* Opens the journal: a fresh start empties it; a resume from a blob replays the changes the
 * blob does not hold. Those are the journal's entries for steps at or after the blob's,
 * less the first ones (as many as the blob holds pending: they were acknowledged first). */
static int replay_changes(ls_loader_server *s);

static int journal_open(ls_loader_server *s, int resumed) {
    cJSON *j = NULL;
    int rc = resumed ? ls_json_read_file(s->journal, &j) : LS_ENOTFOUND;
    if (rc == LS_ENOTFOUND) {
        if (resumed) LS_WARN("%s: no weight-change journal yet; resuming from the state alone", s->journal);
        return journal_write(s);
    }
    if (rc != LS_OK) return rc;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format");
    int ok = cJSON_IsString(f) && !strcmp(f->valuestring, "llmsys-loader-journal");
    cJSON_Delete(s->changes);
    s->changes = cJSON_DetachItemFromObjectCaseSensitive(j, "changes");
    cJSON_Delete(j);
    if (!ok || !cJSON_IsArray(s->changes)) return ls_err(LS_EFORMAT, "%s: not a loader journal", s->journal);
    return replay_changes(s);
}

/* Applies the changes of s->changes that the loader's current state does not hold: the entries for
 * steps at or after its step, less the first ones (as many as the state holds pending: they were
 * acknowledged first). */
static int replay_changes(ls_loader_server *s) {
    const char *what = s->journal ? s->journal : "the primary's changes";
    int64_t step = ls_loader_step_index(s->ld);
    int skip = ls_loader_pending_count(s->ld), later = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, s->changes) {
        int64_t at = 0;
        int clear = 0;
        double w[LS_LOADER_MAX_SOURCES];
        LS_TRY(journal_entry(s, e, &at, w, &clear, what));
        if (at < step) continue; /* in effect before the blob's step: part of its state */
        if (skip > 0) {
            skip--;
            continue;
        }
        LS_TRY(ls_loader_set_weights(s->ld, clear ? NULL : w, at));
        later++;
    }
    if (skip > 0)
        return ls_err(LS_EINVAL, "%s: the state holds weight changes this journal lacks (another run's journal?)",
                      what);
    if (later) LS_INFO("%s: replayed %d weight change(s) acknowledged after the state was saved", what, later);
    return LS_OK;
}

/* ---------------------------------------------------------------- shadow (standby) service */

/* MSG_STATE answer: u32 state length, the loader state at the oldest step some rank has not
 * fetched (every rank has everything before it), then the acknowledged changes as JSON. (s->mu held) */
static int state_message(ls_loader_server *s, uint8_t **out, size_t *len) {
    int64_t f = first_unfetched(s);
    const uint8_t *st = s->lo_state;
    size_t sl = s->lo_state_len;
    if (f > s->lo) st = s->ring[(f - 1) % s->W]->state_after, sl = s->ring[(f - 1) % s->W]->state_len;
    char *ch = cJSON_PrintUnformatted(s->changes);
    uint8_t *p = ch ? malloc(4 + sl + strlen(ch)) : NULL;
    if (!p) {
        free(ch);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    uint32_t n = (uint32_t)sl;
    memcpy(p, &n, 4);
    memcpy(p + 4, st, sl);
    memcpy(p + 4 + sl, ch, strlen(ch));
    *out = p;
    *len = 4 + sl + strlen(ch);
    free(ch);
    return LS_OK;
}

static int roundtrip_raw(ls_loader_client *c, int type, uint8_t **payload, size_t *len);

/* Pulls the primary's state every shadow_ms until the takeover (a few dozen bytes per source plus
 * the changes: the differential checkpoint of a service whose batches are a pure function of it). */
static void *follower_main(void *arg) {
    ls_loader_server *s = arg;
    ls_loader_client *c = NULL; /* one client (and ZeroMQ context) for every pull */
    if (ls_loader_client_open(&c, s->shadow_of, 0, s->shadow_ms > 500 ? s->shadow_ms : 500, 0) != LS_OK) {
        LS_WARN("loader shadow: %s", ls_errmsg());
        return NULL;
    }
    while (!atomic_load(&s->stop)) {
        uint8_t *p = NULL;
        size_t n = 0;
        if (roundtrip_raw(c, MSG_STATE, &p, &n) == LS_OK && n >= 4) {
            uint32_t sl;
            memcpy(&sl, p, 4);
            if (sl <= n - 4) {
                uint8_t *st = malloc(sl ? sl : 1);
                char *ch = malloc(n - 4 - sl + 1);
                if (st && ch) {
                    memcpy(st, p + 4, sl);
                    memcpy(ch, p + 4 + sl, n - 4 - sl);
                    ch[n - 4 - sl] = '\0';
                    pthread_mutex_lock(&s->mu);
                    if (s->passive) {
                        free(s->peer_state);
                        free(s->peer_changes);
                        s->peer_state = st, s->peer_state_len = sl, s->peer_changes = ch;
                        st = NULL, ch = NULL;
                        s->pulls++;
                    }
                    pthread_mutex_unlock(&s->mu);
                }
                free(st);
                free(ch);
            }
        }
        free(p);
        pthread_mutex_lock(&s->mu);
        int passive = s->passive;
        pthread_mutex_unlock(&s->mu);
        if (!passive) break;
        for (int t = 0; t < s->shadow_ms && !atomic_load(&s->stop); t += 20) ls_sleep_ms(20);
    }
    ls_loader_client_close(c);
    return NULL;
}

/* The takeover (s->mu held): the loader jumps to the primary's last pulled state, replays the changes
 * acknowledged after it, and the constructor starts from that step. */
static int take_over(ls_loader_server *s) {
    if (!s->peer_state) return ls_err(LS_ESTATE, "shadow: no state from the primary %s yet", s->shadow_of);
    cJSON *ch = cJSON_Parse(s->peer_changes);
    if (!cJSON_IsArray(ch)) {
        cJSON_Delete(ch);
        return ls_err(LS_EFORMAT, "shadow: the primary's change list is not a JSON array");
    }
    pthread_mutex_lock(&s->ldmu);
    int rc = ls_loader_set_state(s->ld, s->peer_state, s->peer_state_len);
    if (rc == LS_OK) {
        cJSON_Delete(s->changes);
        s->changes = ch, ch = NULL;
        rc = replay_changes(s);
    }
    if (rc == LS_OK) {
        free(s->lo_state);
        s->lo_state = NULL;
        rc = ls_loader_get_state(s->ld, &s->lo_state, &s->lo_state_len);
    }
    pthread_mutex_unlock(&s->ldmu);
    cJSON_Delete(ch);
    if (rc) return rc;
    s->peer_step = s->lo = s->hi = s->front = ls_loader_step_index(s->ld);
    if (pthread_create(&s->builder, NULL, builder_main, s) != 0)
        return ls_err(LS_ENOMEM, "cannot start the constructor thread");
    s->builder_on = 1;
    s->passive = 0;
    s->takeover_s = ls_wall_time();
    LS_WARN("loader shadow: took over from %s at step %lld (%lld state pulls)", s->shadow_of, (long long)s->lo,
            (long long)s->pulls);
    return LS_OK;
}

int ls_loader_server_open(ls_loader_server **out, const ls_loader_mix *mix, int n_ranks, const char *bind, int port,
                          const ls_loader_serve_opts *opts, const uint8_t *state, size_t state_len) {
    *out = NULL;
    if (port < 0 || port > 65535) return ls_err(LS_EINVAL, "port must be in [0, 65535], got %d", port);
    LS_TRY(ls_bind_check("loader service", bind ? bind : "127.0.0.1")); /* before the sources are read */
    if (opts && (opts->prefetch > LS_LOADER_MAX_WINDOW || opts->history > LS_LOADER_MAX_WINDOW))
        return ls_err(LS_EINVAL, "prefetch and history must be at most %d steps", LS_LOADER_MAX_WINDOW);
    ls_loader_server *s = calloc(1, sizeof *s);
    if (!s) return ls_err(LS_ENOMEM, "out of memory");
    s->mix = mix;
    s->R = n_ranks;
    s->topo = opts && opts->topology ? *opts->topology : (ls_topology){n_ranks, 1, 1, 1};
    s->G = ls_topology_size(&s->topo);
    if (s->topo.dp != n_ranks) {
        int dp = s->topo.dp;
        free(s);
        return ls_err(LS_EINVAL, "topology dp=%d but the service serves %d ranks", dp, n_ranks);
    }
    s->prefetch = opts && opts->prefetch > 0 ? opts->prefetch : 4;
    s->W = s->prefetch + (opts && opts->history > 0 ? opts->history : 4);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->ldmu, NULL);
    pthread_cond_init(&s->cv, NULL);
    ls_loader_opts lo = {opts ? opts->threads : 1, 0, NULL, opts ? opts->tokenizer : NULL};
    int rc = LS_OK;
    if (lo.tokenizer && ls_bpe_vocab_size(lo.tokenizer) > 65536)
        rc = ls_err(LS_EINVAL, "tokenizer of %d tokens: batches carry at most 65536", ls_bpe_vocab_size(lo.tokenizer));
    if (rc == LS_OK && lo.tokenizer) { /* what trainers check: the same vocabulary as theirs */
        s->vocab = ls_bpe_vocab_size(lo.tokenizer);
        s->tok_print = ls_loader_tokenizer_print(lo.tokenizer);
    }
    if (rc == LS_OK && opts && opts->workers) { /* the worker link on the service's address */
        ls_loader_hub_opts ho = *opts->workers;
        ho.tokenizer = lo.tokenizer;
        if (!ho.bind) ho.bind = bind;
        rc = ls_loader_hub_open(&s->hub, mix, &ho);
        lo.hub = s->hub;
    }
    if (rc == LS_OK) rc = ls_loader_open(&s->ld, mix, n_ranks, &lo);
    if (rc == LS_OK && state && (rc = ls_loader_set_state(s->ld, state, state_len)) != LS_OK && opts &&
        opts->state_from)
        ls_err_wrap(rc, "%s", opts->state_from);
    s->journal = opts ? opts->journal : NULL;
    if (rc == LS_OK && !(s->changes = cJSON_CreateArray())) rc = ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK && s->journal) rc = journal_open(s, state != NULL);
    if (rc == LS_OK) rc = ls_loader_get_state(s->ld, &s->lo_state, &s->lo_state_len);
    if (rc == LS_OK && opts && opts->shadow_of) {
        if (strncmp(opts->shadow_of, "tcp://", 6) && strncmp(opts->shadow_of, "ipc://", 6))
            rc = ls_err(LS_EINVAL, "shadow: the primary must look like tcp://host:port, got '%s'", opts->shadow_of);
        else if (!(s->shadow_of = strdup(opts->shadow_of)))
            rc = ls_err(LS_ENOMEM, "out of memory");
        s->shadow_ms = opts->shadow_ms > 0 ? opts->shadow_ms : 200;
        s->passive = 1;
    }
    if (rc == LS_OK) {
        s->lo = s->hi = s->front = ls_loader_step_index(s->ld);
        s->ring = calloc((size_t)s->W, sizeof *s->ring);
        s->fetched = calloc((size_t)s->W * s->G, 1);
        s->dpb = calloc((size_t)s->W * n_ranks, sizeof *s->dpb);
        s->dpb_ok = calloc((size_t)s->W * n_ranks, 1);
        s->parked = calloc(MAX_PARKED, sizeof *s->parked);
        if (!s->ring || !s->fetched || !s->dpb || !s->dpb_ok || !s->parked) rc = ls_err(LS_ENOMEM, "out of memory");
    }
    if (rc == LS_OK) {
        s->zctx = zmq_ctx_new();
        s->sock = s->zctx ? zmq_socket(s->zctx, ZMQ_ROUTER) : NULL;
        s->wake_rx = s->zctx ? zmq_socket(s->zctx, ZMQ_PAIR) : NULL;
        s->wake_tx = s->zctx ? zmq_socket(s->zctx, ZMQ_PAIR) : NULL;
        if (!s->sock || !s->wake_rx || !s->wake_tx) rc = ls_err(LS_ENET, "zmq: %s", zmq_strerror(zmq_errno()));
    }
    if (rc == LS_OK) rc = ls_lzmq_bind(s->zctx, s->sock, bind, port, "loader service", &s->port, NULL, 0);
    if (rc == LS_OK) {
        char wake[64];
        snprintf(wake, sizeof wake, "inproc://ls-loader-wake-%p", (void *)s);
        if (rc == LS_OK && (zmq_bind(s->wake_rx, wake) != 0 || zmq_connect(s->wake_tx, wake) != 0))
            rc = ls_err(LS_ENET, "zmq inproc: %s", zmq_strerror(zmq_errno()));
    }
    if (rc == LS_OK && !s->passive) {
        if (pthread_create(&s->builder, NULL, builder_main, s) != 0)
            rc = ls_err(LS_ENOMEM, "cannot start the constructor thread");
        else
            s->builder_on = 1;
    }
    if (rc == LS_OK && s->passive) {
        if (pthread_create(&s->follower, NULL, follower_main, s) != 0)
            rc = ls_err(LS_ENOMEM, "cannot start the shadow's follower thread");
        else
            s->follower_on = 1;
    }
    if (rc < 0) {
        ls_loader_server_close(s);
        return rc;
    }
    *out = s;
    return LS_OK;
}

int ls_lzmq_bind(void *zctx, void *sock, const char *bind, int port, const char *what, int *bound, char *last,
                 size_t cap) {
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    char ep[300], got[256], host[256];
    LS_TRY(ls_bind_check(what, bind ? bind : "127.0.0.1"));
    ls_url_host(bind ? bind : "127.0.0.1", host, sizeof host); /* ::1 -> [::1] */
    snprintf(ep, sizeof ep, port ? "tcp://%s:%d" : "tcp://%s:*", host, port);
    LS_TRY(ls_zsec_bind(zctx, sock, ep, what));
    size_t n = sizeof got;
    const char *colon;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, got, &n) != 0 || !(colon = strrchr(got, ':')))
        return ls_err(LS_ENET, "zmq: cannot read the bound endpoint of the %s", what);
    *bound = atoi(colon + 1);
    if (last) snprintf(last, cap, "%s", got);
    return LS_OK;
}

int ls_loader_server_port(const ls_loader_server *s) { return s->port; }
int ls_loader_server_worker_port(const ls_loader_server *s) { return s->hub ? ls_loader_hub_port(s->hub) : 0; }
void ls_loader_server_stop(ls_loader_server *s) { atomic_store(&s->stop, 1); }

/* Sends envelope frames (consumed) then one body frame. */
static void send_reply(ls_loader_server *s, zmq_msg_t *env, size_t n_env, int type, int status, const void *payload,
                       size_t plen) {
    uint8_t *buf = NULL;
    size_t len = 0;
    if (frame_rep(type, status, payload, plen, &buf, &len) < 0) {
        for (size_t k = 0; k < n_env; k++) zmq_msg_close(&env[k]);
        return;
    }
    for (size_t k = 0; k < n_env; k++) {
        zmq_msg_send(&env[k], s->sock, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_msg_close(&env[k]);
    }
    zmq_send(s->sock, buf, len, ZMQ_DONTWAIT); /* a vanished peer is not our error */
    free(buf);
}

static void reply_error(ls_loader_server *s, zmq_msg_t *env, size_t n_env, int type, int status, const char *msg) {
    send_reply(s, env, n_env, type, status, msg, strlen(msg));
}

/* Answers one batch request of process g for a built step (s->mu held). The DP group's batch is
 * read from the sources once, kept until the step leaves the window, and placed on each member. */
static void reply_batch(ls_loader_server *s, zmq_msg_t *env, size_t n_env, int64_t step, int g) {
    ls_topology at;
    ls_topology_coords(&s->topo, g, &at);
    size_t slot = (size_t)(step % s->W), k = slot * s->R + (size_t)at.dp;
    uint8_t *enc = NULL;
    size_t len = 0;
    int rc = LS_OK;
    if (!s->dpb_ok[k] && at.pp == 0) {
        rc = ls_loader_step_batch(s->ring[slot], at.dp, &s->dpb[k]);
        if (rc == LS_OK) {
            s->dpb_ok[k] = 1;
            s->read_tokens += s->dpb[k].n_tokens;
            s->read_batches++;
        }
    }
    if (rc == LS_OK && s->G == s->R) { /* no grid: the batch itself */
        rc = ls_loader_batch_encode(&s->dpb[k], &enc, &len);
        if (rc == LS_OK) s->served_tokens += s->dpb[k].n_tokens;
        ls_loader_batch_free(&s->dpb[k]); /* a DP rank fetches its batch once; retries rebuild it */
        s->dpb_ok[k] = 0;
    } else if (rc == LS_OK) {
        ls_loader_batch placed;
        ls_loader_batch empty = {.step = step, .rank = at.dp, .n_ranks = s->R, .n_ctx = s->mix->n_ctx, .micro_batches = 1};
        rc = ls_loader_batch_place(&s->topo, g, at.pp == 0 ? &s->dpb[k] : &empty, &placed);
        if (rc == LS_OK) {
            if (at.pp > 0) placed.n_ctx = s->mix->n_ctx, placed.micro_batches = 1;
            placed.rank = g; /* the process's identity on the grid; its DP rank follows from the topology */
            placed.n_ranks = s->G;
            rc = ls_loader_batch_encode(&placed, &enc, &len);
            s->served_tokens += placed.n_tokens;
            ls_loader_batch_free(&placed);
        }
    }
    if (rc < 0) {
        reply_error(s, env, n_env, MSG_BATCH, rc, ls_errmsg());
        return;
    }
    s->served_batches++;
    s->fetched[slot * s->G + g] = 1;
    send_reply(s, env, n_env, MSG_BATCH, LS_OK, enc, len);
    free(enc);
    pthread_cond_broadcast(&s->cv); /* eviction may now be possible */
}

static void answer_parked(ls_loader_server *s) {
    pthread_mutex_lock(&s->mu);
    int k = 0;
    for (int i = 0; i < s->n_parked; i++) {
        parked_req *p = &s->parked[i];
        if (s->build_err) {
            char msg[320];
            snprintf(msg, sizeof msg, "the constructor failed: %s", s->build_msg);
            reply_error(s, p->env, p->n_env, MSG_BATCH, s->build_err, msg);
        } else if (p->step < s->hi) {
            reply_batch(s, p->env, p->n_env, p->step, p->rank);
        } else {
            s->parked[k++] = *p;
        }
    }
    s->n_parked = k;
    pthread_mutex_unlock(&s->mu);
}

static void handle_batch(ls_loader_server *s, zmq_msg_t *env, size_t n_env, int64_t step, int rank) {
    char msg[400];
    if (rank < 0 || rank >= s->G) {
        snprintf(msg, sizeof msg, "rank %d out of range: the service serves %d %s", rank, s->G,
                 s->G == s->R ? "ranks" : "processes (its topology)");
        reply_error(s, env, n_env, MSG_BATCH, LS_EINVAL, msg);
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (s->passive && take_over(s) != LS_OK) {
        snprintf(msg, sizeof msg, "%s", ls_errmsg());
        reply_error(s, env, n_env, MSG_BATCH, LS_ESTATE, msg);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    if (s->takeover_s > 0) /* after a takeover, a rank asking for step s has consumed the steps before it */
        for (int64_t t = s->lo; t < step && t < s->hi; t++) s->fetched[(size_t)(t % s->W) * s->G + rank] = 1;
    if (s->build_err) {
        snprintf(msg, sizeof msg, "the constructor failed: %s", s->build_msg);
        reply_error(s, env, n_env, MSG_BATCH, s->build_err, msg);
    } else if (step < s->lo) {
        snprintf(msg, sizeof msg,
                 "step %lld is too far behind: the service holds steps [%lld, %lld); restart it from a saved state to "
                 "replay",
                 (long long)step, (long long)s->lo, (long long)s->hi);
        reply_error(s, env, n_env, MSG_BATCH, LS_ERANGE, msg);
    } else if (step >= first_unfetched(s) + s->W) {
        snprintf(msg, sizeof msg,
                 "step %lld is too far ahead: the service holds steps [%lld, %lld) and builds up to step %lld until "
                 "every rank has fetched step %lld",
                 (long long)step, (long long)s->lo, (long long)s->hi, (long long)(first_unfetched(s) + s->W - 1),
                 (long long)first_unfetched(s));
        reply_error(s, env, n_env, MSG_BATCH, LS_ERANGE, msg);
    } else if (step < s->hi) {
        reply_batch(s, env, n_env, step, rank);
    } else if (s->n_parked == MAX_PARKED) {
        reply_error(s, env, n_env, MSG_BATCH, LS_EBUSY, "too many waiting requests");
    } else {
        parked_req *p = &s->parked[s->n_parked++];
        p->n_env = n_env;
        for (size_t k = 0; k < n_env; k++) {
            zmq_msg_init(&p->env[k]);
            zmq_msg_move(&p->env[k], &env[k]);
            zmq_msg_close(&env[k]);
        }
        p->step = step;
        p->rank = rank;
        if (step + 1 > s->front) s->front = step + 1;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* {"weights": {"name": w, ...} | null, "step": k}: unnamed sources get weight 0. */
static int control(ls_loader_server *s, const uint8_t *payload, size_t len, char *reply, size_t cap) {
    cJSON *j;
    LS_TRY(ls_json_parse((const char *)payload, len, "control message", &j));
    int rc = LS_OK;
    double w[LS_LOADER_MAX_SOURCES] = {0}, step = -1;
    int64_t at = -1; /* -1: from the next step */
    const cJSON *jw = cJSON_GetObjectItemCaseSensitive(j, "weights");
    if (!cJSON_IsObject(j) || !jw)
        rc = ls_err(LS_EINVAL, "control message: expected {\"weights\": {...} | null, \"step\": N}");
    if (rc == LS_OK) rc = ls_json_get_double(j, "step", -1, &step);
    if (rc == LS_OK && !ls_f64_as_i64(step, -1, LS_JSON_INT_MAX, &at))
        rc = ls_err(LS_EINVAL, "control message: \"step\" must be an integer in [0, 2^53]");
    if (rc == LS_OK && !cJSON_IsNull(jw)) {
        if (!cJSON_IsObject(jw)) rc = ls_err(LS_EINVAL, "control message: \"weights\" must be an object or null");
        const cJSON *e;
        cJSON_ArrayForEach(e, jw) {
            if (rc < 0) break;
            int k = ls_loader_mix_find(s->mix, e->string);
            if (k < 0)
                rc = ls_err(LS_EINVAL, "control message: unknown source '%s'", e->string);
            else if (!cJSON_IsNumber(e))
                rc = ls_err(LS_EINVAL, "control message: weight of '%s' is not a number", e->string);
            else
                w[k] = e->valuedouble;
        }
    }
    int64_t from = -1;
    if (rc == LS_OK) {
        pthread_mutex_lock(&s->ldmu);
        from = at >= 0 ? at : ls_loader_step_index(s->ld);
        /* journaled before it is applied and acknowledged; taken out again if refused */
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddNumberToObject(e, "at", (double)from) ||
            !cJSON_AddItemToObject(e, "weights", cJSON_Duplicate(jw, 1))) {
            cJSON_Delete(e);
            e = NULL;
            rc = ls_err(LS_ENOMEM, "out of memory");
        } else {
            pthread_mutex_lock(&s->mu); /* a shadow's pull reads the list under mu */
            cJSON_AddItemToArray(s->changes, e);
            pthread_mutex_unlock(&s->mu);
            if (s->journal) rc = journal_write(s);
        }
        if (rc == LS_OK) rc = ls_loader_set_weights(s->ld, cJSON_IsNull(jw) ? NULL : w, from);
        if (rc != LS_OK && e) {
            char why[256]; /* keep the first error's message */
            snprintf(why, sizeof why, "%s", ls_errmsg());
            pthread_mutex_lock(&s->mu);
            cJSON_Delete(cJSON_DetachItemViaPointer(s->changes, e));
            pthread_mutex_unlock(&s->mu);
            if (s->journal && journal_write(s) != LS_OK) LS_WARN("%s", ls_errmsg());
            ls_err(rc, "%s", why);
        }
        pthread_mutex_unlock(&s->ldmu);
    }
    cJSON_Delete(j);
    if (rc == LS_OK) snprintf(reply, cap, "{\"ok\":true,\"from_step\":%lld}", (long long)from);
    return rc;
}

static void info(ls_loader_server *s, char *buf, size_t cap) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "sources");
    pthread_mutex_lock(&s->mu);
    cJSON_AddNumberToObject(o, "ranks", s->R);
    cJSON_AddNumberToObject(o, "vocab", s->vocab ? s->vocab : LS_VOCAB);
    char fp[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)s->tok_print);
    cJSON_AddStringToObject(o, "tokenizer", s->tok_print ? fp : "bytes");
    cJSON_AddNumberToObject(o, "n_ctx", s->mix->n_ctx);
    cJSON_AddNumberToObject(o, "tokens_per_rank", s->mix->tokens_per_rank);
    cJSON_AddNumberToObject(o, "lo", (double)s->lo);
    cJSON_AddNumberToObject(o, "hi", (double)s->hi);
    cJSON_AddNumberToObject(o, "window", s->W);
    cJSON *tp = cJSON_AddObjectToObject(o, "topology");
    cJSON_AddNumberToObject(tp, "dp", s->topo.dp);
    cJSON_AddNumberToObject(tp, "pp", s->topo.pp);
    cJSON_AddNumberToObject(tp, "tp", s->topo.tp);
    cJSON_AddNumberToObject(tp, "cp", s->topo.cp);
    cJSON_AddNumberToObject(o, "read_tokens", (double)s->read_tokens);
    cJSON_AddNumberToObject(o, "read_batches", (double)s->read_batches);
    cJSON_AddNumberToObject(o, "served_tokens", (double)s->served_tokens);
    cJSON_AddNumberToObject(o, "served_batches", (double)s->served_batches);
    if (s->shadow_of) {
        cJSON_AddStringToObject(o, "shadow_of", s->shadow_of);
        cJSON_AddBoolToObject(o, "took_over", !s->passive);
        cJSON_AddNumberToObject(o, "state_pulls", (double)s->pulls);
        if (!s->passive) cJSON_AddNumberToObject(o, "took_over_at_step", (double)s->peer_step);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->ldmu); /* the constructor thread changes the hub's counts */
    if (s->hub) cJSON_AddNumberToObject(o, "worker_port", ls_loader_hub_port(s->hub));
    for (int i = 0; i < s->mix->n_sources; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", s->mix->src[i].name);
        cJSON_AddNumberToObject(e, "docs", (double)ls_loader_source_docs(s->ld, i));
        cJSON_AddNumberToObject(e, "skipped", (double)ls_loader_source_skipped(s->ld, i));
        if (s->hub) {
            ls_loader_hub_source hs;
            ls_loader_hub_source_info(s->hub, i, &hs);
            cJSON_AddNumberToObject(e, "workers", hs.live);
            cJSON_AddNumberToObject(e, "workers_wanted", hs.want);
            cJSON_AddNumberToObject(e, "workers_lost", (double)hs.lost);
            cJSON_AddNumberToObject(e, "worker_tokens_per_s", hs.tokens_per_s);
        }
        cJSON_AddItemToArray(arr, e);
    }
    pthread_mutex_unlock(&s->ldmu);
    if (!cJSON_PrintPreallocated(o, buf, (int)cap, 0)) snprintf(buf, cap, "{\"ranks\":%d}", s->R);
    cJSON_Delete(o);
}

static void handle(ls_loader_server *s, zmq_msg_t *env, size_t n_env, zmq_msg_t *body) {
    const uint8_t *p = zmq_msg_data(body), *payload;
    size_t n = zmq_msg_size(body);
    req_hdr h;
    memset(&h, 0, sizeof h);
    if (n >= sizeof h) memcpy(&h, p, sizeof h);
    if (ls_lwire_check(p, n, REQ_MAGIC, sizeof h, h.len, &payload) < 0) {
        LS_WARN("loader service: rejected a request: %s", ls_errmsg());
        reply_error(s, env, n_env, 0, LS_EFORMAT, ls_errmsg());
        return;
    }
    char buf[4096];
    switch (h.type) {
    case MSG_BATCH:
        handle_batch(s, env, n_env, h.step, h.rank);
        return;
    case MSG_CONTROL:
        if (control(s, payload, h.len, buf, sizeof buf) < 0) {
            LS_WARN("loader service: control message refused: %s", ls_errmsg());
            reply_error(s, env, n_env, MSG_CONTROL, LS_EINVAL, ls_errmsg());
        } else {
            LS_INFO("loader service: %s", buf);
            send_reply(s, env, n_env, MSG_CONTROL, LS_OK, buf, strlen(buf));
        }
        return;
    case MSG_INFO:
        info(s, buf, sizeof buf);
        send_reply(s, env, n_env, MSG_INFO, LS_OK, buf, strlen(buf));
        return;
    case MSG_STATE: {
        uint8_t *st = NULL;
        size_t sl = 0;
        pthread_mutex_lock(&s->mu);
        int rc = s->passive ? ls_err(LS_ESTATE, "a shadow that has not taken over has no state to give")
                            : state_message(s, &st, &sl);
        pthread_mutex_unlock(&s->mu);
        if (rc) reply_error(s, env, n_env, MSG_STATE, rc, ls_errmsg());
        else send_reply(s, env, n_env, MSG_STATE, LS_OK, st, sl);
        free(st);
        return;
    }
    case MSG_SHUTDOWN:
        send_reply(s, env, n_env, MSG_SHUTDOWN, LS_OK, "{\"ok\":true}", 11);
        atomic_store(&s->stop, 1);
        return;
    default:
        reply_error(s, env, n_env, (int)h.type, LS_EINVAL, "unknown request type");
    }
}

int ls_loader_server_run(ls_loader_server *s) {
    while (!atomic_load(&s->stop)) {
        zmq_pollitem_t items[2] = {{s->sock, 0, ZMQ_POLLIN, 0}, {s->wake_rx, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, 100) < 0) {
            if (zmq_errno() == EINTR) continue;
            return ls_err(LS_ENET, "zmq_poll: %s", zmq_strerror(zmq_errno()));
        }
        if (items[1].revents & ZMQ_POLLIN) {
            char c[16];
            while (zmq_recv(s->wake_rx, c, sizeof c, ZMQ_DONTWAIT) >= 0) {
            }
            answer_parked(s);
        }
        if (!(items[0].revents & ZMQ_POLLIN)) continue;
        /* One message per loop turn: envelope frames then the body (last frame). */
        zmq_msg_t fr[MAX_ENVELOPE + 1];
        size_t nf = 0;
        int more = 1, overflow = 0;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, s->sock, 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (nf < MAX_ENVELOPE + 1)
                fr[nf++] = m;
            else
                zmq_msg_close(&m), overflow = 1;
        }
        if (nf < 2 || overflow) {
            for (size_t k = 0; k < nf; k++) zmq_msg_close(&fr[k]);
            continue;
        }
        handle(s, fr, nf - 1, &fr[nf - 1]);
        zmq_msg_close(&fr[nf - 1]);
    }
    return LS_OK;
}

/* ---------------------------------------------------------------- client */

struct ls_loader_client {
    void *zctx, *sock;
    char *endpoint;   /* the one in use */
    char **endpoints; /* the primary, then its shadows */
    int n_endpoints, cur;
    int rank, timeout_ms, retries;
};

static int client_connect(ls_loader_client *c) {
    if (c->sock) zmq_close(c->sock);
    c->endpoint = c->endpoints[c->cur];
    c->sock = zmq_socket(c->zctx, ZMQ_REQ);
    if (!c->sock) return ls_err(LS_ENET, "zmq: %s", zmq_strerror(zmq_errno()));
    int zero = 0;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->sock, ZMQ_RCVTIMEO, &c->timeout_ms, sizeof c->timeout_ms);
    zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &c->timeout_ms, sizeof c->timeout_ms);
    return ls_zsec_connect(c->sock, c->endpoint, "loader client");
}

int ls_loader_client_open(ls_loader_client **out, const char *endpoint, int rank, int timeout_ms, int retries) {
    *out = NULL;
    ls_loader_client *c = calloc(1, sizeof *c);
    if (!c) return ls_err(LS_ENOMEM, "out of memory");
    c->zctx = zmq_ctx_new();
    c->rank = rank;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
    c->retries = retries >= 0 ? retries : 2;
    int rc = c->zctx ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    for (const char *p = endpoint; rc == LS_OK && p;) { /* "tcp://primary:port,tcp://shadow:port,..." */
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char **ne = realloc(c->endpoints, sizeof *ne * (size_t)(c->n_endpoints + 1));
        if (!ne || !(ne[c->n_endpoints] = strndup(p, n))) {
            if (ne) c->endpoints = ne;
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        c->endpoints = ne;
        if (strncmp(ne[c->n_endpoints], "tcp://", 6) != 0 && strncmp(ne[c->n_endpoints], "ipc://", 6) != 0)
            rc = ls_err(LS_EINVAL, "loader endpoint must look like tcp://host:port (a comma-separated list for "
                                   "shadows), got '%s'", ne[c->n_endpoints]);
        c->n_endpoints++;
        p = comma ? comma + 1 : NULL;
    }
    if (rc == LS_OK) rc = client_connect(c);
    if (rc < 0) {
        ls_loader_client_close(c);
        return rc;
    }
    *out = c;
    return LS_OK;
}

void ls_loader_client_close(ls_loader_client *c) {
    if (!c) return;
    if (c->sock) zmq_close(c->sock);
    if (c->zctx) zmq_ctx_term(c->zctx);
    for (int i = 0; i < c->n_endpoints; i++) free(c->endpoints[i]);
    free(c->endpoints);
    free(c);
}

const char *ls_loader_client_endpoint(const ls_loader_client *c) { return c->endpoint; }

/* Lazy-pirate request: on a timeout the REQ socket is replaced and the same request resent (the
 * service answers duplicates identically); when an endpoint has not answered `retries + 1` times,
 * the next one (a shadow) is tried. *payload is malloc'd. */
static int roundtrip(ls_loader_client *c, int type, int64_t step, const void *pl, size_t plen, uint8_t **payload,
                     size_t *len, int *status) {
    uint8_t *req = NULL;
    size_t rlen = 0;
    LS_TRY(frame_req(type, step, c->rank, pl, plen, &req, &rlen));
    int rc = LS_ETIMEDOUT, done = 0;
    for (int e = 0; e < c->n_endpoints && !done; e++) {
        if (e > 0) {
            c->cur = (c->cur + 1) % c->n_endpoints;
            LS_WARN("loader service %s did not answer; failing over to %s", c->endpoint, c->endpoints[c->cur]);
            if ((rc = client_connect(c)) < 0) break;
        }
        for (int attempt = 0; attempt <= c->retries && !done; attempt++) {
            if (attempt > 0 && (rc = client_connect(c)) < 0) break;
            if (zmq_send(c->sock, req, rlen, 0) < 0) {
                rc = ls_err(LS_ETIMEDOUT, "loader service %s: send timed out", c->endpoint);
                continue;
            }
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, c->sock, 0) < 0) {
                zmq_msg_close(&m);
                rc = ls_err(LS_ETIMEDOUT, "loader service %s: no answer within %d ms (%d attempts; is it running, with "
                            "matching CURVE keys?)", c->endpoint, c->timeout_ms, attempt + 1);
                continue;
            }
            const uint8_t *p = zmq_msg_data(&m), *body;
            size_t n = zmq_msg_size(&m);
            rep_hdr h;
            memset(&h, 0, sizeof h);
            if (n >= sizeof h) memcpy(&h, p, sizeof h);
            rc = ls_lwire_check(p, n, REP_MAGIC, sizeof h, h.len, &body);
            if (rc == LS_OK) {
                *payload = malloc(h.len + 1);
                if (!*payload)
                    rc = ls_err(LS_ENOMEM, "out of memory");
                else {
                    memcpy(*payload, body, h.len);
                    (*payload)[h.len] = 0;
                    *len = h.len;
                    *status = h.status;
                }
            }
            zmq_msg_close(&m);
            done = 1;
        }
    }
    free(req);
    return rc;
}

/* One request on a client kept open (a shadow's pulls): the answer's payload if its status is OK. A
 * request that got no answer leaves the REQ socket waiting, so it is replaced (same context). */
static int roundtrip_raw(ls_loader_client *c, int type, uint8_t **payload, size_t *len) {
    *payload = NULL;
    int status = 0;
    int rc = roundtrip(c, type, 0, NULL, 0, payload, len, &status);
    if (rc != LS_OK) client_connect(c);
    if (rc == LS_OK && status < 0) {
        free(*payload);
        *payload = NULL;
        rc = ls_err(status, "loader service %s refused the request", c->endpoint);
    }
    return rc;
}

static int service_error(int status, const uint8_t *msg) {
    int code = status < 0 && status >= LS_EPEER ? status : LS_EPEER;
    return ls_err(code, "loader service: %s", (const char *)msg);
}

int ls_loader_client_batch(ls_loader_client *c, int64_t step, ls_loader_batch *out) {
    memset(out, 0, sizeof *out);
    uint8_t *p = NULL;
    size_t n;
    int status;
    LS_TRY(roundtrip(c, MSG_BATCH, step, NULL, 0, &p, &n, &status));
    int rc = status < 0 ? service_error(status, p) : ls_loader_batch_decode(p, n, out);
    free(p);
    if (rc == LS_OK && (out->step != step || out->rank != c->rank)) {
        rc = ls_err(LS_EFORMAT, "loader service answered for step %lld rank %d, asked step %lld rank %d",
                    (long long)out->step, out->rank, (long long)step, c->rank);
        ls_loader_batch_free(out);
    }
    return rc;
}

static int simple(ls_loader_client *c, int type, const char *json, char **reply) {
    uint8_t *p = NULL;
    size_t n;
    int status;
    LS_TRY(roundtrip(c, type, 0, json, json ? strlen(json) : 0, &p, &n, &status));
    if (status < 0) {
        int rc = service_error(status, p);
        free(p);
        return rc;
    }
    if (reply)
        *reply = (char *)p;
    else
        free(p);
    return LS_OK;
}

int ls_loader_client_control(ls_loader_client *c, const char *json, char **reply) {
    return simple(c, json ? MSG_CONTROL : MSG_INFO, json, reply);
}
int ls_loader_client_shutdown(ls_loader_client *c) { return simple(c, MSG_SHUTDOWN, NULL, NULL); }

int ls_loader_client_set_weights(ls_loader_client *c, const char *weights, int64_t step, char **reply) {
    char msg[4096];
    if (step >= 0)
        snprintf(msg, sizeof msg, "{\"weights\": %s, \"step\": %lld}", weights ? weights : "null", (long long)step);
    else
        snprintf(msg, sizeof msg, "{\"weights\": %s}", weights ? weights : "null");
    return ls_loader_client_control(c, msg, reply);
}
