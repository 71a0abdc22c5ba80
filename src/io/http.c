/* http.c - the one blocking HTTP/1.1 client (Connection: close) over plain sockets:
 * bounded connect, send and reply timeouts, bounded reply size, chunked replies decoded. */
#include "llmsys/http.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "llmsys/core.h"

#define MAX_REPLY (64u << 20)

/* Connects to host:port within timeout_s (non-blocking connect + poll), trying every
 * address the name resolves to; the socket then has send/receive timeouts of timeout_s.
 * name: host as messages write it ("[::1]"). */
static int connect_to(const char *host, const char *name, const char *port, double timeout_s, int *fd_out) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g) return ls_err(LS_ENET, "target %s:%s: cannot resolve (%s)", name, port, gai_strerror(g));
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int fl = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            r = poll(&pf, 1, (int)(timeout_s * 1000));
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
            struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - floor(timeout_s)) * 1e6)};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ls_err(err == ETIMEDOUT ? LS_ETIMEDOUT : LS_ENET, "target %s:%s unreachable (%s)", name, port,
                      strerror(err ? err : ECONNREFUSED));
    *fd_out = fd;
    return LS_OK;
}

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

/* Sends all parts; returns 0 or the errno of the first failed send. */
static int send_all(int fd, const char *const *parts, const size_t *lens, int nparts) {
    for (int p = 0; p < nparts; p++)
        for (size_t off = 0; off < lens[p];) {
            ssize_t w = send(fd, parts[p] + off, lens[p] - off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return w < 0 ? errno : EPIPE;
            off += (size_t)w;
        }
    return 0;
}

/* Reads until the peer closes, the reply exceeds MAX_REPLY or the deadline passes. */
static int recv_all(int fd, const char *host, const char *port, double deadline, char **out, size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    if (!buf) return ls_err(LS_ENOMEM, "http: out of memory");
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= MAX_REPLY) {
                free(buf);
                return ls_err(LS_EFORMAT, "target %s:%s: reply larger than %u bytes", host, port, MAX_REPLY);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return ls_err(LS_ENOMEM, "http: out of memory");
            }
            buf = nb;
            cap *= 2;
        }
        int left = (int)((deadline - ls_now()) * 1000);
        struct pollfd pf = {fd, POLLIN, 0};
        int pr = left > 0 ? poll(&pf, 1, left) : 0;
        if (pr < 0 && errno == EINTR) continue;
        ssize_t r = pr > 0 ? recv(fd, buf + n, cap - n - 1, 0) : -1;
        if (pr == 0) errno = EAGAIN;
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            int slow = e == EAGAIN || e == EWOULDBLOCK;
            return ls_err(slow ? LS_ETIMEDOUT : LS_ENET, "target %s:%s: %s", host, port,
                          slow ? "no reply within the timeout" : strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return LS_OK;
}

/* Splits a raw reply into status, Retry-After and the de-chunked body (in place). */
static int parse_reply(char *buf, size_t len, const char *host, const char *port, ls_http_reply *r) {
    int maj, min, st;
    if (sscanf(buf, "HTTP/%d.%d %d", &maj, &min, &st) != 3)
        return ls_err(LS_EFORMAT, "target %s:%s: not an HTTP reply", host, port);
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep) return ls_err(LS_EFORMAT, "target %s:%s: truncated HTTP reply", host, port);
    *sep = '\0';
    r->retry_after = 0;
    for (char *h = strstr(buf, "\r\n"); h; h = strstr(h + 2, "\r\n"))
        if (!strncasecmp(h + 2, "Retry-After:", 12)) r->retry_after = atof(h + 14);
    int chunked = strcasestr(buf, "Transfer-Encoding: chunked") != NULL;
    char *b = sep + 4;
    size_t bl = len - (size_t)(b - buf);
    if (chunked) bl = dechunk(b, bl);
    memmove(buf, b, bl);
    buf[bl] = '\0';
    r->status = st;
    r->body = buf;
    r->len = bl;
    return LS_OK;
}

int ls_http_exchange(const char *host, const char *port, const char *method, const char *path, const char *headers,
                     const char *body, size_t blen, double timeout_s, ls_http_reply *r) {
    memset(r, 0, sizeof *r);
    if (!(timeout_s > 0)) timeout_s = 30;
    if (timeout_s > 86400) timeout_s = 86400; /* poll() takes int milliseconds */
    int fd = -1;
    char name[300]; /* host as the Host header and messages write it: "[::1]" for IPv6 */
    ls_url_host(host, name, sizeof name);
    LS_TRY(connect_to(host, name, port, timeout_s, &fd));
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "%sConnection: close\r\n\r\n",
                      method, path, name, port, blen, headers ? headers : "");
    if (hn < 0 || (size_t)hn >= sizeof head) {
        close(fd);
        return ls_err(LS_EINVAL, "target %s:%s: request line and headers too long", name, port);
    }
    const char *parts[2] = {head, body};
    size_t lens[2] = {(size_t)hn, body ? blen : 0};
    /* a peer that answers early (413) and closes stops our send; its answer still counts */
    int send_err = send_all(fd, parts, lens, 2);
    char *buf = NULL;
    size_t len = 0;
    int rc = recv_all(fd, name, port, ls_now() + timeout_s, &buf, &len);
    close(fd);
    if (rc == LS_OK) rc = parse_reply(buf, len, name, port, r);
    if (rc != LS_OK) {
        free(buf);
        if (send_err)
            return ls_err(send_err == EAGAIN ? LS_ETIMEDOUT : LS_ENET, "target %s:%s: send failed (%s)", name, port,
                          send_err == EAGAIN ? "timed out" : strerror(send_err));
        return rc;
    }
    return LS_OK;
}

void ls_http_reply_free(ls_http_reply *r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

int ls_http_request(const char *host, int port, const char *method, const char *path, const char *body,
                    double timeout_s, int *status, char **resp) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    ls_http_reply r;
    *resp = NULL;
    *status = 0;
    LS_TRY(ls_http_exchange(host, ps, method, path, NULL, body, body ? strlen(body) : 0, timeout_s, &r));
    *status = r.status;
    *resp = r.body;
    return LS_OK;
}
