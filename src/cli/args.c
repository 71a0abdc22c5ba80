/* args.c - option parsing shared by every llmsys command. */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"

static int is_list(const ls_arg *a) { return a->kind == LS_ARG_STR_LIST || a->kind == LS_ARG_PATH_LIST; }

void ls_strlist_free(ls_strlist *l) {
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int is_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-'; }

/* Whether help names word as a whole word (not inside a longer name). */
static int names_word(const char *help, const char *word, size_t len) {
    for (const char *p = help; *p; p++)
        if (!strncmp(p, word, len) && !(p > help && is_name_char(p[-1])) && !is_name_char(p[len])) return 1;
    return 0;
}

/* A choice its help text does not name (the list grew, the hand-written help did not) is still
 * shown: " (also: x, y)". tests/cli/args.sh fails on any such line. */
static void print_unnamed_choices(const ls_arg *a) {
    int shown = 0;
    for (const char *c = a->choices; c && *c;) {
        size_t len = strcspn(c, "|");
        if (!a->help || !names_word(a->help, c, len)) printf("%s%.*s", shown++ ? ", " : " (also: ", (int)len, c);
        c += len + (c[len] == '|');
    }
    if (shown) printf(")");
}

void ls_args_usage(const char *prog, const char *summary, const ls_arg *spec, int n) {
    printf("usage: llmsys %s [options]\n", prog);
    if (summary) printf("\n%s\n", summary);
    printf("\noptions:\n");
    for (int i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s%s", spec[i].name, spec[i].metavar ? " " : "",
                 spec[i].metavar ? spec[i].metavar : "", is_list(&spec[i]) ? "..." : "");
        printf("  %-26s %s", left, spec[i].help ? spec[i].help : "");
        print_unnamed_choices(&spec[i]);
        printf("%s\n", spec[i].required ? " (required)" : "");
    }
    printf("  %-26s %s\n", "--help", "show this help and exit");
}

/* An integer option's range: its entry's, [0, 65535] for a port, or none (0 returned). */
static int arg_range(const ls_arg *a, int64_t *lo, int64_t *hi) {
    *lo = a->kind == LS_ARG_PORT ? 0 : a->min;
    *hi = a->kind == LS_ARG_PORT ? 65535 : a->max;
    return *lo || *hi;
}

/* Index of s among the "|"-separated choices, or -1. */
static int choice_index(const char *choices, const char *s) {
    size_t n = strlen(s);
    for (int i = 0; choices && *choices; i++) {
        size_t len = strcspn(choices, "|");
        if (len == n && !strncmp(choices, s, n)) return i;
        choices += len + (choices[len] == '|');
    }
    return -1;
}

/* "--name must be a, b or c, got 'x'" for a value not among a's choices. */
static int choice_err(const char *prog, const ls_arg *a, const char *val) {
    fprintf(stderr, "llmsys %s: --%s must be ", prog, a->name);
    for (const char *c = a->choices; *c;) {
        size_t len = strcspn(c, "|");
        const char *next = c + len + (c[len] == '|');
        fprintf(stderr, "%s%.*s", c == a->choices ? "" : *next ? ", " : " or ", (int)len, c);
        c = next;
    }
    fprintf(stderr, ", got '%s'\n", val);
    return LS_ARGS_USAGE;
}

