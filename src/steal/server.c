/* server.c - the victim's black-box prediction API over HTTP (libmicrohttpd): input
 * validation, a query log, per-client budget and rate limit, and the extraction detectors
 * (PRADA, the query-distribution monitor). */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/httpd.h"
#include "llmsys/core.h"
#include "llmsys/steal.h"

typedef struct {
    char id[160];
    int64_t queries, requests, rejected, budget;
    double tokens, last;
    ls_prada *prada;
    ls_qmon *mon; /* query-distribution monitor (NULL without one) */
} client_t;

struct ls_victim_server {
    const ls_victim *v;
    ls_victim_server_opts o;
    struct MHD_Daemon *mhd;
    int port, d, k, shape[3];
    float lo, hi;
    int raw;              /* inputs in the training data's units, scaled by the victim's scaler */
    float raw_lo, raw_hi; /* the span of the raw feature ranges (raw only) */
    pthread_mutex_t mu;
    ls_victim_key *own_keys; /* read from o.keys_path */
    client_t *clients;
    int nclients, cap;
    FILE *log;
    int64_t total_requests, total_errors;
};

void ls_victim_server_opts_default(ls_victim_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->port = 0;                                     /* any free port */
    o->budget = 0, o->rate_qps = 0, o->burst = 1024; /* no budget, no rate limit */
    o->max_batch = 512, o->max_body = 16u << 20;
    o->prada_mode = LS_PRADA_LOG;
    ls_prada_opts_default(&o->prada);
    o->throttle_s = 0.2;
}

/* Per-connection upload buffer. */
typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
} conn_t;

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, char *text, double retry_after) {
    char ra[32];
    snprintf(ra, sizeof ra, "%d", retry_after > 0 ? (int)ceil(retry_after) : 0);
    enum MHD_Result ret =
        ls_httpd_respond(c, status, "application/json", text, strlen(text), retry_after > 0 ? "Retry-After" : NULL, ra);
    free(text);
    return ret;
}

static enum MHD_Result respond_err(ls_victim_server *s, struct MHD_Connection *c, unsigned status, const char *msg,
                                   double retry_after) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", msg);
    cJSON_AddNumberToObject(j, "status", status);
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    pthread_mutex_lock(&s->mu);
    s->total_errors++;
    pthread_mutex_unlock(&s->mu);
    if (!t) return MHD_NO;
    return respond(c, status, t, retry_after);
}

/* Compares a secret in time independent of where it differs. */
/* Who is asking: the admin key ("admin"), a key of the key file ("key:<name>", with its
 * budget), or without a key file the source address ("addr:<ip>"; X-API-Key is not an
 * identity then, so inventing keys gives no new budget). 0, or 401 for a missing or
 * unknown key when the server has a key file. */
static unsigned client_id(const ls_victim_server *s, struct MHD_Connection *c, char *out, size_t n, int *admin,
                          int64_t *budget) {
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
    *admin = 0;
    *budget = s->o.budget;
    if (key && s->o.admin_key && ls_httpd_secret_eq(key, s->o.admin_key)) {
        *admin = 1;
        snprintf(out, n, "admin");
        return 0;
    }
    if (s->o.n_keys > 0) {
        for (int i = 0; key && i < s->o.n_keys; i++)
            if (ls_httpd_secret_eq(key, s->o.keys[i].secret)) {
                snprintf(out, n, "key:%s", s->o.keys[i].name);
                if (s->o.keys[i].budget > 0) *budget = s->o.keys[i].budget;
                return 0;
            }
        snprintf(out, n, "unauthenticated");
        return 401;
    }
    char addr[64];
    ls_httpd_client_addr(c, addr, sizeof addr);
    snprintf(out, n, "addr:%s", addr);
    return 0;
}

