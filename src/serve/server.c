/* server.c - the serving front: launches one worker process per plan stage, schedules
 * requests with continuous batching (prefill and decode as separate micro-batch phases,
 * one micro-batch in flight per stage) over the ZeroMQ ring, samples tokens, and answers
 * OpenAI-style HTTP requests (libmicrohttpd). */
#include <cjson/cJSON.h>
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "io/httpd.h"
#include "llmsys/serve.h"
#include "llmsys/zsec.h"
#include "serve/openai.h"
#include "serve/wire.h"

enum { RQ_QUEUED = 0, RQ_ACTIVE = 1, RQ_DONE = 2, RQ_FAILED = 3 };

typedef struct req {
    int id;
    int *prompt, n_prompt;
    int max_tokens, stream;
    int chat;          /* POST /v1/chat/completions: chat response shapes */
    int include_usage; /* stream_options.include_usage: a usage chunk before [DONE] */
    ls_sample_config sc;
    ls_rng rng;
    int *out, n_out;
    int state, slot, pos, prefilled, in_flight, cancelled;
    char finish[16], error[256];
    int refs;
    double t_submit, t_first, t_done;
    pthread_cond_t cv;
    struct req *next;
} req;

typedef struct {
    uint32_t id;
    int n, prefill;
    double t_sent;
    req **r;
} inflight_mb;

struct ls_server {
    ls_server_opts o;
    char model[1024], name[256], self[1024], host[64];
    ls_plan plan;
    ls_model_config cfg;
    ls_bpe *tok; /* the checkpoint's BPE vocabulary; NULL: bytes */
    int ns;
    pid_t pids[LS_SERVE_MAX_STAGES];
    int alive[LS_SERVE_MAX_STAGES];
    int stopped[LS_SERVE_MAX_STAGES]; /* the signal that stopped a stage (SIGSTOP, ...), 0 when running */
    char death[LS_SERVE_MAX_STAGES][160]; /* how its last worker ended ("killed by signal 9") */
    pid_t dead_pid[LS_SERVE_MAX_STAGES];  /* that worker */
    /* restarts: a dead stage is spawned again (restarts <= o.stage_restarts) and serves once a
     * ping sent after the spawn has come back round the ring */
    int restarts[LS_SERVE_MAX_STAGES], restarting[LS_SERVE_MAX_STAGES];
    double t_spawn[LS_SERVE_MAX_STAGES], busy_base[LS_SERVE_MAX_STAGES]; /* busy_base: earlier workers' busy s */
    double t_death[LS_SERVE_MAX_STAGES];                                 /* when its last worker was found dead */
    uint32_t ring_ping;    /* id of the first ping sent after the last spawn (0: none yet) */
    double ring_ping_sent; /* when the last of those pings went out */
    char addr[LS_SERVE_MAX_STAGES + 1][300];
    char tmpdir[128], plan_path[160]; /* the plan file the workers read */
    void *zctx, *to_first, *from_last;
    pthread_t sched;
    int sched_started, running, stopping;
    pthread_mutex_t mu;
    req *qhead, *qtail;
    int qlen;
    req **slots;
    int n_active, next_id;
    inflight_mb *mbs;
    int n_inflight, depth, last_prefill, rr;
    uint32_t next_mb;
    /* metrics (under mu) */
    uint64_t m_requests, m_failed, m_rejected, m_tokens, m_prompt_tokens, m_mb_prefill, m_mb_decode;
    double busy[LS_SERVE_MAX_STAGES], t_start;
    /* health probe: a ping sent round the ring while it is idle; late = not back in time */
    double probe_sent, probe_back, poll_empty; /* poll_empty: when the ring last had nothing for us */
    uint32_t probe_id;
    int probe_late;
    struct MHD_Daemon *httpd;
    int port;
    long created; /* wall-clock start, the model's "created" in /v1/models */
};

ls_server_opts ls_server_defaults(void) {
    return (ls_server_opts){.host = "127.0.0.1",
                            .max_seqs = 16,
                            .max_body = 64 * 1024,
                            .nthreads = 1,
                            .step_timeout_s = 60,
                            .mb_prefill = 2,
                            .mb_decode = 8,
                            .probe_timeout_s = 2,
                            .stage_restarts = 3,
                            .load_timeout_s = 120};
}

int ls_server_port(const ls_server *s) { return s->port; }
int ls_server_num_stages(const ls_server *s) { return s->ns; }
const char *ls_server_model_name(const ls_server *s) { return s->name; }
int ls_server_stage_pid(const ls_server *s, int i) { return i >= 0 && i < s->ns ? (int)s->pids[i] : -1; }

/* ---------------------------------------------------------------- requests */

static void req_unref(req *r) {
    /* caller holds the server mutex */
    if (--r->refs > 0) return;
    pthread_cond_destroy(&r->cv);
    free(r->prompt);
    free(r->out);
    free(r);
}

static void release_slot(ls_server *s, req *r) {
    if (r->slot >= 0) {
        s->slots[r->slot] = NULL;
        s->n_active--;
        r->slot = -1;
    }
}

/* Ends a request (done or failed), wakes its HTTP thread, drops the scheduler's ref. */
static void req_finish(ls_server *s, req *r, int state, const char *finish, const char *err) {
    if (r->state >= RQ_DONE) return;
    r->state = state;
    r->t_done = ls_now();
    snprintf(r->finish, sizeof r->finish, "%s", finish ? finish : "");
    if (err) snprintf(r->error, sizeof r->error, "%s", err);
    if (state == RQ_FAILED) s->m_failed++;
    release_slot(s, r);
    pthread_cond_broadcast(&r->cv);
    req_unref(r);
}

/* Fails every queued, active and in-flight request with msg (pipeline broken). */
static void fail_all(ls_server *s, const char *msg) {
    for (int i = 0; i < s->n_inflight; i++) free(s->mbs[i].r);
    s->n_inflight = 0;
    for (int i = 0; i < s->o.max_seqs; i++)
        if (s->slots[i]) {
            s->slots[i]->in_flight = 0;
            req_finish(s, s->slots[i], RQ_FAILED, NULL, msg);
        }
    while (s->qhead) {
        req *r = s->qhead;
        s->qhead = r->next;
        req_finish(s, r, RQ_FAILED, NULL, msg);
    }
    s->qtail = NULL;
    s->qlen = 0;
}

/* ---------------------------------------------------------------- workers */

#define TMP_PREFIX "llmsys-serve-"

/* Removes /tmp/llmsys-serve-<pid>-* directories of fronts that no longer run (killed with
 * SIGKILL before their workers could clean up): our own user's, their known files only. */
static void sweep_stale_tmpdirs(void) {
    DIR *d = opendir("/tmp");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) continue;
        char *end;
        long pid = strtol(e->d_name + strlen(TMP_PREFIX), &end, 10);
        if (pid <= 0 || *end != '-' || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char dir[300];
        struct stat st;
        snprintf(dir, sizeof dir, "/tmp/%s", e->d_name);
        if (lstat(dir, &st) || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
        ls_serve_tmpdir_remove(dir);
        if (rmdir(dir) == 0) LS_WARN("removed %s, left by a serve front (pid %ld) that was killed", dir, pid);
    }
    closedir(d);
}

static int spawn_worker(ls_server *s, int i) {
    char stage[16], seqs[16], thr[16];
    snprintf(stage, sizeof stage, "%d", i);
    snprintf(seqs, sizeof seqs, "%d", s->o.max_seqs);
    snprintf(thr, sizeof thr, "%d", s->o.nthreads);
    const char *argv[] = {s->self, "serve", "--worker", "--model", s->model, "--plan", s->plan_path, "--stage", stage,
                          "--max-seqs", seqs, "--threads", thr, "--in", s->addr[i], "--out", s->addr[i + 1], NULL};
    /* A worker never outlives its front, even when the front is killed: on SIGTERM it removes the
     * front's temp dir (LLMSYS_SERVE_TMPDIR), then exits. The front may block signals for sigwait. */
    const char *env[] = {"OPENBLAS_NUM_THREADS", thr, "LLMSYS_SERVE_TMPDIR", s->tmpdir, "OMP_NUM_THREADS", thr, NULL};
    ls_spawn_opts so = {.death_signal = SIGTERM, .unblock_signals = 1, .env = env};
    pid_t pid;
    LS_TRY(ls_spawn_self(s->self, argv, &so, &pid));
    s->pids[i] = pid;
    s->alive[i] = 1;
    s->t_spawn[i] = ls_now();
    return LS_OK;
}

