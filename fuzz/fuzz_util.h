/* fuzz_util.h - shared by the libFuzzer targets: quiet logging and a per-process scratch file
 * for parsers that read a path. */
#ifndef LLMSYS_FUZZ_UTIL_H
#define LLMSYS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "llmsys/core.h"

/* Silences the library's log (errors are the expected outcome of most inputs). */
static inline void fuzz_quiet(void) { ls_log_set_level(LS_LOG_OFF); }

static char fuzz_path_[128];

/* Writes data to a scratch file named after this process and ext; returns its path. */
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *ext) {
    snprintf(fuzz_path_, sizeof fuzz_path_, "/tmp/llmsys-fuzz-%d%s", (int)getpid(), ext);
    FILE *f = fopen(fuzz_path_, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return fuzz_path_;
}

/* Removes the scratch file (if any). */
static inline void fuzz_file_done(void) {
    if (fuzz_path_[0]) unlink(fuzz_path_);
}

/* The input as a NUL-terminated string (malloc'd). */
static inline char *fuzz_str(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    for (size_t i = 0; i < size; i++) s[i] = (char)data[i];
    s[size] = '\0';
    return s;
}

#endif
