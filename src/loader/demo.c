/* demo.c - the loader demo scenario: three generated sources and a curriculum mix, their
 * token shares and per-rank cost balance over 200 steps in-process, then 4 trainer ranks
 * fetching from the service while a control message shifts the weights, placement on a
 * dp x pp x tp grid, and a fail-over to a shadow after kill -9 of the primary (`llmsys demo
 * loader`); and the per-step lines of `llmsys loader fetch`. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/loader.h"

typedef struct {
    ls_loader_server *srv;
    int rc;
} serve_thread;

static void *serve_main(void *arg) {
    serve_thread *t = arg;
    t->rc = ls_loader_server_run(t->srv);
    return NULL;
}

/* Four trainer ranks fetch from the service; a control message shifts the weights. */
static int demo_service(FILE *f, const ls_loader_mix *mix, int R) {
    ls_loader_server *srv;
    ls_loader_serve_opts o = {4, 4, 1};
    LS_TRY(ls_loader_server_open(&srv, mix, R, "127.0.0.1", 0, &o, NULL, 0));
    serve_thread th = {srv, 0};
    pthread_t tid;
    if (pthread_create(&tid, NULL, serve_main, &th) != 0) {
        ls_loader_server_close(srv);
        return ls_err(LS_ENOMEM, "cannot start the service thread");
    }
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ls_loader_server_port(srv));
    fprintf(f, "\nservice on %s, %d trainer ranks fetching steps 0..7 (control message: math 0.7 from step 5):\n", ep,
            R);
    ls_loader_client *c[8] = {0};
    int rc = LS_OK;
    for (int r = 0; r < R && rc == LS_OK; r++) rc = ls_loader_client_open(&c[r], ep, r, 10000, 2);
    char *reply = NULL;
    if (rc == LS_OK)
        rc = ls_loader_client_control(
            c[0], "{\"weights\": {\"prose\": 0.2, \"code\": 0.1, \"math\": 0.7}, \"step\": 5}", &reply);
    free(reply);
    fprintf(f, "%-5s", "step");
    for (int r = 0; r < R; r++) fprintf(f, "   rank %d: rows tokens     cost", r);
    fprintf(f, "   math share\n");
    for (int s = 0; s < 8 && rc == LS_OK; s++) {
        fprintf(f, "%-5d", s);
        int64_t math = 0, all = 0;
        for (int r = 0; r < R && rc == LS_OK; r++) {
            ls_loader_batch b;
            rc = ls_loader_client_batch(c[r], s, &b);
            if (rc != LS_OK) break;
            fprintf(f, "   %9d %6lld %8.3g", b.n_rows, (long long)b.n_tokens, b.cost);
            for (int k = 0; k < b.n_segs; k++) {
                all += b.segs[k].len;
                if (b.segs[k].source == 2) math += b.segs[k].len;
            }
            ls_loader_batch_free(&b);
        }
        if (rc == LS_OK) fprintf(f, "   %9.1f%%\n", all ? 100.0 * (double)math / (double)all : 0);
    }
    if (rc == LS_OK)
        rc = ls_loader_client_shutdown(c[0]);
    else
        ls_loader_server_stop(srv);
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
    pthread_join(tid, NULL);
    ls_loader_server_close(srv);
    return rc;
}

/* Placement on dp=2, pp=2, tp=2 (8 processes): tokens read per DP group when each group's batch is
 * laid out once and placed on its members, against every process laying out its own. */
static int demo_placement(FILE *f, const ls_loader_mix *mix) {
    ls_topology t = {2, 2, 2, 1};
    ls_loader *ld;
    LS_TRY(ls_loader_open(&ld, mix, t.dp, NULL));
    fprintf(f, "\nplacement on dp=2, pp=2, tp=2 (8 processes): tokens read per DP group and step\n");
    fprintf(f, "%-5s %14s %14s %16s %16s\n", "step", "dp 0 placed", "dp 0 per-proc", "dp 1 placed", "dp 1 per-proc");
    int rc = LS_OK, same = 1, empty = 1;
    int64_t placed = 0, naive = 0;
    for (int s = 0; s < 4 && rc == LS_OK; s++) {
        ls_loader_step *st;
        if ((rc = ls_loader_next_step(ld, &st)) != LS_OK) break;
        fprintf(f, "%-5d", s);
        for (int d = 0; d < t.dp && rc == LS_OK; d++) {
            ls_loader_batch b, p[8];
            if ((rc = ls_loader_step_batch(st, d, &b)) != LS_OK) break;
            int members = 0; /* the processes of this DP group: laid out once, placed on each */
            for (int g = 0; g < ls_topology_size(&t) && rc == LS_OK; g++) {
                ls_topology at;
                ls_topology_coords(&t, g, &at);
                if (at.dp != d) continue;
                if ((rc = ls_loader_batch_place(&t, g, &b, &p[members])) != LS_OK) break;
                if (at.pp > 0)
                    empty &= p[members].n_rows == 0;
                else
                    same &= p[members].n_rows == b.n_rows &&
                            !memcmp(p[members].tokens, b.tokens, (size_t)b.n_rows * b.n_ctx * sizeof *b.tokens);
                members++;
            }
            placed += b.n_tokens, naive += b.n_tokens * members;
            fprintf(f, " %14lld %14lld", (long long)b.n_tokens, (long long)b.n_tokens * members);
            for (int k = 0; k < members; k++) ls_loader_batch_free(&p[k]);
            ls_loader_batch_free(&b);
        }
        fprintf(f, "\n");
        ls_loader_step_free(st);
    }
    ls_loader_close(ld);
    if (rc == LS_OK)
        fprintf(f,
                "read %lld tokens placed vs %lld when every process reads its own (%.1fx); TP partners %s, later "
                "pipeline stages %s\n",
                (long long)placed, (long long)naive, (double)naive / (double)placed, same ? "identical" : "DIFFER",
                empty ? "empty" : "NOT EMPTY");
    if (rc == LS_OK && !(same && empty)) rc = ls_err(LS_EINVAL, "placement: a member got the wrong batch");
    return rc;
}

