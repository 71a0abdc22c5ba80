/* test_api.c - the victim HTTP API: valid answers, every kind of bad request gets a 4xx JSON
 * error while the server keeps serving, budget and rate limit; the attacker's client
 * against unreachable, silent and misbehaving targets. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cblas.h>
#include <cjson/cJSON.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "http_test.h"
#include "steal_test.h"
#include "test.h"

/* Raw HTTP POST as client "raw" (so malformed bodies can be sent); the status, reply in out. */
static int raw_post(int port, const char *path, const char *body, size_t blen, char *out, size_t outsz) {
    return raw_http(port, "POST", path, "raw", body, blen, out, outsz);
}

static ls_victim *victim;
static ls_steal_data tr, te;

/* A /predict body of `rows` blobs-shaped rows (20 features, every one 0.5); its length. */
static int rows_body(char *buf, size_t cap, int rows) {
    int n = snprintf(buf, cap, "{\"inputs\":[");
    for (int i = 0; i < rows; i++) {
        n += snprintf(buf + n, cap - (size_t)n, "%s[", i ? "," : "");
        for (int j = 0; j < 20; j++) n += snprintf(buf + n, cap - (size_t)n, "%s0.5", j ? "," : "");
        n += snprintf(buf + n, cap - (size_t)n, "]");
    }
    return n + snprintf(buf + n, cap - (size_t)n, "]}");
}

static void setup(void) {
    CHECK_EQ_INT(ls_steal_dataset_open("blobs", 1000, &tr, &te), LS_OK);
    ls_victim_opts o;
    ls_victim_opts_default(&o, LS_VICTIM_LOGREG);
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &victim), LS_OK);
}

static int client_for(ls_victim_server *s, const char *key, ls_steal_client **c) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(s));
    return ls_steal_client_init(url, key, 5, te.d, te.k, c);
}

static void set_delta_one(ls_victim_server_opts *o) { o->prada.delta = 1; }
static void set_burst_half(ls_victim_server_opts *o) { o->burst = 0.5; }
static void set_throttle_neg(ls_victim_server_opts *o) { o->throttle_s = -1; }
static void set_admin_empty(ls_victim_server_opts *o) { o->admin_key = ""; }
static void set_batch_zero(ls_victim_server_opts *o) { o->max_batch = 0; }

