/* test_loader_service.c - the ZeroMQ service: round trip against the in-process loader,
 * idempotent retries, control messages, bad requests, and kill -9 / restart from a saved
 * state. Servers run in forked children that are always killed and reaped. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "llmsys/train.h"
#include "loader_util.h"
#include "test.h"

static char dir[256];
static const char *journal; /* the servers' weight-change journal (NULL: none) */

#define child lu_kid[0]
static void kill_child(void) { lu_kill(0); }

static const char *MIX =
    "{\"n_ctx\": 32, \"tokens_per_rank\": 96, \"micro_batches\": 2, \"seed\": 9,"
    " \"sources\": [{\"name\": \"long\", \"path\": \"long\", \"weight\": 0.6},"
    "              {\"name\": \"short\", \"type\": \"jsonl\", \"path\": \"short.jsonl\", \"weight\": 0.4}]}";
enum { R = 3 };

static void make_data(void) {
    char p[512], buf[4096];
    snprintf(p, sizeof p, "%s/long", dir);
    CHECK_EQ_INT(ls_mkdirs(p), 0);
    for (int f = 0; f < 8; f++) {
        int n = 40 + 97 * f;
        for (int i = 0; i < n; i++) buf[i] = (char)('a' + (i * 7 + f) % 26);
        snprintf(p, sizeof p, "%s/long/f%d.txt", dir, f);
        CHECK_EQ_INT(ls_file_write_atomic(p, buf, (size_t)n), 0);
    }
    int o = 0;
    for (int i = 0; i < 60; i++)
        o += snprintf(buf + o, sizeof buf - (size_t)o, "{\"text\": \"%d*%d=%d\"}\n", i, i, i * i);
    snprintf(p, sizeof p, "%s/short.jsonl", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, buf, (size_t)o), 0);
}

/* Forks a server (optionally resuming from a blob); returns its port. */
static int start_server(const ls_loader_mix *mix, const uint8_t *state, size_t len) {
    ls_loader_serve_opts o = {2, 2, 1, journal};
    return lu_start(0, mix, R, &o, state, len);
}

static uint64_t batch_hash(const ls_loader_batch *b) {
    /* The state blob is left out: steps the service built before a control message
     * arrived do not carry that message's pending change (the batches are the same). */
    uint64_t v[3] = {ls_hash64(b->tokens, (size_t)b->n_rows * b->n_ctx * 4),
                     ls_hash64(b->doc_ids, (size_t)b->n_rows * b->n_ctx * 4),
                     ls_hash64(b->segs, (size_t)b->n_segs * sizeof *b->segs)};
    return ls_hash64(v, sizeof v);
}

enum { STEPS = 14, CUT = 6, CHANGE = 9, RESET = 12 };
static uint64_t ref[STEPS][R];

/* Hashes every rank's batch of STEPS steps of an in-process loader into out, then closes it. */
static void hash_steps(ls_loader *ld, uint64_t (*out)[R]) {
    for (int s = 0; s < STEPS; s++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ld, &st), 0);
        for (int r = 0; r < R; r++) {
            ls_loader_batch b;
            CHECK_EQ_INT(ls_loader_step_batch(st, r, &b), 0);
            out[s][r] = batch_hash(&b);
            ls_loader_batch_free(&b);
        }
        ls_loader_step_free(st);
    }
    ls_loader_close(ld);
}

/* The uninterrupted in-process run (inline reading), with the weight change at CHANGE. */
static void reference(const ls_loader_mix *mix) {
    ls_loader *ld;
    ls_loader_opts o = {0, 4};
    CHECK_EQ_INT(ls_loader_open(&ld, mix, R, &o), 0);
    double w[2] = {0.1, 0.9};
    CHECK_EQ_INT(ls_loader_set_weights(ld, w, CHANGE), 0);
    CHECK_EQ_INT(ls_loader_set_weights(ld, NULL, RESET), 0);
    hash_steps(ld, ref);
}

