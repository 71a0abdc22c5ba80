/* mp_serve.c - multi-process serving test (run by ctest with the llmsys binary as argv[1]):
 * a 2-stage mixed-bits pipeline must return greedy tokens identical to single-process
 * generation, under concurrency and streaming; bad requests get 4xx and the server keeps
 * serving; a stage killed mid-request fails that request clearly, is restarted and serves the
 * same tokens again (with --stage-restarts 0 it stays dead and shows in /health).
 * Every child is killed on the way out, even on failure. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "server_util.h"
#include "llmsys/serve.h"
#include "test.h"

static char ckpt[256], plan_path[256];
static int port;
static ls_model_config cfg;
static const int BITS[4] = {4, 8, 3, 16};

#define NPROMPT 6
#define NNEW 20
static int prompts[NPROMPT][8];
static int plen[NPROMPT];
static int ref_out[NPROMPT][NNEW], ref_n[NPROMPT];

static pid_t spawn(char *const argv[], const char *delay) {
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (delay) setenv("LLMSYS_SERVE_STAGE_DELAY_MS", delay, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static int run_status(char *const argv[]) {
    pid_t pid = spawn(argv, NULL);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* restarts: --stage-restarts (NULL: the default) */
static int start_server(const char *delay, const char *restarts) {
    unlink(port_path);
    char *argv[] = {(char *)llmsys_bin, "serve",   "--model",    ckpt, "--plan", plan_path, "--port", "0",
                    "--port-file",      port_path, "--max-seqs", "8",  NULL,     NULL,      NULL};
    if (restarts) argv[12] = "--stage-restarts", argv[13] = (char *)restarts;
    server_pid = spawn(argv, delay);
    return server_wait_port(&server_pid, port_path, 100, &port);
}

static int http(const char *method, const char *path, const char *body, int *status, char **resp) {
    return ls_http_request("127.0.0.1", port, method, path, body, 30.0, status, resp);
}

static char *completion_body(int i, int stream) {
    char *b = malloc(512);
    int n = snprintf(b, 512, "{\"prompt\":[");
    for (int k = 0; k < plen[i]; k++) n += snprintf(b + n, 512 - n, "%s%d", k ? "," : "", prompts[i][k]);
    snprintf(b + n, 512 - n, "],\"max_tokens\":%d,\"temperature\":0%s}", NNEW, stream ? ",\"stream\":true" : "");
    return b;
}

/* Collects "tokens" arrays of a completion (or every SSE event) in order. */
static int collect_tokens(const char *resp, int *out, int max) {
    int n = 0;
    const char *p = resp;
    while ((p = strstr(p, "\"tokens\":[")) != NULL) {
        p += 10;
        while (*p && *p != ']') {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (n < max) out[n] = (int)v;
            n++;
            p = *end == ',' ? end + 1 : end;
        }
    }
    return n;
}

static void make_reference(void) {
    ls_engine_opts o = ls_engine_defaults();
    o.bits = BITS;
    ls_engine *e;
    CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
    for (int i = 0; i < NPROMPT; i++) {
        plen[i] = 1 + i % 7;
        for (int k = 0; k < plen[i]; k++) prompts[i][k] = (i * 31 + k * 7 + 65) % 256;
        CHECK(ls_engine_generate(e, prompts[i], plen[i], NNEW, ref_out[i], &ref_n[i]) == LS_OK);
    }
    ls_engine_free(e);
}

typedef struct {
    int i, stream, status, n, out[NNEW + 4];
    double retry_after; /* long_request: the Retry-After of its reply (0: none) */
} job;

static void *client(void *arg) {
    job *j = arg;
    char *body = completion_body(j->i, j->stream), *resp = NULL;
    if (http("POST", "/v1/completions", body, &j->status, &resp) == LS_OK) {
        j->n = collect_tokens(resp, j->out, NNEW + 4);
        if (j->stream && !strstr(resp, "data: [DONE]")) j->status = -2;
    } else {
        j->status = -1;
    }
    free(body);
    free(resp);
    return NULL;
}