static int parse_value(const char *prog, const ls_arg *a, const char *val) {
    char *end;
    int64_t lo, hi;
    errno = 0;
    switch (a->kind) {
    case LS_ARG_INT:
    case LS_ARG_PORT:
    case LS_ARG_I64: {
        long long v = strtoll(val, &end, 10);
        int i64 = a->kind == LS_ARG_I64; /* LLONG_MIN is LS_ARG_UNSET64, INT_MIN LS_ARG_UNSET */
        if (*val == '\0' || *end || errno || v == LLONG_MIN || (!i64 && (v <= INT_MIN || v > INT_MAX))) {
            fprintf(stderr, "llmsys %s: --%s expects an integer, got '%s'\n", prog, a->name, val);
            return LS_ARGS_USAGE;
        }
        if (arg_range(a, &lo, &hi) && (v < lo || v > hi)) {
            if (hi == INT64_MAX)
                fprintf(stderr, "llmsys %s: --%s must be >= %lld, got %lld\n", prog, a->name, (long long)lo, v);
            else
                fprintf(stderr, "llmsys %s: --%s must be in [%lld, %lld], got %lld\n", prog, a->name, (long long)lo,
                        (long long)hi, v);
            return LS_ARGS_USAGE;
        }
        if (i64)
            *(int64_t *)a->dst = (int64_t)v;
        else
            *(int *)a->dst = (int)v;
        return LS_ARGS_OK;
    }
    case LS_ARG_FLOAT: {
        double v = strtod(val, &end);
        if (*val == '\0' || *end || errno || !isfinite(v)) {
            fprintf(stderr, "llmsys %s: --%s expects a number, got '%s'\n", prog, a->name, val);
            return LS_ARGS_USAGE;
        }
        *(double *)a->dst = v;
        return LS_ARGS_OK;
    }
    case LS_ARG_PATH:
    case LS_ARG_PATH_LIST:
        if (!*val) {
            fprintf(stderr, "llmsys %s: --%s needs a path, got ''\n", prog, a->name);
            return LS_ARGS_USAGE;
        }
        break;
    case LS_ARG_BIND:
        if (ls_bind_check(a->name, val)) { /* the services' own rule, before any work */
            fprintf(stderr, "llmsys %s: --%s\n", prog, ls_errmsg());
            return LS_ARGS_USAGE;
        }
        break;
    case LS_ARG_STR:
        if (a->choices && choice_index(a->choices, val) < 0) return choice_err(prog, a, val);
        break;
    case LS_ARG_STR_LIST:
        break;
    case LS_ARG_FLAG:
        return LS_ARGS_USAGE; /* takes no value */
    }
    if (is_list(a)) {
        ls_strlist *l = a->dst;
        const char **nv = realloc(l->v, sizeof *nv * (size_t)(l->n + 1));
        if (!nv) {
            fprintf(stderr, "llmsys %s: out of memory\n", prog);
            return LS_ARGS_USAGE;
        }
        l->v = nv;
        l->v[l->n++] = val;
        return LS_ARGS_OK;
    }
    *(const char **)a->dst = val; /* LS_ARG_STR, LS_ARG_PATH, LS_ARG_BIND */
    return LS_ARGS_OK;
}

static int parse_args(const char *prog, const char *summary, const ls_arg *spec, int n, int argc, char **argv,
                      const char **pos, int max_pos, int *npos) {
    unsigned char seen[256] = {0};
    if (npos) *npos = 0;
    if (n > 256) n = 256;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            ls_args_usage(prog, summary, spec, n);
            return LS_ARGS_HELP;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (pos && npos && *npos < max_pos) {
                pos[(*npos)++] = arg;
                continue;
            }
            fprintf(stderr, "llmsys %s: unexpected argument '%s' (see --help)\n", prog, arg);
            return LS_ARGS_USAGE;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        int k = -1;
        for (int j = 0; j < n; j++)
            if (strlen(spec[j].name) == nl && !strncmp(spec[j].name, name, nl)) k = j;
        if (k < 0) {
            fprintf(stderr, "llmsys %s: unknown option '--%.*s' (see --help)\n", prog, (int)nl, name);
            return LS_ARGS_USAGE;
        }
        const ls_arg *a = &spec[k];
        seen[k] = 1;
        if (a->kind == LS_ARG_FLAG) {
            if (eq) {
                fprintf(stderr, "llmsys %s: --%s takes no value\n", prog, a->name);
                return LS_ARGS_USAGE;
            }
            *(int *)a->dst = 1;
            continue;
        }
        if (eq) {
            int rc = parse_value(prog, a, eq + 1);
            if (rc) return rc;
        } else {
            if (i + 1 >= argc) {
                fprintf(stderr, "llmsys %s: --%s needs a value (%s)\n", prog, a->name, a->metavar ? a->metavar : "VALUE");
                return LS_ARGS_USAGE;
            }
            int rc = parse_value(prog, a, argv[++i]);
            if (rc) return rc;
            /* a list takes every following value up to the next option */
            while (is_list(a) && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                rc = parse_value(prog, a, argv[++i]);
                if (rc) return rc;
            }
        }
    }
    for (int j = 0; j < n; j++) {
        if (spec[j].required && !seen[j]) {
            fprintf(stderr, "llmsys %s: missing required option --%s (see --help)\n", prog, spec[j].name);
            return LS_ARGS_USAGE;
        }
    }
    return LS_ARGS_OK;
}

