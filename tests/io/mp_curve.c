/* mp_curve.c - a 2-stage serve pipeline with CURVE forced on its loopback stage links
 * (`llmsys --keys DIR --curve serve`): greedy completions equal in-process generation;
 * strangers that push a forged, correctly sealed SHUTDOWN into stage 0 (no keys, another
 * deployment's keys, a client key off the allow list) are refused and logged, and the
 * pipeline keeps serving. Every child is killed on the way out, even on failure. */
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "../serve/ckpt_util.h"
#include "../serve/server_util.h"
#include "llmsys/http.h"
#include "llmsys/serve.h"
#include "llmsys/zsec.h"
#include "serve/wire.h"
#include "test.h"

static char ckpt[256], plan_path[256], log_path[256], keys_a[256], keys_b[256];
static char stage0[64];
static int port;
static int prompt[5] = {65, 72, 79, 86, 93}, ref[12], ref_n;

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    int p = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        p = ntohs(a.sin_port);
    close(fd);
    return p;
}

/* Greedy completion of prompt; 1 if the tokens equal the in-process reference. */
static int completion_matches(void) {
    char body[256], *resp = NULL;
    int n = snprintf(body, sizeof body, "{\"prompt\":[");
    for (int k = 0; k < 5; k++) n += snprintf(body + n, sizeof body - n, "%s%d", k ? "," : "", prompt[k]);
    snprintf(body + n, sizeof body - n, "],\"max_tokens\":12,\"temperature\":0}");
    int status = 0, ok = 0;
    if (ls_http_request("127.0.0.1", port, "POST", "/v1/completions", body, 30.0, &status, &resp) == LS_OK &&
        status == 200) {
        const char *p = strstr(resp, "\"tokens\":[");
        int got[12], m = 0;
        for (p = p ? p + 10 : NULL; p && *p && *p != ']' && m < 12;) {
            char *end;
            got[m++] = (int)strtol(p, &end, 10);
            p = *end == ',' ? end + 1 : end;
        }
        ok = m == ref_n && !memcmp(got, ref, sizeof(int) * (size_t)m);
    }
    CHECK_MSG(ok, "status %d, response %s", status, resp ? resp : "(none)");
    free(resp);
    return ok;
}

/* A stranger pushes a sealed SHUTDOWN into stage 0 with the given keys (NULL server key: no CURVE). */
static void stranger_push(const char *srv_pub, const char *cli_pub, const char *cli_sec) {
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_PUSH);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (srv_pub) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, srv_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, cli_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, cli_sec, 40);
    }
    zmq_connect(s, stage0);
    ls_wire_hdr h = {.magic = LS_WIRE_MAGIC, .version = LS_WIRE_VERSION, .type = LS_MSG_SHUTDOWN, .stage = -1};
    ls_wire_seal(&h, sizeof h);
    zmq_send(s, &h, sizeof h, ZMQ_DONTWAIT); /* queued: only a completed handshake would deliver it */
    ls_sleep_ms(400);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* Reads "name = value" from a key file into out (40 chars). */
static void key_of(const char *file, const char *name, char out[41]) {
    char *t;
    size_t n;
    out[0] = '\0';
    if (ls_file_read(file, &t, &n) != LS_OK) return;
    char pat[64];
    snprintf(pat, sizeof pat, "%s = ", name);
    char *p = strstr(t, pat);
    if (p) snprintf(out, 41, "%.40s", p + strlen(pat));
    free(t);
}

static void test_curve_pipeline(void) {
    CHECK(completion_matches());
    char a_srv[41], b_srv[41], b_pub[41], b_sec[41], f[300];
    snprintf(f, sizeof f, "%s/client.key", keys_a);
    key_of(f, "server-public", a_srv);
    snprintf(f, sizeof f, "%s/client.key", keys_b);
    key_of(f, "server-public", b_srv);
    key_of(f, "client-public", b_pub);
    key_of(f, "client-secret", b_sec);
    CHECK(strlen(a_srv) == 40 && strlen(b_sec) == 40);
    stranger_push(NULL, NULL, NULL);    /* no keys */
    stranger_push(b_srv, b_pub, b_sec); /* another deployment's keys */
    stranger_push(a_srv, b_pub, b_sec); /* right server key, client key off the allow list */
    CHECK_MSG(completion_matches(), "the pipeline stopped serving after the strangers");
    char *log = NULL;
    size_t n;
    CHECK(ls_file_read(log_path, &log, &n) == LS_OK);
    if (log) {
        CHECK_MSG(strstr(log, "does not use CURVE") || strstr(log, "without CURVE"), "no-keys refusal not logged:\n%s",
                  log);
        CHECK_MSG(strstr(log, "does not hold this server's public key"), "wrong-key refusal not logged:\n%s", log);
        CHECK_MSG(strstr(log, "is not on the allow list"), "allow-list refusal not logged:\n%s", log);
    }
    free(log);
}

int main(int argc, char **argv) {
    if (server_test_begin(argc, argv, "mp_curve")) return 2;
    char *paths[] = {ckpt, plan_path, log_path, keys_a, keys_b};
    const char *names[] = {"m.safetensors", "plan.json", "serve.log", "a", "b"};
    for (int i = 0; i < 5; i++) snprintf(paths[i], 256, "%s/%s", dir, names[i]);
    CHECK(ls_zsec_keygen(keys_a, 0) == LS_OK && ls_zsec_keygen(keys_b, 0) == LS_OK);
    ls_model_config cfg = {.vocab = LS_VOCAB, .n_ctx = 64, .n_layer = 2, .n_head = 2, .d_model = 32, .d_ff = 64};
    ls_model *m = make_model(&cfg, 7, 3.0f);
    CHECK(m && write_model_ckpt(m, ckpt) == 0);
    ls_model_free(m);
    ls_engine *e;
    ls_engine_opts eo = ls_engine_defaults();
    CHECK(ls_engine_open(&e, ckpt, &eo) == LS_OK);
    CHECK(ls_engine_generate(e, prompt, 5, 12, ref, &ref_n) == LS_OK);
    ls_engine_free(e);
    /* stage links on loopback TCP (so strangers can reach stage 0); the front's own link stays ipc */
    snprintf(stage0, sizeof stage0, "tcp://127.0.0.1:%d", free_port());
    FILE *fp = fopen(plan_path, "w");
    fprintf(fp,
            "{\"format\":\"llmsys-plan\",\"version\":1,\"model\":{\"name\":\"t\",\"n_layer\":2},\"stages\":["
            "{\"device\":\"cpu\",\"layers\":[0,1],\"bits\":[16],\"address\":\"%s\"},"
            "{\"device\":\"cpu\",\"layers\":[1,2],\"bits\":[16],\"address\":\"tcp://127.0.0.1:%d\"}],"
            "\"micro_batch\":{\"prefill\":1,\"decode\":1}}",
            stage0, free_port());
    fclose(fp);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        execl(llmsys_bin, llmsys_bin, "--keys", keys_a, "--curve", "serve", "--model", ckpt, "--plan", plan_path,
              "--port", "0", "--port-file", port_path, (char *)NULL);
        _exit(127);
    }
    server_pid = pid;
    if (server_wait_port(&server_pid, port_path, 100, &port) != 0) {
        char *log = NULL;
        size_t n;
        ls_file_read(log_path, &log, &n);
        CHECK_MSG(0, "server did not start:\n%s", log ? log : "");
        free(log);
        return TEST_RESULT();
    }
    RUN(test_curve_pipeline);
    int st = 0;
    CHECK(server_stop(&server_pid, &st) > 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return TEST_RESULT();
}
