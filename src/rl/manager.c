/* manager.c - the rollout manager: prompt pool, partial-response pool (trajectories
 * streamed by rollouts at every poll), experience buffer of complete groups, the relay
 * chain, failure detection, the scheduling policy of each design, dynamic repack and the
 * JSON report. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "rl/internal.h"

enum { T_POOL = 0, T_RUN, T_DONE, T_CONSUMED };
enum { MAX_ROLL = 64, MAX_RELAY = 32, MAX_STALE = 16 };

typedef struct {
    int group, state, rollout, version, mixed, n_prompt, n_gen, cap, resumed;
    int *gen;
    float *lp;
    float reward;
} mtraj;

typedef struct {
    int task, n_done, consumed_before; /* groups the trainer had taken when this one was issued */
} mgroup;

typedef struct {
    int used, alive, version, kv_used, kv_cap, pulling, relay;
    uint8_t ident[64];
    size_t identn;
    double last_seen, busy_s, idle_s;
    int64_t tokens, steps;
    double pull_s, rtt_s, base_rtt_s;
    int pulls;
    int64_t rtts, base_rtts;
    int64_t *drops, *assign;
    int n_drops, n_assign, cap_drops, cap_assign;
    double base_busy, base_idle, base_pull; /* totals of earlier incarnations */
    int64_t base_steps;
    int base_pulls;
    int quota; /* laminar: new groups it may still take at its version (its waiting queue) */
} mroll;

typedef struct {
    int used, alive;
    char ep[256];
    double last_seen;
    int64_t version;
    int bad_chunks;
} mrelay;

typedef struct {
    rl_config cfg;
    void *zctx, *sock;
    const ls_rl_task *tasks;         /* ls_rl_worker_check's */
    int n_tasks, n_issue, next_task; /* tasks issued: all but the held-out tail when it is the task file's */
    mtraj *traj;
    mgroup *groups;
    int n_groups, cap_groups;
    int *buffer, buf_head, buf_tail, buf_cap; /* FIFO of complete group ids */
    mroll roll[MAX_ROLL];
    mrelay relay[MAX_RELAY];
    int trainer_version, groups_consumed, done, chain_n;
    char chain_sig[512];
    double t0, t_first_issue, t_last_consume;
    /* figures */
    int64_t traj_consumed, tokens_consumed;
    int stale_hist[MAX_STALE + 1], repacks, moved, topups, roll_failures, relay_failures, chain_rebuilds, joins,
        resumed;
    int mixed_consumed;
    double kv_sum;
    int64_t kv_n;
    double *curve_reward, *curve_loss, *stall, *wait, *train_s, *clip, *isw;
    int n_curve;
    double *t_pub, *t_all;
    int n_ver;
    cJSON *final;
} mgr;

static mtraj *T(mgr *m, int64_t id) { return &m->traj[id]; }

/* ---------------------------------------------------------------- pools */

static int new_group(mgr *m) {
    if (m->n_groups == m->cap_groups) {
        int nc = m->cap_groups ? m->cap_groups * 2 : 256;
        mgroup *g = realloc(m->groups, sizeof *g * (size_t)nc);
        mtraj *t = realloc(m->traj, sizeof *t * (size_t)nc * m->cfg.group);
        if (g) m->groups = g;
        if (t) m->traj = t;
        if (!g || !t) return ls_err(LS_ENOMEM, "manager: out of memory");
        memset(m->traj + (size_t)m->cap_groups * m->cfg.group, 0,
               sizeof *t * (size_t)(nc - m->cap_groups) * m->cfg.group);
        m->cap_groups = nc;
    }
    int g = m->n_groups++;
    m->groups[g] = (mgroup){m->next_task++ % m->n_issue, 0, m->groups_consumed};
    for (int k = 0; k < m->cfg.group; k++) {
        mtraj *t = T(m, (int64_t)g * m->cfg.group + k);
        memset(t, 0, sizeof *t);
        t->group = g;
        t->state = T_POOL;
        t->rollout = -1;
        t->version = -1;
        t->n_prompt = 1 + (int)strlen(m->tasks[m->groups[g].task].prompt);
    }
    if (m->t_first_issue == 0) m->t_first_issue = ls_now();
    return g;
}

static int push_id(int64_t **a, int *n, int *cap, int64_t v) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        int64_t *p = realloc(*a, sizeof **a * (size_t)nc);
        if (!p) return ls_err(LS_ENOMEM, "manager: out of memory");
        *a = p, *cap = nc;
    }
    (*a)[(*n)++] = v;
    return LS_OK;
}

static int running_on(mgr *m, int r) {
    int n = 0;
    for (int64_t i = 0; i < (int64_t)m->n_groups * m->cfg.group; i++)
        n += m->traj[i].state == T_RUN && m->traj[i].rollout == r;
    return n;
}

/* Returns rollout r's running trajectories to the pool (failure, interrupt). */
static void release_rollout(mgr *m, int r) {
    for (int64_t i = 0; i < (int64_t)m->n_groups * m->cfg.group; i++) {
        mtraj *t = &m->traj[i];
        if (t->state == T_RUN && t->rollout == r) t->state = T_POOL, t->rollout = -1, t->resumed++;
    }
    m->roll[r].n_assign = 0;
    m->roll[r].n_drops = 0;
}

