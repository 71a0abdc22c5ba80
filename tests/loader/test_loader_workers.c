/* test_loader_workers.c - source loaders as processes: a service whose sources are read by worker
 * processes (two on one source) serves batches byte-identical to the in-process loader; after kill -9
 * of one of them its share goes to the other, and a worker started again joins; a service restarted
 * from a saved state with the same workers resumes identically. With a BPE tokenizer every segment
 * is its document's encoding, cut where the loader says, and the service (its workers included) serves
 * the in-process loader's batches. A hub in the test's process: two workers of one source take every
 * other document (a stopped second worker holds position 1), and a budget of 4 workers splits 2 and 2
 * between two sources of equal weight × cost; a worker declared dead that goes on joins again; jumps of
 * the loader's state do not leak the workers' credit. A worker gets its source's own field and strict
 * setting, and one that counts other documents than the first is refused. Every process is a forked
 * child that is always killed and reaped. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "llmsys/tokenizer.h"
#include "loader/loader_internal.h"
#include "loader_util.h"
#include "test.h"

static char dir[256];

/* text documents (blank-line blocks) and JSON Lines: both preprocessing paths of a worker */
static const char *MIX = "{\"n_ctx\": 48, \"tokens_per_rank\": 160, \"micro_batches\": 2, \"seed\": 11,"
                         " \"sources\": [{\"name\": \"a\", \"path\": \"a\", \"split\": \"blank\", \"weight\": 0.6},"
                         " {\"name\": \"b\", \"type\": \"jsonl\", \"path\": \"b.jsonl\", \"weight\": 0.4}]}";
/* two sources on the same uniform documents whose weight × cost is equal (0.75 × 200 us = 0.25 × 600 us
 * per document): the hub's sizing, test_sizing */
static const char *MIX_COST = "{\"n_ctx\": 48, \"tokens_per_rank\": 160, \"micro_batches\": 2, \"seed\": 5,"
                              " \"sources\": [{\"name\": \"x\", \"type\": \"jsonl\", \"path\": \"u.jsonl\","
                              " \"weight\": 0.75, \"preprocess_us\": 200}, {\"name\": \"y\", \"type\": \"jsonl\","
                              " \"path\": \"u.jsonl\", \"weight\": 0.25, \"preprocess_us\": 600}]}";
enum { R = 2 };

/* every document's text, in index order (a: file by file, block by block; b: line by line) */
static char *texts[2][200];
static size_t text_len[2][200];

static void keep(int s, int d, const char *t, size_t n) {
    texts[s][d] = malloc(n + 1);
    if (texts[s][d]) memcpy(texts[s][d], t, n), texts[s][d][n] = '\0';
    text_len[s][d] = n;
}

/* f.jsonl: n documents whose "body" is "body NN" and whose "text" is something else */
static void write_body(int n) {
    char p[512], buf[2048];
    size_t o = 0;
    for (int d = 0; d < n; d++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "{\"text\": \"wrong %d\", \"body\": \"body %02d\"}\n", d, d);
    snprintf(p, sizeof p, "%s/f.jsonl", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, buf, o), 0);
}

