/* safetensors.c - validated safetensors reader (mmap) and atomic, checksummed writer. */
#include "llmsys/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "llmsys/core.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[LS_DT_COUNT] = {
    [LS_DT_F32] = {"F32", 4}, [LS_DT_F16] = {"F16", 2}, [LS_DT_BF16] = {"BF16", 2},
    [LS_DT_F64] = {"F64", 8}, [LS_DT_I8] = {"I8", 1},   [LS_DT_U8] = {"U8", 1},
    [LS_DT_I16] = {"I16", 2}, [LS_DT_I32] = {"I32", 4}, [LS_DT_I64] = {"I64", 8},
};

/* Headers beyond this are refused: real checkpoints with 10k tensors stay far below. */
#define ST_MAX_HEADER (64u << 20)

const char *ls_dtype_name(ls_dtype dt) { return (unsigned)dt < LS_DT_COUNT ? dtypes[dt].name : "?"; }
size_t ls_dtype_size(ls_dtype dt) { return (unsigned)dt < LS_DT_COUNT ? dtypes[dt].size : 0; }

int ls_dtype_parse(const char *s) {
    for (int i = 0; i < LS_DT_COUNT; i++)
        if (s && !strcmp(s, dtypes[i].name)) return i;
    return -1;
}

/* ---------------------------------------------------------------- reading */

typedef struct {
    char *key, *value;
} st_meta;

struct ls_st_file {
    char *path;
    void *map;
    size_t map_len;
    void *own; /* aligned copies of the tensors the file placed misaligned (NULL if none) */
    ls_st_tensor *t;
    int n;
    st_meta *meta;
    int n_meta;
};

const char *ls_st_path(const ls_st_file *f) { return f->path; }
int ls_st_count(const ls_st_file *f) { return f->n; }
const ls_st_tensor *ls_st_get(const ls_st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }

const ls_st_tensor *ls_st_find(const ls_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

const char *ls_st_meta(const ls_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
    return NULL;
}

void ls_st_close(ls_st_file *f) {
    if (!f) return;
    if (f->map && f->map != MAP_FAILED) munmap(f->map, f->map_len);
    ls_aligned_free(f->own);
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->t);
    free(f->meta);
    free(f->path);
    free(f);
}

static int parse_tensor(ls_st_file *f, const cJSON *e, ls_st_tensor *t, const uint8_t *data, size_t data_len) {
    const char *p = f->path;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(off) ||
        cJSON_GetArraySize(off) != 2)
        return ls_err(LS_EFORMAT, "%s: tensor '%s': header entry lacks dtype/shape/data_offsets", p, e->string);
    int d = ls_dtype_parse(dt->valuestring);
    if (d < 0) return ls_err(LS_EFORMAT, "%s: tensor '%s': unsupported dtype '%s'", p, e->string, dt->valuestring);
    t->dtype = (ls_dtype)d;
    t->ndim = cJSON_GetArraySize(shape);
    if (t->ndim > LS_ST_MAX_DIMS)
        return ls_err(LS_EFORMAT, "%s: tensor '%s': %d dims (max %d)", p, e->string, t->ndim, LS_ST_MAX_DIMS);
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *s = cJSON_GetArrayItem(shape, i);
        if (!cJSON_IsNumber(s) || s->valuedouble < 0 || s->valuedouble > 1e15 ||
            s->valuedouble != (double)(int64_t)s->valuedouble)
            return ls_err(LS_EFORMAT, "%s: tensor '%s': bad shape", p, e->string);
        t->shape[i] = (int64_t)s->valuedouble;
        if (t->shape[i] && t->numel > INT64_MAX / t->shape[i])
            return ls_err(LS_EFORMAT, "%s: tensor '%s': shape overflows", p, e->string);
        t->numel *= t->shape[i];
    }
    const cJSON *ob = cJSON_GetArrayItem(off, 0), *oe = cJSON_GetArrayItem(off, 1);
    double b = cJSON_IsNumber(ob) ? ob->valuedouble : -1, en = cJSON_IsNumber(oe) ? oe->valuedouble : -1;
    if (!(b >= 0 && en >= b && en <= (double)data_len) || b != floor(b) || en != floor(en))
        return ls_err(LS_EFORMAT,
                      "%s: tensor '%s': data offsets [%.0f, %.0f) outside the %zu-byte data section (truncated file?)",
                      p, e->string, b, en, data_len);
    t->nbytes = (size_t)(en - b);
    if ((double)t->nbytes != (double)t->numel * (double)dtypes[d].size)
        return ls_err(LS_EFORMAT, "%s: tensor '%s': %zu bytes do not match shape x %s", p, e->string, t->nbytes,
                      dtypes[d].name);
    t->data = data + (size_t)b;
    t->name = strdup(e->string);
    return t->name ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The first name that occurs twice in names[0..n) (sorted in place), or NULL. */