static void buffer_push(mgr *m, int g) {
    if (m->buf_tail - m->buf_head == m->buf_cap) {
        int nc = m->buf_cap ? m->buf_cap * 2 : 64;
        int *b = malloc(sizeof(int) * (size_t)nc);
        if (!b) return; /* the group stays DONE; reported as pending */
        for (int i = m->buf_head; i < m->buf_tail; i++) b[i - m->buf_head] = m->buffer[i % m->buf_cap];
        free(m->buffer);
        m->buffer = b;
        m->buf_tail -= m->buf_head;
        m->buf_head = 0;
        m->buf_cap = nc;
    }
    m->buffer[m->buf_tail++ % m->buf_cap] = g;
}

/* ---------------------------------------------------------------- relays */

static int relay_order(mgr *m, int *ids) {
    int n = 0;
    for (int i = 0; i < MAX_RELAY; i++)
        if (m->relay[i].used && m->relay[i].alive) ids[n++] = i;
    return n;
}

static void check_chain(mgr *m) {
    int ids[MAX_RELAY], n = relay_order(m, ids);
    char sig[512];
    int k = 0;
    sig[0] = 0;
    for (int i = 0; i < n; i++) k += snprintf(sig + k, sizeof sig - (size_t)k, "%d,", ids[i]);
    snprintf(m->chain_sig, sizeof m->chain_sig, "%s", sig);
    m->chain_n = n;
}

static const mrelay *relay_for(mgr *m, int r) {
    int ids[MAX_RELAY], n = relay_order(m, ids);
    return n ? &m->relay[ids[r % n]] : NULL;
}

/* ---------------------------------------------------------------- scheduling */

/* laminar: new groups a rollout takes at one weight version: its decode slots' worth and a
 * waiting queue that refills them as trajectories finish (cfg.rollout_batch, whole groups) */
static int queue_groups(const mgr *m) {
    int q = m->cfg.rollout_batch / m->cfg.group, slots = m->cfg.max_seqs / m->cfg.group;
    return q > slots ? q : slots > 0 ? slots : 1;
}

static int may_issue(mgr *m, int version) {
    /* the design's rule (ls_rl_may_issue), counted in groups; laminar's window is a batch beyond
     * what the rollouts' queues hold */
    ls_rl_issue_state q = {.mode = m->cfg.mode,
                           .batch = m->cfg.batch_groups,
                           .staleness = m->cfg.staleness,
                           .window = (int64_t)m->cfg.batch_groups + (int64_t)m->cfg.rollouts * queue_groups(m),
                           .trainer_version = m->trainer_version,
                           .consumed = m->groups_consumed};
    return ls_rl_may_issue(&q, m->n_groups, version);
}

static int wants_version(mgr *m, int r, int64_t *target) {
    const mrelay *rl = relay_for(m, r + m->roll[r].relay);
    if (!rl || rl->version <= m->roll[r].version) return 0;
    if (m->cfg.mode == LS_RL_MODE_SYNC && rl->version < m->trainer_version) return 0; /* wait for the new one */
    *target = rl->version;
    return 1;
}

static void put_traj_assign(mgr *m, rl_buf *b, int64_t id) {
    mtraj *t = T(m, id);
    const char *p = m->tasks[m->groups[t->group].task].prompt;
    rl_put_i64(b, id);
    rl_put_i32(b, m->cfg.max_new);
    rl_put_i32(b, t->n_prompt);
    rl_put_i32(b, LS_TOK_BOS);
    for (int i = 0; i + 1 < t->n_prompt; i++) rl_put_i32(b, (unsigned char)p[i]);
    rl_put_i32(b, t->n_gen);
    for (int i = 0; i < t->n_gen; i++) rl_put_i32(b, t->gen[i]);
    rl_put(b, t->lp, sizeof(float) * (size_t)t->n_gen);
}

static void finish_traj(mgr *m, mtraj *t) {
    char txt[8192];
    int n = 0;
    for (int i = 0; i < t->n_gen && n < (int)sizeof txt; i++) {
        if (t->gen[i] == LS_TOK_EOS) break;
        txt[n++] = t->gen[i] < 256 ? (char)t->gen[i] : '\x7f';
    }
    t->reward = (float)ls_rl_reward(&m->tasks[m->groups[t->group].task], txt, (size_t)n);
    t->state = T_DONE;
    mgroup *g = &m->groups[t->group];
    if (++g->n_done == m->cfg.group) buffer_push(m, t->group);
}

static int append_tokens(mtraj *t, const int32_t *tok, const float *lp, int n) {
    if (t->n_gen + n > t->cap) {
        int nc = t->cap ? t->cap : 32;
        while (nc < t->n_gen + n) nc *= 2;
        int *g = realloc(t->gen, sizeof(int) * (size_t)nc);
        if (g) t->gen = g;
        float *l = realloc(t->lp, sizeof(float) * (size_t)nc);
        if (l) t->lp = l;
        if (!g || !l) return ls_err(LS_ENOMEM, "manager: out of memory");
        t->cap = nc;
    }
    memcpy(t->gen + t->n_gen, tok, sizeof(int) * (size_t)n);
    memcpy(t->lp + t->n_gen, lp, sizeof(float) * (size_t)n);
    t->n_gen += n;
    return LS_OK;
}

/* New groups into rollout id's free slots, whole groups, while the design's issue rule allows;
 * counted (laminar): at most its quota of them, which they use up. */