/* Finds or creates a client record; call with the mutex held. NULL when out of memory. */
static client_t *get_client(ls_victim_server *s, const char *id, int64_t budget) {
    for (int i = 0; i < s->nclients; i++)
        if (!strcmp(s->clients[i].id, id)) return &s->clients[i];
    if (s->nclients == s->cap) {
        int nc = s->cap ? s->cap * 2 : 16;
        if (nc > 100000) return NULL;
        client_t *cl = realloc(s->clients, sizeof(client_t) * (size_t)nc);
        if (!cl) return NULL;
        s->clients = cl;
        s->cap = nc;
    }
    client_t *c = &s->clients[s->nclients];
    memset(c, 0, sizeof *c);
    snprintf(c->id, sizeof c->id, "%s", id);
    c->tokens = s->o.burst;
    c->budget = budget;
    c->last = ls_now();
    if (s->o.prada_mode != LS_PRADA_OFF && ls_prada_init(&s->o.prada, s->d, s->k, &c->prada) != LS_OK) return NULL;
    if (s->o.monitor && s->o.monitor_mode != LS_PRADA_OFF && ls_qmon_init(s->o.monitor, &c->mon) != LS_OK) {
        ls_prada_free(c->prada);
        return NULL;
    }
    s->nclients++;
    return c;
}

static void log_line(ls_victim_server *s, const char *id, int n, unsigned status, const client_t *c) {
    if (!s->log) return;
    int64_t fa = -1;
    double w = 1;
    if (c && c->prada) ls_prada_state(c->prada, NULL, &fa, &w);
    fprintf(s->log,
            "{\"t\":%.3f,\"client\":\"%s\",\"n\":%d,\"status\":%u,\"queries\":%lld,\"w\":%.4f,\"flagged_at\":%lld}\n",
            ls_wall_time(), id, n, status, c ? (long long)c->queries : 0LL, w, (long long)fa);
    fflush(s->log);
}

/* The strongest action (ls_prada_mode) of the detectors that flagged client c, LS_PRADA_OFF when none did. */
static int flag_action(const ls_victim_server *s, const client_t *c) {
    int64_t fa = -1;
    int act = LS_PRADA_OFF;
    if (c->prada) ls_prada_state(c->prada, NULL, &fa, NULL);
    if (fa >= 0) act = s->o.prada_mode;
    if (c->mon && ls_qmon_flagged_at(c->mon, 0) >= 0 && s->o.monitor_mode > act) act = s->o.monitor_mode;
    return act;
}

/* Parses and validates {"inputs": [[d numbers], ...]}; fills *x (malloc'd) and *n. On a bad
 * request returns the HTTP status and a message. */
static unsigned parse_inputs(ls_victim_server *s, const char *body, size_t len, float **x, int *n, char *msg,
                             size_t msz) {
    *x = NULL;
    *n = 0;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) {
        snprintf(msg, msz, "malformed JSON body");
        return 400;
    }
    unsigned st = 0;
    cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    if (!cJSON_IsArray(in)) {
        snprintf(msg, msz, "body must be {\"inputs\": [[%d numbers], ...]}", s->d);
        st = 400;
        goto done;
    }
    int m = cJSON_GetArraySize(in);
    if (m < 1) {
        snprintf(msg, msz, "empty batch");
        st = 400;
        goto done;
    }
    if (m > s->o.max_batch) {
        snprintf(msg, msz, "batch of %d inputs exceeds the limit of %d", m, s->o.max_batch);
        st = 413;
        goto done;
    }
    *x = malloc(sizeof(float) * (size_t)m * s->d);
    if (!*x) {
        snprintf(msg, msz, "out of memory");
        st = 503;
        goto done;
    }
    int i = 0;
    const double eps = 1e-4 * (s->hi - s->lo);
    cJSON *row;
    cJSON_ArrayForEach(row, in) {
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != s->d) {
            snprintf(msg, msz, "input %d: expected an array of %d numbers (shape %dx%dx%d), got %s of %d", i, s->d,
                     s->shape[0], s->shape[1], s->shape[2], cJSON_IsArray(row) ? "an array" : "a non-array",
                     cJSON_IsArray(row) ? cJSON_GetArraySize(row) : 0);
            st = 422;
            goto done;
        }
        int jx = 0;
        cJSON *v;
        cJSON_ArrayForEach(v, row) {
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
                snprintf(msg, msz, "input %d, value %d: not a finite number", i, jx);
                st = 422;
                goto done;
            }
            double val = v->valuedouble;
            if (s->raw) {
                /* raw units: the victim's scaler maps and clips them below, as training did */
                (*x)[(size_t)i * s->d + jx++] = (float)val;
                continue;
            }
            if (val < s->lo - eps || val > s->hi + eps) {
                snprintf(msg, msz, "input %d, value %d: %g outside the input range [%g, %g]", i, jx, val, s->lo, s->hi);
                st = 422;
                goto done;
            }
            (*x)[(size_t)i * s->d + jx] = (float)(val < s->lo ? s->lo : val > s->hi ? s->hi : val);
            jx++;
        }
        i++;
    }
    if (s->raw) ls_victim_scale_inputs(s->v, *x, m);
    *n = m;
