/* test_loader_data.c - sources, mix configs, mixing exactness, no loss / no repeat across
 * weight changes and resume, batch layout and encoding, bad input. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "loader/loader_internal.h"
#include "test.h"

static char dir[256];

static void write_file(const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK_EQ_INT(ls_file_write_atomic(p, text, strlen(text)), 0);
}

/* Three sources: blank-line paragraphs of varied length, one-doc-per-file "code", and
 * short JSONL arithmetic with two malformed lines. */
static void make_data(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/prose", dir);
    CHECK_EQ_INT(ls_mkdirs(p), 0);
    snprintf(p, sizeof p, "%s/code", dir);
    CHECK_EQ_INT(ls_mkdirs(p), 0);
    ls_rng r;
    ls_rng_seed(&r, 3);
    char *buf = malloc(1 << 16);
    for (int f = 0; f < 3; f++) {
        int o = 0;
        for (int d = 0; d < 20; d++) {
            int len = 5 + (int)ls_rng_below(&r, 200);
            for (int i = 0; i < len; i++) buf[o++] = (char)('a' + (f * 7 + d + i) % 26);
            o += sprintf(buf + o, "\n\n  \n");
        }
        buf[o] = 0;
        snprintf(p, sizeof p, "prose/p%d.txt", f);
        write_file(p, buf);
    }
    for (int f = 0; f < 12; f++) {
        int len = 50 + (int)ls_rng_below(&r, 3000), o = 0;
        for (int i = 0; i < len; i++) buf[o++] = (char)('A' + (f + i) % 26);
        buf[o] = 0;
        snprintf(p, sizeof p, "code/h%02d.h", f);
        write_file(p, buf);
    }
    write_file("code/empty.h", "  \n\n");
    int o = 0;
    for (int i = 0; i < 150; i++) {
        if (i == 10) o += sprintf(buf + o, "{\"text\": \"broken\n");
        if (i == 20) o += sprintf(buf + o, "{\"other\": 1}\n");
        o += sprintf(buf + o, "{\"text\": \"%d+%d=%d\", \"id\": %d}\n", i, i * 3, i * 4, i);
    }
    buf[o] = 0;
    write_file("math.jsonl", buf);
    free(buf);
}

static const char *MIX =
    "{\"n_ctx\": 64, \"tokens_per_rank\": 256, \"micro_batches\": 2, \"seed\": 5, \"cost\": {\"a\": 1, \"b\": 64},"
    " \"sources\": [{\"name\": \"prose\", \"path\": \"prose\", \"split\": \"blank\", \"weight\": 0.5},"
    "              {\"name\": \"code\", \"path\": \"code\", \"weight\": 0.3},"
    "              {\"name\": \"math\", \"type\": \"jsonl\", \"path\": \"math.jsonl\", \"weight\": 0.2}]}";

static void test_sources_and_config(void) {
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_parse(MIX, dir, &mix), 0);
    CHECK_EQ_INT(mix.n_sources, 3);
    CHECK_EQ_INT(mix.n_ctx, 64);
    CHECK(mix.src[1].split == LS_SPLIT_FILE && mix.src[0].split == LS_SPLIT_BLANK);
    ls_loader *ld;
    ls_loader_opts o = {0, 8};
    CHECK_EQ_INT(ls_loader_open(&ld, &mix, 2, &o), 0);
    CHECK_EQ_INT(ls_loader_source_docs(ld, 0), 60);  /* 3 files x 20 paragraphs */
    CHECK_EQ_INT(ls_loader_source_docs(ld, 1), 12);  /* empty.h is not a document */
    CHECK_EQ_INT(ls_loader_source_docs(ld, 2), 150); /* two malformed lines skipped */
    CHECK_EQ_INT(ls_loader_source_skipped(ld, 2), 2);
    CHECK(ls_loader_state_bytes(ld) > 0);
    ls_loader_close(ld);
    /* strict: the malformed line is an error naming file and line. */
    mix.strict = 1;
    CHECK(ls_loader_open(&ld, &mix, 2, &o) == LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "math.jsonl:11") != NULL, "%s", ls_errmsg());
    mix.strict = 0;
    /* a \u0000 escape would end the decoded text at the NUL: the line is skipped (strict: an
     * error naming it); an escaped backslash before u0000 is text */
    write_file("nul.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"a\\u0000b\"}\n{\"text\": \"a\\\\u0000b\"}\n");
    char nj[512];
    snprintf(nj, sizeof nj,
             "{\"n_ctx\": 64, \"sources\": [{\"name\": \"n\", \"type\": \"jsonl\", \"path\": \"nul.jsonl\"}]}");
    ls_loader_mix mn;
    CHECK_EQ_INT(ls_loader_mix_parse(nj, dir, &mn), 0);
    CHECK_EQ_INT(ls_loader_open(&ld, &mn, 1, &o), 0);
    CHECK_EQ_INT(ls_loader_source_docs(ld, 0), 2);
    CHECK_EQ_INT(ls_loader_source_skipped(ld, 0), 1);
    ls_loader_close(ld);
    mn.strict = 1;
    CHECK(ls_loader_open(&ld, &mn, 1, &o) == LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "nul.jsonl:2: a \\u0000 escape") != NULL, "%s", ls_errmsg());
    ls_loader_mix_free(&mn);
    /* .lstok round trip: same documents and tokens as the text source. */
    char tok[512];
    snprintf(tok, sizeof tok, "%s/code.lstok", dir);
    int64_t nd, nt;
    CHECK_EQ_INT(ls_loader_tokenize(&mix.src[1], 0, tok, &nd, &nt), 0);
    CHECK_EQ_INT(nd, 12);
    char js[1024];
    snprintf(js, sizeof js,
             "{\"n_ctx\": 64, \"sources\": [{\"name\": \"a\", \"path\": \"code\"}, {\"name\": \"b\", \"type\": "
             "\"tokens\", \"path\": \"code.lstok\"}]}");
    ls_loader_mix m2;
    CHECK_EQ_INT(ls_loader_mix_parse(js, dir, &m2), 0);
    CHECK_EQ_INT(ls_loader_open(&ld, &m2, 1, &o), 0);
    CHECK_EQ_INT(ls_loader_source_docs(ld, 1), 12);
    ls_loader_close(ld);
    /* Corrupt one token byte: checksum error. */
    char *data;
    size_t len;
    CHECK_EQ_INT(ls_file_read(tok, &data, &len), 0);
    data[100] ^= 1;
    CHECK_EQ_INT(ls_file_write_atomic(tok, data, len), 0);
    CHECK(ls_loader_open(&ld, &m2, 1, &o) == LS_ECHECKSUM);
    data[0] = 'X';
    CHECK_EQ_INT(ls_file_write_atomic(tok, data, len), 0);
    CHECK(ls_loader_open(&ld, &m2, 1, &o) == LS_EFORMAT);
    free(data);
    ls_loader_mix_free(&m2);
    ls_loader_mix_free(&mix);
}

