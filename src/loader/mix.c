/* mix.c - the loader's mix config: sources, weights, curriculum schedule, batch shape. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/loader.h"

const char *ls_balance_algo_name(ls_balance_algo a) {
    switch (a) {
    case LS_BALANCE_NAIVE:
        return "naive";
    case LS_BALANCE_LPT:
        return "lpt";
    case LS_BALANCE_KK:
        return "kk";
    }
    return "?";
}

int ls_balance_algo_parse(const char *s, ls_balance_algo *out) {
    if (!strcmp(s, "naive"))
        *out = LS_BALANCE_NAIVE;
    else if (!strcmp(s, "lpt"))
        *out = LS_BALANCE_LPT;
    else if (!strcmp(s, "kk"))
        *out = LS_BALANCE_KK;
    else
        return ls_err(LS_EINVAL, "unknown balancing algorithm '%s' (naive, lpt, kk)", s);
    return LS_OK;
}

int ls_loader_weights_check(const double *w, int n, const char *what) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(w[i]) || isinf(w[i])) return ls_err(LS_EINVAL, "%s: weight %d is not finite", what, i);
        if (w[i] < 0) return ls_err(LS_EINVAL, "%s: weight %d is negative (%g)", what, i, w[i]);
        sum += w[i];
    }
    if (!(sum > 0)) return ls_err(LS_EINVAL, "%s: weights are all zero", what);
    return LS_OK;
}

int ls_loader_mix_find(const ls_loader_mix *mix, const char *name) {
    for (int i = 0; i < mix->n_sources; i++)
        if (!strcmp(mix->src[i].name, name)) return i;
    return -1;
}

void ls_loader_mix_free(ls_loader_mix *mix) {
    for (int i = 0; i < mix->n_sources; i++) {
        free(mix->src[i].path);
        free(mix->src[i].field);
    }
    for (int i = 0; i < mix->n_points; i++) free(mix->points[i].w);
    free(mix->points);
    memset(mix, 0, sizeof *mix);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static char *resolve_path(const char *base, const char *p) {
    if (p[0] == '/' || !base || !*base) return dup_str(p);
    size_t n = strlen(base) + strlen(p) + 2;
    char *d = malloc(n);
    if (d) snprintf(d, n, "%s/%s", base, p);
    return d;
}

/* A JSON number that must be finite (cJSON parses NaN only as an error, but "1e999" is inf). */
static int get_weight(const cJSON *v, const char *what, double *out) {
    if (!cJSON_IsNumber(v)) return ls_err(LS_EINVAL, "%s must be a number", what);
    *out = v->valuedouble;
    return LS_OK;
}

static int parse_source(const cJSON *js, const char *base, int idx, ls_loader_source_spec *s) {
    const char *name, *type, *path, *field, *split;
    if (!cJSON_IsObject(js)) return ls_err(LS_EINVAL, "sources[%d] must be an object", idx);
    LS_TRY(ls_json_get_string(js, "name", NULL, &name));
    if (!name || !*name) return ls_err(LS_EINVAL, "sources[%d]: missing \"name\"", idx);
    if (strlen(name) >= LS_LOADER_NAME_MAX) return ls_err(LS_EINVAL, "sources[%d]: name too long", idx);
    snprintf(s->name, sizeof s->name, "%s", name);
    if (ls_json_get_string(js, "type", "text", &type) || ls_json_get_string(js, "path", NULL, &path) ||
        ls_json_get_string(js, "field", "text", &field) || ls_json_get_string(js, "split", "file", &split))
        return ls_err_wrap(LS_EINVAL, "source '%s'", name);
    if (!strcmp(type, "text"))
        s->type = LS_SRC_TEXT;
    else if (!strcmp(type, "jsonl"))
        s->type = LS_SRC_JSONL;
    else if (!strcmp(type, "tokens"))
        s->type = LS_SRC_TOKENS;
    else
        return ls_err(LS_EINVAL, "source '%s': unknown type '%s' (text, jsonl, tokens)", name, type);
    if (!strcmp(split, "file"))
        s->split = LS_SPLIT_FILE;
    else if (!strcmp(split, "blank"))
        s->split = LS_SPLIT_BLANK;
    else
        return ls_err(LS_EINVAL, "source '%s': unknown split '%s' (file, blank)", name, split);
    if (!path || !*path) return ls_err(LS_EINVAL, "source '%s': missing \"path\"", name);
    s->path = resolve_path(base, path);
    s->field = dup_str(field);
    if (!s->path || !s->field) return ls_err(LS_ENOMEM, "out of memory");
    LS_TRY(ls_json_get_double(js, "preprocess_us", 0, &s->preprocess_us));
    if (!(s->preprocess_us >= 0 && s->preprocess_us <= 1e7))
        return ls_err(LS_EINVAL, "source '%s': preprocess_us must be in [0, 1e7]", name);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(js, "weight");
    s->weight = 1.0;
    if (w) {
        char what[96];
        snprintf(what, sizeof what, "source '%s': \"weight\"", name);
        LS_TRY(get_weight(w, what, &s->weight));
        if (!(s->weight >= 0) || isinf(s->weight))
            return ls_err(LS_EINVAL, "source '%s': weight must be finite and >= 0, got %g", name, s->weight);
    }
    return LS_OK;
}

