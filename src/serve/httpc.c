/* httpc.c - a minimal blocking HTTP/1.1 client (Connection: close) for the demo,
 * benchmarks and tests; reads the whole response, de-chunking SSE streams. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
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
