/* catalog.c - the planner's data files: GPU and model catalogs, cluster files, and model
 * configs read from llmsys checkpoints. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "llmsys/model.h"
#include "llmsys/plan.h"

#ifndef LLMSYS_SOURCE_DIR
#define LLMSYS_SOURCE_DIR "."
#endif

enum { MAX_ALIAS = 4 };

typedef struct {
    ls_plan_gpu g;
    char alias[MAX_ALIAS][LS_PLAN_NAME];
    int n_alias;
} gpu_entry;

typedef struct {
    ls_plan_arch a;
    char alias[MAX_ALIAS][LS_PLAN_NAME];
    int n_alias;
} model_entry;

struct ls_plan_catalog {
    char dir[1024];
    gpu_entry *gpus;
    int n_gpu;
    model_entry *models;
    int n_model;
};

static void copy_name(char *dst, const char *src) {
    size_t n = strlen(src);
    if (n >= LS_PLAN_NAME) n = LS_PLAN_NAME - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* Number field that must be finite and within [lo, hi]. */
static int get_num(const cJSON *o, const char *key, double lo, double hi, double def, double *out,
                   const char *path, const char *what) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (isnan(def)) return ls_err(LS_EFORMAT, "%s: %s: missing \"%s\"", path, what, key);
        *out = def;
        return LS_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return ls_err(LS_EFORMAT, "%s: %s: \"%s\" must be a number in [%g, %g]", path, what, key, lo, hi);
    *out = v->valuedouble;
    return LS_OK;
}

static int get_int(const cJSON *o, const char *key, int lo, int hi, int *out, const char *path,
                   const char *what) {
    double d;
    LS_TRY(get_num(o, key, lo, hi, NAN, &d, path, what));
    if (d != floor(d)) return ls_err(LS_EFORMAT, "%s: %s: \"%s\" must be an integer", path, what, key);
    *out = (int)d;
    return LS_OK;
}

static int get_bool(const cJSON *o, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = v && cJSON_IsTrue(v);
    return LS_OK;
}

static int read_aliases(const cJSON *o, char alias[][LS_PLAN_NAME], int *n) {
    *n = 0;
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(o, "aliases");
    const cJSON *e;
    cJSON_ArrayForEach(e, al) {
        if (cJSON_IsString(e) && *n < MAX_ALIAS) copy_name(alias[(*n)++], e->valuestring);
    }
    return LS_OK;
}

/* Reads <dir>/<what>.json (format "llmsys-<what>", path receives its name) and its array
 * "<what>", and allocates *items with room for every entry. *j is the document to delete
 * (NULL when it could not be read). */
static int catalog_array(ls_plan_catalog *c, const char *what, char path[1100], cJSON **j, const cJSON **arr,
                         void **items, size_t size) {
    char format[64];
    snprintf(path, 1100, "%s/%s.json", c->dir, what);
    snprintf(format, sizeof format, "llmsys-%s", what);
    *j = NULL;
    LS_TRY(ls_json_read_format(path, format, 1, j));
    *arr = cJSON_GetObjectItemCaseSensitive(*j, what);
    if (!cJSON_IsArray(*arr)) return ls_err(LS_EFORMAT, "%s: missing \"%s\" array", path, what);
    int n = cJSON_GetArraySize(*arr);
    *items = calloc((size_t)(n > 0 ? n : 1), size);
    return *items ? LS_OK : ls_err(LS_ENOMEM, "%s catalog", what);
}

