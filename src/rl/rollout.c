/* rollout.c - a rollout worker: continuous-batching generation with the serve engine's
 * slot KV cache, streaming every new token (and its behaviour log-prob) to the manager at
 * each poll, and pulling the newest complete weight version from its relay whenever its
 * batch is finished. It reads no file: its model comes with the run config, its first weights
 * (version 0) from its relay. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "llmsys/serve.h"
#include "llmsys/zsec.h"
#include "rl/internal.h"

typedef struct {
    int active, done, n_tok, n_prompt, pos, max_new, n_gen, reported;
    int64_t id;
    int *tok;
    float *lp; /* by response index */
} slot;

typedef struct {
    rl_config cfg;
    int id, version, V, n_ctx;
    void *zctx, *msock, *rsock;
    char rsock_ep[256];
    ls_engine *e;
    ls_rl_asm *as;
    slot *s;
    int ns;
    ls_rng rng;
    double busy, idle, pull_s;
    int64_t tokens, steps;
    int pulls;
    int pull_failed;
    double rtt_s; /* manager round trips: total seconds and count */
    int64_t rtts;
    float *logits;
    int *stok;
    ls_engine_seq *seqs;
} roll;

static int kv_used(const roll *w) {
    int n = 0;
    for (int i = 0; i < w->ns; i++) n += w->s[i].active ? w->s[i].n_tok : 0;
    return n;
}

static int n_active(const roll *w) {
    int n = 0;
    for (int i = 0; i < w->ns; i++) n += w->s[i].active && !w->s[i].done;
    return n;
}

/* One engine step over every running slot: prefill what is not cached, sample one token. */
static int step(roll *w) {
    int nseq = 0, nt = 0;
    for (int i = 0; i < w->ns; i++) {
        slot *s = &w->s[i];
        if (!s->active || s->done) continue;
        w->seqs[nseq] = (ls_engine_seq){i, s->pos, s->n_tok - s->pos};
        for (int k = s->pos; k < s->n_tok; k++) w->stok[nt++] = s->tok[k];
        nseq++;
    }
    if (!nseq) return LS_OK;
    LS_TRY(ls_engine_forward(w->e, w->seqs, nseq, w->stok, NULL, w->logits, 0));
    w->steps++;
    for (int q = 0; q < nseq; q++) {
        slot *s = &w->s[w->seqs[q].slot];
        const float *lg = w->logits + (size_t)q * w->V;
        float mx = lg[0];
        for (int v = 1; v < w->V; v++) mx = lg[v] > mx ? lg[v] : mx;
        double sum = 0.0;
        for (int v = 0; v < w->V; v++) sum += exp((double)(lg[v] - mx));
        double u = ls_rng_uniform_f64(&w->rng) * sum, c = 0.0;
        int tok = w->V - 1;
        for (int v = 0; v < w->V; v++) {
            c += exp((double)(lg[v] - mx));
            if (u < c) {
                tok = v;
                break;
            }
        }
        s->pos = s->n_tok;
        s->tok[s->n_tok++] = tok;
        s->lp[s->n_gen++] = (float)((double)(lg[tok] - mx) - log(sum));
        w->tokens++;
        if (tok == LS_TOK_EOS || s->n_gen >= s->max_new || s->n_tok >= w->n_ctx) s->done = 1;
    }
    return LS_OK;
}

static int pull(roll *w, const char *ep) {
    double t0 = ls_now();
    w->pulls++;
    if (strcmp(ep, w->rsock_ep) != 0) {
        if (w->rsock) zmq_close(w->rsock);
        w->rsock = rl_socket(w->zctx, ZMQ_DEALER);
        if (!w->rsock) return LS_ENET;
        LS_TRY(ls_zsec_connect(w->rsock, ep, "rollout's relay link"));
        snprintf(w->rsock_ep, sizeof w->rsock_ep, "%s", ep);
    }
    rl_buf b = {0};
    rl_msg_begin(&b, M_PULL);
    rl_put_i64(&b, w->version);
    int rc = rl_msg_end(&b);
    if (rc == LS_OK) rc = rl_send(w->rsock, b.p, b.n, 0);
    rl_buf_free(&b);
    for (int done = 0; rc == LS_OK && !done;) {
        void *msg;
        size_t len;
        rc = rl_recv(w->rsock, 2000, &msg, &len, NULL);
        if (rc == LS_ETIMEDOUT) rc = ls_err(LS_ENET, "relay unreachable at %s (no answer within 2 s)", ep);
        if (rc) break;
        rl_rd r;
        rc = rl_msg_open(msg, len, "relay", &r);
        if (rc == LS_OK && r.type == M_PULL_NONE) {
            done = 1;
        } else if (rc == LS_OK && r.type == M_CHUNK) {
            const ls_rl_chunk_hdr *hp = rl_get_bytes(&r, sizeof(ls_rl_chunk_hdr));
            ls_rl_chunk_hdr h;
            if (hp) memcpy(&h, hp, sizeof h);
            const void *d = hp ? rl_get_bytes(&r, (size_t)h.len) : NULL;
            if (!d)
                rc = ls_err(LS_EFORMAT, "relay %s: truncated chunk", ep);
            else {
                int a = ls_rl_asm_add(w->as, &h, d);
                if (a < 0)
                    rc = a;
                else if (a == 1)
                    done = 2;
            }
        }
        free(msg);
        if (done == 2) {
            const void *data;
            size_t n;
            int64_t v = ls_rl_asm_latest(w->as, &data, &n);
            rc = ls_engine_load_params(w->e, data, n / sizeof(float));
            if (rc == LS_OK) w->version = (int)v;
            if (rc == LS_OK) LS_INFO("rollout %d: version %d from relay %s", w->id, w->version, ep);
        }
    }
    w->pull_s += ls_now() - t0;
    if (rc) {
        /* a half-received version must not leave stale chunks queued on this socket */
        zmq_close(w->rsock);
        w->rsock = NULL;
        w->rsock_ep[0] = 0;
    }
    return rc;
}