static void test_validation(void) {
    ls_victim_server_opts so = scaled_server_opts();
    so.max_batch = 8;
    so.max_body = 20000;
    so.output_proba = 1;
    ls_victim_server *s;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    int port = ls_victim_server_port(s);
    CHECK(port > 0);
    ls_steal_client *c;
    CHECK_EQ_INT(client_for(s, "alice", &c), LS_OK);
    int32_t lab[8], want[8];
    float p[8 * 64];
    int gp = 0;
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 8, lab, p, &gp), LS_OK);
    CHECK_EQ_INT(gp, 1);
    ls_victim_predict(victim, te.x, 8, want);
    CHECK(memcmp(lab, want, sizeof lab) == 0);
    double s0 = 0;
    for (int j = 0; j < te.k; j++) s0 += p[j];
    CHECK_NEAR(s0, 1.0, 1e-4);
    /* Bad requests: each a 4xx JSON error. */
    char out[65536];
    const char *bodies[] = {
        "{\"inputs\": [[1,2,",                                           /* malformed JSON */
        "{\"x\": []}",                                                   /* wrong key */
        "{\"inputs\": []}",                                              /* empty batch */
        "{\"inputs\": [[0.5, 0.5]]}",                                    /* wrong shape */
        "{\"inputs\": [\"abc\"]}",                                       /* not an array */
        "{\"inputs\": [[NaN,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}",   /* NaN is not JSON */
        "{\"inputs\": [[1e999,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}", /* infinite */
        "{\"inputs\": [[7,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}",     /* out of range */
        "{\"inputs\": [[\"a\",0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}", /* string value */
    };
    int codes[] = {400, 400, 400, 422, 422, 400, 422, 422, 422};
    for (int i = 0; i < (int)(sizeof codes / sizeof codes[0]); i++) {
        int st = raw_post(port, "/predict", bodies[i], strlen(bodies[i]), out, sizeof out);
        CHECK_MSG(st == codes[i], "body %d: status %d, expected %d (%s)", i, st, codes[i], out);
        CHECK(strstr(out, "\"error\"") != NULL);
    }
    /* The range's tolerance is 1e-4 of its span: a value inside it is answered as the bound
     * itself (probabilities and all), one twice as far out is refused. */
    float lo, hi;
    CHECK_EQ_INT(ls_victim_server_input_range(s, &lo, &hi), 0);
    double eps = 1e-4 * (hi - lo);
    char at[2048], near[2048], far[2048], got_at[65536];
    int la = 0, ln = 0, lf = 0;
    la += snprintf(at, sizeof at, "{\"inputs\":[["), ln += snprintf(near, sizeof near, "{\"inputs\":[[");
    lf += snprintf(far, sizeof far, "{\"inputs\":[[");
    for (int j = 0; j < 20; j++) {
        la += snprintf(at + la, sizeof at - (size_t)la, "%s%.9g", j ? "," : "", (double)hi);
        ln += snprintf(near + ln, sizeof near - (size_t)ln, "%s%.9g", j ? "," : "", hi + 0.5 * eps);
        lf += snprintf(far + lf, sizeof far - (size_t)lf, "%s%.9g", j ? "," : "", hi + 2 * eps);
    }
    la += snprintf(at + la, sizeof at - (size_t)la, "]]}"), ln += snprintf(near + ln, sizeof near - (size_t)ln, "]]}");
    lf += snprintf(far + lf, sizeof far - (size_t)lf, "]]}");
    CHECK_EQ_INT(raw_post(port, "/predict", at, (size_t)la, got_at, sizeof got_at), 200);
    CHECK_EQ_INT(raw_post(port, "/predict", near, (size_t)ln, out, sizeof out), 200);
    const char *pa = strstr(got_at, "{\"labels\""), *pn = strstr(out, "{\"labels\"");
    CHECK_MSG(pa && pn && !strcmp(pa, pn), "%.9g answered otherwise than the bound %.9g: %s against %s", hi + 0.5 * eps,
              (double)hi, pn ? pn : out, pa ? pa : got_at);
    CHECK_EQ_INT(raw_post(port, "/predict", far, (size_t)lf, out, sizeof out), 422);
    /* Too many inputs (413), oversized body (413), unknown endpoint (404). */
    char big[4096];
    int n = rows_body(big, sizeof big, 9);
    CHECK_EQ_INT(raw_post(port, "/predict", big, (size_t)n, out, sizeof out), 413);
    char *huge = malloc(30000);
    memset(huge, ' ', 30000);
    CHECK_EQ_INT(raw_post(port, "/predict", huge, 30000, out, sizeof out), 413);
    free(huge);
    CHECK_EQ_INT(raw_post(port, "/nope", "{}", 2, out, sizeof out), 404);
    /* Out-of-range values through the client are refused too, and the server still serves. */
    float bad[20];
    for (int j = 0; j < 20; j++) bad[j] = 2.0f;
    CHECK_EQ_INT(ls_steal_client_query(c, bad, 1, lab, NULL, NULL), LS_EPEER);
    CHECK(strstr(ls_errmsg(), "422") != NULL);
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 8, lab, NULL, NULL), LS_OK);
    int st;
    char *body = NULL;
    CHECK_EQ_INT(ls_steal_client_get(c, "/info", &st, &body), LS_OK);
    CHECK_EQ_INT(st, 200);
    CHECK(body && strstr(body, "\"classes\":5") != NULL);
    free(body);
    ls_steal_client_free(c);
    ls_victim_server_stop(s);
}

static void test_budget_rate(void) {
    ls_victim_key keys[2] = {{"bob", "bob", 0}, {"carol", "carol", 0}};
    ls_victim_server_opts so = scaled_server_opts();
    so.keys = keys;
    so.budget = 100;
    so.admin_key = "admin";
    so.n_keys = 2;
    char logp[128];
    snprintf(logp, sizeof logp, "/tmp/llmsys-steal-api-%d.log", (int)getpid());
    so.log_path = logp;
    ls_victim_server *s;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    ls_steal_client *c, *c2, *adm;
    CHECK_EQ_INT(client_for(s, "bob", &c), LS_OK);
    CHECK_EQ_INT(client_for(s, "carol", &c2), LS_OK);
    CHECK_EQ_INT(client_for(s, "admin", &adm), LS_OK);
    int32_t lab[256];
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 60, lab, NULL, NULL), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 60, lab, NULL, NULL), LS_EBUSY);
    CHECK(strstr(ls_errmsg(), "budget") != NULL);
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 40, lab, NULL, NULL), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 1, lab, NULL, NULL), LS_EBUSY);
    /* Budgets are per client; the admin key is exempt. */
    CHECK_EQ_INT(ls_steal_client_query(c2, te.x, 100, lab, NULL, NULL), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(adm, te.x, 200, lab, NULL, NULL), LS_OK);
    int64_t q;
    CHECK_EQ_INT(ls_victim_server_client(s, "key:bob", &q, NULL, NULL), LS_OK);
    CHECK_EQ_INT(q, 100);
    /* the admin's view: bob asked 4 times, was refused twice and has none left; carol once */
    cJSON *stats = ls_victim_server_stats(s), *cl;
    int seen = 0;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItem(stats, "clients")) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "client"));
        int bob = id && !strcmp(id, "key:bob"), carol = id && !strcmp(id, "key:carol");
        if (!bob && !carol) continue;
        seen++;
        CHECK_EQ_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cl, "queries")), 100);
        CHECK_EQ_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cl, "requests")), bob ? 4 : 1);
        CHECK_EQ_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cl, "rejected")), bob ? 2 : 0);
        CHECK_EQ_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cl, "budget_left")), 0);
    }
    CHECK_EQ_INT(seen, 2);
    cJSON_Delete(stats);
    ls_steal_client_free(c);
    ls_steal_client_free(c2);
    ls_steal_client_free(adm);
    ls_victim_server_stop(s);
    char *log;
    size_t len;
    CHECK_EQ_INT(ls_file_read(logp, &log, &len), LS_OK);
    CHECK(strstr(log, "\"status\":403") != NULL && strstr(log, "key:bob") != NULL);
    free(log);
    remove(logp);

    /* Rate limit: 100 inputs/s, bucket 100. */
    so = scaled_server_opts();
    so.rate_qps = 100;
    so.burst = 100;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    char body[8192];
    int n = rows_body(body, sizeof body, 60);
    char out[16384];
    int port = ls_victim_server_port(s);
    CHECK_EQ_INT(raw_post(port, "/predict", body, (size_t)n, out, sizeof out), 200);
    CHECK_EQ_INT(raw_post(port, "/predict", body, (size_t)n, out, sizeof out), 429);
    CHECK(strstr(out, "Retry-After") != NULL);
    /* at least 40 of the 100 are left, so the 60 need at most 0.2 s more */
    const char *ra = strstr(out, "retry after ");
    CHECK_MSG(ra && atof(ra + 12) <= 0.2 + 1e-9, "%s", out);
    /* The client waits as told and gets through. */
    CHECK_EQ_INT(client_for(s, "raw", &c), LS_OK);
    double t0 = ls_now();
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 60, lab, NULL, NULL), LS_OK);
    CHECK(ls_now() - t0 < 5);
    ls_steal_client_free(c);
    ls_victim_server_stop(s);
    /* a request larger than the bucket (30 inputs, bucket 10) is not refused for ever: the
     * bucket fills up to the request's size (100 inputs/s: 0.2 s) */
    so.burst = 10;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    port = ls_victim_server_port(s);
    n = rows_body(body, sizeof body, 30);
    CHECK_EQ_INT(raw_post(port, "/predict", body, (size_t)n, out, sizeof out), 429);
    ls_sleep_ms(350);
    CHECK_EQ_INT(raw_post(port, "/predict", body, (size_t)n, out, sizeof out), 200);
    ls_victim_server_stop(s);
}