static void issue_groups(mgr *m, int id, int slots, int counted) {
    mroll *ro = &m->roll[id];
    while (slots >= m->cfg.group && (!counted || ro->quota > 0) && may_issue(m, ro->version)) {
        int g = new_group(m);
        if (g < 0) break;
        for (int k = 0; k < m->cfg.group; k++) {
            int64_t i = (int64_t)g * m->cfg.group + k;
            T(m, i)->state = T_RUN, T(m, i)->rollout = id;
            push_id(&ro->assign, &ro->n_assign, &ro->cap_assign, i);
        }
        slots -= m->cfg.group;
        if (counted) ro->quota--;
    }
}

static void repack(mgr *m);

static void handle_poll(mgr *m, const uint8_t *ident, size_t identn, rl_rd *r) {
    int id = rl_get_i32(r);
    if (id < 0 || id >= MAX_ROLL || !m->roll[id].used) return;
    mroll *ro = &m->roll[id];
    if (!ro->alive || ro->identn != identn || memcmp(ro->ident, ident, identn)) return; /* a stale incarnation */
    ro->last_seen = ls_now();
    int version = rl_get_i32(r);
    ro->kv_used = rl_get_i32(r);
    ro->kv_cap = rl_get_i32(r);
    int pull_failed = rl_get_i32(r);
    ro->busy_s = rl_get_f64(r);
    ro->idle_s = rl_get_f64(r);
    ro->tokens = rl_get_i64(r);
    ro->steps = rl_get_i64(r);
    ro->pull_s = rl_get_f64(r);
    ro->pulls = rl_get_i32(r);
    ro->rtt_s = rl_get_f64(r);
    ro->rtts = rl_get_i64(r);
    int ne = rl_get_i32(r);
    if (version > ro->version) {
        ro->version = version;
        ro->pulling = 0;
    }
    if (pull_failed) ro->pulling = 0, ro->relay++;
    for (int e = 0; e < ne && !r->bad; e++) {
        int64_t tid = rl_get_i64(r);
        int n = rl_get_i32(r);
        if (n < 0 || n > 100000) {
            r->bad = 1;
            break;
        }
        const int32_t *tok = rl_get_bytes(r, 4 * (size_t)n);
        const float *lp = rl_get_bytes(r, 4 * (size_t)n);
        int done = rl_get_i32(r);
        if (r->bad || tid < 0 || tid >= (int64_t)m->n_groups * m->cfg.group) continue;
        mtraj *t = T(m, tid);
        if (t->state != T_RUN || t->rollout != id) continue; /* moved away: the manager's copy rules */
        if (n > 0) {
            if (t->n_gen == 0 || t->version < 0)
                t->version = version;
            else if (t->version != version)
                t->mixed = 1, t->version = t->version < version ? t->version : version;
            append_tokens(t, tok, lp, n);
        }
        if (done) finish_traj(m, t);
    }
    /* event-driven repack: a rollout reporting itself in its falling phase triggers the planner,
     * so its drops leave with this reply and the destinations get them at their next poll */
    int now_running = running_on(m, id);
    if (!m->done && m->cfg.mode == LS_RL_MODE_LAMINAR && m->cfg.repack && now_running > 0 &&
        now_running <= m->cfg.max_seqs * ls_rl_repack_defaults(m->cfg.max_seqs).falling_frac && ro->n_assign == 0 &&
        !ro->pulling && ro->quota == 0)
        repack(m);
    if (ro->kv_cap > 0 && now_running > 0) {
        m->kv_sum += (double)ro->kv_used / ro->kv_cap;
        m->kv_n++;
    }
    /* decide */
    rl_buf b = {0};
    rl_msg_begin(&b, M_POLL_REPLY);
    rl_put_i32(&b, m->done);
    int64_t target = -1;
    int running = running_on(m, id);
    if (!m->done && m->cfg.mode == LS_RL_MODE_AREAL && running > 0 && ro->version < m->trainer_version) {
        /* global sync: interrupt, update, resume the same partial responses */
        int64_t tv;
        if (wants_version(m, id, &tv) && tv >= m->trainer_version) {
            for (int64_t i = 0; i < (int64_t)m->n_groups * m->cfg.group; i++)
                if (m->traj[i].state == T_RUN && m->traj[i].rollout == id) {
                    push_id(&ro->drops, &ro->n_drops, &ro->cap_drops, i);
                    m->traj[i].state = T_POOL, m->traj[i].rollout = -1;
                }
            ro->n_assign = 0;
            running = 0;
        }
    }
    if (!m->done && running == 0 && !ro->pulling && wants_version(m, id, &target)) {
        ro->pulling = 1;
    } else {
        target = -1;
    }
    int laminar = m->cfg.mode == LS_RL_MODE_LAMINAR;
    if (!m->done && laminar && running > 0 && ro->quota > 0 && !ro->pulling) {
        /* its waiting queue refills the free slots, at the version it holds */
        int before = ro->quota;
        issue_groups(m, id, m->cfg.max_seqs - running, 1);
        m->topups += before - ro->quota;
    }
    if (!m->done && running == 0 && !ro->pulling && ro->version >= 0) {
        /* a new batch: partial responses first (same version preferred), then new groups */
        int slots = m->cfg.max_seqs;
        ro->quota = laminar ? queue_groups(m) : 0;
        for (int pass = 0; pass < 2 && slots > 0; pass++)
            for (int64_t i = 0; i < (int64_t)m->n_groups * m->cfg.group && slots > 0; i++) {
                mtraj *t = &m->traj[i];
                if (t->state != T_POOL || (pass == 0 && t->n_gen > 0 && t->version != ro->version)) continue;
                if (m->cfg.mode == LS_RL_MODE_SYNC && t->n_gen > 0 && t->version != ro->version) continue;
                t->state = T_RUN, t->rollout = id;
                push_id(&ro->assign, &ro->n_assign, &ro->cap_assign, i);
                slots--;
            }
        issue_groups(m, id, slots, laminar);
        /* without a queue (a batch of the slots' worth) a batch that started short stays short */
        if (queue_groups(m) <= m->cfg.max_seqs / m->cfg.group) ro->quota = 0;
    }
    const mrelay *rel = relay_for(m, id + ro->relay);
    rl_put_i32(&b, (int32_t)target);
    rl_put_str(&b, target >= 0 && rel ? rel->ep : "");
    rl_put_i32(&b, ro->n_drops);
    for (int i = 0; i < ro->n_drops; i++) rl_put_i64(&b, ro->drops[i]);
    int na = 0;
    for (int i = 0; i < ro->n_assign; i++)
        na += T(m, ro->assign[i])->state == T_RUN && T(m, ro->assign[i])->rollout == id;
    rl_put_i32(&b, na);
    for (int i = 0; i < ro->n_assign; i++)
        if (T(m, ro->assign[i])->state == T_RUN && T(m, ro->assign[i])->rollout == id)
            put_traj_assign(m, &b, ro->assign[i]);
    ro->n_drops = ro->n_assign = 0;
    if (rl_msg_end(&b) == LS_OK) rl_send_routed(m->sock, ident, identn, b.p, b.n);
    rl_buf_free(&b);
}

