/* test_wire.c - the pipeline message (src/serve/wire.c): a sealed message passes its check,
 * and each field a peer or the network can spoil is refused with its own message; a FORWARD
 * message's sequence table is checked against its payload on the first stage and after it. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "serve/wire.h"
#include "test.h"

enum { D = 3 }; /* d_model of the activations */

/* A FORWARD message of nseq sequences of n[i] new tokens each: the table, then the tokens
 * (first stage) or the activations; sealed. */
static size_t forward_msg(unsigned char *buf, int first, int nseq, const int *n) {
    ls_wire_hdr h = {
        .magic = LS_WIRE_MAGIC, .version = LS_WIRE_VERSION, .type = LS_MSG_FORWARD, .nseq = (uint32_t)nseq};
    size_t off = sizeof h;
    for (int i = 0; i < nseq; i++) {
        ls_engine_seq s = {.slot = i, .pos = 2 * i, .n = n[i]};
        memcpy(buf + off, &s, sizeof s);
        off += sizeof s;
        h.ntok += (uint32_t)n[i];
    }
    for (uint32_t t = 0; t < h.ntok; t++) {
        if (first) {
            int32_t tok = (int32_t)(100 + t);
            memcpy(buf + off, &tok, sizeof tok), off += sizeof tok;
        } else
            for (int c = 0; c < D; c++) {
                float a = (float)t + 0.25f * (float)c;
                memcpy(buf + off, &a, sizeof a), off += sizeof a;
            }
    }
    h.payload_bytes = off - sizeof h;
    memcpy(buf, &h, sizeof h);
    ls_wire_seal(buf, off);
    return off;
}

static void set_hdr(unsigned char *buf, size_t len, void (*edit)(ls_wire_hdr *)) {
    ls_wire_hdr h;
    memcpy(&h, buf, sizeof h);
    edit(&h);
    memcpy(buf, &h, sizeof h);
    ls_wire_seal(buf, len); /* a well-formed seal over the spoiled field */
}

static void old_version(ls_wire_hdr *h) { h->version = LS_WIRE_VERSION - 1; }
static void new_version(ls_wire_hdr *h) { h->version = LS_WIRE_VERSION + 1; }
static void bad_magic(ls_wire_hdr *h) { h->magic ^= 1; }
static void long_payload(ls_wire_hdr *h) { h->payload_bytes += 4; }
static void no_seqs(ls_wire_hdr *h) { h->nseq = 0; }

static void expect_check(const unsigned char *buf, size_t len, int code, const char *needle) {
    int rc = ls_wire_check(buf, len, "stage 1");
    CHECK_MSG(rc == code, "check gave %d (%s), want %d", rc, ls_errmsg(), code);
    CHECK_MSG(rc == LS_OK || (strstr(ls_errmsg(), needle) && strstr(ls_errmsg(), "stage 1")), "message '%s' lacks '%s'",
              ls_errmsg(), needle);
}

static void test_check(void) {
    static unsigned char buf[4096], cp[4096];
    const int n[2] = {3, 1};
    size_t len = forward_msg(buf, 1, 2, n);
    expect_check(buf, len, LS_OK, "");
    expect_check(buf, sizeof(ls_wire_hdr) - 1, LS_EFORMAT, "shorter than a header");
    /* one byte of the payload (the last token) or of the header changed in transit */
    memcpy(cp, buf, len);
    cp[len - 1] ^= 0x10;
    expect_check(cp, len, LS_ECHECKSUM, "checksum");
    memcpy(cp, buf, len);
    cp[offsetof(ls_wire_hdr, mb_id)] ^= 1;
    expect_check(cp, len, LS_ECHECKSUM, "checksum");
    /* a well-sealed message with a wrong field */
    static void (*const edits[])(ls_wire_hdr *) = {old_version, new_version, bad_magic, long_payload};
    static const char *const why[] = {"wire version 0", "wire version 2", "bad magic", "header says"};
    for (int k = 0; k < 4; k++) {
        memcpy(cp, buf, len);
        set_hdr(cp, len, edits[k]);
        expect_check(cp, len, LS_EFORMAT, why[k]);
    }
}

static void expect_parse(const unsigned char *buf, size_t len, int first, int ok) {
    const ls_engine_seq *sq = NULL;
    const void *body = NULL;
    CHECK_EQ_INT(ls_wire_check(buf, len, "front"), LS_OK);
    int rc = ls_wire_forward_parse(buf, len, first, D, &sq, &body);
    CHECK_MSG(ok ? rc == LS_OK : rc == LS_EFORMAT && strstr(ls_errmsg(), "malformed micro-batch"), "parse gave %d (%s)",
              rc, ls_errmsg());
}

static void test_forward(void) {
    static unsigned char buf[4096], cp[4096];
    const int n[3] = {2, 0, 3};
    for (int first = 0; first < 2; first++) {
        size_t len = forward_msg(buf, first, 3, n);
        const ls_engine_seq *sq = NULL;
        const void *body = NULL;
        CHECK(ls_wire_forward_parse(buf, len, first, D, &sq, &body) == LS_OK);
        CHECK(sq && sq[0].n == 2 && sq[1].n == 0 && sq[2].n == 3 && sq[2].pos == 4);
        if (first) {
            int32_t t4;
            memcpy(&t4, (const char *)body + 4 * sizeof t4, sizeof t4);
            CHECK_EQ_INT(t4, 104); /* the body starts right after the table */
        } else {
            float a;
            memcpy(&a, (const char *)body + (4 * D + 2) * sizeof a, sizeof a);
            CHECK_NEAR(a, 4.5, 0);
        }
        /* tokens where activations are due, and the other way round */
        expect_parse(buf, len, !first, 0);
        /* no sequence: with the table's tokens, and as an empty message that adds up */
        memcpy(cp, buf, len);
        set_hdr(cp, len, no_seqs);
        expect_parse(cp, len, first, 0);
        size_t le = forward_msg(cp, first, 0, n);
        CHECK(le == sizeof(ls_wire_hdr));
        expect_parse(cp, le, first, 0);
        /* n of -1 and 4 sums to the same 5 tokens: a negative count is refused by itself */
        const int neg[3] = {2, -1, 4};
        size_t ln = forward_msg(cp, first, 3, neg);
        CHECK(ln == len);
        expect_parse(cp, ln, first, 0);
        /* a payload with one token's worth more than the table says */
        memcpy(cp, buf, len);
        size_t extra = first ? sizeof(int32_t) : D * sizeof(float);
        memset(cp + len, 0, extra);
        ls_wire_hdr h;
        memcpy(&h, cp, sizeof h);
        h.payload_bytes += extra;
        memcpy(cp, &h, sizeof h);
        ls_wire_seal(cp, len + extra);
        expect_parse(cp, len + extra, first, 0);
    }
}

int main(void) {
    RUN(test_check);
    RUN(test_forward);
    return TEST_RESULT();
}
