/* profile.c - measures on this machine what the planner's cost model consumes: a
 * layer's prefill and decode latency per bit width over a grid of batch sizes and
 * context lengths, the embedding/head cost, and a local ZeroMQ link (docs/plan-format.md). */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "llmsys/serve.h"
#include "llmsys/zsec.h"

ls_profile_opts ls_profile_defaults(void) {
    ls_profile_opts o = {0};
    static const int bits[4] = {16, 8, 4, 3}, batches[4] = {1, 2, 4, 8}, seqs[3] = {16, 32, 64}, ctxs[3] = {16, 64, 128};
    o.bits = bits, o.n_bits = 4;
    o.batches = batches, o.n_batches = 4;
    o.seqs = seqs, o.n_seqs = 3;
    o.ctxs = ctxs, o.n_ctxs = 3;
    o.reps = 3;
    o.nthreads = 1;
    return o;
}

int ls_profile_opts_check(const ls_profile_opts *o) {
    const int *v[4] = {o->bits, o->batches, o->seqs, o->ctxs}, n[4] = {o->n_bits, o->n_batches, o->n_seqs, o->n_ctxs};
    static const char *const names[4] = {"--bits", "--batches", "--seqs", "--ctxs"};
    for (int i = 0; i < 4; i++) {
        int ok = n[i] > 0 && v[i];
        for (int k = 0; ok && k < n[i]; k++) ok = i == 0 ? ls_quant_bits_valid(v[i][k]) && v[i][k] != 32 : v[i][k] >= 1;
        if (!ok)
            return ls_err(LS_EINVAL, "%s must be a comma-separated list of %s", names[i],
                          i == 0 ? "widths in {16, 8, 4, 3}" : "positive integers");
    }
    if (o->reps < 1 || o->reps > LS_PROFILE_MAX_REPS)
        return ls_err(LS_EINVAL, "--reps must be in [1, %d], got %d", LS_PROFILE_MAX_REPS, o->reps);
    if (o->nthreads < 1 || o->nthreads > LS_MODEL_MAX_THREADS)
        return ls_err(LS_EINVAL, "--threads must be in [1, %d], got %d", LS_MODEL_MAX_THREADS, o->nthreads);
    return LS_OK;
}

/* Echo server for the link measurements: a forked child with its own ZeroMQ context;
 * a 1-byte message is echoed and ends it. */
static void echo_child(const char *in, const char *out) {
    void *ctx = zmq_ctx_new(), *pull = zmq_socket(ctx, ZMQ_PULL), *push = zmq_socket(ctx, ZMQ_PUSH);
    if (ls_zsec_bind(ctx, pull, in, "link echo") || ls_zsec_connect(push, out, "link echo")) _exit(1);
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, pull, 0) < 0) break;
        size_t n = zmq_msg_size(&m);
        zmq_msg_send(&m, push, 0);
        if (n == 1) break;
    }
    zmq_close(pull);
    zmq_close(push);
    zmq_ctx_term(ctx);
    _exit(0);
}

/* This process and an echo child joined by ZeroMQ ipc PUSH/PULL sockets in a temporary
 * directory, the transport serve's stages use. */
typedef struct {
    char dir[32];
    pid_t pid;
    void *ctx, *push, *pull;
} echo_pair;