done:
    cJSON_Delete(j);
    if (st) {
        free(*x);
        *x = NULL;
    }
    return st;
}

/* Appends formatted text to a growing string. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + (size_t)n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

static enum MHD_Result handle_predict(ls_victim_server *s, struct MHD_Connection *c, conn_t *cc) {
    char id[160], msg[256];
    int admin;
    int64_t budget;
    if (client_id(s, c, id, sizeof id, &admin, &budget)) {
        pthread_mutex_lock(&s->mu);
        log_line(s, id, 0, 401, NULL);
        pthread_mutex_unlock(&s->mu);
        return respond_err(s, c, 401, "a valid X-API-Key is required (this server takes listed keys only)", 0);
    }
    if (cc->too_big) {
        snprintf(msg, sizeof msg, "request body exceeds %zu bytes", s->o.max_body);
        pthread_mutex_lock(&s->mu);
        log_line(s, id, 0, 413, NULL);
        pthread_mutex_unlock(&s->mu);
        return respond_err(s, c, 413, msg, 0);
    }
    float *x;
    int n;
    unsigned st = parse_inputs(s, cc->body ? cc->body : "", cc->len, &x, &n, msg, sizeof msg);
    if (st) {
        pthread_mutex_lock(&s->mu);
        log_line(s, id, 0, st, NULL);
        pthread_mutex_unlock(&s->mu);
        return respond_err(s, c, st, msg, 0);
    }
    /* Admission: refusal after a PRADA flag, budget, then the token bucket. */
    pthread_mutex_lock(&s->mu);
    s->total_requests++;
    client_t *cl = get_client(s, id, budget);
    if (!cl) {
        pthread_mutex_unlock(&s->mu);
        free(x);
        return respond_err(s, c, 503, "server out of client slots or memory", 1);
    }
    cl->requests++;
    int act = flag_action(s, cl), flagged = act != LS_PRADA_OFF;
    unsigned deny = 0;
    double retry = 0;
    if (!admin && act == LS_PRADA_REFUSE) {
        deny = 403;
        snprintf(msg, sizeof msg, "refused: this client's query pattern was flagged as model extraction");
    } else if (!admin && cl->budget > 0 && cl->queries + n > cl->budget) {
        deny = 403;
        snprintf(msg, sizeof msg, "query budget exhausted: %lld of %lld used, request has %d", (long long)cl->queries,
                 (long long)cl->budget, n);
    } else if (!admin && (s->o.rate_qps > 0 || act == LS_PRADA_THROTTLE)) {
        /* A flagged client under THROTTLE refills at a tenth of the rate (or 1/throttle_s). */
        double rate = s->o.rate_qps > 0 ? s->o.rate_qps : 1e18;
        if (act == LS_PRADA_THROTTLE) {
            double slow = s->o.throttle_s > 0 ? 1.0 / s->o.throttle_s : 5.0;
            rate = rate / 10 < slow ? rate / 10 : slow;
        }
        double now = ls_now();
        double burst = s->o.burst > n ? s->o.burst : n;
        cl->tokens += (now - cl->last) * rate;
        if (cl->tokens > burst) cl->tokens = burst;
        cl->last = now;
        if (cl->tokens < n) {
            deny = 429;
            retry = (n - cl->tokens) / rate;
            snprintf(msg, sizeof msg, "rate limit: %.0f inputs/s%s; retry after %.2f s", rate,
                     flagged ? " (throttled: flagged as extraction)" : "", retry);
        } else {
            cl->tokens -= n;
        }
    }
    if (deny) {
        cl->rejected++;
        log_line(s, id, n, deny, cl);
        pthread_mutex_unlock(&s->mu);
        free(x);
        return respond_err(s, c, deny, msg, retry);
    }
    cl->queries += n;
    pthread_mutex_unlock(&s->mu);

    float *proba = malloc(sizeof(float) * (size_t)n * s->k);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
    if (!proba || !lab || ls_victim_predict_proba(s->v, x, n, proba) != LS_OK) {
        free(proba);
        free(lab);
        free(x);
        return respond_err(s, c, 500, "prediction failed", 0);
    }
    for (int i = 0; i < n; i++) {
        int b = 0;
        for (int j = 1; j < s->k; j++)
            if (proba[i * s->k + j] > proba[i * s->k + b]) b = j;
        lab[i] = b;
    }
    pthread_mutex_lock(&s->mu);
    int was_flagged = flagged, mon_was = cl->mon && ls_qmon_flagged_at(cl->mon, 0) >= 0;
    if (cl->prada && !admin) flagged = ls_prada_observe(cl->prada, x, lab, n) > 0;
    if (cl->mon && !admin && ls_qmon_observe(cl->mon, x, n) > 0 && !mon_was) {
        double z;
        ls_qmon_state(cl->mon, NULL, NULL, &z, NULL);
        LS_INFO("victim serve: client %s flagged by the query monitor after %lld queries (z=%.1f, mode %s)", id,
                (long long)cl->queries, z, ls_prada_mode_name(s->o.monitor_mode));
    }
    act = flag_action(s, cl);
    log_line(s, id, n, 200, cl);
    if (act == LS_PRADA_THROTTLE && !was_flagged) {
        /* Throttling starts now: the bucket is emptied, then refills at the slow rate. */
        cl->tokens = 0;
        cl->last = ls_now();
    }
    if (flagged && !was_flagged && cl->prada) {
        int64_t fa;
        double w;
        ls_prada_state(cl->prada, NULL, &fa, &w);
        LS_INFO("victim serve: client %s flagged by PRADA after %lld queries (W=%.4f, mode %s)", id, (long long)fa, w,
                ls_prada_mode_name(s->o.prada_mode));
    }
    pthread_mutex_unlock(&s->mu);
    free(x);

    sbuf b = {0};
    sb_printf(&b, "{\"labels\":[");
    for (int i = 0; i < n; i++) sb_printf(&b, "%s%d", i ? "," : "", lab[i]);
    sb_printf(&b, "]");
    if (s->o.output_proba) {
        sb_printf(&b, ",\"probs\":[");
        for (int i = 0; i < n; i++) {
            sb_printf(&b, "%s[", i ? "," : "");
            for (int j = 0; j < s->k; j++) sb_printf(&b, "%s%.6g", j ? "," : "", proba[i * s->k + j]);
            sb_printf(&b, "]");
        }
        sb_printf(&b, "]");
    }
    sb_printf(&b, "}");
    free(proba);
    free(lab);
    if (b.oom) {
        free(b.p);
        return respond_err(s, c, 500, "out of memory", 0);
    }
    return respond(c, 200, b.p, 0);
}

