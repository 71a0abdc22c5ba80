/* workers.c - source loaders as processes of their own: the worker (reads and preprocesses one
 * source's documents and sends them on demand) and the hub, the constructor's end (credits, the
 * documents put back in consumption order, dead workers replaced, workers sized by measured cost). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "llmsys/zsec.h"
#include "loader/loader_internal.h"

#define W_MAGIC "LSLW"
#define W_VERSION 1
#define CREDIT 4 /* documents outstanding per worker */
#define RING 256 /* documents a source may have requested ahead of its head */
#define MAX_WORKERS 256
#define BEAT_MS 200

/* JOIN (name) -> SPEC (u32 index, u32 length of the mix JSON of the one source, that JSON, then the
 * tokenizer's JSON or nothing) -> READY (measurement) -> GRANT
 * (epoch, pos pairs) -> DOC (one document's tokens) ... ; BEAT keeps a busy worker alive; STOP ends
 * it; RESET makes a worker the hub does not know join again; REFUSE ends it with a message. */
enum { W_JOIN = 1, W_SPEC, W_READY, W_GRANT, W_DOC, W_BEAT, W_STOP, W_RESET, W_REFUSE };

typedef struct {
    char magic[4];
    uint16_t version, type;
    uint32_t len;
} w_hdr;

typedef struct {
    uint64_t ndocs;
    int64_t skipped;
    double sec_per_token;
} w_ready;

typedef struct {
    uint64_t epoch, pos;
    uint32_t doc, n;
    uint64_t cpu_ns;
} w_doc;

static int w_pack(int type, const void *payload, size_t plen, uint8_t **out, size_t *olen) {
    w_hdr h = {{0}, W_VERSION, (uint16_t)type, (uint32_t)plen};
    memcpy(h.magic, W_MAGIC, 4);
    return ls_lwire_pack(&h, sizeof h, payload, plen, out, olen);
}

/* Sends one message, after the routing id when id is given (the hub's ROUTER). */
static void w_send(void *sock, const void *id, size_t idlen, int type, const void *payload, size_t plen) {
    uint8_t *buf;
    size_t n;
    if (w_pack(type, payload, plen, &buf, &n) != LS_OK) return;
    if (id) zmq_send(sock, id, idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, buf, n, id ? ZMQ_DONTWAIT : 0); /* a vanished peer is not our error */
    free(buf);
}

/* Checks a received message; fills *type, *payload and *plen on success. */
static int w_parse(const uint8_t *p, size_t n, int *type, const uint8_t **payload, size_t *plen) {
    w_hdr h;
    if (n < sizeof h) return ls_err(LS_EFORMAT, "worker link: message too short");
    memcpy(&h, p, sizeof h);
    LS_TRY(ls_lwire_check(p, n, W_MAGIC, sizeof h, h.len, payload));
    *type = h.type;
    *plen = h.len;
    return LS_OK;
}

/* ================================================================ the worker */

typedef struct {
    ls_loader_mix mix;
    ls_src *src;
    ls_src_reader rd;
    ls_bpe *bpe;
    int idx;
    uint32_t *perm;
    uint64_t perm_epoch;
    int perm_ok;
} worker;