/* "pipeline stage i (layers [a, b), pid N) is stopped (signal S)" into m. */
static void stopped_msg(const ls_server *s, int i, char *m, size_t n) {
    snprintf(m, n, "pipeline stage %d (layers [%d, %d), pid %d) is stopped (signal %d)", i, s->plan.stages[i].layer_begin,
             s->plan.stages[i].layer_end, (int)s->pids[i], s->stopped[i]);
}

/* "pipeline stage i (layers [a, b), pid N) killed by signal 9" (its last worker's end) into m. */
static void death_msg(const ls_server *s, int i, char *m, size_t n) {
    snprintf(m, n, "pipeline stage %d (layers [%d, %d), pid %d) %s", i, s->plan.stages[i].layer_begin,
             s->plan.stages[i].layer_end, (int)s->dead_pid[i], s->death[i]);
}

/* Why stage i does not serve (dead, restarting, stopped) into m: 1, or 0 when it serves. */
static int stage_down(const ls_server *s, int i, char *m, size_t n) {
    char d[300];
    death_msg(s, i, d, sizeof d);
    if (s->alive[i] && s->restarting[i])
        snprintf(m, n, "pipeline stage %d (layers [%d, %d), pid %d) is restarting (restart %d of %d; pid %d %s)", i,
                 s->plan.stages[i].layer_begin, s->plan.stages[i].layer_end, (int)s->pids[i], s->restarts[i],
                 s->o.stage_restarts, (int)s->dead_pid[i], s->death[i]);
    else if (s->alive[i] && s->stopped[i])
        stopped_msg(s, i, m, n);
    else if (s->alive[i])
        return 0;
    else if (s->restarts[i] < s->o.stage_restarts)
        snprintf(m, n, "%.240s; restarting", d);
    else if (s->o.stage_restarts > 0)
        snprintf(m, n, "%.240s; restarted %d time%s; not restarted again", d, s->restarts[i],
                 s->restarts[i] == 1 ? "" : "s");
    else
        snprintf(m, n, "%.240s", d);
    return 1;
}

/* Reaps dead workers and notes stopped (SIGSTOP) and continued ones (mutex held): sets bit i
 * of *died for every stage found dead since the last call and of *stopped for every one found
 * stopped (each may be several: two stages killed at once); returns *died | *stopped. */
_Static_assert(LS_SERVE_MAX_STAGES <= 32, "check_workers' stage masks are 32 bits");
static unsigned check_workers(ls_server *s, unsigned *died, unsigned *stopped) {
    *died = *stopped = 0;
    for (int i = 0; i < s->ns; i++) {
        if (!s->alive[i]) continue;
        int st;
        pid_t r = waitpid(s->pids[i], &st, WNOHANG | WUNTRACED | WCONTINUED);
        if (r == s->pids[i] && WIFSTOPPED(st)) {
            s->stopped[i] = WSTOPSIG(st);
            *stopped |= 1u << i;
        } else if (r == s->pids[i] && WIFCONTINUED(st)) {
            s->stopped[i] = 0;
            LS_WARN("pipeline stage %d (pid %d) continues", i, (int)s->pids[i]);
        } else if (r == s->pids[i]) {
            s->alive[i] = 0;
            s->stopped[i] = 0;
            s->restarting[i] = 0; /* a restart that died before serving: it counted */
            s->dead_pid[i] = s->pids[i];
            s->t_death[i] = ls_now();
            if (WIFSIGNALED(st))
                snprintf(s->death[i], sizeof s->death[i], "killed by signal %d", WTERMSIG(st));
            else
                snprintf(s->death[i], sizeof s->death[i], "exited with status %d", WEXITSTATUS(st));
            *died |= 1u << i;
        }
    }
    return *died | *stopped;
}

/* What check_workers found of stage i (its death, else its stop) into m. */
static void worker_event_msg(const ls_server *s, int i, unsigned died, char *m, size_t n) {
    if (died >> i & 1)
        death_msg(s, i, m, n);
    else
        stopped_msg(s, i, m, n);
}

/* Shuts the workers down (called without the mutex; it takes it to mark them gone, as /health
 * may be reading): a polite shutdown through the ring first, then SIGKILL what is left after 2 s.
 * A worker that did not pass the shutdown on and exit 0 is named in the log. */
