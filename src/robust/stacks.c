/* stacks.c - on-demand stack dumps of ranks (eu-stack), normalised and grouped by shape so
 * the outlier group names the ranks that hang or lag. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/robust.h"

typedef struct {
    char fn[160];
    char mod[256];
} frame;

/* Drops a symbol's version (@GLIBC_2.2.5) and compiler clone suffixes (.part.0, .isra.0,
 * .constprop.0, .cold) so the same function always reads the same. */
static void clean_fn(char *s) {
    char *at = strchr(s, '@');
    if (at) *at = '\0';
    static const char *const sfx[] = {".part.", ".isra.", ".constprop.", ".cold", ".lto_priv."};
    for (int k = 0; k < 5; k++) {
        char *p = strstr(s, sfx[k]);
        if (p) *p = '\0';
    }
}

/* Frames of the first thread of an eu-stack dump ("#N 0xADDR [FUNC] [- MODULE]"). */
static int parse_frames(const char *text, frame *fr, int max) {
    int n = 0, threads = 0;
    const char *p = text;
    while (p && *p && n < max) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[1024];
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = '\0';
        p = eol ? eol + 1 : NULL;
        if (!strncmp(line, "TID ", 4)) {
            if (++threads > 1) break; /* the main thread is listed first */
            continue;
        }
        if (line[0] != '#') continue;
        char *q = line + 1;
        while (*q >= '0' && *q <= '9') q++;
        while (*q == ' ') q++;
        if (strncmp(q, "0x", 2) != 0) continue;
        while (*q && *q != ' ') q++; /* the address */
        while (*q == ' ') q++;
        frame f = {"", ""};
        if (!strncmp(q, "- ", 2)) { /* no symbol, module only */
            snprintf(f.mod, sizeof f.mod, "%.255s", q + 2);
            *q = '\0';
        }
        char *dash = strstr(q, " - ");
        if (dash) {
            snprintf(f.mod, sizeof f.mod, "%.255s", dash + 3);
            *dash = '\0';
        }
        while (*q == ' ') q++;
        snprintf(f.fn, sizeof f.fn, "%.159s", *q ? q : "?");
        char *sp = strchr(f.fn, ' ');
        if (sp) *sp = '\0';
        clean_fn(f.fn);
        fr[n++] = f;
    }
    return n;
}

char *ls_stack_normalise(const char *text, const char *exe_hint) {
    frame *fr = malloc(256 * sizeof *fr);
    if (!fr) return NULL;
    int n = text ? parse_frames(text, fr, 256) : 0;
    /* the program's module: the hint, else the one holding main() */
    const char *exe = exe_hint;
    int imain = -1, istart = -1;
    for (int i = 0; i < n; i++) {
        if (!strcmp(fr[i].fn, "main")) imain = i;
        if (!strcmp(fr[i].fn, "_start")) istart = i;
    }
    if (!exe && imain >= 0) exe = fr[imain].mod;
    if (!exe && istart >= 0) exe = fr[istart].mod;
    /* the outermost frame of the program's own code (main may be inlined away) */
    int outer = imain;
    if (outer < 0) {
        outer = n - 1;
        while (outer > 0 && exe && (strcmp(fr[outer].mod, exe) != 0 || !strcmp(fr[outer].fn, "_start"))) outer--;
    }
    /* from main inward while frames are the program's own; then the first library frame */
    int inner = outer;
    while (inner > 0 && exe && *exe && !strcmp(fr[inner - 1].mod, exe)) inner--;
    if (inner > 0 && exe && *exe) inner--;
    if (!exe || !*exe) inner = 0;
    size_t cap = 1;
    for (int i = inner; i <= outer && i >= 0; i++) cap += strlen(fr[i].fn) + 4;
    char *sig = malloc(cap);
    if (sig) {
        sig[0] = '\0';
        for (int i = inner; i <= outer && i >= 0 && n > 0; i++) {
            if (i > inner) strcat(sig, " <- ");
            strcat(sig, fr[i].fn);
        }
    }
    free(fr);
    return sig;
}

void ls_stack_groups_free(ls_stack_groups *g) {
    for (int i = 0; i < g->n_groups; i++) free(g->sig[i]);
    memset(g, 0, sizeof *g);
    g->outlier = -1;
}

int ls_stack_group(const char *const *texts, int n, const char *exe_hint, ls_stack_groups *g) {
    memset(g, 0, sizeof *g);
    g->outlier = -1;
    if (n < 1 || n > LS_SLOW_MAX_RANKS) return ls_err(LS_EINVAL, "stack grouping: %d dumps", n);
    for (int r = 0; r < n; r++) {
        char *s = texts[r] ? ls_stack_normalise(texts[r], exe_hint) : strdup("(no stack)");
        if (!s) {
            ls_stack_groups_free(g);
            return ls_err(LS_ENOMEM, "out of memory");
        }
        if (!*s) {
            free(s);
            s = strdup("(no stack)");
            if (!s) {
                ls_stack_groups_free(g);
                return ls_err(LS_ENOMEM, "out of memory");
            }
        }
        int k = 0;
        while (k < g->n_groups && strcmp(g->sig[k], s) != 0) k++;
        if (k == g->n_groups) {
            g->sig[g->n_groups++] = s;
        } else {
            free(s);
        }
        g->group_of[r] = k;
        g->size[k]++;
    }
    /* the outlier: the one smallest group, smaller than half of the ranks */
    int best = -1, ties = 0;
    for (int k = 0; k < g->n_groups; k++) {
        if (best < 0 || g->size[k] < g->size[best]) {
            best = k;
            ties = 0;
        } else if (g->size[k] == g->size[best]) {
            ties++;
        }
    }
    if (g->n_groups > 1 && !ties && 2 * g->size[best] < n) g->outlier = best;
    return LS_OK;
}

int ls_stack_dump(int pid, double timeout, char **text) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "timeout -s KILL %.0f eu-stack -m -1 -p %d 2>&1", timeout < 1 ? 1 : timeout, pid);
    FILE *f = popen(cmd, "r");
    if (!f) return ls_err(LS_EIO, "cannot run eu-stack for pid %d", pid);
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - len < 4096) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        if (got == 0) break;
        len += got;
    }
    pclose(f);
    if (!buf) return ls_err(LS_ENOMEM, "out of memory");
    buf[len] = '\0';
    *text = buf;
    return LS_OK;
}