static int echo_open(echo_pair *e, int timeout_ms) {
    memset(e, 0, sizeof *e);
    e->pid = -1;
    snprintf(e->dir, sizeof e->dir, "/tmp/llmsys-link-XXXXXX");
    if (!mkdtemp(e->dir)) return ls_err(LS_EIO, "link: mkdtemp failed");
    char a[64], b[64];
    snprintf(a, sizeof a, "ipc://%s/a", e->dir);
    snprintf(b, sizeof b, "ipc://%s/b", e->dir);
    fflush(NULL);
    e->pid = fork();
    if (e->pid < 0) {
        rmdir(e->dir);
        return ls_err(LS_EIO, "link: fork failed");
    }
    if (e->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        echo_child(a, b);
    }
    e->ctx = zmq_ctx_new();
    e->push = zmq_socket(e->ctx, ZMQ_PUSH);
    e->pull = zmq_socket(e->ctx, ZMQ_PULL);
    int zero = 0;
    zmq_setsockopt(e->push, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(e->pull, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    LS_TRY(ls_zsec_bind(e->ctx, e->pull, b, "link"));
    return ls_zsec_connect(e->push, a, "link");
}

/* One round trip of n bytes from buf (the echo lands back in buf, cap bytes). */
static int echo_rtt(echo_pair *e, char *buf, size_t n, size_t cap, double *rtt) {
    double t0 = ls_now();
    if (zmq_send(e->push, buf, n, 0) < 0 || zmq_recv(e->pull, buf, cap, 0) < 0)
        return ls_err(LS_ENET, "link: echo failed: %s", zmq_strerror(zmq_errno()));
    *rtt = ls_now() - t0;
    return LS_OK;
}

/* Ends the child (asked, then killed after 1 s), closes the sockets, removes the directory. */
static void echo_close(echo_pair *e) {
    if (e->pid > 0) {
        if (e->push) zmq_send(e->push, "x", 1, ZMQ_DONTWAIT);
        for (int i = 0; i < 100 && waitpid(e->pid, NULL, WNOHANG) != e->pid; i++) {
            if (i == 99) {
                kill(e->pid, SIGKILL);
                waitpid(e->pid, NULL, 0);
            }
            ls_sleep_ms(10);
        }
    }
    if (e->push) zmq_close(e->push);
    if (e->pull) zmq_close(e->pull);
    if (e->ctx) zmq_ctx_term(e->ctx);
    char f[64];
    snprintf(f, sizeof f, "%s/a", e->dir);
    unlink(f);
    snprintf(f, sizeof f, "%s/b", e->dir);
    unlink(f);
    rmdir(e->dir);
}

int ls_profile_link(double *latency_s, double *bandwidth_Bps) {
    echo_pair e;
    int rc = echo_open(&e, 5000);
    size_t big = 4u << 20;
    char *buf = calloc(1, big);
    if (rc == LS_OK && !buf) rc = ls_err(LS_ENOMEM, "link: out of memory");
    double rtt_small = 0, rtt_big = 0;
    for (int pass = 0; rc == LS_OK && pass < 2; pass++) {
        size_t sz = pass == 0 ? 64 : big;
        int iters = pass == 0 ? 200 : 12;
        double best = 1e30, dt;
        for (int i = 0; i < iters + 2 && (rc = echo_rtt(&e, buf, sz, big, &dt)) == LS_OK; i++)
            if (i >= 2 && dt < best) best = dt; /* the first round trips set up the connection */
        if (pass == 0) rtt_small = best;
        else rtt_big = best;
    }
    echo_close(&e);
    free(buf);
    if (rc == LS_OK) {
        *latency_s = rtt_small / 2;
        double d = rtt_big - rtt_small;
        *bandwidth_Bps = d > 0 ? 2.0 * (double)big / d : 0.0;
    }
    return rc;
}

/* Median one-way latency to a process that sleeps in its receive between messages, as
 * serve's front and stages do between micro-batches (the profile's link figure is the
 * minimum of back-to-back round trips, which a loaded host rarely delivers). */
double ls_host_hop_latency(int rounds, double gap_s) {
    if (rounds < 1) return NAN;
    echo_pair e;
    double *t = malloc(sizeof(double) * (size_t)rounds), res = NAN, dt;
    char m[64] = {0};
    int n = 0, rc = echo_open(&e, 2000);
    for (int r = 0; t && rc == LS_OK && r < rounds + 5; r++) {
        ls_sleep_ms((int)(gap_s * 1e3));
        if ((rc = echo_rtt(&e, m, sizeof m, sizeof m, &dt)) == LS_OK && r >= 5) t[n++] = dt / 2; /* first rounds connect */
    }
    if (n == rounds) res = ls_median(t, n);
    echo_close(&e);
    free(t);
    return res;
}

/* Times reps forwards of the engine's `span` layers over seqs (layer 0 takes tokens, later
 * layers take activations) after one untimed warm-up; *per_layer gets the median over
 * span. Timing a stage-sized run of layers, not one layer over and over, matters: one
 * layer's weights and KV cache stay in the CPU caches between repetitions, while a stage
 * streams several layers' through them (a layer inside a 5-layer stage measured 1.3-1.5x
 * the single-layer time here). Returns the first failing status. */
static int time_layers(ls_engine *e, const ls_engine_seq *seqs, int B, int first, int span, const int *tok,
                       const float *act, float *outb, double *ts, int reps, double *per_layer) {
    int rc = LS_OK;
    for (int r = -1; rc == LS_OK && r < reps; r++) {
        double t0 = ls_now();
        rc = ls_engine_forward(e, seqs, B, first == 0 ? tok : NULL, first == 0 ? NULL : act, outb, 0);
        if (r >= 0) ts[r] = ls_now() - t0;
    }
    /* the median, not the fastest: a stage runs in steady state, and the minimum is what a
     * lucky repetition sets */
    *per_layer = ls_median(ts, reps) / span;
    return rc;
}

/* Appends {"bits", "batch", key: val, "seconds"} to arr (the profile's row format). */
static void add_layer_row(cJSON *arr, int bits, int batch, const char *key, int val, double seconds) {
    cJSON *row = cJSON_CreateObject();
    cJSON_AddNumberToObject(row, "bits", bits);
    cJSON_AddNumberToObject(row, "batch", batch);
    cJSON_AddNumberToObject(row, key, val);
    cJSON_AddNumberToObject(row, "seconds", seconds);
    cJSON_AddItemToArray(arr, row);
}

static void cpu_name(char *out, size_t n) {
    snprintf(out, n, "cpu:unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = '\0';
                snprintf(out, n, "cpu:%s", c);
            }
            break;
        }
    fclose(f);
}

int ls_profile_run(const char *model, const ls_profile_opts *o, struct cJSON **out) {
    *out = NULL;
    LS_TRY(ls_profile_opts_check(o));
    ls_model_config cfg;
    int *fbits = NULL;
    LS_TRY(ls_ckpt_info(model, &cfg, &fbits, NULL));
    int quant = 0;
    for (int l = 0; l < cfg.n_layer; l++) quant |= fbits[l] != 32;
    free(fbits);
    if (quant) return ls_err(LS_EINVAL, "%s: profile needs the fp32 checkpoint (it quantizes one layer to each width)", model);
    double lat = 0, bw = 0;
    if (!o->no_link) LS_TRY(ls_profile_link(&lat, &bw));
    cJSON *j = cJSON_CreateObject();
    char dev[300];
    cpu_name(dev, sizeof dev);
    cJSON_AddStringToObject(j, "format", "llmsys-profile");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "device", dev);
    cJSON_AddNumberToObject(j, "threads", o->nthreads);
    /* middle layers (neither embedding nor head) when the model has them */
    int layer = cfg.n_layer >= 3 ? 1 : 0, C = cfg.d_model;
    int span = cfg.n_layer >= 3 ? cfg.n_layer - 2 : 1, want = o->span > 0 ? o->span : 4;
    span = span < want ? span : want;
    span = span < 64 ? span : 64;
    cJSON_AddNumberToObject(j, "layers_timed", span);
    cJSON_AddItemToObject(j, "model", ls_model_config_json(&cfg));
    cJSON *pre = cJSON_AddArrayToObject(j, "prefill"), *dec = cJSON_AddArrayToObject(j, "decode");
    int maxb = 1;
    for (int i = 0; i < o->n_batches; i++) maxb = o->batches[i] > maxb ? o->batches[i] : maxb;
    int rc = LS_OK;
    size_t maxtok = (size_t)maxb * cfg.n_ctx;
    float *act = malloc(sizeof(float) * maxtok * C), *outb = malloc(sizeof(float) * maxtok * (C > cfg.vocab ? C : cfg.vocab));
    int *tok = malloc(sizeof(int) * maxtok);
    ls_engine_seq *seqs = malloc(sizeof(ls_engine_seq) * maxb);
    double *ts = malloc(sizeof(double) * (o->reps > 0 ? o->reps : 1));
    if (!act || !outb || !tok || !seqs || !ts) rc = ls_err(LS_ENOMEM, "profile: out of memory");
    ls_rng rng;
    ls_rng_seed(&rng, 1);
    for (size_t i = 0; rc == LS_OK && i < maxtok * C; i++) act[i] = ls_rng_normal(&rng);
    for (size_t i = 0; rc == LS_OK && i < maxtok; i++) tok[i] = (int)ls_rng_below(&rng, 256);
    int total = o->n_bits * o->n_batches * (o->n_seqs + o->n_ctxs), done = 0;
    /* GEMMs on as many BLAS threads as a serving stage gets (serve sets OPENBLAS_NUM_THREADS
     * to its kernel threads for each worker); the library default is every core, which made
     * the profiled prefill ~30% faster than the stages then ran it */
    int blas_saved = openblas_get_num_threads();
    openblas_set_num_threads(o->nthreads);
    ls_progress pg;
    ls_progress_start(&pg, "profile", total);
    for (int bi = 0; rc == LS_OK && bi < o->n_bits; bi++) {
        ls_engine_opts eo = ls_engine_defaults();
        int b = o->bits[bi], bs[64];
        for (int i = 0; i < span; i++) bs[i] = b;
        eo.layer_begin = layer, eo.layer_end = layer + span, eo.bits = bs, eo.max_seqs = maxb,
        eo.nthreads = o->nthreads;
        ls_engine *e;
        if ((rc = ls_engine_open(&e, model, &eo))) break;
        for (int k = 0; rc == LS_OK && k < o->n_batches; k++) {
            int B = o->batches[k];
            for (int q = 0; rc == LS_OK && q < o->n_seqs; q++) {
                int S = o->seqs[q];
                if (S > cfg.n_ctx) { done++; continue; }
                for (int i = 0; i < B; i++) seqs[i] = (ls_engine_seq){i, 0, S};
                double best;
                rc = time_layers(e, seqs, B, layer, span, tok, act, outb, ts, o->reps, &best);
                add_layer_row(pre, b, B, "seq", S, best);
                ls_progress_update(&pg, ++done, "%d-bit prefill b=%d s=%d", b, B, S);
            }
            for (int q = 0; rc == LS_OK && q < o->n_ctxs; q++) {
                int X = o->ctxs[q] < cfg.n_ctx ? o->ctxs[q] : cfg.n_ctx - 1;
                for (int i = 0; i < B; i++) seqs[i] = (ls_engine_seq){i, X, 1};
                double best;
                rc = time_layers(e, seqs, B, layer, span, tok, act, outb, ts, o->reps, &best);
                add_layer_row(dec, b, B, "ctx", X, best);
                ls_progress_update(&pg, ++done, "%d-bit decode b=%d ctx=%d", b, B, X);
            }
        }
        ls_engine_free(e);
    }
    ls_progress_end(&pg);
    /* head: embedding gather for every token, then final LayerNorm and the tied LM head on
     * each sequence's last token through the same row kernel the last stage runs */
    if (rc == LS_OK) {
        int V = cfg.vocab;
        float *wte = malloc(sizeof(float) * (size_t)V * C);
        ls_qmat head = {0};
        if (!wte) rc = ls_err(LS_ENOMEM, "profile: out of memory");
        for (size_t i = 0; rc == LS_OK && i < (size_t)V * C; i++) wte[i] = 0.02f * ls_rng_normal(&rng);
        if (rc == LS_OK) rc = ls_qmat_quantize(&head, wte, V, C, 32, 32);
        cJSON *h = cJSON_AddObjectToObject(j, "head"), *hp = cJSON_AddArrayToObject(h, "prefill"),
              *hd = cJSON_AddArrayToObject(h, "decode");
        for (int k = 0; rc == LS_OK && k < o->n_batches; k++) {
            int B = o->batches[k];
            for (int q = -1; q < o->n_seqs; q++) {
                int S = q < 0 ? 1 : o->seqs[q];
                if (S > cfg.n_ctx) continue;
                for (int r = 0; r < o->reps; r++) {
                    double t0 = ls_now();
                    for (int i = 0; i < B * S; i++)
                        memcpy(act + (size_t)i * C, wte + (size_t)tok[i] * C, sizeof(float) * C);
                    for (int i = 0; i < B; i++) { /* LayerNorm of each last token */
                        float *x = act + ((size_t)i * S + (size_t)(S - 1)) * C, mu = 0, var = 0;
                        for (int c = 0; c < C; c++) mu += x[c];
                        mu /= (float)C;
                        for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
                        float rs = 1.0f / sqrtf(var / (float)C + 1e-5f);
                        for (int c = 0; c < C; c++) outb[(size_t)i * C + c] = (x[c] - mu) * rs;
                    }
                    ls_qmat_matmul_rows(&head, outb, B, act, o->nthreads, LS_QIMPL_AUTO);
                    ts[r] = ls_now() - t0;
                }
                cJSON *row = cJSON_CreateObject();
                cJSON_AddNumberToObject(row, "batch", B);
                if (q >= 0) cJSON_AddNumberToObject(row, "seq", S);
                cJSON_AddNumberToObject(row, "seconds", ls_median(ts, o->reps));
                cJSON_AddItemToArray(q < 0 ? hd : hp, row);
            }
        }
        ls_qmat_free(&head);
        free(wte);
    }
    openblas_set_num_threads(blas_saved);
    if (!o->no_link) {
        cJSON *lk = cJSON_AddObjectToObject(j, "link");
        cJSON_AddNumberToObject(lk, "latency_s", lat);
        cJSON_AddNumberToObject(lk, "bandwidth_Bps", bw);
        cJSON_AddStringToObject(lk, "transport", "zeromq ipc (push/pull), as serve uses");
    }
    free(act), free(outb), free(tok), free(seqs), free(ts);
    if (rc) {
        cJSON_Delete(j);
        return rc;
    }
    *out = j;
    return LS_OK;
}