static void stop_workers(ls_server *s) {
    int any = 0;
    for (int i = 0; i < s->ns; i++) any |= s->alive[i];
    if (!any) return;
    if (s->to_first) {
        ls_wire_hdr h = {0};
        h.magic = LS_WIRE_MAGIC, h.version = LS_WIRE_VERSION, h.type = LS_MSG_SHUTDOWN, h.stage = -1;
        ls_wire_seal(&h, sizeof h);
        zmq_send(s->to_first, &h, sizeof h, ZMQ_DONTWAIT);
    }
    double t0 = ls_now();
    for (int left = 1; left;) {
        int kill_now = ls_now() - t0 > 2.0;
        left = 0;
        for (int i = 0; i < s->ns; i++) {
            if (!s->alive[i]) continue;
            int st = 0;
            if (kill_now) kill(s->pids[i], SIGKILL);
            if (waitpid(s->pids[i], &st, kill_now ? 0 : WNOHANG) == s->pids[i] || kill_now) {
                if (kill_now)
                    LS_WARN("pipeline stage %d (pid %d) did not stop within 2 s; killed", i, (int)s->pids[i]);
                else if (!WIFEXITED(st) || WEXITSTATUS(st))
                    LS_WARN("pipeline stage %d (pid %d) ended with %s %d at shutdown", i, (int)s->pids[i],
                            WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                pthread_mutex_lock(&s->mu);
                s->alive[i] = 0;
                pthread_mutex_unlock(&s->mu);
            } else {
                left++;
            }
        }
        if (left) ls_sleep_ms(10);
    }
}

/* A ping into the ring (mutex held); its id, 0 if it could not be queued. */
static uint32_t send_ping(ls_server *s) {
    ls_wire_hdr h = {0};
    h.magic = LS_WIRE_MAGIC, h.version = LS_WIRE_VERSION, h.type = LS_MSG_PING, h.stage = -1;
    h.mb_id = ++s->probe_id;
    ls_wire_seal(&h, sizeof h);
    return zmq_send(s->to_first, &h, sizeof h, ZMQ_DONTWAIT) == (int)sizeof h ? h.mb_id : 0;
}

/* Restarts (mutex held, every scheduler tick): a dead stage is spawned again, with the same
 * arguments and endpoints, while its budget lasts; then a ping goes round the ring every 0.25 s
 * until one sent after the last spawn comes back (ring_back). Every link is one FIFO ZeroMQ
 * pipe and every stage handles its messages in order, so that ping comes back behind every
 * micro-batch sent before the death: nothing stale is left in the ring when scheduling resumes
 * (what a dead stage held is lost; what its neighbours held for it runs on the new worker's
 * empty KV cache and its result, for an unknown micro-batch, is dropped). A restarted worker
 * without a ping back within load_timeout_s is killed; that restart counted. */
/* How long after a death a stage restarted `done` times before is started again: at once the
 * first time, then 0.5 s, 1 s, 2 s ... up to 8 s, so a worker that cannot start (its checkpoint
 * gone) does not spend its budget in milliseconds. */
static double restart_delay(int done) { return done ? fmin(ldexp(0.5, done - 1), 8.0) : 0; }

static void restart_stages(ls_server *s, double now) {
    int waiting = 0, down = 0;
    for (int i = 0; i < s->ns && !s->stopping; i++) {
        const ls_plan_stage *st = &s->plan.stages[i];
        if (!s->alive[i] && s->restarts[i] < s->o.stage_restarts &&
            now - s->t_death[i] >= restart_delay(s->restarts[i])) {
            s->restarts[i]++;
            if (spawn_worker(s, i) != LS_OK) {
                snprintf(s->death[i], sizeof s->death[i], "could not be restarted: %.100s", ls_errmsg());
                s->t_death[i] = now;
                LS_ERROR("pipeline stage %d (layers [%d, %d)) %s", i, st->layer_begin, st->layer_end, s->death[i]);
            } else {
                s->restarting[i] = 1;
                s->busy_base[i] = s->busy[i];
                s->ring_ping = 0;
                LS_WARN("pipeline stage %d (layers [%d, %d)) restarted as pid %d (restart %d of %d)", i,
                        st->layer_begin, st->layer_end, (int)s->pids[i], s->restarts[i], s->o.stage_restarts);
            }
        }
        if (s->alive[i] && s->restarting[i] && now - s->t_spawn[i] > s->o.load_timeout_s) {
            LS_ERROR("pipeline stage %d (pid %d): no ping back within %.0f s of its restart; killing it", i,
                     (int)s->pids[i], s->o.load_timeout_s);
            kill(s->pids[i], SIGKILL);
            s->t_spawn[i] = now; /* once: check_workers() reaps it within a tick */
        }
        waiting |= s->alive[i] && s->restarting[i];
        down |= !s->alive[i] || s->stopped[i];
    }
    if (waiting && !down && now - s->ring_ping_sent >= 0.25) {
        uint32_t id = send_ping(s);
        if (id && !s->ring_ping) s->ring_ping = id;
        s->ring_ping_sent = now;
    }
}

/* A ping sent after the last spawn came back (mutex held): every restarted stage serves. */
static void ring_back(ls_server *s) {
    double now = ls_now();
    for (int i = 0; i < s->ns; i++)
        if (s->restarting[i]) {
            s->restarting[i] = 0;
            LS_WARN("pipeline stage %d (pid %d) answers round the ring %.2f s after its restart; serving again", i,
                    (int)s->pids[i], now - s->t_spawn[i]);
        }
    s->ring_ping = 0;
    s->probe_sent = s->probe_back = now; /* a probe that went out before the death is not waited for */
    s->probe_late = 0;
}

/* ---------------------------------------------------------------- scheduling */

static int send_mb(ls_server *s, req **rs, int n, int prefill) {
    size_t ntok = 0;
    for (int i = 0; i < n; i++) ntok += prefill ? (size_t)rs[i]->n_prompt : 1;
    size_t len = sizeof(ls_wire_hdr) + (size_t)n * sizeof(ls_engine_seq) + ntok * sizeof(int32_t);
    char *buf = malloc(len);
    req **copy = malloc(sizeof(req *) * n);
    if (!buf || !copy) {
        free(buf), free(copy);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    ls_wire_hdr h = {0};
    h.magic = LS_WIRE_MAGIC, h.version = LS_WIRE_VERSION, h.type = LS_MSG_FORWARD;
    h.mb_id = ++s->next_mb, h.nseq = (uint32_t)n, h.ntok = (uint32_t)ntok, h.stage = -1;
    h.payload_bytes = len - sizeof h;
    memcpy(buf, &h, sizeof h);
    ls_engine_seq *seqs = (ls_engine_seq *)(buf + sizeof h);
    int32_t *tok = (int32_t *)(seqs + n);
    for (int i = 0; i < n; i++) {
        req *r = rs[i];
        if (prefill) {
            seqs[i] = (ls_engine_seq){r->slot, 0, r->n_prompt};
            for (int k = 0; k < r->n_prompt; k++) *tok++ = r->prompt[k];
        } else {
            seqs[i] = (ls_engine_seq){r->slot, r->pos, 1};
            *tok++ = r->out[r->n_out - 1];
        }
        r->in_flight = 1;
        copy[i] = r;
    }
    ls_wire_seal(buf, len);
    int rc = zmq_send(s->to_first, buf, len, 0) < 0 ? ls_err(LS_ENET, "send to stage 0: %s", zmq_strerror(zmq_errno())) : LS_OK;
    free(buf);
    if (rc) {
        for (int i = 0; i < n; i++) copy[i]->in_flight = 0;
        free(copy);
        return rc;
    }
    inflight_mb *m = &s->mbs[s->n_inflight++];
    m->id = h.mb_id, m->n = n, m->prefill = prefill, m->t_sent = ls_now(), m->r = copy;
    if (prefill) s->m_mb_prefill++;
    else s->m_mb_decode++;
    return LS_OK;
}

/* Forms and sends the next micro-batch; 0 when nothing is ready. Prefill and decode
 * alternate when both are waiting so neither starves. */
static int schedule_one(ls_server *s) {
    int M = s->o.max_seqs, np = 0, nd = 0;
    req **pre = malloc(sizeof(req *) * M), **dec = malloc(sizeof(req *) * M);
    LS_ASSERT(pre && dec);
    for (int k = 0; k < M; k++) {
        req *r = s->slots[(s->rr + k) % M];
        if (!r || r->in_flight || r->state != RQ_ACTIVE) continue;
        if (!r->prefilled) {
            if (np < s->plan.mb_prefill) pre[np++] = r;
        } else if (nd < s->plan.mb_decode) {
            dec[nd++] = r;
        }
    }
    int sent = 0;
    int use_prefill = np > 0 && (nd == 0 || !s->last_prefill);
    if (np || nd) {
        int rc = use_prefill ? send_mb(s, pre, np, 1) : send_mb(s, dec, nd, 0);
        if (rc == LS_OK) {
            sent = 1;
            s->last_prefill = use_prefill;
            s->rr = (s->rr + 1) % M;
        } else {
            LS_ERROR("scheduler: %s", ls_errmsg());
        }
    }
    free(pre), free(dec);
    return sent;
}

static void handle_result(ls_server *s, const char *data, size_t len) {
    if (ls_wire_check(data, len, "result") != LS_OK) {
        /* cannot trust which micro-batch it was: the pipeline state is unknown */
        char m[300];
        snprintf(m, sizeof m, "pipeline returned a corrupt message: %s", ls_errmsg());
        fail_all(s, m);
        return;
    }
    ls_wire_hdr h;
    memcpy(&h, data, sizeof h);
    /* a restarted stage counts from 0 again; what its earlier workers sent is ahead of the ping */
    for (int i = 0; i < s->ns && i < LS_SERVE_MAX_STAGES; i++)
        if (!s->restarting[i] && s->busy_base[i] + h.busy_s[i] > s->busy[i]) s->busy[i] = s->busy_base[i] + h.busy_s[i];
    if (h.type == LS_MSG_PING && h.mb_id && h.mb_id == s->probe_id) {
        s->probe_back = ls_now();
        if (s->probe_late) LS_WARN("pipeline answers health probes again");
        s->probe_late = 0;
    }
    if (h.type == LS_MSG_PING && s->ring_ping && h.mb_id >= s->ring_ping) ring_back(s);
    if (h.type == LS_MSG_PING || h.type == LS_MSG_SHUTDOWN) return;
    int k = 0;
    while (k < s->n_inflight && s->mbs[k].id != h.mb_id) k++;
    if (k == s->n_inflight) {
        LS_WARN("scheduler: result for unknown micro-batch %u dropped", h.mb_id);
        return;
    }
    inflight_mb m = s->mbs[k];
    s->mbs[k] = s->mbs[--s->n_inflight];
    int V = s->cfg.vocab;
    size_t need = (size_t)m.n * sizeof(ls_engine_seq) + (size_t)m.n * V * sizeof(float);
    if (h.type == LS_MSG_ERROR || h.type != LS_MSG_RESULT || h.nseq != (uint32_t)m.n || h.payload_bytes != need) {
        char err[300];
        if (h.type == LS_MSG_ERROR) snprintf(err, sizeof err, "%.*s", (int)h.payload_bytes, data + sizeof h);
        else snprintf(err, sizeof err, "pipeline returned a malformed result");
        for (int i = 0; i < m.n; i++) {
            m.r[i]->in_flight = 0;
            req_finish(s, m.r[i], RQ_FAILED, NULL, err);
        }
        free(m.r);
        return;
    }
    const float *logits = (const float *)(data + sizeof h + (size_t)m.n * sizeof(ls_engine_seq));
    for (int i = 0; i < m.n; i++) {
        req *r = m.r[i];
        r->in_flight = 0;
        if (r->state != RQ_ACTIVE) continue;
        if (r->cancelled) {
            req_finish(s, r, RQ_DONE, "cancelled", NULL);
            continue;
        }
        if (m.prefill) {
            r->prefilled = 1;
            r->pos = r->n_prompt;
            r->t_first = ls_now();
        } else {
            r->pos++;
        }
        const float *lg = logits + (size_t)i * V;
        int tok;
        if (r->sc.temperature <= 0.0f) {
            tok = 0;
            for (int v = 1; v < V; v++) tok = lg[v] > lg[tok] ? v : tok;
        } else {
            tok = ls_sample_logits(lg, V, &r->sc, &r->rng);
            if (tok < 0) tok = LS_TOK_EOS;
        }
        r->out[r->n_out++] = tok;
        s->m_tokens++;
        pthread_cond_broadcast(&r->cv);
        if (tok == LS_TOK_EOS) req_finish(s, r, RQ_DONE, "stop", NULL);
        else if (r->n_out >= r->max_tokens || r->pos >= s->cfg.n_ctx) req_finish(s, r, RQ_DONE, "length", NULL);
    }
    free(m.r);
}

/* Why the pipeline cannot take requests now (a dead, restarting or stopped stage, a late
 * probe, shutdown; a dead or restarting one first):
 * 1 with the reason in m, else 0. Caller holds the mutex. */
static int unavailable(const ls_server *s, char *m, size_t n) {
    if (s->stopping) return snprintf(m, n, "server shutting down"), 1;
    for (int i = 0; i < s->ns; i++)
        if (!s->alive[i] || s->restarting[i]) return stage_down(s, i, m, n);
    for (int i = 0; i < s->ns; i++)
        if (stage_down(s, i, m, n)) return 1;
    if (s->probe_late)
        return snprintf(m, n, "pipeline did not answer a health probe within %.1f s (a stage is hung or overloaded)",
                        s->o.probe_timeout_s),
               1;
    return 0;
}

/* The Retry-After of a 503 (mutex held), in whole seconds, when the pipeline is down only
 * because stages are restarting: until the latest next restart attempt of a dead stage
 * (restart_delay) plus a 0.25 s margin, rounded up; 1 while restarted stages load (and when an
 * attempt is due). 0, no header, when a stage will not come back by itself (its restarts are
 * used up, or it is stopped and not restarting), when none is down, and at shutdown. */
static int retry_after(const ls_server *s, double now) {
    int restarting = 0;
    double wait = 0;
    for (int i = 0; i < s->ns && !s->stopping; i++) {
        if (s->alive[i] && s->restarting[i]) {
            restarting = 1;
        } else if (s->alive[i] && s->stopped[i]) {
            return 0;
        } else if (!s->alive[i]) {
            if (s->restarts[i] >= s->o.stage_restarts) return 0;
            restarting = 1;
            wait = fmax(wait, s->t_death[i] + restart_delay(s->restarts[i]) - now);
        }
    }
    return restarting ? (int)fmax(1, ceil(wait + 0.25)) : 0;
}

/* The health probe (mutex held): a ping round the ring whenever the pipeline is idle, at
 * most once a second; one not back within probe_timeout_s marks the pipeline not ok and
 * fails what is in flight. Late means the ring was found empty that long after the ping was
 * sent (so a front that was itself stopped or starved does not blame the stages). */
static void probe(ls_server *s, double now) {
    for (int i = 0; i < s->ns; i++)
        if (!s->alive[i] || s->restarting[i]) return; /* restart_stages() pings */
    if (s->probe_sent > s->probe_back) {
        if (!s->probe_late && s->poll_empty - s->probe_sent > s->o.probe_timeout_s) {
            char m[256];
            s->probe_late = 1;
            unavailable(s, m, sizeof m);
            LS_ERROR("%s; failing in-flight requests", m);
            fail_all(s, m);
        }
        return;
    }
    if (s->n_inflight || now - s->probe_sent < 1.0) return;
    if (send_ping(s)) s->probe_sent = now;
}

static void *scheduler_main(void *arg) {
    ls_server *s = arg;
    double last_check = 0;
    while (__atomic_load_n(&s->running, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&s->mu);
        double now = ls_now();
        if (now - last_check > 0.02) {
            char msg[256];
            unsigned died, stopped, ev = check_workers(s, &died, &stopped);
            last_check = now;
            /* a line per stage that died or stopped (two killed at once: two lines); the first fail_all ends
             * what is in flight */
            for (int i = 0; ev && i < s->ns; i++) {
                if (!(ev >> i & 1)) continue;
                char out[64] = "";
                if ((died >> i & 1) && s->o.stage_restarts > 0 && s->restarts[i] >= s->o.stage_restarts)
                    snprintf(out, sizeof out, "; restarted %d time%s, not restarted again", s->restarts[i],
                             s->restarts[i] == 1 ? "" : "s");
                worker_event_msg(s, i, died, msg, sizeof msg);
                LS_ERROR("%s; failing in-flight requests%s", msg, out);
                fail_all(s, msg);
            }
            restart_stages(s, now);
            probe(s, now);
            for (int i = 0; i < s->n_inflight; i++)
                if (now - s->mbs[i].t_sent > s->o.step_timeout_s) {
                    snprintf(msg, sizeof msg, "pipeline did not return a micro-batch within %.0f s", s->o.step_timeout_s);
                    fail_all(s, msg);
                    break;
                }
        }
        /* admit queued requests into free KV slots */
        while (s->qhead && s->n_active < s->o.max_seqs) {
            req *r = s->qhead;
            s->qhead = r->next;
            if (!s->qhead) s->qtail = NULL;
            s->qlen--;
            int slot = 0;
            while (s->slots[slot]) slot++;
            s->slots[slot] = r;
            r->slot = slot;
            r->state = RQ_ACTIVE;
            s->n_active++;
        }
        /* cancelled requests that are not in the pipeline leave now */
        for (int i = 0; i < s->o.max_seqs; i++)
            if (s->slots[i] && s->slots[i]->cancelled && !s->slots[i]->in_flight)
                req_finish(s, s->slots[i], RQ_DONE, "cancelled", NULL);
        char why[300];
        while (!unavailable(s, why, sizeof why) && s->n_inflight < s->depth && schedule_one(s)) {
        }
        int inflight = s->n_inflight;
        pthread_mutex_unlock(&s->mu);

        zmq_pollitem_t it = {s->from_last, 0, ZMQ_POLLIN, 0};
        int pr = zmq_poll(&it, 1, inflight ? 5 : 2);
        if (pr == 0) s->poll_empty = ls_now(); /* read by probe(), in this thread only */
        if (pr > 0 && (it.revents & ZMQ_POLLIN)) {
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, s->from_last, ZMQ_DONTWAIT) >= 0) {
                /* ZeroMQ gives no alignment guarantee: read the logits from an aligned copy */
                size_t len = zmq_msg_size(&msg);
                char *copy = malloc(len ? len : 1);
                pthread_mutex_lock(&s->mu);
                if (copy) {
                    memcpy(copy, zmq_msg_data(&msg), len);
                    handle_result(s, copy, len);
                } else {
                    fail_all(s, "out of memory for a pipeline result");
                }
                pthread_mutex_unlock(&s->mu);
                free(copy);
            }
            zmq_msg_close(&msg);
        }
    }
    /* PR_SET_PDEATHSIG follows the thread that forked: the workers restarted by this thread
     * would get SIGTERM as it ends, so the workers are shut down first */
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    fail_all(s, "server shutting down");
    pthread_mutex_unlock(&s->mu);
    stop_workers(s);
    return NULL;
}