static int cmp_point(const void *a, const void *b) {
    int64_t x = ((const ls_loader_sched_point *)a)->step, y = ((const ls_loader_sched_point *)b)->step;
    return (x > y) - (x < y);
}

static int parse_schedule(const cJSON *js, ls_loader_mix *mix) {
    int n = cJSON_GetArraySize(js);
    if (!cJSON_IsArray(js)) return ls_err(LS_EINVAL, "\"schedule\" must be an array");
    if (n == 0) return LS_OK;
    mix->points = calloc((size_t)n, sizeof *mix->points);
    if (!mix->points) return ls_err(LS_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *p = cJSON_GetArrayItem(js, i);
        ls_loader_sched_point *pt = &mix->points[i];
        mix->n_points = i + 1;
        pt->w = calloc((size_t)mix->n_sources, sizeof *pt->w);
        if (!pt->w) return ls_err(LS_ENOMEM, "out of memory");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "step");
        if (!ls_json_as_i64(st, 0, LS_JSON_INT_MAX, &pt->step))
            return ls_err(LS_EINVAL, "schedule[%d]: \"step\" must be an integer in [0, 2^53]", i);
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(p, "weights");
        if (!cJSON_IsObject(w)) return ls_err(LS_EINVAL, "schedule[%d]: \"weights\" must be an object", i);
        const cJSON *e;
        cJSON_ArrayForEach(e, w) {
            int s = ls_loader_mix_find(mix, e->string);
            if (s < 0) return ls_err(LS_EINVAL, "schedule[%d]: unknown source '%s'", i, e->string);
            char what[96];
            snprintf(what, sizeof what, "schedule[%d]: weight of '%s'", i, e->string);
            LS_TRY(get_weight(e, what, &pt->w[s]));
        }
        char what[48];
        snprintf(what, sizeof what, "schedule[%d] (step %lld)", i, (long long)pt->step);
        LS_TRY(ls_loader_weights_check(pt->w, mix->n_sources, what));
    }
    qsort(mix->points, (size_t)n, sizeof *mix->points, cmp_point);
    for (int i = 1; i < n; i++)
        if (mix->points[i].step == mix->points[i - 1].step)
            return ls_err(LS_EINVAL, "schedule: two points at step %lld", (long long)mix->points[i].step);
    return LS_OK;
}

static int parse_mix(const cJSON *j, const char *base, ls_loader_mix *mix) {
    if (!cJSON_IsObject(j)) return ls_err(LS_EINVAL, "mix config must be a JSON object");
    double seed = 1234;
    const char *balance;
    LS_TRY(ls_json_get_int(j, "n_ctx", 512, &mix->n_ctx));
    /* validated before 4 * n_ctx below can overflow */
    if (mix->n_ctx < 2 || mix->n_ctx > 65536)
        return ls_err(LS_EINVAL, "n_ctx must be in [2, 65536], got %d", mix->n_ctx);
    LS_TRY(ls_json_get_int(j, "tokens_per_rank", 4 * mix->n_ctx, &mix->tokens_per_rank));
    LS_TRY(ls_json_get_int(j, "micro_batches", 1, &mix->micro_batches));
    LS_TRY(ls_json_get_double(j, "seed", 1234, &seed));
    LS_TRY(ls_json_get_string(j, "balance", "kk", &balance));
    LS_TRY(ls_balance_algo_parse(balance, &mix->balance));
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(j, "strict");
    mix->strict = cJSON_IsTrue(strict);
    if (mix->tokens_per_rank < 1 || mix->tokens_per_rank > (1 << 26))
        return ls_err(LS_EINVAL, "tokens_per_rank must be in [1, 2^26], got %d", mix->tokens_per_rank);
    if (mix->micro_batches < 1 || mix->micro_batches > 1024)
        return ls_err(LS_EINVAL, "micro_batches must be in [1, 1024], got %d", mix->micro_batches);
    int64_t seed_i;
    if (!ls_f64_as_i64(seed, 0, LS_JSON_INT_MAX, &seed_i))
        return ls_err(LS_EINVAL, "seed must be an integer in [0, 2^53]");
    mix->seed = (uint64_t)seed_i;
    /* Defaults a = 1, b = 950: the "small" GPT's forward+backward time per row measured
     * against row length (bench_loader --calibrate-only: t = 1.29e-3·L + 1.36e-6·L² s,
     * b/a = 950, docs/loader.md). The FLOP count alone gives b/a = 6·d_model = 1536 (as
     * verl's 24576·L + L² = 6·4096·L + L² for a 7B model, docs/references.md §2); attention
     * runs below GEMM speed, so measured pairs cost more and b/a is lower. */
    mix->cost_a = 1.0;
    mix->cost_b = 950.0;
    const cJSON *cost = cJSON_GetObjectItemCaseSensitive(j, "cost");
    if (cost) {
        LS_TRY(ls_json_get_double(cost, "a", mix->cost_a, &mix->cost_a));
        LS_TRY(ls_json_get_double(cost, "b", mix->cost_b, &mix->cost_b));
        if (!(mix->cost_a >= 0) || !(mix->cost_b >= 0) || isinf(mix->cost_a) || isinf(mix->cost_b) ||
            mix->cost_a + mix->cost_b <= 0)
            return ls_err(LS_EINVAL, "cost: a and b must be finite, >= 0 and not both 0");
    }
    const cJSON *srcs = cJSON_GetObjectItemCaseSensitive(j, "sources");
    if (!cJSON_IsArray(srcs) || cJSON_GetArraySize(srcs) == 0)
        return ls_err(LS_EINVAL, "\"sources\" must be a non-empty array");
    int n = cJSON_GetArraySize(srcs);
    if (n > LS_LOADER_MAX_SOURCES) return ls_err(LS_EINVAL, "too many sources (%d > %d)", n, LS_LOADER_MAX_SOURCES);
    for (int i = 0; i < n; i++) {
        mix->n_sources = i + 1;
        LS_TRY(parse_source(cJSON_GetArrayItem(srcs, i), base, i, &mix->src[i]));
        for (int k = 0; k < i; k++)
            if (!strcmp(mix->src[k].name, mix->src[i].name))
                return ls_err(LS_EINVAL, "two sources named '%s'", mix->src[i].name);
    }
    const cJSON *sched = cJSON_GetObjectItemCaseSensitive(j, "schedule");
    if (sched) LS_TRY(parse_schedule(sched, mix));
    if (mix->n_points == 0) {
        double w[LS_LOADER_MAX_SOURCES];
        for (int i = 0; i < n; i++) w[i] = mix->src[i].weight;
        LS_TRY(ls_loader_weights_check(w, n, "source weights"));
    }
    return LS_OK;
}