static int load_gpus(ls_plan_catalog *c) {
    char path[1100];
    cJSON *j;
    const cJSON *arr;
    void *items = NULL;
    int rc = catalog_array(c, "gpus", path, &j, &arr, &items, sizeof *c->gpus);
    c->gpus = items;
    if (rc == LS_OK) {
        const cJSON *e;
        cJSON_ArrayForEach(e, arr) {
            if (rc) break;
            gpu_entry *g = &c->gpus[c->n_gpu];
            const char *name;
            if (ls_json_get_string(e, "name", NULL, &name) || !name) {
                rc = ls_err(LS_EFORMAT, "%s: gpu #%d: missing \"name\"", path, c->n_gpu);
                break;
            }
            copy_name(g->g.name, name);
            double mem, bw, f16, i8, link;
            rc = get_num(e, "memory_GB", 0.1, 1e4, NAN, &mem, path, name);
            if (!rc) rc = get_num(e, "bandwidth_GBps", 1, 1e5, NAN, &bw, path, name);
            if (!rc) rc = get_num(e, "fp16_tflops", 0.01, 1e5, NAN, &f16, path, name);
            if (!rc) rc = get_num(e, "int8_tops", 0, 1e5, 0, &i8, path, name);
            if (!rc) rc = get_num(e, "link_GBps", 0.01, 1e4, 12, &link, path, name);
            if (rc) break;
            g->g.mem_bytes = mem * 1e9;
            g->g.bw_Bps = bw * 1e9;
            g->g.fp16_flops = f16 * 1e12;
            g->g.int8_ops = i8 * 1e12;
            g->g.link_Bps = link * 1e9;
            read_aliases(e, g->alias, &g->n_alias);
            c->n_gpu++;
        }
    }
    cJSON_Delete(j);
    return rc;
}

static int parse_model(const cJSON *e, const char *path, ls_plan_arch *a) {
    const char *name;
    memset(a, 0, sizeof *a);
    if (ls_json_get_string(e, "name", NULL, &name) || !name)
        return ls_err(LS_EFORMAT, "%s: model without \"name\"", path);
    copy_name(a->name, name);
    LS_TRY(get_int(e, "n_layer", 1, LS_PLAN_MAX_LAYER, &a->n_layer, path, name));
    LS_TRY(get_int(e, "d_model", 1, 1 << 20, &a->d_model, path, name));
    LS_TRY(get_int(e, "n_head", 1, 4096, &a->n_head, path, name));
    a->n_kv_head = a->n_head;
    if (cJSON_GetObjectItemCaseSensitive(e, "n_kv_head"))
        LS_TRY(get_int(e, "n_kv_head", 1, 4096, &a->n_kv_head, path, name));
    LS_TRY(get_int(e, "d_ff", 1, 1 << 22, &a->d_ff, path, name));
    LS_TRY(get_int(e, "vocab", 1, 1 << 24, &a->vocab, path, name));
    LS_TRY(get_int(e, "n_ctx", 1, 1 << 24, &a->n_ctx, path, name));
    get_bool(e, "gated", &a->gated);
    get_bool(e, "tied", &a->tied);
    get_bool(e, "pos_embed", &a->pos_embed);
    int rc = ls_plan_arch_validate(a);
    if (rc) return ls_err_wrap(rc, "%s", path);
    return LS_OK;
}

static int load_models(ls_plan_catalog *c) {
    char path[1100];
    cJSON *j;
    const cJSON *arr;
    void *items = NULL;
    int rc = catalog_array(c, "models", path, &j, &arr, &items, sizeof *c->models);
    c->models = items;
    if (rc == LS_OK) {
        const cJSON *e;
        cJSON_ArrayForEach(e, arr) {
            if (rc) break;
            model_entry *m = &c->models[c->n_model];
            rc = parse_model(e, path, &m->a);
            if (rc) break;
            read_aliases(e, m->alias, &m->n_alias);
            c->n_model++;
        }
    }
    cJSON_Delete(j);
    return rc;
}

