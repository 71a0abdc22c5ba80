/* source.c - source loaders: the document index of a text, JSON Lines or .lstok source,
 * reading one document as tokens, and writing .lstok files. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "llmsys/model.h"
#include "loader/loader_internal.h"

#define TOK_MAGIC "LSTOKv01"
#define TOK_VERSION 1u
#define TOK_HEADER 64
#define MAX_DOC_BYTES (64u << 20) /* one document; longer ones are an error, not a silent cut */
#define MAX_WARNINGS 5

typedef struct {
    uint32_t file;
    uint32_t len; /* bytes of the line / block */
    uint64_t off;
    uint32_t tlen; /* tokens before EOS: len for text, the decoded string's length for JSONL */
} doc_ref;

/* Files are mapped read-only once, at open: a document is then read with one copy out of
 * the page cache and no system call (in a VM each pread costs microseconds). Sources must
 * not be truncated while in use. */
typedef struct {
    const char *p;
    size_t len;
} file_map;

struct ls_src {
    ls_loader_source_spec spec;
    int nfiles;
    char **files;
    file_map *maps;
    uint32_t ndocs;
    doc_ref *docs;       /* text / jsonl */
    uint64_t *tok_index; /* tokens: ndocs + 1 offsets */
    int64_t skipped;
    size_t cap;
};

/* ---------------------------------------------------------------- file listing */