static void test_bad_configs(void) {
    ls_loader_mix m;
    const char *bad[] = {
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\", \"weight\": -1}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\", \"weight\": 0}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\", \"weight\": 1e999}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}], \"schedule\": [{\"step\": 0, \"weights\": {\"zz\": "
        "1}}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}], \"schedule\": [{\"step\": 0, \"weights\": {\"a\": "
        "0}}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}, {\"name\": \"a\", \"path\": \"code\"}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\", \"type\": \"parquet\"}]}",
        "{\"sources\": []}",
        "{\"n_ctx\": 1, \"sources\": [{\"name\": \"a\", \"path\": \"code\"}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}], \"balance\": \"magic\"}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\", \"weight\": NaN}]}",
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}], \"schedule\": [{\"step\": 4, \"weights\": {\"a\": "
        "1}}, {\"step\": 4, \"weights\": {\"a\": 2}}]}", /* two points at one step */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = ls_loader_mix_parse(bad[i], dir, &m);
        CHECK_MSG(rc < 0, "config %zu accepted", i);
        if (rc == 0) ls_loader_mix_free(&m);
    }
    double w[3] = {1, NAN, 0};
    CHECK(ls_loader_weights_check(w, 3, "w") == LS_EINVAL);
    /* Missing path and empty source fail at open with the path in the message. */
    CHECK_EQ_INT(ls_loader_mix_parse("{\"sources\": [{\"name\": \"a\", \"path\": \"nope\"}]}", dir, &m), 0);
    ls_loader *ld;
    CHECK(ls_loader_open(&ld, &m, 1, NULL) == LS_ENOTFOUND);
    CHECK(strstr(ls_errmsg(), "nope") != NULL);
    ls_loader_mix_free(&m);
    write_file("empty.txt", "\n\n   \n");
    CHECK_EQ_INT(ls_loader_mix_parse(
                     "{\"sources\": [{\"name\": \"e\", \"path\": \"empty.txt\", \"split\": \"blank\"}]}", dir, &m),
                 0);
    CHECK(ls_loader_open(&ld, &m, 1, NULL) == LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "no documents") != NULL);
    ls_loader_mix_free(&m);
}

static void test_schedule(void) {
    ls_loader_mix m;
    const char *js = "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}, {\"name\": \"b\", \"path\": \"code\"}],"
                     " \"schedule\": [{\"step\": 100, \"weights\": {\"a\": 3, \"b\": 1}}, {\"step\": 0, \"weights\": "
                     "{\"a\": 1, \"b\": 1}}]}";
    CHECK_EQ_INT(ls_loader_mix_parse(js, dir, &m), 0);
    double w[2];
    ls_loader_mix_weights_at(&m, 0, w);
    CHECK_NEAR(w[0], 0.5, 1e-12);
    ls_loader_mix_weights_at(&m, 50, w);
    CHECK_NEAR(w[0], 0.625, 1e-12);
    CHECK_NEAR(w[0] + w[1], 1, 1e-12);
    ls_loader_mix_weights_at(&m, 1000, w);
    CHECK_NEAR(w[0], 0.75, 1e-12);
    ls_loader_mix_free(&m);
    /* points at 100 and 300: step 200 is halfway, (0.5 + 0.75) / 2; step 150 a quarter */
    const char *js2 =
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}, {\"name\": \"b\", \"path\": \"code\"}],"
        " \"schedule\": [{\"step\": 100, \"weights\": {\"a\": 1, \"b\": 1}}, {\"step\": 300, \"weights\": "
        "{\"a\": 3, \"b\": 1}}]}";
    CHECK_EQ_INT(ls_loader_mix_parse(js2, dir, &m), 0);
    ls_loader_mix_weights_at(&m, 200, w);
    CHECK_NEAR(w[0], 0.625, 1e-12);
    ls_loader_mix_weights_at(&m, 150, w);
    CHECK_NEAR(w[0], 0.75 * 0.5 + 0.25 * 0.75, 1e-12);
    ls_loader_mix_free(&m);
}

