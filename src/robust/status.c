/* status.c - the controller's status page and Prometheus /metrics over libmicrohttpd. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/httpd.h"
#include "robust/internal.h"

struct lsr_status {
    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    lsr_status_view v;
    const char *key; /* NULL: open (loopback only) */
};

static enum MHD_Result unauthorized(struct MHD_Connection *conn) {
    static const char msg[] = "401: this status page needs Authorization: Bearer KEY (robust run --status-key)\n";
    return ls_httpd_respond(conn, 401, "text/plain", msg, sizeof msg - 1, "WWW-Authenticate", "Bearer");
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_len, void **con_cls) {
    lsr_status *s = cls;
    (void)version;
    (void)upload;
    (void)upload_len;
    (void)con_cls;
    if (strcmp(method, "GET") != 0) return MHD_NO;
    if (s->key && !ls_httpd_bearer_ok(conn, s->key)) return unauthorized(conn);
    lsr_status_view v;
    pthread_mutex_lock(&s->mu);
    v = s->v;
    pthread_mutex_unlock(&s->mu);
    char buf[4096];
    int n = 0, status = 200;
    const char *ctype = "text/plain; version=0.0.4";
    if (!strcmp(url, "/metrics")) {
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "# HELP llmsys_robust_nodes Nodes by state.\n# TYPE llmsys_robust_nodes gauge\n"
                      "llmsys_robust_nodes{state=\"active\"} %d\nllmsys_robust_nodes{state=\"standby\"} %d\n"
                      "llmsys_robust_nodes{state=\"evicted\"} %d\n"
                      "# HELP llmsys_robust_ranks Training ranks.\n# TYPE llmsys_robust_ranks gauge\nllmsys_robust_ranks %d\n"
                      "# HELP llmsys_robust_step Steps completed by the job.\n# TYPE llmsys_robust_step gauge\n"
                      "llmsys_robust_step %lld\n"
                      "# HELP llmsys_robust_tokens_per_second Productive tokens per wall second.\n"
                      "# TYPE llmsys_robust_tokens_per_second gauge\nllmsys_robust_tokens_per_second %.3f\n"
                      "# HELP llmsys_robust_ettr Effective training time ratio so far.\n"
                      "# TYPE llmsys_robust_ettr gauge\nllmsys_robust_ettr %.6f\n"
                      "# HELP llmsys_robust_restarts_total Relaunches.\n# TYPE llmsys_robust_restarts_total counter\n"
                      "llmsys_robust_restarts_total %d\n"
                      "# HELP llmsys_robust_faults_total Faults detected, by kind.\n"
                      "# TYPE llmsys_robust_faults_total counter\n",
                      v.nodes_active, v.nodes_standby, v.nodes_evicted, v.ranks, v.step, v.tokens_per_s, v.ettr,
                      v.restarts);
        for (int k = 1; k < LS_FAULT_COUNT_; k++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "llmsys_robust_faults_total{kind=\"%s\"} %d\n",
                          ls_fault_name(k), v.faults[k]);
    } else if (!strcmp(url, "/")) {
        ctype = "text/html; charset=utf-8";
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "<!doctype html><html><head><meta http-equiv=\"refresh\" content=\"2\"><title>llmsys robust"
                      "</title></head><body><h1>llmsys robust</h1><p>state: %s</p><table>"
                      "<tr><td>step</td><td>%lld</td></tr><tr><td>nodes active / standby / evicted</td>"
                      "<td>%d / %d / %d</td></tr><tr><td>ranks</td><td>%d</td></tr>"
                      "<tr><td>tokens/s</td><td>%.0f</td></tr><tr><td>ETTR</td><td>%.3f</td></tr>"
                      "<tr><td>wall</td><td>%.1f s</td></tr><tr><td>restarts</td><td>%d</td></tr>",
                      v.state, v.step, v.nodes_active, v.nodes_standby, v.nodes_evicted, v.ranks, v.tokens_per_s,
                      v.ettr, v.wall_s, v.restarts);
        for (int k = 1; k < LS_FAULT_COUNT_; k++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "<tr><td>faults: %s</td><td>%d</td></tr>",
                          ls_fault_name(k), v.faults[k]);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "</table><p><a href=\"/metrics\">/metrics</a></p></body></html>\n");
    } else {
        status = 404;
        n = snprintf(buf, sizeof buf, "not found\n");
    }
    return ls_httpd_respond(conn, (unsigned)status, ctype, buf, (size_t)n, NULL, NULL);
}

/* a status page: few viewers, each a quick GET */
static ls_httpd_opts status_httpd(const char *bind, int port, const char *key, lsr_status *s) {
    return (ls_httpd_opts){.what = "status page",
                           .bind = bind,
                           .port = port,
                           .max_conns = 64,
                           .max_per_ip = 16,
                           .timeout_s = 10,
                           .handler = answer,
                           .cls = s,
                           .authenticated = key != NULL,
                           .auth_hint = "--status-key KEY"};
}

int lsr_status_check(const char *bind, const char *key) {
    ls_httpd_opts ho = status_httpd(bind, 0, key, NULL);
    return ls_httpd_check_bind(&ho);
}

int lsr_status_start(lsr_status **out, const char *bind, int port, const char *key, int *port_out) {
    lsr_status *s = calloc(1, sizeof *s);
    if (!s) return ls_err(LS_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->v.state, sizeof s->v.state, "starting");
    s->key = key;
    ls_httpd_opts ho = status_httpd(bind, port, key, s);
    int rc = ls_httpd_start(&ho, &s->d, port_out);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    *out = s;
    return LS_OK;
}

void lsr_status_update(lsr_status *s, const lsr_status_view *v) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->v = *v;
    pthread_mutex_unlock(&s->mu);
}

void lsr_status_stop(lsr_status *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