int ls_plan_catalog_load(const char *data_dir, ls_plan_catalog **out) {
    *out = NULL;
    ls_plan_catalog *c = calloc(1, sizeof *c);
    if (!c) return ls_err(LS_ENOMEM, "catalog");
    const char *env = getenv("LLMSYS_DATA");
    if (data_dir)
        snprintf(c->dir, sizeof c->dir, "%s", data_dir);
    else if (env && *env)
        snprintf(c->dir, sizeof c->dir, "%s", env);
    else
        snprintf(c->dir, sizeof c->dir, "%s/data", LLMSYS_SOURCE_DIR);
    if (!ls_is_dir(c->dir)) {
        int rc = ls_err(LS_ENOTFOUND, "data directory %s not found (set LLMSYS_DATA)", c->dir);
        free(c);
        return rc;
    }
    int rc = load_gpus(c);
    if (!rc) rc = load_models(c);
    if (rc) {
        ls_plan_catalog_free(c);
        return rc;
    }
    *out = c;
    return LS_OK;
}

void ls_plan_catalog_free(ls_plan_catalog *c) {
    if (!c) return;
    free(c->gpus);
    free(c->models);
    free(c);
}

const char *ls_plan_catalog_dir(const ls_plan_catalog *c) { return c->dir; }

int ls_plan_catalog_num_models(const ls_plan_catalog *c) { return c->n_model; }
const char *ls_plan_catalog_model_name(const ls_plan_catalog *c, int i) { return c->models[i].a.name; }

int ls_plan_catalog_gpu(const ls_plan_catalog *c, const char *name, ls_plan_gpu *out) {
    for (int i = 0; i < c->n_gpu; i++) {
        int hit = !strcasecmp(c->gpus[i].g.name, name);
        for (int k = 0; k < c->gpus[i].n_alias; k++) hit |= !strcasecmp(c->gpus[i].alias[k], name);
        if (hit) {
            *out = c->gpus[i].g;
            return LS_OK;
        }
    }
    char known[1024] = "";
    for (int i = 0; i < c->n_gpu; i++) {
        size_t l = strlen(known);
        snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "", c->gpus[i].g.name);
    }
    return ls_err(LS_ENOTFOUND, "unknown GPU '%s' (known: %s)", name, known);
}

int ls_plan_catalog_model(const ls_plan_catalog *c, const char *name, ls_plan_arch *out) {
    for (int i = 0; i < c->n_model; i++) {
        int hit = !strcasecmp(c->models[i].a.name, name);
        for (int k = 0; k < c->models[i].n_alias; k++) hit |= !strcasecmp(c->models[i].alias[k], name);
        if (hit) {
            *out = c->models[i].a;
            return LS_OK;
        }
    }
    char known[1024] = "";
    for (int i = 0; i < c->n_model; i++) {
        size_t l = strlen(known);
        snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "", c->models[i].a.name);
    }
    return ls_err(LS_ENOTFOUND, "unknown model '%s' (known: %s, or a checkpoint path)", name, known);
}

int ls_plan_arch_validate(const ls_plan_arch *a) {
    if (a->n_layer < 1 || a->n_layer > LS_PLAN_MAX_LAYER)
        return ls_err(LS_EINVAL, "model %s: n_layer %d outside 1..%d", a->name, a->n_layer, LS_PLAN_MAX_LAYER);
    if (a->d_model < 1 || a->n_head < 1 || a->d_model % a->n_head)
        return ls_err(LS_EINVAL, "model %s: d_model %d not divisible by n_head %d", a->name, a->d_model, a->n_head);
    if (a->n_kv_head < 1 || a->n_head % a->n_kv_head)
        return ls_err(LS_EINVAL, "model %s: n_head %d not divisible by n_kv_head %d", a->name, a->n_head,
                      a->n_kv_head);
    if (a->d_ff < 1 || a->vocab < 1 || a->n_ctx < 1)
        return ls_err(LS_EINVAL, "model %s: d_ff, vocab and n_ctx must be positive", a->name);
    return LS_OK;
}