/* A service (a shadow of primary when not NULL) in a child process; its port, -1 when it did not start. */
static pid_t demo_fork_service(const ls_loader_mix *mix, int R, const char *primary, int *port) {
    int fd[2];
    *port = -1;
    if (pipe(fd) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fd[0]);
        ls_loader_serve_opts o = {2, 2, 1, NULL, NULL, primary, 50};
        ls_loader_server *srv;
        int p =
            ls_loader_server_open(&srv, mix, R, "127.0.0.1", 0, &o, NULL, 0) == LS_OK ? ls_loader_server_port(srv) : -1;
        if (write(fd[1], &p, sizeof p) != (ssize_t)sizeof p || p < 0) _exit(1);
        close(fd[1]);
        _exit(ls_loader_server_run(srv) == LS_OK ? 0 : 1);
    }
    close(fd[1]);
    if (pid < 0 || read(fd[0], port, sizeof *port) != (ssize_t)sizeof *port) *port = -1;
    close(fd[0]);
    return pid;
}

/* kill -9 of a primary service: the client fails over to its shadow, and the batches stay those of
 * the in-process loader. */
static int demo_failover(FILE *f, const ls_loader_mix *mix) {
    const int R = 2, timeout_ms = 300;
    int pp, sp = -1;
    char prim[64], eps[140];
    pid_t p = demo_fork_service(mix, R, NULL, &pp), sh = -1;
    snprintf(prim, sizeof prim, "tcp://127.0.0.1:%d", pp);
    if (pp > 0) sh = demo_fork_service(mix, R, prim, &sp);
    int rc = pp > 0 && sp > 0 ? LS_OK : ls_err(LS_EIO, "fail-over demo: a service did not start");
    snprintf(eps, sizeof eps, "%s,tcp://127.0.0.1:%d", prim, sp);
    ls_loader_client *c[2] = {0};
    ls_loader *ref = NULL;
    for (int r = 0; r < R && rc == LS_OK; r++) rc = ls_loader_client_open(&c[r], eps, r, timeout_ms, 0);
    if (rc == LS_OK) rc = ls_loader_open(&ref, mix, R, NULL);
    if (rc == LS_OK)
        fprintf(f,
                "\nfail-over: primary %s and its shadow; kill -9 of the primary after step 3 (client timeout %d ms)\n",
                prim, timeout_ms);
    int same = 1;
    double t_kill = 0, first = -1;
    for (int s = 0; s < 8 && rc == LS_OK; s++) {
        if (s == 4) {
            ls_sleep_ms(200); /* a few of the shadow's state pulls */
            kill(p, SIGKILL);
            waitpid(p, NULL, 0);
            p = -1;
            t_kill = ls_now();
        }
        ls_loader_step *st;
        if ((rc = ls_loader_next_step(ref, &st)) != LS_OK) break;
        for (int r = 0; r < R && rc == LS_OK; r++) {
            ls_loader_batch a, b;
            uint8_t *ea = NULL, *eb = NULL;
            size_t la = 0, lb = 0;
            if ((rc = ls_loader_client_batch(c[r], s, &a)) != LS_OK) break;
            if (s >= 4 && first < 0) first = ls_now() - t_kill;
            if ((rc = ls_loader_step_batch(st, r, &b)) == LS_OK && (rc = ls_loader_batch_encode(&a, &ea, &la)) == LS_OK)
                rc = ls_loader_batch_encode(&b, &eb, &lb);
            same &= rc == LS_OK && la == lb && !memcmp(ea, eb, la);
            free(ea), free(eb);
            ls_loader_batch_free(&a), ls_loader_batch_free(&b);
        }
        if (rc == LS_OK)
            fprintf(f, "  step %d: from %-24s %s\n", s, ls_loader_client_endpoint(c[0]),
                    same ? "identical to the in-process loader" : "DIFFERS");
        ls_loader_step_free(st);
    }
    if (rc == LS_OK) fprintf(f, "first batch from the shadow %.2f s after the kill\n", first);
    if (rc == LS_OK && !same) rc = ls_err(LS_EINVAL, "fail-over: the shadow's batches differ");
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
    ls_loader_close(ref);
    if (p > 0) kill(p, SIGKILL), waitpid(p, NULL, 0);
    if (sh > 0) kill(sh, SIGKILL), waitpid(sh, NULL, 0);
    return rc;
}

