/* httpd.h - the one place every llmsys HTTP service (serve, victim serve, the robust status
 * page) starts libmicrohttpd: bind address (127.0.0.1 by default; any other only when the
 * service authenticates its requests), connection limits in total and per client address,
 * and a timeout for idle or slow clients. Internal to the library. */
#ifndef LLMSYS_IO_HTTPD_H
#define LLMSYS_IO_HTTPD_H

#include <microhttpd.h>

/* Defaults (0 in ls_httpd_opts takes them). */
#define LS_HTTPD_MAX_CONNS 512
#define LS_HTTPD_MAX_PER_IP 64
#define LS_HTTPD_TIMEOUT_S 30

typedef struct {
    const char *what;               /* service name for messages ("serve", "victim serve") */
    const char *bind;               /* IPv4 or IPv6 address ("::1" or "[::1]"); NULL: 127.0.0.1 ("" is refused) */
    int port;                       /* 0: any free port */
    int thread_per_conn;            /* 1: a thread per connection (handlers that block); else epoll */
    unsigned max_conns;             /* open connections in total (0: LS_HTTPD_MAX_CONNS) */
    unsigned max_per_ip;            /* open connections per client address (0: LS_HTTPD_MAX_PER_IP) */
    unsigned timeout_s;             /* a connection idle this long is closed (0: LS_HTTPD_TIMEOUT_S) */
    MHD_AccessHandlerCallback handler;
    void *cls;
    MHD_RequestCompletedCallback completed; /* may be NULL */
    void *completed_cls;
    int authenticated;     /* 1: the handler refuses requests without the service's key */
    const char *auth_hint; /* the option that gives the key, named when an open bind is refused */
} ls_httpd_opts;

/* The bind address is an IPv4 or IPv6 literal (ls_ip_parse) and, unless o->authenticated,
 * loopback (ls_host_is_loopback: 127.0.0.0/8, ::1): LS_EINVAL naming the address and
 * o->auth_hint otherwise. ls_httpd_start checks it first; a service may call it before its
 * expensive start-up. */
int ls_httpd_check_bind(const ls_httpd_opts *o);
/* Starts the daemon. On success *d and *port_out (the bound port) are set and LS_OK is
 * returned; otherwise a negative status with a message naming the address. */
int ls_httpd_start(const ls_httpd_opts *o, struct MHD_Daemon **d, int *port_out);

/* 1 when the strings are equal; the time taken depends only on the length of secret. */
int ls_httpd_secret_eq(const char *given, const char *secret);
/* 1 when the request carries "Authorization: Bearer KEY" (the scheme's case ignored). */
int ls_httpd_bearer_ok(struct MHD_Connection *c, const char *key);

/* Queues one complete response: len bytes of body (copied), its Content-Type, and one more
 * header when hname is non-NULL. MHD_NO when the response cannot be made. */
enum MHD_Result ls_httpd_respond(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body,
                                 size_t len, const char *hname, const char *hval);

/* The client's IP address as text ("unknown" when not available). */
void ls_httpd_client_addr(struct MHD_Connection *c, char *out, size_t n);

#endif