int ls_plan_resolve_model(const ls_plan_catalog *c, const char *name, ls_plan_arch *out) {
    if (!ls_is_file(name)) return ls_plan_catalog_model(c, name, out);
    ls_st_file *f;
    ls_model_config mc;
    LS_TRY(ls_ckpt_open(name, &f, &mc)); /* the model's checkpoint opener: config and version checked */
    ls_st_close(f);
    memset(out, 0, sizeof *out);
    copy_name(out->name, name);
    out->n_layer = mc.n_layer, out->d_model = mc.d_model, out->n_head = mc.n_head, out->n_kv_head = mc.n_head;
    out->d_ff = mc.d_ff, out->vocab = mc.vocab, out->n_ctx = mc.n_ctx, out->tied = 1, out->pos_embed = 1;
    return ls_plan_arch_validate(out);
}

/* ---------------------------------------------------------------- clusters */

static int add_devices(ls_plan_cluster *cl, const ls_plan_gpu *g, const char *name, int count, int prof,
                       double usable, const char *path) {
    if (cl->n_dev + count > LS_PLAN_MAX_DEV)
        return ls_err(LS_EINVAL, "%s: more than %d devices", path, LS_PLAN_MAX_DEV);
    for (int k = 0; k < count; k++) {
        ls_plan_device *d = &cl->dev[cl->n_dev++];
        copy_name(d->name, name);
        d->gpu = *g;
        d->node = cl->n_node;
        d->prof = prof;
        d->usable_bytes = usable;
    }
    return LS_OK;
}

static int parse_node(const ls_plan_catalog *c, ls_plan_cluster *cl, const cJSON *e, const char *path,
                      char kinds[][LS_PLAN_NAME * 2], int *n_kinds) {
    const char *gname = NULL, *pname = NULL;
    int count;
    char what[32];
    snprintf(what, sizeof what, "node %d", cl->n_node);
    LS_TRY(ls_json_get_string(e, "gpu", NULL, &gname));
    LS_TRY(ls_json_get_string(e, "profile", NULL, &pname));
    LS_TRY(get_int(e, "count", 0, LS_PLAN_MAX_DEV, &count, path, what));
    char kind[LS_PLAN_NAME * 2];
    ls_plan_gpu g;
    memset(&g, 0, sizeof g);
    int prof = -1;
    double usable;
    if (gname) {
        int rc = ls_plan_catalog_gpu(c, gname, &g);
        if (rc) return ls_err_wrap(rc, "%s: %s", path, what);
        double link;
        LS_TRY(get_num(e, "link_GBps", 0.001, 1e4, g.link_Bps / 1e9, &link, path, what));
        g.link_Bps = link * 1e9;
        usable = ls_plan_usable_bytes(g.mem_bytes);
        snprintf(kind, sizeof kind, "%s/%g", g.name, link);
        LS_TRY(add_devices(cl, &g, g.name, count, -1, usable, path));
    } else if (pname) {
        if (cl->n_prof >= (int)(sizeof cl->prof / sizeof cl->prof[0]))
            return ls_err(LS_EINVAL, "%s: too many profiles", path);
        char ppath[2048];
        if (pname[0] == '/' || ls_is_file(pname)) {
            snprintf(ppath, sizeof ppath, "%s", pname);
        } else {
            /* relative to the cluster file's directory */
            const char *slash = strrchr(path, '/');
            int dl = slash ? (int)(slash - path) : 1;
            snprintf(ppath, sizeof ppath, "%.*s/%s", dl, slash ? path : ".", pname);
        }
        prof = cl->n_prof;
        LS_TRY(ls_plan_profile_load(ppath, &cl->prof[cl->n_prof]));
        cl->n_prof++;
        double mem;
        LS_TRY(get_num(e, "memory_GB", 1e-6, 1e6, NAN, &mem, path, what));
        copy_name(g.name, cl->prof[prof].device);
        g.mem_bytes = mem * 1e9;
        g.link_Bps = cl->prof[prof].link_Bps;
        snprintf(kind, sizeof kind, "profile:%d", prof);
        LS_TRY(add_devices(cl, &g, cl->prof[prof].device, count, prof, mem * 1e9, path));
    } else {
        return ls_err(LS_EFORMAT, "%s: %s needs \"gpu\" or \"profile\"", path, what);
    }
    /* nodes are interchangeable in the device order only when type, link and count agree */
    char full[LS_PLAN_NAME * 2];
    snprintf(full, sizeof full, "%.100s/%d", kind, count);
    int k = 0;
    while (k < *n_kinds && strcmp(kinds[k], full)) k++;
    if (k == *n_kinds) snprintf(kinds[(*n_kinds)++], LS_PLAN_NAME * 2, "%s", full);
    if (count > 0) cl->node_kind[cl->n_node++] = k;
    return LS_OK;
}

