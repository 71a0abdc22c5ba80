/* cmd_train.c - `llmsys train`, `eval`, `generate` and the core demo scenario. */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"

static int todo(const char *what) {
    fprintf(stderr, "llmsys %s: not built yet\n", what);
    return 1;
}

int cmd_train(int argc, char **argv) { return todo("train"); }
int cmd_eval(int argc, char **argv) { return todo("eval"); }
int cmd_generate(int argc, char **argv) { return todo("generate"); }
int demo_core(const ls_demo_ctx *ctx) { return todo("demo core"); }