static void make_data(void) {
    char p[512], buf[8192];
    snprintf(p, sizeof p, "%s/a", dir);
    CHECK_EQ_INT(ls_mkdirs(p), 0);
    for (int f = 0; f < 4; f++) { /* 4 files of 30 blocks of 5..120 bytes */
        size_t n = 0;
        for (int b = 0; b < 30; b++) {
            int len = 5 + (b * 37 + f * 11) % 116;
            for (int i = 0; i < len; i++) buf[n + (size_t)i] = (char)(i % 9 == 8 ? ' ' : 'a' + (i * 7 + b + f) % 26);
            buf[n + (size_t)len] = '\n';
            keep(0, f * 30 + b, buf + n, (size_t)len + 1); /* a block keeps its last newline */
            n += (size_t)len + 1;
            buf[n++] = '\n';
        }
        snprintf(p, sizeof p, "%s/a/f%d.txt", dir, f);
        CHECK_EQ_INT(ls_file_write_atomic(p, buf, n), 0);
    }
    size_t n = 0;
    for (int d = 0; d < 60; d++) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "{\"text\": \"");
        size_t at = n;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "doc %d", d);
        for (int i = 0; i < (d * 13) % 70; i++) buf[n++] = (char)('A' + (i + d) % 26);
        keep(1, d, buf + at, n - at);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "\"}\n");
    }
    snprintf(p, sizeof p, "%s/b.jsonl", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, buf, n), 0);
    snprintf(p, sizeof p, "%s/mix.json", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, MIX, strlen(MIX)), 0);
    n = 0; /* 40 documents of 40 bytes each: every prefix a worker measures costs the same per token */
    for (int d = 0; d < 40; d++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "{\"text\": \"u%02d %.36s\"}\n", d,
                              "abcdefghijklmnopqrstuvwxyzabcdefghijklm");
    snprintf(p, sizeof p, "%s/u.jsonl", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, buf, n), 0);
    snprintf(p, sizeof p, "%s/mix-cost.json", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, MIX_COST, strlen(MIX_COST)), 0);
    write_body(12);
    const char *bad = "{\"text\": \"fine\"}\n{\"text\": 7}\n";
    snprintf(p, sizeof p, "%s/bad.jsonl", dir);
    CHECK_EQ_INT(ls_file_write_atomic(p, bad, strlen(bad)), 0);
}

/* Fetches steps [from, to) for every rank and compares them with the reference loader. */
static void compare(int port, ls_loader *ref, int64_t from, int64_t to, const char *what) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    ls_loader_client *c[R];
    for (int r = 0; r < R; r++) CHECK_EQ_INT(ls_loader_client_open(&c[r], ep, r, 20000, 0), 0);
    for (int64_t step = from; step < to; step++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ref, &st), 0);
        for (int r = 0; r < R; r++)
            CHECK_MSG(lu_same_batch(c[r], st, r, step, 0), "%s: step %lld rank %d", what, (long long)step, r);
        ls_loader_step_free(st);
    }
    for (int r = 0; r < R; r++) ls_loader_client_close(c[r]);
}

/* The service's info for source `name`: its live workers and the workers it lost. */
static void workers_of(int port, const char *name, int *live, int *lost) {
    char key[64], *info = lu_info(port);
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    const char *e = info ? strstr(info, key) : NULL, *w = e ? strstr(e, "\"workers\":") : NULL,
               *l = e ? strstr(e, "\"workers_lost\":") : NULL;
    *live = w ? atoi(w + 10) : -1;
    *lost = l ? atoi(l + 15) : -1;
    free(info);
}

/* Fetches (and compares) step after step until source a has `want` live workers. The hub hears a
 * worker only while the constructor builds, so it takes steps; the worker needs wall time to start
 * (a loaded machine can take seconds), so it is bounded by 30 s, not by a count of steps. */
static void until_live(int port, ls_loader *ref, int64_t *step, int want, const char *what) {
    int live = -1, lost;
    for (double t0 = ls_now(); ls_now() - t0 < 30;) {
        workers_of(port, "a", &live, &lost);
        if (live == want) break;
        compare(port, ref, *step, *step + 1, what);
        (*step)++;
        ls_sleep_ms(10);
    }
    CHECK_MSG(live == want, "%s: %d live workers on a, expected %d", what, live, want);
}