static void repack(mgr *m) {
    ls_rl_rollout_view v[MAX_ROLL];
    int *kv[MAX_ROLL] = {0};
    int64_t *ids[MAX_ROLL] = {0};
    int n = 0;
    for (int r = 0; r < MAX_ROLL; r++) {
        mroll *ro = &m->roll[r];
        if (!ro->used || !ro->alive || ro->pulling || ro->n_assign || ro->n_drops || ro->version < 0) continue;
        int cnt = running_on(m, r);
        if (cnt == 0) continue;
        kv[n] = malloc(sizeof(int) * (size_t)cnt);
        ids[n] = malloc(sizeof(int64_t) * (size_t)cnt);
        if (!kv[n] || !ids[n]) {
            free(kv[n]), free(ids[n]);
            break;
        }
        int k = 0;
        for (int64_t i = 0; i < (int64_t)m->n_groups * m->cfg.group; i++) {
            mtraj *t = &m->traj[i];
            if (t->state == T_RUN && t->rollout == r) kv[n][k] = t->n_prompt + t->n_gen, ids[n][k++] = i;
        }
        v[n] = (ls_rl_rollout_view){r,     ro->version, ro->quota * m->cfg.group,
                                    cnt,   kv[n],       ro->kv_cap > 0 ? ro->kv_cap : m->cfg.max_seqs * 128,
                                    ids[n]};
        n++;
    }
    ls_rl_repack_cfg c = ls_rl_repack_defaults(m->cfg.max_seqs);
    ls_rl_move *mv;
    int nm, freed;
    if (n >= 2 && ls_rl_repack_plan(v, n, &c, &mv, &nm, &freed) == LS_OK) {
        for (int i = 0; i < nm; i++) {
            mtraj *t = T(m, mv[i].traj);
            push_id(&m->roll[mv[i].from].drops, &m->roll[mv[i].from].n_drops, &m->roll[mv[i].from].cap_drops,
                    mv[i].traj);
            push_id(&m->roll[mv[i].to].assign, &m->roll[mv[i].to].n_assign, &m->roll[mv[i].to].cap_assign, mv[i].traj);
            t->rollout = mv[i].to;
        }
        if (freed > 0) m->repacks++, m->moved += nm;
        free(mv);
    }
    for (int i = 0; i < n; i++) free(kv[i]), free(ids[i]);
}

/* ---------------------------------------------------------------- trainer */

static void put_group(mgr *m, rl_buf *b, int g) {
    rl_put_i32(b, g);
    for (int k = 0; k < m->cfg.group; k++) {
        int64_t id = (int64_t)g * m->cfg.group + k;
        mtraj *t = T(m, id);
        rl_put_i64(b, id);
        rl_put_i32(b, t->version);
        rl_put_f64(b, t->reward);
        put_traj_assign(m, b, id);
        int st = m->trainer_version - t->version;
        st = st < 0 ? 0 : (st > MAX_STALE ? MAX_STALE : st);
        m->stale_hist[st]++;
        m->mixed_consumed += t->mixed;
        m->traj_consumed++;
        m->tokens_consumed += t->n_gen;
        t->state = T_CONSUMED;
    }
}

static int grow(double **a, int n) {
    double *p = realloc(*a, sizeof(double) * (size_t)(n + 1));
    if (!p) return LS_ENOMEM;
    *a = p;
    return LS_OK;
}

