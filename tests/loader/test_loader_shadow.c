/* test_loader_shadow.c - a standby loader service: it follows the primary's state; after kill -9
 * of the primary the clients fail over to it without a restart and receive byte-identical batches
 * (a weight change acknowledged by the primary included); kill -9 of the shadow changes nothing.
 * Servers run in forked children that are always killed and reaped. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/loader.h"
#include "loader_util.h"
#include "test.h"

static char dir[256];

static const char *MIX =
    "{\"n_ctx\": 32, \"tokens_per_rank\": 96, \"micro_batches\": 2, \"seed\": 3,"
    " \"sources\": [{\"name\": \"a\", \"path\": \"a\", \"weight\": 0.5}, {\"name\": \"b\", \"path\": \"b\", \"weight\": 0.5}]}";
enum { R = 2 };

/* Forks a service (a shadow of primary_port when > 0) in slot i; returns its port. */
static int start(int i, const ls_loader_mix *mix, int primary_port) {
    char prim[64];
    snprintf(prim, sizeof prim, "tcp://127.0.0.1:%d", primary_port);
    ls_loader_serve_opts o = {2, 2, 1, NULL, NULL, primary_port > 0 ? prim : NULL, 50};
    return lu_start(i, mix, R, &o, NULL, 0);
}

static void make_data(void) {
    char p[512], buf[4096];
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%c", dir, 'a' + s);
        CHECK_EQ_INT(ls_mkdirs(p), 0);
        for (int f = 0; f < 6; f++) {
            int n = 20 + 131 * f + 50 * s;
            for (int i = 0; i < n; i++) buf[i] = (char)('a' + (i * 3 + f + s) % 26);
            snprintf(p, sizeof p, "%s/%c/f%d.txt", dir, 'a' + s, f);
            CHECK_EQ_INT(ls_file_write_atomic(p, buf, (size_t)n), 0);
        }
    }
    snprintf(p, sizeof p, "%s/mix.json", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, MIX, strlen(MIX)), 0);
}

/* Loads the mix and starts a primary (slot 0) and its shadow (slot 1); 0 when either failed. */
static int start_pair(ls_loader_mix *mix, int *pp, int *sp) {
    char p[512];
    snprintf(p, sizeof p, "%s/mix.json", dir);
    CHECK_EQ_INT(ls_loader_mix_load(p, mix), 0);
    *pp = start(0, mix, 0);
    *sp = *pp > 0 ? start(1, mix, *pp) : -1;
    CHECK(*pp > 0 && *sp > 0);
    return *pp > 0 && *sp > 0;
}

/* The shadow's count of state pulls from its primary (-1 when it does not answer). */
static int state_pulls(int port) {
    char *info = lu_info(port);
    const char *p = info ? strstr(info, "\"state_pulls\":") : NULL;
    int n = p ? atoi(p + 14) : -1;
    free(info);
    return n;
}

/* Batches are compared without their resume blobs: the services built their first steps
 * before the weight change arrived, the in-process reference after. */