static void test_identical_greedy(void) {
    /* every prompt twice at once (plain and streamed): 12 concurrent requests over 8 KV slots */
    job jobs[2 * NPROMPT];
    pthread_t th[2 * NPROMPT];
    for (int k = 0; k < 2 * NPROMPT; k++) {
        jobs[k] = (job){.i = k % NPROMPT, .stream = k >= NPROMPT};
        pthread_create(&th[k], NULL, client, &jobs[k]);
    }
    for (int k = 0; k < 2 * NPROMPT; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2 * NPROMPT; k++) {
        int i = jobs[k].i;
        CHECK_EQ_INT(jobs[k].status, 200);
        CHECK_EQ_INT(jobs[k].n, ref_n[i]);
        CHECK_MSG(jobs[k].n == ref_n[i] && !memcmp(jobs[k].out, ref_out[i], sizeof(int) * ref_n[i]),
                  "request %d (prompt %d, stream %d): pipelined tokens differ from single-process greedy", k, i, jobs[k].stream);
    }
}

/* A request that asks for more tokens than the context holds stops there ("length"), with
 * the tokens single-process generation gives (it stops at the context too): a 60-token
 * prompt in a 64-token context, max_tokens 64. */
static void test_context_end(void) {
    ls_engine_opts o = ls_engine_defaults();
    o.bits = BITS;
    ls_engine *e;
    int prompt[60], ref[64], nref = 0, out[72];
    for (int k = 0; k < 60; k++) prompt[k] = (k * 13 + 40) % 256;
    CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
    CHECK(ls_engine_generate(e, prompt, 60, 64, ref, &nref) == LS_OK);
    ls_engine_free(e);
    CHECK_MSG(nref == cfg.n_ctx - 60 + 1, "the reference stopped after %d tokens, before the context's end", nref);
    char body[600];
    int n = snprintf(body, sizeof body, "{\"prompt\":[");
    for (int k = 0; k < 60; k++) n += snprintf(body + n, sizeof body - (size_t)n, "%s%d", k ? "," : "", prompt[k]);
    snprintf(body + n, sizeof body - (size_t)n, "],\"max_tokens\":64,\"temperature\":0}");
    int st = 0;
    char *resp = NULL;
    CHECK(http("POST", "/v1/completions", body, &st, &resp) == LS_OK);
    CHECK_MSG(st == 200 && resp && strstr(resp, "\"finish_reason\":\"length\""), "status %d: %s", st, resp ? resp : "");
    int got = resp ? collect_tokens(resp, out, 72) : 0;
    CHECK_MSG(got == nref && !memcmp(out, ref, sizeof(int) * (size_t)nref), "%d tokens, the reference %d", got, nref);
    free(resp);
}

static void expect_status(const char *method, const char *path, const char *body, int want, const char *needle) {
    int st = 0;
    char *resp = NULL;
    CHECK(http(method, path, body, &st, &resp) == LS_OK);
    CHECK_MSG(st == want, "%s %s: status %d, expected %d (%s)", method, path, st, want, resp ? resp : "");
    if (needle) CHECK_MSG(resp && strstr(resp, needle), "%s %s: '%s' lacks '%s'", method, path, resp ? resp : "", needle);
    free(resp);
}