/* Reads document doc and preprocesses it (its tokens into w->rd.ids, the CPU time spent in *cpu). */
static int preprocess(worker *w, uint32_t doc, uint32_t *n, double *cpu) {
    double t0 = ls_thread_cpu_time();
    LS_TRY(ls_src_encode_doc(w->src, &w->rd, doc, w->bpe, n));
    /* the configured stand-in for heavy preprocessing: CPU time burnt per document */
    double burn = w->mix.src[0].preprocess_us * 1e-6;
    volatile uint64_t x = doc;
    while (burn > 0 && ls_thread_cpu_time() - t0 < burn)
        for (int i = 0; i < 256; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    *cpu = ls_thread_cpu_time() - t0;
    return LS_OK;
}

/* SPEC: opens the source, then measures its cost on up to 32 documents (0.2 s at most). */
static int worker_setup(worker *w, const uint8_t *p, size_t n, w_ready *r) {
    uint32_t idx, ml;
    if (n < 8 || (memcpy(&idx, p, 4), memcpy(&ml, p + 4, 4), ml > n - 8))
        return ls_err(LS_EFORMAT, "worker link: short spec");
    char *json = malloc(ml + 1);
    if (!json) return ls_err(LS_ENOMEM, "out of memory");
    memcpy(json, p + 8, ml);
    json[ml] = '\0';
    int rc = ls_loader_mix_parse(json, NULL, &w->mix);
    free(json);
    LS_TRY(rc);
    if (n - 8 > ml) LS_TRY(ls_bpe_parse((const char *)p + 8 + ml, n - 8 - ml, &w->bpe));
    w->idx = (int)idx;
    LS_TRY(ls_src_open(&w->src, &w->mix.src[0], w->mix.strict));
    uint32_t nd = ls_src_ndocs(w->src);
    if (!(w->perm = malloc((size_t)nd * sizeof *w->perm))) return ls_err(LS_ENOMEM, "out of memory");
    double cpu = 0, t0 = ls_now();
    uint64_t toks = 0;
    for (uint32_t d = 0; d < nd && d < 32 && ls_now() - t0 < 0.2; d++) {
        uint32_t len;
        double c;
        LS_TRY(preprocess(w, d, &len, &c));
        cpu += c, toks += len;
    }
    *r = (w_ready){nd, ls_src_skipped(w->src), toks ? cpu / (double)toks : 0};
    return LS_OK;
}

/* One granted document: read, preprocess, send. */
static int worker_doc(worker *w, void *sock, uint64_t epoch, uint64_t pos) {
    uint32_t nd = ls_src_ndocs(w->src);
    if (pos >= nd)
        return ls_err(LS_EFORMAT, "worker link: position %llu beyond %u documents", (unsigned long long)pos, nd);
    if (!w->perm_ok || w->perm_epoch != epoch) {
        ls_loader_perm(w->mix.seed, w->idx, epoch, w->perm, nd);
        w->perm_epoch = epoch, w->perm_ok = 1;
    }
    uint32_t n;
    double cpu;
    LS_TRY(preprocess(w, w->perm[pos], &n, &cpu));
    size_t plen = sizeof(w_doc) + (size_t)n * 4;
    uint8_t *msg = malloc(plen);
    if (!msg) return ls_err(LS_ENOMEM, "out of memory");
    w_doc d = {epoch, pos, w->perm[pos], n, (uint64_t)(cpu * 1e9)};
    memcpy(msg, &d, sizeof d);
    memcpy(msg + sizeof d, w->rd.ids, (size_t)n * 4);
    w_send(sock, NULL, 0, W_DOC, msg, plen);
    free(msg);
    return LS_OK;
}

int ls_loader_worker_run(const char *endpoint, const char *name) {
    if (!endpoint || (strncmp(endpoint, "tcp://", 6) && strncmp(endpoint, "ipc://", 6)))
        return ls_err(LS_EINVAL, "worker: the constructor must look like tcp://host:port");
    worker w;
    memset(&w, 0, sizeof w);
    ls_src_reader_init(&w.rd);
    void *ctx = zmq_ctx_new(), *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    int rc = sock ? LS_OK : ls_err(LS_ENET, "zmq: %s", zmq_strerror(zmq_errno()));
    int zero = 0;
    if (rc == LS_OK) zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    if (rc == LS_OK) rc = ls_zsec_connect(sock, endpoint, "loader source worker");
    uint64_t(*queue)[2] = NULL; /* granted (epoch, pos), in order */
    size_t qn = 0, qcap = 0, qhead = 0;
    int joined = 0, ready = 0, done = 0;
    double last_send = 0;
    while (rc == LS_OK && !done) {
        if (!joined) {
            w_send(sock, NULL, 0, W_JOIN, name, strlen(name));
            joined = 1, last_send = ls_now();
        }
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        int busy = qhead < qn;
        if (zmq_poll(&it, 1, busy ? 0 : BEAT_MS) < 0 && zmq_errno() != EINTR) {
            rc = ls_err(LS_ENET, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        while (rc == LS_OK && !done) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            int type;
            const uint8_t *p;
            size_t n;
            if (w_parse(zmq_msg_data(&m), zmq_msg_size(&m), &type, &p, &n) != LS_OK) {
                LS_WARN("loader worker: dropped a message: %s", ls_errmsg());
            } else if (type == W_SPEC && !ready) {
                w_ready r;
                rc = worker_setup(&w, p, n, &r);
                if (rc == LS_OK) {
                    w_send(sock, NULL, 0, W_READY, &r, sizeof r);
                    ready = 1;
                    LS_INFO("loader worker: serving source '%s' (%llu documents, %.3g us/token) to %s", name,
                            (unsigned long long)r.ndocs, r.sec_per_token * 1e6, endpoint);
                }
            } else if (type == W_GRANT && ready && n % 16 == 0) {
                if (qn + n / 16 > qcap) {
                    size_t nc = (qn + n / 16) * 2;
                    void *g = realloc(queue, nc * sizeof *queue);
                    if (!g)
                        rc = ls_err(LS_ENOMEM, "out of memory");
                    else
                        queue = g, qcap = nc;
                }
                if (rc == LS_OK) memcpy(queue + qn, p, n), qn += n / 16;
            } else if (type == W_RESET) {
                qn = qhead = 0;
                ready = joined = 0; /* the hub forgot us (restarted, or declared us dead): join again */
                ls_src_close(w.src), w.src = NULL;
                ls_loader_mix_free(&w.mix);
                ls_bpe_free(w.bpe), w.bpe = NULL;
                free(w.perm), w.perm = NULL, w.perm_ok = 0;
            } else if (type == W_STOP) {
                done = 1;
            } else if (type == W_REFUSE) {
                rc = ls_err(LS_EINVAL, "the constructor refused this worker: %.*s", (int)n, (const char *)p);
            }
            zmq_msg_close(&m);
        }
        if (rc == LS_OK && !done && qhead < qn) {
            rc = worker_doc(&w, sock, queue[qhead][0], queue[qhead][1]);
            if (++qhead == qn) qhead = qn = 0;
            last_send = ls_now();
        } else if (rc == LS_OK && ready && ls_now() - last_send > BEAT_MS * 1e-3) {
            w_send(sock, NULL, 0, W_BEAT, NULL, 0);
            last_send = ls_now();
        }
    }
    free(queue);
    ls_bpe_free(w.bpe);
    free(w.perm);
    ls_src_reader_free(&w.rd);
    ls_src_close(w.src);
    if (w.mix.n_sources) ls_loader_mix_free(&w.mix);
    if (sock) zmq_close(sock);
    if (ctx) zmq_ctx_term(ctx);
    return rc;
}

/* ================================================================ the hub */

typedef struct {
    uint8_t id[256];
    size_t idlen;
    int src, ready, gone;
    pid_t pid; /* > 0: started by the hub */
    int fails; /* consecutive deaths before READY (a worker that cannot start) */
    double seen;
    int outstanding;
} hworker;

typedef struct {
    int state; /* 0: not asked, 1: asked, 2: here */
    int worker;
    int32_t *tok;
    uint32_t len, doc;
} hslot;

typedef struct {
    uint32_t ndocs;
    int64_t skipped, lost;
    int have_ndocs, started, want, starting, broken;
    uint64_t base; /* sequence number (epoch · ndocs + pos) of the head document */
    hslot ring[RING];
    double spt; /* seconds of preprocessing per token (moving average) */
} hsrc;

struct ls_loader_hub {
    const ls_loader_mix *mix;
    ls_loader_hub_opts o;
    char *exe, ep[300];
    int curve, budget, port;
    void *zctx, *sock;
    hworker w[MAX_WORKERS];
    int nw;
    hsrc *s;
    double resumed, last_plan, wait_from;
    double w_last[LS_LOADER_MAX_SOURCES];
};

static const char *type_name(ls_loader_src_type t) {
    return t == LS_SRC_JSONL ? "jsonl" : t == LS_SRC_TOKENS ? "tokens" : "text";
}

/* The SPEC message of source i: its index, then a mix of that source alone (its own preprocessing). */
static int spec_message(const ls_loader_hub *h, int i, uint8_t **out, size_t *len) {
    const ls_loader_source_spec *sp = &h->mix->src[i];
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "sources"), *e = cJSON_CreateObject();
    cJSON_AddItemToArray(arr, e);
    cJSON_AddNumberToObject(o, "seed", (double)h->mix->seed);
    cJSON_AddBoolToObject(o, "strict", h->mix->strict);
    cJSON_AddNumberToObject(o, "n_ctx", h->mix->n_ctx);
    cJSON_AddStringToObject(e, "name", sp->name);
    cJSON_AddStringToObject(e, "type", type_name(sp->type));
    cJSON_AddStringToObject(e, "path", sp->path);
    cJSON_AddStringToObject(e, "field", sp->field);
    cJSON_AddStringToObject(e, "split", sp->split == LS_SPLIT_BLANK ? "blank" : "file");
    cJSON_AddNumberToObject(e, "preprocess_us", sp->preprocess_us);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *tj = h->o.tokenizer ? ls_bpe_to_json(h->o.tokenizer) : NULL;
    size_t ml = js ? strlen(js) : 0, tl = tj ? strlen(tj) : 0;
    uint8_t *p = js && (tj || !h->o.tokenizer) ? malloc(8 + ml + tl) : NULL;
    if (p) {
        uint32_t u[2] = {(uint32_t)i, (uint32_t)ml};
        memcpy(p, u, 8);
        memcpy(p + 8, js, ml);
        if (tl) memcpy(p + 8 + ml, tj, tl);
        *out = p;
        *len = 8 + ml + tl;
    }
    free(js);
    free(tj);
    return p ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
}

/* Starts a worker for source i (exe loader worker ...), which dies with the hub's process. */
static int spawn(ls_loader_hub *h, int i) {
    if (h->nw == MAX_WORKERS) return ls_err(LS_EBUSY, "too many source workers (%d)", MAX_WORKERS);
    const char *argv[12];
    int a = 0;
    argv[a++] = h->exe;
    if (h->curve) argv[a++] = "--curve";
    argv[a++] = "loader", argv[a++] = "worker", argv[a++] = "--role", argv[a++] = "source";
    argv[a++] = "--source", argv[a++] = h->mix->src[i].name, argv[a++] = "--constructor", argv[a++] = h->ep;
    argv[a] = NULL;
    ls_spawn_opts so = {.death_signal = SIGKILL};
    pid_t pid;
    LS_TRY(ls_spawn_self(h->exe, argv, &so, &pid));
    hworker *w = &h->w[h->nw++];
    memset(w, 0, sizeof *w);
    w->src = i, w->pid = pid, w->seen = ls_now();
    h->s[i].starting++;
    return LS_OK;
}

/* A worker is gone (it exited, reaped already, or stopped answering): its asked documents go back
 * to the pool, and a worker the hub started is started again (three failures before it is ready in
 * a row mark the source broken). */
static void drop_worker(ls_loader_hub *h, int k, const char *why, int reaped) {
    hworker *w = &h->w[k];
    hsrc *s = &h->s[w->src];
    w->gone = 1;
    for (int j = 0; j < RING; j++)
        if (s->ring[j].state == 1 && s->ring[j].worker == k) s->ring[j].state = 0;
    if (w->ready)
        s->lost++;
    else if (w->pid > 0)
        s->starting--;
    if (w->pid > 0 && !reaped) {
        kill(w->pid, SIGKILL);
        waitpid(w->pid, NULL, 0);
    }
    LS_WARN("loader: a source worker of '%s' %s; %s", h->mix->src[w->src].name, why,
            w->pid > 0 ? "starting another" : "its share goes to the others");
    if (w->pid <= 0) return;
    int fails = w->ready ? 0 : w->fails + 1;
    if (fails >= 3)
        s->broken = 1;
    else if (spawn(h, w->src) == LS_OK)
        h->w[h->nw - 1].fails = fails;
}

static int find_worker(const ls_loader_hub *h, const uint8_t *id, size_t n) {
    for (int k = 0; k < h->nw; k++)
        if (!h->w[k].gone && h->w[k].idlen == n && !memcmp(h->w[k].id, id, n)) return k;
    return -1;
}

/* Binds a joining worker to a slot: one the hub started and that has not joined yet, else a new one. */
static int join_worker(ls_loader_hub *h, int src, const uint8_t *id, size_t n) {
    int k = -1;
    for (int j = 0; j < h->nw && k < 0; j++)
        if (!h->w[j].gone && h->w[j].src == src && h->w[j].pid > 0 && !h->w[j].idlen) k = j;
    if (k < 0) {
        if (h->nw == MAX_WORKERS) return -1;
        k = h->nw++;
        memset(&h->w[k], 0, sizeof h->w[k]);
        h->w[k].src = src;
    }
    memcpy(h->w[k].id, id, n);
    h->w[k].idlen = n;
    h->w[k].seen = ls_now();
    return k;
}

static void on_message(ls_loader_hub *h, const uint8_t *id, size_t idn, const uint8_t *msg, size_t n) {
    int type;
    const uint8_t *p;
    size_t pl;
    if (w_parse(msg, n, &type, &p, &pl) != LS_OK) {
        LS_WARN("loader: dropped a message on the worker link: %s", ls_errmsg());
        return;
    }
    int k = find_worker(h, id, idn);
    if (type == W_JOIN) {
        char name[LS_LOADER_NAME_MAX + 1];
        snprintf(name, sizeof name, "%.*s", (int)(pl < LS_LOADER_NAME_MAX ? pl : LS_LOADER_NAME_MAX), (const char *)p);
        int src = ls_loader_mix_find(h->mix, name);
        uint8_t *spec = NULL;
        size_t sl = 0;
        if (src < 0) {
            char why[128];
            snprintf(why, sizeof why, "no source '%s' in the mix", name);
            w_send(h->sock, id, idn, W_REFUSE, why, strlen(why));
        } else if ((k >= 0 || join_worker(h, src, id, idn) >= 0) && spec_message(h, src, &spec, &sl) == LS_OK) {
            w_send(h->sock, id, idn, W_SPEC, spec, sl);
            free(spec);
        }
        return;
    }
    if (k < 0) { /* a worker the hub does not know (declared dead, or the hub restarted) */
        w_send(h->sock, id, idn, W_RESET, NULL, 0);
        return;
    }
    hworker *w = &h->w[k];
    hsrc *s = &h->s[w->src];
    w->seen = ls_now();
    if (type == W_READY && pl == sizeof(w_ready) && !w->ready) {
        w_ready r;
        memcpy(&r, p, sizeof r);
        if (s->have_ndocs && r.ndocs != s->ndocs) {
            char why[160];
            snprintf(why, sizeof why, "source '%s' has %u documents at the other workers, %llu here",
                     h->mix->src[w->src].name, s->ndocs, (unsigned long long)r.ndocs);
            w_send(h->sock, id, idn, W_REFUSE, why, strlen(why));
            w->gone = 1;
            return;
        }
        s->ndocs = (uint32_t)r.ndocs, s->have_ndocs = 1, s->skipped = r.skipped;
        if (!(s->spt > 0)) s->spt = r.sec_per_token;
        w->ready = 1, w->fails = 0;
        if (w->pid > 0) s->starting--;
    } else if (type == W_DOC && pl >= sizeof(w_doc) && w->ready) {
        w_doc d;
        memcpy(&d, p, sizeof d);
        if (pl != sizeof d + (size_t)d.n * 4 || d.pos >= s->ndocs || d.n == 0) return;
        uint64_t q = d.epoch * s->ndocs + d.pos;
        hslot *sl = &s->ring[q % RING];
        /* an answer to a request dropped since (the loader's state was set) is stale */
        if (!s->started || q < s->base || q >= s->base + RING || sl->state != 1 || sl->worker != k) return;
        w->outstanding--;
        if (!(sl->tok = malloc((size_t)d.n * 4))) return;
        memcpy(sl->tok, p + sizeof d, (size_t)d.n * 4);
        sl->len = d.n, sl->doc = d.doc, sl->state = 2;
        double spt = (double)d.cpu_ns * 1e-9 / d.n;
        s->spt = s->spt > 0 ? 0.9 * s->spt + 0.1 * spt : spt;
    }
}

/* Sends each source's next unasked documents to its live workers with credit left (fewest
 * outstanding first, so n workers take every n-th document). */
static void grant(ls_loader_hub *h) {
    for (int i = 0; i < h->mix->n_sources; i++) {
        hsrc *s = &h->s[i];
        if (!s->started) continue;
        int live = 0;
        for (int k = 0; k < h->nw; k++) live += !h->w[k].gone && h->w[k].ready && h->w[k].src == i;
        int ahead = live * CREDIT * 2 < RING ? live * CREDIT * 2 : RING;
        uint64_t list[MAX_WORKERS][CREDIT][2];
        int cnt[MAX_WORKERS] = {0};
        for (uint64_t q = s->base; q < s->base + (uint64_t)ahead; q++) {
            hslot *sl = &s->ring[q % RING];
            if (sl->state) continue;
            int best = -1;
            for (int k = 0; k < h->nw; k++) {
                hworker *w = &h->w[k];
                if (w->gone || !w->ready || w->src != i || w->outstanding >= CREDIT) continue;
                if (best < 0 || w->outstanding < h->w[best].outstanding) best = k;
            }
            if (best < 0) break;
            sl->state = 1, sl->worker = best;
            list[best][cnt[best]][0] = q / s->ndocs;
            list[best][cnt[best]][1] = q % s->ndocs;
            cnt[best]++;
            h->w[best].outstanding++;
        }
        for (int k = 0; k < h->nw; k++)
            if (cnt[k]) w_send(h->sock, h->w[k].id, h->w[k].idlen, W_GRANT, list[k], (size_t)cnt[k] * 16);
    }
}

/* Receives for up to ms, then finds dead workers and grants work. */
static void pump(ls_loader_hub *h, int ms) {
    zmq_pollitem_t it = {h->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) > 0)
        for (;;) {
            zmq_msg_t id, body;
            zmq_msg_init(&id);
            zmq_msg_init(&body);
            int ok = zmq_msg_recv(&id, h->sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&id) &&
                     zmq_msg_recv(&body, h->sock, ZMQ_DONTWAIT) >= 0;
            if (ok && zmq_msg_size(&id) <= 255)
                on_message(h, zmq_msg_data(&id), zmq_msg_size(&id), zmq_msg_data(&body), zmq_msg_size(&body));
            zmq_msg_close(&id);
            zmq_msg_close(&body);
            if (!ok) break;
        }
    double now = ls_now();
    for (int k = 0; k < h->nw; k++) {
        hworker *w = &h->w[k];
        if (w->gone) continue;
        if (w->pid > 0 && waitpid(w->pid, NULL, WNOHANG) == w->pid) {
            drop_worker(h, k, "exited", 1);
            continue;
        }
        double since = w->seen > h->resumed ? w->seen : h->resumed;
        if (w->outstanding > 0 && now - since > h->o.timeout_ms * 1e-3) drop_worker(h, k, "stopped answering", 0);
    }
    grant(h);
}

