/* sim.c - discrete-event replay of serving one batch with a plan, the way `llmsys serve`
 * schedules it, over the planner's own cost terms: a check on the closed-form objective,
 * which assumes full micro-batches, free hops and stages on devices of their own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/internal.h"

ls_plan_sim_opts ls_plan_sim_defaults(void) {
    return (ls_plan_sim_opts){.hop_s = -1, .capacity = 0, .front_s = 0};
}

ls_plan_sim_opts ls_plan_sim_for_cluster(const ls_plan_cluster *cl) {
    ls_plan_sim_opts o = ls_plan_sim_defaults();
    o.capacity = cl->host_capacity;
    o.hop_s = cl->host_hop_s;
    o.front_s = cl->host_front_s;
    return o;
}

typedef struct {
    int n, prefill, *req; /* the requests it carries */
} sim_mb;

typedef struct {
    int q[LS_PLAN_MAX_DEV + 2], head, len; /* FIFO of micro-batch ids waiting */
    int cur;                               /* micro-batch being worked on, -1 idle */
    double left;                           /* its remaining work, seconds at full speed */
} sim_station;

typedef struct {
    double at;
    int mb, to; /* destination: 0..S-1 a stage, S the front */
} sim_msg;

typedef struct {
    const ls_plan_problem *p;
    const ls_plan_result *pl;
    ls_plan_sim_opts o;
    int S, B, depth;
    /* requests: serve's slots, all admitted at time 0 */
    int *prefilled, *pos, *n_out, *in_flight, *done;
    int rr, last_prefill, n_done, n_inflight;
    sim_mb *mbs; /* depth entries (one in flight per stage, as serve); n == 0: free */
    sim_station st[LS_PLAN_MAX_DEV + 1]; /* the stages, then the front (station S) */
    sim_msg *msgs;
    int n_msgs;
    double now;
    ls_plan_sim_result *r;
} sim_t;

static void station_push(sim_station *s, int mb) {
    int cap = (int)(sizeof s->q / sizeof s->q[0]);
    s->q[(s->head + s->len) % cap] = mb;
    s->len++;
}

/* Work of micro-batch m at stage k, or at the front for k == S (seconds at full speed). */
static double station_work(const sim_t *x, int k, const sim_mb *m) {
    if (k == x->S) return x->o.front_s;
    const ls_plan_problem *p = x->p;
    const ls_plan_result *pl = x->pl;
    int d = pl->dev[k];
    double ctx = 0, w = 0;
    for (int i = 0; i < m->n; i++) ctx += x->pos[m->req[i]];
    ctx /= m->n;
    for (int l = pl->begin[k]; l < pl->begin[k + 1]; l++)
        w += m->prefill ? ls_plan_layer_prefill_s(p->arch, p->cl, d, pl->bits[l], m->n, p->wl.prompt)
                        : ls_plan_layer_decode_s(p->arch, p->cl, d, pl->bits[l], m->n, ctx);
    if (k == x->S - 1)
        w += m->prefill ? ls_plan_head_prefill_s(p->arch, p->cl, d, m->n, p->wl.prompt)
                        : ls_plan_head_decode_s(p->arch, p->cl, d, m->n);
    return w;
}

/* Time on the wire from stage k to the next (the front's hops cost hop_s only). */
static double transit(const sim_t *x, int k, const sim_mb *m) {
    double hop = x->o.hop_s >= 0 ? x->o.hop_s : 0;
    if (k < 0 || k >= x->S - 1) return hop;
    const ls_plan_problem *p = x->p;
    int d = x->pl->dev[k], nx = x->pl->dev[k + 1];
    double bytes = (double)m->n * (m->prefill ? p->wl.prompt : 1) * p->arch->d_model * ls_plan_act_bytes(p->cl, d);
    double lat = ls_plan_link_s(p->cl, d, nx, 0);
    return (x->o.hop_s >= 0 ? x->o.hop_s : lat) + ls_plan_link_s(p->cl, d, nx, bytes) - lat;
}

