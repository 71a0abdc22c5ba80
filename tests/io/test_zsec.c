/* test_zsec.c - CURVE keys and policy (src/io/zsec.c): key files (mode 0600, no silent
 * overwrite, bad files refused with file:line), the loopback policy, a non-loopback bind
 * without keys refused, and a forced-CURVE REQ/REP pair that answers its keyed client while
 * three strangers (no CURVE, a wrong server key, a client key off the allow list) get
 * nothing and are counted as refusals. IPv6: [::] needs keys, an address without brackets
 * is refused naming tcp://[::1]:P, and a plain pair talks over tcp://[::1] (skipped only
 * where ::1 cannot be bound). */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "llmsys/core.h"
#include "llmsys/zsec.h"
#include "test.h"

static char dir[128];

static void test_keygen(void) {
    char f[256];
    CHECK(ls_zsec_keygen(dir, 0) == LS_OK);
    struct stat st;
    snprintf(f, sizeof f, "%s/server.key", dir);
    CHECK(stat(f, &st) == 0 && (st.st_mode & 0777) == 0600);
    snprintf(f, sizeof f, "%s/client.key", dir);
    CHECK(stat(f, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(ls_zsec_keygen(dir, 0) == LS_EINVAL); /* never replaced silently */
    CHECK(strstr(ls_errmsg(), "exists") != NULL);
}

static void test_bad_key_files(void) {
    char f[256];
    snprintf(f, sizeof f, "%s/bad.key", dir);
    FILE *fp = fopen(f, "w");
    fprintf(fp, "# comment\nserver-public = tooshort\n");
    fclose(fp);
    chmod(f, 0600);
    CHECK(ls_zsec_configure(f, 0) == LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "bad.key:2") != NULL, "%s", ls_errmsg());
    /* a secret others can read is refused */
    char srv[256], *text;
    size_t n;
    snprintf(srv, sizeof srv, "%s/server.key", dir);
    CHECK(ls_file_read(srv, &text, &n) == LS_OK);
    CHECK(ls_file_write_atomic(f, text, n) == LS_OK);
    chmod(f, 0644);
    CHECK(ls_zsec_configure(f, 0) == LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "chmod 600") != NULL, "%s", ls_errmsg());
    /* a secret key that does not match its public key is caught */
    char *sec = strstr(text, "server-secret = ");
    CHECK(sec != NULL);
    if (sec) sec[16] = sec[16] == 'a' ? 'b' : 'a';
    CHECK(ls_file_write_atomic(f, text, n) == LS_OK);
    chmod(f, 0600);
    CHECK(ls_zsec_configure(f, 0) == LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "does not belong") != NULL, "%s", ls_errmsg());
    free(text);
    /* a secret the group may read is refused too; the same file at 0600 loads */
    CHECK(ls_file_read(srv, &text, &n) == LS_OK);
    CHECK(ls_file_write_atomic(f, text, n) == LS_OK);
    free(text);
    chmod(f, 0640);
    CHECK(ls_zsec_configure(f, 0) == LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "chmod 600") != NULL, "%s", ls_errmsg());
    chmod(f, 0600);
    CHECK_MSG(ls_zsec_configure(f, 0) == LS_OK, "%s", ls_errmsg());
    /* at most 64 allow lines: 64 load, 65 are refused */
    char cli[256], key[41] = "", *lines = malloc(65 * 64);
    snprintf(cli, sizeof cli, "%s/client.key", dir);
    CHECK(ls_file_read(cli, &text, &n) == LS_OK);
    char *pub = strstr(text, "client-public = ");
    CHECK(pub != NULL);
    if (pub) memcpy(key, pub + 16, 40);
    free(text);
    size_t len = 0;
    for (int i = 0; i < 65; i++) {
        len += (size_t)sprintf(lines + len, "allow = %s\n", key);
        if (i < 63) continue;
        CHECK(ls_file_write_atomic(f, lines, len) == LS_OK);
        int rc = ls_zsec_configure(f, 0);
        CHECK_MSG(i == 63 ? rc == LS_OK : rc == LS_ERANGE && strstr(ls_errmsg(), "more than 64"),
                  "%d allow lines: rc %d (%s)", i + 1, rc, rc ? ls_errmsg() : "loaded");
    }
    free(lines);
    unlink(f);
}