static void test_workers(void) {
    char p[512], link[64];
    snprintf(p, sizeof p, "%s/mix.json", dir);
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_load(p, &mix), 0);
    int wport = lu_free_port();
    CHECK(wport > 0);
    snprintf(link, sizeof link, "tcp://127.0.0.1:%d", wport);
    /* workers started elsewhere (exe NULL): two on source a, one on b; a dead one is found in 400 ms */
    ls_loader_hub_opts ho = {NULL, wport, 3, NULL, 400, 20000};
    ls_loader_serve_opts o = {2, 2, 1, NULL, NULL, NULL, 0, &ho};
    lu_worker(1, link, "a");
    lu_worker(2, link, "a");
    lu_worker(3, link, "b");
    lu_worker(4, link, "nope"); /* a source the mix lacks: refused */
    int port = lu_start(0, &mix, R, &o, NULL, 0);
    CHECK(port > 0);
    if (port <= 0) return;
    ls_loader *ref;
    CHECK_EQ_INT(ls_loader_open(&ref, &mix, R, NULL), 0);
    int64_t step = 0;
    until_live(port, ref, &step, 2, "two workers on a");
    compare(port, ref, step, step + 4, "two workers on a");
    step += 4;
    /* kill -9 of one worker of a: the other takes its share, batches unchanged */
    lu_kill(2);
    compare(port, ref, step, step + 10, "after kill -9 of a worker");
    step += 10;
    int live, lost;
    workers_of(port, "a", &live, &lost);
    CHECK_EQ_INT(live, 1);
    CHECK_EQ_INT(lost, 1);
    /* a worker started again joins and shares the work */
    lu_worker(2, link, "a");
    until_live(port, ref, &step, 2, "after the restart of the worker");
    compare(port, ref, step, step + 4, "after the restart of the worker");
    step += 4;
    /* kill -9 of the service, restarted from the state saved with the last step fetched, on the same
     * link: the workers join the new constructor, which resumes where the old one left off */
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    ls_loader_client *c;
    ls_loader_batch b;
    CHECK_EQ_INT(ls_loader_client_open(&c, ep, 0, 20000, 0), 0);
    CHECK_EQ_INT(ls_loader_client_batch(c, step - 1, &b), 0);
    ls_loader_client_close(c);
    lu_kill(0);
    port = lu_start(0, &mix, R, &o, b.state, b.state_len);
    ls_loader_batch_free(&b);
    CHECK(port > 0);
    if (port > 0) compare(port, ref, step, step + 6, "resumed service");
    int st = -1;
    for (int t = 0; t < 500 && waitpid(lu_kid[4], &st, WNOHANG) == 0; t++) ls_sleep_ms(10);
    CHECK_MSG(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 1, "the worker for an unknown source exits with 1");
    lu_kid[4] = -1;
    ls_loader_close(ref);
    lu_kill_all();
    ls_loader_mix_free(&mix);
}

/* A hub in this process that starts no worker (budget: worker processes in all; a worker silent for
 * timeout_ms with work outstanding is dead), on a free port of 127.0.0.1 whose endpoint goes to link,
 * with one worker forked for each of the n sources srcs into slots 1..n; NULL when it did not open. */
static ls_loader_hub *open_hub(const ls_loader_mix *mix, int budget, int timeout_ms, const char *const *srcs, int n,
                               char *link, size_t cap) {
    int wport = lu_free_port();
    CHECK(wport > 0);
    snprintf(link, cap, "tcp://127.0.0.1:%d", wport);
    for (int i = 0; i < n; i++) lu_worker(1 + i, link, srcs[i]);
    ls_loader_hub_opts ho = {NULL, wport, budget, NULL, timeout_ms, 20000, NULL};
    ls_loader_hub *h = NULL;
    int rc = ls_loader_hub_open(&h, mix, &ho);
    CHECK_MSG(rc == LS_OK, "hub: %s", ls_errmsg());
    return rc == LS_OK ? h : NULL;
}

/* The text of document d: of MIX_COST's sources (both on u.jsonl), and of test_spec's f (its "body"). */
static void text_u(int i, uint32_t d, char *out, size_t cap) {
    (void)i;
    snprintf(out, cap, "u%02u %.36s", d, "abcdefghijklmnopqrstuvwxyzabcdefghijklm");
}

static void text_body(int i, uint32_t d, char *out, size_t cap) {
    (void)i;
    snprintf(out, cap, "body %02u", d);
}