static void send_to(sim_t *x, int mb, int from) {
    sim_msg *g = &x->msgs[x->n_msgs++];
    g->mb = mb;
    g->to = from + 1; /* from -1 (the front) to stage 0, from S-1 to the front (S) */
    g->at = x->now + transit(x, from, &x->mbs[mb]);
}

/* serve's schedule_one: up to mb_prefill unprefilled and mb_decode prefilled requests that
 * are not in flight, scanning the slots from a rotating start; prefill and decode
 * alternate when both are waiting. Returns 1 when a micro-batch was sent. */
static int schedule_one(sim_t *x) {
    int B = x->B, np = 0, nd = 0, free_mb = -1;
    for (int i = 0; i < x->depth && free_mb < 0; i++)
        if (x->mbs[i].n == 0) free_mb = i;
    if (free_mb < 0) return 0;
    sim_mb *m = &x->mbs[free_mb];
    int pre[LS_PLAN_SIM_MAXB], dec[LS_PLAN_SIM_MAXB];
    for (int k = 0; k < B; k++) {
        int r = (x->rr + k) % B;
        if (x->done[r] || x->in_flight[r]) continue;
        if (!x->prefilled[r]) {
            if (np < x->pl->mb_prefill) pre[np++] = r;
        } else if (nd < x->pl->mb_decode) {
            dec[nd++] = r;
        }
    }
    if (!np && !nd) return 0;
    int use_prefill = np > 0 && (nd == 0 || !x->last_prefill);
    m->prefill = use_prefill;
    m->n = use_prefill ? np : nd;
    memcpy(m->req, use_prefill ? pre : dec, sizeof(int) * (size_t)m->n);
    for (int i = 0; i < m->n; i++) x->in_flight[m->req[i]] = 1;
    if (use_prefill)
        x->r->mb_prefill++;
    else
        x->r->mb_decode++;
    x->last_prefill = use_prefill;
    x->rr = (x->rr + 1) % B;
    x->n_inflight++;
    send_to(x, free_mb, -1);
    return 1;
}

/* The front took micro-batch mb back: one token for each of its requests. */
static void front_done(sim_t *x, int mb) {
    sim_mb *m = &x->mbs[mb];
    for (int i = 0; i < m->n; i++) {
        int r = m->req[i];
        x->in_flight[r] = 0;
        if (m->prefill)
            x->prefilled[r] = 1, x->pos[r] = x->p->wl.prompt;
        else
            x->pos[r]++;
        if (++x->n_out[r] >= x->p->wl.gen) x->done[r] = 1, x->n_done++;
    }
    m->n = 0;
    x->n_inflight--;
    while (x->n_inflight < x->depth && schedule_one(x)) {
    }
}

static void station_start(sim_t *x, int k) {
    sim_station *s = &x->st[k];
    if (s->cur >= 0 || !s->len) return;
    int cap = (int)(sizeof s->q / sizeof s->q[0]);
    s->cur = s->q[s->head];
    s->head = (s->head + 1) % cap;
    s->len--;
    s->left = station_work(x, k, &x->mbs[s->cur]);
}