static void test_service(void) {
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_parse(MIX, dir, &mix), 0);
    reference(&mix);
    int port = start_server(&mix, NULL, 0);
    CHECK(port > 0);
    if (port <= 0) return;
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    ls_loader_client *c[R];
    for (int r = 0; r < R; r++) CHECK_EQ_INT(ls_loader_client_open(&c[r], ep, r, 5000, 1), 0);

    /* Bad control messages are refused with a reason; the service keeps running. */
    char *reply = NULL;
    CHECK(ls_loader_client_control(c[0], "{\"weights\": {\"nosuch\": 1}}", NULL) < 0);
    CHECK_MSG(strstr(ls_errmsg(), "unknown source 'nosuch'") != NULL, "%s", ls_errmsg());
    CHECK(ls_loader_client_control(c[0], "{\"weights\": {\"long\": -1, \"short\": 1}}", NULL) < 0);
    CHECK(ls_loader_client_control(c[0], "{\"weights\": {\"long\": 0, \"short\": 0}}", NULL) < 0);
    CHECK(ls_loader_client_control(c[0], "not json", NULL) < 0);
    CHECK(ls_loader_client_control(c[0], "{\"weights\": null, \"step\": 1e300}", NULL) < 0); /* no double->int64 UB */
    CHECK_EQ_INT(ls_loader_client_control(c[0], "{\"weights\": {\"long\": 0.1, \"short\": 0.9}, \"step\": 9}", &reply),
                 0);
    CHECK(reply && strstr(reply, "\"from_step\":9"));
    free(reply);
    reply = NULL;
    CHECK_EQ_INT(ls_loader_client_control(c[0], "{\"weights\": null, \"step\": 12}", &reply),
                 0); /* back to the schedule */
    free(reply);
    CHECK_EQ_INT(ls_loader_client_control(c[0], NULL, &reply), 0); /* info */
    CHECK(reply && strstr(reply, "\"ranks\":3"));
    free(reply);

    uint8_t *blob = NULL;
    size_t blen = 0;
    for (int s = 0; s < CUT; s++)
        for (int r = 0; r < R; r++) {
            ls_loader_batch b;
            CHECK_EQ_INT(ls_loader_client_batch(c[r], s, &b), 0);
            CHECK_MSG(batch_hash(&b) == ref[s][r], "step %d rank %d differs from the in-process loader", s, r);
            if (s == CUT - 1 && r == 0) {
                blob = malloc(b.state_len);
                memcpy(blob, b.state, b.state_len);
                blen = b.state_len;
            }
            ls_loader_batch_free(&b);
        }
    /* A duplicate (retried) request gets the same batch. */
    ls_loader_batch b;
    CHECK_EQ_INT(ls_loader_client_batch(c[1], CUT - 1, &b), 0);
    CHECK(batch_hash(&b) == ref[CUT - 1][1]);
    ls_loader_batch_free(&b);
    /* Far ahead, far behind (evicted after the window moved on), bad rank. */
    CHECK(ls_loader_client_batch(c[0], 1000, &b) == LS_ERANGE);
    CHECK_MSG(strstr(ls_errmsg(), "too far ahead") != NULL, "%s", ls_errmsg());
    CHECK(ls_loader_client_batch(c[0], 0, &b) == LS_ERANGE);
    CHECK_MSG(strstr(ls_errmsg(), "too far behind") != NULL, "%s", ls_errmsg());
    ls_loader_client *bad;
    CHECK_EQ_INT(ls_loader_client_open(&bad, ep, 7, 5000, 0), 0);
    CHECK(ls_loader_client_batch(bad, CUT, &b) == LS_EINVAL);
    ls_loader_client_close(bad);
    /* Still serving, one more step, then the service dies mid-run. */
    for (int r = 0; r < R; r++) {
        CHECK_EQ_INT(ls_loader_client_batch(c[r], CUT, &b), 0);
        CHECK(batch_hash(&b) == ref[CUT][r]);
        ls_loader_batch_free(&b);
    }
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
    kill_child();

    /* Restart from the state saved with step CUT-1 (as a trainer checkpoint would). The
     * weight changes pending for steps 9 and 12 are part of that state. */
    port = start_server(&mix, blob, blen);
    CHECK(port > 0);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    for (int r = 0; r < R; r++) CHECK_EQ_INT(ls_loader_client_open(&c[r], ep, r, 5000, 1), 0);
    for (int s = CUT; s < STEPS; s++)
        for (int r = 0; r < R; r++) {
            CHECK_EQ_INT(ls_loader_client_batch(c[r], s, &b), 0);
            CHECK_MSG(batch_hash(&b) == ref[s][r], "step %d rank %d differs after restart", s, r);
            ls_loader_batch_free(&b);
        }
    CHECK_EQ_INT(ls_loader_client_shutdown(c[0]), 0);
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
    int status = -1;
    if (child > 0 && waitpid(child, &status, 0) == child) child = -1;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(blob);
    ls_loader_mix_free(&mix);

    /* A client with nobody listening times out cleanly after its retries. */
    ls_loader_client *lone;
    CHECK_EQ_INT(ls_loader_client_open(&lone, ep, 0, 200, 1), 0);
    CHECK(ls_loader_client_batch(lone, 0, &b) == LS_ETIMEDOUT);
    ls_loader_client_close(lone);
}