/* Takes document q of source i (position q % ndocs of epoch q / ndocs, the loader's order) from the
 * hub, waiting for it, and drops it; 1 when it came (and, given text, holds that document's bytes
 * and EOS). */
static int take_text(ls_loader_hub *h, const ls_loader_mix *mix, int i, uint64_t q,
                     void (*text)(int, uint32_t, char *, size_t)) {
    ls_loader_hub_source hs;
    ls_loader_hub_source_info(h, i, &hs);
    uint32_t nd = (uint32_t)hs.docs, *perm = malloc((size_t)nd * sizeof *perm), len = 0;
    const int32_t *tok;
    int ok = perm != NULL;
    if (ok) ls_loader_perm(mix->seed, i, q / nd, perm, nd);
    ok = ok && ls_hub_doc(h, i, q / nd, q % nd, perm[q % nd], &tok, &len) == LS_OK && len > 0;
    if (ok && text) {
        char want[128];
        text(i, perm[q % nd], want, sizeof want);
        ok = len == strlen(want) + 1 && tok[len - 1] == LS_TOK_EOS;
        for (uint32_t t = 0; ok && t + 1 < len; t++) ok = tok[t] == (unsigned char)want[t];
        if (!ok)
            fprintf(stderr, "source %d document %u: %u tokens, expected \"%s\" and EOS\n", i, perm[q % nd], len, want);
    }
    if (ok) ls_hub_consumed(h, i);
    if (!ok) fprintf(stderr, "source %d document %llu: %s\n", i, (unsigned long long)q, ls_errmsg());
    free(perm);
    return ok;
}

static int take_doc(ls_loader_hub *h, const ls_loader_mix *mix, int i, uint64_t q) {
    return take_text(h, mix, i, q, NULL);
}

/* Two ready workers on one source share its documents: the hub asks the one with the fewest
 * outstanding, so worker k gets positions k, k + 2, ... (docs/loader.md). The second worker of a
 * joins after the first (a higher slot), then is stopped (SIGSTOP, waited for): position 1 is granted
 * to it, so it comes only once the hub has declared that worker dead (lost 1). Deterministic: a stopped
 * process sends nothing. Were the documents granted to one worker up to its credit, positions 0..3
 * would be the first worker's and position 1 would come without a loss (unless that live worker
 * were slower than the 1 s timeout). */
static void test_grant(void) {
    char p[512], link[64];
    snprintf(p, sizeof p, "%s/mix.json", dir);
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_load(p, &mix), 0);
    const char *srcs[] = {"a", "b"};
    ls_loader_hub *h = open_hub(&mix, 3, 1000, srcs, 2, link, sizeof link);
    if (!h) {
        lu_kill_all();
        ls_loader_mix_free(&mix);
        return;
    }
    /* the hub hears workers only while it serves: serve b until a's second worker is ready (a
     * forked worker may start late on a loaded machine: up to 30 s) */
    lu_worker(3, link, "a");
    ls_loader_hub_source hs = {0};
    uint64_t qb = 0;
    for (double t0 = ls_now(); ls_now() - t0 < 30; ls_sleep_ms(5)) {
        ls_loader_hub_source_info(h, 0, &hs);
        if (hs.live == 2 || !take_doc(h, &mix, 1, qb++)) break;
    }
    CHECK_EQ_INT(hs.live, 2);
    int st = 0;
    CHECK(lu_kid[3] > 0 && kill(lu_kid[3], SIGSTOP) == 0); /* never kill(-1, ...) */
    CHECK(lu_kid[3] > 0 && waitpid(lu_kid[3], &st, WUNTRACED) == lu_kid[3] && WIFSTOPPED(st));
    CHECK(take_doc(h, &mix, 0, 0));
    CHECK(take_doc(h, &mix, 0, 1));
    ls_loader_hub_source_info(h, 0, &hs);
    CHECK_MSG(hs.lost == 1, "position 1 is the stopped second worker's, so it comes after its loss: lost %lld, live %d",
              (long long)hs.lost, hs.live);
    /* the first worker now takes the whole share */
    for (uint64_t q = 2; q < 12; q++) CHECK_MSG(take_doc(h, &mix, 0, q), "position %llu", (unsigned long long)q);
    /* the worker declared dead goes on: the hub no longer knows it, so it is told to join again,
     * and joins as a new worker (no further loss) */
    CHECK(lu_kid[3] > 0 && kill(lu_kid[3], SIGCONT) == 0);
    uint64_t q = 12;
    for (double t0 = ls_now(); ls_now() - t0 < 30; ls_sleep_ms(5)) {
        ls_loader_hub_source_info(h, 0, &hs);
        if (hs.live == 2 || !take_doc(h, &mix, 0, q++)) break;
    }
    CHECK_MSG(hs.live == 2 && hs.lost == 1, "the stopped worker, resumed, joins again: live %d, lost %lld", hs.live,
              (long long)hs.lost);
    ls_loader_hub_close(h);
    lu_kill_all();
    ls_loader_mix_free(&mix);
}