static int live_workers(const ls_loader_hub *h, int i) {
    int n = 0;
    for (int k = 0; k < h->nw; k++) n += !h->w[k].gone && h->w[k].ready && h->w[k].src == i;
    return n;
}

/* Sizes every source's workers: one each, then each spare worker of the budget to the source with
 * the largest weight × seconds per token per worker (about in proportion to that product); starts
 * the missing ones when the hub starts workers. */
static void size_workers(ls_loader_hub *h, const double *wt) {
    int n = h->mix->n_sources, spare = h->budget - n;
    double c[LS_LOADER_MAX_SOURCES], tot = 0;
    for (int i = 0; i < n; i++) tot += c[i] = wt[i] * (h->s[i].spt > 0 ? h->s[i].spt : 0);
    for (int i = 0; i < n; i++) h->s[i].want = 1;
    for (int given = 0; given < spare && tot > 0; given++) {
        /* the source whose cost per worker is highest gets the next one */
        int best = 0;
        for (int i = 1; i < n; i++)
            if (c[i] / h->s[i].want > c[best] / h->s[best].want) best = i;
        h->s[best].want++;
    }
    if (!h->exe) return;
    for (int i = 0; i < n; i++)
        for (int have = live_workers(h, i) + h->s[i].starting; have < h->s[i].want; have++)
            if (spawn(h, i) != LS_OK) return;
}

