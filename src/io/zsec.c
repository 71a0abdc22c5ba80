/* zsec.c - CURVE keys, the loopback policy and the ZAP handler behind every llmsys ZeroMQ bind/connect. */
#include "llmsys/zsec.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "llmsys/core.h"

#define KEY_Z85 40 /* a 32-byte key in Z85 */
#define MAX_ALLOW 64
#define MAX_MON 8

typedef struct {
    int loaded, force;
    char path[1024];
    char srv_pub[KEY_Z85 + 1], srv_sec[KEY_Z85 + 1], cli_pub[KEY_Z85 + 1], cli_sec[KEY_Z85 + 1];
    uint8_t allow[MAX_ALLOW][32];
    int n_allow;
} keystore;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static keystore g_keys;
static long g_refusals;

/* ---------------------------------------------------------------- key files */

static int check_key(const char *file, int line, const char *name, const char *v, uint8_t bin[32]) {
    uint8_t tmp[32];
    if (strlen(v) != KEY_Z85 || !zmq_z85_decode(bin ? bin : tmp, v))
        return ls_err(LS_EFORMAT, "%s:%d: %s is not a 40-character Z85 key", file, line, name);
    return LS_OK;
}

/* Parses one key file into k (fields it names are overwritten, allow lines appended). */
static int load_file(keystore *k, const char *file) {
    struct stat st;
    char *text = NULL;
    size_t len;
    LS_TRY(ls_file_read(file, &text, &len));
    int rc = LS_OK, line = 0, secret = 0;
    for (char *p = text, *nl; rc == LS_OK && p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        line++;
        while (*p == ' ' || *p == '\t') p++;
        size_t n = strlen(p);
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r')) p[--n] = '\0';
        if (!*p || *p == '#') continue;
        char *eq = strchr(p, '=');
        if (!eq) {
            rc = ls_err(LS_EFORMAT, "%s:%d: expected 'name = key'", file, line);
            break;
        }
        char *name = p, *v = eq + 1;
        for (char *e = eq; e > name && (e[-1] == ' ' || e[-1] == '\t'); e--) e[-1] = '\0';
        *eq = '\0';
        while (*v == ' ' || *v == '\t') v++;
        char *dst = !strcmp(name, "server-public")   ? k->srv_pub
                    : !strcmp(name, "server-secret") ? k->srv_sec
                    : !strcmp(name, "client-public") ? k->cli_pub
                    : !strcmp(name, "client-secret") ? k->cli_sec
                                                     : NULL;
        if (dst) {
            if ((rc = check_key(file, line, name, v, NULL))) break;
            memcpy(dst, v, KEY_Z85 + 1);
            secret |= dst == k->srv_sec || dst == k->cli_sec;
        } else if (!strcmp(name, "allow")) {
            if (k->n_allow == MAX_ALLOW) {
                rc = ls_err(LS_ERANGE, "%s:%d: more than %d allow lines", file, line, MAX_ALLOW);
                break;
            }
            if ((rc = check_key(file, line, name, v, k->allow[k->n_allow]))) break;
            k->n_allow++;
        } else {
            rc = ls_err(LS_EFORMAT,
                        "%s:%d: unknown key name '%s' (server-public, server-secret, client-public, "
                        "client-secret, allow)",
                        file, line, name);
        }
    }
    free(text);
    if (rc == LS_OK && secret && stat(file, &st) == 0 && (st.st_mode & 077))
        rc = ls_err(LS_EINVAL, "%s holds a secret key but others may read it (mode %04o): chmod 600 %s", file,
                    (unsigned)(st.st_mode & 07777), file);
    return rc;
}

/* A secret key must match its public key (a corrupted or mixed-up file fails here). */
static int check_pair(const char *path, const char *who, const char *pub, const char *sec) {
    char derived[KEY_Z85 + 1];
    if (!sec[0]) return LS_OK;
    if (!pub[0]) return ls_err(LS_EFORMAT, "%s: %s-secret without %s-public", path, who, who);
    if (zmq_curve_public(derived, sec) != 0 || strcmp(derived, pub))
        return ls_err(LS_EFORMAT, "%s: %s-secret does not belong to %s-public", path, who, who);
    return LS_OK;
}