/* ---------------------------------------------------------------- HTTP */

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
} conn_state;

typedef struct {
    ls_server *s;
    req *r;
    int sent;     /* tokens already streamed */
    int finished; /* 1: final event sent, 2: [DONE] sent */
    int chunks;   /* events sent (the first chat chunk carries the role) */
    long created;
    char id[32];
} stream_state;

/* A complete reply; retry_s > 0 adds "Retry-After: retry_s" (a 503 while stages restart). */
static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *ctype, const char *text,
                                 int retry_s) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", retry_s);
    return ls_httpd_respond(c, (unsigned)status, ctype, text, strlen(text), retry_s > 0 ? "Retry-After" : NULL, ra);
}

/* An OpenAI error object; retry_s > 0 adds Retry-After (a 503 while stages restart). */
static enum MHD_Result send_error_retry(struct MHD_Connection *c, int status, const char *type, const char *msg,
                                        int retry_s) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    char *t = cJSON_PrintUnformatted(j);
    enum MHD_Result r = send_text(c, status, "application/json", t ? t : "{}", retry_s);
    free(t);
    cJSON_Delete(j);
    return r;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *type, const char *msg) {
    return send_error_retry(c, status, type, msg, 0);
}

static int bytes_ready(const ls_server *s, const req *r, int from, int final) {
    return ls_text_utf8_ready(s->tok, r->out, from, r->n_out, final);
}

