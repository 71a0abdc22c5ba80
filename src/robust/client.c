/* client.c - the trainer side of robust training: a rank's link to its node agent, used
 * from the training-loop hooks (step reports, in-memory snapshots into shared memory,
 * periodic disk checkpoints, injected NaN and OOM faults). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <zmq.h>

#include "robust/internal.h"

struct ls_robust_client {
    void *zctx, *sock;
    int rank, ranks, node;
    int ckpt_every, disk_every, keep;
    char disk_dir[2048], shm_dir[2048];
    int64_t nan_at, oom_at; /* steps (completed count) at which to inject; -1: none */
    double prev_comm;       /* cumulative data + compute seconds at the last report */
    void *slot[2];
    size_t slot_cap;
};

static void client_poll(ls_robust_client *c) {
    for (;;) {
        cJSON *j;
        if (lsr_recv(c->sock, NULL, &j, NULL, NULL) <= 0) return;
        if (!strcmp(lsr_str(j, "t"), "inject")) {
            int k = ls_fault_parse(lsr_str(j, "kind"));
            int64_t at = (int64_t)lsr_num(j, "step", -1);
            if (k == LS_FAULT_NAN) c->nan_at = at;
            if (k == LS_FAULT_OOM) c->oom_at = at;
        }
        cJSON_Delete(j);
    }
}

int ls_robust_client_open(ls_robust_client **out, const char *endpoints, int rank, int ranks) {
    char eps[64][256];
    int n = 0;
    for (const char *p = endpoints; p && *p && n < 64;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= 256) return ls_err(LS_EINVAL, "--robust-agent: bad endpoint list '%s'", endpoints);
        memcpy(eps[n], p, len);
        eps[n++][len] = '\0';
        p = comma ? comma + 1 : NULL;
    }
    if (n == 0 || ranks % n != 0)
        return ls_err(LS_EINVAL, "--robust-agent: %d endpoint(s) do not split %d ranks evenly", n, ranks);
    ls_robust_client *c = calloc(1, sizeof *c);
    if (!c) return ls_err(LS_ENOMEM, "out of memory");
    c->rank = rank;
    c->ranks = ranks;
    c->node = rank / (ranks / n);
    c->nan_at = c->oom_at = -1;
    char id[32];
    snprintf(id, sizeof id, "r%d", rank);
    c->zctx = zmq_ctx_new();
    int rc = c->zctx ? lsr_socket(c->zctx, ZMQ_DEALER, id, NULL, eps[c->node], &c->sock, NULL)
                     : ls_err(LS_ENET, "zmq context: %s", zmq_strerror(zmq_errno()));
    if (rc == LS_OK) {
        cJSON *h = cJSON_CreateObject();
        cJSON_AddStringToObject(h, "t", "hello");
        cJSON_AddNumberToObject(h, "rank", rank);
        cJSON_AddNumberToObject(h, "ranks", ranks);
        cJSON_AddNumberToObject(h, "pid", getpid());
        rc = lsr_send(c->sock, NULL, h, NULL, 0);
        cJSON_Delete(h);
    }
    /* the agent answers with this launch's settings */
    cJSON *conf = NULL;
    for (double t0 = ls_now(); rc == LS_OK && !conf;) {
        zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
        if (ls_now() - t0 > 20) {
            rc = ls_err(LS_ETIMEDOUT, "rank %d: no answer from the robust agent at %s", rank, eps[c->node]);
            break;
        }
        zmq_poll(&it, 1, 100);
        cJSON *j;
        int got = lsr_recv(c->sock, NULL, &j, NULL, NULL);
        if (got < 0) rc = got;
        if (got > 0 && !strcmp(lsr_str(j, "t"), "conf"))
            conf = j;
        else if (got > 0)
            cJSON_Delete(j);
    }
    if (rc == LS_OK) {
        c->ckpt_every = (int)lsr_num(conf, "ckpt_every", 1);
        c->disk_every = (int)lsr_num(conf, "disk_every", 0);
        c->keep = (int)lsr_num(conf, "keep", 2);
        c->nan_at = (int64_t)lsr_num(conf, "nan_at", -1);
        c->oom_at = (int64_t)lsr_num(conf, "oom_at", -1);
        snprintf(c->disk_dir, sizeof c->disk_dir, "%s", lsr_str(conf, "disk_dir"));
        snprintf(c->shm_dir, sizeof c->shm_dir, "%s", lsr_str(conf, "shm_dir"));
        cJSON_Delete(conf);
    }
    if (rc < 0) {
        ls_robust_client_close(c);
        return rc;
    }
    *out = c;
    return LS_OK;
}