/* Loads the configured keys (path: a file or a directory of server.key/client.key). */
static int load_keys(keystore *k, const char *path) {
    memset(k, 0, sizeof *k);
    snprintf(k->path, sizeof k->path, "%s", path);
    if (ls_is_dir(path)) {
        char f[1100];
        int found = 0;
        const char *names[] = {"server.key", "client.key"};
        for (int i = 0; i < 2; i++) {
            snprintf(f, sizeof f, "%s/%s", path, names[i]);
            if (!ls_is_file(f)) continue;
            LS_TRY(load_file(k, f));
            found++;
        }
        if (!found)
            return ls_err(LS_ENOTFOUND, "%s: no server.key or client.key (make them with `llmsys keys gen --out %s`)",
                          path, path);
    } else {
        LS_TRY(load_file(k, path));
    }
    LS_TRY(check_pair(path, "server", k->srv_pub, k->srv_sec));
    LS_TRY(check_pair(path, "client", k->cli_pub, k->cli_sec));
    if (!k->srv_pub[0] && !k->cli_pub[0] && !k->n_allow)
        return ls_err(LS_EFORMAT, "%s: no keys (make them with `llmsys keys gen`)", path);
    if (k->srv_sec[0] && !k->n_allow)
        return ls_err(LS_EFORMAT, "%s: a server key without any 'allow = <client public key>' line admits nobody",
                      path);
    return LS_OK;
}

/* Loads the keys named by LLMSYS_KEYS on first use; caller holds g_mu. */
static int ensure_loaded(void) {
    if (g_keys.loaded) return LS_OK;
    const char *env = getenv("LLMSYS_KEYS"), *force = getenv("LLMSYS_CURVE");
    int f = force && *force && strcmp(force, "0");
    int rc = env && *env ? load_keys(&g_keys, env) : (memset(&g_keys, 0, sizeof g_keys), LS_OK);
    g_keys.force = f;
    g_keys.loaded = rc == LS_OK;
    return rc;
}

int ls_zsec_configure(const char *keys, int force) {
    char abs[4096]; /* absolute, so that children in another directory find it */
    if (keys && !realpath(keys, abs)) return ls_err(LS_ENOTFOUND, "keys %s: %s", keys, strerror(errno));
    if (keys && setenv("LLMSYS_KEYS", abs, 1) != 0) return ls_err(LS_ENOMEM, "setenv: %s", strerror(errno));
    if (force >= 0 && setenv("LLMSYS_CURVE", force ? "1" : "0", 1) != 0)
        return ls_err(LS_ENOMEM, "setenv: %s", strerror(errno));
    pthread_mutex_lock(&g_mu);
    g_keys.loaded = 0;
    int rc = ensure_loaded();
    pthread_mutex_unlock(&g_mu);
    return rc;
}

static int write_key_file(const char *path, const char *text) {
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, path));
    FILE *fp = af.fp;
    if (fchmod(fileno(fp), 0600) != 0 || fputs(text, fp) < 0) {
        int e = errno;
        ls_atomic_abort(&af);
        return ls_err(LS_EIO, "%s: %s", path, strerror(e));
    }
    return ls_atomic_commit(&af);
}

int ls_zsec_keygen(const char *dir, int overwrite) {
    char sp[KEY_Z85 + 1], ss[KEY_Z85 + 1], cp[KEY_Z85 + 1], cs[KEY_Z85 + 1], f[2][1100], text[512];
    LS_TRY(ls_mkdirs(dir));
    snprintf(f[0], sizeof f[0], "%s/server.key", dir);
    snprintf(f[1], sizeof f[1], "%s/client.key", dir);
    for (int i = 0; i < 2 && !overwrite; i++)
        if (ls_is_file(f[i]))
            return ls_err(LS_EINVAL, "%s exists; remove it or pass --force to replace the keys", f[i]);
    if (zmq_curve_keypair(sp, ss) != 0 || zmq_curve_keypair(cp, cs) != 0)
        return ls_err(LS_EUNSUPPORTED, "zmq_curve_keypair: %s (libzmq built without CURVE?)",
                      zmq_strerror(zmq_errno()));
    snprintf(text, sizeof text,
             "# llmsys CURVE server keys (keep private; copy to the service's host)\n"
             "server-public = %s\nserver-secret = %s\n# client public keys admitted\nallow = %s\n",
             sp, ss, cp);
    LS_TRY(write_key_file(f[0], text));
    snprintf(text, sizeof text,
             "# llmsys CURVE client keys (keep private; copy to every client's host)\n"
             "server-public = %s\nclient-public = %s\nclient-secret = %s\n",
             sp, cp, cs);
    return write_key_file(f[1], text);
}

/* ---------------------------------------------------------------- policy */

/* The host of a tcp:// endpoint ("tcp://[::1]:5555": "[::1]") into host; 0 if it has none. */
static int tcp_host(const char *ep, char host[64]) {
    if (strncmp(ep, "tcp://", 6)) return 0;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || colon - h >= 64) return 0;
    memcpy(host, h, (size_t)(colon - h));
    host[colon - h] = '\0';
    return 1;
}