static char *completion_json(ls_server *s, req *r, const char *id) {
    cJSON *j = ls_oai_envelope(r->chat, 0, id, (long)ls_wall_time(), s->name), *ch = cJSON_AddArrayToObject(j, "choices");
    char *text = ls_text_utf8(s->tok, r->out, 0, r->n_out);
    LS_ASSERT(text);
    cJSON_AddItemToArray(ch, ls_oai_choice(r->chat, 0, 1, text, r->out, r->n_out, r->finish));
    free(text);
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_out);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_out);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_state *st = cls;
    ls_server *s = st->s;
    req *r = st->r;
    if (st->finished == 2) return MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        int final = r->state >= RQ_DONE;
        int upto = bytes_ready(s, r, st->sent, final);
        if (upto > st->sent || final || !__atomic_load_n(&s->running, __ATOMIC_ACQUIRE)) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&r->cv, &s->mu, &ts);
    }
    int final = r->state >= RQ_DONE, running = __atomic_load_n(&s->running, __ATOMIC_ACQUIRE);
    int upto = bytes_ready(s, r, st->sent, final);
    ssize_t n = 0;
    cJSON *j = NULL;
    if (upto > st->sent || (final && st->finished == 0 && r->state == RQ_DONE)) {
        j = ls_oai_envelope(r->chat, 1, st->id, st->created, s->name);
        cJSON *ch = cJSON_AddArrayToObject(j, "choices");
        int last = final && upto == r->n_out;
        char *text = ls_text_utf8(s->tok, r->out, st->sent, upto);
        LS_ASSERT(text);
        cJSON_AddItemToArray(ch, ls_oai_choice(r->chat, 1, st->chunks == 0, text, r->out + st->sent, upto - st->sent,
                                               last ? r->finish : NULL));
        free(text);
        if (last) st->finished = 1;
        st->chunks++;
        st->sent = upto;
    } else if (final && r->state == RQ_FAILED && st->finished == 0) {
        j = cJSON_CreateObject();
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "message", r->error);
        cJSON_AddStringToObject(e, "type", "server_error");
        st->finished = 1;
    } else if (final && st->finished == 1 && r->include_usage && r->state == RQ_DONE) {
        /* OpenAI's usage chunk: empty choices, the request's token counts */
        j = ls_oai_envelope(r->chat, 1, st->id, st->created, s->name);
        cJSON_AddArrayToObject(j, "choices");
        cJSON *u = cJSON_AddObjectToObject(j, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
        cJSON_AddNumberToObject(u, "completion_tokens", r->n_out);
        cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_out);
        r->include_usage = 0;
    } else if ((final && st->finished == 1) || !running) {
        st->finished = 2;
    }
    pthread_mutex_unlock(&s->mu);
    if (j) {
        char *t = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        n = snprintf(buf, max, "data: %s\n\n", t ? t : "{}");
        free(t);
        if ((size_t)n >= max) n = (ssize_t)max - 1; /* cannot happen with a 64 KiB block; keep bounded */
    } else if (st->finished == 2) {
        n = snprintf(buf, max, "data: [DONE]\n\n");
    }
    return n;
}

static void stream_free(void *cls) {
    stream_state *st = cls;
    pthread_mutex_lock(&st->s->mu);
    if (st->r->state < RQ_DONE) st->r->cancelled = 1; /* client went away */
    req_unref(st->r);
    pthread_mutex_unlock(&st->s->mu);
    free(st);
}

/* Parses and validates a completion (or, r->chat set, chat) request into r (prompt, limits,
 * sampling). Returns 0, or the HTTP status to refuse it with (err says why). */
static int parse_completion(ls_server *s, const char *body, size_t len, req *r, char *err, size_t en) {
    cJSON *j;
    if (ls_json_parse(body, len, "request body", &j) != LS_OK) { /* also refuses a \u0000 escape */
        snprintf(err, en, "%s", ls_errmsg());
        return 400;
    }
    int ok = 0, status = 400;
    char *chat_text = NULL;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    const cJSON *mdl = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (r->chat && !mt) mt = cJSON_GetObjectItemCaseSensitive(j, "max_completion_tokens");
    const cJSON *te = cJSON_GetObjectItemCaseSensitive(j, "temperature");
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(j, "top_p");
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(j, "stream");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(j, "seed");
    const cJSON *nn = cJSON_GetObjectItemCaseSensitive(j, "n");
    int T = s->cfg.n_ctx;
    if (!cJSON_IsObject(j)) { snprintf(err, en, "request body must be a JSON object"); goto out; }
    if (mdl && !cJSON_IsString(mdl)) { snprintf(err, en, "\"model\" must be a string"); goto out; }
    if (mdl && strcmp(mdl->valuestring, s->name)) {
        snprintf(err, en, "the model '%.80s' does not exist (this server serves '%.80s')", mdl->valuestring, s->name);
        status = 404;
        goto out;
    }
    if (r->chat) {
        /* chat: the messages rendered by the plain template (openai.c) are the text prompt */
        if (!(chat_text = ls_oai_chat_prompt(cJSON_GetObjectItemCaseSensitive(j, "messages"), err, en))) goto out;
    }
    if (chat_text || cJSON_IsString(p)) {
        /* a text prompt is a document start: BOS then its bytes, as in training */
        const char *txt = chat_text ? chat_text : p->valuestring;
        int *ids = NULL;
        size_t n = 0;
        if (ls_text_encode(s->tok, txt, strlen(txt), &ids, &n) != LS_OK) { snprintf(err, en, "out of memory"); goto out; }
        if (n + 1 >= (size_t)T) {
            snprintf(err, en, "prompt of %zu tokens is too long (context is %d tokens)", n, T);
            free(ids);
            goto out;
        }
        r->n_prompt = (int)n + 1;
        r->prompt = malloc(sizeof(int) * (size_t)r->n_prompt);
        if (!r->prompt) { free(ids); snprintf(err, en, "out of memory"); goto out; }
        r->prompt[0] = LS_TOK_BOS;
        memcpy(r->prompt + 1, ids, sizeof(int) * n);
        free(ids);
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) {
        int n = cJSON_GetArraySize(p);
        if (n >= T) { snprintf(err, en, "prompt of %d tokens is too long (context is %d tokens)", n, T); goto out; }
        r->prompt = malloc(sizeof(int) * (size_t)n);
        if (!r->prompt) { snprintf(err, en, "out of memory"); goto out; }
        r->n_prompt = n;
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(p, i);
            int id;
            if (!ls_json_as_int(e, &id) || id < 0 || id >= s->cfg.vocab) {
                snprintf(err, en, "prompt[%d] is not a token id in [0, %d)", i, s->cfg.vocab);
                goto out;
            }
            r->prompt[i] = e->valueint;
        }
    } else {
        snprintf(err, en, "\"prompt\" is required: a string or a non-empty array of token ids");
        goto out;
    }
    r->max_tokens = r->chat ? T - r->n_prompt : 16; /* chat: up to the context, as OpenAI's default */
    if (mt) {
        int m;
        if (!ls_json_as_int(mt, &m) || m < 1 || m > T) {
            snprintf(err, en, "\"max_tokens\" must be an integer in [1, %d]", T);
            goto out;
        }
        r->max_tokens = mt->valueint;
    }
    r->sc.temperature = 1.0f;
    r->sc.top_p = 1.0f;
    r->sc.top_k = 0;
    if (te) {
        if (!cJSON_IsNumber(te) || te->valuedouble < 0 || te->valuedouble > 10) {
            snprintf(err, en, "\"temperature\" must be a number in [0, 10]");
            goto out;
        }
        r->sc.temperature = (float)te->valuedouble;
    }
    if (tp) {
        if (!cJSON_IsNumber(tp) || !(tp->valuedouble > 0) || tp->valuedouble > 1) {
            snprintf(err, en, "\"top_p\" must be a number in (0, 1]");
            goto out;
        }
        r->sc.top_p = (float)tp->valuedouble;
    }
    if (sm && !cJSON_IsBool(sm)) { snprintf(err, en, "\"stream\" must be true or false"); goto out; }
    r->stream = sm && cJSON_IsTrue(sm);
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
    if (so && !cJSON_IsNull(so) && (!cJSON_IsObject(so) || (iu && !cJSON_IsBool(iu)))) {
        snprintf(err, en, "\"stream_options\" must be an object like {\"include_usage\": true}");
        goto out;
    }
    r->include_usage = r->stream && cJSON_IsTrue(iu);
    if (nn && (!cJSON_IsNumber(nn) || nn->valueint != 1)) { snprintf(err, en, "only \"n\": 1 is supported"); goto out; }
    int64_t seed = 0;
    if (sd && !ls_json_as_i64(sd, 0, LS_JSON_INT_MAX, &seed)) {
        snprintf(err, en, "\"seed\" must be an integer in [0, 2^53]");
        goto out;
    }
    ls_rng_seed(&r->rng, sd ? (uint64_t)seed : (uint64_t)r->id * 0x9E3779B97F4A7C15ull + 1);
    ok = 1;
