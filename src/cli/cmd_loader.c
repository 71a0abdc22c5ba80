/* cmd_loader.c - `llmsys loader` and the loader demo scenario. */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"

static int todo(const char *what) {
    fprintf(stderr, "llmsys %s: not built yet\n", what);
    return 1;
}

int cmd_loader(int argc, char **argv) { return todo("loader"); }
int demo_loader(const ls_demo_ctx *ctx) { return todo("demo loader"); }