/* PRADA modes in the server: a client repeating near-identical inputs is flagged; REFUSE then
 * answers 403, THROTTLE slows it to 429s, LOG keeps answering. Natural rows are not flagged. */
static void test_prada_modes(void) {
    int modes[3] = {LS_PRADA_LOG, LS_PRADA_THROTTLE, LS_PRADA_REFUSE};
    float *x = malloc(sizeof(float) * 50 * (size_t)te.d);
    int32_t lab[50];
    for (int m = 0; m < 3; m++) {
        ls_victim_server_opts so = scaled_server_opts();
        so.prada_mode = modes[m];
        so.throttle_s = 1.0;
        if (modes[m] == LS_PRADA_THROTTLE) /* flagged: a tenth of 20/s, under 1 / 0.25 s */
            so.rate_qps = 20, so.throttle_s = 0.25;
        so.admin_key = "adm";
        /* On a table, natural traffic's W runs 0.92-0.95 here (PRADA's published 0.95 flags
         * most natural table clients, see docs/steal.md); 0.90 still separates the bimodal
         * stream below (W 0.73-0.79) from the natural one. */
        so.prada.delta = 0.90;
        ls_victim_key keys[2] = {{"raw", "raw", 0}, {"natural", "natural", 0}}; /* two identities */
        so.keys = keys;
        so.n_keys = 2;
        ls_victim_server *s;
        CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
        ls_steal_client *c, *good;
        CHECK_EQ_INT(client_for(s, "raw", &c), LS_OK); /* same identity as raw_post */
        CHECK_EQ_INT(client_for(s, "natural", &good), LS_OK);
        ls_rng r;
        ls_rng_seed(&r, 9);
        int rc = LS_OK;
        /* Half near-duplicates of one point, half spread out: a bimodal distance set. */
        int64_t fa0 = -1;
        for (int req = 0; req < 8 && rc == LS_OK && fa0 < 0; req++) {
            for (int i = 0; i < 50; i++)
                for (int j = 0; j < te.d; j++)
                    x[i * te.d + j] = i % 2 ? ls_rng_uniform(&r) : 0.5f + 0.001f * ls_rng_uniform(&r);
            rc = ls_steal_client_query(c, x, 50, lab, NULL, NULL);
            ls_victim_server_client(s, "key:raw", NULL, &fa0, NULL);
        }
        CHECK_EQ_INT(rc, LS_OK); /* the request that gets a client flagged is still answered */
        if (m == 0) {            /* the admin's queries are not watched: the same stream leaves it unflagged */
            ls_steal_client *adm;
            CHECK_EQ_INT(client_for(s, "adm", &adm), LS_OK);
            ls_rng_seed(&r, 9);
            for (int req = 0; req < 8; req++) {
                for (int i = 0; i < 50; i++)
                    for (int j = 0; j < te.d; j++)
                        x[i * te.d + j] = i % 2 ? ls_rng_uniform(&r) : 0.5f + 0.001f * ls_rng_uniform(&r);
                CHECK_EQ_INT(ls_steal_client_query(adm, x, 50, lab, NULL, NULL), LS_OK);
            }
            int64_t fa_adm = 0;
            CHECK_EQ_INT(ls_victim_server_client(s, "admin", NULL, &fa_adm, NULL), LS_OK);
            CHECK_EQ_INT(fa_adm, -1);
            ls_steal_client_free(adm);
        }
        /* One more request after the flag (THROTTLE is checked raw below: the client would wait). */
        if (modes[m] != LS_PRADA_THROTTLE) rc = ls_steal_client_query(c, x, 50, lab, NULL, NULL);
        for (int64_t s0 = 0; s0 + 50 <= 300; s0 += 50)
            CHECK_EQ_INT(ls_steal_client_query(good, te.x + s0 * te.d, 50, lab, NULL, NULL), LS_OK);
        int64_t fa = -1, fa_good = -1;
        ls_victim_server_client(s, "key:raw", NULL, &fa, NULL);
        ls_victim_server_client(s, "key:natural", NULL, &fa_good, NULL);
        CHECK_MSG(fa > 0, "mode %d: bimodal queries not flagged", modes[m]);
        CHECK_EQ_INT(fa_good, -1);
        if (modes[m] == LS_PRADA_LOG) CHECK_EQ_INT(rc, LS_OK);
        if (modes[m] == LS_PRADA_REFUSE) {
            CHECK_EQ_INT(rc, LS_EBUSY);
            CHECK(strstr(ls_errmsg(), "refused") != NULL);
        }
        if (modes[m] == LS_PRADA_THROTTLE) {
            /* Flagged: refill at 1 input/s, so a 50-input request is answered 429. */
            char body[8192], out[4096];
            int n = snprintf(body, sizeof body, "{\"inputs\":[");
            for (int i = 0; i < 50; i++) {
                n += snprintf(body + n, sizeof body - (size_t)n, "%s[", i ? "," : "");
                for (int j = 0; j < te.d; j++) n += snprintf(body + n, sizeof body - (size_t)n, "%s0.25", j ? "," : "");
                n += snprintf(body + n, sizeof body - (size_t)n, "]");
            }
            n += snprintf(body + n, sizeof body - (size_t)n, "]}");
            CHECK_EQ_INT(raw_post(ls_victim_server_port(s), "/predict", body, (size_t)n, out, sizeof out), 429);
            CHECK_MSG(strstr(out, "rate limit: 2 inputs/s (throttled") != NULL, "%s", out);
        }
        ls_steal_client_free(c);
        ls_steal_client_free(good);
        ls_victim_server_stop(s);
    }
    free(x);
}

