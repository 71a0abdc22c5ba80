/* bench_bin.h - benchmarks that start llmsys processes find the binary next to their own. */
#ifndef LLMSYS_BENCH_BIN_H
#define LLMSYS_BENCH_BIN_H

#include <libgen.h>
#include <stdio.h>
#include <unistd.h>

#include "llmsys/core.h"

/* given (from --llmsys) or <this binary's directory>/llmsys, in buf; NULL (after one line on
 * stderr naming prog) when that is not a file. */
static const char *bench_llmsys_bin(const char *prog, const char *given, char *buf, size_t n) {
    if (!given) {
        char self[4096];
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0) return NULL;
        self[k] = '\0';
        snprintf(buf, n, "%s/llmsys", dirname(self));
        given = buf;
    }
    if (!ls_is_file(given)) {
        fprintf(stderr, "%s: no llmsys binary at %s (use --llmsys)\n", prog, given);
        return NULL;
    }
    return given;
}

#endif