int ls_loader_demo(FILE *f, const char *workdir, int quick) {
    char base[1024], cfg[1100], ex[1100];
    snprintf(base, sizeof base, "%s/loader", workdir);
    LS_TRY(ls_mkdirs(base));
    fprintf(f, "generating three sources under %s/data:\n", base);
    ls_loader_demo_counts n;
    LS_TRY(ls_loader_demo_data(base, quick, &n));
    fprintf(f, "  prose: %d licence texts from /usr/share/common-licenses (a document per paragraph)\n", n.prose_files);
    fprintf(f, "  code:  %d headers from /usr/include (a document per file)\n", n.code_files);
    fprintf(f, "  math:  %lld generated sums, pre-tokenized into data/math.lstok (%lld tokens)\n",
            (long long)n.math_docs, (long long)n.math_tokens);
    /* The shipped example config, copied beside the data (its paths are relative). */
    snprintf(ex, sizeof ex, "%s/examples/mix-demo.json", LLMSYS_SOURCE_DIR);
    snprintf(cfg, sizeof cfg, "%s/mix-demo.json", base);
    LS_TRY(ls_file_copy(ex, cfg, (size_t)1 << 20));
    ls_loader_mix mix;
    LS_TRY(ls_loader_mix_load(cfg, &mix));
    const int R = 4, steps = 200;
    fprintf(
        f,
        "mix %s: %d sources, n_ctx %d, %d tokens per rank per step, curriculum math 10%% -> 50%% over steps 40..160\n",
        "examples/mix-demo.json", mix.n_sources, mix.n_ctx, mix.tokens_per_rank);
    ls_loader_stats s;
    int rc = ls_loader_stats_run(&mix, R, steps, &s);
    if (rc == LS_OK) {
        ls_loader_stats_print(stdout, &mix, &s);
        fprintf(f, "(%d steps, %.0f k tokens/s in-process)\n", steps,
                (double)steps * R * mix.tokens_per_rank / s.seconds / 1e3);
        char svg[1100];
        snprintf(svg, sizeof svg, "%s/loader-balance.svg", base);
        rc = ls_loader_stats_svg(svg, &s, "kk");
        if (rc == LS_OK) fprintf(f, "chart: %s\n", svg);
    }
    ls_loader_stats_free(&s);
    if (rc == LS_OK) rc = demo_service(f, &mix, R);
    if (rc == LS_OK) rc = demo_placement(f, &mix);
    if (rc == LS_OK) rc = demo_failover(f, &mix);
    ls_loader_mix_free(&mix);
    return rc;
}

int ls_loader_fetch_print(FILE *f, const char *addr, int rank, int64_t step, int count, int timeout,
                          const char *state_out) {
    ls_loader_client *c;
    LS_TRY(ls_loader_client_open(&c, addr, rank, timeout, 2));
    for (int i = 0; i < count; i++) {
        ls_loader_batch b;
        int rc = ls_loader_client_batch(c, step + i, &b);
        if (rc != LS_OK) {
            ls_loader_client_close(c);
            return rc;
        }
        uint64_t h[2] = {ls_hash64(b.tokens, (size_t)b.n_rows * b.n_ctx * 4),
                         ls_hash64(b.segs, (size_t)b.n_segs * sizeof *b.segs)};
        fprintf(f, "step %lld rank %d rows %d segments %d tokens %lld cost %.4g hash %016llx\n", (long long)b.step,
                b.rank, b.n_rows, b.n_segs, (long long)b.n_tokens, b.cost, (unsigned long long)ls_hash64(h, sizeof h));
        if (i == count - 1 && state_out) rc = ls_file_write_atomic(state_out, b.state, b.state_len);
        ls_loader_batch_free(&b);
        if (rc != LS_OK) {
            ls_loader_client_close(c);
            return rc;
        }
    }
    ls_loader_client_close(c);
    return LS_OK;
}
