/* json.c - the tokenizer.json codec (Hugging Face's format) for byte-level BPE: tokens are stored
 * with each byte shown as a printable character (bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF as
 * themselves, the other 68 as U+0100 onwards, in byte order); merges as "left right" strings or
 * [left, right] pairs; added tokens as their literal content. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "text/internal.h"

/* The character that shows byte b. */
static uint32_t byte_char(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int k = 0; /* rank of b among the bytes that are shifted */
    for (int c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) k++;
    return 0x100 + (uint32_t)k;
}

/* The byte shown by character cp, or -1. */
static int char_byte(uint32_t cp) {
    if (cp < 0x100) return (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    for (int b = 0; b < 256; b++)
        if (byte_char(b) == cp) return b;
    return -1;
}

/* Token string (UTF-8 of shown characters) -> bytes; returns the length or -1. */
static long shown_to_bytes(const char *s, uint8_t *out, size_t cap, const int *inv) {
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp;
        if (p[0] < 0x80) cp = *p++;
        else if ((p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) cp = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F), p += 2;
        else return -1; /* every shown character is below U+0144: one or two bytes */
        int b = cp < 0x144 ? inv[cp] : -1;
        if (b < 0 || o == cap) return -1;
        out[o++] = (uint8_t)b;
    }
    return (long)o;
}

static char *bytes_to_shown(const uint8_t *b, size_t n) {
    char *s = malloc(2 * n + 1), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = byte_char(b[i]);
        if (cp < 0x80) *o++ = (char)cp;
        else *o++ = (char)(0xC0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3F));
    }
    *o = '\0';
    return s;
}

static int check_byte_level(const cJSON *j, const char *what, int *add_prefix_space) {
    if (!cJSON_IsObject(j)) return ls_err(LS_EFORMAT, "tokenizer.json: %s must be an object", what);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "ByteLevel"))
        return ls_err(LS_EFORMAT, "tokenizer.json: %s type %s not supported (byte-level BPE only)", what,
                      cJSON_IsString(type) ? type->valuestring : "(missing)");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(j, "use_regex");
    if (re && cJSON_IsFalse(re)) return ls_err(LS_EFORMAT, "tokenizer.json: %s with use_regex false not supported", what);
    if (add_prefix_space) *add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space"));
    return LS_OK;
}

static int parse_model(ls_bpe *t, const cJSON *model, const int *inv) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return ls_err(LS_EFORMAT, "tokenizer.json: model needs a vocab object and a merges array");
    uint8_t *buf = malloc(LS_BPE_MAX_TOKEN);
    if (!buf) return ls_err(LS_ENOMEM, "tokenizer");
    int rc = LS_OK;
    for (const cJSON *e = vocab->child; e && rc == LS_OK; e = e->next) {
        int id;
        long n = shown_to_bytes(e->string, buf, LS_BPE_MAX_TOKEN, inv);
        if (!ls_json_as_int(e, &id) || id < 0 || id >= LS_BPE_MAX_VOCAB)
            rc = ls_err(LS_EFORMAT, "tokenizer.json: vocab id of \"%.40s\" is not an integer in [0, %d)", e->string,
                        LS_BPE_MAX_VOCAB);
        else if (n <= 0)
            rc = ls_err(LS_EFORMAT, "tokenizer.json: vocab token \"%.40s\" is not byte-level (or too long)", e->string);
        else rc = ls_bpe_set_token(t, id, buf, (size_t)n, 0);
    }
    int n_merges = cJSON_GetArraySize(merges);
    if (rc == LS_OK && !(t->merge = malloc(sizeof(ls_bpe_merge) * (size_t)(n_merges ? n_merges : 1))))
        rc = ls_err(LS_ENOMEM, "tokenizer merges");
    if (rc == LS_OK) rc = ls_bpe_index(t); /* bytes -> id for the merges (specials come later) */
    for (const cJSON *m = merges->child; m && rc == LS_OK; m = m->next) {
        char left[2 * LS_BPE_MAX_TOKEN + 2], *right = NULL;
        const char *l = NULL, *r = NULL;
        if (cJSON_IsString(m) && strlen(m->valuestring) < sizeof left) {
            strcpy(left, m->valuestring);
            if ((right = strchr(left, ' '))) *right++ = '\0';
            l = left, r = right;
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            l = m->child->valuestring, r = m->child->next->valuestring;
        }
        if (!l || !r) {
            rc = ls_err(LS_EFORMAT, "tokenizer.json: merge %d is not \"left right\" or [left, right]", t->n_merge);
            break;
        }
        long nl = shown_to_bytes(l, buf, LS_BPE_MAX_TOKEN, inv);
        int a = nl > 0 ? ls_bpe_find(t, buf, (size_t)nl) : -1;
        long nr = shown_to_bytes(r, buf, LS_BPE_MAX_TOKEN, inv);
        int b = nr > 0 ? ls_bpe_find(t, buf, (size_t)nr) : -1;
        if (a < 0 || b < 0) {
            rc = ls_err(LS_EFORMAT, "tokenizer.json: merge %d (\"%.40s\" \"%.40s\") names a token not in the vocab",
                        t->n_merge, l, r);
            break;
        }
        if (nl + nr > LS_BPE_MAX_TOKEN) {
            rc = ls_err(LS_EFORMAT,
                        "tokenizer.json: merge %d (\"%.40s\" \"%.40s\") makes a token of %ld bytes (at most %d)",
                        t->n_merge, l, r, nl + nr, LS_BPE_MAX_TOKEN);
            break;
        }
        memcpy(buf, t->tok[a].bytes, t->tok[a].len);
        memcpy(buf + t->tok[a].len, t->tok[b].bytes, t->tok[b].len);
        int to = ls_bpe_find(t, buf, t->tok[a].len + t->tok[b].len);
        if (to < 0) {
            rc = ls_err(LS_EFORMAT, "tokenizer.json: merge %d (\"%.40s\" \"%.40s\") makes a token not in the vocab",
                        t->n_merge, l, r);
            break;
        }
        t->merge[t->n_merge++] = (ls_bpe_merge){a, b, to};
    }
    free(buf);
    return rc;
}

