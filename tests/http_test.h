/* http_test.h - test helpers for the HTTP services: a raw GET (status and reply), a flood of
 * half-open connections from another loopback address, whether IPv6 loopback works here. */
#ifndef LLMSYS_TEST_HTTP_TEST_H
#define LLMSYS_TEST_HTTP_TEST_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* One raw HTTP/1.1 request to 127.0.0.1:port (header: one "Name: value" line or NULL; body may
 * be malformed, blen 0 for none); returns the status (-1 when unreachable), the whole reply in out. */
static inline int raw_http_h(int port, const char *method, const char *path, const char *header, const char *body,
                             size_t blen, char *out, size_t outsz) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    out[0] = '\0';
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    char head[640];
    int hn =
        snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n%s%sConnection: close\r\n\r\n",
                 method, path, blen, header ? header : "", header ? "\r\n" : "");
    if (send(fd, head, (size_t)hn, MSG_NOSIGNAL) < 0) blen = 0;
    for (size_t off = 0; off < blen;) {
        ssize_t w = send(fd, body + off, blen - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    size_t len = 0;
    ssize_t r;
    while (len + 1 < outsz && (r = recv(fd, out + len, outsz - len - 1, 0)) > 0) len += (size_t)r;
    out[len] = '\0';
    close(fd);
    int st = -1;
    sscanf(out, "HTTP/%*d.%*d %d", &st);
    return st;
}

/* raw_http_h with key sent as X-API-Key (NULL: no header). */
static inline int raw_http(int port, const char *method, const char *path, const char *key, const char *body,
                           size_t blen, char *out, size_t outsz) {
    char h[300];
    if (key) snprintf(h, sizeof h, "X-API-Key: %s", key);
    return raw_http_h(port, method, path, key ? h : NULL, body, blen, out, outsz);
}

/* raw_http GET without a body. */
static inline int raw_get(int port, const char *path, const char *key, char *out, size_t outsz) {
    return raw_http(port, "GET", path, key, NULL, 0, out, outsz);
}

/* Opens n TCP connections from src_ip to 127.0.0.1:port that never send a byte. */
static inline int half_open(const char *src_ip, int port, int *fds, int n) {
    int k = 0;
    for (; k < n; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        inet_pton(AF_INET, src_ip, &a.sin_addr);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a)) {
            if (fd >= 0) close(fd);
            break;
        }
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
            close(fd);
            break;
        }
        fds[k] = fd;
    }
    return k;
}

/* 1 when this host can bind the IPv6 loopback ::1 (0 where IPv6 is off). */
static inline int v6_loopback_ok(void) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

#endif