/* A fake target: answers every connection with a canned reply (or nothing). */
typedef struct {
    int fd, conns;
    const char *reply; /* NULL: read the request and stay silent for 1.5 s */
} fake_t;

static void *fake_main(void *arg) {
    fake_t *f = arg;
    for (int i = 0; i < f->conns; i++) {
        int c = accept(f->fd, NULL, NULL);
        if (c < 0) break;
        /* Read the whole request (headers, then Content-Length bytes of body) before
         * answering: closing a socket with unread input makes the kernel send a reset, and
         * the client would then see "connection reset" instead of the reply under test. */
        static char buf[1 << 20];
        size_t got = 0, need = 0;
        for (;;) {
            ssize_t r = recv(c, buf + got, sizeof buf - 1 - got, 0);
            if (r <= 0) break;
            got += (size_t)r;
            buf[got] = '\0';
            char *end = strstr(buf, "\r\n\r\n");
            if (!end) continue;
            if (!need) {
                const char *cl = strcasestr(buf, "content-length:");
                need = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
            }
            if (got >= need) break;
        }
        if (f->reply) {
            if (send(c, f->reply, strlen(f->reply), MSG_NOSIGNAL) < 0) perror("send");
        } else {
            ls_sleep_ms(3000); /* past the client's bound below: a timeout, not a close */
        }
        close(c);
    }
    return NULL;
}

static int fake_start(fake_t *f, pthread_t *th) {
    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    if (bind(f->fd, (struct sockaddr *)&a, sizeof a) || listen(f->fd, 4) ||
        getsockname(f->fd, (struct sockaddr *)&a, &sl))
        return -1;
    pthread_create(th, NULL, fake_main, f);
    return ntohs(a.sin_port);
}