int ls_bpe_parse(const char *json, size_t len, ls_bpe **out) {
    *out = NULL;
    cJSON *j = NULL;
    int rc = ls_json_parse(json, len, "tokenizer.json", &j);
    if (rc) return rc;
    ls_bpe *t = NULL;
    int inv[0x144];
    for (uint32_t cp = 0; cp < 0x144; cp++) inv[cp] = char_byte(cp);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *type = model ? cJSON_GetObjectItemCaseSensitive(model, "type") : NULL;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    const cJSON *vocab = model ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    int max_id = -1, add_prefix_space = 0;
    if (!cJSON_IsObject(model) || (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE"))))
        rc = ls_err(LS_EFORMAT, "tokenizer.json: model type %s not supported (BPE only)",
                    cJSON_IsString(type) ? type->valuestring : "(missing model)");
    else if (norm && !cJSON_IsNull(norm))
        rc = ls_err(LS_EFORMAT, "tokenizer.json: normalizers are not supported");
    else if ((rc = check_byte_level(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), "pre_tokenizer",
                                    &add_prefix_space)) == LS_OK) {
        const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
        const cJSON *pfx = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
        const cJSON *sfx = cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix");
        if ((drop && !cJSON_IsNull(drop)) || (cJSON_IsString(pfx) && *pfx->valuestring) ||
            (cJSON_IsString(sfx) && *sfx->valuestring))
            rc = ls_err(LS_EFORMAT, "tokenizer.json: BPE dropout, subword prefixes and suffixes are not supported");
    }
    /* the largest id sizes the table */
    for (const cJSON *e = cJSON_IsObject(vocab) ? vocab->child : NULL; e && rc == LS_OK; e = e->next) {
        int id;
        if (!ls_json_as_int(e, &id) || id < 0 || id >= LS_BPE_MAX_VOCAB)
            rc = ls_err(LS_EFORMAT, "tokenizer.json: vocab id of \"%.40s\" is not an integer in [0, %d)", e->string,
                        LS_BPE_MAX_VOCAB);
        else if (id > max_id) max_id = id;
    }
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e && rc == LS_OK; e = e->next) {
        int id;
        if (ls_json_get_int(e, "id", -1, &id) || id < 0 || id >= LS_BPE_MAX_VOCAB)
            rc = ls_err(LS_EFORMAT, "tokenizer.json: added token id outside [0, %d)", LS_BPE_MAX_VOCAB);
        else if (id > max_id) max_id = id;
    }
    if (rc == LS_OK) rc = ls_bpe_alloc(&t, max_id + 1);
    if (rc == LS_OK) {
        t->add_prefix_space = add_prefix_space;
        rc = parse_model(t, model, inv);
    }
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e && rc == LS_OK; e = e->next) {
        int id;
        const char *content;
        ls_json_get_int(e, "id", -1, &id);
        if (ls_json_get_string(e, "content", NULL, &content) || !content || !*content)
            rc = ls_err(LS_EFORMAT, "tokenizer.json: added token %d has no content", id);
        else if (t->tok[id].bytes) { /* an added token that is also a vocab entry (GPT-2's <|endoftext|>) */
            if (t->tok[id].len != strlen(content) || memcmp(t->tok[id].bytes, content, t->tok[id].len))
                rc = ls_err(LS_EFORMAT, "tokenizer.json: added token %d differs from vocab entry %d", id, id);
            else t->tok[id].special = 1;
        } else rc = ls_bpe_set_token(t, id, content, strlen(content), 1);
    }
    if (rc == LS_OK) rc = ls_bpe_index(t);
    cJSON_Delete(j);
    if (rc) {
        ls_bpe_free(t);
        return rc;
    }
    *out = t;
    return LS_OK;
}

