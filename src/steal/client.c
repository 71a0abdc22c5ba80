/* client.c - the attacker's client of a victim endpoint: queries over the library's HTTP
 * client (http.h), rate-limit retries, strict checks of the victim's answers (status,
 * JSON, class count). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/http.h"
#include "llmsys/steal.h"

struct ls_steal_client {
    char host[300], port[16], path[512];
    char key[256];
    double timeout;
    int d, k;
    int64_t requests, inputs;
    double max_wait; /* total seconds we accept to wait on 429 Retry-After */
};

int ls_steal_client_init(const char *url, const char *api_key, double timeout_s, int d, int k, ls_steal_client **out) {
    *out = NULL;
    if (strncmp(url, "http://", 7)) return ls_err(LS_EINVAL, "target '%s': only http://host:port/path URLs", url);
    ls_steal_client *c = calloc(1, sizeof *c);
    if (!c) return ls_err(LS_ENOMEM, "client: out of memory");
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    char hostport[300];
    if (hl == 0 || hl >= sizeof hostport) {
        free(c);
        return ls_err(LS_EINVAL, "target '%s': bad host", url);
    }
    memcpy(hostport, h, hl);
    hostport[hl] = '\0';
    /* an IPv6 host is in brackets ("[::1]:8080"), which the resolver does not take */
    char *host = hostport, *colon = strrchr(hostport, ':');
    if (hostport[0] == '[') {
        char *close = strchr(hostport, ']');
        unsigned char a[16];
        if (close) *close = '\0';
        if (!close || (close[1] && close[1] != ':') || !strchr(hostport, ':') || !ls_ip_parse(hostport + 1, a)) {
            free(c);
            return ls_err(LS_EINVAL, "target '%s': bad host (an IPv6 address goes in brackets: [::1])", url);
        }
        host = hostport + 1;
        colon = close[1] ? close + 1 : NULL;
    } else if (colon && strchr(hostport, ':') != colon) {
        /* "::1:8080" is itself an IPv6 address: which part is the port only brackets say */
        free(c);
        return ls_err(LS_EINVAL, "target '%s': bad host (an IPv6 address goes in brackets: http://[::1]:8080/)", url);
    }
    if (colon) {
        *colon = '\0';
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p <= 0 || p > 65535) {
            free(c);
            return ls_err(LS_EINVAL, "target '%s': bad port", url);
        }
        snprintf(c->port, sizeof c->port, "%ld", p);
    } else {
        snprintf(c->port, sizeof c->port, "80");
    }
    snprintf(c->host, sizeof c->host, "%s", host);
    snprintf(c->path, sizeof c->path, "%s", slash && slash[1] ? slash : "/predict");
    if (api_key) snprintf(c->key, sizeof c->key, "%s", api_key);
    c->timeout = timeout_s > 0 ? timeout_s : 30;
    c->d = d;
    c->k = k;
    c->max_wait = 120;
    *out = c;
    return LS_OK;
}

void ls_steal_client_free(ls_steal_client *c) { free(c); }

int ls_steal_target_check(const char *url) {
    ls_steal_client *c;
    LS_TRY(ls_steal_client_init(url, NULL, 1, 1, 2, &c));
    ls_steal_client_free(c);
    return LS_OK;
}

void ls_steal_client_counts(const ls_steal_client *c, int64_t *requests, int64_t *inputs) {
    if (requests) *requests = c->requests;
    if (inputs) *inputs = c->inputs;
}

/* One HTTP exchange through the library's client, with the API key header when set;
 * *reply (malloc'd, NUL-terminated body), *status, *retry_after. */
static int exchange(ls_steal_client *c, const char *method, const char *path, const char *body, size_t blen,
                    int *status, char **reply, double *retry_after) {
    char hdr[300] = "";
    if (c->key[0]) snprintf(hdr, sizeof hdr, "X-API-Key: %s\r\n", c->key);
    ls_http_reply r;
    *reply = NULL;
    *retry_after = 0;
    LS_TRY(ls_http_exchange(c->host, c->port, method, path, hdr, body, blen, c->timeout, &r));
    *status = r.status;
    *reply = r.body;
    *retry_after = r.retry_after;
    return LS_OK;
}

int ls_steal_client_get(ls_steal_client *c, const char *path, int *status, char **body) {
    double ra;
    return exchange(c, "GET", path, "", 0, status, body, &ra);
}