static void on_stuck(int sig) {
    static const char m[] =
        "  FAIL test_sizing: no document 15 s after a jump (the hub kept the dropped requests' credit)\n";
    ssize_t r = write(2, m, sizeof m - 1);
    (void)r;
    lu_on_alarm(sig);
}

/* The hub's budget of 4 workers for two sources whose weight × seconds per token is equal (x: 0.75 ×
 * 200 us, y: 0.25 × 600 us per document, the same documents) splits 2 and 2: one each, then the
 * spare ones one at a time to the source with the largest cost per worker (the first to either, then
 * c / 2 < c gives the next to the other). All to the costliest source, or by weight or cost alone,
 * would be 3 and 1. Robust: the costs are CPU time burnt by the workers (not wall time), equal to a
 * few percent where the split changes only past a factor of 2. The same rule, applied here to the
 * rates the workers measured (what the hub sized by: no document was served since), agrees. */
static void test_sizing(void) {
    char p[512], link[64];
    snprintf(p, sizeof p, "%s/mix-cost.json", dir);
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_load(p, &mix), 0);
    const char *srcs[] = {"x", "y"};
    ls_loader_hub *h = open_hub(&mix, 4, 3000, srcs, 2, link, sizeof link);
    if (h) {
        ls_loader_hub_source hs[2];
        double c[2];
        int want[2] = {1, 1};
        for (int i = 0; i < 2; i++) {
            ls_loader_hub_source_info(h, i, &hs[i]);
            c[i] = hs[i].tokens_per_s > 0 ? mix.src[i].weight / hs[i].tokens_per_s : 0;
        }
        for (int spare = 4 - 2; spare > 0; spare--) want[c[1] / want[1] > c[0] / want[0]]++;
        for (int i = 0; i < 2; i++) {
            CHECK_MSG(hs[i].want == 2, "source %s wants %d workers of 4, expected 2 (weight x s/token %.3g vs %.3g)",
                      srcs[i], hs[i].want, c[0], c[1]);
            CHECK_MSG(hs[i].want == want[i], "source %s wants %d workers, the rule on its measured cost %d", srcs[i],
                      hs[i].want, want[i]);
            CHECK_EQ_INT(hs[i].live, 1); /* the hub starts none itself here */
        }
        /* the loader's state set again and again (a jump at every document): what was asked of the
         * worker before is dropped with the credit it held, so y's one worker (600 us a document:
         * some are always in flight) is still asked for the next ones */
        unsigned left = alarm(0); /* credit held forever is a hang: 15 s bound it (ms when right) */
        signal(SIGALRM, on_stuck);
        alarm(15);
        for (uint64_t q = 0; q < 8 * 7; q += 7)
            CHECK_MSG(take_text(h, &mix, 1, q, text_u), "y at %llu after a jump", (unsigned long long)q);
        alarm(0);
        signal(SIGALRM, lu_on_alarm);
        alarm(left ? left : 1);
        ls_loader_hub_close(h);
    }
    lu_kill_all();
    ls_loader_mix_free(&mix);
}

