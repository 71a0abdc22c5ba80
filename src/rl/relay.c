/* relay.c - a relay worker: holds the newest complete weight version in memory, forwards
 * every checked chunk to its successor in the chain as it arrives (pipelined), re-sends
 * its newest version when the chain is rebuilt under it (and the version it was assembling then,
 * once complete: its earlier chunks went to no successor), and serves rollouts' pulls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "llmsys/zsec.h"
#include "rl/internal.h"

int rl_relay_main(const ls_rl_worker_opts *o) {
    ls_model_set_threads(1);
    void *zctx = zmq_ctx_new(), *msock = NULL, *sock = NULL, *succ = NULL;
    ls_rl_asm *as = NULL;
    rl_config cfg;
    char ep[256], succ_ep[256] = "";
    int rc = zctx ? LS_OK : ls_err(LS_ENET, "zmq context");
    if (rc == LS_OK) sock = rl_socket(zctx, ZMQ_ROUTER);
    if (rc == LS_OK && !sock) rc = LS_ENET;
    if (rc == LS_OK) rc = rl_bind(zctx, sock, o->bind ? o->bind : "tcp://127.0.0.1:0", "rl relay", ep, sizeof ep);
    if (rc == LS_OK) rc = rl_join(zctx, o->manager, "relay", o->id, ep, &msock, &cfg);
    if (rc == LS_OK) rc = ls_rl_asm_init(&as);
    /* fault injection for tests: LLMSYS_RL_CORRUPT=N flips a byte of every Nth chunk received */
    const char *ce = getenv("LLMSYS_RL_CORRUPT");
    int corrupt_every = ce ? atoi(ce) : 0, n_chunks = 0, bad = 0;
    int64_t owed = -1; /* a version partly received when the successor changed: it gets it whole */
    double last_hb = 0;
    int stop = 0;
    while (rc == LS_OK && !stop) {
        uint8_t id[64];
        size_t idn;
        void *msg = NULL;
        size_t len;
        int r = rl_recv_routed(sock, 50, id, &idn, &msg, &len);
        if (r == LS_OK) {
            rl_rd rd;
            if (rl_msg_open(msg, len, "relay", &rd) != LS_OK) {
                LS_WARN("relay %d: %s", o->id, ls_errmsg());
                bad++;
            } else if (rd.type == M_CHUNK) {
                ls_rl_chunk_hdr h;
                const void *hp = rl_get_bytes(&rd, sizeof h);
                if (hp) memcpy(&h, hp, sizeof h);
                uint8_t *d = hp ? (uint8_t *)rl_get_bytes(&rd, (size_t)h.len) : NULL;
                if (!d) {
                    LS_WARN("relay %d: truncated chunk rejected", o->id);
                    bad++;
                } else {
                    if (corrupt_every > 0 && ++n_chunks % corrupt_every == 0 && h.len > 0) d[0] ^= 0x5a;
                    int a = ls_rl_asm_add(as, &h, d);
                    if (a < 0) {
                        LS_WARN("relay %d: %s", o->id, ls_errmsg());
                        bad++;
                    } else {
                        if (succ) rl_send(succ, msg, len, 0); /* pipelined: forward before the version completes */
                        if (a == 1) {
                            last_hb = 0; /* a complete version: tell the manager now, not at the next beat */
                            LS_INFO("relay %d: version %lld whole", o->id, (long long)h.version);
                        }
                        if (a == 1 && owed >= 0 && h.version >= owed) {
                            /* the version partly received when the successor changed is whole: it
                             * goes whole (a newer one was forwarded whole already) */
                            const void *data;
                            size_t n;
                            ls_rl_asm_latest(as, &data, &n);
                            if (succ && h.version == owed &&
                                rl_send_version(succ, NULL, 0, h.version, data, n) != LS_OK)
                                LS_WARN("relay %d: %s", o->id, ls_errmsg());
                            owed = -1;
                        }
                    }
                }
            } else if (rd.type == M_PULL) {
                int64_t have = rl_get_i64(&rd);
                const void *data;
                size_t n;
                int64_t v = ls_rl_asm_latest(as, &data, &n);
                if (v > have) {
                    if (rl_send_version(sock, id, idn, v, data, n) != LS_OK)
                        LS_WARN("relay %d: %s", o->id, ls_errmsg());
                } else {
                    rl_buf b = {0};
                    rl_msg_begin(&b, M_PULL_NONE);
                    if (rl_msg_end(&b) == LS_OK) rl_send_routed(sock, id, idn, b.p, b.n);
                    rl_buf_free(&b);
                }
            }
        } else if (r != LS_ETIMEDOUT) {
            LS_WARN("relay %d: %s", o->id, ls_errmsg());
        }
        free(msg);
        if (ls_now() - last_hb > 0.1) {
            last_hb = ls_now();
            rl_buf b = {0};
            rl_msg_begin(&b, M_RELAY_HB);
            rl_put_i32(&b, o->id);
            rl_put_i64(&b, ls_rl_asm_latest(as, NULL, NULL));
            rl_put_i32(&b, bad);
            void *rep;
            size_t rn;
            rl_rd rr;
            int c = rl_call(msock, &b, 3000, &rep, &rn, &rr, "manager");
            rl_buf_free(&b);
            if (c) {
                rc = ls_err(LS_ENET, "relay %d: manager unreachable at %s", o->id, o->manager);
                break;
            }
            stop = rl_get_i32(&rr);
            char s[256];
            rl_get_str(&rr, s, sizeof s);
            free(rep);
            if (strcmp(s, succ_ep) != 0) {
                /* chain rebuilt: connect to the new successor and hand it the newest version */
                if (succ) zmq_close(succ);
                succ = NULL;
                snprintf(succ_ep, sizeof succ_ep, "%s", s);
                if (s[0]) {
                    succ = rl_socket(zctx, ZMQ_DEALER);
                    rc = succ ? ls_zsec_connect(succ, s, "rl relay chain") : LS_ENET;
                    const void *data;
                    size_t n;
                    int64_t v = rc == LS_OK ? ls_rl_asm_latest(as, &data, &n) : -1;
                    if (v >= 0) rl_send_version(succ, NULL, 0, v, data, n);
                    owed = ls_rl_asm_partial(as);
                }
            }
        }
    }
    if (succ) zmq_close(succ);
    if (sock) zmq_close(sock);
    if (msock) zmq_close(msock);
    ls_rl_asm_free(as);
    if (zctx) zmq_ctx_term(zctx);
    return rc;
}
