/* httpc.c - a minimal blocking HTTP/1.1 client (Connection: close) for the demo,
 * benchmarks and tests; reads the whole response, de-chunking SSE streams. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "llmsys/serve.h"

/* Removes chunked transfer framing in place; returns the new length. */
static size_t dechunk(char *b, size_t n) {
    size_t r = 0, w = 0;
    while (r < n) {
        char *end;
        unsigned long sz = strtoul(b + r, &end, 16);
        char *nl = memchr(b + r, '\n', n - r);
        if (!nl || end == b + r) break;
        r = (size_t)(nl - b) + 1;
        if (sz == 0 || r + sz > n) break;
        memmove(b + w, b + r, sz);
        w += sz;
        r += sz + 2;
    }
    return w;
}

int ls_http_request(const char *host, int port, const char *method, const char *path, const char *body,
                    double timeout_s, int *status, char **resp) {
    *resp = NULL;
    *status = 0;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return ls_err(LS_EINVAL, "http: bad IPv4 address '%s'", host);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return ls_err(LS_ENET, "http: socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        return ls_err(LS_ENET, "http: connect %s:%d: %s", host, port, strerror(e));
    }
    size_t blen = body ? strlen(body) : 0;
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr,
                      "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      method, path, host, port, blen);
    int rc = LS_OK;
    const char *parts[2] = {hdr, body};
    size_t lens[2] = {(size_t)hl, blen};
    for (int k = 0; k < 2 && rc == LS_OK; k++)
        for (size_t off = 0; off < lens[k];) {
            ssize_t w = send(fd, parts[k] + off, lens[k] - off, MSG_NOSIGNAL);
            if (w <= 0) {
                /* the server may answer (413) and close before reading everything */
                break;
            }
            off += (size_t)w;
        }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    double deadline = ls_now() + timeout_s;
    while (rc == LS_OK && buf) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int left = (int)((deadline - ls_now()) * 1000);
        if (left <= 0) { rc = ls_err(LS_ETIMEDOUT, "http: %s %s: no complete answer within %.0f s", method, path, timeout_s); break; }
        int pr = poll(&pfd, 1, left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue;
        if (n + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (!buf) return ls_err(LS_ENOMEM, "http: out of memory");
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (n < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || !sep) {
        free(buf);
        return ls_err(LS_ENET, "http: %s %s: malformed or empty response (%zu bytes)", method, path, n);
    }
    *status = atoi(buf + 9);
    *sep = '\0';
    int chunked = strcasestr(buf, "transfer-encoding: chunked") != NULL;
    char *b = sep + 4;
    size_t bl = n - (size_t)(b - buf);
    if (chunked) bl = dechunk(b, bl);
    memmove(buf, b, bl);
    buf[bl] = '\0';
    *resp = buf;
    return LS_OK;
}

/* ---------------------------------------------------------------- load generator */

typedef struct {
    const char *host;
    int port, max_tokens, id, n_req;
    const char *const *prompts;
    int n_prompts;
    int ok, tokens;
    double lat_sum, tpot_sum;
    int tpot_n;
    char err[256];
} load_worker;

static void *load_main(void *arg) {
    load_worker *w = arg;
    for (int k = 0; k < w->n_req; k++) {
        const char *p = w->prompts[(w->id + k) % w->n_prompts];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "prompt", p);
        cJSON_AddNumberToObject(j, "max_tokens", w->max_tokens);
        cJSON_AddNumberToObject(j, "temperature", 0);
        char *body = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        int st = 0;
        char *resp = NULL;
        double t0 = ls_now();
        int rc = body ? ls_http_request(w->host, w->port, "POST", "/v1/completions", body, 120.0, &st, &resp) : LS_ENOMEM;
        double dt = ls_now() - t0;
        free(body);
        cJSON *r = rc == LS_OK && st == 200 ? cJSON_Parse(resp) : NULL;
        cJSON *u = r ? cJSON_GetObjectItem(r, "usage") : NULL;
        cJSON *ct = u ? cJSON_GetObjectItem(u, "completion_tokens") : NULL;
        if (cJSON_IsNumber(ct)) {
            w->ok++;
            w->tokens += ct->valueint;
            w->lat_sum += dt;
            if (ct->valueint > 0) {
                w->tpot_sum += dt / ct->valueint;
                w->tpot_n++;
            }
        } else if (!w->err[0]) {
            snprintf(w->err, sizeof w->err, "status %d: %.200s", st, rc == LS_OK ? (resp ? resp : "") : ls_errmsg());
        }
        cJSON_Delete(r);
        free(resp);
    }
    return NULL;
}

int ls_http_load(const char *host, int port, const char *const *prompts, int n_prompts, int concurrency, int n_requests,
                 int max_tokens, ls_load_result *res) {
    memset(res, 0, sizeof *res);
    if (concurrency < 1 || n_requests < concurrency || n_prompts < 1)
        return ls_err(LS_EINVAL, "load: need 1 <= concurrency <= requests and prompts");
    load_worker *w = calloc((size_t)concurrency, sizeof *w);
    pthread_t *th = calloc((size_t)concurrency, sizeof *th);
    if (!w || !th) {
        free(w), free(th);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    double t0 = ls_now();
    for (int i = 0; i < concurrency; i++) {
        w[i] = (load_worker){.host = host, .port = port, .max_tokens = max_tokens, .id = i, .prompts = prompts,
                             .n_prompts = n_prompts, .n_req = n_requests / concurrency + (i < n_requests % concurrency)};
        pthread_create(&th[i], NULL, load_main, &w[i]);
    }
    for (int i = 0; i < concurrency; i++) pthread_join(th[i], NULL);
    res->seconds = ls_now() - t0;
    int tpot_n = 0;
    const char *err = NULL;
    for (int i = 0; i < concurrency; i++) {
        res->ok += w[i].ok;
        res->tokens += w[i].tokens;
        res->mean_latency_s += w[i].lat_sum;
        res->mean_tpot_s += w[i].tpot_sum;
        tpot_n += w[i].tpot_n;
        if (w[i].err[0] && !err) err = w[i].err;
    }
    res->failed = n_requests - res->ok;
    if (res->ok) res->mean_latency_s /= res->ok;
    if (tpot_n) res->mean_tpot_s /= tpot_n;
    res->tokens_per_s = res->seconds > 0 ? res->tokens / res->seconds : 0;
    int rc = res->failed ? ls_err(LS_EPEER, "load: %d of %d requests failed (first: %s)", res->failed, n_requests, err ? err : "?")
                         : LS_OK;
    free(w), free(th);
    return rc;
}