int ls_plan_simulate(const ls_plan_problem *p, const ls_plan_result *pl, const ls_plan_sim_opts *o,
                     ls_plan_sim_result *out) {
    memset(out, 0, sizeof *out);
    int S = pl->n_stage, B = p->wl.batch;
    if (S < 1 || S > LS_PLAN_MAX_DEV || B < 1 || B > LS_PLAN_SIM_MAXB || pl->mb_prefill < 1 || pl->mb_decode < 1)
        return ls_err(LS_EINVAL, "simulate: %d stages, batch %d (at most %d), micro-batches %d/%d", S, B,
                      LS_PLAN_SIM_MAXB, pl->mb_prefill, pl->mb_decode);
    /* the replay walks every micro-batch through every stage: bound its work */
    double n_mb = ceil((double)B / pl->mb_prefill) + ceil((double)B / pl->mb_decode) * (p->wl.gen - 1);
    if (n_mb * (S + 1) > LS_PLAN_SIM_MAX_STEPS)
        return ls_err(LS_EINVAL, "simulate: %.3g micro-batch steps exceed the replay's limit of %.3g", n_mb * (S + 1),
                      (double)LS_PLAN_SIM_MAX_STEPS);
    sim_t x = {.p = p, .pl = pl, .o = *o, .S = S, .B = B, .r = out};
    x.depth = S;
    int *ints = calloc((size_t)B * 5 + (size_t)x.depth * B, sizeof(int));
    x.mbs = calloc((size_t)x.depth, sizeof *x.mbs);
    x.msgs = calloc((size_t)x.depth, sizeof *x.msgs);
    if (!ints || !x.mbs || !x.msgs) {
        free(ints), free(x.mbs), free(x.msgs);
        return ls_err(LS_ENOMEM, "simulate: out of memory");
    }
    x.prefilled = ints, x.pos = ints + B, x.n_out = ints + 2 * B, x.in_flight = ints + 3 * B, x.done = ints + 4 * B;
    for (int i = 0; i < x.depth; i++) x.mbs[i].req = ints + 5 * B + (size_t)i * B;
    int NS = S + (o->front_s > 0); /* stations: the stages, and the front when it costs time */
    for (int k = 0; k < NS; k++) x.st[k].cur = -1;
    while (x.n_inflight < x.depth && schedule_one(&x)) {
    }
    int rc = LS_OK;
    long events = 0, max_events = 64L * (B + 1) * (p->wl.gen + 1) * (S + 2);
    while (x.n_done < B) {
        if (++events > max_events || (x.n_inflight == 0)) {
            rc = ls_err(LS_ESTATE, "simulate: the replay stalled with %d of %d requests done", x.n_done, B);
            break;
        }
        /* processor sharing: the busy stages (and the front when it works) split the capacity */
        int busy = 0;
        for (int k = 0; k < NS; k++) busy += x.st[k].cur >= 0;
        double rate = o->capacity > 0 && busy > o->capacity ? o->capacity / busy : 1.0;
        double dt = INFINITY;
        for (int k = 0; k < NS; k++)
            if (x.st[k].cur >= 0 && x.st[k].left / rate < dt) dt = x.st[k].left / rate;
        for (int i = 0; i < x.n_msgs; i++)
            if (x.msgs[i].at - x.now < dt) dt = x.msgs[i].at - x.now;
        if (dt < 0) dt = 0;
        x.now += dt;
        for (int k = 0; k < NS; k++) {
            sim_station *s = &x.st[k];
            if (s->cur < 0) continue;
            s->left -= rate * dt;
            if (k < S) out->busy_s[k] += dt;
        }
        /* completions, then arrivals (at the front: its work on the micro-batch, then
         * front_done samples and schedules; with no front work at once), then idle
         * stations take their next */
        for (int k = 0; k < NS; k++) {
            sim_station *s = &x.st[k];
            if (s->cur < 0 || s->left > 1e-12) continue;
            int mb = s->cur;
            s->cur = -1;
            if (k == S)
                front_done(&x, mb);
            else
                send_to(&x, mb, k);
        }
        for (int i = 0; i < x.n_msgs;) {
            if (x.msgs[i].at <= x.now + 1e-15) {
                sim_msg g = x.msgs[i];
                x.msgs[i] = x.msgs[--x.n_msgs];
                if (g.to == S && NS == S)
                    front_done(&x, g.mb);
                else
                    station_push(&x.st[g.to], g.mb);
            } else {
                i++;
            }
        }
        for (int k = 0; k < NS; k++) station_start(&x, k);
    }
    free(ints), free(x.mbs), free(x.msgs);
    if (rc) return rc;
    out->seconds = x.now;
    out->tok_s = (double)B * p->wl.gen / x.now;
    return LS_OK;
}