static int poll_manager(roll *w, int *stop) {
    rl_buf b = {0};
    rl_msg_begin(&b, M_POLL);
    rl_put_i32(&b, w->id);
    rl_put_i32(&b, w->version);
    rl_put_i32(&b, kv_used(w));
    rl_put_i32(&b, w->ns * w->n_ctx);
    rl_put_i32(&b, w->pull_failed);
    rl_put_f64(&b, w->busy);
    rl_put_f64(&b, w->idle);
    rl_put_i64(&b, w->tokens);
    rl_put_i64(&b, w->steps);
    rl_put_f64(&b, w->pull_s);
    rl_put_i32(&b, w->pulls);
    rl_put_f64(&b, w->rtt_s);
    rl_put_i64(&b, w->rtts);
    int ne = 0;
    for (int i = 0; i < w->ns; i++) ne += w->s[i].active;
    rl_put_i32(&b, ne);
    for (int i = 0; i < w->ns; i++) {
        slot *s = &w->s[i];
        if (!s->active) continue;
        int n = s->n_gen - s->reported;
        rl_put_i64(&b, s->id);
        rl_put_i32(&b, n);
        rl_put(&b, s->tok + s->n_prompt + s->reported, sizeof(int) * (size_t)n);
        rl_put(&b, s->lp + s->reported, sizeof(float) * (size_t)n);
        rl_put_i32(&b, s->done);
    }
    void *rep;
    size_t len;
    rl_rd r;
    double t0 = ls_now();
    int rc = rl_call(w->msock, &b, 3000, &rep, &len, &r, "manager");
    rl_buf_free(&b);
    w->rtt_s += ls_now() - t0, w->rtts++;
    if (rc == LS_ETIMEDOUT) return ls_err(LS_ENET, "rollout %d: manager unreachable (no answer within 3 s)", w->id);
    if (rc) return rc;
    w->pull_failed = 0;
    /* what was sent is now the manager's: finished slots are free */
    for (int i = 0; i < w->ns; i++) {
        slot *s = &w->s[i];
        if (!s->active) continue;
        s->reported = s->n_gen;
        if (s->done) s->active = 0;
    }
    *stop = rl_get_i32(&r);
    int target = rl_get_i32(&r);
    char ep[256];
    rl_get_str(&r, ep, sizeof ep);
    int nd = rl_get_i32(&r);
    for (int k = 0; k < nd && !r.bad; k++) {
        int64_t id = rl_get_i64(&r);
        for (int i = 0; i < w->ns; i++)
            if (w->s[i].active && w->s[i].id == id) w->s[i].active = 0;
    }
    int na = rl_get_i32(&r);
    for (int k = 0; k < na && !r.bad; k++) {
        int64_t id = rl_get_i64(&r);
        int max_new = rl_get_i32(&r), np = rl_get_i32(&r);
        const int32_t *pt = np > 0 && np <= w->n_ctx ? rl_get_bytes(&r, 4 * (size_t)np) : NULL;
        int ng = rl_get_i32(&r);
        const int32_t *gt = ng >= 0 && np + ng <= w->n_ctx ? rl_get_bytes(&r, 4 * (size_t)ng) : NULL;
        const float *gl = gt ? rl_get_bytes(&r, 4 * (size_t)ng) : NULL;
        if (!pt || !gt || !gl) {
            r.bad = 1;
            break;
        }
        int f = 0;
        while (f < w->ns && w->s[f].active) f++;
        if (f == w->ns) continue; /* cannot happen: the manager fills free slots only */
        slot *s = &w->s[f];
        s->active = 1;
        s->id = id;
        s->max_new = max_new;
        s->n_prompt = np;
        memcpy(s->tok, pt, 4 * (size_t)np);
        memcpy(s->tok + np, gt, 4 * (size_t)ng);
        memcpy(s->lp, gl, 4 * (size_t)ng);
        s->n_tok = np + ng;
        s->n_gen = s->reported = ng;
        s->pos = 0;
        s->done = ng >= max_new || s->n_tok >= w->n_ctx || (ng > 0 && gt[ng - 1] == LS_TOK_EOS);
    }
    if (r.bad) LS_WARN("rollout %d: malformed reply from the manager", w->id);
    free(rep);
    if (!*stop && target >= 0 && ep[0] && n_active(w) == 0) {
        if (pull(w, ep) != LS_OK) {
            LS_WARN("rollout %d: %s", w->id, ls_errmsg());
            w->pull_failed = 1;
        }
    }
    return LS_OK;
}

