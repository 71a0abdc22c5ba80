/* demo.c - the loader demo scenario: three generated sources and a curriculum mix, their
 * token shares and per-rank cost balance over 200 steps in-process, then 4 trainer ranks
 * fetching from the service while a control message shifts the weights (`llmsys demo loader`);
 * and the per-step lines of `llmsys loader fetch`. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

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