/* A source's order in each epoch is a uniformly random permutation: over 6,000 epochs of 3
 * documents each of the 6 orders comes up 1,000 times on average (a bound of +-200 is over 6
 * standard deviations); a single-cycle shuffle would give only 2 of them. */
static void test_perm_uniform(void) {
    int seen[27] = {0};
    for (uint64_t e = 0; e < 6000; e++) {
        uint32_t p[3];
        ls_loader_perm(42, 1, e, p, 3);
        CHECK(p[0] < 3 && p[1] < 3 && p[2] < 3 && p[0] != p[1] && p[1] != p[2] && p[0] != p[2]);
        seen[p[0] * 9 + p[1] * 3 + p[2]]++;
    }
    static const int orders[6] = {0 * 9 + 1 * 3 + 2, 0 * 9 + 2 * 3 + 1, 1 * 9 + 0 * 3 + 2,
                                  1 * 9 + 2 * 3 + 0, 2 * 9 + 0 * 3 + 1, 2 * 9 + 1 * 3 + 0};
    for (int i = 0; i < 6; i++)
        CHECK_MSG(seen[orders[i]] > 800 && seen[orders[i]] < 1200, "order %d drawn %d times of 6000", orders[i],
                  seen[orders[i]]);
}

/* Hash of everything a trainer sees for a step: every rank's tokens, doc ids, segments. */
static uint64_t step_hash(const ls_loader_step *st) {
    uint64_t h = 0;
    for (int r = 0; r < st->n_ranks; r++) {
        ls_loader_batch b;
        CHECK_EQ_INT(ls_loader_step_batch(st, r, &b), 0);
        uint64_t v[4] = {h, ls_hash64(b.tokens, (size_t)b.n_rows * b.n_ctx * 4),
                         ls_hash64(b.doc_ids, (size_t)b.n_rows * b.n_ctx * 4),
                         ls_hash64(b.segs, (size_t)b.n_segs * sizeof *b.segs)};
        h = ls_hash64(v, sizeof v);
        ls_loader_batch_free(&b);
    }
    return h;
}

/* Records which tokens of which (source, epoch, doc) were served. */
typedef struct {
    int64_t covered[3][4][160]; /* tokens served per source / epoch / doc */
    int64_t next_off[3][4][160];
    int overlap, gap;
} coverage;

static void cover(coverage *c, const ls_loader_step *st) {
    for (int i = 0; i < st->n_items; i++) {
        const ls_loader_seg *g = &st->items[i];
        if (g->epoch >= 4) continue;
        int64_t *no = &c->next_off[g->source][g->epoch][g->doc];
        if ((int64_t)g->doc_off != *no) {
            if ((int64_t)g->doc_off < *no)
                c->overlap++;
            else
                c->gap++;
        }
        *no = g->doc_off + g->len;
        c->covered[g->source][g->epoch][g->doc] += g->len;
    }
}

