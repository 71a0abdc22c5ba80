/* utf8.c - the text of generated tokens for clients that need valid UTF-8: a token may end inside
 * a character (bytes, or a BPE token that splits one), so streaming waits for the character to
 * complete and anything invalid is shown as U+FFFD. */
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "text/internal.h"

/* Bytes of token id (specials and unknown ids: none). */
static const uint8_t *bytes_of(const ls_bpe *t, int id, size_t *n, uint8_t *one) {
    *n = ls_text_token_bytes(t, id);
    if (!*n) return NULL;
    if (t) return t->tok[id].bytes;
    *one = (uint8_t)id;
    return one;
}

/* Length of a valid UTF-8 sequence starting at s[0] (n bytes available), or 0. */
static int seq_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    int need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!need || (size_t)need > n) return 0;
    for (int k = 1; k < need; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return need;
}

char *ls_text_utf8(const ls_bpe *t, const int *ids, int a, int b) {
    size_t total = 0, n;
    uint8_t one;
    for (int i = a; i < b; i++) total += ls_text_token_bytes(t, ids[i]);
    uint8_t *raw = malloc(total + 1);
    char *s = malloc(3 * total + 1);
    if (!raw || !s) {
        free(raw);
        free(s);
        return NULL;
    }
    size_t o = 0;
    for (int i = a; i < b; i++) {
        const uint8_t *p = bytes_of(t, ids[i], &n, &one);
        if (p) memcpy(raw + o, p, n), o += n;
    }
    size_t w = 0;
    for (size_t i = 0; i < o;) {
        int k = seq_len(raw + i, o - i);
        if (!k) {
            memcpy(s + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        } else {
            memcpy(s + w, raw + i, (size_t)k);
            w += (size_t)k;
            i += (size_t)k;
        }
    }
    s[w] = '\0';
    free(raw);
    return s;
}

/* Length of the longest prefix of b[0..n) that does not end inside a character: a trailing
 * incomplete sequence waits for more bytes. */
static size_t complete_prefix(const uint8_t *b, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 3 && (b[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i == 0) return n;
    uint8_t c = b[i - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return n - (i - 1) < need ? i - 1 : n;
}

int ls_text_utf8_ready(const ls_bpe *t, const int *ids, int a, int b, int final) {
    if (final || b <= a) return b;
    size_t total = 0, n;
    uint8_t one;
    for (int i = a; i < b; i++) total += ls_text_token_bytes(t, ids[i]);
    uint8_t *raw = malloc(total + 1);
    size_t *end = malloc(sizeof(size_t) * (size_t)(b - a));
    if (!raw || !end) { /* cannot tell: hold everything back until the end */
        free(raw);
        free(end);
        return a;
    }
    size_t o = 0;
    for (int i = a; i < b; i++) {
        const uint8_t *p = bytes_of(t, ids[i], &n, &one);
        if (p) memcpy(raw + o, p, n), o += n;
        end[i - a] = o;
    }
    size_t r = complete_prefix(raw, o);
    int k = a; /* the last token boundary at or before r */
    for (int i = a; i < b; i++)
        if (end[i - a] <= r) k = i + 1;
    free(raw);
    free(end);
    return k;
}