static int add_file(ls_src *s, const char *path) {
    if (s->nfiles % 64 == 0) {
        char **f = realloc(s->files, (size_t)(s->nfiles + 64) * sizeof *f);
        if (!f) return ls_err(LS_ENOMEM, "out of memory");
        s->files = f;
    }
    size_t n = strlen(path) + 1;
    s->files[s->nfiles] = malloc(n);
    if (!s->files[s->nfiles]) return ls_err(LS_ENOMEM, "out of memory");
    memcpy(s->files[s->nfiles++], path, n);
    return LS_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Regular files under dir, recursively, in sorted order (so the index is reproducible). */
static int list_dir(ls_src *s, const char *dir, int depth) {
    if (depth > 32) return ls_err(LS_EINVAL, "%s: directory nesting too deep", dir);
    DIR *d = opendir(dir);
    if (!d) return ls_err(ls_file_input_status(errno), "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = LS_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ".", ".." and hidden files */
        if (n % 64 == 0) {
            char **nn = realloc(names, (size_t)(n + 64) * sizeof *nn);
            if (!nn) {
                rc = ls_err(LS_ENOMEM, "out of memory");
                break;
            }
            names = nn;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (!names[n]) {
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (rc == LS_OK && n > 0) qsort(names, (size_t)n, sizeof *names, cmp_str); /* names: NULL when empty */
    for (int i = 0; i < n && rc == LS_OK; i++) {
        struct stat st;
        if (stat(names[i], &st) != 0)
            rc = ls_err(LS_EIO, "%s: %s", names[i], strerror(errno));
        else if (S_ISDIR(st.st_mode))
            rc = list_dir(s, names[i], depth + 1);
        else if (S_ISREG(st.st_mode))
            rc = add_file(s, names[i]);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static int add_doc(ls_src *s, uint32_t file, uint64_t off, size_t len, size_t tlen) {
    if (len > MAX_DOC_BYTES)
        return ls_err(LS_EINVAL, "%s: document at byte %llu is larger than %u bytes", s->files[file],
                      (unsigned long long)off, MAX_DOC_BYTES);
    if (s->ndocs == UINT32_MAX - 1) return ls_err(LS_ERANGE, "source '%s': too many documents", s->spec.name);
    if (s->ndocs == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 1024;
        doc_ref *d = realloc(s->docs, nc * sizeof *d);
        if (!d) return ls_err(LS_ENOMEM, "out of memory");
        s->docs = d;
        s->cap = nc;
    }
    s->docs[s->ndocs++] = (doc_ref){file, (uint32_t)len, off, (uint32_t)tlen};
    return LS_OK;
}

static int is_blank_line(const char *p, const char *end) {
    for (; p < end && *p != '\n'; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r') return 0;
    return 1;
}

static int index_text(ls_src *s, uint32_t f, const char *buf, size_t len) {
    if (s->spec.split == LS_SPLIT_FILE) {
        int any = 0; /* whitespace-only files are not documents */
        for (size_t i = 0; i < len && !any; i++)
            any = buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\t' && buf[i] != '\r';
        return any ? add_doc(s, f, 0, len, len) : LS_OK;
    }
    /* Blank-line blocks: a document runs from its first non-blank line to the end of its
     * last non-blank line (the newline is kept). */
    const char *p = buf, *end = buf + len, *start = NULL, *last_end = NULL;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl + 1 : end;
        if (is_blank_line(p, end)) {
            if (start)
                LS_TRY(add_doc(s, f, (uint64_t)(start - buf), (size_t)(last_end - start), (size_t)(last_end - start)));
            start = NULL;
        } else {
            if (!start) start = p;
            last_end = eol;
        }
        p = eol;
    }
    if (start) LS_TRY(add_doc(s, f, (uint64_t)(start - buf), (size_t)(last_end - start), (size_t)(last_end - start)));
    return LS_OK;
}

/* The document text of one JSON line: the string under spec.field, or NULL. */
static const cJSON *jsonl_text(const cJSON *j, const char *field) {
    if (!cJSON_IsObject(j)) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    return cJSON_IsString(v) ? v : NULL;
}

static int index_jsonl(ls_src *s, uint32_t f, const char *buf, size_t len, int strict) {
    const char *p = buf, *end = buf + len;
    int line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        line++;
        if (!is_blank_line(p, end)) {
            size_t n = (size_t)(eol - p);
            cJSON *j = cJSON_ParseWithLength(p, n);
            const cJSON *v = j ? jsonl_text(j, s->spec.field) : NULL;
            const char *why = !j                             ? "malformed JSON"
                              : !v                           ? "no string field"
                              : ls_json_nul_escape(p, n) < n ? "a \\u0000 escape (a NUL would cut the text short)"
                                                             : NULL;
            int named = j && !v; /* the field is named where it is missing */
            /* The token count is known from here on, so steps are built without reading. */
            size_t tlen = v ? strlen(v->valuestring) : 0;
            cJSON_Delete(j);
            if (why) {
                if (strict)
                    return ls_err(LS_EFORMAT, "%s:%d: %s%s%s", s->files[f], line, why, named ? " " : "",
                                  named ? s->spec.field : "");
                if (s->skipped < MAX_WARNINGS)
                    LS_WARN("%s:%d: %s%s%s, line skipped", s->files[f], line, why, named ? " " : "",
                            named ? s->spec.field : "");
                s->skipped++;
            } else {
                LS_TRY(add_doc(s, f, (uint64_t)(p - buf), (size_t)(eol - p), tlen));
            }
        }
        p = nl ? nl + 1 : end;
    }
    return LS_OK;
}

static int map_file(ls_src *s, int f) {
    int fd;
    size_t size;
    s->maps[f].p = NULL;
    s->maps[f].len = 0;
    LS_TRY(ls_file_open_input(s->files[f], &fd, &size)); /* a FIFO is refused, not waited on */
    int rc = LS_OK;
    s->maps[f].len = size;
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED)
            rc = ls_err(LS_EIO, "%s: cannot map: %s", s->files[f], strerror(errno));
        else
            s->maps[f].p = m;
    }
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- .lstok */

typedef struct {
    char magic[8];
    uint32_t version, token_bytes;
    uint64_t n_docs, n_tokens, index_off, tok_hash, idx_hash, hdr_hash;
} tok_header;
_Static_assert(sizeof(tok_header) == TOK_HEADER, "lstok header is 64 bytes");

static int open_tokens(ls_src *s) {
    const char *path = s->files[0];
    LS_TRY(map_file(s, 0));
    const char *base = s->maps[0].p;
    size_t size = s->maps[0].len;
    tok_header h;
    if (size < sizeof h) return ls_err(LS_EFORMAT, "%s: too short for a .lstok header", path);
    memcpy(&h, base, sizeof h);
    if (memcmp(h.magic, TOK_MAGIC, 8) != 0) return ls_err(LS_EFORMAT, "%s: not a .lstok file (bad magic)", path);
    if (h.version != TOK_VERSION) return ls_err(LS_EFORMAT, "%s: unsupported .lstok version %u", path, h.version);
    if (ls_hash64(&h, offsetof(tok_header, hdr_hash)) != h.hdr_hash)
        return ls_err(LS_ECHECKSUM, "%s: header checksum mismatch", path);
    if (h.token_bytes != 2 || h.n_docs == 0 || h.n_docs >= UINT32_MAX || h.n_tokens > size ||
        h.index_off != TOK_HEADER + 2 * h.n_tokens || (uint64_t)size != h.index_off + 8 * (h.n_docs + 1))
        return ls_err(LS_EFORMAT, "%s: inconsistent .lstok sizes (%llu docs, %llu tokens, %zu bytes)", path,
                      (unsigned long long)h.n_docs, (unsigned long long)h.n_tokens, size);
    s->tok_index = malloc((h.n_docs + 1) * sizeof *s->tok_index);
    if (!s->tok_index) return ls_err(LS_ENOMEM, "out of memory");
    memcpy(s->tok_index, base + h.index_off, (h.n_docs + 1) * 8);
    if (ls_hash64(s->tok_index, (h.n_docs + 1) * 8) != h.idx_hash)
        return ls_err(LS_ECHECKSUM, "%s: index checksum mismatch", path);
    for (uint64_t i = 0; i < h.n_docs; i++)
        if (s->tok_index[i] >= s->tok_index[i + 1] || s->tok_index[i + 1] - s->tok_index[i] > MAX_DOC_BYTES)
            return ls_err(LS_EFORMAT, "%s: index entry %llu is not increasing or too long", path,
                          (unsigned long long)i);
    if (s->tok_index[0] != 0 || s->tok_index[h.n_docs] != h.n_tokens)
        return ls_err(LS_EFORMAT, "%s: index does not span the tokens", path);
    if (ls_hash64(base + TOK_HEADER, h.n_tokens * 2) != h.tok_hash)
        return ls_err(LS_ECHECKSUM, "%s: token checksum mismatch", path);
    const uint16_t *tok = (const uint16_t *)(const void *)(base + TOK_HEADER);
    for (uint64_t i = 0; i < h.n_tokens; i++)
        if (tok[i] >= LS_VOCAB)
            return ls_err(LS_EFORMAT, "%s: token %llu out of range (%u)", path, (unsigned long long)i, tok[i]);
    s->ndocs = (uint32_t)h.n_docs;
    return LS_OK;
}

/* ---------------------------------------------------------------- open / close */

int ls_src_open(ls_src **out, const ls_loader_source_spec *spec, int strict) {
    *out = NULL;
    ls_src *s = calloc(1, sizeof *s);
    if (!s) return ls_err(LS_ENOMEM, "out of memory");
    s->spec = *spec;
    int rc, in_dir = 0;
    struct stat st;
    if (stat(spec->path, &st) != 0) {
        rc = ls_err(ls_file_input_status(errno), "%s: %s", spec->path, strerror(errno));
    } else if ((in_dir = S_ISDIR(st.st_mode))) {
        rc = spec->type == LS_SRC_TOKENS ? ls_err(LS_EINVAL, "%s: a tokens source must be a .lstok file", spec->path)
                                         : list_dir(s, spec->path, 0);
    } else {
        rc = add_file(s, spec->path);
    }
    if (rc == LS_OK) {
        s->maps = calloc((size_t)(s->nfiles ? s->nfiles : 1), sizeof *s->maps);
        if (!s->maps) rc = ls_err(LS_ENOMEM, "out of memory");
    }
    if (rc == LS_OK && spec->type == LS_SRC_TOKENS) {
        rc = open_tokens(s);
    } else {
        for (int f = 0; rc == LS_OK && f < s->nfiles; f++) {
            rc = map_file(s, f);
            if (rc != LS_OK) break;
            const char *buf = s->maps[f].p;
            size_t len = s->maps[f].len;
            if (len == 0) continue;
            /* text, by train --data's rule (ls_is_binary): a binary file named as the source is
             * refused, one met in its directory skipped */
            if (ls_is_binary(buf, len)) {
                if (!in_dir)
                    rc = ls_err(LS_EFORMAT, "%s: binary data (NUL or control bytes), expected text", s->files[f]);
                else
                    LS_DEBUG("%s: skipped (binary)", s->files[f]);
                continue;
            }
            rc = spec->type == LS_SRC_JSONL ? index_jsonl(s, (uint32_t)f, buf, len, strict)
                                            : index_text(s, (uint32_t)f, buf, len);
        }
        if (rc == LS_OK && s->skipped > MAX_WARNINGS)
            LS_WARN("source '%s': %lld malformed lines skipped in all", spec->name, (long long)s->skipped);
    }
    if (rc == LS_OK && s->ndocs == 0)
        rc = ls_err(LS_EINVAL, "source '%s' (%s) has no documents", spec->name, spec->path);
    if (rc < 0) {
        ls_err_wrap(rc, "source '%s'", spec->name);
        ls_src_close(s);
        return rc;
    }
    *out = s;
    return LS_OK;
}

void ls_src_close(ls_src *s) {
    if (!s) return;
    for (int i = 0; s->maps && i < s->nfiles; i++)
        if (s->maps[i].p) munmap((void *)s->maps[i].p, s->maps[i].len);
    free(s->maps);
    for (int i = 0; i < s->nfiles; i++) free(s->files[i]);
    free(s->files);
    free(s->docs);
    free(s->tok_index);
    free(s);
}

uint32_t ls_src_ndocs(const ls_src *s) { return s->ndocs; }
int64_t ls_src_skipped(const ls_src *s) { return s->skipped; }

size_t ls_src_state_bytes(const ls_src *s) {
    size_t b = sizeof *s + s->cap * sizeof(doc_ref) + (s->tok_index ? (s->ndocs + 1) * 8 : 0) +
               (size_t)s->nfiles * sizeof(file_map);
    for (int i = 0; i < s->nfiles; i++) b += strlen(s->files[i]) + 1 + sizeof(char *);
    return b;
}

/* ---------------------------------------------------------------- reading */

void ls_src_reader_init(ls_src_reader *r) { memset(r, 0, sizeof *r); }

void ls_src_reader_free(ls_src_reader *r) {
    free(r->buf);
    free(r->tok);
    free(r->ids);
    ls_src_reader_init(r);
}

static int reserve(ls_src_reader *r, size_t bytes, size_t toks) {
    if (bytes > r->cap) {
        char *b = realloc(r->buf, bytes);
        if (!b) return ls_err(LS_ENOMEM, "out of memory");
        r->buf = b, r->cap = bytes;
    }
    if (toks > r->tok_cap) {
        uint16_t *t = realloc(r->tok, toks * sizeof *t);
        if (!t) return ls_err(LS_ENOMEM, "out of memory");
        r->tok = t, r->tok_cap = toks;
    }
    return LS_OK;
}

int ls_src_read_doc(const ls_src *s, ls_src_reader *r, uint32_t doc, int *len) {
    if (doc >= s->ndocs) return ls_err(LS_ERANGE, "source '%s': document %u out of range", s->spec.name, doc);
    if (s->spec.type == LS_SRC_TOKENS) {
        uint64_t a = s->tok_index[doc], n = s->tok_index[doc + 1] - a;
        LS_TRY(reserve(r, 0, n));
        memcpy(r->tok, s->maps[0].p + TOK_HEADER + a * 2, n * 2);
        *len = (int)n;
        return LS_OK;
    }
    const doc_ref *d = &s->docs[doc];
    const unsigned char *text = (const unsigned char *)s->maps[d->file].p + d->off;
    size_t n = d->len;
    cJSON *j = NULL;
    if (s->spec.type == LS_SRC_JSONL) {
        j = cJSON_ParseWithLength((const char *)text, d->len);
        const cJSON *v = j ? jsonl_text(j, s->spec.field) : NULL;
        if (!v) {
            cJSON_Delete(j);
            return ls_err(LS_EFORMAT, "%s: document at byte %llu changed since indexing", s->files[d->file],
                          (unsigned long long)d->off);
        }
        text = (const unsigned char *)v->valuestring;
        n = strlen(v->valuestring); /* a JSON string is never longer than its line */
    }
    LS_TRY(reserve(r, 0, n + 1));
    /* Byte-level tokenization: one token per byte, EOS closes the document. */
    for (size_t i = 0; i < n; i++) r->tok[i] = text[i];
    r->tok[n] = LS_TOK_EOS;
    *len = (int)n + 1;
    cJSON_Delete(j);
    return LS_OK;
}

/* Byte-level tokens are widened bytes: the hot loop of the loader, run at memory speed
 * (SSE2 is part of x86-64; elsewhere the compiler gets a plain loop). */
#if defined(__x86_64__) && defined(__GNUC__)
/* AVX2: half the store instructions of SSE2; picked at run time (the build is generic). */
__attribute__((target("avx2"))) static void widen_u8_avx2(const uint8_t *src, int32_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_cvtepu8_epi32(b));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i + 8), _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
    }
    for (; i < n; i++) dst[i] = src[i];
}
#define HAVE_AVX2_PATH 1
#endif

static void widen_u8(const uint8_t *src, int32_t *dst, size_t n) {
    size_t i = 0;
#ifdef HAVE_AVX2_PATH
    if (n >= 64 && __builtin_cpu_supports("avx2")) {
        widen_u8_avx2(src, dst, n);
        return;
    }
#endif
#ifdef __SSE2__
    const __m128i z = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        __m128i lo = _mm_unpacklo_epi8(b, z), hi = _mm_unpackhi_epi8(b, z);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm_unpacklo_epi16(lo, z));
        _mm_storeu_si128((__m128i *)(void *)(dst + i + 4), _mm_unpackhi_epi16(lo, z));
        _mm_storeu_si128((__m128i *)(void *)(dst + i + 8), _mm_unpacklo_epi16(hi, z));
        _mm_storeu_si128((__m128i *)(void *)(dst + i + 12), _mm_unpackhi_epi16(hi, z));
    }