static void test_mixing_and_resume(void) {
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_parse(MIX, dir, &mix), 0);
    enum { STEPS = 60, CUT = 23, CHANGE = 30, R = 3 };
    ls_loader *a, *b;
    ls_loader_opts inl = {0, 4}, thr = {1, 4};
    CHECK_EQ_INT(ls_loader_open(&a, &mix, R, &inl), 0);
    double nw[3] = {0.1, 0.1, 0.8};
    CHECK_EQ_INT(ls_loader_set_weights(a, nw, CHANGE), 0);
    uint64_t ref[STEPS];
    static coverage cov;
    memset(&cov, 0, sizeof cov);
    int64_t G = (int64_t)mix.tokens_per_rank * R, tot[3] = {0};
    double tgt[3] = {0};
    int tight = 1;
    for (int s = 0; s < STEPS; s++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(a, &st), 0);
        int64_t sum = 0;
        for (int k = 0; k < 3; k++) {
            sum += st->source_tokens[k];
            tot[k] += st->source_tokens[k];
            tgt[k] += st->weights[k] * G;
            /* Per step within one segment (n_ctx) of the target, plus carried deficit. */
            if (fabs((double)st->source_tokens[k] - st->weights[k] * G) > 2 * mix.n_ctx) tight = 0;
        }
        CHECK_EQ_INT(sum, G);
        if (s == CHANGE) CHECK_NEAR(st->weights[2], 0.8, 1e-12);
        if (s == CHANGE - 1) CHECK_NEAR(st->weights[2], 0.2, 1e-12);
        cover(&cov, st);
        ref[s] = step_hash(st);
        ls_loader_step_free(st);
    }
    CHECK(tight);
    for (int k = 0; k < 3; k++)
        CHECK_MSG(fabs(tot[k] - tgt[k]) <= mix.n_ctx, "source %d: %lld tokens vs target %.1f", k, (long long)tot[k],
                  tgt[k]);
    /* No token served twice or skipped within a document, and every epoch-0 document of a
     * source that wrapped was served entirely. */
    CHECK_EQ_INT(cov.overlap, 0);
    CHECK_EQ_INT(cov.gap, 0);
    ls_loader_close(a);

    /* Interrupted run: steps [0, CUT) with threads, save, reopen, restore, continue. */
    CHECK_EQ_INT(ls_loader_open(&b, &mix, R, &thr), 0);
    CHECK_EQ_INT(ls_loader_set_weights(b, nw, CHANGE), 0);
    for (int s = 0; s < CUT; s++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(b, &st), 0);
        CHECK(step_hash(st) == ref[s]);
        ls_loader_step_free(st);
    }
    uint8_t *blob;
    size_t blen;
    CHECK_EQ_INT(ls_loader_get_state(b, &blob, &blen), 0);
    CHECK(blen < 400);
    CHECK(ls_loader_set_weights(b, nw, 5) == LS_ESTATE); /* the past is immutable */
    /* two changes for one step: the later call wins (a stable insert, engine.c) */
    {
        ls_loader *c;
        double w1[3] = {0.5, 0.25, 0.25}, w2[3] = {0.25, 0.25, 0.5};
        CHECK_EQ_INT(ls_loader_open(&c, &mix, R, &inl), 0);
        CHECK_EQ_INT(ls_loader_set_weights(c, w1, 2), 0);
        CHECK_EQ_INT(ls_loader_set_weights(c, w2, 2), 0);
        for (int s = 0; s < 3; s++) {
            ls_loader_step *st;
            CHECK_EQ_INT(ls_loader_next_step(c, &st), 0);
            if (s == 2) CHECK_NEAR(st->weights[2], 0.5, 1e-12);
            ls_loader_step_free(st);
        }
        ls_loader_close(c);
    }
    ls_loader_close(b);
    CHECK_EQ_INT(ls_loader_open(&b, &mix, R, &thr), 0);
    /* Corrupt and foreign blobs are refused, loader unchanged. */
    blob[20] ^= 0x40;
    CHECK(ls_loader_set_state(b, blob, blen) == LS_ECHECKSUM);
    blob[20] ^= 0x40;
    CHECK(ls_loader_set_state(b, blob, blen - 3) < 0);
    ls_loader *other;
    CHECK_EQ_INT(ls_loader_open(&other, &mix, R + 1, &inl), 0);
    CHECK(ls_loader_set_state(other, blob, blen) == LS_EINVAL);
    ls_loader_close(other);
    CHECK_EQ_INT(ls_loader_step_index(b), 0);
    CHECK_EQ_INT(ls_loader_set_state(b, blob, blen), 0);
    CHECK_EQ_INT(ls_loader_step_index(b), CUT);
    for (int s = CUT; s < STEPS; s++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(b, &st), 0);
        CHECK_MSG(step_hash(st) == ref[s], "step %d differs after resume", s);
        ls_loader_step_free(st);
    }
    free(blob);
    ls_loader_close(b);
    ls_loader_mix_free(&mix);
}

/* Every source wraps several epochs: within one epoch each document is served exactly
 * once, in full. */
static void test_epochs(void) {
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_parse(MIX, dir, &mix), 0);
    ls_loader *ld;
    ls_loader_opts thr = {1, 4};
    CHECK_EQ_INT(ls_loader_open(&ld, &mix, 2, &thr), 0);
    static coverage cov;
    memset(&cov, 0, sizeof cov);
    int64_t doclen[3][160] = {{0}};
    for (int s = 0; s < 260; s++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ld, &st), 0);
        cover(&cov, st);
        for (int i = 0; i < st->n_items; i++) {
            const ls_loader_seg *g = &st->items[i];
            int32_t tok[64]; /* n_ctx of MIX */
            CHECK(g->len <= 64);
            CHECK_EQ_INT(ls_loader_step_item_tokens(st, i, tok), 0);
            if (tok[g->len - 1] == LS_TOK_EOS) doclen[g->source][g->doc] = g->doc_off + g->len;
        }
        ls_loader_step_free(st);
    }
    CHECK_EQ_INT(cov.overlap, 0);
    CHECK_EQ_INT(cov.gap, 0);
    /* Epoch 0 is complete for every source by now (code has 12 docs, math 150). */
    int full = 1;
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < (int)ls_loader_source_docs(ld, k); d++)
            if (doclen[k][d] == 0 || cov.covered[k][0][d] != doclen[k][d]) {
                if (full)
                    fprintf(stderr, "  source %d doc %d: covered %lld of %lld\n", k, d, (long long)cov.covered[k][0][d],
                            (long long)doclen[k][d]);
                full = 0;
            }
    CHECK(full);
    ls_loader_close(ld);
    ls_loader_mix_free(&mix);
}

