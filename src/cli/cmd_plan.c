/* cmd_plan.c - `llmsys plan` and the plan demo scenario. */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"

static int todo(const char *what) {
    fprintf(stderr, "llmsys %s: not built yet\n", what);
    return 1;
}

int cmd_plan(int argc, char **argv) { return todo("plan"); }
int demo_plan(const ls_demo_ctx *ctx) { return todo("demo plan"); }