static void test_failover(void) {
    ls_loader_mix mix;
    int pp, sp;
    if (!start_pair(&mix, &pp, &sp)) return;
    char eps[128];
    snprintf(eps, sizeof eps, "tcp://127.0.0.1:%d,tcp://127.0.0.1:%d", pp, sp);
    ls_loader_client *c[R];
    for (int r = 0; r < R; r++) CHECK_EQ_INT(ls_loader_client_open(&c[r], eps, r, 300, 0), 0);
    ls_loader *ref;
    CHECK_EQ_INT(ls_loader_open(&ref, &mix, R, NULL), 0);
    int64_t step = 0;
    ls_loader_step *st5 = NULL; /* step 5: rank 0 fetches it from the primary, the others from the shadow */
    for (; step < 6; step++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ref, &st), 0);
        for (int r = 0; r < R; r++)
            if (step < 5 || r == 0)
                CHECK_MSG(lu_same_batch(c[r], st, r, step, 1), "primary step %lld rank %d", (long long)step, r);
        if (step < 5)
            ls_loader_step_free(st);
        else
            st5 = st;
    }
    /* a weight change acknowledged by the primary after the state the shadow will start from was
     * built (the primary builds two steps ahead): the shadow must replay it */
    CHECK_EQ_INT(ls_loader_client_set_weights(c[0], "{\"a\": 0.95, \"b\": 0.05}", 9, NULL), 0);
    double w[2] = {0.95, 0.05};
    CHECK_EQ_INT(ls_loader_set_weights(ref, w, 9), 0);
    /* the shadow pulls every 50 ms; two more pulls and one began after the change (bounded by
     * wall time: a loaded machine may not run the shadow for a while) */
    int pulls = state_pulls(sp), now = pulls;
    for (double t0 = ls_now(); pulls >= 0 && now < pulls + 2 && ls_now() - t0 < 20; now = state_pulls(sp))
        ls_sleep_ms(20);
    CHECK_MSG(pulls >= 0 && now >= pulls + 2, "the shadow pulled the state %d times after the change", now - pulls);
    lu_kill(0);
    double t0 = ls_now(), first = -1;
    /* the shadow starts at the oldest step some rank lacks (5); rank 0, which has it, asks for 6
     * next, and the window must still slide past 5: steps to 14 are more than a window (4) */
    for (int r = 1; r < R && st5; r++) {
        CHECK_MSG(lu_same_batch(c[r], st5, r, 5, 1), "after fail-over: step 5 rank %d", r);
        if (first < 0) first = ls_now() - t0;
    }
    ls_loader_step_free(st5);
    for (; step < 14; step++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ref, &st), 0);
        for (int r = 0; r < R; r++) {
            CHECK_MSG(lu_same_batch(c[r], st, r, step, 1), "after fail-over: step %lld rank %d", (long long)step, r);
            if (first < 0) first = ls_now() - t0;
        }
        ls_loader_step_free(st);
    }
    char want[64];
    snprintf(want, sizeof want, "tcp://127.0.0.1:%d", sp);
    CHECK(!strcmp(ls_loader_client_endpoint(c[0]), want));
    CHECK_MSG(first >= 0 && first < 3.0, "first batch after kill -9 of the primary in %.3f s", first);
    fprintf(stderr, "fail-over: first batch from the shadow %.3f s after kill -9 (client timeout 0.3 s)\n", first);
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
    ls_loader_close(ref);
    lu_kill(1);
    ls_loader_mix_free(&mix);
}

static void test_shadow_dies(void) {
    ls_loader_mix mix;
    int pp, sp;
    if (!start_pair(&mix, &pp, &sp)) return;
    ls_sleep_ms(120);
    lu_kill(1);
    char eps[128];
    snprintf(eps, sizeof eps, "tcp://127.0.0.1:%d,tcp://127.0.0.1:%d", pp, sp);
    ls_loader_client *c;
    ls_loader *ref;
    CHECK_EQ_INT(ls_loader_client_open(&c, eps, 1, 2000, 0), 0);
    CHECK_EQ_INT(ls_loader_open(&ref, &mix, R, NULL), 0);
    for (int64_t step = 0; step < 3; step++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ref, &st), 0);
        CHECK(lu_same_batch(c, st, 1, step, 1));
        ls_loader_step_free(st);
    }
    /* a shadow with no primary to follow refuses to serve instead of inventing batches */
    ls_loader_client_close(c);
    ls_loader_close(ref);
    lu_kill(0);
    int lone = start(1, &mix, pp); /* its primary is dead: it never gets a state */
    CHECK(lone > 0);
    snprintf(eps, sizeof eps, "tcp://127.0.0.1:%d", lone);
    ls_loader_batch b;
    CHECK_EQ_INT(ls_loader_client_open(&c, eps, 0, 2000, 0), 0);
    CHECK(ls_loader_client_batch(c, 0, &b) == LS_ESTATE && strstr(ls_errmsg(), "no state"));
    ls_loader_client_close(c);
    lu_kill(1);
    ls_loader_mix_free(&mix);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys-test-shadow-%d", (int)getpid());
    lu_guard(100);
    ls_log_set_level(LS_LOG_ERROR);
    make_data();
    RUN(test_failover);
    RUN(test_shadow_dies);
    lu_kill(0);
    lu_kill(1);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return TEST_RESULT();
}