static void test_bad_requests(void) {
    char *big = malloc(100 * 1024);
    memset(big, ' ', 100 * 1024 - 1);
    big[0] = '{';
    big[100 * 1024 - 2] = '}';
    big[100 * 1024 - 1] = '\0';
    expect_status("POST", "/v1/completions", big, 413, "exceeds");
    free(big);
    expect_status("POST", "/v1/completions", "{\"prompt\": \"abc\"", 400, "request body: invalid JSON");
    expect_status("POST", "/v1/completions", "[1,2]", 400, "JSON object");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\\u0000there\"}", 400, "u0000 escape");
    expect_status("POST", "/v1/completions", "{\"max_tokens\":3}", 400, "is required");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":-3}", 400, "max_tokens");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1.5}", 400, "max_tokens");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"temperature\":\"hot\"}", 400, "temperature");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"top_p\":0}", 400, "top_p");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"stream\":1}", 400, "stream");
    expect_status("POST", "/v1/completions", "{\"prompt\":[1,999]}", 400, "token id");
    /* numbers out of the target type's range: refused before any conversion (issue 17) */
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"seed\":-1}", 400, "seed");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"seed\":1e300}", 400, "seed");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"seed\":2.5}", 400, "seed");
    expect_status("POST", "/v1/completions", "{\"prompt\":[1,1e300]}", 400, "token id");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":-1e300}", 400, "max_tokens");
    char longp[200];
    memset(longp, 0, sizeof longp);
    snprintf(longp, sizeof longp, "{\"prompt\":\"");
    memset(longp + 11, 'a', 80);
    strcat(longp, "\"}");
    expect_status("POST", "/v1/completions", longp, 400, "too long");
    /* at the bounds: a token id one past the vocabulary, max_tokens 0, and a text prompt that
     * (with its BOS) fills the context are refused; one token shorter is served */
    char edge[200];
    snprintf(edge, sizeof edge, "{\"prompt\":[1,%d]}", cfg.vocab);
    expect_status("POST", "/v1/completions", edge, 400, "token id");
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":0}", 400, "max_tokens");
    int n = snprintf(edge, sizeof edge, "{\"prompt\":\"");
    memset(edge + n, 'a', (size_t)cfg.n_ctx - 1);
    snprintf(edge + n + cfg.n_ctx - 1, sizeof edge - (size_t)(n + cfg.n_ctx - 1), "\",\"max_tokens\":1}");
    expect_status("POST", "/v1/completions", edge, 400, "too long");
    snprintf(edge + n + cfg.n_ctx - 2, sizeof edge - (size_t)(n + cfg.n_ctx - 2), "\",\"max_tokens\":1}");
    expect_status("POST", "/v1/completions", edge, 200, "\"completion_tokens\":1");
    /* a token prompt may not fill the context either (no room for a token); one shorter is served */
    char ids[1024];
    for (int len = cfg.n_ctx; len >= cfg.n_ctx - 1; len--) {
        n = snprintf(ids, sizeof ids, "{\"prompt\":[");
        for (int k = 0; k < len; k++) n += snprintf(ids + n, sizeof ids - (size_t)n, "%s%d", k ? "," : "", 40 + k % 50);
        snprintf(ids + n, sizeof ids - (size_t)n, "],\"max_tokens\":1}");
        expect_status("POST", "/v1/completions", ids, len == cfg.n_ctx ? 400 : 200,
                      len == cfg.n_ctx ? "too long" : "\"completion_tokens\":1");
    }
    /* top_p 1 (no nucleus cut) is the top of its range */
    expect_status("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":1,\"top_p\":1}", 200,
                  "\"completion_tokens\":1");
    expect_status("GET", "/v1/completions", NULL, 405, "POST");
    expect_status("GET", "/nope", NULL, 404, "unknown path");
    /* still serving, sampled completions too */
    expect_status("POST", "/v1/completions", "{\"prompt\":\"The \",\"max_tokens\":5,\"temperature\":0.8,\"top_p\":0.9,\"seed\":3}", 200,
                  "\"completion_tokens\":");
    expect_status("GET", "/health", NULL, 200, "\"status\":\"ok\"");
    expect_status("GET", "/metrics", NULL, 200, "llmsys_requests_rejected_total 21\n");
    int st;
    char *m = NULL;
    CHECK(http("GET", "/metrics", NULL, &st, &m) == LS_OK);
    CHECK(m && strstr(m, "llmsys_stage_busy_seconds_total{stage=\"1\"}") && strstr(m, "llmsys_queue_depth 0"));
    free(m);
}

static void *long_request(void *arg) {
    job *j = arg;
    const char *body = "{\"prompt\":\"abc\",\"max_tokens\":50,\"temperature\":0}";
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    ls_http_reply r;
    j->status = -1;
    if (ls_http_exchange("127.0.0.1", port_s, "POST", "/v1/completions", NULL, body, strlen(body), 30.0, &r) == LS_OK) {
        j->status = r.status;
        j->retry_after = r.retry_after;
        j->n = strstr(r.body, "stage 1") && strstr(r.body, "killed by signal 9");
        if (!j->n) fprintf(stderr, "  failed request said: %s\n", r.body);
        ls_http_reply_free(&r);
    }
    return NULL;
}

/* Kills stage 1 while a request runs: the request fails naming the stage; with restarts (the
 * default) the stage comes back within 20 s and serves the single-process tokens again, else it
 * stays dead and /health says so. */
