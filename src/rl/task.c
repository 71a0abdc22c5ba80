/* task.c - RL tasks with verifiable rewards and long-tailed lengths: generators, the JSONL
 * task file, reward functions, GRPO advantages and importance weights. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/rl.h"
#include "rl/internal.h"

static const char *const KIND_NAMES[LS_RL_KIND_COUNT] = {"copy", "reverse", "sort", "add"};
static const char *const KIND_PREFIX[LS_RL_KIND_COUNT] = {"copy:", "rev:", "sort:", "add:"};
enum { ALPHABET = 10 }; /* symbols 'a'..'j' */

ls_rl_gen_opts ls_rl_gen_defaults(void) {
    ls_rl_gen_opts g = {LS_RL_REVERSE, 256, 6.0, 1.0, 1, 40, 1, 0.0};
    return g;
}

ls_model_config ls_rl_model_config(void) {
    ls_model_config c = {.vocab = LS_VOCAB, .n_ctx = 128, .n_layer = 2, .n_head = 4, .d_model = 64, .d_ff = 256};
    return c;
}

int rl_name_index(const char *const *names, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (name && !strcmp(name, names[k])) return k;
    return -1;
}

int ls_rl_kind_parse(const char *name, int *kind) {
    int k = rl_name_index(KIND_NAMES, LS_RL_KIND_COUNT, name);
    if (k >= 0) return *kind = k, LS_OK;
    return ls_err(LS_EINVAL, "unknown task kind '%s' (known: copy, reverse, sort, add)", name ? name : "(null)");
}

const char *ls_rl_kind_name(int kind) { return kind >= 0 && kind < LS_RL_KIND_COUNT ? KIND_NAMES[kind] : "?"; }

double ls_rl_lognormal_expected_max(double mu, double c, int k) {
    double s = sqrt(log(1.0 + c * c));
    if (k < 2) return mu;
    return mu * exp(s * sqrt(2.0 * log((double)k)) - s * s / 2.0);
}

static int cmp_char(const void *a, const void *b) { return *(const char *)a - *(const char *)b; }