void ls_hub_plan(ls_loader_hub *h, const double *w) {
    memcpy(h->w_last, w, (size_t)h->mix->n_sources * sizeof *w);
    if (ls_now() - h->last_plan < 1.0) return; /* re-measured costs: at most once a second */
    h->last_plan = ls_now();
    size_workers(h, w);
}

int ls_hub_doc(ls_loader_hub *h, int i, uint64_t epoch, uint64_t pos, uint32_t doc, const int32_t **tok,
               uint32_t *len) {
    hsrc *s = &h->s[i];
    uint64_t q = epoch * s->ndocs + pos;
    if (!s->started || q != s->base) { /* first use, or the loader's state was set: start over there */
        for (int j = 0; j < RING; j++) {
            if (s->ring[j].state == 1 && !h->w[s->ring[j].worker].gone) h->w[s->ring[j].worker].outstanding--;
            free(s->ring[j].tok);
            memset(&s->ring[j], 0, sizeof s->ring[j]);
        }
        for (int k = 0; k < h->nw; k++)
            if (h->w[k].outstanding < 0) h->w[k].outstanding = 0;
        s->base = q, s->started = 1;
    }
    hslot *sl = &s->ring[q % RING];
    h->resumed = ls_now(); /* the hub read nothing while idle: silence before now is not death */
    double alone_since = 0;
    while (sl->state != 2) {
        pump(h, 20);
        if (s->broken && !live_workers(h, i))
            return ls_err(LS_EIO, "source '%s': its workers exit before they are ready (see their messages)",
                          h->mix->src[i].name);
        if (live_workers(h, i) + s->starting > 0) {
            alone_since = 0;
        } else if (alone_since == 0) {
            alone_since = ls_now();
        } else if (ls_now() - alone_since > h->o.wait_ms * 1e-3) {
            return ls_err(LS_ETIMEDOUT,
                          "source '%s': no live worker for %d ms (start one: llmsys loader worker "
                          "--role source --source %s --constructor %s)",
                          h->mix->src[i].name, h->o.wait_ms, h->mix->src[i].name, h->ep);
        }
    }
    if (sl->doc != doc)
        return ls_err(LS_EFORMAT, "source '%s': a worker sent document %u where the order has %u (another seed?)",
                      h->mix->src[i].name, sl->doc, doc);
    *tok = sl->tok;
    *len = sl->len;
    return LS_OK;
}

