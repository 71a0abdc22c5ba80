/* cmd_steal.c - `llmsys victim`, `steal` and the steal demo scenario. */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"

static int todo(const char *what) {
    fprintf(stderr, "llmsys %s: not built yet\n", what);
    return 1;
}

int cmd_victim(int argc, char **argv) { return todo("victim"); }
int cmd_steal(int argc, char **argv) { return todo("steal"); }
int demo_steal(const ls_demo_ctx *ctx) { return todo("demo steal"); }