void ls_robust_client_close(ls_robust_client *c) {
    if (!c) return;
    for (int k = 0; k < 2; k++)
        if (c->slot[k]) munmap(c->slot[k], c->slot_cap);
    if (c->sock) {
        /* the last reports (the final step's, or the one that explains a failure) still go
         * out: the controller judges an exit by the steps it heard of; 2 s at most */
        int linger = 2000;
        zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(c->sock);
    }
    if (c->zctx) zmq_ctx_term(c->zctx);
    free(c);
}

int ls_robust_client_before_update(ls_robust_client *c, ls_trainer *t, int64_t step) {
    client_poll(c);
    if (c->nan_at >= 1 && step + 1 == c->nan_at) {
        /* a poisoned gradient: the update of this rank turns its parameters to NaN */
        ls_model_grads(ls_trainer_model(t))[0] = NAN;
    }
    return LS_OK;
}

static int hook_before_update(void *ctx, ls_trainer *t, int64_t step) {
    return ls_robust_client_before_update(ctx, t, step);
}

static int hook_after_step(void *ctx, ls_trainer *t, const ls_train_step_info *info) {
    return ls_robust_client_after_step(ctx, t, info->step, info->loss, info->grad_norm, info->step_s);
}

static int train_prepare(void *ctx, ls_dist *d, const char **resume) {
    ls_robust_train *r = ctx;
    return r->park ? ls_robust_park(r->park, ls_dist_rank(d), resume, &r->agent) : LS_OK;
}

static int train_attach(void *ctx, ls_trainer *t, ls_dist *d) {
    ls_robust_train *r = ctx;
    LS_TRY(ls_robust_client_open(&r->cl, r->agent, ls_dist_rank(d), ls_dist_size(d)));
    ls_train_hooks hk = {.ctx = r->cl, .before_update = hook_before_update, .after_step = hook_after_step};
    ls_trainer_set_hooks(t, &hk);
    return LS_OK;
}

static void train_detach(void *ctx, ls_trainer *t) {
    ls_robust_train *r = ctx;
    ls_trainer_set_hooks(t, NULL);
    ls_robust_client_close(r->cl);
    r->cl = NULL;
}

void ls_robust_train_hooks(ls_train_job *j, ls_robust_train *r) {
    if (r->agent || r->park) j->attach = train_attach, j->detach = train_detach, j->ctx = r;
    if (r->park) j->prepare = train_prepare;
}

/* Maps the two shared-memory slots this rank's snapshots alternate between; the agent
 * reads the slot named in a report while the rank writes the other one. */
static int map_slots(ls_robust_client *c, size_t need) {
    if (c->slot[0] && need <= c->slot_cap) return LS_OK;
    for (int k = 0; k < 2; k++)
        if (c->slot[k]) munmap(c->slot[k], c->slot_cap);
    c->slot[0] = c->slot[1] = NULL;
    c->slot_cap = need;
    for (int k = 0; k < 2; k++) {
        char p[2200];
        snprintf(p, sizeof p, "%s/r%d.%d.snap", c->shm_dir, c->rank, k);
        int fd = open(p, O_RDWR | O_CREAT, 0600);
        if (fd < 0) return ls_err(LS_EIO, "%s: %s", p, strerror(errno));
        int rc = ftruncate(fd, (off_t)need);
        void *m = rc == 0 ? mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        close(fd);
        if (m == MAP_FAILED) return ls_err(LS_EIO, "%s: cannot map %zu bytes: %s", p, need, strerror(errno));
        c->slot[k] = m;
    }
    return LS_OK;
}

