/* worker.c - one pipeline stage process: holds its layers and their KV caches, receives
 * micro-batches from the previous stage over ZeroMQ, runs them, passes activations (or
 * logits, from the last stage) on. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "llmsys/serve.h"
#include "llmsys/zsec.h"
#include "serve/wire.h"

#define TMP_FILES (LS_SERVE_MAX_STAGES + 2)
#define TMP_PATH 320

/* The files of a front's temp dir: plan.json, front, stage0 .. stage15. */
static void tmpdir_files(const char *dir, char f[TMP_FILES][TMP_PATH]) {
    snprintf(f[0], TMP_PATH, "%s/plan.json", dir);
    snprintf(f[1], TMP_PATH, "%s/front", dir);
    for (int i = 0; i < LS_SERVE_MAX_STAGES; i++) snprintf(f[i + 2], TMP_PATH, "%s/stage%d", dir, i);
}

void ls_serve_tmpdir_remove(const char *dir) {
    char f[TMP_FILES][TMP_PATH];
    tmpdir_files(dir, f);
    for (int i = 0; i < TMP_FILES; i++) unlink(f[i]);
}

/* The front's temp dir, prepared before the signal can come (the handler only unlinks). */
static char tmp_files[TMP_FILES][TMP_PATH], tmp_dir[TMP_PATH];
static pid_t tmp_parent;

/* SIGTERM reaches a worker from a user, or from the kernel when its front dies
 * (PR_SET_PDEATHSIG). In the second case the front cannot clean up, so the workers do: each
 * removes the files and tries the dir (the last one succeeds). */
