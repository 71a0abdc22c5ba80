/* agent.c - the per-node robust agent: watches its ranks (liveness, step reports), keeps
 * their in-memory snapshots and replicas of a peer's, injects faults, dumps stacks, and
 * stops its ranks when the controller is lost. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "robust/internal.h"

#define MAX_RANKS 256
#define MAX_SNAPS 64
#define MAX_INJ 64

typedef struct {
    int rank, pid;
    int exited;   /* exit reported */
    int64_t last_step;
    int throttle; /* 0 none, 1 cgroup, 2 duty cycle */
    double share, duty_next;
    int duty_stopped;
    char cgroup[256];
} rank_state;

typedef struct {
    int origin, rank; /* agent and rank that wrote it */
    int64_t step;
    void *buf;
    size_t len;
} snap_entry;

typedef struct {
    const ls_agent_opts *o;
    void *zctx, *ctl, *rt; /* controller DEALER; ROUTER for ranks and peers */
    char ep[256];
    rank_state rk[MAX_RANKS];
    int nrk;
    int ranks_hosted[MAX_RANKS], nhosted; /* ranks of the current launch */
    snap_entry snaps[MAX_SNAPS];
    int nsnaps;
    void *peers[8];
    int npeers;
    cJSON *launch; /* the current launch settings (owned) */
    double last_ctl;
    int quit;
    int lag_ms; /* test hook LLMSYS_ROBUST_LAG_S (on_rank_msg); 0: none */
} agent;

static void send_ctl(agent *a, cJSON *j) {
    cJSON_AddNumberToObject(j, "agent", a->o->id);
    lsr_send(a->ctl, NULL, j, NULL, 0);
    cJSON_Delete(j);
}

static cJSON *msg(const char *t) {
    cJSON *j = cJSON_CreateObject();
    if (j) cJSON_AddStringToObject(j, "t", t);
    return j;
}

static rank_state *find_rank(agent *a, int rank) {
    for (int i = 0; i < a->nrk; i++)
        if (a->rk[i].rank == rank) return &a->rk[i];
    return NULL;
}

/* Keeps the two newest snapshots per (origin, rank): the newest may be the faulty step. */
static void store_snap(agent *a, int origin, int rank, int64_t step, void *buf, size_t len) {
    int same = 0, oldest = -1;
    for (int i = 0; i < a->nsnaps; i++) {
        snap_entry *e = &a->snaps[i];
        if (e->origin != origin || e->rank != rank) continue;
        if (e->step == step) { /* a re-run of the same step replaces it */
            free(e->buf);
            e->buf = buf;
            e->len = len;
            return;
        }
        same++;
        if (oldest < 0 || e->step < a->snaps[oldest].step) oldest = i;
    }
    if (same >= 2 || (a->nsnaps == MAX_SNAPS && oldest >= 0)) {
        free(a->snaps[oldest].buf);
        a->snaps[oldest] = (snap_entry){origin, rank, step, buf, len};
    } else if (a->nsnaps < MAX_SNAPS) {
        a->snaps[a->nsnaps++] = (snap_entry){origin, rank, step, buf, len};
    } else {
        free(buf);
        return;
    }
    cJSON *j = msg("held");
    cJSON_AddNumberToObject(j, "origin", origin);
    cJSON_AddNumberToObject(j, "rank", rank);
    cJSON_AddNumberToObject(j, "step", (double)step);
    send_ctl(a, j);
}

static void unthrottle(rank_state *r) {
    if (r->throttle == 1 && r->cgroup[0]) {
        if (r->pid > 0 && !r->exited) {
            FILE *f = fopen("/sys/fs/cgroup/cpu/cgroup.procs", "w");
            if (f) {
                fprintf(f, "%d\n", r->pid);
                fclose(f);
            }
        }
        rmdir(r->cgroup);
    }
    if (r->throttle == 2 && r->duty_stopped && r->pid > 0) kill(r->pid, SIGCONT);
    r->throttle = 0;
    r->cgroup[0] = '\0';
}

/* Throttles a rank to `share` of a core: a cgroup v1 CPU quota where the machine allows
 * it, else a duty cycle of SIGSTOP/SIGCONT from this agent. Returns the method used. */