static void test_batch_layout(void) {
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_parse(MIX, dir, &mix), 0);
    ls_loader *ld;
    CHECK_EQ_INT(ls_loader_open(&ld, &mix, 4, NULL), 0);
    ls_loader_step *st;
    CHECK_EQ_INT(ls_loader_next_step(ld, &st), 0);
    int64_t all = 0;
    for (int r = 0; r < 4; r++) {
        ls_loader_batch b, d;
        CHECK_EQ_INT(ls_loader_step_batch(st, r, &b), 0);
        CHECK_NEAR(b.cost, st->rank_cost[r], 1e-9 * b.cost);
        all += b.n_tokens;
        int64_t real = 0;
        for (int i = 0; i < b.n_rows * b.n_ctx; i++) real += b.doc_ids[i] >= 0;
        CHECK_EQ_INT(real, b.n_tokens);
        for (int i = 0; i < b.n_rows * b.n_ctx; i++) CHECK((b.doc_ids[i] < 0) == (b.tokens[i] == LS_TOK_PAD));
        for (int r2 = 1; r2 < b.n_rows; r2++) CHECK(b.row_micro[r2] >= b.row_micro[r2 - 1]);
        /* Wire round trip, then a flipped length byte is rejected. */
        uint8_t *enc;
        size_t len;
        CHECK_EQ_INT(ls_loader_batch_encode(&b, &enc, &len), 0);
        CHECK_EQ_INT(ls_loader_batch_decode(enc, len, &d), 0);
        CHECK(d.n_rows == b.n_rows && d.n_segs == b.n_segs && d.state_len == b.state_len);
        CHECK(!memcmp(d.tokens, b.tokens, (size_t)b.n_rows * b.n_ctx * 4));
        CHECK(!memcmp(d.doc_ids, b.doc_ids, (size_t)b.n_rows * b.n_ctx * 4));
        CHECK(!memcmp(d.segs, b.segs, (size_t)b.n_segs * sizeof *b.segs));
        ls_loader_batch_free(&d);
        CHECK(ls_loader_batch_decode(enc, len - 1, &d) == LS_EFORMAT);
        free(enc);
        ls_loader_batch_free(&b);
    }
    CHECK_EQ_INT(all, 4 * mix.tokens_per_rank);
    ls_loader_batch b;
    CHECK(ls_loader_step_batch(st, 4, &b) == LS_EINVAL);
    ls_loader_step_free(st);
    ls_loader_close(ld);
    ls_loader_mix_free(&mix);
}

/* A hand-made batch of 2 rows x 8 (two documents in row 0, one in row 1, 2 micro-batches): its
 * wire form decodes, and each inconsistency a peer could send is refused. */
typedef struct {
    int32_t tok[16], doc[16], pos[16], micro[2];
    ls_loader_seg seg[3];
    uint8_t state[4];
    ls_loader_batch b;
} hand_batch;

static void hand_make(hand_batch *h) {
    memset(h, 0, sizeof *h);
    static const ls_loader_seg segs[3] = {{0, 0, 0, 5, 0, 1, 0}, {1, 0, 5, 3, 0, 2, 0}, {0, 1, 0, 4, 0, 3, 0}};
    memcpy(h->seg, segs, sizeof segs);
    for (int i = 0; i < 16; i++) {
        int row = i / 8, col = i % 8, in = row == 0 || col < 4;
        h->tok[i] = in ? 'a' + i : LS_TOK_PAD;
        h->doc[i] = in ? (row == 0 && col >= 5) : -1;
        h->pos[i] = in ? col : -1;
    }
    h->micro[1] = 1;
    h->b = (ls_loader_batch){.step = 3,
                             .rank = 1,
                             .n_ranks = 2,
                             .n_ctx = 8,
                             .n_rows = 2,
                             .micro_batches = 2,
                             .tokens = h->tok,
                             .doc_ids = h->doc,
                             .row_micro = h->micro,
                             .n_segs = 3,
                             .segs = h->seg,
                             .cost = 1.5,
                             .n_tokens = 12,
                             .state = h->state,
                             .state_len = sizeof h->state};
}

/* Decodes h's encoding (after edit, when not NULL, on the bytes); LS_OK or the error, its message
 * checked for needle. */