static void test_bad_targets(void) {
    ls_steal_client *c;
    int32_t lab[4];
    float p[4 * 5];
    /* Unreachable: a port nobody listens on (bound then closed). */
    fake_t f0 = {0};
    pthread_t th;
    f0.conns = 0;
    int port = fake_start(&f0, &th);
    pthread_join(th, NULL);
    close(f0.fd);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", port);
    CHECK_EQ_INT(ls_steal_client_init(url, NULL, 2, te.d, te.k, &c), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 4, lab, NULL, NULL), LS_ENET);
    CHECK(strstr(ls_errmsg(), "unreachable") != NULL);
    ls_steal_client_free(c);
    CHECK_EQ_INT(ls_steal_client_init("ftp://x/predict", NULL, 2, te.d, te.k, &c), LS_EINVAL);
    /* an IPv6 host in brackets, nothing but a port after them; without brackets it is refused */
    const char *bad_urls[] = {
        "http://[::1/predict",      "http://[::1]x/predict",   "http://[::1]:/predict", "http://[127.0.0.1]:80/predict",
        "http://[::zz]:80/predict", "http://::1:8080/predict", "http://::1/predict"};
    for (int i = 0; i < 7; i++) {
        CHECK_MSG(ls_steal_client_init(bad_urls[i], NULL, 2, te.d, te.k, &c) == LS_EINVAL, "%s", bad_urls[i]);
        CHECK_MSG(strstr(ls_errmsg(), bad_urls[i]) != NULL, "%s", ls_errmsg());
    }
    CHECK_EQ_INT(ls_steal_client_init("http://[::1]/predict", NULL, 2, te.d, te.k, &c), LS_OK); /* port 80 */
    ls_steal_client_free(c);
    /* Misbehaving replies. */
    const char *replies[] = {
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>hello</html>",
        "HTTP/1.1 200 OK\r\n\r\n{\"labels\":[0,1,2,3],\"probs\":[[1,0],[1,0],[1,0],[1,0]]}",
        "HTTP/1.1 200 OK\r\n\r\n{\"labels\":[0,1,9,3]}",
        "HTTP/1.1 200 OK\r\n\r\n{\"labels\":[0,1]}",
        "garbage",
        "HTTP/1.1 500 Internal Server Error\r\n\r\n{\"error\":\"boom\"}",
    };
    const char *expect[] = {"non-JSON", "expected 5 classes", "outside the 5", "lacks", "not an HTTP", "boom"};
    for (int i = 0; i < 6; i++) {
        fake_t f = {0};
        f.conns = 1;
        f.reply = replies[i];
        port = fake_start(&f, &th);
        snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", port);
        CHECK_EQ_INT(ls_steal_client_init(url, NULL, 2, te.d, te.k, &c), LS_OK);
        CHECK(ls_steal_client_query(c, te.x, 4, lab, p, NULL) < 0);
        CHECK_MSG(strstr(ls_errmsg(), expect[i]) != NULL, "reply %d: message '%s'", i, ls_errmsg());
        ls_steal_client_free(c);
        pthread_join(th, NULL);
        close(f.fd);
    }
    /* Silent target: the timeout fires. */
    fake_t fs = {0};
    fs.conns = 1;
    port = fake_start(&fs, &th);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", port);
    CHECK_EQ_INT(ls_steal_client_init(url, NULL, 0.3, te.d, te.k, &c), LS_OK);
    double t0 = ls_now();
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 4, lab, NULL, NULL), LS_ETIMEDOUT);
    CHECK_MSG(ls_now() - t0 < 2.5, "a 0.3 s timeout took %.1f s", ls_now() - t0);
    ls_steal_client_free(c);
    pthread_join(th, NULL);
    close(fs.fd);
}

/* A key file: per-key budgets, unknown or missing keys 401, /stats only with the admin key
 * and without any secret in it. (Before: /stats open to all and listing every key.) */