#endif
    for (; i < n; i++) dst[i] = src[i];
}

static void widen_u16(const uint16_t *src, int32_t *dst, size_t n) {
    size_t i = 0;
#ifdef __SSE2__
    const __m128i z = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
        __m128i w = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm_unpacklo_epi16(w, z));
        _mm_storeu_si128((__m128i *)(void *)(dst + i + 4), _mm_unpackhi_epi16(w, z));
    }
#endif
    for (; i < n; i++) dst[i] = src[i];
}

uint32_t ls_src_doc_tokens(const ls_src *s, uint32_t doc) {
    if (s->spec.type == LS_SRC_TOKENS) return (uint32_t)(s->tok_index[doc + 1] - s->tok_index[doc]);
    return s->docs[doc].tlen + 1;
}

void ls_src_prefetch_meta(const ls_src *s, uint32_t doc) {
    if (s->spec.type == LS_SRC_TOKENS)
        __builtin_prefetch(&s->tok_index[doc]);
    else
        __builtin_prefetch(&s->docs[doc]);
}

void ls_src_prefetch(const ls_src *s, uint32_t doc, uint32_t off, int len) {
    const char *p;
    if (s->spec.type == LS_SRC_TOKENS) {
        p = s->maps[0].p + TOK_HEADER + (s->tok_index[doc] + off) * 2;
        len *= 2;
    } else {
        const doc_ref *d = &s->docs[doc];
        if (s->spec.type == LS_SRC_JSONL) off = 0, len = (int)d->len; /* parsed whole */
        p = s->maps[d->file].p + d->off + off;
    }
    if (len > 4096) len = 4096; /* the hardware prefetcher takes over on long runs */
    for (int i = 0; i < len; i += 64) __builtin_prefetch(p + i);
}