static int hand_decode(const hand_batch *h, void (*edit)(uint8_t *, size_t, size_t), const char *needle) {
    uint8_t *enc;
    size_t len;
    CHECK_EQ_INT(ls_loader_batch_encode(&h->b, &enc, &len), 0);
    /* the header's size: what the arrays after it leave */
    size_t cells = 16,
           hdr = len - (cells * 2 + 2 * 4 + 3 * 28 + sizeof h->state) - (h->b.positions ? 8 + cells * 8 : 0);
    if (edit) edit(enc, len, hdr);
    ls_loader_batch d;
    int rc = ls_loader_batch_decode(enc, len, &d);
    if (rc == LS_OK) {
        CHECK(!memcmp(d.tokens, h->tok, sizeof h->tok) && !memcmp(d.row_micro, h->micro, sizeof h->micro));
        if (h->b.positions) CHECK(!memcmp(d.positions, h->pos, sizeof h->pos));
        ls_loader_batch_free(&d);
    } else {
        CHECK_MSG(strstr(ls_errmsg(), needle) != NULL, "message '%s' lacks '%s'", ls_errmsg(), needle);
    }
    free(enc);
    return rc;
}

static void token_300(uint8_t *enc, size_t len, size_t hdr) {
    (void)len;
    uint16_t t = 300;
    memcpy(enc + hdr, &t, 2);
}

/* Bounds and defaults of a mix config, each at its edge: the largest n_ctx, tokens per rank,
 * micro-batches and preprocessing cost are accepted and one more refused; a weight of 0 is
 * allowed next to a positive one; seed 1234, cost a = 1, b = 950 and strict off when absent. */
static void test_config_edges(void) {
    static const struct {
        const char *key;
        long long ok, bad;
    } edge[] = {{"n_ctx", 65536, 65537}, {"tokens_per_rank", 1 << 26, (1 << 26) + 1}, {"micro_batches", 1024, 1025}};
    ls_loader_mix m;
    char js[512];
    for (int i = 0; i < 3; i++) {
        snprintf(js, sizeof js, "{\"%s\": %lld, \"sources\": [{\"name\": \"a\", \"path\": \"code\"}]}", edge[i].key,
                 edge[i].ok);
        CHECK_MSG(ls_loader_mix_parse(js, dir, &m) == LS_OK, "%s = %lld refused: %s", edge[i].key, edge[i].ok,
                  ls_errmsg());
        long long got = i == 0 ? m.n_ctx : i == 1 ? m.tokens_per_rank : m.micro_batches;
        CHECK_MSG(got == edge[i].ok, "%s: %lld", edge[i].key, got);
        ls_loader_mix_free(&m);
        snprintf(js, sizeof js, "{\"%s\": %lld, \"sources\": [{\"name\": \"a\", \"path\": \"code\"}]}", edge[i].key,
                 edge[i].bad);
        CHECK_MSG(ls_loader_mix_parse(js, dir, &m) == LS_EINVAL, "%s = %lld accepted", edge[i].key, edge[i].bad);
    }
    CHECK_EQ_INT(
        ls_loader_mix_parse("{\"sources\": [{\"name\": \"a\", \"path\": \"code\", \"preprocess_us\": 1e7}]}", dir, &m),
        LS_OK);
    CHECK(m.src[0].preprocess_us == 1e7);
    ls_loader_mix_free(&m);
    CHECK_EQ_INT(ls_loader_mix_parse(
                     "{\"sources\": [{\"name\": \"a\", \"path\": \"code\", \"preprocess_us\": 10000001}]}", dir, &m),
                 LS_EINVAL);
    /* defaults; a weight of 0 beside 1 gives that source no share; an absolute path is kept as it is */
    int rc = ls_loader_mix_parse("{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}, {\"name\": \"b\", \"path\": "
                                 "\"/abs/b\", \"weight\": 0}]}",
                                 dir, &m);
    CHECK_MSG(rc == LS_OK, "a weight of 0 beside 1 refused: %s", ls_errmsg());
    if (rc != LS_OK) return;
    CHECK(m.seed == 1234 && m.cost_a == 1.0 && m.cost_b == 950.0 && m.strict == 0 && m.n_ctx == 512);
    CHECK_EQ_INT(m.tokens_per_rank, 4 * 512);
    double w[2];
    ls_loader_mix_weights_at(&m, 0, w);
    CHECK(w[0] == 1.0 && w[1] == 0.0);
    CHECK_MSG(!strcmp(m.src[1].path, "/abs/b"), "absolute path became %s", m.src[1].path);
    char want[600];
    snprintf(want, sizeof want, "%s/code", dir);
    CHECK_MSG(!strcmp(m.src[0].path, want), "relative path became %s", m.src[0].path);
    ls_loader_mix_free(&m);
    CHECK_EQ_INT(ls_loader_mix_parse("{\"strict\": true, \"sources\": [{\"name\": \"a\", \"path\": \"code\"}],"
                                     " \"schedule\": [{\"step\": 0, \"weights\": {\"a\": 0.5}}]}",
                                     dir, &m),
                 LS_OK);
    CHECK_EQ_INT(m.strict, 1);
    ls_loader_mix_free(&m);
}

/* A schedule of four points (steps 0, 10, 20, 40; shares of a 1/2, 3/4, 1/4, 1): at a point its
 * own shares, the last point included; between two, the shares moved linearly from one to the
 * next, in whichever segment the step falls (15: 1/2; 30: halfway from 1/4 to 1, 5/8). */