struct cJSON *ls_victim_server_stats(ls_victim_server *s) {
    cJSON *j = cJSON_CreateObject();
    pthread_mutex_lock(&s->mu);
    cJSON_AddNumberToObject(j, "requests", (double)s->total_requests);
    cJSON_AddNumberToObject(j, "errors", (double)s->total_errors);
    cJSON_AddStringToObject(j, "prada_mode", ls_prada_mode_name(s->o.prada_mode));
    cJSON_AddNumberToObject(j, "prada_delta", s->o.prada.delta);
    if (s->o.monitor) cJSON_AddStringToObject(j, "monitor_mode", ls_prada_mode_name(s->o.monitor_mode));
    cJSON *arr = cJSON_AddArrayToObject(j, "clients");
    for (int i = 0; i < s->nclients; i++) {
        client_t *c = &s->clients[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "client", c->id);
        cJSON_AddNumberToObject(o, "queries", (double)c->queries);
        cJSON_AddNumberToObject(o, "requests", (double)c->requests);
        cJSON_AddNumberToObject(o, "rejected", (double)c->rejected);
        if (c->budget > 0) cJSON_AddNumberToObject(o, "budget_left", (double)(c->budget - c->queries));
        if (c->prada) {
            int64_t fa;
            double w;
            ls_prada_state(c->prada, NULL, &fa, &w);
            cJSON_AddNumberToObject(o, "prada_w", w);
            cJSON_AddNumberToObject(o, "prada_min_w", ls_prada_min_w(c->prada));
            cJSON_AddNumberToObject(o, "flagged_at", (double)fa);
        }
        if (c->mon) {
            int64_t outl;
            double z, mz;
            ls_qmon_state(c->mon, NULL, &outl, &z, &mz);
            cJSON_AddNumberToObject(o, "monitor_outliers", (double)outl);
            cJSON_AddNumberToObject(o, "monitor_z", z);
            cJSON_AddNumberToObject(o, "monitor_max_z", mz);
            cJSON_AddNumberToObject(o, "monitor_flagged_at", (double)ls_qmon_flagged_at(c->mon, 0));
        }
        cJSON_AddItemToArray(arr, o);
    }
    pthread_mutex_unlock(&s->mu);
    return j;
}