int ls_bpe_load(const char *path, ls_bpe **out) {
    char *data;
    size_t len;
    *out = NULL;
    int rc = ls_file_read(path, &data, &len);
    if (rc) return ls_err_wrap(rc, "tokenizer %s", path);
    rc = ls_bpe_parse(data, len, out);
    free(data);
    return rc ? ls_err_wrap(rc, "%s", path) : LS_OK;
}

static cJSON *byte_level(int add_prefix_space, int trim_offsets) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
    cJSON_AddBoolToObject(o, "use_regex", 1);
    return o;
}

/* The tokenizer.json document of t, or NULL (out of memory). */
static cJSON *to_json(const ls_bpe *t) {
    cJSON *j = cJSON_CreateObject(), *added = cJSON_CreateArray(), *model = cJSON_CreateObject();
    cJSON *vocab = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    int rc = j && added && model && vocab && merges ? LS_OK : ls_err(LS_ENOMEM, "tokenizer.json");
    if (rc == LS_OK) {
        cJSON_AddStringToObject(j, "version", "1.0");
        cJSON_AddNullToObject(j, "truncation");
        cJSON_AddNullToObject(j, "padding");
        cJSON_AddItemToObject(j, "added_tokens", added);
        cJSON_AddNullToObject(j, "normalizer");
        cJSON_AddItemToObject(j, "pre_tokenizer", byte_level(t->add_prefix_space, 1));
        cJSON_AddItemToObject(j, "post_processor", byte_level(1, 0));
        cJSON_AddItemToObject(j, "decoder", byte_level(1, 1));
        cJSON_AddItemToObject(j, "model", model);
        cJSON_AddStringToObject(model, "type", "BPE");
        cJSON_AddNullToObject(model, "dropout");
        cJSON_AddNullToObject(model, "unk_token");
        cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
        cJSON_AddStringToObject(model, "end_of_word_suffix", "");
        cJSON_AddBoolToObject(model, "fuse_unk", 0);
        cJSON_AddBoolToObject(model, "byte_fallback", 0);
        cJSON_AddItemToObject(model, "vocab", vocab);
        cJSON_AddItemToObject(model, "merges", merges);
        added = vocab = merges = NULL; /* owned by j now */
    }
    for (int id = 0; id < t->n_tok && rc == LS_OK; id++) {
        const ls_bpe_tok *k = &t->tok[id];
        if (!k->bytes) continue;
        cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
        if (k->special) {
            cJSON *e = cJSON_CreateObject();
            char *content = strndup((const char *)k->bytes, k->len);
            if (!e || !content) rc = ls_err(LS_ENOMEM, "tokenizer.json");
            else {
                cJSON_AddNumberToObject(e, "id", id);
                cJSON_AddStringToObject(e, "content", content);
                cJSON_AddBoolToObject(e, "single_word", 0);
                cJSON_AddBoolToObject(e, "lstrip", 0);
                cJSON_AddBoolToObject(e, "rstrip", 0);
                cJSON_AddBoolToObject(e, "normalized", 0);
                cJSON_AddBoolToObject(e, "special", 1);
                cJSON_AddItemToArray(a, e);
                e = NULL;
            }
            cJSON_Delete(e);
            free(content);
            continue;
        }
        char *s = bytes_to_shown(k->bytes, k->len);
        if (!s || !cJSON_AddNumberToObject(cJSON_GetObjectItemCaseSensitive(model, "vocab"), s, id))
            rc = ls_err(LS_ENOMEM, "tokenizer.json");
        free(s);
    }
    cJSON *m = cJSON_GetObjectItemCaseSensitive(model, "merges");
    for (int r = 0; r < t->n_merge && rc == LS_OK; r++) {
        const ls_bpe_tok *a = &t->tok[t->merge[r].a], *b = &t->tok[t->merge[r].b];
        char *sa = bytes_to_shown(a->bytes, a->len), *sb = bytes_to_shown(b->bytes, b->len);
        char *line = sa && sb ? malloc(strlen(sa) + strlen(sb) + 2) : NULL;
        if (line) sprintf(line, "%s %s", sa, sb);
        if (!line || !cJSON_AddItemToArray(m, cJSON_CreateString(line))) rc = ls_err(LS_ENOMEM, "tokenizer.json");
        free(sa);
        free(sb);
        free(line);
    }
    cJSON_Delete(added);
    cJSON_Delete(vocab);
    cJSON_Delete(merges);
    if (rc) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int ls_bpe_save(const ls_bpe *t, const char *path) {
    cJSON *j = to_json(t);
    int rc = j ? ls_json_write_file(path, j) : ls_err(LS_ENOMEM, "tokenizer.json");
    cJSON_Delete(j);
    return rc;
}

char *ls_bpe_to_json(const ls_bpe *t) {
    cJSON *j = to_json(t);
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) ls_err(LS_ENOMEM, "tokenizer.json");
    return s;
}