static char *dupstr(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* Builds the prompt and answer of one task of input length len. */
static int make_task(int kind, int len, ls_rng *rng, ls_rl_task *t) {
    char in[256], ans[1024], pr[600];
    if (kind == LS_RL_ADD) {
        int a[64], b[64]; /* digits, least significant first */
        for (int i = 0; i < len; i++) {
            a[i] = (int)ls_rng_below(rng, 10);
            b[i] = (int)ls_rng_below(rng, 10);
        }
        if (len > 1 && a[len - 1] == 0) a[len - 1] = 1 + (int)ls_rng_below(rng, 9);
        if (len > 1 && b[len - 1] == 0) b[len - 1] = 1 + (int)ls_rng_below(rng, 9);
        int n = snprintf(pr, sizeof pr, "add:");
        for (int i = len - 1; i >= 0; i--) pr[n++] = (char)('0' + a[i]);
        pr[n++] = '+';
        for (int i = len - 1; i >= 0; i--) pr[n++] = (char)('0' + b[i]);
        pr[n++] = '=';
        pr[n] = 0;
        /* worked steps from the least significant digit: "x+y+c=s;" then "|result" */
        int m = 0, carry = 0, res[65];
        for (int i = 0; i < len; i++) {
            int s = a[i] + b[i] + carry;
            m += snprintf(ans + m, sizeof ans - (size_t)m, "%d+%d+%d=%d;", a[i], b[i], carry, s);
            res[i] = s % 10;
            carry = s / 10;
        }
        int nd = len;
        if (carry) res[nd++] = 1;
        ans[m++] = '|';
        for (int i = nd - 1; i >= 0; i--) ans[m++] = (char)('0' + res[i]);
        ans[m] = 0;
    } else {
        for (int i = 0; i < len; i++) in[i] = (char)('a' + ls_rng_below(rng, ALPHABET));
        in[len] = 0;
        snprintf(pr, sizeof pr, "%s%s=", KIND_PREFIX[kind], in);
        memcpy(ans, in, (size_t)len + 1);
        if (kind == LS_RL_REVERSE)
            for (int i = 0; i < len; i++) ans[i] = in[len - 1 - i];
        else if (kind == LS_RL_SORT)
            qsort(ans, (size_t)len, 1, cmp_char);
    }
    t->kind = kind;
    t->len = len;
    t->prompt = dupstr(pr);
    t->answer = dupstr(ans);
    if (!t->prompt || !t->answer) return ls_err(LS_ENOMEM, "tasks: out of memory");
    return LS_OK;
}

int ls_rl_tasks_generate(const ls_rl_gen_opts *g, ls_rl_task **out, int *n) {
    *out = NULL;
    *n = 0;
    if (g->kind < 0 || g->kind >= LS_RL_KIND_COUNT) return ls_err(LS_EINVAL, "tasks: unknown kind %d", g->kind);
    if (g->n < 1 || g->n > 10000000) return ls_err(LS_EINVAL, "tasks: --n must be in [1, 1e7], got %d", g->n);
    int cap = g->kind == LS_RL_ADD ? 60 : 250;
    if (g->min_len < 1 || g->max_len < g->min_len || g->max_len > cap)
        return ls_err(LS_EINVAL, "tasks: lengths [%d, %d] must satisfy 1 <= min <= max <= %d", g->min_len, g->max_len,
                      cap);
    if (!(g->mean_len > 0) || !(g->cv >= 0) || g->cv > 20)
        return ls_err(LS_EINVAL, "tasks: mean length must be > 0 and CV in [0, 20]");
    if (!(g->demo_noise >= 0) || g->demo_noise > 1) return ls_err(LS_EINVAL, "tasks: demo noise must be in [0, 1]");
    ls_rl_task *t = calloc((size_t)g->n, sizeof *t);
    if (!t) return ls_err(LS_ENOMEM, "tasks: out of memory");
    ls_rng rng;
    ls_rng_seed(&rng, g->seed);
    double s2 = log(1.0 + g->cv * g->cv), mu = log(g->mean_len) - s2 / 2.0;
    for (int i = 0; i < g->n; i++) {
        double x = exp(mu + sqrt(s2) * (double)ls_rng_normal(&rng));
        int len = (int)lround(x);
        len = len < g->min_len ? g->min_len : (len > g->max_len ? g->max_len : len);
        t[i].id = i;
        if (make_task(g->kind, len, &rng, &t[i]) != LS_OK) {
            ls_rl_tasks_free(t, i + 1);
            return LS_ENOMEM;
        }
        if (g->demo_noise > 0) {
            t[i].demo = dupstr(t[i].answer);
            if (!t[i].demo) {
                ls_rl_tasks_free(t, i + 1);
                return ls_err(LS_ENOMEM, "tasks: out of memory");
            }
            size_t L = strlen(t[i].demo);
            if (L > 1 && ls_rng_uniform_f64(&rng) < g->demo_noise) t[i].demo[L - 1] = 0;
        }
    }
    *out = t;
    *n = g->n;
    return LS_OK;
}

void ls_rl_tasks_free(ls_rl_task *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free(t[i].prompt), free(t[i].answer), free(t[i].demo);
    free(t);
}

int ls_rl_tasks_write(const char *path, const ls_rl_task *t, int n) {
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, path));
    FILE *f = af.fp;
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o) {
            ls_atomic_abort(&af);
            return ls_err(LS_ENOMEM, "tasks: out of memory");
        }
        cJSON_AddNumberToObject(o, "id", (double)t[i].id);
        if (t[i].kind >= 0) cJSON_AddStringToObject(o, "kind", ls_rl_kind_name(t[i].kind)); /* -1: none given */
        cJSON_AddStringToObject(o, "prompt", t[i].prompt);
        cJSON_AddStringToObject(o, "answer", t[i].answer);
        cJSON_AddNumberToObject(o, "len", t[i].len);
        if (t[i].demo) cJSON_AddStringToObject(o, "demo", t[i].demo);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!s) {
            ls_atomic_abort(&af);
            return ls_err(LS_ENOMEM, "tasks: out of memory");
        }
        fprintf(f, "%s\n", s);
        free(s);
    }
    if (ferror(f)) {
        ls_atomic_abort(&af);
        return ls_err(LS_EIO, "%s: write failed", path);
    }
    return ls_atomic_commit(&af);
}

static int printable(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 32 || (unsigned char)*s > 126) return 0;
    return 1;
}