static const char *throttle(agent *a, rank_state *r, double share) {
    r->share = share;
    snprintf(r->cgroup, sizeof r->cgroup, "/sys/fs/cgroup/cpu/llmsys-robust-%d-r%d", (int)getpid(), r->rank);
    if (mkdir(r->cgroup, 0755) == 0 || errno == EEXIST) {
        char p[300];
        int ok = 1;
        snprintf(p, sizeof p, "%s/cpu.cfs_period_us", r->cgroup);
        FILE *f = fopen(p, "w");
        ok = f && fprintf(f, "100000\n") > 0;
        if (f) ok = fclose(f) == 0 && ok;
        snprintf(p, sizeof p, "%s/cpu.cfs_quota_us", r->cgroup);
        f = ok ? fopen(p, "w") : NULL;
        ok = f && fprintf(f, "%d\n", (int)(share * 100000)) > 0;
        if (f) ok = fclose(f) == 0 && ok;
        snprintf(p, sizeof p, "%s/cgroup.procs", r->cgroup);
        f = ok ? fopen(p, "w") : NULL;
        ok = f && fprintf(f, "%d\n", r->pid) > 0;
        if (f) ok = fclose(f) == 0 && ok;
        if (ok) {
            r->throttle = 1;
            return "cgroup v1 cpu.cfs_quota_us";
        }
        rmdir(r->cgroup);
    }
    r->cgroup[0] = '\0';
    r->throttle = 2;
    r->duty_next = ls_now();
    r->duty_stopped = 0;
    (void)a;
    return "duty-cycle SIGSTOP/SIGCONT";
}

static void duty_tick(rank_state *r) {
    if (r->throttle != 2 || r->exited) return;
    double now = ls_now(), period = 0.1;
    if (now < r->duty_next) return;
    if (r->duty_stopped) {
        kill(r->pid, SIGCONT);
        r->duty_stopped = 0;
        r->duty_next = now + period * r->share;
    } else {
        kill(r->pid, SIGSTOP);
        r->duty_stopped = 1;
        r->duty_next = now + period * (1 - r->share);
    }
}

static void kill_ranks(agent *a, int sig) {
    for (int i = 0; i < a->nrk; i++) {
        rank_state *r = &a->rk[i];
        unthrottle(r);
        if (r->pid > 0 && !r->exited) {
            if (sig == SIGKILL || sig == SIGTERM) kill(r->pid, SIGCONT);
            kill(r->pid, sig);
        }
    }
}

/* The process state letter of pid ('R', 'S', 'T', 'Z', ...), 0 when gone; *status gets
 * the exit code field of a zombie (Linux 3.5+), -1 when unknown. */
