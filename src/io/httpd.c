/* httpd.c - starts every llmsys HTTP service's libmicrohttpd daemon the same way: bind
 * address, total and per-address connection limits, idle/slow client timeout. */
#include "io/httpd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "llmsys/core.h"

int ls_httpd_check_bind(const ls_httpd_opts *o) {
    const char *what = o->what ? o->what : "http";
    const char *bind = o->bind ? o->bind : "127.0.0.1"; /* "" is no address */
    LS_TRY(ls_bind_check(what, bind));
    if (!o->authenticated && !ls_host_is_loopback(bind))
        return ls_err(
            LS_EINVAL,
            "%s: refusing to listen on %s without authentication (not loopback): give %s, or bind 127.0.0.1 or ::1",
            what, bind, o->auth_hint ? o->auth_hint : "a key");
    return LS_OK;
}

int ls_httpd_start(const ls_httpd_opts *o, struct MHD_Daemon **d, int *port_out) {
    *d = NULL;
    const char *what = o->what ? o->what : "http";
    const char *bind = o->bind ? o->bind : "127.0.0.1"; /* "" is no address */
    if (o->port < 0 || o->port > 65535) return ls_err(LS_EINVAL, "%s: port %d outside [0, 65535]", what, o->port);
    LS_TRY(ls_httpd_check_bind(o));
    /* an IPv6 address listens on IPv6 only (no dual stack): "::1" is not also 127.0.0.1 */
    unsigned char a[16];
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    int v6 = ls_ip_parse(bind, a) == 6;
    if (v6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)o->port);
        memcpy(&s6->sin6_addr, a, 16);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)o->port);
        memcpy(&s4->sin_addr, a, 4);
    }
    unsigned total = o->max_conns ? o->max_conns : LS_HTTPD_MAX_CONNS;
    unsigned per_ip = o->max_per_ip ? o->max_per_ip : LS_HTTPD_MAX_PER_IP;
    unsigned timeout = o->timeout_s ? o->timeout_s : LS_HTTPD_TIMEOUT_S;
    if (per_ip > total) per_ip = total;
    /* thread per connection: poll(), not select(), so descriptors past FD_SETSIZE work;
     * otherwise one epoll thread holds any number of idle connections cheaply */
    unsigned flags = o->thread_per_conn ? MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD
                                        : MHD_USE_EPOLL_INTERNAL_THREAD;
    if (v6) flags |= MHD_USE_IPv6;
    *d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, o->handler, o->cls, MHD_OPTION_SOCK_ADDR,
                          (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, o->completed, o->completed_cls,
                          MHD_OPTION_CONNECTION_LIMIT, total, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
                          MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_END);
    char host[INET6_ADDRSTRLEN + 2];
    if (!*d)
        return ls_err(LS_ENET, "%s: cannot listen on %s:%d (port in use, or not an address of this host?)", what,
                      ls_url_host(bind, host, sizeof host), o->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(*d, MHD_DAEMON_INFO_BIND_PORT);
    if (port_out) *port_out = di && di->port ? di->port : o->port;
    return LS_OK;
}

enum MHD_Result ls_httpd_respond(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body,
                                 size_t len, const char *hname, const char *hval) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    if (hname) MHD_add_response_header(r, hname, hval);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

void ls_httpd_client_addr(struct MHD_Connection *c, char *out, size_t n) {
    snprintf(out, n, "unknown");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return;
    if (ci->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr, out, (socklen_t)n);
    else if (ci->client_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ci->client_addr)->sin6_addr, out, (socklen_t)n);
}

int ls_httpd_secret_eq(const char *given, const char *secret) {
    size_t lg = strlen(given), ls = strlen(secret);
    unsigned char d = lg != ls;
    for (size_t i = 0; i < ls; i++) d |= (unsigned char)(given[i < lg ? i : 0] ^ secret[i]);
    return d == 0;
}

int ls_httpd_bearer_ok(struct MHD_Connection *c, const char *key) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    for (h += 7; *h == ' ';) h++;
    return ls_httpd_secret_eq(h, key);
}