out:
    free(chat_text);
    cJSON_Delete(j);
    return ok ? 0 : status;
}

static enum MHD_Result handle_completion(ls_server *s, struct MHD_Connection *c, conn_state *cs, int chat) {
    req *r = calloc(1, sizeof *r);
    if (!r) return send_error(c, 500, "server_error", "out of memory");
    char err[256];
    pthread_mutex_lock(&s->mu);
    r->id = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    r->chat = chat;
    int bad = parse_completion(s, cs->body ? cs->body : "", cs->len, r, err, sizeof err);
    if (bad) {
        free(r->prompt);
        free(r);
        pthread_mutex_lock(&s->mu);
        s->m_rejected++;
        pthread_mutex_unlock(&s->mu);
        return send_error(c, bad, "invalid_request_error", err);
    }
    r->out = malloc(sizeof(int) * (size_t)r->max_tokens);
    if (!r->out) {
        free(r->prompt);
        free(r);
        return send_error(c, 500, "server_error", "out of memory");
    }
    pthread_cond_init(&r->cv, NULL);
    r->slot = -1;
    r->refs = 2; /* this HTTP thread + the scheduler */
    r->t_submit = ls_now();
    pthread_mutex_lock(&s->mu);
    char why[300];
    if (unavailable(s, why, sizeof why)) {
        char m[400];
        snprintf(m, sizeof m, "service unavailable: %s", why);
        int ra = retry_after(s, ls_now());
        s->m_rejected++;
        r->refs = 1;
        req_unref(r);
        pthread_mutex_unlock(&s->mu);
        return send_error_retry(c, 503, "server_error", m, ra);
    }
    s->m_requests++;
    s->m_prompt_tokens += (uint64_t)r->n_prompt;
    if (s->qtail) s->qtail->next = r;
    else s->qhead = r;
    s->qtail = r;
    s->qlen++;
    char id[32];
    snprintf(id, sizeof id, "%s-%d", chat ? "chatcmpl" : "cmpl", r->id);
    if (r->stream) {
        pthread_mutex_unlock(&s->mu);
        stream_state *st = calloc(1, sizeof *st);
        if (!st) {
            pthread_mutex_lock(&s->mu);
            r->cancelled = 1;
            req_unref(r);
            pthread_mutex_unlock(&s->mu);
            return send_error(c, 500, "server_error", "out of memory");
        }
        st->s = s;
        st->r = r;
        st->created = (long)ls_wall_time();
        snprintf(st->id, sizeof st->id, "%s", id);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_cb, st, stream_free);
        if (!resp) {
            stream_free(st);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    while (r->state < RQ_DONE) pthread_cond_wait(&r->cv, &s->mu);
    char *text = r->state == RQ_DONE ? completion_json(s, r, id) : NULL;
    char errm[300];
    snprintf(errm, sizeof errm, "%s", r->error);
    int failed = r->state == RQ_FAILED, ra = failed ? retry_after(s, ls_now()) : 0;
    req_unref(r);
    pthread_mutex_unlock(&s->mu);
    if (failed) return send_error_retry(c, 503, "server_error", errm, ra);
    enum MHD_Result ret =
        text ? send_text(c, 200, "application/json", text, 0) : send_error(c, 500, "server_error", "out of memory");
    free(text);
    return ret;
}

static enum MHD_Result handle_health(ls_server *s, struct MHD_Connection *c) {
    cJSON *j = cJSON_CreateObject(), *arr;
    pthread_mutex_lock(&s->mu);
    char why[300];
    int ok = !unavailable(s, why, sizeof why), ra = ok ? 0 : retry_after(s, ls_now());
    cJSON_AddStringToObject(j, "status", ok ? "ok" : "degraded");
    if (!ok) cJSON_AddStringToObject(j, "error", why);
    cJSON_AddStringToObject(j, "model", s->name);
    arr = cJSON_AddArrayToObject(j, "stages");
    cJSON *dead = cJSON_CreateArray();
    for (int i = 0; i < s->ns; i++) {
        const ls_plan_stage *st = &s->plan.stages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "stage", i);
        cJSON_AddStringToObject(o, "device", st->device);
        int rg[2] = {st->layer_begin, st->layer_end};
        cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray(rg, 2));
        const int *bits = s->plan.bits + st->layer_begin;
        cJSON_AddItemToObject(o, "bits", cJSON_CreateIntArray(bits, st->layer_end - st->layer_begin));
        cJSON_AddNumberToObject(o, "pid", (double)s->pids[i]);
        cJSON_AddBoolToObject(o, "alive", s->alive[i]);
        cJSON_AddBoolToObject(o, "stopped", s->stopped[i] != 0);
        cJSON_AddBoolToObject(o, "restarting", s->alive[i] && s->restarting[i]);
        cJSON_AddNumberToObject(o, "restarts", s->restarts[i]);
        cJSON_AddBoolToObject(o, "ok", s->alive[i] && !s->stopped[i] && !s->restarting[i]);
        if (!s->alive[i]) {
            cJSON_AddStringToObject(o, "exit", s->death[i]);
            cJSON_AddItemToArray(dead, cJSON_CreateNumber(i));
        }
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(j, "dead_stages", dead);
    cJSON_AddNumberToObject(j, "queue_depth", s->qlen);
    cJSON_AddNumberToObject(j, "active_sequences", s->n_active);
    pthread_mutex_unlock(&s->mu);
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    enum MHD_Result r = send_text(c, ok ? 200 : 503, "application/json", t ? t : "{}", ra);
    free(t);
    return r;
}

void ls_server_get_stats(ls_server *s, ls_server_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    out->requests = s->m_requests;
    out->failed = s->m_failed;
    out->rejected = s->m_rejected;
    out->tokens = s->m_tokens;
    out->prompt_tokens = s->m_prompt_tokens;
    out->mb_prefill = s->m_mb_prefill;
    out->mb_decode = s->m_mb_decode;
    out->queue_depth = s->qlen;
    out->active = s->n_active;
    out->inflight = s->n_inflight;
    out->n_stages = s->ns;
    for (int i = 0; i < s->ns; i++) {
        out->busy_s[i] = s->busy[i];
        out->up[i] = s->alive[i];
        out->restarts[i] = s->restarts[i];
    }
    pthread_mutex_unlock(&s->mu);
    out->uptime_s = ls_now() - s->t_start;
}