int ls_src_copy_tokens(const ls_src *s, uint32_t doc, uint32_t off, int len, int32_t *dst) {
    if (doc >= s->ndocs || len < 0 || (uint64_t)off + (uint64_t)len > ls_src_doc_tokens(s, doc))
        return ls_err(LS_ERANGE, "source '%s': tokens [%u, %u) of document %u out of range", s->spec.name, off,
                      off + (uint32_t)len, doc);
    if (s->spec.type == LS_SRC_TOKENS) {
        const uint16_t *t = (const uint16_t *)(const void *)(s->maps[0].p + TOK_HEADER) + s->tok_index[doc] + off;
        widen_u16(t, dst, (size_t)len);
        return LS_OK;
    }
    const doc_ref *d = &s->docs[doc];
    const uint8_t *text = (const uint8_t *)s->maps[d->file].p + d->off;
    cJSON *j = NULL;
    if (s->spec.type == LS_SRC_JSONL) {
        j = cJSON_ParseWithLength((const char *)text, d->len);
        const cJSON *v = j ? jsonl_text(j, s->spec.field) : NULL;
        if (!v || strlen(v->valuestring) != d->tlen) {
            cJSON_Delete(j);
            return ls_err(LS_EFORMAT, "%s: document at byte %llu changed since indexing", s->files[d->file],
                          (unsigned long long)d->off);
        }
        text = (const uint8_t *)v->valuestring;
    }
    /* Tokens [off, off+len) of text bytes then EOS (token index tlen). */
    int nb = len;
    if ((uint64_t)off + (uint64_t)len > d->tlen) nb = len - 1; /* the segment ends with EOS */
    widen_u8(text + off, dst, (size_t)nb);
    if (nb < len) dst[nb] = LS_TOK_EOS;
    cJSON_Delete(j);
    return LS_OK;
}