static void test_keys(void) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/llmsys-steal-keys-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    fprintf(f, "# name secret budget\nbob   bob-secret-1 30\ncarol carol-secret-2   # the default budget\n");
    fclose(f);
    ls_victim_key *keys;
    int nk;
    CHECK_EQ_INT(ls_victim_keys_read(path, &keys, &nk), LS_OK);
    CHECK_EQ_INT(nk, 2);
    CHECK(!strcmp(keys[1].name, "carol") && !strcmp(keys[1].secret, "carol-secret-2") && keys[1].budget == 0);
    free(keys);
    ls_victim_server_opts so = scaled_server_opts();
    so.budget = 50;
    so.admin_key = "the-admin-secret";
    so.keys_path = path; /* read by the server, as `victim serve --keys` does */
    ls_victim_server *s;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    ls_steal_client *bob, *carol, *eve, *anon;
    CHECK_EQ_INT(client_for(s, "bob-secret-1", &bob), LS_OK);
    CHECK_EQ_INT(client_for(s, "carol-secret-2", &carol), LS_OK);
    CHECK_EQ_INT(client_for(s, "bob", &eve), LS_OK); /* a key's name is not its secret */
    CHECK_EQ_INT(client_for(s, NULL, &anon), LS_OK);
    int32_t lab[64];
    CHECK_EQ_INT(ls_steal_client_query(bob, te.x, 30, lab, NULL, NULL), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(bob, te.x, 1, lab, NULL, NULL), LS_EBUSY);
    CHECK_EQ_INT(ls_steal_client_query(carol, te.x, 50, lab, NULL, NULL), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(carol, te.x, 1, lab, NULL, NULL), LS_EBUSY);
    CHECK(ls_steal_client_query(eve, te.x, 1, lab, NULL, NULL) != LS_OK);
    CHECK(strstr(ls_errmsg(), "401") != NULL);
    CHECK(ls_steal_client_query(anon, te.x, 1, lab, NULL, NULL) != LS_OK);
    CHECK(strstr(ls_errmsg(), "401") != NULL);
    char out[65536];
    int port = ls_victim_server_port(s);
    CHECK_EQ_INT(raw_get(port, "/stats", NULL, out, sizeof out), 401);
    CHECK_EQ_INT(raw_get(port, "/stats", "bob-secret-1", out, sizeof out), 401);
    CHECK_EQ_INT(raw_get(port, "/stats", "the-admin-secret", out, sizeof out), 200);
    CHECK(strstr(out, "key:bob") != NULL && strstr(out, "key:carol") != NULL);
    CHECK_MSG(!strstr(out, "secret"), "/stats shows a secret: %s", out);
    CHECK_EQ_INT(raw_get(port, "/info", NULL, out, sizeof out), 200);
    ls_steal_client_free(bob);
    ls_steal_client_free(carol);
    ls_steal_client_free(eve);
    ls_steal_client_free(anon);
    ls_victim_server_stop(s);
    /* malformed key files: one clear error each */
    const char *bad[] = {"bob\n", "bob short\n", "bob bob-secret-1 -5\n", "bob bob-secret-1 7x\n",
                         "bob bob-secret-1\nbob other-secret\n", "a b c d e\n", "# only a comment\n"};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        CHECK_MSG(ls_victim_keys_read(path, &keys, &nk) == LS_EFORMAT, "key file %d accepted", i);
    }
    remove(path);
}

/* Without a key file the budget is per source address: invented keys share it. (Before:
 * each X-API-Key got its own budget.) */
static void test_no_key_multiplying(void) {
    ls_victim_server_opts so = scaled_server_opts();
    so.budget = 40;
    ls_victim_server *s;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    int32_t lab[64];
    int ok = 0;
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "invented-%d", i);
        ls_steal_client *c;
        CHECK_EQ_INT(client_for(s, key, &c), LS_OK);
        ok += ls_steal_client_query(c, te.x, 20, lab, NULL, NULL) == LS_OK;
        ls_steal_client_free(c);
    }
    CHECK_EQ_INT(ok, 2);
    int64_t q;
    CHECK_EQ_INT(ls_victim_server_client(s, "addr:127.0.0.1", &q, NULL, NULL), LS_OK);
    CHECK_EQ_INT(q, 40);
    ls_victim_server_stop(s);
}

/* 127.0.0.1 by default (not reachable on another local address); 300 half-open connections
 * from one address leave another client's requests answered at once. (Before: all
 * interfaces, and 256 half-open connections locked every client out for 30 s.) */
static void test_bind_and_flood(void) {
    ls_victim_server_opts so = scaled_server_opts();
    ls_victim_server *s;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    int port = ls_victim_server_port(s);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
    CHECK_MSG(connect(fd, (struct sockaddr *)&a, sizeof a) != 0, "reachable on 127.0.0.2: not bound to 127.0.0.1");
    close(fd);
    int fds[300];
    int n = half_open("127.0.0.2", port, fds, 300);
    CHECK_EQ_INT(n, 300);
    ls_sleep_ms(200);
    char out[8192];
    double t0 = ls_now();
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(raw_get(port, "/info", NULL, out, sizeof out), 200);
    double dt = ls_now() - t0;
    CHECK_MSG(dt < 4.0, "5 requests took %.1f s during the flood", dt);
    ls_steal_client *c;
    CHECK_EQ_INT(client_for(s, NULL, &c), LS_OK);
    int32_t lab[8];
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 8, lab, NULL, NULL), LS_OK);
    ls_steal_client_free(c);
    for (int i = 0; i < n; i++) close(fds[i]);
    ls_victim_server_stop(s);
    /* a bad bind address is a clear error */
    so.bind = "not-an-address";
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "not-an-address") != NULL);
    /* off loopback only with API keys: anyone reaching the port could query it otherwise */
    so.bind = "0.0.0.0";
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "refusing to listen on 0.0.0.0 without authentication") &&
                  strstr(ls_errmsg(), "--keys"),
              "%s", ls_errmsg());
    ls_victim_key keys[1] = {{"dave", "dave-secret", 0}};
    so.keys = keys, so.n_keys = 1;
    CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_OK);
    port = ls_victim_server_port(s);
    CHECK_EQ_INT(raw_http(port, "POST", "/predict", NULL, "{}", 2, out, sizeof out), 401);
    CHECK_EQ_INT(raw_http(port, "POST", "/predict", "dave-secre", "{}", 2, out, sizeof out), 401);
    CHECK_EQ_INT(client_for(s, "dave-secret", &c), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, 8, lab, NULL, NULL), LS_OK);
    ls_steal_client_free(c);
    ls_victim_server_stop(s);
}

