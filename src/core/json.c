/* json.c - cJSON helpers: file I/O with clear errors and typed getters. */
#include "llmsys/core.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t ls_json_nul_escape(const char *text, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (text[i] != '\\') {
            i++;
            continue;
        }
        if (len - i >= 6 && !memcmp(text + i + 1, "u0000", 5)) return i;
        i += 2; /* an escape: the backslash and what it escapes */
    }
    return len;
}

int ls_json_parse(const char *text, size_t len, const char *what, cJSON **out) {
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*out) {
        size_t off = end ? (size_t)(end - text) : 0;
        return ls_err(LS_EFORMAT, "%s: invalid JSON near byte %zu", what, off);
    }
    size_t nul = ls_json_nul_escape(text, len);
    if (nul < len) {
        cJSON_Delete(*out);
        *out = NULL;
        return ls_err(LS_EFORMAT, "%s: a \\u0000 escape at byte %zu (a NUL character would cut its string short)", what,
                      nul);
    }
    return LS_OK;
}

int ls_json_read_file(const char *path, cJSON **out) {
    char *buf;
    size_t len;
    *out = NULL;
    LS_TRY(ls_file_read(path, &buf, &len));
    int rc = ls_json_parse(buf, len, path, out);
    free(buf);
    return rc;
}

int ls_json_write_file(const char *path, const cJSON *j) {
    char *s = cJSON_Print(j);
    if (!s) return ls_err(LS_ENOMEM, "%s: cannot serialize JSON", path);
    size_t n = strlen(s);
    s[n] = '\n'; /* cJSON_Print's buffer holds the NUL here; the newline replaces it */
    int rc = ls_file_write_atomic(path, s, n + 1);
    free(s);
    return rc;
}

int ls_json_check_format(const cJSON *j, const char *what, const char *format, int version) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "version");
    if (!cJSON_IsObject(j) || !cJSON_IsString(f) || strcmp(f->valuestring, format) != 0)
        return ls_err(LS_EFORMAT, "%s: not a %s file (\"format\" must be \"%s\")", what, format, format);
    if (version > 0 && (!cJSON_IsNumber(v) || v->valueint != version))
        return ls_err(LS_EFORMAT, "%s: unsupported %s version (expected %d)", what, format, version);
    return LS_OK;
}

int ls_json_read_format(const char *path, const char *format, int version, cJSON **out) {
    LS_TRY(ls_json_read_file(path, out));
    int rc = ls_json_check_format(*out, path, format, version);
    if (rc < 0) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}

int ls_json_get_int(const cJSON *obj, const char *key, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        *out = def;
        return LS_OK;
    }
    if (!ls_json_as_int(v, out)) return ls_err(LS_EINVAL, "'%s' must be an integer in [%d, %d]", key, INT_MIN, INT_MAX);
    return LS_OK;
}

int ls_json_as_int(const cJSON *v, int *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    /* Range first: converting a double outside int's range to int is undefined behaviour. */
    if (!(d >= (double)INT_MIN && d <= (double)INT_MAX) || d != floor(d)) return 0;
    *out = (int)d;
    return 1;
}

int ls_f64_as_i64(double d, int64_t lo, int64_t hi, int64_t *out) {
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) return 0;
    *out = (int64_t)d;
    return 1;
}

int ls_json_as_i64(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    return cJSON_IsNumber(v) && ls_f64_as_i64(v->valuedouble, lo, hi, out);
}

int ls_json_get_double(const cJSON *obj, const char *key, double def, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        *out = def;
        return LS_OK;
    }
    if (!cJSON_IsNumber(v)) return ls_err(LS_EINVAL, "'%s' must be a number", key);
    *out = v->valuedouble;
    return LS_OK;
}

int ls_json_get_string(const cJSON *obj, const char *key, const char *def, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        *out = def;
        return LS_OK;
    }
    if (!cJSON_IsString(v)) return ls_err(LS_EINVAL, "'%s' must be a string", key);
    *out = v->valuestring;
    return LS_OK;
}
