/* test_loader_place_service.c - the loader service on a DP x PP x TP x CP grid: every process
 * fetches by its global rank; later pipeline stages get empty batches, the TP members of a group
 * byte-identical ones, the CP ranks shards that together are the DP rank's batch; the sources are
 * read once per DP group and step (the service's counters against the in-process loader). The
 * server runs in a forked child that is always killed and reaped. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmsys/loader.h"
#include "loader_util.h"
#include "test.h"

static char dir[256];

static const char *MIX = "{\"n_ctx\": 64, \"tokens_per_rank\": 256, \"micro_batches\": 2, \"seed\": 5,"
                         " \"sources\": [{\"name\": \"text\", \"path\": \"text\", \"weight\": 1}]}";

static int start_server(const ls_loader_mix *mix, const ls_topology *t) {
    ls_loader_serve_opts o = {2, 2, 1, NULL, t};
    return lu_start(0, mix, t->dp, &o, NULL, 0);
}

static void test_grid(void) {
    char p[512], buf[8192];
    snprintf(p, sizeof p, "%s/text", dir);
    CHECK_EQ_INT(ls_mkdirs(p), 0);
    for (int f = 0; f < 12; f++) {
        int n = 30 + 211 * f % 900;
        for (int i = 0; i < n; i++) buf[i] = (char)('a' + (i * 5 + f) % 26);
        snprintf(p, sizeof p, "%s/text/f%02d.txt", dir, f);
        CHECK_EQ_INT(ls_file_write_atomic(p, buf, (size_t)n), 0);
    }
    snprintf(p, sizeof p, "%s/mix.json", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, MIX, strlen(MIX)), 0);
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_load(p, &mix), 0);
    ls_topology t = {2, 2, 2, 2};
    int port = start_server(&mix, &t);
    CHECK(port > 0);
    if (port <= 0) return;
    /* the reference: the same loader in process */
    ls_loader *ld;
    CHECK_EQ_INT(ls_loader_open(&ld, &mix, t.dp, NULL), 0);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    const int G = ls_topology_size(&t), STEPS = 3;
    int64_t want_read = 0;
    for (int step = 0; step < STEPS; step++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ld, &st), 0);
        ls_loader_batch ref[2], got[16];
        for (int d = 0; d < t.dp; d++) {
            CHECK_EQ_INT(ls_loader_step_batch(st, d, &ref[d]), 0);
            want_read += ref[d].n_tokens;
        }
        for (int g = 0; g < G; g++) {
            ls_loader_client *c;
            CHECK_EQ_INT(ls_loader_client_open(&c, ep, g, 5000, 2), 0);
            CHECK_EQ_INT(ls_loader_client_batch(c, step, &got[g]), 0);
            ls_loader_client_close(c);
        }
        for (int g = 0; g < G; g++) {
            ls_topology at;
            ls_topology_coords(&t, g, &at);
            if (at.pp > 0) {
                CHECK(got[g].n_rows == 0 && got[g].n_tokens == 0);
                continue;
            }
            const ls_loader_batch *r = &ref[at.dp];
            CHECK(got[g].cp_rank == at.cp && got[g].cp_size == 2 && got[g].positions && got[g].n_rows == r->n_rows);
            /* each shard token is the DP batch's token at its position */
            for (int row = 0; row < got[g].n_rows; row++)
                for (int k = 0; k < got[g].n_ctx; k++) {
                    int pos = got[g].positions[row * got[g].n_ctx + k];
                    if (pos >= 0) CHECK(got[g].tokens[row * got[g].n_ctx + k] == r->tokens[row * r->n_ctx + pos]);
                }
            /* TP partner: identical */
            int partner = g ^ 1;
            CHECK(got[partner].n_ctx == got[g].n_ctx &&
                  !memcmp(got[partner].tokens, got[g].tokens, sizeof(int32_t) * (size_t)got[g].n_rows * got[g].n_ctx));
        }
        /* CP ranks 0 and 1 of DP group d together hold its whole batch */
        for (int d = 0; d < t.dp; d++) {
            int g0 = d * t.cp * t.tp, g1 = g0 + t.tp;
            CHECK_EQ_INT(got[g0].n_tokens + got[g1].n_tokens, ref[d].n_tokens);
        }
        for (int g = 0; g < G; g++) ls_loader_batch_free(&got[g]);
        for (int d = 0; d < t.dp; d++) ls_loader_batch_free(&ref[d]);
        ls_loader_step_free(st);
    }
    /* read once per DP group and step, served to every TP and CP member */
    ls_loader_client *c;
    char *info = NULL;
    CHECK_EQ_INT(ls_loader_client_open(&c, ep, 0, 5000, 2), 0);
    CHECK_EQ_INT(ls_loader_client_control(c, NULL, &info), 0);
    cJSON *j = info ? cJSON_Parse(info) : NULL;
    double read = j ? cJSON_GetObjectItem(j, "read_tokens")->valuedouble : -1;
    double batches = j ? cJSON_GetObjectItem(j, "read_batches")->valuedouble : -1;
    double served = j ? cJSON_GetObjectItem(j, "served_tokens")->valuedouble : -1;
    CHECK_MSG(read == (double)want_read && batches == STEPS * t.dp, "read %g tokens in %g batches, want %lld in %d",
              read, batches, (long long)want_read, STEPS * t.dp);
    CHECK_MSG(served == (double)want_read * t.tp, "served %g tokens, want %lld", served, (long long)want_read * t.tp);
    fprintf(stderr, "grid dp=2,pp=2,tp=2,cp=2: %g tokens read once per DP group, %g served\n", read, served);
    cJSON_Delete(j);
    free(info);
    CHECK_EQ_INT(ls_loader_client_shutdown(c), 0);
    ls_loader_client_close(c);
    /* a rank outside the grid is refused */
    ls_loader_close(ld);
    ls_loader_mix_free(&mix);
    lu_kill(0);
}

static void test_bad_topology(void) {
    ls_loader_mix mix;
    char p[512];
    snprintf(p, sizeof p, "%s/mix.json", dir);
    CHECK_EQ_INT(ls_loader_mix_load(p, &mix), 0);
    ls_topology t = {3, 1, 2, 1};
    ls_loader_serve_opts o = {2, 2, 1, NULL, &t};
    ls_loader_server *srv;
    CHECK(ls_loader_server_open(&srv, &mix, 2, "127.0.0.1", 0, &o, NULL, 0) == LS_EINVAL);
    ls_loader_mix_free(&mix);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys-test-place-%d", (int)getpid());
    lu_guard(100);
    RUN(test_grid);
    RUN(test_bad_topology);
    lu_kill(0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return TEST_RESULT();
}
