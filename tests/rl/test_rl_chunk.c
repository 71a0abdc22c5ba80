/* test_rl_chunk.c - weight chunks: reassembly in any order, repeats, checksum rejection,
 * inconsistent extents (more chunks than bytes too), versions going backwards, a newer version abandoning a partial
 * one. */
#include "llmsys/rl.h"
#include "test.h"

static void fill(uint8_t *b, size_t n, uint64_t seed) {
    ls_rng r;
    ls_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)ls_rng_below(&r, 256);
}

static void test_reassembly(void) {
    size_t n = 100003;
    uint8_t *blob = malloc(n);
    fill(blob, n, 1);
    ls_rl_chunk_hdr *h;
    int k;
    CHECK(ls_rl_chunk_split(3, blob, n, 4096, &h, &k) == LS_OK);
    CHECK_EQ_INT(k, (int)((n + 4095) / 4096));
    CHECK_EQ_INT(h[k - 1].len, n - 4096 * (size_t)(k - 1));
    ls_rl_asm *a;
    CHECK(ls_rl_asm_init(&a) == LS_OK);
    int order[64];
    for (int i = 0; i < k; i++) order[i] = i;
    ls_rng r;
    ls_rng_seed(&r, 9);
    ls_rng_shuffle_int(&r, order, (size_t)k);
    int done = 0;
    CHECK_EQ_INT(ls_rl_asm_partial(a), -1);
    for (int i = 0; i < k; i++) {
        int rc = ls_rl_asm_add(a, &h[order[i]], blob + h[order[i]].offset);
        CHECK(rc >= 0);
        if (i < k - 1) CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(ls_rl_asm_partial(a), i < k - 1 ? 3 : -1); /* assembling version 3 until it completes */
        if (i == 2) CHECK_EQ_INT(ls_rl_asm_add(a, &h[order[0]], blob + h[order[0]].offset), 0); /* repeat */
        done |= rc == 1;
    }
    CHECK(done);
    const void *d;
    size_t len;
    CHECK_EQ_INT(ls_rl_asm_latest(a, &d, &len), 3);
    CHECK_EQ_INT(len, n);
    CHECK(len == n && memcmp(d, blob, n) == 0);
    /* the same version again is harmless; an older one goes backwards */
    CHECK_EQ_INT(ls_rl_asm_add(a, &h[0], blob), 0);
    ls_rl_chunk_hdr old = h[0];
    old.version = 2;
    CHECK_EQ_INT(ls_rl_asm_add(a, &old, blob), LS_ERANGE);
    fprintf(stderr, "  backwards: %s\n", ls_errmsg());
    free(h);
    ls_rl_asm_free(a);
    free(blob);
}

static void test_rejection(void) {
    size_t n = 50000;
    uint8_t *blob = malloc(n), *bad = malloc(4096);
    fill(blob, n, 2);
    ls_rl_chunk_hdr *h;
    int k;
    CHECK(ls_rl_chunk_split(5, blob, n, 4096, &h, &k) == LS_OK);
    ls_rl_asm *a;
    CHECK(ls_rl_asm_init(&a) == LS_OK);
    /* a flipped byte */
    memcpy(bad, blob + h[1].offset, (size_t)h[1].len);
    bad[100] ^= 1;
    CHECK_EQ_INT(ls_rl_asm_add(a, &h[1], bad), LS_ECHECKSUM);
    fprintf(stderr, "  corrupt: %s\n", ls_errmsg());
    /* extents beyond the blob, index beyond count */
    ls_rl_chunk_hdr x = h[2];
    x.offset = n - 10;
    CHECK_EQ_INT(ls_rl_asm_add(a, &x, blob + h[2].offset), LS_EFORMAT);
    x = h[2];
    x.index = (uint32_t)k;
    CHECK_EQ_INT(ls_rl_asm_add(a, &x, blob + h[2].offset), LS_EFORMAT);
    /* more chunks than bytes (each chunk holds one at least): refused before anything is allocated */
    x = h[0];
    x.count = (uint32_t)n + 1;
    CHECK_EQ_INT(ls_rl_asm_add(a, &x, blob), LS_EFORMAT);
    /* a chunk whose version hash disagrees with the version's other chunks */
    CHECK_EQ_INT(ls_rl_asm_add(a, &h[0], blob), 0);
    x = h[3];
    x.version_hash ^= 1;
    CHECK_EQ_INT(ls_rl_asm_add(a, &x, blob + h[3].offset), LS_EFORMAT);
    /* all chunks checked but the whole checksum wrong: chunks of a different blob under a forged hash */
    for (int i = 0; i < k; i++) {
        x = h[i];
        x.version = 6;
        x.version_hash = 12345;
        int rc = ls_rl_asm_add(a, &x, blob + h[i].offset);
        if (i < k - 1)
            CHECK_EQ_INT(rc, 0);
        else
            CHECK_EQ_INT(rc, LS_ECHECKSUM);
    }
    CHECK_EQ_INT(ls_rl_asm_latest(a, NULL, NULL), -1);
    /* a newer version abandons the partial one; the older partial's chunks are then skipped */
    ls_rl_chunk_hdr *h8;
    int k8;
    CHECK(ls_rl_chunk_split(8, blob, n, 4096, &h8, &k8) == LS_OK);
    CHECK_EQ_INT(ls_rl_asm_add(a, &h[0], blob), 0);
    int last = 0;
    for (int i = 0; i < k8; i++) last = ls_rl_asm_add(a, &h8[i], blob + h8[i].offset);
    CHECK_EQ_INT(last, 1);
    CHECK_EQ_INT(ls_rl_asm_latest(a, NULL, NULL), 8);
    CHECK_EQ_INT(ls_rl_asm_add(a, &h[1], blob + h[1].offset), LS_ERANGE);
    /* while version 10 (other bytes, same size) is assembled, a chunk of version 9 (newer than
     * the held 8, older than the partial 10) is skipped: version 10 completes with its own bytes */
    uint8_t *blob2 = malloc(n);
    fill(blob2, n, 3);
    ls_rl_chunk_hdr *h9, *h10;
    int k9, k10;
    CHECK(ls_rl_chunk_split(9, blob, n, 4096, &h9, &k9) == LS_OK);
    CHECK(ls_rl_chunk_split(10, blob2, n, 4096, &h10, &k10) == LS_OK);
    CHECK_EQ_INT(ls_rl_asm_add(a, &h10[0], blob2), 0);
    CHECK_EQ_INT(ls_rl_asm_add(a, &h9[1], blob + h9[1].offset), 0);
    for (int i = 1; i < k10; i++) last = ls_rl_asm_add(a, &h10[i], blob2 + h10[i].offset);
    CHECK_EQ_INT(last, 1);
    const void *d10;
    size_t n10;
    CHECK_EQ_INT(ls_rl_asm_latest(a, &d10, &n10), 10);
    CHECK(n10 == n && memcmp(d10, blob2, n) == 0);
    free(h9), free(h10), free(blob2);
    free(h), free(h8);
    ls_rl_asm_free(a);
    free(blob), free(bad);
}

int main(void) {
    RUN(test_reassembly);
    RUN(test_rejection);
    return TEST_RESULT();
}