static int parse_cluster(const ls_plan_catalog *c, const cJSON *j, const char *path, ls_plan_cluster *cl) {
    LS_TRY(ls_json_check_format(j, path, "llmsys-cluster", 1));
    const char *name = NULL, *model = NULL;
    LS_TRY(ls_json_get_string(j, "name", NULL, &name));
    LS_TRY(ls_json_get_string(j, "model", "", &model));
    if (!name) {
        const char *slash = strrchr(path, '/');
        name = slash ? slash + 1 : path;
    }
    copy_name(cl->name, name);
    copy_name(cl->model, model);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "workload");
    if (w) {
        LS_TRY(get_int(w, "batch", 1, 1 << 20, &cl->batch, path, "workload"));
        LS_TRY(get_int(w, "prompt", 1, 1 << 24, &cl->prompt, path, "workload"));
        LS_TRY(get_int(w, "gen", 1, 1 << 24, &cl->gen, path, "workload"));
    }
    double bw, lat;
    LS_TRY(get_num(j, "inter_node_GBps", 1e-6, 1e5, 12.5, &bw, path, "cluster"));
    LS_TRY(get_num(j, "inter_node_latency_us", 0, 1e7, 20, &lat, path, "cluster"));
    cl->inter_Bps = bw * 1e9;
    cl->inter_lat_s = lat * 1e-6;
    cl->host_capacity = 0;
    cl->host_hop_s = -1;
    cl->host_front_s = 0;
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(j, "host");
    if (host) {
        double cap, hop, front;
        if (!cJSON_IsObject(host)) return ls_err(LS_EFORMAT, "%s: \"host\" must be an object", path);
        LS_TRY(get_num(host, "capacity", 0, 1e4, 0, &cap, path, "host"));
        LS_TRY(get_num(host, "hop_us", -1, 1e7, -1, &hop, path, "host"));
        LS_TRY(get_num(host, "front_us", 0, 1e7, 0, &front, path, "host"));
        cl->host_front_s = front * 1e-6;
        cl->host_capacity = cap;
        cl->host_hop_s = hop < 0 ? -1 : hop * 1e-6;
    }
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(j, "nodes");
    if (!cJSON_IsArray(nodes)) return ls_err(LS_EFORMAT, "%s: missing \"nodes\" array", path);
    char kinds[LS_PLAN_MAX_DEV * 2][LS_PLAN_NAME * 2];
    int n_kinds = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, nodes) {
        if (!cJSON_IsObject(e)) return ls_err(LS_EFORMAT, "%s: every node must be an object", path);
        LS_TRY(parse_node(c, cl, e, path, kinds, &n_kinds));
    }
    if (cl->n_dev == 0) return ls_err(LS_EINVAL, "%s: cluster has zero devices", path);
    return LS_OK;
}