static int parse_line(const char *path, int lineno, const char *line, size_t len, ls_rl_task *t) {
    char where[1040];
    snprintf(where, sizeof where, "%.1000s:%d", path, lineno);
    cJSON *j;
    LS_TRY(ls_json_parse(line, len, where, &j)); /* also refuses a \u0000 escape */
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return ls_err(LS_EFORMAT, "%s: not a JSON object", where);
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt"), *a = cJSON_GetObjectItemCaseSensitive(j, "answer");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind"), *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *ln = cJSON_GetObjectItemCaseSensitive(j, "len"), *dm = cJSON_GetObjectItemCaseSensitive(j, "demo");
    int rc = LS_OK;
    if (!cJSON_IsString(p) || !cJSON_IsString(a))
        rc = ls_err(LS_EFORMAT, "%s:%d: needs string fields \"prompt\" and \"answer\"", path, lineno);
    else if (!*p->valuestring || !*a->valuestring || !printable(p->valuestring) || !printable(a->valuestring))
        rc = ls_err(LS_EFORMAT, "%s:%d: prompt and answer must be non-empty printable ASCII", path, lineno);
    else if (strlen(p->valuestring) + strlen(a->valuestring) > 4000)
        rc = ls_err(LS_EFORMAT, "%s:%d: prompt and answer longer than 4000 bytes", path, lineno);
    else if (k && (!cJSON_IsString(k) || ls_rl_kind_parse(k->valuestring, &t->kind) != LS_OK))
        rc = ls_err(LS_EFORMAT, "%s:%d: unknown \"kind\" (known: copy, reverse, sort, add)", path, lineno);
    else if (dm && (!cJSON_IsString(dm) || !printable(dm->valuestring)))
        rc = ls_err(LS_EFORMAT, "%s:%d: \"demo\" must be printable ASCII", path, lineno);
    else if ((id && !cJSON_IsNumber(id)) || (ln && !cJSON_IsNumber(ln)))
        rc = ls_err(LS_EFORMAT, "%s:%d: \"id\" and \"len\" must be numbers", path, lineno);
    else if (id && !ls_json_as_i64(id, -LS_JSON_INT_MAX, LS_JSON_INT_MAX, &t->id))
        rc = ls_err(LS_EFORMAT, "%s:%d: \"id\" must be an integer in [-2^53, 2^53]", path, lineno);
    if (rc == LS_OK) {
        if (!k) t->kind = -1;
        if (!id) t->id = lineno - 1;
        t->len = ln ? ln->valueint : (int)strlen(a->valuestring);
        t->prompt = dupstr(p->valuestring);
        t->answer = dupstr(a->valuestring);
        t->demo = dm ? dupstr(dm->valuestring) : NULL;
        if (!t->prompt || !t->answer || (dm && !t->demo)) rc = ls_err(LS_ENOMEM, "tasks: out of memory");
    }
    cJSON_Delete(j);
    return rc;
}

int ls_rl_held_tail(int n, int eval_n) { return eval_n > 0 && n - eval_n > eval_n ? eval_n : 0; } /* no 2·eval_n */

int ls_rl_tasks_read(const char *path, ls_rl_task **out, int *n) {
    *out = NULL;
    *n = 0;
    char *buf;
    size_t len;
    LS_TRY(ls_file_read(path, &buf, &len));
    int cap = 64, cnt = 0, rc = LS_OK, lineno = 0;
    ls_rl_task *t = calloc((size_t)cap, sizeof *t);
    if (!t) rc = ls_err(LS_ENOMEM, "tasks: out of memory");
    for (size_t i = 0; rc == LS_OK && i < len;) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        lineno++;
        size_t s = i;
        while (s < e && (buf[s] == ' ' || buf[s] == '\t' || buf[s] == '\r')) s++;
        if (s < e) {
            if (cnt == cap) {
                ls_rl_task *nt = realloc(t, sizeof *t * (size_t)cap * 2);
                if (!nt) {
                    rc = ls_err(LS_ENOMEM, "tasks: out of memory");
                    break;
                }
                memset(nt + cap, 0, sizeof *t * (size_t)cap);
                t = nt, cap *= 2;
            }
            rc = parse_line(path, lineno, buf + s, e - s, &t[cnt]);
            cnt++;
        }
        i = e + 1;
    }
    free(buf);
    if (rc == LS_OK && cnt == 0) rc = ls_err(LS_EFORMAT, "%s: no tasks (empty file)", path);
    if (rc != LS_OK) {
        ls_rl_tasks_free(t, cnt);
        return rc;
    }
    *out = t;
    *n = cnt;
    return LS_OK;
}

double ls_rl_reward(const ls_rl_task *t, const char *resp, size_t len) {
    size_t n = strlen(t->answer);
    if (len == n && memcmp(resp, t->answer, n) == 0) return 1.0;
    if (t->kind == LS_RL_ADD) {
        const char *bar = strrchr(t->answer, '|');
        const char *rb = NULL; /* the last '|' of the response starts its final number */
        for (size_t i = len; i-- > 0;)
            if (resp[i] == '|') {
                rb = resp + i;
                break;
            }
        if (bar && rb) {
            size_t rn = (size_t)(resp + len - rb - 1), an = strlen(bar + 1);
            if (rn == an && memcmp(rb + 1, bar + 1, an) == 0) return 1.0;
        }
    }
    size_t match = 0;
    for (size_t i = 0; i < n && i < len; i++) match += resp[i] == t->answer[i];
    return 0.5 * (double)match / (double)(len > n ? len : n);
}

void ls_rl_group_advantages(const float *reward, int n, int norm_std, float *adv) {
    if (n <= 0) return;
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < n; i++) mean += reward[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (reward[i] - mean) * (reward[i] - mean);
    double sd = n > 1 ? sqrt(var / (n - 1)) : 0.0;
    for (int i = 0; i < n; i++) {
        double a = reward[i] - mean;
        if (norm_std) a = sd > 1e-9 ? a / (sd + 1e-6) : 0.0;
        adv[i] = (float)a;
    }
}

float ls_rl_is_weight(float logp_prox, float logp_behav, float cap) {
    float w = expf(logp_prox - logp_behav);
    return cap > 0.0f && w > cap ? cap : w;
}
