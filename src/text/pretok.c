/* pretok.c - the GPT-2 pre-tokenizer over UTF-8 with Unicode letter/number classes: the pieces of
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matched leftmost-first as the regular expression would, without a regex engine. Bytes that are
 * not valid UTF-8 count as one "other" character each. */
#include <string.h>

#include "llmsys/tokenizer.h"
#include "text/unicode_tables.h"

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

static int in_ranges(const uint32_t (*tab)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < tab[mid][0]) hi = mid - 1;
        else if (cp > tab[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Unicode White_Space (the \s of the Oniguruma patterns tokenizer.json files are written for). */
static int is_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static int cls(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return C_LETTER;
        if (cp >= '0' && cp <= '9') return C_NUMBER;
        return is_space(cp) ? C_SPACE : C_OTHER;
    }
    if (cp == UINT32_MAX) return C_OTHER; /* an invalid byte */
    if (is_space(cp)) return C_SPACE;
    if (in_ranges(ls_uni_letter, (int)(sizeof ls_uni_letter / sizeof ls_uni_letter[0]), cp)) return C_LETTER;
    if (in_ranges(ls_uni_number, (int)(sizeof ls_uni_number / sizeof ls_uni_number[0]), cp)) return C_NUMBER;
    return C_OTHER;
}

/* Decodes the character at s[i] (i < n): its length in bytes; *cp = UINT32_MAX for a byte that
 * does not start a valid, shortest-form, non-surrogate sequence. */
static size_t utf8_at(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
    unsigned c = s[i];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if ((c & 0xE0) == 0xC0) len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, v = c & 0x07, min = 0x10000;
    else goto bad;
    if (i + len > n) goto bad;
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (s[i + k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) goto bad;
    *cp = v;
    return len;
bad:
    *cp = UINT32_MAX;
    return 1;
}

static int class_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
    uint32_t cp;
    *len = utf8_at(s, n, i, &cp);
    return cls(cp);
}

size_t ls_bpe_piece_end(const char *text, size_t n, size_t i) {
    const unsigned char *s = (const unsigned char *)text;
    static const char *const contractions[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    if (s[i] == '\'')
        for (size_t k = 0; k < sizeof contractions / sizeof contractions[0]; k++) {
            size_t m = strlen(contractions[k]);
            if (i + 1 + m <= n && !memcmp(s + i + 1, contractions[k], m)) return i + 1 + m;
        }
    size_t len, j = i;
    int c = class_at(s, n, i, &len);
    if (s[i] == ' ' && i + 1 < n) { /* " ?" before a letter, number or other run */
        size_t len2;
        int c2 = class_at(s, n, i + 1, &len2);
        if (c2 != C_SPACE) j = i + 1, c = c2, len = len2;
    }
    if (c != C_SPACE) { /* a run of one class */
        j += len;
        while (j < n && class_at(s, n, j, &len) == c) j += len;
        return j;
    }
    /* whitespace: \s+(?!\S) leaves the last space of a run to the word that follows it */
    size_t last = i;
    while (j < n && class_at(s, n, j, &len) == C_SPACE) last = j, j += len;
    if (j == n || last == i) return j;
    return last;
}