/* GET /info: what the API takes (shape, range, units) and answers. */
static char *info_json(const ls_victim_server *s) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "input_shape", cJSON_CreateIntArray(s->shape, 3));
    float r[2] = {s->raw ? s->raw_lo : s->lo, s->raw ? s->raw_hi : s->hi};
    cJSON_AddItemToObject(j, "input_range", cJSON_CreateFloatArray(r, 2));
    cJSON_AddNumberToObject(j, "classes", s->k);
    cJSON_AddStringToObject(j, "output", s->o.output_proba ? "proba" : "label");
    cJSON_AddStringToObject(j, "units", s->raw ? "raw" : "model");
    const float *mn, *mx;
    ls_victim_scaler(s->v, &mn, &mx);
    if (mn && mx) {
        cJSON_AddItemToObject(j, "feature_min", cJSON_CreateFloatArray(mn, s->d));
        cJSON_AddItemToObject(j, "feature_max", cJSON_CreateFloatArray(mx, s->d));
        float mr[2] = {s->lo, s->hi};
        cJSON_AddItemToObject(j, "model_range", cJSON_CreateFloatArray(mr, 2));
    }
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return t;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ls_victim_server *s = cls;
    conn_t *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_big) {
            if (cc->len + *upload_size > s->o.max_body) {
                cc->too_big = 1;
            } else {
                if (cc->len + *upload_size + 1 > cc->cap) {
                    size_t nc = cc->cap ? cc->cap : 65536;
                    while (nc < cc->len + *upload_size + 1) nc *= 2;
                    char *nb = realloc(cc->body, nc);
                    if (!nb) return MHD_NO;
                    cc->body = nb;
                    cc->cap = nc;
                }
                memcpy(cc->body + cc->len, upload, *upload_size);
                cc->len += *upload_size;
                cc->body[cc->len] = '\0';
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/predict")) {
        if (strcmp(method, "POST")) return respond_err(s, c, 405, "use POST /predict", 0);
        return handle_predict(s, c, cc);
    }
    if (!strcmp(url, "/info") && !strcmp(method, "GET")) {
        char *t = info_json(s);
        if (!t) return MHD_NO;
        return respond(c, 200, t, 0);
    }
    if (!strcmp(url, "/stats") && !strcmp(method, "GET")) {
        const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
        if (!key || !s->o.admin_key || !ls_httpd_secret_eq(key, s->o.admin_key))
            return respond_err(s, c, 401, "GET /stats needs the admin key in X-API-Key (--admin-key)", 0);
        cJSON *j = ls_victim_server_stats(s);
        char *t = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!t) return MHD_NO;
        return respond(c, 200, t, 0);
    }
    return respond_err(s, c, 404, "unknown endpoint (POST /predict, GET /info, GET /stats)", 0);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_t *cc = *con_cls;
    if (cc) {
        free(cc->body);
        free(cc);
        *con_cls = NULL;
    }
}

