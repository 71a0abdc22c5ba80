/* mp_openai.c - OpenAI-compatible endpoints of `llmsys serve` (run by ctest with the llmsys
 * binary as argv[1]): GET /v1/models, POST /v1/chat/completions (plain and streamed) and
 * --served-model-name, parsed field by field against the shapes OpenAI's API reference
 * documents; chat tokens must equal single-process greedy generation of the documented
 * template, written out here by hand; bad chat requests get 400/404 with an error object. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt_util.h"
#include "http_test.h"
#include "llmsys/serve.h"
#include "serve/openai.h"
#include "server_util.h"
#include "test.h"

static char ckpt[256], out_path[256];
static int port;
static const char *host = "127.0.0.1"; /* where start_server binds and call() connects */

/* `llmsys serve` on a free port of host, its stdout in out_path; name: --served-model-name,
 * api_key: --api-key (NULL: none). */
static int start_server(const char *name, const char *api_key) {
    unlink(port_path);
    const char *argv[18] = {llmsys_bin, "serve",       "--model", ckpt,     "--port",
                            "0",        "--port-file", port_path, "--bind", host};
    int n = 10;
    if (name) argv[n++] = "--served-model-name", argv[n++] = name;
    if (api_key) argv[n++] = "--api-key", argv[n++] = api_key;
    argv[n] = NULL;
    server_pid = fork();
    if (server_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (!freopen(out_path, "w", stdout)) _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return server_wait_port(&server_pid, port_path, 50, &port);
}

/* Sends a request; returns the parsed JSON body (NULL when not JSON), status in *st. */
static cJSON *call(const char *method, const char *path, const char *body, int *st, char **raw) {
    char *resp = NULL;
    *st = 0;
    CHECK_MSG(ls_http_request(host, port, method, path, body, 30.0, st, &resp) == LS_OK, "%s", ls_errmsg());
    cJSON *j = resp ? cJSON_Parse(resp) : NULL;
    if (raw)
        *raw = resp;
    else
        free(resp);
    return j;
}

static const cJSON *field(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static int is_str(const cJSON *o, const char *k, const char *want) {
    const cJSON *v = field(o, k);
    return cJSON_IsString(v) && (!want || !strcmp(v->valuestring, want));
}

/* An error object as OpenAI sends it: {"error": {"message", "type", "param", "code"}}. */
static void expect_error(const char *method, const char *path, const char *body, int want, const char *needle) {
    int st;
    char *raw = NULL;
    cJSON *j = call(method, path, body, &st, &raw);
    CHECK_MSG(st == want, "%s %s %s: status %d, expected %d (%s)", method, path, body ? body : "", st, want,
              raw ? raw : "");
    const cJSON *e = field(j, "error");
    CHECK_MSG(cJSON_IsObject(e) && is_str(e, "message", NULL) && is_str(e, "type", NULL) && field(e, "param") &&
                  cJSON_IsNumber(field(e, "code")) && field(e, "code")->valueint == want,
              "%s: not an OpenAI error object: %s", path, raw ? raw : "");
    if (needle) CHECK_MSG(raw && strstr(raw, needle), "%s: '%s' lacks '%s'", path, raw ? raw : "", needle);
    cJSON_Delete(j);
    free(raw);
}

static void check_models(const char *name) {
    int st;
    cJSON *j = call("GET", "/v1/models", NULL, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(is_str(j, "object", "list"));
    const cJSON *d = field(j, "data");
    CHECK(cJSON_IsArray(d) && cJSON_GetArraySize(d) == 1);
    const cJSON *m = cJSON_GetArrayItem(d, 0);
    CHECK_MSG(is_str(m, "id", name), "/v1/models id is not '%s'", name);
    CHECK(is_str(m, "object", "model") && is_str(m, "owned_by", NULL));
    double now = (double)time(NULL);
    CHECK(cJSON_IsNumber(field(m, "created")) && fabs(field(m, "created")->valuedouble - now) < 600);
    cJSON_Delete(j);
    char path[300];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    j = call("GET", path, NULL, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(is_str(j, "id", name) && is_str(j, "object", "model"));
    cJSON_Delete(j);
    expect_error("GET", "/v1/models/no-such-model", NULL, 404, "does not exist");
    expect_error("POST", "/v1/models", "{}", 405, NULL);
}

/* The documented template, written out independently of openai.c. */
static const char *CHAT_BODY = "{\"model\":\"%s\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                               "{\"role\":\"user\",\"content\":\"Hi "
                               "there\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}]},"
                               "{\"role\":\"user\",\"content\":\"Go on\"}],\"temperature\":0,\"max_tokens\":%d%s}";
static const char *CHAT_TEXT = "System: Be brief.\nUser: Hi there\nAssistant: Hello\nUser: Go on\nAssistant:";
#define NNEW 12
static int ref[NNEW], nref, nprompt;

static void make_reference(void) {
    ls_engine_opts o = ls_engine_defaults();
    ls_engine *e;
    CHECK(ls_engine_open(&e, ckpt, &o) == LS_OK);
    int p[256];
    nprompt = 0;
    p[nprompt++] = LS_TOK_BOS;
    for (const char *c = CHAT_TEXT; *c; c++) p[nprompt++] = (unsigned char)*c;
    CHECK(ls_engine_generate(e, p, nprompt, NNEW, ref, &nref) == LS_OK);
    ls_engine_free(e);
    CHECK(nref > 0);
}

static int tokens_equal(const cJSON *arr, const int *want, int n) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) return 0;
    for (int i = 0; i < n; i++)
        if (cJSON_GetArrayItem(arr, i)->valueint != want[i]) return 0;
    return 1;
}

static char *content_plain;

static void check_chat(const char *name) {
    char body[1024];
    snprintf(body, sizeof body, CHAT_BODY, name, NNEW, "");
    int st;
    char *raw = NULL;
    cJSON *j = call("POST", "/v1/chat/completions", body, &st, &raw);
    CHECK_MSG(st == 200, "chat: status %d: %s", st, raw ? raw : "");
    CHECK(is_str(j, "id", NULL) && !strncmp(field(j, "id")->valuestring, "chatcmpl-", 9));
    CHECK(is_str(j, "object", "chat.completion"));
    CHECK(is_str(j, "model", name));
    CHECK(cJSON_IsNumber(field(j, "created")) && fabs(field(j, "created")->valuedouble - (double)time(NULL)) < 600);
    const cJSON *ch = field(j, "choices");
    CHECK(cJSON_IsArray(ch) && cJSON_GetArraySize(ch) == 1);
    const cJSON *c0 = cJSON_GetArrayItem(ch, 0), *msg = field(c0, "message");
    CHECK(cJSON_IsNumber(field(c0, "index")) && field(c0, "index")->valueint == 0);
    CHECK(cJSON_IsObject(msg) && is_str(msg, "role", "assistant") && is_str(msg, "content", NULL));
    const char *fr = cJSON_IsString(field(c0, "finish_reason")) ? field(c0, "finish_reason")->valuestring : "";
    CHECK_MSG(!strcmp(fr, nref == NNEW && ref[nref - 1] != LS_TOK_EOS ? "length" : "stop"), "finish_reason '%s'", fr);
    CHECK_MSG(tokens_equal(field(c0, "tokens"), ref, nref),
              "chat tokens differ from greedy generation of the template");
    const cJSON *u = field(j, "usage");
    CHECK(cJSON_IsObject(u));
    CHECK_EQ_INT(cJSON_GetObjectItem(u, "prompt_tokens") ? cJSON_GetObjectItem(u, "prompt_tokens")->valueint : -1,
                 nprompt);
    CHECK_EQ_INT(
        cJSON_GetObjectItem(u, "completion_tokens") ? cJSON_GetObjectItem(u, "completion_tokens")->valueint : -1, nref);
    CHECK_EQ_INT(cJSON_GetObjectItem(u, "total_tokens") ? cJSON_GetObjectItem(u, "total_tokens")->valueint : -1,
                 nprompt + nref);
    /* content is the generated bytes: ASCII ones appear as themselves */
    if (is_str(msg, "content", NULL)) {
        content_plain = strdup(field(msg, "content")->valuestring);
        int ascii = 1;
        for (int i = 0; i < nref; i++) ascii &= ref[i] > 0 && ref[i] < 128;
        if (ascii) {
            char want[NNEW + 1];
            for (int i = 0; i < nref; i++) want[i] = (char)ref[i];
            want[nref] = '\0';
            CHECK(!strcmp(content_plain, want));
        }
    }
    cJSON_Delete(j);
    free(raw);
}

static void check_chat_stream(const char *name) {
    char body[1024];
    snprintf(body, sizeof body, CHAT_BODY, name, NNEW, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    int st;
    char *raw = NULL;
    cJSON_Delete(call("POST", "/v1/chat/completions", body, &st, &raw));
    CHECK_EQ_INT(st, 200);
    if (!raw) return;
    /* events are "data: <json>\n\n", the last one "data: [DONE]\n\n" */
    int n_ev = 0, ntok = 0, done = 0, finished = 0, usage = 0, toks[NNEW + 4];
    char id[64] = "", content[1024] = "";
    double created = -1;
    for (char *p = raw; *p;) {
        char *end = strstr(p, "\n\n");
        CHECK_MSG(end != NULL, "SSE event not terminated by a blank line");
        if (!end) break;
        *end = '\0';
        CHECK_MSG(!strncmp(p, "data: ", 6), "SSE line '%.40s' is not a data line", p);
        CHECK_MSG(!done, "event after data: [DONE]");
        if (!strcmp(p + 6, "[DONE]")) {
            done = 1;
        } else {
            cJSON *e = cJSON_Parse(p + 6);
            CHECK_MSG(e && is_str(e, "object", "chat.completion.chunk"), "chunk: %s", p + 6);
            CHECK(is_str(e, "model", name));
            CHECK(is_str(e, "id", NULL) && !strncmp(field(e, "id")->valuestring, "chatcmpl-", 9));
            if (is_str(e, "id", NULL)) {
                if (!n_ev) snprintf(id, sizeof id, "%s", field(e, "id")->valuestring);
                CHECK_MSG(!strcmp(id, field(e, "id")->valuestring), "chunk ids differ");
            }
            CHECK(cJSON_IsNumber(field(e, "created")));
            if (cJSON_IsNumber(field(e, "created"))) {
                if (!n_ev) created = field(e, "created")->valuedouble;
                CHECK(created == field(e, "created")->valuedouble);
            }
            if (cJSON_IsArray(field(e, "choices")) && cJSON_GetArraySize(field(e, "choices")) == 0) {
                /* include_usage: one chunk with empty choices and the usage, after the last choice */
                const cJSON *u = field(e, "usage");
                CHECK_MSG(finished && !usage, "usage chunk out of place");
                CHECK(cJSON_IsObject(u) && cJSON_IsNumber(field(u, "prompt_tokens")) &&
                      field(u, "prompt_tokens")->valueint == nprompt && cJSON_IsNumber(field(u, "completion_tokens")) &&
                      field(u, "completion_tokens")->valueint == nref && cJSON_IsNumber(field(u, "total_tokens")) &&
                      field(u, "total_tokens")->valueint == nprompt + nref);
                usage = 1;
                cJSON_Delete(e);
                n_ev++;
                p = end + 2;
                continue;
            }
            const cJSON *c0 = cJSON_GetArrayItem(field(e, "choices"), 0), *dl = field(c0, "delta");
            CHECK(cJSON_IsObject(dl) && is_str(dl, "content", NULL));
            CHECK_MSG(n_ev ? !field(dl, "role") : is_str(dl, "role", "assistant"), "role only in the first delta");
            CHECK_MSG(!finished, "chunk after the one with a finish_reason");
            const cJSON *fr = field(c0, "finish_reason");
            if (cJSON_IsString(fr))
                finished = 1;
            else
                CHECK(cJSON_IsNull(fr));
            if (is_str(dl, "content", NULL))
                strncat(content, field(dl, "content")->valuestring, sizeof content - strlen(content) - 1);
            const cJSON *t;
            cJSON_ArrayForEach(t, field(c0, "tokens")) if (ntok < NNEW + 4) toks[ntok++] = t->valueint;
            cJSON_Delete(e);
            n_ev++;
        }
        p = end + 2;
    }
    CHECK_MSG(done, "stream lacks data: [DONE]");
    CHECK_MSG(finished, "no chunk carried a finish_reason");
    CHECK_MSG(usage, "no usage chunk although stream_options.include_usage was set");
    CHECK_MSG(ntok == nref && !memcmp(toks, ref, sizeof(int) * (size_t)nref), "streamed tokens differ (%d vs %d)", ntok,
              nref);
    CHECK_MSG(content_plain && !strcmp(content, content_plain), "streamed content differs from the plain response");
    free(raw);
}

static void check_completion_name(const char *name) {
    int st;
    cJSON *j = call("POST", "/v1/completions", "{\"prompt\":\"ab\",\"max_tokens\":2,\"temperature\":0}", &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(is_str(j, "object", "text_completion") && is_str(j, "model", name) && cJSON_IsNumber(field(j, "created")));
    cJSON_Delete(j);
}

static void check_bad_chat(void) {
    const char *P = "/v1/chat/completions";
    expect_error("POST", P, "{\"messages\": [", 400, "request body: invalid JSON");
    expect_error("POST", P, "{\"max_tokens\":3}", 400, "\\\"messages\\\" is required");
    expect_error("POST", P, "{\"messages\":[]}", 400, "non-empty array");
    expect_error("POST", P, "{\"messages\":{\"role\":\"user\",\"content\":\"x\"}}", 400, "non-empty array");
    expect_error("POST", P, "{\"messages\":[\"hi\"]}", 400, "messages[0]");
    expect_error("POST", P, "{\"messages\":[{\"content\":\"x\"}]}", 400, "role is required");
    expect_error("POST", P,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"y\"}]}", 400,
                 "messages[1].role 'tool'");
    expect_error("POST", P, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "must be a string");
    expect_error("POST", P, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", 400, "must be a string");
    expect_error("POST", P, "{\"messages\":[{\"role\":\"user\"}]}", 400, "must be a string");
    expect_error("POST", P, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "text");
    expect_error("POST", P, "{\"model\":\"gpt-4\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404,
                 "does not exist");
    expect_error("POST", P, "{\"model\":7,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "model");
    expect_error("POST", P, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":0}", 400,
                 "max_tokens");
    expect_error("POST", P,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,\"stream_options\":5}", 400,
                 "stream_options");
    expect_error("GET", P, NULL, 405, "POST");
    /* the server still answers after all that */
    int st;
    cJSON_Delete(call("POST", P, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":2}",
                      &st, NULL));
    CHECK_EQ_INT(st, 200);
}

static void test_stem(void) {
    char b[64];
    CHECK(!strcmp(ls_oai_model_stem("runs/core/model.safetensors", b, sizeof b), "model"));
    CHECK(!strcmp(ls_oai_model_stem("m.q4.safetensors", b, sizeof b), "m.q4"));
    CHECK(!strcmp(ls_oai_model_stem("plain", b, sizeof b), "plain"));
    CHECK(!strcmp(ls_oai_model_stem("/x/.hidden", b, sizeof b), ".hidden"));
}

/* The chat template, written out by hand: one "Role: text" line per message (system and
 * developer both "System", text parts joined), then "Assistant:". */
static void test_chat_template(void) {
    cJSON *m = cJSON_Parse("[{\"role\":\"system\",\"content\":\"a\"},{\"role\":\"developer\",\"content\":\"b\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"c\"},"
                           "{\"type\":\"text\",\"text\":\"d\"}]},{\"role\":\"assistant\",\"content\":\"e\"}]");
    char err[200];
    char *p = m ? ls_oai_chat_prompt(m, err, sizeof err) : NULL;
    CHECK_MSG(p && !strcmp(p, "System: a\nSystem: b\nUser: cd\nAssistant: e\nAssistant:"), "prompt '%s' (%s)",
              p ? p : "", err);
    free(p);
    cJSON_Delete(m);
    m = cJSON_Parse("[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"text\":\"c\"}]}]");
    p = m ? ls_oai_chat_prompt(m, err, sizeof err) : NULL;
    CHECK_MSG(!p && strstr(err, "messages[0].content[0]"), "a part of type image: '%s'", err);
    free(p);
    cJSON_Delete(m);
}

static void test_default_name(void) {
    CHECK(start_server(NULL, NULL) == 0);
    if (server_pid < 0) return;
    check_models("m");
    check_chat("m");
    check_chat_stream("m");
    check_completion_name("m");
    check_bad_chat();
    server_stop_checked();
}

static void test_served_name(void) {
    CHECK(start_server("org/tiny-chat", NULL) == 0);
    if (server_pid < 0) return;
    check_models("org/tiny-chat");
    check_completion_name("org/tiny-chat");
    server_stop_checked();
}

/* --api-key (or LLMSYS_API_KEY): every /v1/ request needs "Authorization: Bearer KEY", answered
 * otherwise with an OpenAI error object (401); /health and /metrics stay open. */
static void check_api_key(const char *key) {
    char out[8192], h[128];
    CHECK_EQ_INT(raw_http_h(port, "GET", "/v1/models", NULL, NULL, 0, out, sizeof out), 401);
    CHECK_MSG(strstr(out, "\"error\"") && strstr(out, "a valid API key is required"), "%s", out);
    snprintf(h, sizeof h, "Authorization: Bearer %.*s", (int)strlen(key) - 1, key); /* one character short */
    CHECK_EQ_INT(raw_http_h(port, "GET", "/v1/models", h, NULL, 0, out, sizeof out), 401);
    snprintf(h, sizeof h, "Authorization: Bearer %sx", key);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/v1/models", h, NULL, 0, out, sizeof out), 401);
    snprintf(h, sizeof h, "X-API-Key: %s", key);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/v1/models", h, NULL, 0, out, sizeof out), 401);
    static const char body[] = "{\"prompt\":\"a\",\"max_tokens\":1}";
    CHECK_EQ_INT(raw_http_h(port, "POST", "/v1/completions", NULL, body, sizeof body - 1, out, sizeof out), 401);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/health", NULL, NULL, 0, out, sizeof out), 200);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/metrics", NULL, NULL, 0, out, sizeof out), 200);
    snprintf(h, sizeof h, "Authorization: Bearer %s", key);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/v1/models", h, NULL, 0, out, sizeof out), 200);
    CHECK_MSG(strstr(out, "\"object\":\"list\""), "%s", out);
    CHECK_EQ_INT(raw_http_h(port, "POST", "/v1/completions", h, body, sizeof body - 1, out, sizeof out), 200);
    CHECK_MSG(strstr(out, "\"text_completion\""), "%s", out);
}

/* serve --bind addr refused: one error line holding want (and want2 unless NULL), exit code
 * status (2: not an address, or off loopback without a key: the flags, README.md "Exit
 * codes"), before any stage starts */
static void check_bind_refused(const char *addr, int status, const char *want, const char *want2) {
    char err[300], cmd[1200];
    snprintf(err, sizeof err, "%s/err", dir);
    snprintf(cmd, sizeof cmd, "env -u LLMSYS_API_KEY timeout 20 %s serve --model %s --bind '%s' --port 0 2> %s",
             llmsys_bin, ckpt, addr, err);
    double t0 = ls_now();
    int st = system(cmd);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == status, "serve --bind %s without a key: status %d", addr, st);
    CHECK_MSG(ls_now() - t0 < 10, "the refusal took %.1f s", ls_now() - t0);
    char *t = NULL;
    size_t n = 0;
    CHECK(ls_file_read(err, &t, &n) == LS_OK);
    CHECK_MSG(t && strstr(t, want) && (!want2 || strstr(t, want2)) && strchr(t, '\n') == t + n - 1, "%s", t ? t : "");
    free(t);
    unlink(err);
}

/* serve off loopback without a key (IPv4 or IPv6), or on an address that is none */
static void check_open_bind_refused(void) {
    check_bind_refused("0.0.0.0", 2, "refusing to listen on 0.0.0.0 without authentication", "--api-key");
    check_bind_refused("::", 2, "refusing to listen on :: without authentication", "--api-key");
    check_bind_refused("[::]", 2, "refusing to listen on [::] without authentication", "--api-key");
    check_bind_refused("::zz", 2, "--bind: bad bind address '::zz' (an IPv4 or IPv6 address", NULL);
    check_bind_refused("1.2.3", 2, "--bind: bad bind address '1.2.3'", NULL);
}

static void test_api_key(void) {
    CHECK(start_server(NULL, "k-123") == 0);
    if (server_pid < 0) return;
    check_api_key("k-123");
    server_stop_checked();
    setenv("LLMSYS_API_KEY", "from-env", 1); /* the server inherits it */
    CHECK(start_server(NULL, NULL) == 0);
    unsetenv("LLMSYS_API_KEY");
    if (server_pid < 0) return;
    check_api_key("from-env");
    server_stop_checked();
    check_open_bind_refused();
}

/* --bind ::1: serve listens on the IPv6 loopback only, gives its URL as http://[::1]:PORT and
 * answers the library's client there (skipped where ::1 cannot be bound) */
static void test_bind_v6(void) {
    if (!v6_loopback_ok()) {
        printf("SKIP: ::1 cannot be bound here (IPv6 off): no IPv6 serving check\n");
        return;
    }
    host = "::1";
    CHECK(start_server(NULL, NULL) == 0);
    if (server_pid > 0) {
        int st;
        cJSON_Delete(call("GET", "/v1/models", NULL, &st, NULL));
        CHECK_EQ_INT(st, 200);
        char out[4096], want[64];
        CHECK_MSG(raw_http_h(port, "GET", "/health", NULL, NULL, 0, out, sizeof out) == -1,
                  "serve --bind ::1 reachable on 127.0.0.1 too");
        char *t = NULL;
        size_t n = 0;
        snprintf(want, sizeof want, " on http://[::1]:%d with ", port);
        CHECK(ls_file_read(out_path, &t, &n) == LS_OK);
        CHECK_MSG(t && strstr(t, want), "stdout lacks '%s': %s", want, t ? t : "");
        free(t);
        server_stop_checked();
    }
    host = "127.0.0.1";
}

int main(int argc, char **argv) {
    if (server_test_begin(argc, argv, "mp_openai")) return 2;
    snprintf(ckpt, sizeof ckpt, "%s/m.safetensors", dir);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    ls_model_config cfg = {.vocab = LS_VOCAB, .n_ctx = 128, .n_layer = 2, .n_head = 2, .d_model = 32, .d_ff = 64};
    ls_model *m = make_model(&cfg, 9, 3.0f);
    CHECK(m && write_model_ckpt(m, ckpt) == 0);
    ls_model_free(m);
    make_reference();
    RUN(test_stem);
    RUN(test_chat_template);
    RUN(test_default_name);
    RUN(test_served_name);
    RUN(test_api_key);
    RUN(test_bind_v6);
    free(content_plain);
    unlink(ckpt), unlink(port_path), unlink(out_path), rmdir(dir);
    return TEST_RESULT();
}