/* Issue 17: a weight change acknowledged after the state a trainer saved was built lived
 * only in the service's memory, so a restart from that state lost it. With the journal the
 * restarted service replays it and the batches equal the uninterrupted run's. */
enum { LATE = 10 };
static uint64_t ref_late[STEPS][R];

static void fetch_steps(const char *ep, int from, int to, uint64_t (*got)[R], uint8_t **blob, size_t *blen) {
    ls_loader_client *c[R];
    for (int r = 0; r < R; r++) CHECK_EQ_INT(ls_loader_client_open(&c[r], ep, r, 5000, 1), 0);
    for (int s = from; s < to; s++)
        for (int r = 0; r < R; r++) {
            ls_loader_batch b;
            got[s][r] = 0;
            if (ls_loader_client_batch(c[r], s, &b) != 0) continue;
            got[s][r] = batch_hash(&b);
            if (blob && s == to - 1 && r == 0) {
                *blob = malloc(b.state_len);
                memcpy(*blob, b.state, b.state_len);
                *blen = b.state_len;
            }
            ls_loader_batch_free(&b);
        }
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
}

static void test_journal_resume(void) {
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_parse(MIX, dir, &mix), 0);
    double w[2] = {0.1, 0.9};
    ls_loader *ld;
    ls_loader_opts lo = {0, 4};
    CHECK_EQ_INT(ls_loader_open(&ld, &mix, R, &lo), 0);
    CHECK_EQ_INT(ls_loader_set_weights(ld, w, LATE), 0);
    hash_steps(ld, ref_late);

    char jp[512], ep[64];
    snprintf(jp, sizeof jp, "%s/weights.journal", dir);
    journal = jp;
    int port = start_server(&mix, NULL, 0);
    CHECK(port > 0);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    uint64_t got[STEPS][R];
    uint8_t *blob = NULL;
    size_t blen = 0;
    fetch_steps(ep, 0, CUT, got, &blob, &blen); /* the trainer saves the state of step CUT-1 */
    for (int s = 0; s < CUT; s++)
        for (int r = 0; r < R; r++) CHECK(got[s][r] == ref_late[s][r]);
    /* acknowledged after that state was built, then the service dies */
    ls_loader_client *c;
    CHECK_EQ_INT(ls_loader_client_open(&c, ep, 0, 5000, 1), 0);
    CHECK_EQ_INT(ls_loader_client_control(c, "{\"weights\": {\"long\": 0.1, \"short\": 0.9}, \"step\": 10}", NULL), 0);
    ls_loader_client_close(c);
    kill_child();
    CHECK(blob != NULL);
    if (!blob) return;

    /* restarted from the saved state with the journal: identical to the uninterrupted run */
    port = start_server(&mix, blob, blen);
    CHECK(port > 0);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    fetch_steps(ep, CUT, STEPS, got, NULL, NULL);
    for (int s = CUT; s < STEPS; s++)
        for (int r = 0; r < R; r++)
            CHECK_MSG(got[s][r] == ref_late[s][r], "step %d rank %d differs after a journaled restart", s, r);
    kill_child();

    /* the same restart without the journal loses the change (the defect this guards) */
    journal = NULL;
    port = start_server(&mix, blob, blen);
    CHECK(port > 0);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    fetch_steps(ep, CUT, STEPS, got, NULL, NULL);
    int differ = 0;
    for (int s = LATE; s < STEPS; s++)
        for (int r = 0; r < R; r++) differ += got[s][r] != ref_late[s][r];
    CHECK_MSG(differ > 0, "without the journal the change should be lost");
    kill_child();
    free(blob);
    ls_loader_mix_free(&mix);
}

