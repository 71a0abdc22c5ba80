/*
 * zsec.h - ZeroMQ CURVE authentication and encryption for every llmsys socket that
 * crosses a process boundary (loader service, pipeline stages, robust agents, rl workers).
 *
 * Keys: `llmsys keys gen --out DIR` writes DIR/server.key (the server key pair and an
 * "allow" line with the client's public key) and DIR/client.key (the client key pair and
 * the server's public key), Z85 text, mode 0600. A key file holds lines "name = value":
 * server-public, server-secret, client-public, client-secret, allow (repeatable).
 * `--keys PATH` (or LLMSYS_KEYS) names one such file or a directory holding server.key
 * and/or client.key; a process that both binds and connects (a pipeline stage) takes the
 * directory.
 *
 * Policy, per endpoint: CURVE is on when the endpoint is not loopback (tcp://127.x.x.x,
 * tcp://localhost, tcp://[::1]) nor ipc:// or inproc://, or everywhere when forced
 * (`--curve`, LLMSYS_CURVE=1). Binding or connecting a CURVE endpoint without the keys
 * it needs is refused with one error line. A CURVE server socket gets a ZAP handler (the
 * ZeroMQ authentication protocol on inproc://zeromq.zap.01 of its context) that admits
 * only the client public keys on its allow list; every refused handshake (unknown client
 * key, wrong server key, a client without CURVE) is logged as a warning.
 *
 * IPv6: a tcp endpoint takes an IPv6 literal in brackets (tcp://[::1]:5555, tcp://[::]:5555;
 * the socket gets ZMQ_IPV6); [::1] is loopback, any other needs CURVE like 0.0.0.0. One
 * without brackets (tcp://::1:5555) is refused with one error line.
 *
 * Configuration is per process: ls_zsec_configure sets it and exports LLMSYS_KEYS /
 * LLMSYS_CURVE so that the processes this one starts (stages, MPI ranks) inherit it.
 */
#ifndef LLMSYS_ZSEC_H
#define LLMSYS_ZSEC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the process's key path (NULL: keep LLMSYS_KEYS) and forced CURVE (force: 1 on every
 * endpoint, 0 only off loopback, < 0 keep LLMSYS_CURVE); loads and checks the keys now. */
int ls_zsec_configure(const char *keys, int force);
/* Writes a new server and client key pair to dir/server.key and dir/client.key (created
 * with mode 0600, atomically); refuses to replace existing files unless overwrite. */
int ls_zsec_keygen(const char *dir, int overwrite);
/* 1 if CURVE applies to endpoint under the current policy. */
int ls_zsec_wanted(const char *endpoint);
/* What ls_zsec_bind (bind != 0) or ls_zsec_connect would refuse, checked without a socket
 * (before any work, for a flag naming the endpoint): a malformed endpoint, an IPv6 host without
 * brackets, or CURVE wanted without the keys it needs. LS_EINVAL naming what (and the keys'
 * error, if they cannot be read). */
int ls_zsec_check(const char *endpoint, int bind, const char *what);
/* zmq_bind with the policy applied: CURVE server options and the context's ZAP handler
 * when wanted (zctx: sock's context); what names the socket in errors. */
int ls_zsec_bind(void *zctx, void *sock, const char *endpoint, const char *what);
/* zmq_connect with the policy applied: CURVE client options when wanted. */
int ls_zsec_connect(void *sock, const char *endpoint, const char *what);
/* Handshakes refused so far by this process's CURVE servers (every context). */
long ls_zsec_refusals(void);

#ifdef __cplusplus
}
#endif

#endif
