/* test_copy.c - ls_file_copy (cut at max bytes) and ls_dir_copy (suffix filter, name
 * order, file cap, dot files and subdirectories skipped). */
#include <unistd.h>

#include "llmsys/core.h"
#include "test.h"

static void put(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(ls_file_write_atomic(p, text, strlen(text)) == LS_OK);
}

static int has(const char *dir, const char *name, const char *text) {
    char p[512], *d;
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (ls_file_read(p, &d, &n) != LS_OK) return 0;
    int ok = n == strlen(text) && !memcmp(d, text, n);
    free(d);
    return ok;
}

static void test_copy(void) {
    char root[] = "/tmp/llmsys-test-XXXXXX", src[600], dst[600];
    CHECK(mkdtemp(root) != NULL);
    snprintf(src, sizeof src, "%s/src/sub", root);
    CHECK(ls_mkdirs(src) == LS_OK);
    snprintf(src, sizeof src, "%s/src", root);
    snprintf(dst, sizeof dst, "%s/dst", root);
    CHECK(ls_mkdirs(dst) == LS_OK);
    put(src, "c.h", "third");
    put(src, "a.h", "first file");
    put(src, "b.h", "second");
    put(src, "z.txt", "other suffix");
    put(src, ".hidden.h", "dot file");

    char from[700], to[700];
    snprintf(from, sizeof from, "%s/a.h", src);
    snprintf(to, sizeof to, "%s/cut", root);
    CHECK(ls_file_copy(from, to, 5) == LS_OK);
    CHECK(has(root, "cut", "first"));

    int n = -1;
    CHECK(ls_dir_copy(src, dst, ".h", 2, 4, &n) == LS_OK);
    CHECK_EQ_INT(n, 2);
    CHECK(has(dst, "a.h", "firs") && has(dst, "b.h", "seco")); /* name order, cut at 4 bytes */
    CHECK(!has(dst, "c.h", "third") && !has(dst, ".hidden.h", "dot file") && !has(dst, "z.txt", "other suffix"));

    CHECK(ls_dir_copy(src, dst, NULL, 100, 1 << 20, &n) == LS_OK);
    CHECK_EQ_INT(n, 4); /* a.h b.h c.h z.txt; not the dot file, not the subdirectory */
    CHECK(has(dst, "c.h", "third") && has(dst, "z.txt", "other suffix") && !has(dst, ".hidden.h", "dot file"));

    CHECK(ls_dir_copy("/nonexistent/llmsys", dst, NULL, 1, 1, &n) == LS_ENOTFOUND);
    CHECK_EQ_INT(n, 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

int main(void) {
    RUN(test_copy);
    return TEST_RESULT();
}