int ls_src_encode_doc(const ls_src *s, ls_src_reader *r, uint32_t doc, const ls_bpe *bpe, uint32_t *len) {
    int n;
    LS_TRY(ls_src_read_doc(s, r, doc, &n));
    if (n < 1) return ls_err(LS_EFORMAT, "source '%s': document %u is empty", s->spec.name, doc);
    int body = n > 0 && r->tok[n - 1] == LS_TOK_EOS ? n - 1 : n;
    int32_t *enc = NULL;
    size_t ne = (size_t)body;
    if (bpe) { /* the document's bytes (a .lstok source holds byte tokens) through the tokenizer */
        LS_TRY(reserve(r, (size_t)body + 1, 0));
        for (int i = 0; i < body; i++) {
            if (r->tok[i] > 255)
                return ls_err(LS_EFORMAT,
                              "source '%s': document %u holds token %u, not a byte, so it cannot be "
                              "tokenized again",
                              s->spec.name, doc, r->tok[i]);
            r->buf[i] = (char)r->tok[i];
        }
        LS_TRY(ls_bpe_encode_ex(bpe, r->buf, (size_t)body, LS_BPE_ORDINARY, &enc, &ne));
    }
    if (ne + 1 > r->ids_cap) {
        int32_t *g = realloc(r->ids, (ne + 1) * sizeof *g);
        if (!g) {
            free(enc);
            return ls_err(LS_ENOMEM, "out of memory");
        }
        r->ids = g, r->ids_cap = ne + 1;
    }
    if (!bpe) ne = (size_t)n - 1; /* the tokens as they are (EOS included, when the source has it) */
    for (size_t i = 0; i < ne + (bpe ? 0 : 1); i++) r->ids[i] = enc ? enc[i] : r->tok[i];
    if (bpe) r->ids[ne] = LS_TOK_EOS;
    free(enc);
    *len = (uint32_t)ne + 1;
    return LS_OK;
}