int ls_victim_server_opts_check(const ls_victim_server_opts *o) {
    if (o->port < 0 || o->port > 65535) return ls_err(LS_EINVAL, "--port must be in [0, 65535], got %d", o->port);
    if (o->max_batch < 1) return ls_err(LS_EINVAL, "--max-batch must be >= 1, got %d", o->max_batch);
    if (!(o->prada.delta > 0 && o->prada.delta < 1))
        return ls_err(LS_EINVAL, "--prada-delta must be in (0, 1), got %g", o->prada.delta);
    if (!(o->burst >= 1)) return ls_err(LS_EINVAL, "--burst must be >= 1 input, got %g", o->burst);
    if (!(o->throttle_s >= 0)) return ls_err(LS_EINVAL, "--throttle must be >= 0 s, got %g", o->throttle_s);
    if (o->admin_key && !*o->admin_key) /* an empty X-API-Key header would be the admin */
        return ls_err(LS_EINVAL, "--admin-key must not be empty");
    return LS_OK;
}

int ls_victim_server_start(const ls_victim *v, const ls_victim_server_opts *o, ls_victim_server **out) {
    *out = NULL;
    LS_TRY(ls_victim_server_opts_check(o));
    if (o->monitor) {
        int vd, vk, sh[3];
        float vlo, vhi;
        ls_victim_info(v, &vd, &vk, &vlo, &vhi, sh);
        if (ls_qmon_ref_dim(o->monitor) != vd)
            return ls_err(LS_EINVAL, "victim serve: the query monitor's profile has %d features, the victim %d",
                          ls_qmon_ref_dim(o->monitor), vd);
    }
    ls_victim_server *s = calloc(1, sizeof *s);
    if (!s) return ls_err(LS_ENOMEM, "victim serve: out of memory");
    s->v = v;
    s->o = *o;
    ls_victim_info(v, &s->d, &s->k, &s->lo, &s->hi, s->shape);
    const float *mn, *mx;
    ls_victim_scaler(v, &mn, &mx);
    if (mn && mx && !o->model_units) {
        s->raw = 1;
        s->raw_lo = mn[0], s->raw_hi = mx[0];
        for (int j = 1; j < s->d; j++) {
            if (mn[j] < s->raw_lo) s->raw_lo = mn[j];
            if (mx[j] > s->raw_hi) s->raw_hi = mx[j];
        }
    }
    if (o->keys_path) {
        int rc = ls_victim_keys_read(o->keys_path, &s->own_keys, &s->o.n_keys);
        if (rc) {
            free(s);
            return rc;
        }
        s->o.keys = s->own_keys;
    }
    if (pthread_mutex_init(&s->mu, NULL)) {
        free(s->own_keys);
        free(s);
        return ls_err(LS_ESTATE, "victim serve: mutex init failed");
    }
    if (o->log_path) {
        s->log = fopen(o->log_path, "a");
        if (!s->log) {
            pthread_mutex_destroy(&s->mu);
            free(s->own_keys);
            free(s);
            return ls_err(LS_EIO, "%s: cannot open query log", o->log_path);
        }
    }
    /* one epoll thread: idle or slow clients cost a descriptor each, and are dropped after 15 s */
    ls_httpd_opts ho = {.what = "victim serve",
                        .bind = o->bind,
                        .port = o->port,
                        .max_conns = o->max_conns,
                        .max_per_ip = o->max_conns_per_ip,
                        .timeout_s = 15,
                        .handler = handler,
                        .cls = s,
                        .completed = completed,
                        .completed_cls = s,
                        .authenticated = s->o.n_keys > 0,
                        .auth_hint = "--keys FILE (only listed API keys may query)"};
    int rc = ls_httpd_start(&ho, &s->mhd, &s->port);
    if (rc) {
        if (s->log) fclose(s->log);
        pthread_mutex_destroy(&s->mu);
        free(s->own_keys);
        free(s);
        return rc;
    }
    *out = s;
    return LS_OK;
}

int ls_victim_server_port(const ls_victim_server *s) { return s->port; }

int ls_victim_server_input_range(const ls_victim_server *s, float *lo, float *hi) {
    *lo = s->raw ? s->raw_lo : s->lo;
    *hi = s->raw ? s->raw_hi : s->hi;
    return s->raw;
}