static void handle_get_batch(mgr *m, const uint8_t *ident, size_t identn, rl_rd *r) {
    int version = rl_get_i32(r);
    int want = rl_get_i32(r);
    int has_stats = rl_get_i32(r);
    double st[7];
    for (int i = 0; i < 7; i++) st[i] = rl_get_f64(r);
    if (r->bad) return;
    if (version > m->trainer_version) {
        for (int v = m->trainer_version + 1; v <= version; v++) {
            if (grow(&m->t_pub, m->n_ver) || grow(&m->t_all, m->n_ver)) return;
            m->t_pub[m->n_ver] = ls_now(), m->t_all[m->n_ver] = -1;
            m->n_ver++;
        }
        m->trainer_version = version;
    }
    if (has_stats) {
        double **arr[7] = {&m->curve_reward, &m->curve_loss, &m->stall, &m->wait, &m->train_s, &m->clip, &m->isw};
        for (int i = 0; i < 7; i++)
            if (grow(arr[i], m->n_curve)) return;
        for (int i = 0; i < 7; i++) (*arr[i])[m->n_curve] = st[i];
        m->n_curve++;
    }
    int ids[MAX_RELAY], n = relay_order(m, ids);
    rl_buf b = {0};
    rl_msg_begin(&b, M_BATCH);
    rl_put_i32(&b, m->done);
    rl_put_str(&b, n ? m->relay[ids[0]].ep : "");
    int avail = m->buf_tail - m->buf_head;
    int give = want > 0 && avail >= want ? want : 0;
    rl_put_i32(&b, give);
    rl_put_i32(&b, m->cfg.group);
    for (int i = 0; i < give; i++) put_group(m, &b, m->buffer[m->buf_head++ % m->buf_cap]);
    if (give) m->groups_consumed += give, m->t_last_consume = ls_now();
    if (rl_msg_end(&b) == LS_OK) rl_send_routed(m->sock, ident, identn, b.p, b.n);
    rl_buf_free(&b);
}

/* ---------------------------------------------------------------- report */

static cJSON *darr(const double *a, int n) {
    cJSON *j = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(j, cJSON_CreateNumber(a[i]));
    return j;
}

static double mean(const double *a, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i];
    return n ? s / n : 0.0;
}