/* IPv6 binds: a garbage address is one clear error; "::" (and any other address off
 * loopback) needs API keys; "::1", bare or in brackets, and "::" with keys serve the client
 * over IPv6 only (not also on 127.0.0.1: no dual stack). The serving part is skipped where
 * ::1 cannot be bound. */
static void test_bind_v6(void) {
    ls_victim_server_opts so = scaled_server_opts();
    ls_victim_server *s;
    const char *bad[] = {"::zz", "1.2.3", "[127.0.0.1]", "[::1", "::1%lo"};
    for (int i = 0; i < 5; i++) {
        so.bind = bad[i];
        CHECK_MSG(ls_victim_server_start(victim, &so, &s) == LS_EINVAL, "%s", bad[i]);
        CHECK_MSG(strstr(ls_errmsg(), "bad bind address") && strstr(ls_errmsg(), bad[i]) &&
                      strstr(ls_errmsg(), "IPv4 or IPv6"),
                  "%s", ls_errmsg());
    }
    const char *open[] = {"::", "[::]", "fe80::1", "::ffff:10.1.2.3"};
    for (int i = 0; i < 4; i++) {
        so.bind = open[i];
        char want[128];
        snprintf(want, sizeof want, "refusing to listen on %s without authentication", open[i]);
        CHECK_MSG(ls_victim_server_start(victim, &so, &s) == LS_EINVAL, "%s", open[i]);
        CHECK_MSG(strstr(ls_errmsg(), want) && strstr(ls_errmsg(), "--keys"), "%s", ls_errmsg());
    }
    if (!v6_loopback_ok()) {
        printf("SKIP: ::1 cannot be bound here (IPv6 off): no IPv6 serving check\n");
        return;
    }
    const char *lo[] = {"::1", "[::1]", "::"};
    ls_victim_key keys[1] = {{"dave", "dave-secret", 0}};
    for (int i = 0; i < 3; i++) {
        so.bind = lo[i];
        if (i == 2) so.keys = keys, so.n_keys = 1;
        int rc = ls_victim_server_start(victim, &so, &s);
        CHECK_MSG(rc == LS_OK, "%s: %s", lo[i], ls_errmsg());
        if (rc != LS_OK) continue;
        int port = ls_victim_server_port(s);
        CHECK_MSG(port > 0, "%s: port %d", lo[i], port);
        char url[128];
        snprintf(url, sizeof url, "http://[::1]:%d/predict", port);
        ls_steal_client *c;
        CHECK_EQ_INT(ls_steal_client_init(url, so.n_keys ? "dave-secret" : NULL, 5, te.d, te.k, &c), LS_OK);
        int32_t lab[8], want[8];
        CHECK_MSG(ls_steal_client_query(c, te.x, 8, lab, NULL, NULL) == LS_OK, "%s: %s", url, ls_errmsg());
        ls_victim_predict(victim, te.x, 8, want);
        CHECK(memcmp(lab, want, sizeof lab) == 0);
        char out[4096];
        CHECK_MSG(raw_get(port, "/info", NULL, out, sizeof out) == -1, "%s: reachable on 127.0.0.1 too", lo[i]);
        ls_victim_server_stop(s);
        /* the client's messages write the address as a URL does */
        char msg[64];
        snprintf(msg, sizeof msg, "target [::1]:%d unreachable", port);
        CHECK_EQ_INT(ls_steal_client_query(c, te.x, 8, lab, NULL, NULL), LS_ENET);
        CHECK_MSG(strstr(ls_errmsg(), msg), "%s", ls_errmsg());
        ls_steal_client_free(c);
    }
}

/* The library refuses what the CLI refuses (ls_victim_server_opts_check, ls_victim_serve_check,
 * ls_steal_opts_fit, ls_steal_eval_opts_check), each naming the flag, with nothing started. */