static int is_loopback(const char *ep) {
    if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9)) return 1;
    char host[64];
    if (!tcp_host(ep, host) || (host[0] != '[' && strchr(host, ':'))) return 0; /* IPv6 needs brackets */
    return ls_host_is_loopback(host);
}

/* 1 if ep is tcp://HOST:PORT (HOST an IPv4 address, a bracketed IPv6 address, a name or *;
 * PORT 0..65535 or *), ipc://PATH or inproc://NAME; what libzmq would refuse later, or take
 * for something else, is refused here with one message. */
static int endpoint_ok(const char *ep) {
    if (!strncmp(ep, "ipc://", 6)) return ep[6] != '\0';
    if (!strncmp(ep, "inproc://", 9)) return ep[9] != '\0';
    char host[64];
    unsigned char a[16];
    if (!tcp_host(ep, host) || !host[0]) return 0;
    const char *port = ep + 6 + strlen(host) + 1;
    if (strcmp(port, "*")) {
        if (!*port || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port) || atoi(port) > 65535) return 0;
    }
    if (host[0] == '[') return ls_ip_parse(host, a) == 6;
    if (!strcmp(host, "*")) return 1;
    return strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") == strlen(host);
}

static int check_endpoint(const char *ep, const char *what) {
    if (endpoint_ok(ep)) return LS_OK;
    return ls_err(LS_EINVAL, "%s: bad endpoint '%s' (tcp://HOST:PORT, ipc://PATH or inproc://NAME)", what, ep);
}

/* Readies sock (NULL: only checks) for endpoint: an IPv6 literal host must be in brackets
 * (libzmq cannot read tcp://::1:5555), and one in brackets needs ZMQ_IPV6 (else libzmq takes
 * it for an interface). */
static int ip_family(void *sock, const char *ep, const char *what) {
    char host[64];
    unsigned char a[16];
    if (!tcp_host(ep, host) || !strchr(host, ':') || !ls_ip_parse(host, a)) return LS_OK;
    if (host[0] != '[')
        return ls_err(LS_EINVAL, "%s: the IPv6 address in %s needs brackets: tcp://[%s]%s", what, ep, host,
                      strrchr(ep + 6, ':'));
    int one = 1;
    if (sock && zmq_setsockopt(sock, ZMQ_IPV6, &one, sizeof one) != 0)
        return ls_err(LS_ENET, "%s: ZMQ_IPV6: %s", what, zmq_strerror(zmq_errno()));
    return LS_OK;
}

int ls_zsec_wanted(const char *endpoint) {
    pthread_mutex_lock(&g_mu);
    int rc = ensure_loaded();
    int force = rc == LS_OK ? g_keys.force : 0;
    pthread_mutex_unlock(&g_mu);
    return force || !is_loopback(endpoint);
}

long ls_zsec_refusals(void) { return __atomic_load_n(&g_refusals, __ATOMIC_ACQUIRE); }

/* ---------------------------------------------------------------- the guard: ZAP + monitors */

typedef struct guard {
    void *zctx, *zap;
    void *mon[MAX_MON];
    char mon_ep[MAX_MON][256];
    int n_mon;
    struct guard *next;
} guard;

static guard *g_guards; /* one per context with a CURVE server socket; under g_mu */
static unsigned g_mon_seq;

/* Kinds of refusal, each rate-limited on its own in the log (a reconnecting stranger would flood it). */
enum { R_NO_CURVE, R_SERVER_KEY, R_NOT_ALLOWED, R_OTHER, R_KINDS };
static long g_kind_count[R_KINDS];

static void refused(int kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refused(int kind, const char *fmt, ...) {
    long n = __atomic_add_fetch(&g_refusals, 1, __ATOMIC_ACQ_REL);
    long k = __atomic_add_fetch(&g_kind_count[kind], 1, __ATOMIC_ACQ_REL);
    if (k > 10 && k % 100) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    LS_WARN("zsec: refused %s (%ld refusal%s so far)", msg, n, n == 1 ? "" : "s");
}

/* Reads one multipart message into up to n frames (copied, NUL-terminated); returns the count. */
static int recv_frames(void *sock, char fr[][256], size_t *len, int n) {
    int k = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (k < n) {
            size_t l = zmq_msg_size(&m) < 255 ? zmq_msg_size(&m) : 255;
            memcpy(fr[k], zmq_msg_data(&m), l);
            fr[k][l] = '\0';
            len[k++] = l;
        }
        zmq_msg_close(&m);
    }
    return k;
}