static void test_policy(void) {
    unsetenv("LLMSYS_KEYS");
    unsetenv("LLMSYS_CURVE");
    CHECK(ls_zsec_configure(NULL, 0) == LS_OK);
    CHECK(!ls_zsec_wanted("tcp://127.0.0.1:5555"));
    CHECK(!ls_zsec_wanted("tcp://localhost:5555"));
    CHECK(!ls_zsec_wanted("ipc:///tmp/x"));
    CHECK(!ls_zsec_wanted("inproc://x"));
    CHECK(ls_zsec_wanted("tcp://0.0.0.0:5555"));
    CHECK(ls_zsec_wanted("tcp://*:5555"));
    CHECK(ls_zsec_wanted("tcp://10.1.2.3:5555"));
    CHECK(ls_zsec_wanted("tcp://eth0:5555"));
    CHECK(ls_zsec_wanted("tcp://127.evil.example:5555")); /* a name, not the loopback net */
    CHECK(!ls_zsec_wanted("tcp://127.0.0.2:5555"));
    CHECK(!ls_zsec_wanted("tcp://127.1.2.3:5555")); /* all of 127.0.0.0/8 */
    CHECK(!ls_zsec_wanted("tcp://[::1]:5555"));
    CHECK(!ls_zsec_wanted("tcp://[::ffff:127.0.0.1]:5555"));
    CHECK(ls_zsec_wanted("tcp://[::]:5555"));
    CHECK(ls_zsec_wanted("tcp://[::2]:5555"));
    /* a non-loopback bind or connect without keys is refused before any socket work */
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REP);
    CHECK(ls_zsec_bind(ctx, s, "tcp://0.0.0.0:*", "test") == LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "refusing to bind tcp://0.0.0.0:* without CURVE keys") != NULL, "%s", ls_errmsg());
    CHECK(ls_zsec_connect(s, "tcp://10.1.2.3:5555", "test") == LS_EINVAL);
    /* IPv6: [::] needs keys like 0.0.0.0; one without brackets is refused naming the bracket form */
    CHECK(ls_zsec_bind(ctx, s, "tcp://[::]:*", "test") == LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "refusing to bind tcp://[::]:* without CURVE keys") != NULL, "%s", ls_errmsg());
    CHECK(ls_zsec_wanted("tcp://::1:5555")); /* not taken for loopback */
    CHECK(ls_zsec_bind(ctx, s, "tcp://::1:*", "test") == LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "test: the IPv6 address in tcp://::1:* needs brackets: tcp://[::1]:*") &&
                  !strchr(ls_errmsg(), '\n'),
              "%s", ls_errmsg());
    CHECK(ls_zsec_connect(s, "tcp://fe80::1:5555", "test") == LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "needs brackets: tcp://[fe80::1]:5555") != NULL, "%s", ls_errmsg());
    /* what is not tcp://HOST:PORT, ipc://PATH or inproc://NAME: a bad endpoint, not a key refusal */
    static const char *bad[] = {"",           "abc",          "tcp://",      "tcp://127.0.0.1",
                                "tcp://:5",   "tcp://h:",     "tcp://h:x",   "tcp://h:99999",
                                "tcp://h:-1", "tcp://[::1:5", "tcp://[x]:5", "tcp://a b:5",
                                "http://h:1", "ipc://",       "inproc://"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(ls_zsec_connect(s, bad[i], "test") == LS_EINVAL && strstr(ls_errmsg(), "bad endpoint '") &&
                      !strstr(ls_errmsg(), "CURVE"),
                  "'%s': %s", bad[i], ls_errmsg());
        CHECK_MSG(ls_zsec_bind(ctx, s, bad[i], "test") == LS_EINVAL && strstr(ls_errmsg(), "bad endpoint '"),
                  "'%s': %s", bad[i], ls_errmsg());
    }
    CHECK(ls_zsec_connect(s, "tcp://h.example:5555", "test") == LS_EINVAL); /* a name: no keys */
    CHECK_MSG(strstr(ls_errmsg(), "CURVE") != NULL, "%s", ls_errmsg());
    /* loopback stays plain without keys */
    CHECK(ls_zsec_bind(ctx, s, "tcp://127.0.0.1:*", "test") == LS_OK);
    CHECK(ls_zsec_bind(ctx, s, "inproc://zsec-test", "test") == LS_OK);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* Sends "ping" on a REQ socket and waits up to ms for an answer; 1 if "pong" came back. */