int ls_plan_cluster_load(const ls_plan_catalog *c, const char *name, ls_plan_cluster **out) {
    *out = NULL;
    char path[2048];
    if (ls_is_file(name)) {
        snprintf(path, sizeof path, "%s", name);
    } else {
        snprintf(path, sizeof path, "%s/clusters/%s.json", c->dir, name);
        for (char *p = path + strlen(c->dir); *p; p++) *p = (char)tolower((unsigned char)*p);
        if (!ls_is_file(path)) {
            char **names;
            int n;
            char known[2048] = "";
            if (ls_plan_catalog_clusters(c, &names, &n) == LS_OK) {
                for (int i = 0; i < n; i++) {
                    size_t l = strlen(known);
                    snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "", names[i]);
                }
                ls_plan_names_free(names, n);
            }
            return ls_err(LS_ENOTFOUND, "unknown cluster '%s': not a file nor a catalog name (known: %s)", name,
                          known);
        }
    }
    cJSON *j;
    LS_TRY(ls_json_read_file(path, &j));
    ls_plan_cluster *cl = calloc(1, sizeof *cl);
    if (!cl) {
        cJSON_Delete(j);
        return ls_err(LS_ENOMEM, "cluster");
    }
    int rc = parse_cluster(c, j, path, cl);
    cJSON_Delete(j);
    if (rc) {
        free(cl);
        return rc;
    }
    *out = cl;
    return LS_OK;
}

void ls_plan_cluster_free(ls_plan_cluster *cl) { free(cl); }

static int cmp_str(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    /* natural order: llmpq-2 before llmpq-10 */
    while (*x && *y) {
        if (isdigit((unsigned char)*x) && isdigit((unsigned char)*y)) {
            long u = strtol(x, (char **)&x, 10), v = strtol(y, (char **)&y, 10);
            if (u != v) return u < v ? -1 : 1;
            continue;
        }
        if (*x != *y) return (unsigned char)*x - (unsigned char)*y;
        x++, y++;
    }
    return (unsigned char)*x - (unsigned char)*y;
}

int ls_plan_catalog_clusters(const ls_plan_catalog *c, char ***names, int *n) {
    *names = NULL;
    *n = 0;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/clusters", c->dir);
    DIR *d = opendir(dir);
    if (!d) return ls_err(LS_ENOTFOUND, "cannot open %s", dir);
    int cap = 0;
    struct dirent *de;
    int rc = LS_OK;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            if (!nn) {
                rc = ls_err(LS_ENOMEM, "cluster list");
                break;
            }
            *names = nn;
        }
        (*names)[*n] = strndup(de->d_name, l - 5);
        if (!(*names)[*n]) {
            rc = ls_err(LS_ENOMEM, "cluster list");
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (rc) {
        ls_plan_names_free(*names, *n);
        *names = NULL;
        *n = 0;
        return rc;
    }
    if (*n) qsort(*names, (size_t)*n, sizeof **names, cmp_str);
    return LS_OK;
}

void ls_plan_names_free(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

ls_plan_workload ls_plan_cluster_workload(const ls_plan_cluster *cl, int batch, int prompt, int gen) {
    ls_plan_workload wl = {batch >= 0 ? batch : (cl->batch ? cl->batch : 32),
                           prompt >= 0 ? prompt : (cl->prompt ? cl->prompt : 512),
                           gen >= 0 ? gen : (cl->gen ? cl->gen : 100)};
    return wl;
}

void ls_plan_catalog_print(FILE *f, const ls_plan_catalog *cat) {
    fprintf(f, "catalog %s\nmodels:", ls_plan_catalog_dir(cat));
    for (int i = 0; i < ls_plan_catalog_num_models(cat); i++) fprintf(f, " %s", ls_plan_catalog_model_name(cat, i));
    char **names;
    int n;
    fprintf(f, "\nclusters:\n");
    if (ls_plan_catalog_clusters(cat, &names, &n) == LS_OK) {
        for (int i = 0; i < n; i++) {
            ls_plan_cluster *cl;
            if (ls_plan_cluster_load(cat, names[i], &cl) == LS_OK) {
                fprintf(f, "  %-10s %3d devices  %s\n", names[i], cl->n_dev, cl->model);
                ls_plan_cluster_free(cl);
            }
        }
        ls_plan_names_free(names, n);
    }
}