/* Keeps the newest `keep` ckpt-*.safetensors of the disk directory. */
static void prune_disk(const char *dir, int keep, int64_t step) {
    DIR *d = opendir(dir);
    if (!d) return;
    char names[256][64];
    int n = 0;
    struct dirent *e;
    long long s;
    /* only checkpoints up to this step: a higher one is left by an earlier run in the same
     * directory (or is about to be rewritten after a resume), and must not push ours out */
    while ((e = readdir(d)) && n < 256)
        if (!strncmp(e->d_name, "ckpt-", 5) && strstr(e->d_name, ".safetensors") && strlen(e->d_name) < 64 &&
            !strstr(e->d_name, ".tmp") && sscanf(e->d_name, "ckpt-%lld", &s) == 1 && s <= step)
            snprintf(names[n++], 64, "%.63s", e->d_name);
    closedir(d);
    /* names carry a zero-padded step: lexical order is step order */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char tmp[64];
                memcpy(tmp, names[i], 64);
                memcpy(names[i], names[j], 64);
                memcpy(names[j], tmp, 64);
            }
    for (int i = 0; i < n - keep; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%.4000s/%.63s", dir, names[i]);
        unlink(p);
    }
}

/* Fails like a process that runs out of memory: the address space is capped just above
 * what is in use and allocations grow until one fails. */
static int inject_oom(ls_robust_client *c, int64_t step) {
    size_t total = 0;
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer reserves terabytes of address space, so a cap would break it: one
     * impossible allocation stands in (run with allocator_may_return_null=1) */
    volatile size_t huge = (size_t)1 << 46;
    void *h = malloc(huge);
    free(h);
#else
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = (size_t)pages * (size_t)sysconf(_SC_PAGESIZE) + ((size_t)256 << 20);
    setrlimit(RLIMIT_AS, &rl);
    void *chain = NULL;
    for (;;) {
        void **p = malloc((size_t)16 << 20);
        if (!p) break;
        memset(p, 1, (size_t)16 << 20);
        *p = chain;
        chain = p;
        total += (size_t)16 << 20;
    }
    while (chain) {
        void *next = *(void **)chain;
        free(chain);
        chain = next;
    }
#endif
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "t", "fault");
    cJSON_AddStringToObject(j, "kind", "oom");
    cJSON_AddNumberToObject(j, "rank", c->rank);
    cJSON_AddNumberToObject(j, "step", (double)step);
    cJSON_AddNumberToObject(j, "time", ls_wall_time());
    cJSON_AddNumberToObject(j, "allocated", (double)total);
    lsr_send(c->sock, NULL, j, NULL, 0);
    cJSON_Delete(j);
    return ls_err(LS_ENOMEM, "rank %d: out of memory at step %" PRId64 " (injected: %zu MiB allocated)", c->rank,
                  step, total >> 20);
}

int ls_robust_client_after_step(ls_robust_client *c, ls_trainer *t, int64_t step, float loss, float grad_norm,
                                double step_s) {
    double t_end = ls_wall_time(); /* the step just ended */
    client_poll(c);
    ls_train_timing tm;
    ls_trainer_timing(t, &tm);
    /* this rank's own work (data + forward/backward): waits for other ranks are excluded */
    double work = tm.data_s + tm.compute_s - c->prev_comm;
    c->prev_comm = tm.data_s + tm.compute_s;
    if (c->oom_at >= 1 && step == c->oom_at) return inject_oom(c, step);
    int slot = -1, rc = LS_OK;
    double snap_s = 0, disk_s = 0;
    char disk_path[2200] = "";
    if (c->ckpt_every > 0 && step % c->ckpt_every == 0 && c->shm_dir[0]) {
        double t0 = ls_now();
        size_t need = ls_snapshot_size(t), len;
        int k = (int)((step / c->ckpt_every) % 2);
        rc = map_slots(c, need);
        if (rc == LS_OK) rc = ls_snapshot_copy(t, c->slot[k], c->slot_cap, &len); /* the agent seals it */
        if (rc == LS_OK) slot = k;
        snap_s = ls_now() - t0;
        if (rc < 0) return rc;
    }
    if (c->disk_every > 0 && step % c->disk_every == 0 && c->disk_dir[0]) {
        snprintf(disk_path, sizeof disk_path, "%s/ckpt-%08" PRId64 ".safetensors", c->disk_dir, step);
        double t0 = ls_now();
        rc = ls_trainer_save(t, disk_path); /* collective: every rank takes the hook at this step */
        disk_s = ls_now() - t0;
        if (rc < 0) return rc;
        if (c->rank == 0) prune_disk(c->disk_dir, c->keep, step);
    }
    cJSON *j = cJSON_CreateObject();
    if (!j) return ls_err(LS_ENOMEM, "out of memory");
    cJSON_AddStringToObject(j, "t", "step");
    cJSON_AddNumberToObject(j, "rank", c->rank);
    cJSON_AddNumberToObject(j, "step", (double)step);
    cJSON_AddNumberToObject(j, "pid", getpid()); /* which launch's process: see on_step */
    /* JSON has no NaN: non-finite values travel as strings */
    if (isfinite(loss))
        cJSON_AddNumberToObject(j, "loss", loss);
    else
        cJSON_AddStringToObject(j, "loss", isnan(loss) ? "nan" : "inf");
    if (isfinite(grad_norm))
        cJSON_AddNumberToObject(j, "gn", grad_norm);
    else
        cJSON_AddStringToObject(j, "gn", isnan(grad_norm) ? "nan" : "inf");
    char lbits[16];
    uint32_t u;
    memcpy(&u, &loss, 4);
    snprintf(lbits, sizeof lbits, "%08x", u); /* exact loss, for bit-identity checks */
    cJSON_AddStringToObject(j, "loss_bits", lbits);
    cJSON_AddNumberToObject(j, "step_s", step_s);
    cJSON_AddNumberToObject(j, "compute_s", work > 0 ? work : 0);
    cJSON_AddNumberToObject(j, "time", ls_wall_time());
    /* when this rank started the step and entered its gradient all-reduce (wall clock):
     * a rank that lags for any local reason enters late, whatever phase it lost time in */
    cJSON_AddNumberToObject(j, "start", t_end - step_s);
    cJSON_AddNumberToObject(j, "arrive", t_end - step_s + (work > 0 ? work : 0));
    cJSON_AddNumberToObject(j, "snap", slot);
    cJSON_AddNumberToObject(j, "snap_s", snap_s);
    if (disk_path[0]) {
        cJSON_AddStringToObject(j, "disk", disk_path);
        cJSON_AddNumberToObject(j, "disk_s", disk_s);
    }
    rc = lsr_send(c->sock, NULL, j, NULL, 0);
    cJSON_Delete(j);
    return rc;
}

