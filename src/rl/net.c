/* net.c - the rl runtime's wire: sealed messages, payload encoding, ZeroMQ helpers,
 * weight-version sending and the run config in JSON. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "llmsys/zsec.h"
#include "rl/internal.h"

/* ---------------------------------------------------------------- messages */

static void reserve(rl_buf *b, size_t add) {
    if (b->oom || b->n + add <= b->cap) return;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + add) nc *= 2;
    uint8_t *p = realloc(b->p, nc);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p, b->cap = nc;
}

void rl_put(rl_buf *b, const void *d, size_t n) {
    reserve(b, n);
    if (b->oom) return;
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

void rl_msg_begin(rl_buf *b, int type) {
    b->n = 0;
    b->oom = 0;
    rl_hdr h = {RL_MAGIC, RL_WIRE_VERSION, (uint16_t)type, 0, 0};
    rl_put(b, &h, sizeof h);
}

void rl_put_i32(rl_buf *b, int32_t v) { rl_put(b, &v, 4); }
void rl_put_i64(rl_buf *b, int64_t v) { rl_put(b, &v, 8); }
void rl_put_f64(rl_buf *b, double v) { rl_put(b, &v, 8); }
void rl_put_str(rl_buf *b, const char *s) {
    int32_t n = s ? (int32_t)strlen(s) : 0;
    rl_put_i32(b, n);
    rl_put(b, s, (size_t)n);
}

static uint64_t msg_hash(const uint8_t *m, size_t len) {
    rl_hdr h;
    memcpy(&h, m, sizeof h);
    h.checksum = 0;
    return ls_hash64(&h, sizeof h) ^ (ls_hash64(m + sizeof h, len - sizeof h) * 0x9E3779B97F4A7C15ull);
}

int rl_msg_end(rl_buf *b) {
    if (b->oom) return ls_err(LS_ENOMEM, "rl: out of memory building a message");
    rl_hdr h;
    memcpy(&h, b->p, sizeof h);
    h.payload_bytes = b->n - sizeof h;
    h.checksum = 0;
    memcpy(b->p, &h, sizeof h);
    h.checksum = msg_hash(b->p, b->n);
    memcpy(b->p, &h, sizeof h);
    return LS_OK;
}

void rl_buf_free(rl_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int rl_msg_open(const void *msg, size_t len, const char *what, rl_rd *r) {
    memset(r, 0, sizeof *r);
    rl_hdr h;
    if (len < sizeof h) return ls_err(LS_EFORMAT, "%s: message of %zu bytes is shorter than a header", what, len);
    memcpy(&h, msg, sizeof h);
    if (h.magic != RL_MAGIC) return ls_err(LS_EFORMAT, "%s: bad magic (not an llmsys rl message)", what);
    if (h.version != RL_WIRE_VERSION)
        return ls_err(LS_EFORMAT, "%s: wire version %u, expected %d", what, h.version, RL_WIRE_VERSION);
    if (h.payload_bytes != len - sizeof h) return ls_err(LS_EFORMAT, "%s: truncated message", what);
    if (msg_hash(msg, len) != h.checksum) return ls_err(LS_ECHECKSUM, "%s: message checksum mismatch", what);
    r->p = (const uint8_t *)msg + sizeof h;
    r->n = len - sizeof h;
    r->type = h.type;
    return LS_OK;
}

const void *rl_get_bytes(rl_rd *r, size_t n) {
    if (r->bad || n > r->n - r->off) {
        r->bad = 1;
        return NULL;
    }
    const void *p = r->p + r->off;
    r->off += n;
    return p;
}

static void get_n(rl_rd *r, void *v, size_t n) { /* v keeps its zero when the message is short */
    const void *p = rl_get_bytes(r, n);
    if (p) memcpy(v, p, n);
}
int32_t rl_get_i32(rl_rd *r) {
    int32_t v = 0;
    get_n(r, &v, 4);
    return v;
}
int64_t rl_get_i64(rl_rd *r) {
    int64_t v = 0;
    get_n(r, &v, 8);
    return v;
}
double rl_get_f64(rl_rd *r) {
    double v = 0;
    get_n(r, &v, 8);
    return v;
}
char *rl_get_str(rl_rd *r, char *dst, size_t cap) {
    int32_t n = rl_get_i32(r);
    const char *s = n >= 0 ? rl_get_bytes(r, (size_t)n) : NULL;
    if (n < 0) r->bad = 1;
    size_t k = s ? (size_t)n : 0;
    if (k >= cap) k = cap - 1;
    if (k) memcpy(dst, s, k);
    dst[k] = 0;
    return dst;
}

/* ---------------------------------------------------------------- ZeroMQ */

void *rl_socket(void *zctx, int type) {
    void *s = zmq_socket(zctx, type);
    if (!s) {
        ls_err(LS_ENET, "zmq socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int zero = 0, hwm = 100000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    return s;
}

int rl_send(void *sock, const void *d, size_t n, int more) {
    if (zmq_send(sock, d, n, more ? ZMQ_SNDMORE : 0) < 0)
        return ls_err(LS_ENET, "zmq send: %s", zmq_strerror(zmq_errno()));
    return LS_OK;
}

int rl_recv(void *sock, int timeout_ms, void **msg, size_t *len, int *more) {
    *msg = NULL;
    *len = 0;
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&it, 1, timeout_ms);
    if (n < 0) return ls_err(LS_ENET, "zmq poll: %s", zmq_strerror(zmq_errno()));
    if (n == 0) return LS_ETIMEDOUT;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) {
        zmq_msg_close(&m);
        return ls_err(LS_ENET, "zmq recv: %s", zmq_strerror(zmq_errno()));
    }
    *len = zmq_msg_size(&m);
    *msg = malloc(*len ? *len : 1);
    if (!*msg) {
        zmq_msg_close(&m);
        return ls_err(LS_ENOMEM, "rl: out of memory receiving");
    }
    memcpy(*msg, zmq_msg_data(&m), *len);
    if (more) *more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    return LS_OK;
}

int rl_recv_routed(void *sock, int timeout_ms, uint8_t *id, size_t *idn, void **msg, size_t *len) {
    void *a;
    size_t an;
    int more = 0;
    *msg = NULL;
    int rc = rl_recv(sock, timeout_ms, &a, &an, &more);
    if (rc) return rc;
    if (!more || an > 64) {
        free(a);
        return ls_err(LS_EFORMAT, "rl: routed message without an identity frame");
    }
    memcpy(id, a, an);
    *idn = an;
    free(a);
    rc = rl_recv(sock, 100, msg, len, &more);
    while (rc == LS_OK && more) { /* extra frames: drain and reject */
        void *x;
        size_t xn;
        free(*msg);
        *msg = NULL;
        rc = rl_recv(sock, 100, &x, &xn, &more);
        free(x);
        if (rc == LS_OK) rc = ls_err(LS_EFORMAT, "rl: message with unexpected frames");
    }
    return rc == LS_ETIMEDOUT ? ls_err(LS_EFORMAT, "rl: identity frame without a body") : rc;
}

int rl_send_routed(void *sock, const uint8_t *id, size_t idn, const void *d, size_t n) {
    if (zmq_send(sock, id, idn, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 || zmq_send(sock, d, n, ZMQ_DONTWAIT) < 0)
        return ls_err(LS_ENET, "zmq send: %s", zmq_strerror(zmq_errno()));
    return LS_OK;
}

int rl_bind(void *zctx, void *sock, const char *ep, const char *what, char *out, size_t cap) {
    LS_TRY(ls_zsec_bind(zctx, sock, ep, what)); /* libzmq picks a free port for :0 itself */
    size_t n = cap;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, out, &n) != 0)
        return ls_err(LS_ENET, "zmq: cannot read the bound endpoint");
    return LS_OK;
}

int rl_send_version(void *sock, const uint8_t *id, size_t idn, int64_t version, const void *blob, size_t len) {
    ls_rl_chunk_hdr *h;
    int n;
    LS_TRY(ls_rl_chunk_split(version, blob, len, RL_CHUNK_BYTES, &h, &n));
    rl_buf b = {0};
    int rc = LS_OK;
    for (int i = 0; i < n && rc == LS_OK; i++) {
        rl_msg_begin(&b, M_CHUNK);
        rl_put(&b, &h[i], sizeof h[i]);
        rl_put(&b, (const uint8_t *)blob + h[i].offset, (size_t)h[i].len);
        rc = rl_msg_end(&b);
        if (rc == LS_OK) rc = id ? rl_send_routed(sock, id, idn, b.p, b.n) : rl_send(sock, b.p, b.n, 0);
    }
    rl_buf_free(&b);
    free(h);
    return rc;
}

/* ---------------------------------------------------------------- joining the manager */

int rl_call(void *sock, rl_buf *b, int timeout_ms, void **reply, size_t *len, rl_rd *r, const char *what) {
    *reply = NULL;
    LS_TRY(rl_msg_end(b));
    LS_TRY(rl_send(sock, b->p, b->n, 0));
    int more = 0;
    int rc = rl_recv(sock, timeout_ms, reply, len, &more);
    if (rc == LS_ETIMEDOUT) return ls_err(LS_ETIMEDOUT, "%s: no answer within %.1f s", what, timeout_ms / 1000.0);
    if (rc) return rc;
    rc = rl_msg_open(*reply, *len, what, r);
    if (rc) {
        free(*reply);
        *reply = NULL;
    }
    return rc;
}

int rl_join(void *zctx, const char *manager, const char *role, int id, const char *endpoint, void **sock,
            rl_config *cfg) {
    *sock = rl_socket(zctx, ZMQ_DEALER);
    if (!*sock) return LS_ENET;
    LS_TRY(ls_zsec_connect(*sock, manager, "rl manager link"));
    rl_buf b = {0};
    rl_msg_begin(&b, M_HELLO);
    rl_put_str(&b, role);
    rl_put_i32(&b, id);
    rl_put_str(&b, endpoint ? endpoint : "");
    void *rep;
    size_t len;
    rl_rd r;
    int rc = rl_call(*sock, &b, 5000, &rep, &len, &r, "manager");
    rl_buf_free(&b);
    if (rc == LS_ETIMEDOUT) return ls_err(LS_ENET, "manager unreachable at %s (no answer within 5 s)", manager);
    if (rc) return rc;
    if (r.type != M_CONFIG) {
        free(rep);
        return ls_err(LS_EFORMAT, "manager at %s: unexpected answer to hello", manager);
    }
    int32_t n = rl_get_i32(&r);
    const char *js = n > 0 ? rl_get_bytes(&r, (size_t)n) : NULL;
    rc = js ? rl_config_from_json(js, (size_t)n, cfg) : ls_err(LS_EFORMAT, "manager: empty config");
    free(rep);
    /* started by `rl run`: tell it the manager knows this worker now (its fault timers wait for this) */
    const char *joined = getenv("LLMSYS_RL_JOINED");
    if (rc == LS_OK && joined && *joined && ls_file_write_atomic(joined, "joined\n", 7) != LS_OK)
        LS_WARN("%s %d: %s", role, id, ls_errmsg());
    return rc;
}

/* ---------------------------------------------------------------- config */

char *rl_config_to_json(const rl_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "mode", ls_rl_mode_name(c->mode));
#define S(f) cJSON_AddStringToObject(j, #f, c->f)
#define N(f) cJSON_AddNumberToObject(j, #f, (double)c->f)
    S(tasks), S(heldout), S(init), S(report), S(workdir);
    N(rollouts), N(relays), N(updates), N(group), N(batch_groups), N(max_seqs), N(max_new), N(staleness), N(repack),
        N(eval_n), N(ppo_epochs), N(rollout_batch);
    N(lr), N(clip_eps), N(is_cap), N(step_ms), N(train_ms), N(hb_timeout_s), N(seed);
#undef S
#undef N
    if (c->model.vocab > 0) cJSON_AddItemToObject(j, "model", ls_model_config_json(&c->model));
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

int rl_model_check(const ls_model_config *mc, const char *what) {
    if (mc->vocab == LS_VOCAB) return LS_OK;
    return ls_err(LS_EINVAL,
                  "%s: a model of %d tokens (a BPE vocabulary); RL tasks, prompts and rewards are bytes: give a "
                  "byte-level model (%d tokens)",
                  what, mc->vocab, LS_VOCAB);
}

int rl_config_from_json(const char *s, size_t n, rl_config *c) {
    cJSON *j;
    LS_TRY(ls_json_parse(s, n, "rl config", &j));
    memset(c, 0, sizeof *c);
    const char *str;
    int rc = LS_OK;
    double d;
    if (ls_json_get_string(j, "mode", "laminar", &str) || ls_rl_mode_parse(str, &c->mode)) rc = LS_EINVAL;
#define S(f)                                                                                                           \
    if (rc == LS_OK && ls_json_get_string(j, #f, "", &str) == LS_OK)                                                   \
        snprintf(c->f, sizeof c->f, "%s", str);                                                                        \
    else                                                                                                               \
        rc = LS_EINVAL;
#define I(f, def)                                                                                                      \
    if (rc == LS_OK && ls_json_get_int(j, #f, def, &c->f)) rc = LS_EINVAL;
#define D(f, def)                                                                                                      \
    if (rc == LS_OK && ls_json_get_double(j, #f, def, &c->f)) rc = LS_EINVAL;
    S(tasks)
    S(heldout)
    S(init)
    S(report) S(workdir) I(rollouts, 2) I(relays, 2) I(updates, 10) I(group, 4) I(batch_groups, 4) I(max_seqs, 8)
        I(max_new, 64) I(staleness, 2) I(repack, 1) I(eval_n, 64) I(ppo_epochs, 2) I(rollout_batch, 0) D(lr, 1e-4)
            D(clip_eps, 0.2) D(is_cap, 5.0) D(step_ms, 0) D(train_ms, 0) D(hb_timeout_s, 1.5)
#undef S
#undef I
#undef D
                if (rc == LS_OK && ls_json_get_double(j, "seed", 1, &d) == LS_OK) {
        int64_t seed;
        if (ls_f64_as_i64(d, 0, LS_RL_SEED_MAX, &seed))
            c->seed = (uint64_t)seed;
        else
            rc = ls_err(LS_EINVAL, "\"seed\" must be an integer in [0, 2^53]");
    }
    /* "model" is optional here: a manager whose config lacks it reads it off init */
    const cJSON *mj = cJSON_GetObjectItemCaseSensitive(j, "model");
    char *ms = rc == LS_OK && mj ? cJSON_PrintUnformatted(mj) : NULL;
    if (rc == LS_OK && mj) rc = ms ? ls_model_config_from_json(ms, &c->model) : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK && mj) rc = rl_model_check(&c->model, "\"model\"");
    free(ms);
    cJSON_Delete(j);
    if (rc) return ls_err_wrap(LS_EINVAL, "rl config");
    return LS_OK;
}