static int write_report(mgr *m) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return ls_err(LS_ENOMEM, "manager: out of memory");
    double span = m->t_last_consume - m->t_first_issue;
    double busy = 0, idle = 0;
    double pull = 0;
    int64_t steps = 0, pulls = 0, rtts = 0;
    double rtt = 0;
    for (int r = 0; r < MAX_ROLL; r++)
        if (m->roll[r].used) {
            mroll *ro = &m->roll[r];
            rtt += ro->rtt_s + ro->base_rtt_s, rtts += ro->rtts + ro->base_rtts;
            busy += ro->busy_s + ro->base_busy, idle += ro->idle_s + ro->base_idle;
            steps += ro->steps + ro->base_steps, pull += ro->pull_s + ro->base_pull,
                pulls += ro->pulls + ro->base_pulls;
        }
    int64_t issued = (int64_t)m->n_groups * m->cfg.group, cnt[4] = {0};
    for (int64_t i = 0; i < issued; i++) {
        mtraj *t = &m->traj[i];
        if (t->state == T_RUN && !m->roll[t->rollout].alive) continue; /* lost: on a dead rollout, not returned */
        cnt[t->state]++;
    }
    int64_t lost = issued - cnt[0] - cnt[1] - cnt[2] - cnt[3];
    cJSON_AddStringToObject(j, "format", "llmsys.rl.report");
    cJSON_AddStringToObject(j, "mode", ls_rl_mode_name(m->cfg.mode));
    static const char *const keys[13] = {"version",         "rollouts",       "relays",  "updates", "group",
                                         "batch_groups",    "max_seqs",       "staleness_bound",
                                         "repack_enabled",  "step_ms",        "wall_s",  "span_s",  "trajectories"};
    const rl_config *c = &m->cfg;
    double vals[13] = {1,          c->rollouts, c->relays,  m->n_curve,         c->group, c->batch_groups, c->max_seqs,
                       c->staleness, c->repack, c->step_ms, ls_now() - m->t0, span,     (double)m->traj_consumed};
    for (int i = 0; i < 13; i++) cJSON_AddNumberToObject(j, keys[i], vals[i]);
    cJSON_AddNumberToObject(j, "traj_per_s", span > 0 ? m->traj_consumed / span : 0);
    cJSON_AddNumberToObject(j, "tokens_per_s", span > 0 ? m->tokens_consumed / span : 0);
    cJSON_AddNumberToObject(j, "mean_response_tokens",
                            m->traj_consumed ? (double)m->tokens_consumed / m->traj_consumed : 0);
    cJSON_AddNumberToObject(j, "rollout_idle_frac", busy + idle > 0 ? idle / (busy + idle) : 0);
    cJSON_AddNumberToObject(j, "kv_util", m->kv_n ? m->kv_sum / m->kv_n : 0);
    cJSON_AddNumberToObject(j, "rollout_batch",
                            c->mode == LS_RL_MODE_LAMINAR ? queue_groups(m) * c->group : c->max_seqs);
    cJSON_AddNumberToObject(j, "topup_groups", m->topups);
    cJSON_AddNumberToObject(j, "decode_step_mean_s", steps ? busy / (double)steps : 0);
    cJSON_AddNumberToObject(j, "pull_mean_s", pulls ? pull / (double)pulls : 0);
    cJSON_AddNumberToObject(j, "poll_rtt_mean_s", rtts ? rtt / (double)rtts : 0);
    cJSON *lens = cJSON_CreateArray(); /* response tokens of every consumed trajectory: the run's workload */
    for (int64_t i = 0; i < issued; i++)
        if (m->traj[i].state == T_CONSUMED) cJSON_AddItemToArray(lens, cJSON_CreateNumber(m->traj[i].n_gen));
    cJSON_AddItemToObject(j, "response_lengths", lens);
    cJSON *il = cJSON_CreateArray(); /* every issued trajectory in issue order: final or, if unfinished, so far */
    for (int64_t i = 0; i < issued; i++) cJSON_AddItemToArray(il, cJSON_CreateNumber(m->traj[i].n_gen));
    cJSON_AddItemToObject(j, "issued_response_lengths", il);
    cJSON *gv = cJSON_CreateArray(), *gc = cJSON_CreateArray(); /* every issued group in issue order */
    for (int g = 0; g < m->n_groups; g++) {
        int v = -1; /* the oldest version that generated any of its trajectories; -1: none yet */
        for (int k = 0; k < c->group; k++) {
            const mtraj *t = T(m, (int64_t)g * c->group + k);
            if (t->n_gen > 0 && t->version >= 0 && (v < 0 || t->version < v)) v = t->version;
        }
        cJSON_AddItemToArray(gv, cJSON_CreateNumber(v));
        cJSON_AddItemToArray(gc, cJSON_CreateNumber(m->groups[g].consumed_before));
    }
    cJSON_AddItemToObject(j, "group_versions", gv);
    cJSON_AddItemToObject(j, "group_consumed_before", gc);
    cJSON *h = cJSON_CreateArray();
    double smean = 0;
    int smax = 0;
    for (int i = 0; i <= MAX_STALE; i++) {
        cJSON_AddItemToArray(h, cJSON_CreateNumber(m->stale_hist[i]));
        smean += (double)i * m->stale_hist[i];
        if (m->stale_hist[i]) smax = i;
    }
    cJSON_AddItemToObject(j, "staleness_hist", h);
    cJSON_AddNumberToObject(j, "staleness_mean", m->traj_consumed ? smean / m->traj_consumed : 0);
    cJSON_AddNumberToObject(j, "staleness_max", smax);
    cJSON_AddNumberToObject(j, "mixed_version_trajectories", m->mixed_consumed);
    cJSON_AddItemToObject(j, "reward_curve", darr(m->curve_reward, m->n_curve));
    cJSON_AddItemToObject(j, "loss_curve", darr(m->curve_loss, m->n_curve));
    cJSON_AddItemToObject(j, "trainer_stall_s", darr(m->stall, m->n_curve));
    cJSON_AddItemToObject(j, "trainer_wait_s", darr(m->wait, m->n_curve));
    cJSON_AddNumberToObject(j, "trainer_stall_mean_s", mean(m->stall, m->n_curve));
    cJSON_AddNumberToObject(j, "trainer_wait_mean_s", mean(m->wait, m->n_curve));
    cJSON_AddNumberToObject(j, "train_mean_s", mean(m->train_s, m->n_curve));
    cJSON_AddNumberToObject(j, "clip_frac_mean", mean(m->clip, m->n_curve));
    cJSON_AddNumberToObject(j, "is_weight_mean", mean(m->isw, m->n_curve));
    double bsum = 0;
    int bn = 0;
    for (int v = 0; v < m->n_ver; v++)
        if (m->t_all[v] > 0) bsum += m->t_all[v] - m->t_pub[v], bn++;
    cJSON_AddNumberToObject(j, "all_rollouts_updated_mean_s", bn ? bsum / bn : -1);
    cJSON_AddNumberToObject(j, "repacks", m->repacks);
    cJSON_AddNumberToObject(j, "moved_trajectories", m->moved);
    cJSON_AddNumberToObject(j, "rollout_failures", m->roll_failures);
    cJSON_AddNumberToObject(j, "relay_failures", m->relay_failures);
    cJSON_AddNumberToObject(j, "chain_rebuilds", m->chain_rebuilds);
    cJSON_AddNumberToObject(j, "rollout_joins", m->joins);
    cJSON_AddNumberToObject(j, "resumed_trajectories", m->resumed);
    int bad = 0;
    for (int i = 0; i < MAX_RELAY; i++) bad += m->relay[i].bad_chunks;
    cJSON_AddNumberToObject(j, "rejected_chunks", bad);
    cJSON *rv = cJSON_CreateArray();
    for (int i = 0; i < MAX_RELAY; i++)
        if (m->relay[i].used)
            cJSON_AddItemToArray(rv, cJSON_CreateNumber(m->relay[i].alive ? (double)m->relay[i].version : -1));
    cJSON_AddItemToObject(j, "relay_versions", rv);
    cJSON_AddNumberToObject(j, "groups_issued", m->n_groups);
    cJSON_AddNumberToObject(j, "groups_consumed", m->groups_consumed);
    cJSON_AddNumberToObject(j, "trajectories_issued", (double)issued);
    cJSON_AddNumberToObject(j, "trajectories_lost", (double)lost);
    if (m->final) cJSON_AddItemReferenceToObject(j, "trainer", m->final);
    int rc = ls_json_write_file(m->cfg.report, j);
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- main loop */