static enum MHD_Result handle_metrics(ls_server *s, struct MHD_Connection *c) {
    size_t cap = 4096 + (size_t)s->ns * 256;
    char *b = malloc(cap);
    if (!b) return MHD_NO;
    int n = 0;
    ls_server_stats st;
    ls_server_get_stats(s, &st);
#define M(...) n += snprintf(b + n, cap - (size_t)n, __VA_ARGS__)
    M("# HELP llmsys_requests_total Completion requests accepted.\n# TYPE llmsys_requests_total counter\n");
    M("llmsys_requests_total %llu\n", (unsigned long long)st.requests);
    M("# HELP llmsys_requests_failed_total Accepted requests that failed (pipeline errors).\n# TYPE llmsys_requests_failed_total counter\n");
    M("llmsys_requests_failed_total %llu\n", (unsigned long long)st.failed);
    M("# HELP llmsys_requests_rejected_total Requests refused with a 4xx/503 before scheduling.\n# TYPE llmsys_requests_rejected_total counter\n");
    M("llmsys_requests_rejected_total %llu\n", (unsigned long long)st.rejected);
    M("# HELP llmsys_generated_tokens_total Tokens generated.\n# TYPE llmsys_generated_tokens_total counter\n");
    M("llmsys_generated_tokens_total %llu\n", (unsigned long long)st.tokens);
    M("# HELP llmsys_prompt_tokens_total Prompt tokens prefilled.\n# TYPE llmsys_prompt_tokens_total counter\n");
    M("llmsys_prompt_tokens_total %llu\n", (unsigned long long)st.prompt_tokens);
    M("# HELP llmsys_queue_depth Requests waiting for a KV slot.\n# TYPE llmsys_queue_depth gauge\nllmsys_queue_depth %d\n", st.queue_depth);
    M("# HELP llmsys_active_sequences Sequences holding a KV slot.\n# TYPE llmsys_active_sequences gauge\nllmsys_active_sequences %d\n", st.active);
    M("# HELP llmsys_inflight_micro_batches Micro-batches inside the pipeline.\n# TYPE llmsys_inflight_micro_batches gauge\nllmsys_inflight_micro_batches %d\n", st.inflight);
    M("# HELP llmsys_micro_batches_total Micro-batches sent, by phase.\n# TYPE llmsys_micro_batches_total counter\n");
    M("llmsys_micro_batches_total{phase=\"prefill\"} %llu\nllmsys_micro_batches_total{phase=\"decode\"} %llu\n",
      (unsigned long long)st.mb_prefill, (unsigned long long)st.mb_decode);
    M("# HELP llmsys_stage_busy_seconds_total Seconds each stage spent computing.\n# TYPE llmsys_stage_busy_seconds_total counter\n");
    for (int i = 0; i < st.n_stages; i++) M("llmsys_stage_busy_seconds_total{stage=\"%d\"} %.6f\n", i, st.busy_s[i]);
    M("# HELP llmsys_stage_up Whether each stage process is alive.\n# TYPE llmsys_stage_up gauge\n");
    for (int i = 0; i < st.n_stages; i++) M("llmsys_stage_up{stage=\"%d\"} %d\n", i, st.up[i]);
    M("# HELP llmsys_stage_restarts_total Times each stage was started again after it died.\n# TYPE "
      "llmsys_stage_restarts_total counter\n");
    for (int i = 0; i < st.n_stages; i++) M("llmsys_stage_restarts_total{stage=\"%d\"} %d\n", i, st.restarts[i]);
    M("# HELP llmsys_uptime_seconds Seconds since the server started.\n# TYPE llmsys_uptime_seconds gauge\nllmsys_uptime_seconds %.3f\n",
      st.uptime_s);
#undef M
    enum MHD_Result r = send_text(c, 200, "text/plain; version=0.0.4", b, 0);
    free(b);
    return r;
}