static const char *find_dup(const char **names, int n) {
    qsort(names, (size_t)n, sizeof *names, cmp_cstr);
    for (int i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

/* JSON allows a key twice; a header must not (which "__metadata__" or which tensor would
 * count is then a matter of parser, and two metadata objects once overflowed a buffer here). */
static int check_unique(const char *path, const cJSON *obj, const char *what) {
    int n = cJSON_GetArraySize(obj), i = 0;
    if (n < 2) return LS_OK;
    const char **names = malloc(sizeof *names * (size_t)n);
    if (!names) return ls_err(LS_ENOMEM, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, obj) names[i++] = e->string ? e->string : "";
    const char *dup = find_dup(names, n);
    int rc = dup ? ls_err(LS_EFORMAT, "%s: %s key '%s' appears twice", path, what, dup) : LS_OK;
    free(names);
    return rc;
}

/* Every tensor's data is left where the file has it when that address suits its dtype
 * (files llmsys writes always do); the others are copied into one aligned block, so no
 * caller ever loads a float from a misaligned address, whatever the header length. */
static int align_tensors(ls_st_file *f) {
    size_t need = 0;
    for (int i = 0; i < f->n; i++) {
        const ls_st_tensor *t = &f->t[i];
        if ((uintptr_t)t->data % dtypes[t->dtype].size) need += (t->nbytes + 63) & ~(size_t)63;
    }
    if (!need) return LS_OK;
    if (!(f->own = ls_aligned_alloc(64, need)))
        return ls_err(LS_ENOMEM, "%s: out of memory copying %zu misaligned bytes", f->path, need);
    size_t off = 0;
    for (int i = 0; i < f->n; i++) {
        ls_st_tensor *t = &f->t[i];
        if (!((uintptr_t)t->data % dtypes[t->dtype].size)) continue;
        uint8_t *dst = (uint8_t *)f->own + off;
        memcpy(dst, t->data, t->nbytes);
        t->data = dst;
        off += (t->nbytes + 63) & ~(size_t)63;
    }
    LS_DEBUG("%s: %zu bytes of misaligned tensor data copied", f->path, need);
    return LS_OK;
}

static int allow_unchecked_env(void) {
    const char *e = getenv("LLMSYS_ALLOW_UNCHECKED");
    return e && *e && strcmp(e, "0") != 0;
}

int ls_st_open(const char *path, ls_st_file **out) { return ls_st_open_ex(path, 0, out); }

int ls_st_open_ex(const char *path, unsigned flags, ls_st_file **out) {
    *out = NULL;
    ls_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    int rc = LS_OK;
    cJSON *hdr = NULL;
    int fd;
    rc = ls_file_open_input(path, &fd, &f->map_len);
    if (rc != LS_OK) goto fail;
    if (f->map_len < 8) {
        close(fd);
        rc = ls_err(LS_EFORMAT, "%s: %zu bytes is too short for a safetensors file", path, f->map_len);
        goto fail;
    }
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = ls_err(LS_EIO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    const uint8_t *base = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | base[i];
    if (hlen == 0 || hlen > ST_MAX_HEADER || hlen > f->map_len - 8) {
        rc = ls_err(LS_EFORMAT, "%s: header length %llu does not fit a %zu-byte file (not safetensors, or truncated)",
                    path, (unsigned long long)hlen, f->map_len);
        goto fail;
    }
    if (base[8] != '{') {
        rc = ls_err(LS_EFORMAT, "%s: not a safetensors file (header is not a JSON object)", path);
        goto fail;
    }
    if ((rc = ls_json_parse((const char *)base + 8, (size_t)hlen, path, &hdr)) != LS_OK) goto fail;
    if (!cJSON_IsObject(hdr)) {
        rc = ls_err(LS_EFORMAT, "%s: safetensors header is not a JSON object", path);
        goto fail;
    }
    if ((rc = check_unique(path, hdr, "header")) != LS_OK) goto fail;
    const uint8_t *data = base + 8 + hlen;
    size_t data_len = f->map_len - 8 - (size_t)hlen;
    int cap = cJSON_GetArraySize(hdr);
    f->t = calloc((size_t)cap + 1, sizeof *f->t);
    if (!f->t) {
        rc = ls_err(LS_ENOMEM, "out of memory");
        goto fail;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, hdr) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                rc = ls_err(LS_EFORMAT, "%s: __metadata__ is not an object", path);
                goto fail;
            }
            if ((rc = check_unique(path, e, "metadata")) != LS_OK) goto fail;
            /* check_unique above makes this the only metadata object: sized once, exactly */
            int nm = cJSON_GetArraySize(e);
            if (!(f->meta = calloc((size_t)nm + 1, sizeof *f->meta))) {
                rc = ls_err(LS_ENOMEM, "out of memory");
                goto fail;
            }
            const cJSON *m;
            cJSON_ArrayForEach(m, e) {
                if (!cJSON_IsString(m)) {
                    rc = ls_err(LS_EFORMAT, "%s: metadata value '%s' is not a string", path, m->string);
                    goto fail;
                }
                if (f->n_meta >= nm) break; /* cannot happen: nm counted these entries */
                st_meta *sm = &f->meta[f->n_meta++];
                sm->key = strdup(m->string);
                sm->value = strdup(m->valuestring);
                if (!sm->key || !sm->value) {
                    rc = ls_err(LS_ENOMEM, "out of memory");
                    goto fail;
                }
            }
            continue;
        }
        rc = parse_tensor(f, e, &f->t[f->n], data, data_len);
        if (rc != LS_OK) goto fail;
        f->n++;
    }
    const char *sum = ls_st_meta(f, "llmsys.xxh3");
    if (sum) {
        char got[17];
        snprintf(got, sizeof got, "%016llx", (unsigned long long)XXH3_64bits(data, data_len));
        if (strcmp(got, sum) != 0) {
            rc =
                ls_err(LS_ECHECKSUM, "%s: checksum mismatch (stored %s, computed %s): file is corrupt", path, sum, got);
            goto fail;
        }
    } else if (!(flags & LS_ST_ALLOW_UNCHECKED) && !allow_unchecked_env()) {
        rc = ls_err(LS_ECHECKSUM,
                    "%s: no llmsys.xxh3 checksum, so corruption cannot be detected; refusing it "
                    "(set LLMSYS_ALLOW_UNCHECKED=1 to load a file from another tool)",
                    path);
        goto fail;
    }
    if ((rc = align_tensors(f)) != LS_OK) goto fail;
    cJSON_Delete(hdr);
    *out = f;
    return LS_OK;
fail:
    cJSON_Delete(hdr);
    ls_st_close(f);
    return rc;
}