/* Answers one ZAP request: 200 for a CURVE client on the allow list, 400 otherwise. */
static void zap_answer(guard *g) {
    char fr[7][256];
    size_t len[7];
    int n = recv_frames(g->zap, fr, len, 7);
    if (n < 2) return;
    int ok = 0;
    char who[KEY_Z85 + 1] = "?";
    if (n == 7 && !strcmp(fr[5], "CURVE") && len[6] == 32) {
        zmq_z85_encode(who, (const uint8_t *)fr[6], 32);
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < g_keys.n_allow && !ok; i++) ok = !memcmp(g_keys.allow[i], fr[6], 32);
        pthread_mutex_unlock(&g_mu);
    }
    if (!ok) refused(R_NOT_ALLOWED, "a client from %s: its key %s is not on the allow list", n > 3 ? fr[3] : "?", who);
    const char *status = ok ? "200" : "400", *text = ok ? "OK" : "client key not allowed";
    zmq_send(g->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(g->zap, fr[1], len[1], ZMQ_SNDMORE);
    zmq_send(g->zap, status, 3, ZMQ_SNDMORE);
    zmq_send(g->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(g->zap, ok ? who : "", ok ? KEY_Z85 : 0, ZMQ_SNDMORE);
    zmq_send(g->zap, "", 0, 0);
}

/* Logs a failed handshake seen by a monitor (ZAP refusals were logged by zap_answer). */
static void monitor_event(void *mon) {
    char fr[2][256];
    size_t len[2];
    if (recv_frames(mon, fr, len, 2) < 2 || len[0] < 6) return;
    uint16_t ev;
    uint32_t val;
    memcpy(&ev, fr[0], 2);
    memcpy(&val, fr[0] + 2, 4);
    if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        refused(R_NO_CURVE,
                "a connection on %s that broke off its handshake (typically a client without CURVE keys: %s)", fr[1],
                strerror((int)val));
    else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
        refused(val == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ? R_NO_CURVE
                : val == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC    ? R_SERVER_KEY
                                                                  : R_OTHER,
                "a client on %s: %s (code 0x%x)", fr[1],
                val == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ? "it does not use CURVE (no keys)"
                : val == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC    ? "it does not hold this server's public key"
                                                                  : "handshake failed",
                (unsigned)val);
}

static void *guard_main(void *arg) {
    guard *g = arg;
    for (;;) {
        zmq_pollitem_t it[1 + MAX_MON];
        pthread_mutex_lock(&g_mu);
        int n = 1 + g->n_mon;
        it[0] = (zmq_pollitem_t){g->zap, 0, ZMQ_POLLIN, 0};
        for (int i = 0; i < g->n_mon; i++) it[1 + i] = (zmq_pollitem_t){g->mon[i], 0, ZMQ_POLLIN, 0};
        pthread_mutex_unlock(&g_mu);
        if (zmq_poll(it, n, 100) < 0) {
            if (zmq_errno() == EINTR) continue;
            break; /* ETERM: the context is being terminated */
        }
        if (it[0].revents & ZMQ_POLLIN) zap_answer(g);
        for (int i = 1; i < n; i++)
            if (it[i].revents & ZMQ_POLLIN) monitor_event(it[i].socket);
    }
    pthread_mutex_lock(&g_mu);
    for (guard **p = &g_guards; *p; p = &(*p)->next)
        if (*p == g) {
            *p = g->next;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    zmq_close(g->zap);
    for (int i = 0; i < g->n_mon; i++) zmq_close(g->mon[i]);
    free(g);
    return NULL;
}

/* Starts zctx's guard (ZAP handler) if needed and adds a monitor of sock; caller holds g_mu. */
static int guard_watch(void *zctx, void *sock, const char *what) {
    guard *g = g_guards;
    while (g && g->zctx != zctx) g = g->next;
    if (!g) {
        g = calloc(1, sizeof *g);
        if (!g) return ls_err(LS_ENOMEM, "out of memory");
        g->zctx = zctx;
        g->zap = zmq_socket(zctx, ZMQ_REP);
        int zero = 0;
        if (g->zap) zmq_setsockopt(g->zap, ZMQ_LINGER, &zero, sizeof zero);
        if (!g->zap || zmq_bind(g->zap, "inproc://zeromq.zap.01") != 0) {
            int e = zmq_errno();
            if (g->zap) zmq_close(g->zap);
            free(g);
            return ls_err(LS_ENET, "%s: cannot start the ZAP handler: %s", what, zmq_strerror(e));
        }
        pthread_t th;
        if (pthread_create(&th, NULL, guard_main, g) != 0) {
            zmq_close(g->zap);
            free(g);
            return ls_err(LS_EIO, "%s: cannot start the ZAP handler thread", what);
        }
        pthread_detach(th);
        g->next = g_guards;
        g_guards = g;
    }
    if (g->n_mon == MAX_MON) return LS_OK; /* refusals are still enforced, only not logged */
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://llmsys-zsec-mon-%u", g_mon_seq++);
    void *m = zmq_socket(zctx, ZMQ_PAIR);
    if (!m) return ls_err(LS_ENET, "%s: monitor: %s", what, zmq_strerror(zmq_errno()));
    int zero = 0;
    zmq_setsockopt(m, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_socket_monitor(sock, ep, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0 ||
        zmq_connect(m, ep) != 0) {
        int e = zmq_errno();
        zmq_close(m);
        return ls_err(LS_ENET, "%s: monitor: %s", what, zmq_strerror(e));
    }
    g->mon[g->n_mon++] = m;
    return LS_OK;
}

/* ---------------------------------------------------------------- bind / connect */

static int no_keys(const char *what, const char *verb, const char *ep, const char *need) {
    if (g_keys.path[0])
        return ls_err(LS_EINVAL, "%s: %s %s needs CURVE %s, which %s does not hold", what, verb, ep, need, g_keys.path);
    return ls_err(LS_EINVAL,
                  "%s: refusing to %s %s without CURVE keys (not loopback): make keys with `llmsys keys gen --out DIR` "
                  "and run `llmsys --keys DIR ...` (or set LLMSYS_KEYS), or use 127.0.0.1 or [::1]",
                  what, verb, ep);
}

int ls_zsec_check(const char *endpoint, int bind, const char *what) {
    LS_TRY(ip_family(NULL, endpoint, what));
    LS_TRY(check_endpoint(endpoint, what));
    if (!ls_zsec_wanted(endpoint)) return LS_OK;
    pthread_mutex_lock(&g_mu);
    int rc = ensure_loaded();
    if (rc == LS_OK && bind && !g_keys.srv_sec[0]) rc = no_keys(what, "bind", endpoint, "server keys");
    if (rc == LS_OK && !bind && (!g_keys.cli_sec[0] || !g_keys.srv_pub[0]))
        rc = no_keys(what, "connect to", endpoint, "client keys and the server's public key");
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int ls_zsec_bind(void *zctx, void *sock, const char *endpoint, const char *what) {
    LS_TRY(ls_zsec_check(endpoint, 1, what));
    LS_TRY(ip_family(sock, endpoint, what));
    if (ls_zsec_wanted(endpoint)) {
        pthread_mutex_lock(&g_mu);
        int rc = ensure_loaded(), one = 1;
        if (rc == LS_OK && (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
                            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, g_keys.srv_sec, KEY_Z85) != 0 ||
                            zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "llmsys", 6) != 0))
            rc = ls_err(LS_ENET, "%s: CURVE server options: %s", what, zmq_strerror(zmq_errno()));
        if (rc == LS_OK) rc = guard_watch(zctx, sock, what);
        pthread_mutex_unlock(&g_mu);
        LS_TRY(rc);
    }
    if (zmq_bind(sock, endpoint) != 0)
        return ls_err(LS_ENET, "%s: cannot bind %s: %s", what, endpoint, zmq_strerror(zmq_errno()));
    return LS_OK;
}

int ls_zsec_connect(void *sock, const char *endpoint, const char *what) {
    LS_TRY(ls_zsec_check(endpoint, 0, what));
    LS_TRY(ip_family(sock, endpoint, what));
    if (ls_zsec_wanted(endpoint)) {
        pthread_mutex_lock(&g_mu);
        int rc = ensure_loaded();
        if (rc == LS_OK && (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, g_keys.srv_pub, KEY_Z85) != 0 ||
                            zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, g_keys.cli_pub, KEY_Z85) != 0 ||
                            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, g_keys.cli_sec, KEY_Z85) != 0))
            rc = ls_err(LS_ENET, "%s: CURVE client options: %s", what, zmq_strerror(zmq_errno()));
        pthread_mutex_unlock(&g_mu);
        LS_TRY(rc);
    }
    if (zmq_connect(sock, endpoint) != 0)
        return ls_err(LS_ENET, "%s: cannot connect to %s: %s", what, endpoint, zmq_strerror(zmq_errno()));
    return LS_OK;
}