int ls_steal_client_query(ls_steal_client *c, const float *x, int n, int32_t *labels, float *proba, int *got_proba) {
    if (got_proba) *got_proba = 0;
    if (n <= 0) return LS_OK;
    /* Request body: {"inputs":[[...],...]} with 6 significant digits. */
    size_t cap = (size_t)n * c->d * 14 + 64, len = 0;
    char *body = malloc(cap);
    if (!body) return ls_err(LS_ENOMEM, "client: out of memory");
    len += (size_t)snprintf(body, cap, "{\"inputs\":[");
    for (int i = 0; i < n; i++) {
        body[len++] = i ? ',' : '[';
        if (i) body[len++] = '[';
        for (int j = 0; j < c->d; j++) {
            float v = x[(size_t)i * c->d + j];
            if (v == 0.0f) {
                if (j) body[len++] = ',';
                body[len++] = '0';
            } else {
                len += (size_t)snprintf(body + len, cap - len, "%s%.6g", j ? "," : "", v);
            }
        }
        body[len++] = ']';
    }
    len += (size_t)snprintf(body + len, cap - len, "]}");
    int status = 0, rc;
    char *reply = NULL;
    double waited = 0;
    for (;;) {
        double ra;
        rc = exchange(c, "POST", c->path, body, len, &status, &reply, &ra);
        if (rc) break;
        c->requests++;
        if (status == 429 && waited < c->max_wait) {
            /* Rate limited: honour Retry-After (bounded) and try again. */
            double w = ra > 0 ? ra : 1;
            if (w > 10) w = 10;
            free(reply);
            reply = NULL;
            ls_sleep_ms((int)(w * 1000));
            waited += w;
            continue;
        }
        break;
    }
    free(body);
    if (rc) return rc;
    cJSON *j = cJSON_Parse(reply);
    if (status != 200) {
        const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
        rc = ls_err(status == 403 || status == 429 ? LS_EBUSY : LS_EPEER, "target answered HTTP %d: %s", status,
                    cJSON_IsString(e) ? e->valuestring : "(no JSON error message)");
        cJSON_Delete(j);
        free(reply);
        return rc;
    }
    if (!j) {
        rc = ls_err(LS_EFORMAT, "target answered with non-JSON (%.40s...)", reply);
        free(reply);
        return rc;
    }
    free(reply);
    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(j, "labels");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "probs");
    if (!cJSON_IsArray(lab) || cJSON_GetArraySize(lab) != n) {
        cJSON_Delete(j);
        return ls_err(LS_EFORMAT, "target reply lacks \"labels\" for %d inputs", n);
    }
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, lab) {
        if (!cJSON_IsNumber(v) || v->valueint < 0 || v->valueint >= c->k) {
            double bad = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
            cJSON_Delete(j);
            return ls_err(LS_EFORMAT, "target returned label %g, outside the %d declared classes", bad, c->k);
        }
        labels[i++] = v->valueint;
    }
    if (cJSON_IsArray(pr)) {
        if (cJSON_GetArraySize(pr) != n) {
            cJSON_Delete(j);
            return ls_err(LS_EFORMAT, "target returned %d probability rows for %d inputs", cJSON_GetArraySize(pr), n);
        }
        i = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, pr) {
            if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != c->k) {
                int got = cJSON_IsArray(row) ? cJSON_GetArraySize(row) : -1;
                cJSON_Delete(j);
                return ls_err(LS_EFORMAT, "target returned %d class probabilities, expected %d classes", got, c->k);
            }
            int jx = 0;
            cJSON_ArrayForEach(v, row) {
                double pv = cJSON_IsNumber(v) ? v->valuedouble : NAN;
                if (!(pv >= 0 && pv <= 1.0001)) {
                    cJSON_Delete(j);
                    return ls_err(LS_EFORMAT, "target returned an invalid probability");
                }
                if (proba) proba[(size_t)i * c->k + jx] = (float)pv;
                jx++;
            }
            i++;
        }
        if (got_proba && proba) *got_proba = 1;
    }
    cJSON_Delete(j);
    c->inputs += n;
    return LS_OK;
}

static int oracle_query(void *ctx, const float *x, int n, int32_t *labels, float *proba, int *got_proba) {
    return ls_steal_client_query(ctx, x, n, labels, proba, got_proba);
}

ls_steal_oracle ls_steal_client_oracle(ls_steal_client *c) {
    ls_steal_oracle o = {c, oracle_query};
    return o;
}