static void stage_death(const char *restarts) {
    CHECK(start_server("20", restarts) == 0);
    job j = {0};
    pthread_t th;
    pthread_create(&th, NULL, long_request, &j);
    ls_sleep_ms(400); /* 50 tokens at >= 20 ms per step: well inside the request */
    char *h = NULL;
    int st;
    CHECK(http("GET", "/health", NULL, &st, &h) == LS_OK);
    const char *p = h ? strstr(h, "\"stage\":1") : NULL;
    p = p ? strstr(p, "\"pid\":") : NULL;
    int pid = p ? atoi(p + 6) : 0;
    free(h);
    h = NULL;
    CHECK(pid > 0);
    if (pid > 0) kill(pid, SIGKILL);
    pthread_join(th, NULL);
    CHECK_EQ_INT(j.status, 503);
    CHECK_MSG(j.n == 1, "the failed request names the dead stage");
    /* Retry-After: the stage is restarted at once (1 s); with --stage-restarts 0 it never comes back */
    int no_restart = restarts && !strcmp(restarts, "0");
    CHECK_MSG(j.retry_after == (no_restart ? 0 : 1), "the failed request's Retry-After: %g", j.retry_after);
    if (no_restart) {
        expect_status("GET", "/health", NULL, 503, "\"dead_stages\":[1]");
        expect_status("POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", 503, "stage 1");
        expect_status("GET", "/metrics", NULL, 200, "llmsys_stage_up{stage=\"1\"} 0");
    } else {
        double t0 = ls_now();
        while (ls_now() - t0 < 20 && (http("GET", "/health", NULL, &st, &h) != LS_OK || st != 200)) {
            free(h), h = NULL;
            ls_sleep_ms(20);
        }
        CHECK_MSG(st == 200 && h && strstr(h, "\"restarts\":1"), "no recovery within 20 s: %d %s", st, h ? h : "");
        free(h);
        test_identical_greedy();
        expect_status("GET", "/metrics", NULL, 200, "llmsys_stage_restarts_total{stage=\"1\"} 1\n");
    }
    server_stop_checked();
}

/* The load generator and the one-completion client (httpc.c) that the demo, the benchmarks
 * and `plan validate` use: ls_http_complete returns the greedy tokens of a text prompt (its
 * bytes after BOS) and ls_http_load sends every request, round robin over the prompts, with the tokens
 * each returns counted and the time per output token averaged over requests. */
static void test_load_generator(void) {
    static const char *const text[3] = {"ab", "hello", "xyz!"};
    int want[3][NNEW], want_n[3], total = 0;
    ls_engine_opts o = ls_engine_defaults();
    o.bits = BITS;
    ls_engine *e;
    CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
    for (int i = 0; i < 3; i++) {
        int in[8] = {LS_TOK_BOS}, n = 1 + (int)strlen(text[i]); /* the server starts a text with BOS */
        for (int k = 1; k < n; k++) in[k] = (unsigned char)text[i][k - 1];
        CHECK(ls_engine_generate(e, in, n, NNEW, want[i], &want_n[i]) == LS_OK);
        int got[NNEW];
        char out[256];
        for (int k = 0; k < NNEW; k++) got[k] = -1;
        CHECK_MSG(ls_http_complete("127.0.0.1", port, text[i], NNEW, 30, out, sizeof out, got) == LS_OK, "%s",
                  ls_errmsg());
        int m = 0;
        while (m < NNEW && got[m] >= 0) m++;
        CHECK_MSG(m == want_n[i] && !memcmp(got, want[i], sizeof(int) * (size_t)m), "prompt '%s': %d tokens, want %d",
                  text[i], m, want_n[i]);
    }
    ls_engine_free(e);
    /* 7 requests from 3 clients: 3, 2 and 2, client c's k-th on prompt (c + k) % 3 */
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 7 / 3 + (c < 7 % 3); k++) total += want_n[(c + k) % 3];
    ls_load_result r;
    CHECK_MSG(ls_http_load("127.0.0.1", port, text, 3, 3, 7, NNEW, &r) == LS_OK, "%s", ls_errmsg());
    CHECK_EQ_INT(r.ok, 7);
    CHECK_EQ_INT(r.failed, 0);
    CHECK_EQ_INT(r.tokens, total);
    CHECK(r.seconds > 0 && fabs(r.tokens_per_s - total / r.seconds) <= 1e-9 * r.tokens_per_s);
    /* each request's latency over its own tokens: between the mean latency over the most and
     * over the fewest tokens a request gets */
    int lo = NNEW, hi = 1;
    for (int i = 0; i < 3; i++) lo = want_n[i] < lo ? want_n[i] : lo, hi = want_n[i] > hi ? want_n[i] : hi;
    CHECK_MSG(lo > 0 && r.mean_tpot_s >= r.mean_latency_s / hi * (1 - 1e-9) &&
                  r.mean_tpot_s <= r.mean_latency_s / lo * (1 + 1e-9),
              "time per token %.6f s, mean latency %.6f s, %d to %d tokens", r.mean_tpot_s, r.mean_latency_s, lo, hi);
    /* fewer requests than clients is refused; a dead port fails every request */
    CHECK(ls_http_load("127.0.0.1", port, text, 3, 4, 3, NNEW, &r) == LS_EINVAL);
    CHECK(ls_http_load("127.0.0.1", 1, text, 3, 2, 2, NNEW, &r) == LS_EPEER && r.ok == 0 && r.failed == 2 &&
          strstr(ls_errmsg(), "2 of 2 requests failed"));
}