int ls_st_expect(const ls_st_file *f, const char *name, ls_dtype dt, int ndim, const int64_t *shape,
                 const ls_st_tensor **out) {
    const ls_st_tensor *t = ls_st_find(f, name);
    if (!t) return ls_err(LS_EFORMAT, "%s: missing tensor '%s'", f->path, name);
    if (t->dtype != dt)
        return ls_err(LS_EFORMAT, "%s: tensor '%s' has dtype %s, expected %s", f->path, name, ls_dtype_name(t->dtype),
                      ls_dtype_name(dt));
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[128] = "", got[128] = "";
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "", (long long)shape[i]);
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)t->shape[i]);
        return ls_err(LS_EFORMAT, "%s: tensor '%s' has shape [%s], expected [%s]", f->path, name, got, want);
    }
    if (out) *out = t;
    return LS_OK;
}

/* ---------------------------------------------------------------- writing */

typedef struct {
    char *name;
    ls_dtype dtype;
    int ndim;
    int64_t shape[LS_ST_MAX_DIMS];
    const void *data;
    size_t nbytes;
} st_entry;

struct ls_st_writer {
    st_entry *e;
    int n, cap;
    cJSON *meta;
};

int ls_st_writer_init(ls_st_writer **out) {
    ls_st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->meta = cJSON_CreateObject())) {
        free(w);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    *out = w;
    return LS_OK;
}

