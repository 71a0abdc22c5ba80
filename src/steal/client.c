/* client.c - the attacker's HTTP/1.1 client over plain sockets: one request per connection,
 * bounded timeouts, strict checks of the victim's answers (status, JSON, class count). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

#define MAX_REPLY (64u << 20)

struct ls_steal_client {
    char host[300], port[16], path[512];
    char key[256];
    double timeout;
    int d, k;
    int64_t requests, inputs;
    double max_wait; /* total seconds we accept to wait on 429 Retry-After */
};

int ls_steal_client_init(const char *url, const char *api_key, double timeout_s, int d, int k, ls_steal_client **out) {
    *out = NULL;
    if (strncmp(url, "http://", 7)) return ls_err(LS_EINVAL, "target '%s': only http://host:port/path URLs", url);
    ls_steal_client *c = calloc(1, sizeof *c);
    if (!c) return ls_err(LS_ENOMEM, "client: out of memory");
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    char hostport[300];
    if (hl == 0 || hl >= sizeof hostport) {
        free(c);
        return ls_err(LS_EINVAL, "target '%s': bad host", url);
    }
    memcpy(hostport, h, hl);
    hostport[hl] = '\0';
    char *colon = strrchr(hostport, ':');
    if (colon) {
        *colon = '\0';
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p <= 0 || p > 65535) {
            free(c);
            return ls_err(LS_EINVAL, "target '%s': bad port", url);
        }
        snprintf(c->port, sizeof c->port, "%ld", p);
    } else {
        snprintf(c->port, sizeof c->port, "80");
    }
    snprintf(c->host, sizeof c->host, "%s", hostport);
    snprintf(c->path, sizeof c->path, "%s", slash && slash[1] ? slash : "/predict");
    if (api_key) snprintf(c->key, sizeof c->key, "%s", api_key);
    c->timeout = timeout_s > 0 ? timeout_s : 30;
    c->d = d;
    c->k = k;
    c->max_wait = 120;
    *out = c;
    return LS_OK;
}

void ls_steal_client_free(ls_steal_client *c) { free(c); }

void ls_steal_client_counts(const ls_steal_client *c, int64_t *requests, int64_t *inputs) {
    if (requests) *requests = c->requests;
    if (inputs) *inputs = c->inputs;
}

static int connect_to(ls_steal_client *c, int *fd_out) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(c->host, c->port, &hints, &res);
    if (g) return ls_err(LS_ENET, "target %s:%s: cannot resolve (%s)", c->host, c->port, gai_strerror(g));
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int fl = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            r = poll(&pf, 1, (int)(c->timeout * 1000));
            if (r == 1) {
                socklen_t sl = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
                r = err ? -1 : 0;
            } else {
                err = r == 0 ? ETIMEDOUT : errno;
                r = -1;
            }
        } else if (r < 0) {
            err = errno;
        }
        if (r == 0) {
            fcntl(fd, F_SETFL, fl);
            struct timeval tv = {(time_t)c->timeout, (suseconds_t)((c->timeout - floor(c->timeout)) * 1e6)};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ls_err(err == ETIMEDOUT ? LS_ETIMEDOUT : LS_ENET, "target %s:%s unreachable (%s)", c->host, c->port,
                      strerror(err ? err : ECONNREFUSED));
    *fd_out = fd;
    return LS_OK;
}