static void handle_hello(mgr *m, const uint8_t *ident, size_t identn, rl_rd *r) {
    char role[32], ep[256];
    rl_get_str(r, role, sizeof role);
    int id = rl_get_i32(r);
    rl_get_str(r, ep, sizeof ep);
    if (r->bad) return;
    if (!strcmp(role, "rollout") && id >= 0 && id < MAX_ROLL) {
        mroll *ro = &m->roll[id];
        if (ro->used && ro->alive) { /* a restarted rollout before its old self timed out */
            int before = running_on(m, id);
            release_rollout(m, id);
            m->resumed += before;
            m->roll_failures++;
            LS_WARN("manager: rollout %d rejoined: its %d trajectories went back to the partial pool", id, before);
        }
        double bb = ro->base_busy + ro->busy_s, bi = ro->base_idle + ro->idle_s, bp = ro->base_pull + ro->pull_s;
        int64_t bs = ro->base_steps + ro->steps;
        int bpl = ro->base_pulls + ro->pulls;
        double brt = ro->base_rtt_s + ro->rtt_s;
        int64_t brn = ro->base_rtts + ro->rtts;
        if (!ro->alive)
            bb = ro->base_busy, bi = ro->base_idle, bp = ro->base_pull, bs = ro->base_steps, bpl = ro->base_pulls,
            brt = ro->base_rtt_s, brn = ro->base_rtts;
        int64_t *d = ro->drops, *a = ro->assign;
        int cd = ro->cap_drops, ca = ro->cap_assign;
        memset(ro, 0, sizeof *ro);
        ro->drops = d, ro->assign = a, ro->cap_drops = cd, ro->cap_assign = ca;
        ro->used = ro->alive = 1;
        ro->version = -1; /* no weights until it pulls version 0 from its relay */
        ro->base_busy = bb, ro->base_idle = bi, ro->base_pull = bp, ro->base_steps = bs, ro->base_pulls = bpl;
        ro->base_rtt_s = brt, ro->base_rtts = brn;
        memcpy(ro->ident, ident, identn);
        ro->identn = identn;
        ro->last_seen = ls_now();
        m->joins++;
        LS_INFO("manager: rollout %d joined at %.2f s", id, ls_now() - m->t0);
    } else if (!strcmp(role, "relay") && id >= 0 && id < MAX_RELAY) {
        mrelay *rl = &m->relay[id];
        int bad = rl->bad_chunks;
        memset(rl, 0, sizeof *rl);
        rl->used = rl->alive = 1;
        rl->bad_chunks = bad;
        rl->version = -1;
        snprintf(rl->ep, sizeof rl->ep, "%s", ep);
        rl->last_seen = ls_now();
        check_chain(m);
    }
    char *js = rl_config_to_json(&m->cfg);
    rl_buf b = {0};
    rl_msg_begin(&b, M_CONFIG);
    rl_put_i32(&b, js ? (int32_t)strlen(js) : 0);
    if (js) rl_put(&b, js, strlen(js));
    free(js);
    if (rl_msg_end(&b) == LS_OK) rl_send_routed(m->sock, ident, identn, b.p, b.n);
    rl_buf_free(&b);
}

static void handle_relay_hb(mgr *m, const uint8_t *ident, size_t identn, rl_rd *r) {
    int id = rl_get_i32(r);
    int64_t v = rl_get_i64(r);
    int bad = rl_get_i32(r);
    if (r->bad || id < 0 || id >= MAX_RELAY || !m->relay[id].used || !m->relay[id].alive) {
        /* unknown or declared dead: tell it to stop so a zombie cannot confuse the chain */
        rl_buf b = {0};
        rl_msg_begin(&b, M_RELAY_REPLY);
        rl_put_i32(&b, 1);
        rl_put_str(&b, "");
        if (rl_msg_end(&b) == LS_OK) rl_send_routed(m->sock, ident, identn, b.p, b.n);
        rl_buf_free(&b);
        return;
    }
    mrelay *rl = &m->relay[id];
    rl->last_seen = ls_now();
    rl->version = v;
    rl->bad_chunks = bad;
    int ids[MAX_RELAY], n = relay_order(m, ids);
    const char *succ = "";
    for (int i = 0; i + 1 < n; i++)
        if (ids[i] == id) succ = m->relay[ids[i + 1]].ep;
    rl_buf b = {0};
    rl_msg_begin(&b, M_RELAY_REPLY);
    rl_put_i32(&b, m->done);
    rl_put_str(&b, succ);
    if (rl_msg_end(&b) == LS_OK) rl_send_routed(m->sock, ident, identn, b.p, b.n);
    rl_buf_free(&b);
}