int ls_victim_server_client(ls_victim_server *s, const char *client, int64_t *queries, int64_t *flagged_at,
                            double *min_w) {
    int rc = LS_ENOTFOUND;
    pthread_mutex_lock(&s->mu);
    if (queries) *queries = -1;
    if (flagged_at) *flagged_at = -1;
    if (min_w) *min_w = -1;
    for (int i = 0; i < s->nclients; i++) {
        if (strcmp(s->clients[i].id, client)) continue;
        if (queries) *queries = s->clients[i].queries;
        if (s->clients[i].prada) {
            ls_prada_state(s->clients[i].prada, NULL, flagged_at, NULL);
            if (min_w) *min_w = ls_prada_min_w(s->clients[i].prada);
        }
        rc = LS_OK;
    }
    pthread_mutex_unlock(&s->mu);
    return rc == LS_OK ? LS_OK : ls_err(rc, "victim serve: no client '%s'", client);
}

int ls_victim_server_monitor(ls_victim_server *s, const char *client, double z, int64_t *flagged_at, double *max_z) {
    int rc = LS_ENOTFOUND;
    pthread_mutex_lock(&s->mu);
    if (flagged_at) *flagged_at = -1;
    if (max_z) *max_z = 0;
    for (int i = 0; i < s->nclients; i++) {
        if (strcmp(s->clients[i].id, client)) continue;
        if (s->clients[i].mon) {
            if (flagged_at) *flagged_at = ls_qmon_flagged_at(s->clients[i].mon, z);
            if (max_z) ls_qmon_state(s->clients[i].mon, NULL, NULL, NULL, max_z);
        }
        rc = LS_OK;
    }
    pthread_mutex_unlock(&s->mu);
    return rc == LS_OK ? LS_OK : ls_err(rc, "victim serve: no client '%s'", client);
}

void ls_victim_server_stop(ls_victim_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->mhd);
    for (int i = 0; i < s->nclients; i++) {
        ls_prada_free(s->clients[i].prada);
        ls_qmon_free(s->clients[i].mon);
    }
    free(s->clients);
    free(s->own_keys);
    if (s->log) fclose(s->log);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int ls_victim_keys_read(const char *path, ls_victim_key **keys, int *n) {
    *keys = NULL;
    *n = 0;
    char *text;
    size_t len;
    int rc = ls_file_read(path, &text, &len);
    if (rc) return rc;
    ls_victim_key *k = NULL;
    int cap = 0, cnt = 0, line = 0;
    for (char *p = text, *eol; p && *p; p = eol ? eol + 1 : NULL) {
        eol = strchr(p, '\n');
        if (eol) *eol = '\0';
        line++;
        char *hash = strchr(p, '#');
        if (hash) *hash = '\0';
        char name[256], secret[256], budget[64], extra[8];
        int f = sscanf(p, "%255s %255s %63s %7s", name, secret, budget, extra);
        if (f <= 0) continue;
        char *end = NULL;
        long long b = f >= 3 ? strtoll(budget, &end, 10) : 0;
        if (f < 2 || f > 3 || (f == 3 && (*end || b < 1)) || strlen(name) >= sizeof k->name ||
            strlen(secret) >= sizeof k->secret || strlen(secret) < 8) {
            rc = ls_err(LS_EFORMAT,
                        "%s:%d: expected \"NAME SECRET [BUDGET]\" (name < 64 chars, secret 8..127 chars, budget >= 1)",
                        path, line);
            break;
        }
        for (int i = 0; i < cnt && !rc; i++)
            if (!strcmp(k[i].name, name) || !strcmp(k[i].secret, secret))
                rc = ls_err(LS_EFORMAT, "%s:%d: key name or secret repeats line of key '%s'", path, line, k[i].name);
        if (rc) break;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            ls_victim_key *nk = cnt < 100000 ? realloc(k, sizeof *k * (size_t)cap) : NULL;
            if (!nk) {
                rc = ls_err(LS_ENOMEM, "%s: too many keys or out of memory", path);
                break;
            }
            k = nk;
        }
        memset(&k[cnt], 0, sizeof *k);
        memcpy(k[cnt].name, name, strlen(name) + 1); /* lengths checked above */
        memcpy(k[cnt].secret, secret, strlen(secret) + 1);
        k[cnt].budget = b;
        cnt++;
    }
    free(text);
    if (!rc && cnt == 0) rc = ls_err(LS_EFORMAT, "%s: no keys (one per line: NAME SECRET [BUDGET])", path);
    if (rc) {
        free(k);
        return rc;
    }
    *keys = k;
    *n = cnt;
    return LS_OK;
}
