/* cli.h - the commands and demo scenarios of the llmsys binary. Each command parses its
 * own arguments (cli/args.h), calls library modules, and returns the process exit code.
 * Only src/cli/ prints errors and exits.
 *
 * Exit codes, one rule for every command (README.md, "Exit codes"): 0 success; 2 the request
 * is wrong and nothing was done (a flag or value, or an input file or config the command line
 * names that is missing, malformed or inconsistent); 1 it failed while running. A command
 * returns through ls_cli_fail_rc(rc) while it reads and checks what the command line names
 * (its start-up), and through ls_cli_fail() once the work has started: what a peer, a
 * service or the run itself gets wrong later is 1, whatever its status code. An output that
 * cannot be written is 1 (the library reports it as LS_EIO), found before the work or not. */
#ifndef LLMSYS_CLI_H
#define LLMSYS_CLI_H

#include <stddef.h>

#include "llmsys/train.h"

/* A failure once the work has started (or one that is never the user's): prints "llmsys:
 * <message>" for the thread's last library error to stderr; returns 1. */
int ls_cli_fail(void);
/* Exit code of a library status: 0 for LS_OK, ls_cli_fail() (1) for a negative one, and
 * any other value as it is (an exit code already). */
int ls_cli_status(int rc);
/* 1 when a library error lies in what the user gave (a bad value or name, a missing, malformed
 * or corrupt file, a request its inputs cannot meet: LS_EINVAL, LS_ENOTFOUND, LS_EFORMAT,
 * LS_ERANGE, LS_ECHECKSUM, LS_EINFEASIBLE): a usage error when it is found at start-up. */
int ls_cli_input_error(int rc);
/* A failure at start-up: ls_cli_fail(), then 2 for an input error, else 1. */
int ls_cli_fail_rc(int rc);

/* commands: cmd_train.c */
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
/* cmd_serve.c */
int cmd_quantize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_profile(int argc, char **argv);
/* cmd_plan.c */
int cmd_plan(int argc, char **argv);
/* cmd_loader.c */
int cmd_loader(int argc, char **argv);
/* cmd_steal.c */
int cmd_victim(int argc, char **argv);
int cmd_steal(int argc, char **argv);
/* cmd_rl.c */
int cmd_rl(int argc, char **argv);
int cmd_sim_rl(int argc, char **argv);
/* cmd_robust.c */
int cmd_robust(int argc, char **argv);
int cmd_sim_robust(int argc, char **argv);
/* cmd_tokenizer.c */
int cmd_tokenizer(int argc, char **argv);
/* cmd_keys.c: `keys gen`; the global options before COMMAND (--keys PATH, --curve): returns
 * how many argv entries they took, or -(exit code) after printing the error */
int cmd_keys(int argc, char **argv);
int cli_security_options(int argc, char **argv);
/* cmd_sim.c */
int cmd_sim(int argc, char **argv);
/* demo.c */
int cmd_demo(int argc, char **argv);

/* Demo scenarios: each runs one system end to end under workdir (a fresh directory it may
 * fill), prints a short human summary to stdout, and returns an exit code. quick != 0 asks
 * for a reduced run (used by the test suite). */
typedef struct {
    const char *workdir;
    int quick;
} ls_demo_ctx;

int demo_core(const ls_demo_ctx *ctx);   /* cmd_train.c */
int demo_serve(const ls_demo_ctx *ctx);  /* cmd_serve.c */
int demo_plan(const ls_demo_ctx *ctx);   /* cmd_plan.c */
int demo_loader(const ls_demo_ctx *ctx); /* cmd_loader.c */
int demo_steal(const ls_demo_ctx *ctx);  /* cmd_steal.c */
int demo_rl(const ls_demo_ctx *ctx);     /* cmd_rl.c */
int demo_qsync(const ls_demo_ctx *ctx);  /* cmd_plan_train.c */
int demo_robust(const ls_demo_ctx *ctx); /* cmd_robust.c */

/* cmd_plan_train.c: `plan train` */
int plan_train(int argc, char **argv);

/* Path of the running llmsys binary (for commands that re-launch themselves: mpirun,
 * stage workers). */
const char *ls_cli_self(void);

#endif
