/* httpd.h - the one place every llmsys HTTP service (serve, victim serve, the robust status
 * page) starts libmicrohttpd: bind address (127.0.0.1 by default), connection limits in total
 * and per client address, and a timeout for idle or slow clients. Internal to the library. */
#ifndef LLMSYS_IO_HTTPD_H
#define LLMSYS_IO_HTTPD_H

#include <microhttpd.h>

/* Defaults (0 in ls_httpd_opts takes them). */
#define LS_HTTPD_MAX_CONNS 512
#define LS_HTTPD_MAX_PER_IP 64
#define LS_HTTPD_TIMEOUT_S 30

typedef struct {
    const char *what;               /* service name for messages ("serve", "victim serve") */
    const char *bind;               /* IPv4 address; NULL or "": 127.0.0.1 */
    int port;                       /* 0: any free port */
    int thread_per_conn;            /* 1: a thread per connection (handlers that block); else epoll */
    unsigned max_conns;             /* open connections in total (0: LS_HTTPD_MAX_CONNS) */
    unsigned max_per_ip;            /* open connections per client address (0: LS_HTTPD_MAX_PER_IP) */
    unsigned timeout_s;             /* a connection idle this long is closed (0: LS_HTTPD_TIMEOUT_S) */
    MHD_AccessHandlerCallback handler;
    void *cls;
    MHD_RequestCompletedCallback completed; /* may be NULL */
    void *completed_cls;
} ls_httpd_opts;

/* Starts the daemon. On success *d and *port_out (the bound port) are set and LS_OK is
 * returned; otherwise a negative status with a message naming the address. */
int ls_httpd_start(const ls_httpd_opts *o, struct MHD_Daemon **d, int *port_out);

/* The client's IP address as text ("unknown" when not available). */
void ls_httpd_client_addr(struct MHD_Connection *c, char *out, size_t n);

#endif