/* One HTTP exchange; *reply (malloc'd, NUL-terminated body), *status, *retry_after. */
static int exchange(ls_steal_client *c, const char *method, const char *path, const char *body, size_t blen,
                    int *status, char **reply, double *retry_after) {
    *reply = NULL;
    *retry_after = 0;
    int fd = -1;
    LS_TRY(connect_to(c, &fd));
    char head[1024];
    int hn =
        snprintf(head, sizeof head,
                 "%s %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                 "%s%s%sConnection: close\r\n\r\n",
                 method, path, c->host, c->port, blen, c->key[0] ? "X-API-Key: " : "", c->key, c->key[0] ? "\r\n" : "");
    const char *parts[2] = {head, body};
    size_t lens[2] = {(size_t)hn, blen};
    for (int p = 0; p < 2; p++) {
        size_t off = 0;
        while (off < lens[p]) {
            ssize_t w = send(fd, parts[p] + off, lens[p] - off, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR) continue;
                int e = errno;
                close(fd);
                return ls_err(e == EAGAIN ? LS_ETIMEDOUT : LS_ENET, "target %s:%s: send failed (%s)", c->host, c->port,
                              e == EAGAIN ? "timed out" : strerror(e));
            }
            off += (size_t)w;
        }
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return ls_err(LS_ENOMEM, "client: out of memory");
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= MAX_REPLY) {
                free(buf);
                close(fd);
                return ls_err(LS_EFORMAT, "target %s:%s: reply larger than %u bytes", c->host, c->port, MAX_REPLY);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                close(fd);
                return ls_err(LS_ENOMEM, "client: out of memory");
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            close(fd);
            return ls_err(e == EAGAIN || e == EWOULDBLOCK ? LS_ETIMEDOUT : LS_ENET, "target %s:%s: %s", c->host,
                          c->port, e == EAGAIN || e == EWOULDBLOCK ? "no reply within the timeout" : strerror(e));
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    int maj, min, st;
    if (sscanf(buf, "HTTP/%d.%d %d", &maj, &min, &st) != 3) {
        free(buf);
        return ls_err(LS_EFORMAT, "target %s:%s: not an HTTP reply", c->host, c->port);
    }
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep) {
        free(buf);
        return ls_err(LS_EFORMAT, "target %s:%s: truncated HTTP reply", c->host, c->port);
    }
    *sep = '\0';
    for (char *h = strstr(buf, "\r\n"); h; h = strstr(h + 2, "\r\n"))
        if (!strncasecmp(h + 2, "Retry-After:", 12)) *retry_after = atof(h + 14);
    char *hdrs = buf;
    size_t blen2 = len - (size_t)(sep + 4 - buf);
    int chunked = strcasestr(hdrs, "Transfer-Encoding: chunked") != NULL;
    char *out = malloc(blen2 + 1);
    if (!out) {
        free(buf);
        return ls_err(LS_ENOMEM, "client: out of memory");
    }
    if (chunked) {
        /* Decode chunked transfer encoding. */
        const char *p = sep + 4, *end = buf + len;
        size_t ol = 0;
        while (p < end) {
            char *e;
            unsigned long n = strtoul(p, &e, 16);
            const char *crlf = strstr(p, "\r\n");
            if (!crlf || e == p) break;
            p = crlf + 2;
            if (n == 0 || p + n > end) break;
            memcpy(out + ol, p, n);
            ol += n;
            p += n + 2;
        }
        out[ol] = '\0';
    } else {
        memcpy(out, sep + 4, blen2);
        out[blen2] = '\0';
    }
    free(buf);
    *status = st;
    *reply = out;
    return LS_OK;
}

int ls_steal_client_get(ls_steal_client *c, const char *path, int *status, char **body) {
    double ra;
    return exchange(c, "GET", path, "", 0, status, body, &ra);
}