static void test_schedule_points(void) {
    const char *js =
        "{\"sources\": [{\"name\": \"a\", \"path\": \"code\"}, {\"name\": \"b\", \"path\": \"code\"}],"
        " \"schedule\": [{\"step\": 20, \"weights\": {\"a\": 1, \"b\": 3}},"
        " {\"step\": 40, \"weights\": {\"a\": 2, \"b\": 0}}, {\"step\": 0, \"weights\": {\"a\": 1, \"b\": 1}},"
        " {\"step\": 10, \"weights\": {\"a\": 3, \"b\": 1}}]}";
    ls_loader_mix m;
    int rc = ls_loader_mix_parse(js, dir, &m);
    CHECK_MSG(rc == LS_OK, "schedule refused: %s", ls_errmsg());
    if (rc != LS_OK) return;
    static const struct {
        int64_t step;
        double a;
    } at[] = {{0, 0.5}, {5, 0.625}, {10, 0.75}, {15, 0.5}, {20, 0.25}, {30, 0.625}, {35, 0.8125}, {40, 1.0}, {99, 1.0}};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        double w[2] = {-1, -1};
        ls_loader_mix_weights_at(&m, at[i].step, w);
        CHECK_MSG(fabs(w[0] - at[i].a) < 1e-12 && fabs(w[1] - (1 - at[i].a)) < 1e-12,
                  "step %lld: shares %.6f %.6f, expected %.6f", (long long)at[i].step, w[0], w[1], at[i].a);
    }
    ls_loader_mix_free(&m);
}

/* The tokens of document doc of s: its bytes, then EOS. */
static int doc_is(const ls_src *s, uint32_t doc, const char *text) {
    ls_src_reader r;
    ls_src_reader_init(&r);
    int len = -1, n = (int)strlen(text), ok = ls_src_read_doc(s, &r, doc, &len) == LS_OK && len == n + 1;
    for (int i = 0; ok && i < n; i++) ok = r.tok[i] == (unsigned char)text[i];
    ok = ok && r.tok[n] == LS_TOK_EOS && ls_src_doc_tokens(s, doc) == (uint32_t)n + 1;
    if (!ok) fprintf(stderr, "document %u: %d tokens, expected \"%s\" and EOS\n", doc, len, text);
    ls_src_reader_free(&r);
    return ok;
}

static int open_src(ls_src **s, ls_loader_src_type type, const char *path, ls_loader_split split) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, path);
    ls_loader_source_spec sp = {.name = "t", .type = type, .path = p, .field = "text", .split = split};
    return ls_src_open(s, &sp, 0);
}

/* Text sources read byte for byte: blank-line blocks keep their last newline, and a line of
 * spaces, tabs and CRs is blank (CRLF files); a directory is read in name order, without hidden
 * files, whitespace-only files or binary ones, while a binary file named alone is refused. */
static void test_text_sources(void) {
    write_file("crlf.txt", "one\r\ntwo\r\n\r\n\t \r\nthree\n\n");
    ls_src *s;
    CHECK_EQ_INT(open_src(&s, LS_SRC_TEXT, "crlf.txt", LS_SPLIT_BLANK), LS_OK);
    if (s) {
        CHECK_EQ_INT(ls_src_ndocs(s), 2);
        CHECK(doc_is(s, 0, "one\r\ntwo\r\n"));
        CHECK(doc_is(s, 1, "three\n"));
        ls_src_close(s);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/files", dir);
    CHECK_EQ_INT(ls_mkdirs(p), 0);
    /* written against name order, so an unsorted listing shows */
    static const char *const name[] = {"f5", "f4", "f3", "f2", "f1", "f0"};
    for (int i = 0; i < 6; i++) {
        char f[64], t[64];
        snprintf(f, sizeof f, "files/%s", name[i]), snprintf(t, sizeof t, "text of %s", name[i]);
        write_file(f, t);
    }
    write_file("files/blank", "\t\r\n \n");
    write_file("files/.hidden", "hidden");
    char bin[600];
    snprintf(bin, sizeof bin, "%s/files/bin", dir);
    CHECK_EQ_INT(ls_file_write_atomic(bin, "a\0b", 3), 0);
    CHECK_EQ_INT(open_src(&s, LS_SRC_TEXT, "files", LS_SPLIT_FILE), LS_OK);
    if (s) {
        CHECK_EQ_INT(ls_src_ndocs(s), 6);
        for (uint32_t d = 0; d < 6; d++) {
            char t[64];
            snprintf(t, sizeof t, "text of f%u", d);
            CHECK_MSG(doc_is(s, d, t), "document %u", d);
        }
        ls_src_close(s);
    }
    CHECK_EQ_INT(open_src(&s, LS_SRC_TEXT, "files/bin", LS_SPLIT_FILE), LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "binary data") != NULL, "%s", ls_errmsg());
}

/* Writes a .lstok file by the format (docs/loader.md) from tokens and document offsets, with
 * `extra` zero bytes after it. */