/* GET /v1/models (id NULL) or /v1/models/{id}. */
static enum MHD_Result handle_models(ls_server *s, struct MHD_Connection *c, const char *id) {
    if (id && strcmp(id, s->name)) {
        char m[400];
        snprintf(m, sizeof m, "the model '%.120s' does not exist (this server serves '%.120s')", id, s->name);
        return send_error(c, 404, "invalid_request_error", m);
    }
    cJSON *j = id ? ls_oai_model(s->name, s->created) : ls_oai_models(s->name, s->created);
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    enum MHD_Result r =
        t ? send_text(c, 200, "application/json", t, 0) : send_error(c, 500, "server_error", "out of memory");
    free(t);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ls_server *s = cls;
    if (!*con_cls) {
        conn_state *cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        return MHD_YES;
    }
    conn_state *cs = *con_cls;
    if (*upload_size) {
        /* accumulate the body; past the limit keep reading but drop it (answer 413 at the end) */
        if (!cs->too_big && cs->len + *upload_size > s->o.max_body) {
            cs->too_big = 1;
        } else if (!cs->too_big) {
            if (cs->len + *upload_size + 1 > cs->cap) {
                size_t nc = (cs->len + *upload_size + 1) * 2;
                char *nb = realloc(cs->body, nc);
                if (!nb) return MHD_NO;
                cs->body = nb, cs->cap = nc;
            }
            memcpy(cs->body + cs->len, upload, *upload_size);
            cs->len += *upload_size;
            cs->body[cs->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    int is_get = !strcmp(method, "GET"), is_post = !strcmp(method, "POST");
    /* the API needs the key when there is one; /health and /metrics stay open for probes and scrapers */
    if (s->o.api_key && !strncmp(url, "/v1/", 4) && !ls_httpd_bearer_ok(c, s->o.api_key))
        return send_error(c, 401, "invalid_request_error", "a valid API key is required (Authorization: Bearer KEY)");
    int chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions")) {
        if (!is_post) return send_error(c, 405, "invalid_request_error", chat ? "use POST for /v1/chat/completions" : "use POST for /v1/completions");
        if (cs->too_big) {
            char m[128];
            snprintf(m, sizeof m, "request body exceeds the limit of %zu bytes", s->o.max_body);
            pthread_mutex_lock(&s->mu);
            s->m_rejected++;
            pthread_mutex_unlock(&s->mu);
            return send_error(c, 413, "invalid_request_error", m);
        }
        return handle_completion(s, c, cs, chat);
    }
    if (!strncmp(url, "/v1/models", 10) && (!url[10] || url[10] == '/'))
        return is_get ? handle_models(s, c, url[10] ? url + 11 : NULL) : send_error(c, 405, "invalid_request_error", "use GET");
    if (!strcmp(url, "/health")) return is_get ? handle_health(s, c) : send_error(c, 405, "invalid_request_error", "use GET");
    if (!strcmp(url, "/metrics")) return is_get ? handle_metrics(s, c) : send_error(c, 405, "invalid_request_error", "use GET");
    return send_error(c, 404, "invalid_request_error", "unknown path (try POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics)");
}

static void on_complete(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_state *cs = *con_cls;
    if (cs) {
        free(cs->body);
        free(cs);
        *con_cls = NULL;
    }
}

/* ---------------------------------------------------------------- start / stop */

static int wait_ready(ls_server *s, double timeout) {
    ls_wire_hdr h = {0};
    h.magic = LS_WIRE_MAGIC, h.version = LS_WIRE_VERSION, h.type = LS_MSG_PING, h.stage = -1;
    ls_wire_seal(&h, sizeof h);
    if (zmq_send(s->to_first, &h, sizeof h, 0) < 0) return ls_err(LS_ENET, "ping stage 0: %s", zmq_strerror(zmq_errno()));
    double t0 = ls_now();
    while (ls_now() - t0 < timeout) {
        char msg[256];
        unsigned died, stopped, ev = check_workers(s, &died, &stopped);
        if (ev) {
            worker_event_msg(s, __builtin_ctz(ev), died, msg, sizeof msg);
            return ls_err(LS_EPEER, "%s while loading (see its message above)", msg);
        }
        zmq_pollitem_t it = {s->from_last, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 50) > 0) {
            char buf[sizeof(ls_wire_hdr) + 64];
            int n = zmq_recv(s->from_last, buf, sizeof buf, 0);
            if (n >= (int)sizeof(ls_wire_hdr) && ls_wire_check(buf, (size_t)n, "ping") == LS_OK) return LS_OK;
        }
    }
    return ls_err(LS_ETIMEDOUT, "pipeline stages not ready after %.0f s", timeout);
}

void ls_server_stop(ls_server *s) {
    if (!s) return;
    /* scheduler first, then fail what is left (waking the HTTP threads that wait on it)
     * and refuse new requests, and only then join the HTTP threads */
    __atomic_store_n(&s->running, 0, __ATOMIC_RELEASE);
    if (s->sched_started) pthread_join(s->sched, NULL);
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    if (s->slots) fail_all(s, "server shutting down");
    pthread_mutex_unlock(&s->mu);
    if (s->httpd) MHD_stop_daemon(s->httpd);
    stop_workers(s);
    if (s->to_first) zmq_close(s->to_first);
    if (s->from_last) zmq_close(s->from_last);
    if (s->zctx) zmq_ctx_term(s->zctx);
    if (s->tmpdir[0]) {
        for (int i = 0; i <= s->ns; i++)
            if (!strncmp(s->addr[i], "ipc://", 6)) unlink(s->addr[i] + 6);
        ls_serve_tmpdir_remove(s->tmpdir);
        rmdir(s->tmpdir);
    }
    free(s->slots);
    free(s->mbs);
    ls_bpe_free(s->tok);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int ls_server_start(ls_server **out, const ls_server_opts *opts) {
    *out = NULL;
    ls_server *s = calloc(1, sizeof *s);
    if (!s) return ls_err(LS_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->o = *opts;
    ls_server_opts d = ls_server_defaults();
    if (!s->o.host) s->o.host = d.host;
    if (s->o.max_seqs <= 0) s->o.max_seqs = d.max_seqs;
    if (!s->o.max_body) s->o.max_body = d.max_body;
    if (s->o.nthreads <= 0) s->o.nthreads = 1;
    if (s->o.step_timeout_s <= 0) s->o.step_timeout_s = d.step_timeout_s;
    if (s->o.mb_prefill <= 0) s->o.mb_prefill = d.mb_prefill;
    if (s->o.mb_decode <= 0) s->o.mb_decode = d.mb_decode;
    if (s->o.load_timeout_s <= 0) s->o.load_timeout_s = d.load_timeout_s;
    int rc = LS_OK, *bits = NULL;
    if (!opts->model || !opts->self) { rc = ls_err(LS_EINVAL, "server: model and self are required"); goto fail; }
    if (s->o.stage_restarts < 0) {
        rc = ls_err(LS_EINVAL, "serve: stage_restarts must be >= 0, got %d", s->o.stage_restarts);
        goto fail;
    }
    if (s->o.api_key && !s->o.api_key[0]) {
        rc = ls_err(LS_EINVAL, "serve: an empty API key");
        goto fail;
    }
    snprintf(s->model, sizeof s->model, "%s", opts->model);
    snprintf(s->self, sizeof s->self, "%s", opts->self);
    snprintf(s->host, sizeof s->host, "%s", s->o.host);
    /* a thread per connection: completions block their connection while they generate */
    ls_httpd_opts ho = {.what = "serve",
                        .bind = s->host,
                        .port = s->o.port,
                        .thread_per_conn = 1,
                        .max_conns = s->o.max_conns,
                        .max_per_ip = s->o.max_conns_per_ip,
                        .timeout_s = s->o.http_timeout_s ? s->o.http_timeout_s : 60,
                        .handler = on_request,
                        .cls = s,
                        .completed = on_complete,
                        .completed_cls = s,
                        .authenticated = s->o.api_key != NULL,
                        .auth_hint = "--api-key KEY (or LLMSYS_API_KEY)"};
    if ((rc = ls_httpd_check_bind(&ho))) goto fail; /* before any stage starts */
    if (opts->model_name && opts->model_name[0]) snprintf(s->name, sizeof s->name, "%s", opts->model_name);
    else ls_oai_model_stem(opts->model, s->name, sizeof s->name);
    if ((rc = ls_ckpt_info(s->model, &s->cfg, &bits, NULL))) goto fail;
    if ((rc = ls_ckpt_tokenizer_load(s->model, &s->cfg, &s->tok))) goto fail;
    if (!opts->plan && opts->plan_path) {
        if ((rc = ls_plan_read(opts->plan_path, s->cfg.n_layer, &s->plan))) goto fail;
    } else if (opts->plan) {
        if (opts->plan->n_layer != s->cfg.n_layer) {
            rc = ls_err(LS_EINVAL, "plan is for a model with %d layers, but %s has %d", opts->plan->n_layer, s->model,
                        s->cfg.n_layer);
            goto fail;
        }
        s->plan = *opts->plan;
        if ((rc = ls_plan_validate(&s->plan, "plan"))) goto fail;
    } else if ((rc = ls_plan_single(&s->plan, s->cfg.n_layer, bits, s->o.mb_prefill, s->o.mb_decode))) {
        goto fail;
    }
    if (s->plan.n_stages > LS_SERVE_MAX_STAGES) {
        rc = ls_err(LS_EINVAL, "plan has %d stages; serve runs at most %d", s->plan.n_stages, LS_SERVE_MAX_STAGES);
        goto fail;
    }
    s->ns = s->plan.n_stages;
    s->depth = s->ns;
    s->slots = calloc((size_t)s->o.max_seqs, sizeof(req *));
    s->mbs = calloc((size_t)s->depth + 1, sizeof(inflight_mb));
    if (!s->slots || !s->mbs) { rc = ls_err(LS_ENOMEM, "out of memory"); goto fail; }
    sweep_stale_tmpdirs();
    snprintf(s->tmpdir, sizeof s->tmpdir, "/tmp/" TMP_PREFIX "%d-XXXXXX", (int)getpid());
    if (!mkdtemp(s->tmpdir)) {
        s->tmpdir[0] = '\0';
        rc = ls_err(LS_EIO, "mkdtemp: %s", strerror(errno));
        goto fail;
    }
    snprintf(s->plan_path, sizeof s->plan_path, "%s/plan.json", s->tmpdir);
    if ((rc = ls_plan_write(s->plan_path, &s->plan))) {
        s->plan_path[0] = '\0';
        goto fail;
    }
    for (int i = 0; i < s->ns; i++) {
        if (s->plan.stages[i].address[0]) snprintf(s->addr[i], sizeof s->addr[i], "%s", s->plan.stages[i].address);
        else snprintf(s->addr[i], sizeof s->addr[i], "ipc://%s/stage%d", s->tmpdir, i);
    }
    snprintf(s->addr[s->ns], sizeof s->addr[s->ns], "ipc://%s/front", s->tmpdir);
    s->zctx = zmq_ctx_new();
    s->to_first = s->zctx ? zmq_socket(s->zctx, ZMQ_PUSH) : NULL;
    s->from_last = s->zctx ? zmq_socket(s->zctx, ZMQ_PULL) : NULL;
    if (!s->to_first || !s->from_last) { rc = ls_err(LS_ENET, "zmq: %s", zmq_strerror(zmq_errno())); goto fail; }
    int zero = 0;
    zmq_setsockopt(s->to_first, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s->from_last, ZMQ_LINGER, &zero, sizeof zero);
    if ((rc = ls_zsec_bind(s->zctx, s->from_last, s->addr[s->ns], "serve front")) ||
        (rc = ls_zsec_connect(s->to_first, s->addr[0], "serve front")))
        goto fail;
    for (int i = 0; i < s->ns; i++)
        if ((rc = spawn_worker(s, i))) goto fail;
    if ((rc = wait_ready(s, s->o.load_timeout_s))) goto fail;
    s->t_start = ls_now();
    s->created = (long)ls_wall_time();
    __atomic_store_n(&s->running, 1, __ATOMIC_RELEASE);
    if (pthread_create(&s->sched, NULL, scheduler_main, s) != 0) { rc = ls_err(LS_EIO, "cannot start the scheduler thread"); goto fail; }
    s->sched_started = 1;
    if ((rc = ls_httpd_start(&ho, &s->httpd, &s->port))) goto fail;
    free(bits);
    *out = s;
    return LS_OK;
fail:
    free(bits);
    {
        char keep[512];
        snprintf(keep, sizeof keep, "%s", ls_errmsg());
        ls_server_stop(s);
        ls_err(rc, "%s", keep);
    }
    return rc;
}
