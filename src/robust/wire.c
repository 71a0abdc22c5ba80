/* wire.c - message framing of the robust processes: LSR1-prefixed JSON over ZeroMQ. */
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "robust/internal.h"
#include "llmsys/zsec.h"

int lsr_send(void *sock, const char *to, const cJSON *j, const void *bin, size_t bin_len) {
    char *text = cJSON_PrintUnformatted(j);
    if (!text) return ls_err(LS_ENOMEM, "out of memory");
    size_t tl = strlen(text);
    char *buf = malloc(tl + 4);
    if (!buf) {
        free(text);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    memcpy(buf, LSR_MAGIC, 4);
    memcpy(buf + 4, text, tl);
    free(text);
    int rc = 0;
    if (to) rc = zmq_send(sock, to, strlen(to), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc >= 0) rc = zmq_send(sock, buf, tl + 4, (bin ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
    if (rc >= 0 && bin) rc = zmq_send(sock, bin, bin_len, ZMQ_DONTWAIT);
    free(buf);
    return rc < 0 ? ls_err(LS_ENET, "zmq send: %s", zmq_strerror(zmq_errno())) : LS_OK;
}

/* Receives one frame into a malloc'd buffer; *more says whether another follows. */
static int recv_frame(void *sock, int flags, void **data, size_t *len, int *more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, flags) < 0) {
        zmq_msg_close(&m);
        return zmq_errno() == EAGAIN ? 0 : ls_err(LS_ENET, "zmq recv: %s", zmq_strerror(zmq_errno()));
    }
    *len = zmq_msg_size(&m);
    *data = malloc(*len + 1);
    if (*data) {
        memcpy(*data, zmq_msg_data(&m), *len);
        ((char *)*data)[*len] = '\0';
    }
    *more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    return *data ? 1 : ls_err(LS_ENOMEM, "out of memory");
}

int lsr_recv(void *sock, char *from, cJSON **j, void **bin, size_t *bin_len) {
    void *f[4] = {0};
    size_t l[4] = {0};
    int nf = 0, more = 1, rc = 0;
    *j = NULL;
    if (bin) *bin = NULL;
    if (bin_len) *bin_len = 0;
    while (more && nf < 4) {
        rc = recv_frame(sock, nf == 0 ? ZMQ_DONTWAIT : 0, &f[nf], &l[nf], &more);
        if (rc <= 0) break;
        nf++;
    }
    while (rc > 0 && more) { /* drop surplus frames */
        void *x;
        size_t xl;
        rc = recv_frame(sock, 0, &x, &xl, &more);
        free(x);
    }
    int k = 0, out = rc;
    if (rc > 0) {
        if (from) {
            from[0] = '\0';
            if (nf >= 2 && l[0] < 64) memcpy(from, f[0], l[0] + 1);
            k = 1;
        }
        if (k >= nf || l[k] < 4 || memcmp(f[k], LSR_MAGIC, 4) != 0) {
            out = ls_err(LS_EFORMAT, "robust: message without the LSR1 magic");
        } else if (!(*j = cJSON_ParseWithLength((const char *)f[k] + 4, l[k] - 4))) {
            out = ls_err(LS_EFORMAT, "robust: malformed JSON message");
        } else if (k + 1 < nf && bin) {
            *bin = f[k + 1];
            *bin_len = l[k + 1];
            f[k + 1] = NULL;
        }
    }
    for (int i = 0; i < nf; i++) free(f[i]);
    return out;
}

const char *lsr_str(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

double lsr_num(const cJSON *j, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

int lsr_socket(void *zctx, int type, const char *identity, const char *bind_ep, const char *connect_ep, void **out,
               char *ep_out) {
    void *s = zmq_socket(zctx, type);
    if (!s) return ls_err(LS_ENET, "zmq socket: %s", zmq_strerror(zmq_errno()));
    int zero = 0, hwm = 10000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (identity) zmq_setsockopt(s, ZMQ_ROUTING_ID, identity, strlen(identity));
    if (type == ZMQ_ROUTER) {
        int one = 1; /* a restarted peer with the same identity takes over its route */
        zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    }
    int rc = bind_ep ? ls_zsec_bind(zctx, s, bind_ep, "robust") : ls_zsec_connect(s, connect_ep, "robust");
    if (rc != LS_OK) {
        zmq_close(s);
        return rc;
    }
    if (bind_ep && ep_out) {
        size_t n = 256;
        if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep_out, &n) != 0) ep_out[0] = '\0';
    }
    *out = s;
    return LS_OK;
}