/* A rank of a pre-started world: it has loaded the program, initialised MPI and opened its
 * data; it reports "parked" to the controller and waits for "go" (resume path, agents). */
int ls_robust_park(const char *spec, int rank, const char **resume, const char **agents) {
    static char res_buf[2048], ag_buf[4096];
    char ep[256];
    const char *comma = strrchr(spec, ',');
    size_t len = comma ? (size_t)(comma - spec) : 0;
    if (!comma || len == 0 || len >= sizeof ep) return ls_err(LS_EINVAL, "--robust-park: expected ENDPOINT,GEN, got '%s'", spec);
    memcpy(ep, spec, len);
    ep[len] = '\0';
    void *zctx = zmq_ctx_new(), *sock = NULL;
    char id[64];
    snprintf(id, sizeof id, "p%s-%d", comma + 1, rank);
    int rc = zctx ? lsr_socket(zctx, ZMQ_DEALER, id, NULL, ep, &sock, NULL)
                  : ls_err(LS_ENET, "zmq context: %s", zmq_strerror(zmq_errno()));
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "t", "parked");
    cJSON_AddNumberToObject(h, "rank", rank);
    cJSON_AddNumberToObject(h, "gen", atof(comma + 1));
    cJSON_AddNumberToObject(h, "pid", getpid());
    if (rc == LS_OK) rc = lsr_send(sock, NULL, h, NULL, 0);
    cJSON_Delete(h);
    /* the controller pings every 0.5 s: silent for 5 s means it is gone, and so is this world */
    for (double last = ls_now(); rc == LS_OK;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 200);
        cJSON *j;
        int got = lsr_recv(sock, NULL, &j, NULL, NULL);
        if (got < 0) rc = got;
        if (got > 0) {
            last = ls_now();
            int go = !strcmp(lsr_str(j, "t"), "go");
            if (go) {
                snprintf(res_buf, sizeof res_buf, "%s", lsr_str(j, "resume"));
                snprintf(ag_buf, sizeof ag_buf, "%s", lsr_str(j, "agents"));
                *resume = res_buf;
                *agents = ag_buf;
            }
            cJSON_Delete(j);
            if (go) break;
        }
        if (rc == LS_OK && ls_now() - last > 5) rc = ls_err(LS_ETIMEDOUT, "rank %d: parked world lost its controller", rank);
    }
    if (sock) zmq_close(sock);
    if (zctx) zmq_ctx_term(zctx);
    return rc;
}