int ls_loader_mix_parse(const char *json, const char *base_dir, ls_loader_mix *mix) {
    memset(mix, 0, sizeof *mix);
    cJSON *j;
    LS_TRY(ls_json_parse(json, strlen(json), "mix config", &j));
    int rc = parse_mix(j, base_dir, mix);
    cJSON_Delete(j);
    if (rc < 0) ls_loader_mix_free(mix);
    return rc;
}

int ls_loader_mix_load(const char *path, ls_loader_mix *mix) {
    char *text;
    size_t len;
    memset(mix, 0, sizeof *mix);
    LS_TRY(ls_file_read(path, &text, &len));
    char *base = dup_str(path);
    if (!base) {
        free(text);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    char *slash = strrchr(base, '/');
    if (slash)
        *slash = '\0';
    else
        base[0] = '\0';
    cJSON *j;
    int rc = ls_json_parse(text, len, path, &j);
    if (rc == LS_OK) {
        rc = parse_mix(j, base, mix);
        cJSON_Delete(j);
        if (rc < 0) {
            ls_err_wrap(rc, "%s", path);
            ls_loader_mix_free(mix);
        }
    }
    free(base);
    free(text);
    return rc;
}

void ls_loader_mix_weights_at(const ls_loader_mix *mix, int64_t step, double *w) {
    int n = mix->n_sources;
    if (mix->n_points == 0) {
        for (int i = 0; i < n; i++) w[i] = mix->src[i].weight;
    } else if (step <= mix->points[0].step) {
        memcpy(w, mix->points[0].w, (size_t)n * sizeof *w);
    } else if (step >= mix->points[mix->n_points - 1].step) {
        memcpy(w, mix->points[mix->n_points - 1].w, (size_t)n * sizeof *w);
    } else {
        int k = 0;
        while (mix->points[k + 1].step <= step) k++;
        const ls_loader_sched_point *p = &mix->points[k], *q = &mix->points[k + 1];
        double t = (double)(step - p->step) / (double)(q->step - p->step);
        /* Interpolate the normalised weights so the curriculum moves shares linearly. */
        double sp = 0, sq = 0;
        for (int i = 0; i < n; i++) sp += p->w[i], sq += q->w[i];
        for (int i = 0; i < n; i++) w[i] = (1 - t) * p->w[i] / sp + t * q->w[i] / sq;
    }
    double s = 0;
    for (int i = 0; i < n; i++) s += w[i];
    for (int i = 0; i < n; i++) w[i] /= s;
}

int ls_loader_mix_single(const char *type, const char *path, const char *field, const char *split, ls_loader_mix *mix) {
    char js[4096];
    cJSON *o = cJSON_CreateObject(), *srcs = cJSON_AddArrayToObject(o, "sources"), *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "name", "input");
    cJSON_AddStringToObject(s, "type", type);
    cJSON_AddStringToObject(s, "path", path);
    cJSON_AddStringToObject(s, "field", field);
    cJSON_AddStringToObject(s, "split", split);
    cJSON_AddItemToArray(srcs, s);
    if (!cJSON_PrintPreallocated(o, js, sizeof js, 0)) js[0] = 0;
    cJSON_Delete(o);
    return ls_loader_mix_parse(js, NULL, mix);
}
