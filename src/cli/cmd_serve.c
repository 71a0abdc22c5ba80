/* cmd_serve.c - `llmsys quantize`, `serve`, `profile` and the serve demo scenario. */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"

static int todo(const char *what) {
    fprintf(stderr, "llmsys %s: not built yet\n", what);
    return 1;
}

int cmd_quantize(int argc, char **argv) { return todo("quantize"); }
int cmd_serve(int argc, char **argv) { return todo("serve"); }
int cmd_profile(int argc, char **argv) { return todo("profile"); }
int demo_serve(const ls_demo_ctx *ctx) { return todo("demo serve"); }