/* What the hub sends a worker of a source (SPEC) is that source's own settings: a JSON Lines field
 * other than "text" (the worker reads "body"), and strict, under which a malformed line stops the
 * worker (the hub then has none: it waits 1 s here). A worker that counts other documents than the
 * source's first worker (the file was rewritten) is refused and exits with 1, the first one serving
 * on. */
static void test_spec(void) {
    const char *js = "{\"seed\": 3, \"sources\": [{\"name\": \"f\", \"type\": \"jsonl\", \"path\": \"f.jsonl\","
                     " \"field\": \"body\"}]}";
    ls_loader_mix mix;
    char link[64];
    CHECK_EQ_INT(ls_loader_mix_parse(js, dir, &mix), 0);
    const char *srcs[] = {"f"};
    ls_loader_hub *h = open_hub(&mix, 2, 3000, srcs, 1, link, sizeof link);
    if (h) {
        uint64_t q = 0;
        for (; q < 30; q++) CHECK_MSG(take_text(h, &mix, 0, q, text_body), "f at %llu", (unsigned long long)q);
        write_body(13);
        lu_worker(2, link, "f");
        int st = 0;
        pid_t got = 0;
        for (double t0 = ls_now(); ls_now() - t0 < 30 && got == 0; ls_sleep_ms(5))
            if ((got = waitpid(lu_kid[2], &st, WNOHANG)) == 0) CHECK(take_text(h, &mix, 0, q++, text_body));
        CHECK_MSG(got == lu_kid[2] && WIFEXITED(st) && WEXITSTATUS(st) == 1,
                  "a worker counting 13 documents where the source has 12 exits with 1");
        if (got == lu_kid[2]) lu_kid[2] = -1;
        ls_loader_hub_source hs;
        ls_loader_hub_source_info(h, 0, &hs);
        CHECK(hs.live == 1 && hs.docs == 12);
        ls_loader_hub_close(h);
    }
    lu_kill_all();
    ls_loader_mix_free(&mix);
    js = "{\"strict\": true, \"sources\": [{\"name\": \"s\", \"type\": \"jsonl\", \"path\": \"bad.jsonl\"}]}";
    CHECK_EQ_INT(ls_loader_mix_parse(js, dir, &mix), 0);
    int wport = lu_free_port();
    snprintf(link, sizeof link, "tcp://127.0.0.1:%d", wport);
    lu_worker(1, link, "s");
    ls_loader_hub_opts ho = {NULL, wport, 1, NULL, 3000, 1000, NULL};
    h = NULL;
    CHECK_EQ_INT(ls_loader_hub_open(&h, &mix, &ho), LS_ETIMEDOUT);
    ls_loader_hub_close(h);
    int st = 0;
    pid_t got = 0;
    for (double t0 = ls_now(); ls_now() - t0 < 30 && got == 0; ls_sleep_ms(5)) got = waitpid(lu_kid[1], &st, WNOHANG);
    CHECK_MSG(got == lu_kid[1] && WIFEXITED(st) && WEXITSTATUS(st) == 1,
              "a strict worker on a malformed line exits with 1");
    if (got == lu_kid[1]) lu_kid[1] = -1;
    lu_kill_all();
    ls_loader_mix_free(&mix);
}