static void test_stage_death(void) { stage_death(NULL); }
static void test_stage_death_no_restart(void) { stage_death("0"); }

static void test_cli_refusals(void) {
    /* plan for another model and unsupported bits are refused before anything starts: usage
     * errors (2), an input file and a flag */
    const char *bad = "/tmp/llmsys_mp_badplan.json";
    FILE *f = fopen(bad, "w");
    fprintf(f, "{\"format\":\"llmsys-plan\",\"version\":1,\"model\":{\"name\":\"x\",\"n_layer\":6},"
               "\"stages\":[{\"layers\":[0,6],\"bits\":[4,4,4,4,4,4]}]}");
    fclose(f);
    char *a1[] = {(char *)llmsys_bin, "serve", "--model", ckpt, "--plan", (char *)bad, "--port", "0", NULL};
    CHECK_EQ_INT(run_status(a1), 2);
    char *a2[] = {(char *)llmsys_bin, "quantize", "--model", ckpt, "--bits", "5", "--out", "/tmp/llmsys_mp_x.safetensors", NULL};
    CHECK_EQ_INT(run_status(a2), 2);
    char *a3[] = {(char *)llmsys_bin, "quantize", "--model", ckpt, "--out", "/tmp/llmsys_mp_x.safetensors", NULL};
    CHECK_EQ_INT(run_status(a3), 2);
    unlink(bad);
}

int main(int argc, char **argv) {
    if (server_test_begin(argc, argv, "mp_serve")) return 2;
    snprintf(ckpt, sizeof ckpt, "%s/m.safetensors", dir);
    snprintf(plan_path, sizeof plan_path, "%s/plan.json", dir);
    cfg = (ls_model_config){.vocab = LS_VOCAB, .n_ctx = 64, .n_layer = 4, .n_head = 4, .d_model = 64, .d_ff = 256};
    ls_model *m = make_model(&cfg, 5, 3.0f);
    CHECK(m && write_model_ckpt(m, ckpt) == 0);
    ls_model_free(m);
    FILE *f = fopen(plan_path, "w");
    fprintf(f, "{\"format\":\"llmsys-plan\",\"version\":1,\"model\":{\"name\":\"test\",\"n_layer\":4},"
               "\"stages\":[{\"device\":\"cpu\",\"layers\":[0,2],\"bits\":[4,8]},{\"device\":\"cpu\",\"layers\":[2,4],\"bits\":[3,16]}],"
               "\"micro_batch\":{\"prefill\":2,\"decode\":3}}");
    fclose(f);
    make_reference();
    if (start_server(NULL, NULL) != 0) {
        CHECK_MSG(0, "server did not start");
        return TEST_RESULT();
    }
    RUN(test_identical_greedy);
    RUN(test_context_end);
    RUN(test_bad_requests);
    RUN(test_load_generator);
    server_stop_checked();
    RUN(test_stage_death);
    RUN(test_stage_death_no_restart);
    RUN(test_cli_refusals);
    unlink(ckpt), unlink(plan_path), unlink(port_path), rmdir(dir);
    return TEST_RESULT();
}