static void check_liveness(mgr *m) {
    double now = ls_now();
    for (int r = 0; r < MAX_ROLL; r++) {
        mroll *ro = &m->roll[r];
        if (ro->used && ro->alive && now - ro->last_seen > m->cfg.hb_timeout_s) {
            int64_t before = 0;
            for (int64_t i = 0; i < (int64_t)m->n_groups * m->cfg.group; i++)
                before += m->traj[i].state == T_RUN && m->traj[i].rollout == r;
            release_rollout(m, r);
            m->resumed += (int)before;
            ro->alive = 0;
            ro->base_busy += ro->busy_s, ro->base_idle += ro->idle_s, ro->base_pull += ro->pull_s;
            ro->base_steps += ro->steps, ro->base_pulls += ro->pulls;
            ro->base_rtt_s += ro->rtt_s, ro->base_rtts += ro->rtts;
            ro->busy_s = ro->idle_s = ro->pull_s = ro->rtt_s = 0, ro->steps = ro->rtts = 0, ro->pulls = 0;
            m->roll_failures++;
            LS_WARN("manager: rollout %d silent for %.1f s: %lld trajectories back to the partial pool", r,
                    now - ro->last_seen, (long long)before);
        }
    }
    for (int i = 0; i < MAX_RELAY; i++)
        if (m->relay[i].used && m->relay[i].alive && now - m->relay[i].last_seen > m->cfg.hb_timeout_s) {
            m->relay[i].alive = 0;
            m->relay_failures++;
            m->chain_rebuilds++; /* the predecessor's next heartbeat names the dead relay's successor */
            LS_WARN("manager: relay %d silent: chain rebuilt around it", i);
            check_chain(m);
        }
    /* every live rollout at >= version v: record when that first happened */
    for (int v = 0; v < m->n_ver; v++) {
        if (m->t_all[v] > 0) continue;
        int all = 1, any = 0;
        for (int r = 0; r < MAX_ROLL; r++)
            if (m->roll[r].used && m->roll[r].alive) any = 1, all &= m->roll[r].version >= v + 1;
        if (any && all) m->t_all[v] = now;
    }
}

int rl_manager_main(const ls_rl_worker_opts *o, const ls_rl_inputs *in) {
    mgr *m = calloc(1, sizeof *m);
    if (!m) return ls_err(LS_ENOMEM, "manager: out of memory");
    int rc = LS_OK;
    m->cfg = in->cfg; /* read once, at the start-up (was: read again here) */
    m->tasks = in->tasks, m->n_tasks = in->n_tasks;
    m->n_issue = m->n_tasks;
    if (!m->cfg.heldout[0]) m->n_issue -= ls_rl_held_tail(m->n_tasks, m->cfg.eval_n);
    char ep[256];
    if (rc == LS_OK) {
        m->zctx = zmq_ctx_new();
        m->sock = m->zctx ? rl_socket(m->zctx, ZMQ_ROUTER) : NULL;
        rc = m->sock ? rl_bind(m->zctx, m->sock, o->bind ? o->bind : "tcp://127.0.0.1:0", "rl manager", ep, sizeof ep)
                     : LS_ENET;
    }
    if (rc == LS_OK && o->port_file) rc = ls_file_write_atomic(o->port_file, ep, strlen(ep));
    m->t0 = ls_now();
    double last_check = 0, done_at = 0;
    while (rc == LS_OK) {
        uint8_t ident[64];
        size_t identn;
        void *msg = NULL;
        size_t len;
        int r = rl_recv_routed(m->sock, 20, ident, &identn, &msg, &len);
        if (r == LS_OK) {
            rl_rd rd;
            if (rl_msg_open(msg, len, "manager", &rd) != LS_OK) {
                LS_WARN("%s", ls_errmsg());
            } else if (rd.type == M_HELLO) {
                handle_hello(m, ident, identn, &rd);
            } else if (rd.type == M_POLL) {
                handle_poll(m, ident, identn, &rd);
            } else if (rd.type == M_RELAY_HB) {
                handle_relay_hb(m, ident, identn, &rd);
            } else if (rd.type == M_GET_BATCH) {
                handle_get_batch(m, ident, identn, &rd);
            } else if (rd.type == M_DONE) {
                int32_t n = rl_get_i32(&rd);
                const char *js = n > 0 ? rl_get_bytes(&rd, (size_t)n) : NULL;
                if (js) m->final = cJSON_ParseWithLength(js, (size_t)n);
                m->done = 1;
                done_at = ls_now();
                rl_buf b = {0};
                rl_msg_begin(&b, M_ACK);
                if (rl_msg_end(&b) == LS_OK) rl_send_routed(m->sock, ident, identn, b.p, b.n);
                rl_buf_free(&b);
            }
            if (rd.bad) LS_WARN("manager: malformed message of type %d ignored", rd.type);
        } else if (r != LS_ETIMEDOUT) {
            LS_WARN("%s", ls_errmsg());
        }
        free(msg);
        double now = ls_now();
        if (now - last_check > 0.05) {
            check_liveness(m);
            last_check = now;
        }
        /* after done: keep answering polls with stop for a moment so workers exit cleanly */
        if (m->done && now - done_at > 1.0) break;
    }
    if (rc == LS_OK) rc = write_report(m);
    if (m->sock) zmq_close(m->sock);
    if (m->zctx) zmq_ctx_term(m->zctx);
    for (int64_t i = 0; i < (int64_t)m->n_groups * m->cfg.group; i++) free(m->traj[i].gen), free(m->traj[i].lp);
    for (int r = 0; r < MAX_ROLL; r++) free(m->roll[r].drops), free(m->roll[r].assign);
    free(m->traj), free(m->groups), free(m->buffer);
    double *arrs[] = {m->curve_reward, m->curve_loss, m->stall, m->wait, m->train_s,
                      m->clip,         m->isw,        m->t_pub, m->t_all};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) free(arrs[i]);
    cJSON_Delete(m->final);
    free(m);
    return rc;
}