static void test_option_checks(void) {
    struct {
        const char *flag;
        void (*set)(ls_victim_server_opts *);
    } bad[] = {{"--prada-delta", set_delta_one},
               {"--burst", set_burst_half},
               {"--throttle", set_throttle_neg},
               {"--admin-key", set_admin_empty},
               {"--max-batch", set_batch_zero}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ls_victim_server_opts so = scaled_server_opts();
        bad[i].set(&so);
        ls_victim_server *s = (ls_victim_server *)&so; /* must come back NULL */
        CHECK_EQ_INT(ls_victim_server_start(victim, &so, &s), LS_EINVAL);
        CHECK(s == NULL);
        CHECK_MSG(strstr(ls_errmsg(), bad[i].flag) != NULL, "%s: %s", bad[i].flag, ls_errmsg());
    }
    ls_victim_server_opts so = scaled_server_opts();
    ls_qmon_opts mo;
    ls_qmon_opts_default(&mo);
    CHECK_EQ_INT(ls_victim_serve_check(&so, NULL, &mo), LS_OK);
    so.monitor_mode = LS_PRADA_LOG;
    CHECK_EQ_INT(ls_victim_serve_check(&so, NULL, &mo), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "--monitor-data") != NULL);
    CHECK_EQ_INT(ls_victim_serve_check(&so, "blobs", &mo), LS_OK);
    mo.z = 0;
    CHECK_EQ_INT(ls_victim_serve_check(&so, "blobs", &mo), LS_EINVAL);

    ls_steal_opts o;
    ls_steal_opts_default(&o);
    o.budget = 100;
    CHECK_EQ_INT(ls_steal_opts_fit(&o), LS_OK);
    o.distill = 8.5;
    CHECK_EQ_INT(ls_steal_opts_fit(&o), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "--distill") != NULL);
    o.distill = 1, o.cnn_weight = 0;
    CHECK_EQ_INT(ls_steal_opts_fit(&o), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "--cnn-weight") != NULL);
    o.cnn_weight = 1, o.cnn_rank = 2, o.cnn_member = 0;
    CHECK_EQ_INT(ls_steal_opts_fit(&o), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "--cnn-rank") != NULL);

    ls_steal_eval_opts eo;
    ls_steal_eval_opts_default(&eo);
    eo.replica = "r.safetensors", eo.data = "blobs", eo.target = "http://127.0.0.1:9/predict";
    CHECK_EQ_INT(ls_steal_eval_opts_check(&eo), LS_OK);
    eo.test_split = 0.2; /* a named dataset has its own held-out split */
    CHECK_EQ_INT(ls_steal_eval_opts_check(&eo), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "--test-split") != NULL);
    eo.test_split = 0, eo.report = "r.safetensors";
    CHECK_EQ_INT(ls_steal_eval_opts_check(&eo), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "--report") != NULL);
    ls_steal_eval_result r;
    CHECK_EQ_INT(ls_steal_eval(&eo, &r), LS_EINVAL); /* before the replica is read */
    CHECK(!r.queried);
}

/* The label is the first class of the highest probability, as the victim's own predict
 * gives it: a tree trained on four rows, two of class 3 and two of class 1, is one leaf of
 * probability 1/2 for each (too few rows to split), so every answer is a tie. */
static void test_tied_labels(void) {
    ls_victim_opts o;
    ls_victim_opts_default(&o, LS_VICTIM_TREE);
    ls_steal_data few = tr; /* the first four rows, borrowed, with labels of our own */
    int32_t y4[4] = {3, 1, 3, 1};
    few.n = 4, few.y = y4;
    ls_victim *f;
    CHECK_EQ_INT(ls_victim_train(&o, &few, &f), LS_OK);
    enum { N = 200 };
    float *p = malloc(sizeof(float) * N * (size_t)te.k);
    int32_t want[N], got[N];
    CHECK_EQ_INT(ls_victim_predict_proba(f, te.x, N, p), LS_OK);
    ls_victim_predict(f, te.x, N, want);
    int ties = 0;
    for (int i = 0; i < N; i++) {
        float best = p[i * te.k + want[i]];
        for (int j = want[i] + 1; j < te.k; j++) ties += p[i * te.k + j] == best;
    }
    ls_victim_server_opts so = scaled_server_opts();
    ls_victim_server *s;
    CHECK_EQ_INT(ls_victim_server_start(f, &so, &s), LS_OK);
    ls_steal_client *c;
    CHECK_EQ_INT(client_for(s, "tie", &c), LS_OK);
    CHECK_EQ_INT(ls_steal_client_query(c, te.x, N, got, NULL, NULL), LS_OK);
    CHECK(memcmp(got, want, sizeof got) == 0 && want[0] == 1);
    CHECK_MSG(ties == N, "%d ties among %d rows", ties, N);
    ls_steal_client_free(c);
    ls_victim_server_stop(s);
    /* in the training data's units the range spans every feature's */
    ls_victim_server_opts_default(&so);
    CHECK_EQ_INT(ls_victim_server_start(f, &so, &s), LS_OK);
    const float *mn, *mx;
    ls_victim_scaler(f, &mn, &mx);
    float lo = mn[0], hi = mx[0], rlo, rhi;
    for (int j = 1; j < te.d; j++) lo = mn[j] < lo ? mn[j] : lo, hi = mx[j] > hi ? mx[j] : hi;
    CHECK_EQ_INT(ls_victim_server_input_range(s, &rlo, &rhi), 1);
    CHECK_MSG(rlo == lo && rhi == hi && hi > mx[0], "range [%g, %g], features span [%g, %g]", rlo, rhi, lo, hi);
    ls_victim_server_stop(s);
    free(p);
    ls_victim_free(f);
}

int main(void) {
    openblas_set_num_threads(1); /* small matmuls; threads only spin on shared cores */
    setup();
    RUN(test_option_checks);
    RUN(test_validation);
    RUN(test_budget_rate);
    RUN(test_prada_modes);
    RUN(test_tied_labels);
    RUN(test_bad_targets);
    RUN(test_keys);
    RUN(test_no_key_multiplying);
    RUN(test_bind_and_flood);
    RUN(test_bind_v6);
    ls_victim_free(victim);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    return TEST_RESULT();
}