void ls_hub_consumed(ls_loader_hub *h, int i) {
    hsrc *s = &h->s[i];
    hslot *sl = &s->ring[s->base % RING];
    free(sl->tok);
    memset(sl, 0, sizeof *sl);
    s->base++;
    pump(h, 0);
}

int ls_loader_hub_open(ls_loader_hub **out, const ls_loader_mix *mix, const ls_loader_hub_opts *opts) {
    *out = NULL;
    ls_loader_hub *h = calloc(1, sizeof *h);
    if (!h) return ls_err(LS_ENOMEM, "out of memory");
    h->mix = mix;
    if (opts) h->o = *opts;
    if (h->o.timeout_ms <= 0) h->o.timeout_ms = 3000;
    if (h->o.wait_ms <= 0) h->o.wait_ms = 30000;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    h->budget = h->o.workers > 0 ? h->o.workers : (int)(cpus > 0 ? cpus : 1);
    if (h->budget < mix->n_sources) h->budget = mix->n_sources;
    if (h->budget > MAX_WORKERS / 2) h->budget = MAX_WORKERS / 2;
    const char *bind = h->o.bind ? h->o.bind : "127.0.0.1";
    int rc = (h->s = calloc((size_t)mix->n_sources, sizeof *h->s)) ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK && h->o.exe && !(h->exe = strdup(h->o.exe))) rc = ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK) {
        h->zctx = zmq_ctx_new();
        h->sock = h->zctx ? zmq_socket(h->zctx, ZMQ_ROUTER) : NULL;
        if (!h->sock) rc = ls_err(LS_ENET, "zmq: %s", zmq_strerror(zmq_errno()));
    }
    char last[256];
    if (rc == LS_OK)
        rc = ls_lzmq_bind(h->zctx, h->sock, bind, h->o.port, "loader worker link", &h->port, last, sizeof last);
    if (rc == LS_OK) {
        /* workers started here connect over loopback, with CURVE when the link is bound off it */
        h->curve = ls_zsec_wanted(last);
        unsigned char a[16] = {0}, any[16] = {0};
        int fam = ls_ip_parse(bind, a); /* ls_lzmq_bind took it for an address */
        char host[256];
        if (fam && !memcmp(a, any, (size_t)(fam == 4 ? 4 : 16))) /* a wildcard: its loopback */
            snprintf(host, sizeof host, "%s", fam == 4 ? "127.0.0.1" : "[::1]");
        else
            ls_url_host(bind, host, sizeof host);
        snprintf(h->ep, sizeof h->ep, "tcp://%s:%d", host, h->port);
    }
    for (int i = 0; rc == LS_OK && h->exe && i < mix->n_sources; i++) rc = spawn(h, i);
    /* every source needs a worker that has indexed it (the document counts shape the state) */
    double t0 = ls_now();
    for (int i = 0; rc == LS_OK && i < mix->n_sources; i++) {
        while (!h->s[i].have_ndocs && rc == LS_OK) {
            pump(h, 20);
            if (h->s[i].broken)
                rc = ls_err(LS_EIO, "source '%s': its worker exits before it is ready (see its messages)",
                            mix->src[i].name);
            else if (ls_now() - t0 > h->o.wait_ms * 1e-3)
                rc = ls_err(LS_ETIMEDOUT,
                            "source '%s': no worker within %d ms (start one: llmsys loader worker --role source "
                            "--source %s --constructor %s)",
                            mix->src[i].name, h->o.wait_ms, mix->src[i].name, h->ep);
        }
    }
    if (rc == LS_OK) {
        double w[LS_LOADER_MAX_SOURCES];
        ls_loader_mix_weights_at(mix, 0, w);
        memcpy(h->w_last, w, sizeof w);
        size_workers(h, w); /* from the costs the workers measured at start */
        h->last_plan = ls_now();
    }
    if (rc < 0) {
        ls_loader_hub_close(h);
        return rc;
    }
    *out = h;
    return LS_OK;
}