/* ---------------------------------------------------------------- tokenize */

int ls_loader_tokenize(const ls_loader_source_spec *spec, int strict, const char *out_path, int64_t *n_docs,
                       int64_t *n_tokens) {
    ls_src *s;
    LS_TRY(ls_src_open(&s, spec, strict));
    ls_src_reader r;
    ls_src_reader_init(&r);
    uint64_t *index = malloc(((size_t)s->ndocs + 1) * sizeof *index);
    XXH3_state_t *xs = XXH3_createState();
    ls_atomic_file af = {0};
    int rc = (!index || !xs) ? ls_err(LS_ENOMEM, "out of memory") : ls_atomic_open(&af, out_path);
    int opened = rc == LS_OK;
    tok_header h = {0};
    if (rc == LS_OK) {
        XXH3_64bits_reset(xs);
        if (fwrite(&h, sizeof h, 1, af.fp) != 1) rc = ls_err(LS_EIO, "%s: write failed", out_path);
    }
    uint64_t total = 0;
    for (uint32_t d = 0; rc == LS_OK && d < s->ndocs; d++) {
        int len;
        rc = ls_src_read_doc(s, &r, d, &len);
        if (rc != LS_OK) break;
        index[d] = total;
        total += (uint64_t)len;
        XXH3_64bits_update(xs, r.tok, (size_t)len * 2);
        if (fwrite(r.tok, 2, (size_t)len, af.fp) != (size_t)len) rc = ls_err(LS_EIO, "%s: write failed", out_path);
    }
    if (rc == LS_OK) {
        index[s->ndocs] = total;
        memcpy(h.magic, TOK_MAGIC, 8);
        h.version = TOK_VERSION;
        h.token_bytes = 2;
        h.n_docs = s->ndocs;
        h.n_tokens = total;
        h.index_off = TOK_HEADER + 2 * total;
        h.tok_hash = XXH3_64bits_digest(xs);
        h.idx_hash = ls_hash64(index, ((size_t)s->ndocs + 1) * 8);
        h.hdr_hash = ls_hash64(&h, offsetof(tok_header, hdr_hash));
        if (fwrite(index, 8, (size_t)s->ndocs + 1, af.fp) != (size_t)s->ndocs + 1 || fseek(af.fp, 0, SEEK_SET) != 0 ||
            fwrite(&h, sizeof h, 1, af.fp) != 1)
            rc = ls_err(LS_EIO, "%s: write failed", out_path);
    }
    if (rc == LS_OK)
        rc = ls_atomic_commit(&af);
    else if (opened)
        ls_atomic_abort(&af);
    if (rc == LS_OK) {
        if (n_docs) *n_docs = s->ndocs;
        if (n_tokens) *n_tokens = (int64_t)total;
    }
    XXH3_freeState(xs);
    free(index);
    ls_src_reader_free(&r);
    ls_src_close(s);
    return rc;
}
