/* httpc.c - the HTTP load generator for the demo, benchmarks and plan validation:
 * concurrent completion requests through the library's HTTP client (http.h). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/serve.h"

/* ---------------------------------------------------------------- load generator */

typedef struct {
    const char *host;
    int port, max_tokens, id, n_req;
    const char *const *prompts;
    int n_prompts;
    int ok, tokens;
    double lat_sum, tpot_sum;
    int tpot_n;
    char err[256];
} load_worker;

static void *load_main(void *arg) {
    load_worker *w = arg;
    for (int k = 0; k < w->n_req; k++) {
        const char *p = w->prompts[(w->id + k) % w->n_prompts];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "prompt", p);
        cJSON_AddNumberToObject(j, "max_tokens", w->max_tokens);
        cJSON_AddNumberToObject(j, "temperature", 0);
        char *body = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        int st = 0;
        char *resp = NULL;
        double t0 = ls_now();
        int rc = body ? ls_http_request(w->host, w->port, "POST", "/v1/completions", body, 120.0, &st, &resp) : LS_ENOMEM;
        double dt = ls_now() - t0;
        free(body);
        cJSON *r = rc == LS_OK && st == 200 ? cJSON_Parse(resp) : NULL;
        cJSON *u = r ? cJSON_GetObjectItem(r, "usage") : NULL;
        cJSON *ct = u ? cJSON_GetObjectItem(u, "completion_tokens") : NULL;
        if (cJSON_IsNumber(ct)) {
            w->ok++;
            w->tokens += ct->valueint;
            w->lat_sum += dt;
            if (ct->valueint > 0) {
                w->tpot_sum += dt / ct->valueint;
                w->tpot_n++;
            }
        } else if (!w->err[0]) {
            snprintf(w->err, sizeof w->err, "status %d: %.200s", st, rc == LS_OK ? (resp ? resp : "") : ls_errmsg());
        }
        cJSON_Delete(r);
        free(resp);
    }
    return NULL;
}

int ls_http_load(const char *host, int port, const char *const *prompts, int n_prompts, int concurrency, int n_requests,
                 int max_tokens, ls_load_result *res) {
    memset(res, 0, sizeof *res);
    if (concurrency < 1 || n_requests < concurrency || n_prompts < 1)
        return ls_err(LS_EINVAL, "load: need 1 <= concurrency <= requests and prompts");
    load_worker *w = calloc((size_t)concurrency, sizeof *w);
    pthread_t *th = calloc((size_t)concurrency, sizeof *th);
    if (!w || !th) {
        free(w), free(th);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    double t0 = ls_now();
    for (int i = 0; i < concurrency; i++) {
        w[i] = (load_worker){.host = host, .port = port, .max_tokens = max_tokens, .id = i, .prompts = prompts,
                             .n_prompts = n_prompts, .n_req = n_requests / concurrency + (i < n_requests % concurrency)};
        pthread_create(&th[i], NULL, load_main, &w[i]);
    }
    for (int i = 0; i < concurrency; i++) pthread_join(th[i], NULL);
    res->seconds = ls_now() - t0;
    int tpot_n = 0;
    const char *err = NULL;
    for (int i = 0; i < concurrency; i++) {
        res->ok += w[i].ok;
        res->tokens += w[i].tokens;
        res->mean_latency_s += w[i].lat_sum;
        res->mean_tpot_s += w[i].tpot_sum;
        tpot_n += w[i].tpot_n;
        if (w[i].err[0] && !err) err = w[i].err;
    }
    res->failed = n_requests - res->ok;
    if (res->ok) res->mean_latency_s /= res->ok;
    if (tpot_n) res->mean_tpot_s /= tpot_n;
    res->tokens_per_s = res->seconds > 0 ? res->tokens / res->seconds : 0;
    int rc = res->failed ? ls_err(LS_EPEER, "load: %d of %d requests failed (first: %s)", res->failed, n_requests, err ? err : "?")
                         : LS_OK;
    free(w), free(th);
    return rc;
}

int ls_http_complete(const char *host, int port, const char *prompt, int max_tokens, double timeout_s, char *text,
                     size_t n_text, int *tokens) {
    int st;
    char *resp = NULL, body[256];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0}", prompt, max_tokens);
    int rc = ls_http_request(host, port, "POST", "/v1/completions", body, timeout_s, &st, &resp);
    cJSON *j = rc == LS_OK ? cJSON_Parse(resp) : NULL;
    cJSON *ch = j ? cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0) : NULL;
    cJSON *tx = ch ? cJSON_GetObjectItem(ch, "text") : NULL, *tk = ch ? cJSON_GetObjectItem(ch, "tokens") : NULL;
    if (cJSON_IsString(tx))
        snprintf(text, n_text, "%s", tx->valuestring);
    else if (rc == LS_OK)
        rc = ls_err(LS_EPEER, "completion failed: %.200s", resp ? resp : "");
    for (int i = 0; tk && i < cJSON_GetArraySize(tk) && i < max_tokens; i++)
        tokens[i] = cJSON_GetArrayItem(tk, i)->valueint;
    cJSON_Delete(j);
    free(resp);
    return rc;
}
