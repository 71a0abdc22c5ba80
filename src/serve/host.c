/* host.c - what a plan's replay needs to know when pipeline stages share one machine: the
 * parallel capacity n stage processes get (used by `llmsys plan validate`; docs/plan.md,
 * "Closing the loop"). The hop latency probe lives with the link measurement in profile.c. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/serve.h"

enum { LS_HOST_MAX_PROCS = 64 };

/* Stages on one host share its cores, caches and memory bandwidth. The capacity probe runs
 * what a stage runs - decode steps through the checkpoint's middle layers, streaming their
 * weights and KV cache - since a pure arithmetic loop would miss the shared caches and
 * bandwidth. */
typedef struct {
    ls_engine *e;
    ls_engine_seq seqs[4];
    int tok[4], takes_tokens; /* an engine holding layer 0 takes tokens, later ones activations */
    float *act, *out;
} probe;

static int probe_open(const char *ckpt, probe *p) {
    memset(p, 0, sizeof *p);
    ls_model_config cfg;
    int *bits = NULL;
    LS_TRY(ls_ckpt_info(ckpt, &cfg, &bits, NULL));
    free(bits);
    ls_engine_opts o = ls_engine_defaults();
    o.layer_begin = cfg.n_layer >= 3 ? 1 : 0;
    o.layer_end = cfg.n_layer >= 3 ? cfg.n_layer - 1 : cfg.n_layer;
    o.max_seqs = 4;
    LS_TRY(ls_engine_open(&p->e, ckpt, &o));
    p->takes_tokens = o.layer_begin == 0;
    int ctx = cfg.n_ctx / 2;
    for (int i = 0; i < 4; i++) p->seqs[i] = (ls_engine_seq){i, ctx, 1}, p->tok[i] = 'a' + i;
    p->act = calloc((size_t)4 * cfg.d_model, sizeof(float));
    p->out = calloc(ls_engine_out_floats(p->e, p->seqs, 4, 0) + (size_t)4 * cfg.vocab, sizeof(float));
    if (!p->act || !p->out) return ls_err(LS_ENOMEM, "out of memory");
    for (int i = 0; i < 4 * cfg.d_model; i++) p->act[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
    return LS_OK;
}

static void probe_close(probe *p) {
    if (p->e) ls_engine_free(p->e);
    free(p->act), free(p->out);
}

/* Seconds for `steps` decode steps (NAN on failure). */
static double probe_run(probe *p, int steps) {
    double t0 = ls_now();
    for (int s = 0; s < steps; s++)
        if (ls_engine_forward(p->e, p->seqs, 4, p->takes_tokens ? p->tok : NULL, p->takes_tokens ? NULL : p->act,
                              p->out, 0))
            return NAN;
    return ls_now() - t0;
}

/* Runs the probe in n forked processes started together for `window` seconds; returns the
 * decode steps all of them completed in that window (-1 on failure). Each opens its own
 * engine and warms it up first. Counting work done in a fixed window measures the
 * throughput the processes share, which is what a pipeline of small steps sees; timing a
 * fixed amount of work would instead measure how n long jobs pack onto the cores. */
static long probe_together(const char *ckpt, int n, double window) {
    int fds[LS_HOST_MAX_PROCS][2], ready[2], go[2];
    pid_t kids[LS_HOST_MAX_PROCS];
    int nk = 0;
    long total = 0;
    if (pipe(ready)) return -1;
    if (pipe(go)) {
        close(ready[0]), close(ready[1]);
        return -1;
    }
    double t_go = 0;
    for (; nk < n && nk < LS_HOST_MAX_PROCS; nk++) {
        if (pipe(fds[nk])) break;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(fds[nk][0]), close(fds[nk][1]);
            break;
        }
        if (pid == 0) {
            /* open and warm up, say ready, then start together when the parent sends the
             * common start time on `go` */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(go[1]);
            probe q;
            int ok = probe_open(ckpt, &q) == LS_OK && probe_run(&q, 2) > 0;
            char c = ok ? 1 : 0;
            double t0;
            if (write(ready[1], &c, 1) != 1 || read(go[0], &t0, sizeof t0) != (ssize_t)sizeof t0) _exit(1);
            long steps = 0;
            while (ok && ls_now() < t0 + window)
                if (probe_run(&q, 1) > 0)
                    steps++;
                else
                    ok = 0;
            if (!ok) steps = -1;
            probe_close(&q);
            ssize_t w = write(fds[nk][1], &steps, sizeof steps);
            _exit(w == (ssize_t)sizeof steps ? 0 : 1);
        }
        close(fds[nk][1]);
        kids[nk] = pid;
    }
    close(ready[1]);
    close(go[0]);
    int n_ready = 0;
    char c;
    while (n_ready < nk && read(ready[0], &c, 1) == 1) n_ready++;
    /* go: every child reads the common start time */
    t_go = ls_now();
    for (int k = 0; k < nk; k++)
        if (write(go[1], &t_go, sizeof t_go) != (ssize_t)sizeof t_go) total = -1;
    close(go[1]);
    close(ready[0]);
    for (int k = 0; k < nk; k++) {
        long steps = -1;
        if (read(fds[k][0], &steps, sizeof steps) != (ssize_t)sizeof steps || steps < 0)
            total = -1;
        else if (total >= 0)
            total += steps;
        close(fds[k][0]);
        waitpid(kids[k], NULL, 0);
    }
    return nk == n && n_ready == n ? total : -1;
}

/* capacity = steps n processes complete together / steps one completes alone in the same
 * window, each the median of three tries, all in fresh processes as the stages are. */
double ls_host_capacity(const char *ckpt, int n) {
    double one[3], all[3];
    for (int i = 0; i < 3; i++) {
        one[i] = (double)probe_together(ckpt, 1, 0.1);
        all[i] = (double)probe_together(ckpt, n, 0.1);
    }
    double m1 = ls_median(one, 3), mn = ls_median(all, 3);
    if (!(m1 > 0) || !(mn > 0)) return NAN;
    double cap = mn / m1;
    return cap < n ? cap : n;
}