static int ask(void *req, int ms) {
    if (zmq_send(req, "ping", 4, 0) != 4) return 0;
    zmq_pollitem_t it = {req, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0) return 0;
    char buf[8];
    return zmq_recv(req, buf, sizeof buf, 0) == 4 && !memcmp(buf, "pong", 4);
}

/* Answers every ping on rep until "stop" (a thread). */
static void *responder(void *rep) {
    char buf[8];
    for (;;) {
        int n = zmq_recv(rep, buf, sizeof buf, 0);
        if (n < 0) break;
        if (n == 4 && !memcmp(buf, "stop", 4)) {
            zmq_send(rep, "bye", 3, 0);
            break;
        }
        zmq_send(rep, "pong", 4, 0);
    }
    return NULL;
}

/* A stranger REQ socket: srv_pub NULL means no CURVE at all. Returns 1 if it got an answer. */
static int stranger(void *ctx, const char *ep, const char *srv_pub) {
    void *req = zmq_socket(ctx, ZMQ_REQ);
    int zero = 0;
    zmq_setsockopt(req, ZMQ_LINGER, &zero, sizeof zero);
    if (srv_pub) {
        char pub[41], sec[41];
        zmq_curve_keypair(pub, sec);
        zmq_setsockopt(req, ZMQ_CURVE_SERVERKEY, srv_pub, 40);
        zmq_setsockopt(req, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(req, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    zmq_connect(req, ep);
    int got = ask(req, 400);
    zmq_close(req);
    return got;
}

/* Waits (up to 3 s) until the refusal counter exceeds before. */
static long wait_refusal(long before) {
    for (int i = 0; i < 300 && ls_zsec_refusals() <= before; i++) ls_sleep_ms(10);
    return ls_zsec_refusals();
}

/* 1 if ::1 can be bound here; 0 (with a SKIP line) only where IPv6 is off on loopback. */
static int v6_loopback(void) {
    FILE *fp = fopen("/proc/sys/net/ipv6/conf/lo/disable_ipv6", "r");
    int off = fp && fgetc(fp) == '1';
    if (fp) fclose(fp);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = off ? -1 : socket(AF_INET6, SOCK_STREAM, 0), ok = fd >= 0 && bind(fd, (void *)&a, sizeof a) == 0;
    off |= !ok && (fd < 0 ? errno == EAFNOSUPPORT : errno == EADDRNOTAVAIL);
    if (fd >= 0) close(fd);
    if (off) printf("SKIP: ::1 cannot be bound here (IPv6 off): no ZeroMQ IPv6 round trip\n");
    return !off;
}

/* A plain REQ/REP pair over tcp://[::1] (loopback: no keys needed). */
static void test_ipv6_roundtrip(void) {
    unsetenv("LLMSYS_KEYS");
    unsetenv("LLMSYS_CURVE");
    CHECK(ls_zsec_configure(NULL, 0) == LS_OK);
    if (!v6_loopback()) return;
    void *ctx = zmq_ctx_new(), *rep = zmq_socket(ctx, ZMQ_REP), *req = zmq_socket(ctx, ZMQ_REQ);
    int zero = 0, v6 = 0;
    size_t n = sizeof v6;
    zmq_setsockopt(rep, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(req, ZMQ_LINGER, &zero, sizeof zero);
    int ok = ls_zsec_bind(ctx, rep, "tcp://[::1]:*", "test") == LS_OK;
    CHECK_MSG(ok, "%s", ls_errmsg());
    CHECK(zmq_getsockopt(rep, ZMQ_IPV6, &v6, &n) == 0 && v6 == 1);
    char ep[256] = "";
    n = sizeof ep;
    zmq_getsockopt(rep, ZMQ_LAST_ENDPOINT, ep, &n);
    CHECK_MSG(!strncmp(ep, "tcp://[::1]:", 12), "bound %s", ep);
    if (ok) { /* (a REQ without a peer would block in ask) */
        pthread_t th;
        pthread_create(&th, NULL, responder, rep);
        ok = ls_zsec_connect(req, ep, "test") == LS_OK;
        CHECK_MSG(ok, "%s", ls_errmsg());
        CHECK_MSG(ok && ask(req, 5000), "no answer over %s", ep);
        zmq_ctx_shutdown(ctx); /* the responder's zmq_recv returns (ETERM), answered or not */
        pthread_join(th, NULL);
    }
    zmq_close(req);
    zmq_close(rep);
    zmq_ctx_term(ctx);
}

static void test_curve_roundtrip(void) {
    CHECK(ls_zsec_configure(dir, 1) == LS_OK); /* forced on loopback */
    CHECK(ls_zsec_wanted("tcp://127.0.0.1:1") && ls_zsec_wanted("ipc:///tmp/x"));
    CHECK(getenv("LLMSYS_KEYS") && getenv("LLMSYS_KEYS")[0] == '/'); /* exported, absolute */
    void *ctx = zmq_ctx_new(), *rep = zmq_socket(ctx, ZMQ_REP);
    int zero = 0;
    zmq_setsockopt(rep, ZMQ_LINGER, &zero, sizeof zero);
    CHECK(ls_zsec_bind(ctx, rep, "tcp://127.0.0.1:*", "test") == LS_OK);
    char ep[256];
    size_t n = sizeof ep;
    zmq_getsockopt(rep, ZMQ_LAST_ENDPOINT, ep, &n);
    pthread_t th;
    pthread_create(&th, NULL, responder, rep);

    void *cctx = zmq_ctx_new(), *req = zmq_socket(cctx, ZMQ_REQ);
    zmq_setsockopt(req, ZMQ_LINGER, &zero, sizeof zero);
    CHECK(ls_zsec_connect(req, ep, "test") == LS_OK);
    CHECK_MSG(ask(req, 5000), "the keyed client got no answer");

    /* strangers: none is answered, each handshake is refused and counted */
    char srv_pub[41] = {0}, *text;
    size_t len;
    char f[256];
    snprintf(f, sizeof f, "%s/client.key", dir);
    CHECK(ls_file_read(f, &text, &len) == LS_OK);
    char *p = strstr(text, "server-public = ");
    if (p) memcpy(srv_pub, p + 16, 40);
    free(text);
    char wrong_pub[41], wrong_sec[41];
    zmq_curve_keypair(wrong_pub, wrong_sec);
    long r0 = ls_zsec_refusals();
    CHECK_MSG(!stranger(cctx, ep, NULL), "a client without CURVE was answered");
    long r1 = wait_refusal(r0);
    CHECK_MSG(r1 > r0, "no refusal counted for a client without CURVE");
    CHECK_MSG(!stranger(cctx, ep, wrong_pub), "a client with a wrong server key was answered");
    long r2 = wait_refusal(r1);
    CHECK_MSG(r2 > r1, "no refusal counted for a wrong server key");
    CHECK_MSG(!stranger(cctx, ep, srv_pub), "a client key off the allow list was answered");
    long r3 = wait_refusal(r2);
    CHECK_MSG(r3 > r2, "no refusal counted for a client key off the allow list");
    /* the keyed client still works afterwards */
    CHECK(ask(req, 5000));
    zmq_send(req, "stop", 4, 0);
    char buf[8];
    zmq_recv(req, buf, sizeof buf, 0);
    pthread_join(th, NULL);
    zmq_close(req);
    zmq_ctx_term(cctx);
    zmq_close(rep);
    zmq_ctx_term(ctx); /* also ends the ZAP handler: must not hang */
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys_test_zsec_%d", (int)getpid());
    RUN(test_keygen);
    RUN(test_bad_key_files);
    RUN(test_policy);
    RUN(test_ipv6_roundtrip);
    RUN(test_curve_roundtrip);
    char f[256];
    snprintf(f, sizeof f, "%s/server.key", dir);
    unlink(f);
    snprintf(f, sizeof f, "%s/client.key", dir);
    unlink(f);
    rmdir(dir);
    return TEST_RESULT();
}