int rl_rollout_main(const ls_rl_worker_opts *o) {
    roll *w = calloc(1, sizeof *w);
    if (!w) return ls_err(LS_ENOMEM, "rollout: out of memory");
    w->id = o->id;
    ls_model_set_threads(1);
    w->zctx = zmq_ctx_new();
    int rc = w->zctx ? rl_join(w->zctx, o->manager, "rollout", o->id, NULL, &w->msock, &w->cfg) : LS_ENET;
    if (rc == LS_OK) {
        ls_engine_opts eo = ls_engine_defaults();
        eo.max_seqs = w->cfg.max_seqs;
        eo.nthreads = 1;
        /* no weights yet (version -1): the manager gives work only once version 0 is pulled */
        rc = ls_engine_new(&w->e, &w->cfg.model, NULL, &eo);
        w->version = -1;
    }
    if (rc == LS_OK) rc = ls_rl_asm_init(&w->as);
    if (rc == LS_OK) {
        const ls_model_config *c = ls_engine_config(w->e);
        w->V = c->vocab, w->n_ctx = c->n_ctx, w->ns = w->cfg.max_seqs;
        w->s = calloc((size_t)w->ns, sizeof *w->s);
        w->logits = malloc(sizeof(float) * (size_t)w->ns * w->V);
        w->stok = malloc(sizeof(int) * (size_t)w->ns * w->n_ctx);
        w->seqs = malloc(sizeof(ls_engine_seq) * (size_t)w->ns);
        if (!w->s || !w->logits || !w->stok || !w->seqs) rc = ls_err(LS_ENOMEM, "rollout: out of memory");
        for (int i = 0; rc == LS_OK && i < w->ns; i++) {
            w->s[i].tok = malloc(sizeof(int) * (size_t)w->n_ctx);
            w->s[i].lp = malloc(sizeof(float) * (size_t)w->n_ctx);
            if (!w->s[i].tok || !w->s[i].lp) rc = ls_err(LS_ENOMEM, "rollout: out of memory");
        }
    }
    ls_rng_seed(&w->rng, w->cfg.seed * 1000003u + (uint64_t)o->id * 7919u + (uint64_t)(ls_wall_time() * 1e3));
    double last_poll = 0, t_prev = ls_now(), poll_s = (w->cfg.step_ms > 10 ? w->cfg.step_ms : 10) * 1e-3 * 0.9;
    int stop = 0;
    while (rc == LS_OK && !stop) {
        double t0 = ls_now();
        int act = n_active(w);
        int finished_before = 0;
        for (int i = 0; i < w->ns; i++) finished_before += w->s[i].active && w->s[i].done;
        if (act > 0) {
            rc = step(w);
            if (rc) break;
            double el = (ls_now() - t0) * 1000.0;
            if (w->cfg.step_ms > el) ls_sleep_ms((int)(w->cfg.step_ms - el + 0.5));
        }
        int finished = 0;
        for (int i = 0; i < w->ns; i++) finished += w->s[i].active && w->s[i].done;
        double now = ls_now();
        if (act > 0)
            w->busy += now - t_prev;
        else
            w->idle += now - t_prev;
        t_prev = now;
        /* event-driven: report at once when a trajectory finishes, otherwise once per decode step
         * (at least every 10 ms), so a repack or an interrupt takes effect within one step */
        if (act == 0 || finished > finished_before || now - last_poll >= poll_s) {
            int v_before = w->version;
            rc = poll_manager(w, &stop);
            last_poll = ls_now();
            /* nothing to do: wait a little before asking again, unless a pull just brought new
             * weights (then the next poll brings the batch at once) */
            if (rc == LS_OK && n_active(w) == 0 && !stop && w->version == v_before) ls_sleep_ms(RL_IDLE_POLL_MS);
            now = ls_now();
            w->idle += now - t_prev; /* polling and pulling are not generation */
            t_prev = now;
        }
    }
    if (w->s)
        for (int i = 0; i < w->ns; i++) free(w->s[i].tok), free(w->s[i].lp);
    free(w->s), free(w->logits), free(w->stok), free(w->seqs);
    ls_engine_free(w->e);
    ls_rl_asm_free(w->as);
    if (w->msock) zmq_close(w->msock);
    if (w->rsock) zmq_close(w->rsock);
    if (w->zctx) zmq_ctx_term(w->zctx);
    free(w);
    return rc;
}