int ls_steal_client_query(ls_steal_client *c, const float *x, int n, int32_t *labels, float *proba, int *got_proba) {
    if (got_proba) *got_proba = 0;
    if (n <= 0) return LS_OK;
    /* Request body: {"inputs":[[...],...]} with 6 significant digits. */
    size_t cap = (size_t)n * c->d * 14 + 64, len = 0;
    char *body = malloc(cap);
    if (!body) return ls_err(LS_ENOMEM, "client: out of memory");
    len += (size_t)snprintf(body, cap, "{\"inputs\":[");
    for (int i = 0; i < n; i++) {
        body[len++] = i ? ',' : '[';
        if (i) body[len++] = '[';
        for (int j = 0; j < c->d; j++) {
            float v = x[(size_t)i * c->d + j];
            if (v == 0.0f) {
                if (j) body[len++] = ',';
                body[len++] = '0';
            } else {
                len += (size_t)snprintf(body + len, cap - len, "%s%.6g", j ? "," : "", v);
            }
        }
        body[len++] = ']';
    }
    len += (size_t)snprintf(body + len, cap - len, "]}");
    int status = 0, rc;
    char *reply = NULL;
    double waited = 0;
    for (;;) {
        double ra;
        rc = exchange(c, "POST", c->path, body, len, &status, &reply, &ra);
        if (rc) break;
        c->requests++;
        if (status == 429 && waited < c->max_wait) {
            /* Rate limited: honour Retry-After (bounded) and try again. */
            double w = ra > 0 ? ra : 1;
            if (w > 10) w = 10;
            free(reply);
            reply = NULL;
            ls_sleep_ms((int)(w * 1000));
            waited += w;
            continue;
        }
        break;
    }
    free(body);
    if (rc) return rc;
    cJSON *j = cJSON_Parse(reply);
    if (status != 200) {
        const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
        rc = ls_err(status == 403 || status == 429 ? LS_EBUSY : LS_EPEER, "target answered HTTP %d: %s", status,
                    cJSON_IsString(e) ? e->valuestring : "(no JSON error message)");
        cJSON_Delete(j);
        free(reply);
        return rc;
    }
    if (!j) {
        rc = ls_err(LS_EFORMAT, "target answered with non-JSON (%.40s...)", reply);
        free(reply);
        return rc;
    }
    free(reply);
    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(j, "labels");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "probs");
    if (!cJSON_IsArray(lab) || cJSON_GetArraySize(lab) != n) {
        cJSON_Delete(j);
        return ls_err(LS_EFORMAT, "target reply lacks \"labels\" for %d inputs", n);
    }
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, lab) {
        if (!cJSON_IsNumber(v) || v->valueint < 0 || v->valueint >= c->k) {
            double bad = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
            cJSON_Delete(j);
            return ls_err(LS_EFORMAT, "target returned label %g, outside the %d declared classes", bad, c->k);
        }
        labels[i++] = v->valueint;
    }
    if (cJSON_IsArray(pr)) {
        if (cJSON_GetArraySize(pr) != n) {
            cJSON_Delete(j);
            return ls_err(LS_EFORMAT, "target returned %d probability rows for %d inputs", cJSON_GetArraySize(pr), n);
        }
        i = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, pr) {
            if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != c->k) {
                int got = cJSON_IsArray(row) ? cJSON_GetArraySize(row) : -1;
                cJSON_Delete(j);
                return ls_err(LS_EFORMAT, "target returned %d class probabilities, expected %d classes", got, c->k);
            }
            int jx = 0;
            cJSON_ArrayForEach(v, row) {
                double pv = cJSON_IsNumber(v) ? v->valuedouble : NAN;
                if (!(pv >= 0 && pv <= 1.0001)) {
                    cJSON_Delete(j);
                    return ls_err(LS_EFORMAT, "target returned an invalid probability");
                }
                if (proba) proba[(size_t)i * c->k + jx] = (float)pv;
                jx++;
            }
            i++;
        }
        if (got_proba && proba) *got_proba = 1;
    }
    cJSON_Delete(j);
    c->inputs += n;
    return LS_OK;
}

static int oracle_query(void *ctx, const float *x, int n, int32_t *labels, float *proba, int *got_proba) {
    return ls_steal_client_query(ctx, x, n, labels, proba, got_proba);
}

ls_steal_oracle ls_steal_client_oracle(ls_steal_client *c) {
    ls_steal_oracle o = {c, oracle_query};
    return o;
}
