/* internal.h - what the robust module's processes share: the message framing over
 * ZeroMQ (a magic-prefixed JSON frame, optionally followed by one binary frame). */
#ifndef LLMSYS_ROBUST_INTERNAL_H
#define LLMSYS_ROBUST_INTERNAL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "llmsys/robust.h"

#define LSR_MAGIC "LSR1"

/* Sends [to (ROUTER only, may be NULL)] [LSR1 + json] [bin when bin != NULL]; never blocks
 * (a full queue drops the message: monitoring data is replaceable). */
int lsr_send(void *sock, const char *to, const cJSON *j, const void *bin, size_t bin_len);
/* Receives one message without blocking: *j (delete it) and, when present, the binary
 * frame (*bin malloc'd). from (ROUTER sockets, 64 bytes) receives the sender identity.
 * Returns 1 with a message, 0 when none is waiting, < 0 on a malformed one. */
int lsr_recv(void *sock, char *from, cJSON **j, void **bin, size_t *bin_len);
/* A string field or "" / a number field or def. */
const char *lsr_str(const cJSON *j, const char *key);
double lsr_num(const cJSON *j, const char *key, double def);
/* Opens a socket with linger 0; bind_ep/connect_ep: one of them. identity may be NULL.
 * For a bind, ep_out (256 bytes, may be NULL) receives the bound endpoint. */
int lsr_socket(void *zctx, int type, const char *identity, const char *bind_ep, const char *connect_ep, void **out,
               char *ep_out);

/* Status page and /metrics of the controller (status.c). */
typedef struct lsr_status lsr_status;
typedef struct {
    int nodes_active, nodes_standby, nodes_evicted, ranks;
    long long step;
    double tokens_per_s, ettr, wall_s;
    int faults[LS_FAULT_COUNT_];
    int restarts;
    char state[64];
} lsr_status_view;
/* The bind address is valid and, off loopback, has a key (LS_EINVAL naming --status-key). */
int lsr_status_check(const char *bind, const char *key);
/* key non-NULL (kept, not copied): every request needs "Authorization: Bearer KEY" (401 otherwise). */
int lsr_status_start(lsr_status **out, const char *bind, int port, const char *key, int *port_out);
void lsr_status_update(lsr_status *s, const lsr_status_view *v);
void lsr_status_stop(lsr_status *s);

#endif