static char proc_state(int pid, int *status) {
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    *status = -1;
    int fd = open(p, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ') return 0;
    char st = rp[2];
    if (st == 'Z') {
        /* field 52 is the exit code; fields after ')' start at 3 */
        int field = 3;
        char *q = rp + 2;
        while (*q && field < 52) {
            if (*q == ' ') field++;
            q++;
        }
        if (field == 52) *status = atoi(q);
    }
    return st;
}

static void drain_ranks(agent *a, int max);

/* Notices ranks that exited (and reports each, after every report its rank sent: the last
 * ones explain a failure) and keeps duty-cycle throttles ticking. */
static void check_ranks(agent *a) {
    for (int i = 0; i < a->nrk; i++) {
        rank_state *r = &a->rk[i];
        if (r->pid <= 0 || r->exited) continue;
        int status;
        char st = proc_state(r->pid, &status);
        if (st && st != 'Z' && st != 'X') {
            duty_tick(r);
            continue;
        }
        int pid = r->pid;
        drain_ranks(a, INT_MAX);
        if (r->pid != pid || r->exited) continue; /* (its entry was taken over meanwhile) */
        r->exited = 1;
        cJSON *j = msg("exit");
        cJSON_AddNumberToObject(j, "rank", r->rank);
        cJSON_AddNumberToObject(j, "pid", r->pid);
        cJSON_AddNumberToObject(j, "time", ls_wall_time());
        char how[64] = "gone";
        if (status >= 0 && (status & 0x7f))
            snprintf(how, sizeof how, "signal %d", status & 0x7f);
        else if (status >= 0)
            snprintf(how, sizeof how, "exit %d", (status >> 8) & 0xff);
        cJSON_AddStringToObject(j, "status", how);
        send_ctl(a, j);
    }
}

/* Executes one injection on a local rank now; returns the method text. */
static void inject(agent *a, rank_state *r, int kind, double share, int64_t step) {
    const char *method = "";
    double t = ls_wall_time();
    if (kind == LS_FAULT_CRASH) {
        kill(r->pid, SIGKILL);
        method = "SIGKILL";
    } else if (kind == LS_FAULT_HANG) {
        kill(r->pid, SIGSTOP);
        method = "SIGSTOP";
    } else if (kind == LS_FAULT_SLOW) {
        method = throttle(a, r, share);
    } else if (kind == LS_FAULT_NAN || kind == LS_FAULT_OOM) {
        /* executed by the rank itself at its next step */
        cJSON *j = msg("inject");
        cJSON_AddStringToObject(j, "kind", ls_fault_name(kind));
        cJSON_AddNumberToObject(j, "step", (double)(r->last_step + 2));
        char id[32];
        snprintf(id, sizeof id, "r%d", r->rank);
        lsr_send(a->rt, id, j, NULL, 0);
        cJSON_Delete(j);
        return;
    }
    cJSON *j = msg("injected");
    cJSON_AddNumberToObject(j, "launch", lsr_num(a->launch, "launch", 0)); /* whose job it hit */
    cJSON_AddStringToObject(j, "kind", ls_fault_name(kind));
    cJSON_AddNumberToObject(j, "rank", r->rank);
    cJSON_AddNumberToObject(j, "step", (double)step);
    cJSON_AddNumberToObject(j, "time", t);
    cJSON_AddStringToObject(j, "method", method);
    send_ctl(a, j);
}

/* Step-triggered injections of this launch whose step a rank has reached. */
static void check_injections(agent *a, rank_state *r) {
    cJSON *inj = a->launch ? cJSON_GetObjectItemCaseSensitive(a->launch, "inject") : NULL;
    cJSON *e;
    cJSON_ArrayForEach(e, inj) {
        int kind = ls_fault_parse(lsr_str(e, "kind"));
        if ((int)lsr_num(e, "rank", -1) != r->rank || lsr_num(e, "done", 0) != 0) continue;
        int64_t s = (int64_t)lsr_num(e, "step", -1);
        if (s < 1 || r->last_step < s) continue;
        if (kind != LS_FAULT_CRASH && kind != LS_FAULT_HANG && kind != LS_FAULT_SLOW) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(e, "done");
        cJSON_AddNumberToObject(e, "done", 1);
        inject(a, r, kind, lsr_num(e, "share", 0.25), r->last_step);
    }
}

/* Reads a snapshot slot that holds `step` completely before and after the read (its writer
 * marks it while copying), so the copy is not torn by the next step's write. */
static int read_stable(const char *p, int64_t step, char **out, size_t *len) {
    int fd = open(p, O_RDONLY);
    if (fd < 0) return -1;
    struct stat st;
    char h[128];
    int64_t s1 = -1, s2 = -1;
    char *d = NULL;
    int ok = fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof h && pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h &&
             ls_snapshot_peek(h, sizeof h, &s1) && s1 == step && (d = malloc((size_t)st.st_size)) != NULL;
    for (size_t got = 0; ok && got < (size_t)st.st_size;) {
        ssize_t n = pread(fd, d + got, (size_t)st.st_size - got, (off_t)got);
        ok = n > 0;
        got += ok ? (size_t)n : 0;
    }
    ok = ok && pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h && ls_snapshot_peek(h, sizeof h, &s2) && s2 == step &&
         ls_snapshot_peek(d, (size_t)st.st_size, &s1) && s1 == step;
    close(fd);
    if (!ok) {
        free(d);
        return -1;
    }
    *out = d;
    *len = (size_t)st.st_size;
    return 0;
}

/* A fresh slot snapshot is copied into this agent's memory and replicated to its peers. */
static void take_snapshot(agent *a, int rank, int slot, int64_t step) {
    char p[2400];
    snprintf(p, sizeof p, "%s/r%d.%d.snap", lsr_str(a->launch, "shm_dir"), rank, slot);
    char *data = NULL;
    size_t len = 0;
    ls_snapshot_info info;
    /* a consistent copy: the slot holds this step, complete, before and after the read; the
     * checksum is added here, off the trainer's critical path */
    if (read_stable(p, step, &data, &len) < 0 || ls_snapshot_seal(data, len, &info) < 0 || info.step != step) {
        free(data); /* overwritten meanwhile: the next one will do */
        return;
    }
    /* data-parallel replicas are identical: the node's lowest rank is replicated */
    int lowest = rank;
    for (int i = 0; i < a->nhosted; i++)
        if (a->ranks_hosted[i] < lowest) lowest = a->ranks_hosted[i];
    if (rank == lowest) {
        cJSON *j = msg("replica");
        cJSON_AddNumberToObject(j, "origin", a->o->id);
        cJSON_AddNumberToObject(j, "rank", rank);
        cJSON_AddNumberToObject(j, "step", (double)step);
        for (int k = 0; k < a->npeers; k++) lsr_send(a->peers[k], NULL, j, data, info.bytes);
        cJSON_Delete(j);
    }
    store_snap(a, a->o->id, rank, step, data, info.bytes);
}

static void on_rank_msg(agent *a, const char *from, cJSON *j, void *bin, size_t bin_len) {
    const char *t = lsr_str(j, "t");
    if (!strcmp(t, "hello")) {
        int rank = (int)lsr_num(j, "rank", -1);
        rank_state *r = find_rank(a, rank);
        if (!r && a->nrk < MAX_RANKS) r = &a->rk[a->nrk++];
        if (!r) return;
        memset(r, 0, sizeof *r);
        r->rank = rank;
        r->pid = (int)lsr_num(j, "pid", 0);
        r->last_step = -1;
        cJSON *c = msg("conf");
        cJSON *L = a->launch;
        cJSON_AddNumberToObject(c, "ckpt_every", lsr_num(L, "ckpt_every", 1));
        cJSON_AddNumberToObject(c, "disk_every", lsr_num(L, "disk_every", 0));
        cJSON_AddNumberToObject(c, "keep", lsr_num(L, "keep", 2));
        cJSON_AddStringToObject(c, "disk_dir", lsr_str(L, "disk_dir"));
        cJSON_AddStringToObject(c, "shm_dir", lsr_str(L, "shm_dir"));
        cJSON *e, *inj = L ? cJSON_GetObjectItemCaseSensitive(L, "inject") : NULL;
        cJSON_ArrayForEach(e, inj) {
            int kind = ls_fault_parse(lsr_str(e, "kind"));
            if ((int)lsr_num(e, "rank", -1) != rank || lsr_num(e, "step", -1) < 1) continue;
            if (kind == LS_FAULT_NAN) cJSON_AddNumberToObject(c, "nan_at", lsr_num(e, "step", -1));
            if (kind == LS_FAULT_OOM) cJSON_AddNumberToObject(c, "oom_at", lsr_num(e, "step", -1));
        }
        lsr_send(a->rt, from, c, NULL, 0);
        cJSON_Delete(c);
        cJSON *h = msg("hello");
        cJSON_AddNumberToObject(h, "rank", rank);
        cJSON_AddNumberToObject(h, "pid", r->pid);
        cJSON_AddNumberToObject(h, "time", ls_wall_time());
        send_ctl(a, h);
    } else if (!strcmp(t, "step")) {
        int rank = (int)lsr_num(j, "rank", -1);
        rank_state *r = find_rank(a, rank);
        int64_t step = (int64_t)lsr_num(j, "step", -1);
        int slot = (int)lsr_num(j, "snap", -1);
        if (r) r->last_step = step;
        /* test hook: a starved agent, late with the report that explains a failure (the
         * report of a non-finite loss or gradient norm: they travel as strings) */
        if (a->lag_ms > 0 &&
            (cJSON_IsString(cJSON_GetObjectItem(j, "loss")) || cJSON_IsString(cJSON_GetObjectItem(j, "gn"))))
            ls_sleep_ms(a->lag_ms);
        cJSON *fw = cJSON_Duplicate(j, 1);
        send_ctl(a, fw);
        if (slot >= 0 && a->launch) take_snapshot(a, rank, slot, step);
        if (r) check_injections(a, r);
    } else if (!strcmp(t, "fault")) {
        send_ctl(a, cJSON_Duplicate(j, 1));
    } else if (!strcmp(t, "replica") && bin) {
        ls_snapshot_info info;
        if (ls_snapshot_check(bin, bin_len, &info) == 0) {
            store_snap(a, (int)lsr_num(j, "origin", -1), (int)lsr_num(j, "rank", -1), info.step, bin, bin_len);
            return; /* the store owns bin now */
        }
    }
    free(bin);
}

/* Handles up to max pending rank messages. */
static void drain_ranks(agent *a, int max) {
    cJSON *j;
    void *bin;
    size_t bl;
    char from[64];
    int got;
    for (int k = 0; k < max && (got = lsr_recv(a->rt, from, &j, &bin, &bl)) != 0; k++)
        if (got > 0) {
            on_rank_msg(a, from, j, bin, bl);
            cJSON_Delete(j);
        }
}

static void materialize(agent *a, cJSON *j) {
    int64_t step = (int64_t)lsr_num(j, "step", -1);
    const char *path = lsr_str(j, "path");
    int rc = ls_err(LS_ENOTFOUND, "agent %d holds no snapshot of step %lld", a->o->id, (long long)step);
    for (int i = 0; i < a->nsnaps && rc < 0; i++)
        if (a->snaps[i].step == step) rc = ls_snapshot_to_ckpt(a->snaps[i].buf, a->snaps[i].len, path);
    cJSON *r = msg("materialized");
    cJSON_AddNumberToObject(r, "step", (double)step);
    cJSON_AddStringToObject(r, "path", path);
    cJSON_AddNumberToObject(r, "ok", rc == LS_OK);
    if (rc < 0) cJSON_AddStringToObject(r, "error", ls_errmsg());
    send_ctl(a, r);
}

static void dump_stacks(agent *a) {
    for (int i = 0; i < a->nrk; i++) {
        rank_state *r = &a->rk[i];
        if (r->pid <= 0) continue;
        int status;
        char st = proc_state(r->pid, &status);
        char *text = NULL;
        double t0 = ls_now();
        if (st && st != 'Z' && ls_stack_dump(r->pid, 8, &text) < 0) text = NULL;
        cJSON *j = msg("stacks");
        cJSON_AddNumberToObject(j, "rank", r->rank);
        char s[2] = {st ? st : '-', 0};
        cJSON_AddStringToObject(j, "state", s);
        cJSON_AddStringToObject(j, "text", text ? text : "");
        cJSON_AddNumberToObject(j, "dump_s", ls_now() - t0);
        free(text);
        send_ctl(a, j);
    }
    send_ctl(a, msg("stacks_done"));
}

static void on_ctl_msg(agent *a, cJSON *j) {
    const char *t = lsr_str(j, "t");
    a->last_ctl = ls_now();
    if (!strcmp(t, "peers")) {
        for (int k = 0; k < a->npeers; k++) zmq_close(a->peers[k]);
        a->npeers = 0;
        cJSON *e, *arr = cJSON_GetObjectItemCaseSensitive(j, "eps");
        cJSON_ArrayForEach(e, arr) {
            if (a->npeers < 8 && cJSON_IsString(e)) {
                char id[32];
                snprintf(id, sizeof id, "p%d", a->o->id);
                if (lsr_socket(a->zctx, ZMQ_DEALER, id, NULL, e->valuestring, &a->peers[a->npeers], NULL) == 0)
                    a->npeers++;
            }
        }
    } else if (!strcmp(t, "launch")) {
        cJSON_Delete(a->launch);
        a->launch = cJSON_Duplicate(j, 1);
        a->nhosted = 0;
        cJSON *e, *arr = cJSON_GetObjectItemCaseSensitive(j, "ranks");
        cJSON_ArrayForEach(e, arr) if (a->nhosted < MAX_RANKS) a->ranks_hosted[a->nhosted++] = e->valueint;
        for (int i = 0; i < a->nrk; i++) unthrottle(&a->rk[i]);
        a->nrk = 0;
        ls_mkdirs(lsr_str(j, "shm_dir"));
        send_ctl(a, msg("launched"));
    } else if (!strcmp(t, "inject")) {
        rank_state *r = find_rank(a, (int)lsr_num(j, "rank", -1));
        if (r && r->pid > 0 && !r->exited)
            inject(a, r, ls_fault_parse(lsr_str(j, "kind")), lsr_num(j, "share", 0.25), r->last_step);
    } else if (!strcmp(t, "kill")) {
        kill_ranks(a, SIGKILL);
        a->nrk = 0;
        send_ctl(a, msg("killed"));
    } else if (!strcmp(t, "stacks")) {
        dump_stacks(a);
    } else if (!strcmp(t, "materialize")) {
        materialize(a, j);
    } else if (!strcmp(t, "quit")) {
        a->quit = 1;
    }
}

int ls_agent_run(const ls_agent_opts *o) {
    agent *a = calloc(1, sizeof *a);
    if (!a) return ls_err(LS_ENOMEM, "out of memory");
    a->o = o;
    const char *lag = getenv("LLMSYS_ROBUST_LAG_S");
    a->lag_ms = lag ? (int)(atof(lag) * 1000) : 0;
    char id[32];
    snprintf(id, sizeof id, "a%d", o->id);
    a->zctx = zmq_ctx_new();
    int rc = a->zctx ? LS_OK : ls_err(LS_ENET, "zmq context");
    if (rc == LS_OK) rc = lsr_socket(a->zctx, ZMQ_ROUTER, NULL, "tcp://127.0.0.1:*", NULL, &a->rt, a->ep);
    if (rc == LS_OK) rc = lsr_socket(a->zctx, ZMQ_DEALER, id, NULL, o->controller, &a->ctl, NULL);
    if (rc == LS_OK) {
        cJSON *j = msg("reg");
        cJSON_AddStringToObject(j, "ep", a->ep);
        cJSON_AddStringToObject(j, "host", o->host ? o->host : "localhost");
        cJSON_AddNumberToObject(j, "pid", getpid());
        send_ctl(a, j);
    }
    a->last_ctl = ls_now();
    double last_hb = 0, grace = o->grace_s > 0 ? o->grace_s : 5;
    while (rc == LS_OK && !a->quit) {
        zmq_pollitem_t it[2] = {{a->ctl, 0, ZMQ_POLLIN, 0}, {a->rt, 0, ZMQ_POLLIN, 0}};
        zmq_poll(it, 2, 10);
        cJSON *j;
        while (lsr_recv(a->ctl, NULL, &j, NULL, NULL) > 0) {
            on_ctl_msg(a, j);
            cJSON_Delete(j);
        }
        /* a few rank messages a turn: sealing and storing snapshots is slow under load, and
         * a burst of them must not starve the controller's orders and our heartbeats */
        drain_ranks(a, 4);
        check_ranks(a);
        double now = ls_now();
        if (now - last_hb > 0.2) {
            send_ctl(a, msg("hb"));
            last_hb = now;
        }
        if (now - a->last_ctl > grace) {
            /* the controller is gone: our ranks stop cleanly (finish the step, save) */
            fprintf(stderr, "llmsys robust agent %d: controller silent for %.0f s: stopping ranks\n", o->id, grace);
            kill_ranks(a, SIGTERM);
            for (double t0 = ls_now(); ls_now() - t0 < 3;) {
                int alive = 0, st;
                for (int i = 0; i < a->nrk; i++) {
                    char s = a->rk[i].pid > 0 ? proc_state(a->rk[i].pid, &st) : 0;
                    alive |= s && s != 'Z';
                }
                if (!alive) break;
                ls_sleep_ms(50);
            }
            kill_ranks(a, SIGKILL);
            break;
        }
    }
    for (int i = 0; i < a->nrk; i++) unthrottle(&a->rk[i]);
    if (a->launch) { /* this node's shared-memory slots */
        char p[600];
        for (int i = 0; i < a->nrk; i++)
            for (int k = 0; k < 2; k++) {
                snprintf(p, sizeof p, "%.500s/r%d.%d.snap", lsr_str(a->launch, "shm_dir"), a->rk[i].rank, k);
                unlink(p);
            }
        rmdir(lsr_str(a->launch, "shm_dir"));
    }
    for (int i = 0; i < a->nsnaps; i++) free(a->snaps[i].buf);
    for (int k = 0; k < a->npeers; k++) zmq_close(a->peers[k]);
    cJSON_Delete(a->launch);
    if (a->rt) zmq_close(a->rt);
    if (a->ctl) zmq_close(a->ctl);
    if (a->zctx) zmq_ctx_term(a->zctx);
    free(a);
    return rc;
}
