/* args.h - the one option parser every llmsys command uses: --help, typed values,
 * clear usage errors (exit code 2 is the caller's job). */
#ifndef LLMSYS_CLI_ARGS_H
#define LLMSYS_CLI_ARGS_H

#include <stdint.h>

/* What an option takes. The parser refuses a value its kind does not allow with one line naming
 * the option (a usage error): checked once here, not by each command. */
typedef enum {
    LS_ARG_FLAG,      /* int*: set to 1 when present */
    LS_ARG_INT,       /* int*; within [min, max] when the entry gives a range */
    LS_ARG_I64,       /* int64_t*; likewise */
    LS_ARG_FLOAT,     /* double* */
    LS_ARG_STR,       /* const char**: points into argv */
    LS_ARG_STR_LIST,  /* ls_strlist*: one or more values up to the next --option (or repeated) */
    LS_ARG_PATH,      /* LS_ARG_STR naming a file or directory: '' is refused */
    LS_ARG_PATH_LIST, /* LS_ARG_STR_LIST of paths: '' is refused */
    LS_ARG_PORT,      /* int*: a TCP port, in [0, 65535] (0: any free one) */
    LS_ARG_BIND,      /* const char**: an address to listen on, as the service checks it (ls_bind_check) */
} ls_arg_kind;

typedef struct {
    int n;
    const char **v; /* malloc'd array of pointers into argv; free with ls_strlist_free */
} ls_strlist;

typedef struct {
    const char *name;    /* "steps" for --steps */
    ls_arg_kind kind;
    void *dst;
    const char *metavar; /* "N", "PATH", ... (NULL for flags) */
    const char *help;
    int required;
    int64_t min, max; /* LS_ARG_INT, LS_ARG_I64: the range a value must lie in (both 0: any); LS_RANGE */
    const char *choices; /* LS_ARG_STR: the values it takes, "|"-separated (NULL: any); LS_CHOICES */
} ls_arg;

/* The range of an integer option, after its `required`: {"n", LS_ARG_INT, &n, "N", "help", LS_RANGE(1, 64)}.
 * LS_MIN(lo): at least lo. A value outside is refused as "--n must be in [1, 64], got 65". */
#define LS_RANGE(lo, hi) .min = (lo), .max = (hi)
#define LS_MIN(lo) LS_RANGE(lo, INT64_MAX)
/* The values a string option takes, after its `required`: {"output", LS_ARG_STR, &out, "KIND", "help", 0,
 * LS_CHOICES("label|proba")}. Another is refused as "--output must be label or proba, got 'x'". */
#define LS_CHOICES(list) .choices = (list)

enum { LS_ARGS_OK = 0, LS_ARGS_HELP = 1, LS_ARGS_USAGE = 2 };

/* Parses argv[0..argc) (argv[0] is the command name) against spec (n entries). Values use
 * "--name V" or "--name=V". Positional arguments are allowed only when pos != NULL, and are
 * collected there (max_pos at most). On --help prints usage to stdout and returns
 * LS_ARGS_HELP; on a bad flag or value prints one line to stderr and returns
 * LS_ARGS_USAGE; either way the LS_ARG_STR_LIST values are freed. */
int ls_args_parse(const char *prog, const char *summary, const ls_arg *spec, int n, int argc, char **argv,
                  const char **pos, int max_pos, int *npos);
void ls_args_usage(const char *prog, const char *summary, const ls_arg *spec, int n);
void ls_strlist_free(ls_strlist *l);

/* Parses integers separated by any character of seps ("4,4,8"; a trailing separator is
 * allowed) into a malloc'd *out (caller frees); returns the count, or -1 when malformed. */
int ls_args_int_list(const char *s, const char *seps, int **out);
/* Parses an input shape "C,H,W", "CxHxW", "H,W" or "N" (C and H default to 1), each in
 * [1, 2^22]; returns 0, or -1 when malformed. */
int ls_args_shape(const char *s, int *c, int *h, int *w);

/* Exit code of a parse result: HELP -> 0, USAGE -> 2. */
#define LS_ARGS_EXIT(rc) ((rc) == LS_ARGS_HELP ? 0 : 2)
/* Entries of a spec array, for ls_args_parse's n. */
#define LS_NARGS(spec) ((int)(sizeof(spec) / sizeof((spec)[0])))
/* Parses without positional arguments; returns -1 to go on, else the exit code (0 after
 * --help, 2 after a usage error already reported). `if ((rc = ls_args(...)) >= 0) return rc;` */
int ls_args(const char *prog, const char *summary, const ls_arg *spec, int n, int argc, char **argv);
/* A subcommand: `llmsys <command> <name> ...` runs fn with argv[0] = name. */
typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} ls_subcmd;
/* Runs the subcommand of subs (n entries) that argv[1] names and returns its exit code.
 * Otherwise prints usage: to stdout after --help or -h (returns 0), to stderr without a
 * subcommand (returns 2); an unknown name gets one line on stderr naming the known ones,
 * and 2. */
int ls_args_subcommand(const char *prog, const ls_subcmd *subs, int n, int argc, char **argv, const char *usage);
/* A usage error found after parsing: prints "llmsys <prog>: <message>" on stderr, returns 2. */
int ls_usage_err(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "Not given", for an LS_ARG_INT (LS_ARG_I64) option whose default is a value a user could type
 * too (-1 or 0 standing for "the default" in the library): no value parses to it. */
#define LS_ARG_UNSET INT32_MIN
#define LS_ARG_UNSET64 INT64_MIN
/* After parsing such an option (*v preset to LS_ARG_UNSET or LS_ARG_UNSET64): not given, *v
 * becomes def; given, it must be >= min, else a usage error naming --name (returns 2). 0 when
 * fine. */
int ls_args_given(const char *prog, const char *name, int *v, int min, int def);
int ls_args_given64(const char *prog, const char *name, int64_t *v, int64_t min, int64_t def);

#endif