void ls_st_writer_free(ls_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    cJSON_Delete(w->meta);
    free(w);
}

int ls_st_writer_add(ls_st_writer *w, const char *name, ls_dtype dt, int ndim, const int64_t *shape, const void *data) {
    if ((unsigned)dt >= LS_DT_COUNT || ndim < 0 || ndim > LS_ST_MAX_DIMS || !name || !*name ||
        !strcmp(name, "__metadata__"))
        return ls_err(LS_EINVAL, "safetensors: bad tensor '%s'", name ? name : "(null)");
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->e[i].name, name)) return ls_err(LS_EINVAL, "safetensors: duplicate tensor '%s'", name);
    if (w->n == w->cap) {
        int nc = w->cap ? 2 * w->cap : 64;
        st_entry *ne = realloc(w->e, sizeof *ne * (size_t)nc);
        if (!ne) return ls_err(LS_ENOMEM, "out of memory");
        w->e = ne;
        w->cap = nc;
    }
    st_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return ls_err(LS_ENOMEM, "out of memory");
    e->dtype = dt;
    e->ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            free(e->name);
            return ls_err(LS_EINVAL, "safetensors: tensor '%s' has a negative dimension", name);
        }
        e->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    e->data = data;
    e->nbytes = numel * dtypes[dt].size;
    w->n++;
    return LS_OK;
}

int ls_st_writer_meta(ls_st_writer *w, const char *key, const char *value) {
    cJSON *v = cJSON_CreateString(value);
    if (!v) return ls_err(LS_ENOMEM, "out of memory");
    if (cJSON_GetObjectItemCaseSensitive(w->meta, key))
        cJSON_ReplaceItemInObjectCaseSensitive(w->meta, key, v);
    else
        cJSON_AddItemToObject(w->meta, key, v);
    return LS_OK;
}

int ls_st_writer_write(ls_st_writer *w, const char *path) {
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) return ls_err(LS_ENOMEM, "out of memory");
    XXH3_64bits_reset(hs);
    for (int i = 0; i < w->n; i++) XXH3_64bits_update(hs, w->e[i].data, w->e[i].nbytes);
    char sum[17];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)XXH3_64bits_digest(hs));
    XXH3_freeState(hs);
    LS_TRY(ls_st_writer_meta(w, "format", "llmsys"));
    LS_TRY(ls_st_writer_meta(w, "llmsys.xxh3", sum));

    cJSON *hdr = cJSON_CreateObject();
    if (!hdr) return ls_err(LS_ENOMEM, "out of memory");
    cJSON_AddItemReferenceToObject(hdr, "__metadata__", w->meta);
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        st_entry *e = &w->e[i];
        cJSON *o = cJSON_AddObjectToObject(hdr, e->name);
        cJSON_AddStringToObject(o, "dtype", dtypes[e->dtype].name);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < e->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->shape[d]));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + e->nbytes)));
        off += e->nbytes;
    }
    char *js = cJSON_PrintUnformatted(hdr);
    cJSON_Delete(hdr);
    if (!js) return ls_err(LS_ENOMEM, "out of memory");
    size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7; /* keeps the data 8-byte aligned */
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));

    ls_atomic_file af;
    int rc = ls_atomic_open(&af, path);
    if (rc != LS_OK) {
        free(js);
        return rc;
    }
    FILE *fp = af.fp;
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(js, 1, jl, fp) == jl;
    for (size_t i = jl; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    for (int i = 0; ok && i < w->n; i++) ok = fwrite(w->e[i].data, 1, w->e[i].nbytes, fp) == w->e[i].nbytes;
    free(js);
    if (!ok) {
        rc = ls_err(LS_EIO, "%s: write failed: %s", path, strerror(errno));
        ls_atomic_abort(&af);
        return rc;
    }
    return ls_atomic_commit(&af);
}