/* Parses MIX into mix and starts a fresh server, its endpoint into ep; 0 (mix freed) when it
 * did not start. */
static int serve_mix(ls_loader_mix *mix, char ep[64]) {
    CHECK_EQ_INT(ls_loader_mix_parse(MIX, dir, mix), 0);
    int port = start_server(mix, NULL, 0);
    CHECK(port > 0);
    if (port <= 0) {
        ls_loader_mix_free(mix);
        return 0;
    }
    snprintf(ep, 64, "tcp://127.0.0.1:%d", port);
    return 1;
}

/* The trainer's batch source on the service (trainsrc.c): rank 0's rows of a step as the
 * service sends them, padded to the trainer's sequence length and batch rows; each target the
 * next token of the same packed document (none across a document boundary, on padding or at
 * a row's end); the resume state of the step after; and the refusals of a run that does not
 * match the service. */
static void test_batch_source(void) {
    ls_loader_mix mix;
    char ep[64];
    if (!serve_mix(&mix, ep)) return;
    ls_batch_source *src = NULL;
    CHECK_MSG(ls_loader_batch_source(&src, ep, 0, R, NULL, 5000) == LS_OK, "%s", ls_errmsg());
    ls_loader_client *c;
    CHECK_EQ_INT(ls_loader_client_open(&c, ep, 0, 5000, 1), 0);
    enum { T = 40, ROWS = 6 };
    int tok[ROWS * T], tgt[ROWS * T], bounds = 0, pads = 0;
    for (int step = 0; src && step < 3; step++) {
        CHECK_MSG(src->fill(src, step, 0, ROWS, T, tok, tgt) == LS_OK, "%s", ls_errmsg());
        ls_loader_batch b;
        CHECK_EQ_INT(ls_loader_client_batch(c, step, &b), 0); /* the same step again: the same batch */
        CHECK(b.n_ctx == 32 && b.n_rows >= 1 && b.n_rows <= ROWS);
        for (int r = 0; r < ROWS; r++)
            for (int t = 0; t < T; t++) {
                int in = r < b.n_rows && t < b.n_ctx, i = r * b.n_ctx + t;
                int want_tok = in ? b.tokens[i] : LS_TOK_PAD, want_tgt = -1;
                if (in && t + 1 < b.n_ctx && b.doc_ids[i] >= 0 && b.doc_ids[i + 1] == b.doc_ids[i])
                    want_tgt = b.tokens[i + 1];
                bounds += in && t + 1 < b.n_ctx && b.doc_ids[i] >= 0 && b.doc_ids[i + 1] >= 0 &&
                          b.doc_ids[i + 1] != b.doc_ids[i];
                pads += in && t + 1 < b.n_ctx && b.doc_ids[i] < 0 && b.doc_ids[i + 1] < 0;
                CHECK_MSG(tok[r * T + t] == want_tok && tgt[r * T + t] == want_tgt,
                          "step %d row %d position %d: token %d target %d, want %d %d", step, r, t, tok[r * T + t],
                          tgt[r * T + t], want_tok, want_tgt);
            }
        if (step == 2) { /* the state saved is the one to resume at step 3 */
            char path[300];
            snprintf(path, sizeof path, "%s/src.state", dir);
            int64_t at = -1;
            CHECK(ls_loader_batch_source_save_state(src, path, &at) == LS_OK);
            CHECK_EQ_INT((int)at, 3);
            char *blob = NULL;
            size_t n = 0;
            CHECK(ls_file_read(path, &blob, &n) == LS_OK && n == b.state_len && !memcmp(blob, b.state, n));
            free(blob);
            unlink(path);
        }
        ls_loader_batch_free(&b);
    }
    /* the checks above saw documents meet inside a row and padding after one */
    CHECK_MSG(bounds > 0 && pads > 0, "%d boundaries, %d padding pairs", bounds, pads);
    /* rows longer than the trainer's sequences, or more of them than it holds */
    if (src) {
        CHECK(src->fill(src, 3, 0, ROWS, 31, tok, tgt) == LS_EINVAL && strstr(ls_errmsg(), "--seq 32"));
        CHECK(src->fill(src, 3, 0, 1, T, tok, tgt) == LS_EINVAL && strstr(ls_errmsg(), "--batch"));
    }
    ls_batch_source_free(src);
    ls_loader_client_close(c);
    /* a run with fewer or more ranks than the service serves */
    for (int n = R - 1; n <= R + 1; n += 2) {
        src = NULL;
        CHECK(ls_loader_batch_source(&src, ep, 0, n, NULL, 5000) == LS_EINVAL && strstr(ls_errmsg(), "--ranks"));
        CHECK(src == NULL);
    }
    kill_child();
    ls_loader_mix_free(&mix);
}