int ls_args_parse(const char *prog, const char *summary, const ls_arg *spec, int n, int argc, char **argv,
                  const char **pos, int max_pos, int *npos) {
    int rc = parse_args(prog, summary, spec, n, argc, argv, pos, max_pos, npos);
    /* after --help or a usage error the caller returns at once: free the lists it would own */
    for (int j = 0; rc != LS_ARGS_OK && j < n; j++)
        if (is_list(&spec[j])) ls_strlist_free(spec[j].dst);
    return rc;
}

int ls_args_int_list(const char *s, const char *seps, int **out) {
    int cap = 16, n = 0;
    int *v = malloc(sizeof(int) * cap);
    if (!v) return -1;
    while (s && *s) {
        char *end;
        long x = strtol(s, &end, 10);
        /* a separator must be followed by another number, unless it is white space */
        if (end == s || (*end && !strchr(seps, *end)) || (*end && !end[1] && !isspace((unsigned char)*end)) ||
            x < INT_MIN || x > INT_MAX) {
            free(v);
            return -1;
        }
        if (n == cap) {
            int *nv = realloc(v, sizeof(int) * (cap *= 2));
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[n++] = (int)x;
        s = *end ? end + 1 : end;
    }
    *out = v;
    return n;
}

int ls_args_shape(const char *s, int *c, int *h, int *w) {
    int *v, n = ls_args_int_list(s, ",x", &v), ok = n >= 1 && n <= 3;
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) ok &= v[i] > 0 && v[i] <= (1 << 22);
    if (ok) {
        *c = n == 3 ? v[0] : 1;
        *h = n == 1 ? 1 : v[n - 2];
        *w = v[n - 1];
    }
    free(v);
    return ok ? 0 : -1;
}

int ls_args(const char *prog, const char *summary, const ls_arg *spec, int n, int argc, char **argv) {
    int rc = ls_args_parse(prog, summary, spec, n, argc, argv, NULL, 0, NULL);
    return rc ? LS_ARGS_EXIT(rc) : -1;
}

int ls_usage_err(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "llmsys %s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int ls_args_given64(const char *prog, const char *name, int64_t *v, int64_t min, int64_t def) {
    if (*v == LS_ARG_UNSET64)
        *v = def;
    else if (*v < min)
        return ls_usage_err(prog, "--%s must be >= %lld, got %lld", name, (long long)min, (long long)*v);
    return 0;
}

int ls_args_given(const char *prog, const char *name, int *v, int min, int def) {
    int64_t x = *v == LS_ARG_UNSET ? LS_ARG_UNSET64 : *v;
    int rc = ls_args_given64(prog, name, &x, min, def);
    *v = (int)x;
    return rc;
}

int ls_args_subcommand(const char *prog, const ls_subcmd *subs, int n, int argc, char **argv, const char *usage) {
    for (int i = 0; argc >= 2 && i < n; i++)
        if (!strcmp(argv[1], subs[i].name)) return subs[i].fn(argc - 1, argv + 1);
    int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (argc >= 2 && !help) {
        fprintf(stderr, "llmsys %s: unknown subcommand '%s' (", prog, argv[1]);
        for (int i = 0; i < n; i++) fprintf(stderr, "%s%s", i ? ", " : "", subs[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }
    fputs(usage, help ? stdout : stderr);
    return help ? 0 : 2;
}