static void on_term(int sig) {
    /* the signal comes as the front's first thread exits, and the worker may be handed to a
     * sibling thread of the dying front before init: wait (up to 1 s) for the front to be gone */
    for (int i = 0; tmp_dir[0] && i < 100; i++) {
        if (getppid() != tmp_parent) {
            for (int k = 0; k < TMP_FILES; k++) unlink(tmp_files[k]);
            rmdir(tmp_dir);
            break;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    _exit(128 + sig);
}

static void cleanup_on_front_death(void) {
    const char *dir = getenv("LLMSYS_SERVE_TMPDIR");
    if (!dir || !dir[0] || strlen(dir) >= 128) return;
    tmpdir_files(dir, tmp_files);
    snprintf(tmp_dir, sizeof tmp_dir, "%s", dir);
    /* the front's pid is in the dir's name (llmsys-serve-<pid>-XXXXXX): it may be gone already */
    const char *base = strrchr(dir, '/');
    int front = 0;
    if (sscanf(base ? base + 1 : dir, "llmsys-serve-%d-", &front) != 1 || front <= 0) return;
    tmp_parent = (pid_t)front;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    if (getppid() != tmp_parent) on_term(SIGTERM); /* the front died before the handler was in place */
}

/* Sends a message with a NUL-terminated error text for micro-batch mb_id downstream. */
static int send_error(void *out, const ls_wire_hdr *in, int stage, const char *text) {
    size_t tl = strlen(text) + 1, len = sizeof(ls_wire_hdr) + tl;
    char *buf = malloc(len);
    if (!buf) return ls_err(LS_ENOMEM, "out of memory");
    ls_wire_hdr h = *in;
    h.type = LS_MSG_ERROR;
    h.stage = stage;
    h.payload_bytes = tl;
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, text, tl);
    ls_wire_seal(buf, len);
    int rc = zmq_send(out, buf, len, 0) < 0 ? ls_err(LS_ENET, "stage %d: send: %s", stage, zmq_strerror(zmq_errno())) : LS_OK;
    free(buf);
    return rc;
}

int ls_serve_worker_run(const ls_worker_opts *o) {
    cleanup_on_front_death();
    ls_plan *plan = malloc(sizeof *plan);
    if (!plan) return ls_err(LS_ENOMEM, "out of memory");
    int rc = ls_plan_read(o->plan_path, 0, plan);
    if (rc == LS_OK && (o->stage < 0 || o->stage >= plan->n_stages || o->stage >= LS_SERVE_MAX_STAGES))
        rc = ls_err(LS_EINVAL, "%s: no stage %d (the plan has %d)", o->plan_path, o->stage, plan->n_stages);
    const ls_plan_stage *st = &plan->stages[rc == LS_OK ? o->stage : 0];
    ls_engine_opts eo = ls_engine_defaults();
    eo.layer_begin = st->layer_begin;
    eo.layer_end = st->layer_end;
    eo.bits = plan->bits + st->layer_begin;
    eo.group = plan->group;
    eo.max_seqs = o->max_seqs;
    eo.nthreads = o->nthreads;
    ls_engine *e = NULL;
    if (rc == LS_OK) rc = ls_engine_open(&e, o->model, &eo);
    if (rc == LS_OK && ls_engine_config(e)->n_layer != plan->n_layer)
        rc = ls_err(LS_EINVAL, "%s: plan is for a model with %d layers, but %s has %d", o->plan_path, plan->n_layer,
                    o->model, ls_engine_config(e)->n_layer);
    int first = st->layer_begin == 0, last = st->layer_end == plan->n_layer;
    free(plan);
    if (rc != LS_OK) {
        ls_engine_free(e);
        return rc;
    }
    const ls_model_config *cfg = ls_engine_config(e);
    void *ctx = zmq_ctx_new(), *in = ctx ? zmq_socket(ctx, ZMQ_PULL) : NULL, *out = ctx ? zmq_socket(ctx, ZMQ_PUSH) : NULL;
    int zero = 0;
    char what[64];
    snprintf(what, sizeof what, "stage %d", o->stage);
    if (!in || !out) { rc = ls_err(LS_ENET, "%s: zmq: %s", what, zmq_strerror(zmq_errno())); goto done; }
    zmq_setsockopt(in, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(out, ZMQ_LINGER, &zero, sizeof zero);
    if ((rc = ls_zsec_bind(ctx, in, o->in_addr, what)) || (rc = ls_zsec_connect(out, o->out_addr, what))) goto done;
    double busy = 0.0;
    /* test hook: slows every micro-batch so tests can kill a stage mid-request */
    const char *delay_env = getenv("LLMSYS_SERVE_STAGE_DELAY_MS");
    int delay_ms = delay_env ? atoi(delay_env) : 0;
    float *outbuf = NULL;
    size_t outcap = 0, incap = 0;
    char *inbuf = NULL;
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, in, 0) < 0) {
            zmq_msg_close(&msg);
            if (zmq_errno() == EINTR) continue;
            rc = ls_err(LS_ENET, "%s: recv: %s", what, zmq_strerror(zmq_errno()));
            break;
        }
        /* ZeroMQ gives no alignment guarantee: work on an aligned copy */
        size_t len = zmq_msg_size(&msg);
        if (len > incap) {
            free(inbuf);
            incap = len;
            inbuf = malloc(incap);
            if (!inbuf) {
                rc = ls_err(LS_ENOMEM, "%s: out of memory for a %zu-byte message", what, len);
                zmq_msg_close(&msg);
                break;
            }
        }
        memcpy(inbuf, zmq_msg_data(&msg), len);
        const char *data = inbuf;
        if (ls_wire_check(data, len, what) != LS_OK) {
            LS_ERROR("%s: dropping a bad message: %s", what, ls_errmsg());
            if (len >= sizeof(ls_wire_hdr)) {
                ls_wire_hdr h;
                memcpy(&h, data, sizeof h);
                h.payload_bytes = 0;
                send_error(out, &h, o->stage, ls_errmsg());
            }
            zmq_msg_close(&msg);
            continue;
        }
        ls_wire_hdr h;
        memcpy(&h, data, sizeof h);
        if (h.type != LS_MSG_FORWARD) {
            /* ping, errors and shutdown travel the ring unchanged (re-sealed with our busy time) */
            int stop = h.type == LS_MSG_SHUTDOWN;
            char *copy = malloc(len);
            if (copy) {
                memcpy(copy, data, len);
                ls_wire_hdr *ch = (ls_wire_hdr *)copy;
                if (o->stage < LS_SERVE_MAX_STAGES) ch->busy_s[o->stage] = busy;
                ls_wire_seal(copy, len);
                zmq_send(out, copy, len, 0);
                free(copy);
            }
            zmq_msg_close(&msg);
            if (stop) break;
            continue;
        }
        if (delay_ms > 0) ls_sleep_ms(delay_ms);
        double t0 = ls_now();
        const ls_engine_seq *seqs;
        const void *body;
        if (ls_wire_forward_parse(data, len, first, cfg->d_model, &seqs, &body) != LS_OK) {
            send_error(out, &h, o->stage, ls_errmsg());
            zmq_msg_close(&msg);
            continue;
        }
        int nseq = (int)h.nseq;
        size_t seq_bytes = (size_t)nseq * sizeof(ls_engine_seq);
        size_t nout = ls_engine_out_floats(e, seqs, nseq, 0);
        if (nout > outcap) {
            free(outbuf);
            outbuf = malloc(nout * sizeof(float));
            outcap = outbuf ? nout : 0;
        }
        int frc = outbuf ? ls_engine_forward(e, seqs, nseq, first ? (const int *)body : NULL,
                                             first ? NULL : (const float *)body, outbuf, 0)
                         : ls_err(LS_ENOMEM, "out of memory");
        busy += ls_now() - t0;
        if (frc != LS_OK) {
            char m[512];
            snprintf(m, sizeof m, "stage %d: %s", o->stage, ls_errmsg());
            send_error(out, &h, o->stage, m);
            zmq_msg_close(&msg);
            continue;
        }
        size_t len2 = sizeof h + seq_bytes + nout * sizeof(float);
        char *buf = malloc(len2);
        if (!buf) {
            send_error(out, &h, o->stage, "out of memory");
            zmq_msg_close(&msg);
            continue;
        }
        ls_wire_hdr oh = h;
        oh.type = last ? LS_MSG_RESULT : LS_MSG_FORWARD;
        oh.stage = o->stage;
        oh.payload_bytes = seq_bytes + nout * sizeof(float);
        if (o->stage < LS_SERVE_MAX_STAGES) oh.busy_s[o->stage] = busy;
        memcpy(buf, &oh, sizeof oh);
        memcpy(buf + sizeof oh, seqs, seq_bytes);
        memcpy(buf + sizeof oh + seq_bytes, outbuf, nout * sizeof(float));
        zmq_msg_close(&msg);
        ls_wire_seal(buf, len2);
        if (zmq_send(out, buf, len2, 0) < 0) LS_ERROR("%s: send: %s", what, zmq_strerror(zmq_errno()));
        free(buf);
    }
    free(outbuf);
    free(inbuf);
done:
    if (in) zmq_close(in);
    if (out) zmq_close(out);
    if (ctx) zmq_ctx_term(ctx);
    ls_engine_free(e);
    return rc;
}