/* The window (prefetch 2 + history 2 = 4 steps): a step leaves it only once every rank has it,
 * a rank at least a window ahead of the slowest is refused at once (not parked), and a weight
 * change without a step applies from the next step the service builds. */
static void test_window(void) {
    ls_loader_mix mix;
    char ep[64];
    if (!serve_mix(&mix, ep)) return;
    ls_loader_client *c[R];
    for (int r = 0; r < R; r++) CHECK_EQ_INT(ls_loader_client_open(&c[r], ep, r, 2000, 0), 0);
    ls_loader_batch b;
    for (int s = 0; s < 4; s++) { /* rank 0 alone through a whole window */
        CHECK_EQ_INT(ls_loader_client_batch(c[0], s, &b), 0);
        CHECK(batch_hash(&b) == ref[s][0]);
        ls_loader_batch_free(&b);
    }
    double t0 = ls_now();
    CHECK(ls_loader_client_batch(c[0], 4, &b) == LS_ERANGE && strstr(ls_errmsg(), "too far ahead"));
    CHECK_MSG(ls_now() - t0 < 1.5, "refused after %.2f s", ls_now() - t0);
    /* {"weights": null} (the schedule, unchanged) from the next step built: past the 4 built */
    char *reply = NULL;
    CHECK_EQ_INT(ls_loader_client_control(c[0], "{\"weights\": null}", &reply), 0);
    const char *f = reply ? strstr(reply, "\"from_step\":") : NULL;
    CHECK_MSG(f && atoi(f + 12) >= 4, "reply %s", reply ? reply : "(none)");
    free(reply);
    /* the others still get step 0, the same batch; then the window slides and rank 0 goes on */
    for (int r = 1; r < R; r++) {
        CHECK_EQ_INT(ls_loader_client_batch(c[r], 0, &b), 0);
        CHECK(batch_hash(&b) == ref[0][r]);
        ls_loader_batch_free(&b);
    }
    CHECK_EQ_INT(ls_loader_client_batch(c[0], 4, &b), 0);
    CHECK(batch_hash(&b) == ref[4][0]);
    ls_loader_batch_free(&b);
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
    kill_child();
    ls_loader_mix_free(&mix);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys-loader-svc-%d", (int)getpid());
    CHECK_EQ_INT(ls_mkdirs(dir), 0);
    ls_log_set_level(LS_LOG_ERROR);
    lu_guard(60);
    make_data();
    RUN(test_service);
    kill_child();
    RUN(test_journal_resume);
    kill_child();
    RUN(test_batch_source);
    kill_child();
    RUN(test_window);
    kill_child();
    if (test_rmtree(dir)) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_RESULT();
}