void ls_loader_hub_close(ls_loader_hub *h) {
    if (!h) return;
    for (int k = 0; h->sock && k < h->nw; k++)
        if (!h->w[k].gone && h->w[k].idlen) w_send(h->sock, h->w[k].id, h->w[k].idlen, W_STOP, NULL, 0);
    /* give the workers we started a moment to leave on their own, then make sure */
    double t0 = ls_now();
    for (int k = 0; k < h->nw; k++) {
        hworker *w = &h->w[k];
        if (w->gone || w->pid <= 0) continue;
        while (waitpid(w->pid, NULL, WNOHANG) == 0) {
            if (ls_now() - t0 > 1.0) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, NULL, 0);
                break;
            }
            ls_sleep_ms(10);
        }
    }
    for (int i = 0; h->s && i < h->mix->n_sources; i++)
        for (int j = 0; j < RING; j++) free(h->s[i].ring[j].tok);
    free(h->s);
    free(h->exe);
    if (h->sock) zmq_close(h->sock);
    if (h->zctx) zmq_ctx_term(h->zctx);
    free(h);
}

int ls_loader_hub_port(const ls_loader_hub *h) { return h->port; }

void ls_loader_hub_source_info(const ls_loader_hub *h, int i, ls_loader_hub_source *out) {
    const hsrc *s = &h->s[i];
    *out = (ls_loader_hub_source){s->ndocs,           s->skipped, s->lost,
                                  live_workers(h, i), s->want,    s->spt > 0 ? 1.0 / s->spt : 0};
}