static void write_lstok(const char *name, const uint16_t *tok, uint64_t ntok, const uint64_t *index, uint64_t ndocs,
                        size_t extra) {
    struct {
        char magic[8];
        uint32_t version, token_bytes;
        uint64_t n_docs, n_tokens, index_off, tok_hash, idx_hash, hdr_hash;
    } h = {"LSTOKv0", 1, 2, ndocs, ntok, 64 + 2 * ntok, ls_hash64(tok, ntok * 2), ls_hash64(index, (ndocs + 1) * 8), 0};
    memcpy(h.magic, "LSTOKv01", 8);
    h.hdr_hash = ls_hash64(&h, 56);
    size_t n = 64 + ntok * 2 + (ndocs + 1) * 8 + extra;
    char *buf = calloc(1, n), p[512];
    memcpy(buf, &h, 64);
    memcpy(buf + 64, tok, ntok * 2);
    memcpy(buf + 64 + ntok * 2, index, (ndocs + 1) * 8);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK_EQ_INT(ls_file_write_atomic(p, buf, n), 0);
    free(buf);
}

/* .lstok files written here by the format: a well-formed one opens with its documents; a token
 * past the byte vocabulary (259), an empty document or bytes after the index are refused. */
static void test_lstok_checks(void) {
    uint16_t tok[5] = {'h', 'i', LS_TOK_PAD, 'x', LS_TOK_EOS};
    uint64_t idx[3] = {0, 3, 5}, empty[4] = {0, 3, 3, 5};
    ls_src *s;
    write_lstok("ok.lstok", tok, 5, idx, 2, 0);
    CHECK_EQ_INT(open_src(&s, LS_SRC_TOKENS, "ok.lstok", LS_SPLIT_FILE), LS_OK);
    if (s) {
        ls_src_reader r;
        ls_src_reader_init(&r);
        int len = 0;
        CHECK_EQ_INT(ls_src_ndocs(s), 2);
        CHECK(ls_src_read_doc(s, &r, 1, &len) == LS_OK && len == 2 && r.tok[0] == 'x' && r.tok[1] == LS_TOK_EOS);
        CHECK_EQ_INT(ls_src_doc_tokens(s, 0), 3);
        ls_src_reader_free(&r);
        ls_src_close(s);
    }
    tok[2] = LS_VOCAB;
    write_lstok("vocab.lstok", tok, 5, idx, 2, 0);
    CHECK_EQ_INT(open_src(&s, LS_SRC_TOKENS, "vocab.lstok", LS_SPLIT_FILE), LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "token 2 out of range (259)") != NULL, "%s", ls_errmsg());
    tok[2] = LS_TOK_PAD;
    write_lstok("empty.lstok", tok, 5, empty, 3, 0);
    CHECK_EQ_INT(open_src(&s, LS_SRC_TOKENS, "empty.lstok", LS_SPLIT_FILE), LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "index entry 1 is not increasing") != NULL, "%s", ls_errmsg());
    write_lstok("tail.lstok", tok, 5, idx, 2, 8);
    CHECK_EQ_INT(open_src(&s, LS_SRC_TOKENS, "tail.lstok", LS_SPLIT_FILE), LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "inconsistent .lstok sizes") != NULL, "%s", ls_errmsg());
}

static void test_batch_refusals(void) {
    hand_batch h;
    hand_make(&h);
    CHECK_EQ_INT(hand_decode(&h, NULL, ""), LS_OK);
    /* a token of a BPE vocabulary in a batch not marked so (the mark comes from the tokens) */
    CHECK_EQ_INT(hand_decode(&h, token_300, "token 300 out of range"), LS_EFORMAT);
    h.tok[0] = 300;
    CHECK_EQ_INT(hand_decode(&h, NULL, ""), LS_OK);
    /* a gap between a row's segments; a row in a micro-batch past the count */
    hand_make(&h);
    h.seg[1].col = 6, h.seg[1].len = 2;
    CHECK_EQ_INT(hand_decode(&h, NULL, "segment 1 out of place"), LS_EFORMAT);
    hand_make(&h);
    h.micro[1] = 2;
    CHECK_EQ_INT(hand_decode(&h, NULL, "micro-batch 2 of 2"), LS_EFORMAT);
    /* a CP shard: its positions travel; its real tokens must be the header's count */
    hand_make(&h);
    h.b.positions = h.pos, h.b.cp_rank = 1, h.b.cp_size = 2;
    CHECK_EQ_INT(hand_decode(&h, NULL, ""), LS_OK);
    h.b.n_tokens = 11;
    CHECK_EQ_INT(hand_decode(&h, NULL, "token count mismatch"), LS_EFORMAT);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys-loader-test-%d", (int)getpid());
    CHECK_EQ_INT(ls_mkdirs(dir), 0);
    ls_log_set_level(LS_LOG_ERROR);
    make_data();
    RUN(test_sources_and_config);
    RUN(test_bad_configs);
    RUN(test_schedule);
    RUN(test_config_edges);
    RUN(test_schedule_points);
    RUN(test_text_sources);
    RUN(test_lstok_checks);
    RUN(test_perm_uniform);
    RUN(test_mixing_and_resume);
    RUN(test_epochs);
    RUN(test_batch_layout);
    RUN(test_batch_refusals);
    if (test_rmtree(dir)) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_RESULT();
}
