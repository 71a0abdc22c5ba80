/*
 * http.h - the one HTTP/1.1 client of llmsys: a blocking request on its own connection
 * (Connection: close) over plain sockets, with bounded connect/send/reply timeouts and a
 * bounded reply size. Used by serve (demo, benchmarks, plan validation, tests) and by
 * steal (the attacker's queries to a victim endpoint).
 *
 *     ls_http_reply r;
 *     if (ls_http_exchange("127.0.0.1", "8080", "POST", "/v1/completions", NULL, body,
 *                          strlen(body), 30.0, &r) == LS_OK) {
 *         ... r.status, r.body ...
 *         ls_http_reply_free(&r);
 *     }
 */
#ifndef LLMSYS_HTTP_H
#define LLMSYS_HTTP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int status;         /* HTTP status code */
    char *body;         /* malloc'd, NUL-terminated, chunked transfer encoding removed */
    size_t len;         /* bytes of body */
    double retry_after; /* seconds of a Retry-After header, 0 when absent */
} ls_http_reply;

/* Sends method path to host:port (a name or an address; an IPv6 one without brackets, "::1")
 * with Content-Type: application/json, the extra header lines in headers ("Name: value\r\n"
 * each, or NULL) and blen bytes of body, then reads the whole reply into *r. timeout_s (> 0)
 * bounds the connect, each send and the wait for the complete reply. When the peer stops
 * reading early (a 413 answer) its reply is still returned. Errors name "target host:port"
 * ("target [::1]:8080"): LS_ENET (unresolvable, unreachable, reset), LS_ETIMEDOUT,
 * LS_EFORMAT (not HTTP, truncated, over 64 MiB), LS_ENOMEM. On error *r holds nothing to free. */
int ls_http_exchange(const char *host, const char *port, const char *method, const char *path, const char *headers,
                     const char *body, size_t blen, double timeout_s, ls_http_reply *r);
void ls_http_reply_free(ls_http_reply *r);

/* ls_http_exchange with a NUL-terminated body (NULL: none) and a numeric port: *resp is
 * the malloc'd body, *status the HTTP status. */
int ls_http_request(const char *host, int port, const char *method, const char *path, const char *body,
                    double timeout_s, int *status, char **resp);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_HTTP_H */