/* Every item's tokens are the slice [doc_off, doc_off + len) of its document's encoding + EOS. */
static int items_match(const ls_loader_step *st, const ls_bpe *tok) {
    int ok = 1;
    for (int i = 0; i < st->n_items && ok; i++) {
        const ls_loader_seg *g = &st->items[i];
        int32_t *ids = NULL, got[64];
        size_t n = 0;
        ok = g->len <= 64 && ls_bpe_encode_ex(tok, texts[g->source][g->doc], text_len[g->source][g->doc],
                                              LS_BPE_ORDINARY, &ids, &n) == LS_OK;
        ok = ok && g->doc_off + (size_t)g->len <= n + 1 && ls_loader_step_item_tokens(st, i, got) == LS_OK;
        for (int t = 0; ok && t < g->len; t++)
            ok = got[t] == (g->doc_off + (size_t)t == n ? LS_TOK_EOS : ids[g->doc_off + t]);
        if (!ok)
            fprintf(stderr, "item %d: source %d document %u tokens [%u, +%d)\n", i, g->source, g->doc, g->doc_off,
                    g->len);
        free(ids);
    }
    return ok;
}

static void test_bpe(void) {
    const char *spec[] = LS_BPE_SPECIALS;
    const char *tx[120];
    size_t tl[120];
    for (int d = 0; d < 120; d++) tx[d] = texts[0][d], tl[d] = text_len[0][d];
    ls_bpe_train_opts bo = {330, 2, spec, 3, 0};
    ls_bpe *tok;
    CHECK_EQ_INT(ls_bpe_train(tx, tl, 120, &bo, &tok), 0);
    CHECK(ls_bpe_n_merges(tok) > 20);
    char p[512], link[64];
    snprintf(p, sizeof p, "%s/mix.json", dir);
    ls_loader_mix mix;
    CHECK_EQ_INT(ls_loader_mix_load(p, &mix), 0);
    /* in-process: every segment against its document's own encoding; merged tokens do occur */
    ls_loader_opts lo = {0, 0, NULL, tok};
    ls_loader *ref;
    CHECK_EQ_INT(ls_loader_open(&ref, &mix, R, &lo), 0);
    int merged = 0;
    for (int k = 0; k < 8; k++) {
        ls_loader_step *st;
        CHECK_EQ_INT(ls_loader_next_step(ref, &st), 0);
        CHECK_MSG(items_match(st, tok), "step %d: segments are not their documents' encodings", k);
        for (int64_t t = 0; t < st->n_items && st->tokens; t++) merged |= st->tokens[st->item_off[t]] > LS_TOK_PAD;
        ls_loader_step_free(st);
    }
    CHECK(merged);
    ls_loader_close(ref);
    /* a byte-token state is refused by a BPE loader (another run's tokens) */
    ls_loader *bytes;
    uint8_t *blob;
    size_t blen;
    CHECK_EQ_INT(ls_loader_open(&bytes, &mix, R, NULL), 0);
    CHECK_EQ_INT(ls_loader_get_state(bytes, &blob, &blen), 0);
    CHECK_EQ_INT(ls_loader_open(&ref, &mix, R, &lo), 0);
    CHECK(ls_loader_set_state(ref, blob, blen) == LS_EINVAL);
    free(blob);
    ls_loader_close(bytes);
    /* the service with workers that encode: the same batches */
    int wport = lu_free_port();
    snprintf(link, sizeof link, "tcp://127.0.0.1:%d", wport);
    ls_loader_hub_opts ho = {NULL, wport, 2, NULL, 2000, 20000, NULL};
    ls_loader_serve_opts o = {2, 2, 1, NULL, NULL, NULL, 0, &ho, tok};
    lu_worker(1, link, "a");
    lu_worker(2, link, "b");
    int port = lu_start(0, &mix, R, &o, NULL, 0);
    CHECK(port > 0);
    if (port > 0) compare(port, ref, 0, 6, "BPE from workers");
    lu_kill_all();
    ls_loader_close(ref);
    ls_loader_mix_free(&mix);
    ls_bpe_free(tok);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys-test-workers-%d", (int)getpid());
    lu_guard(100);
    ls_log_set_level(LS_LOG_ERROR);
    make_data();
    RUN(test_workers);
    RUN(test_grant);
    RUN(test_sizing);
    RUN(test_spec);
    RUN(test_bpe);
    lu_kill_all();
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 200; d++) free(texts[s][d]);
    return TEST_RESULT_RMTREE(dir);
}
