/* test_robust.c - the robust module's pure parts against hand-computed references:
 * snapshots (exact resume), jump and slow-rank detectors, stack grouping on recorded
 * eu-stack dumps, injection plans, the restart back-off, and the cluster simulator's hand cases. */
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zmq.h>

#include "http_test.h"
#include "llmsys/http.h"
#include "llmsys/robust.h"
#include "robust/internal.h"
#include "test.h"

static ls_corpus *make_corpus(void) {
    static char text[60000];
    size_t n = 0;
    for (int i = 0; n + 80 < sizeof text; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "line %d: the quick brown fox jumps %d times.\n", i, i % 13);
    const char *docs[1] = {text};
    size_t lens[1] = {n};
    ls_corpus *c = NULL;
    CHECK(ls_corpus_from_docs(&c, "generated", docs, lens, 1, NULL) == LS_OK);
    return c;
}

/* An in-memory snapshot written to a checkpoint resumes bit-identically: losses and final
 * parameters equal an uninterrupted run's. A flipped byte fails the checksum. */
static void test_snapshot_exact_resume(void) {
    ls_corpus *c = make_corpus();
    ls_model_config mc;
    ls_model_config_named("tiny", &mc);
    ls_train_config tc = ls_train_defaults();
    tc.batch = 4;
    tc.seq = 32;
    tc.steps = 6;
    ls_model_set_threads(1);
    ls_trainer *a = NULL, *b = NULL, *b2 = NULL;
    ls_batch_source *sa = NULL, *sb = NULL;
    ls_train_config ta = tc, tb = tc;
    CHECK(ls_trainer_init(&a, &mc, &tc, NULL) == LS_OK);
    CHECK(ls_trainer_init(&b, &mc, &tc, NULL) == LS_OK);
    CHECK(ls_batch_source_corpus(&sa, c, &ta, 1) == LS_OK);
    CHECK(ls_batch_source_corpus(&sb, c, &tb, 1) == LS_OK);
    ls_trainer_set_shards(a, ta.shards);
    ls_trainer_set_shards(b, tb.shards);
    float la[6], lb[6];
    for (int s = 0; s < 6; s++) CHECK(ls_trainer_step(a, sa, &la[s], NULL) == LS_OK);
    for (int s = 0; s < 3; s++) CHECK(ls_trainer_step(b, sb, &lb[s], NULL) == LS_OK);
    size_t cap = ls_snapshot_size(b), len = 0;
    unsigned char *buf = malloc(cap);
    CHECK(ls_snapshot_write(b, buf, cap, &len) == LS_OK);
    ls_snapshot_info info;
    CHECK(ls_snapshot_check(buf, len, &info) == LS_OK);
    CHECK(ls_snapshot_check(buf, len - 1, NULL) == LS_EFORMAT); /* a byte short of its total */
    CHECK_EQ_INT(info.step, 3);
    CHECK_EQ_INT(info.params, ls_model_num_params(ls_trainer_model(b)));
    char path[] = "/tmp/llmsys-robust-snapXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(ls_snapshot_to_ckpt(buf, len, path) == LS_OK);
    CHECK(ls_trainer_resume(&b2, path, 0, NULL) == LS_OK);
    CHECK_EQ_INT(ls_trainer_step_index(b2), 3);
    for (int s = 3; s < 6; s++) CHECK(ls_trainer_step(b2, sb, &lb[s], NULL) == LS_OK);
    CHECK(memcmp(la, lb, sizeof la) == 0);
    size_t np = ls_model_num_params(ls_trainer_model(a));
    CHECK(memcmp(ls_model_params(ls_trainer_model(a)), ls_model_params(ls_trainer_model(b2)), np * 4) == 0);
    CHECK(memcmp(ls_model_adam_v(ls_trainer_model(a)), ls_model_adam_v(ls_trainer_model(b2)), np * 4) == 0);
    buf[len / 2] ^= 1;
    CHECK(ls_snapshot_check(buf, len, NULL) == LS_ECHECKSUM);
    CHECK(ls_snapshot_check(buf, 10, NULL) == LS_EFORMAT);
    CHECK(ls_snapshot_write(b, buf, 100, &len) == LS_ERANGE);
    /* the trainer's blocking part is the copy only: unsealed until a reader seals its copy,
     * which then equals the sealed snapshot byte for byte */
    unsigned char *buf2 = malloc(cap);
    size_t len2 = 0;
    int64_t pst = -1;
    CHECK(ls_snapshot_write(b, buf, cap, &len) == LS_OK);
    CHECK(ls_snapshot_copy(b, buf2, cap, &len2) == LS_OK);
    CHECK(len2 == len);
    CHECK(ls_snapshot_peek(buf2, len2, &pst) == 1 && pst == 3);
    CHECK(ls_snapshot_check(buf2, len2, NULL) == LS_ESTATE);
    CHECK(ls_snapshot_seal(buf2, len2, &info) == LS_OK && info.step == 3 && info.bytes == len);
    CHECK(memcmp(buf, buf2, len) == 0);
    CHECK(ls_snapshot_check(buf2, len2, NULL) == LS_OK);
    buf2[12] = 1; /* the state word after magic and version: "being written", never sealed */
    CHECK(ls_snapshot_peek(buf2, len2, &pst) == 0);
    CHECK(ls_snapshot_seal(buf2, len2, NULL) == LS_ESTATE);
    free(buf2);
    unlink(path);
    free(buf);
    ls_trainer_free(a);
    ls_trainer_free(b);
    ls_trainer_free(b2);
    ls_batch_source_free(sa);
    ls_batch_source_free(sb);
    ls_corpus_free(c);
}

static void test_jump_detector(void) {
    ls_jump_detector j;
    ls_jump_init(&j, 5, 20, 8);
    /* fewer than 8 values: no verdict on jumps, NaN always */
    for (int i = 0; i < 7; i++) CHECK_EQ_INT(ls_jump_feed(&j, 2.0 + 0.01 * i), LS_FAULT_NONE);
    CHECK_EQ_INT(ls_jump_feed(&j, 100.0), LS_FAULT_NONE); /* 8th value joins the history */
    CHECK_EQ_INT(ls_jump_feed(&j, NAN), LS_FAULT_NAN);
    CHECK_EQ_INT(ls_jump_feed(&j, INFINITY), LS_FAULT_NAN);
    /* history: 2.00..2.06 and 100 -> median of 8 = (2.03 + 2.04) / 2 = 2.035; x5 = 10.175 */
    CHECK_EQ_INT(ls_jump_feed(&j, 10.17), LS_FAULT_NONE);
    /* now 9 values 2.00..2.06, 10.17, 100: median = 2.04; x5 = 10.2 */
    CHECK_EQ_INT(ls_jump_feed(&j, 10.21), LS_FAULT_JUMP);
    CHECK_EQ_INT(ls_jump_feed(&j, 10.19), LS_FAULT_NONE);
    /* a verdict from exactly min_history values on: 1, 1, 1 (median 1), then 10 > 5 x 1 */
    ls_jump_init(&j, 5, 20, 3);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(ls_jump_feed(&j, 1.0), LS_FAULT_NONE);
    CHECK_EQ_INT(ls_jump_feed(&j, 10.0), LS_FAULT_JUMP);
    /* the median is over the last `window` values only: window 3 after 1, 1, 1, 4, 4, 4 holds
     * 4, 4, 4 (median 4, bound 20), so 19 is no jump and 21 is */
    ls_jump_init(&j, 5, 3, 1);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(ls_jump_feed(&j, i < 3 ? 1.0 : 4.0), LS_FAULT_NONE);
    CHECK_EQ_INT(ls_jump_feed(&j, 21.0), LS_FAULT_JUMP);
    CHECK_EQ_INT(ls_jump_feed(&j, 19.0), LS_FAULT_NONE);
    ls_jump_detector off;
    ls_jump_init(&off, 0, 20, 1);
    ls_jump_feed(&off, 1);
    CHECK_EQ_INT(ls_jump_feed(&off, 1e9), LS_FAULT_NONE);
}

/* 4 ranks, window 5, 3 windows: rank 2 takes 3x from step 6 on. Windows close when the
 * first report of the next window arrives: steps 6-10 (first outlier window) close at 11,
 * 11-15 at 16, 16-20 at 21 -> reported on the first report of step 21, not earlier. */
static void test_slow_detector(void) {
    ls_slow_detector s;
    CHECK(ls_slow_init(&s, 4, 5, 3, 2.0) == LS_OK);
    int found = -1, at = -1;
    for (int step = 1; step <= 30 && found < 0; step++)
        for (int r = 0; r < 4 && found < 0; r++) {
            double t = 0.010 + 0.001 * r;
            if (r == 2 && step >= 6) t = 0.033;
            ls_robust_step rs = {r, step, 1, 1, t, t, 0};
            found = ls_slow_feed(&s, &rs);
            if (found >= 0) at = step;
        }
    CHECK_EQ_INT(found, 2);
    CHECK_EQ_INT(at, 21);
    CHECK_NEAR(s.last_ratio, 0.033 / 0.011, 1e-9); /* the others: 0.010, 0.011, 0.013 */
    ls_slow_free(&s);
    /* ranks within 20% of each other are never flagged */
    CHECK(ls_slow_init(&s, 4, 5, 3, 2.0) == LS_OK);
    for (int step = 1; step <= 60; step++)
        for (int r = 0; r < 4; r++) {
            ls_robust_step rs = {r, step, 1, 1, 0, 0.01 * (1 + 0.2 * ((step + r) % 2)), 0};
            CHECK(ls_slow_feed(&s, &rs) < 0);
        }
    ls_slow_free(&s);
    CHECK(ls_slow_init(&s, 0, 5, 3, 2.0) == LS_EINVAL);
    /* a step some rank did not report is not judged: rank 2 takes 3x throughout but reports
     * only steps 4 and 5 of every window; late in both judged steps, it is reported when the
     * third window closes (the first report of step 16) */
    CHECK(ls_slow_init(&s, 4, 5, 3, 2.0) == LS_OK);
    found = -1, at = -1;
    for (int step = 1; step <= 30 && found < 0; step++)
        for (int r = 0; r < 4 && found < 0; r++) {
            if (r == 2 && step % 5 >= 1 && step % 5 <= 3) continue;
            double t = r == 2 ? 0.033 : 0.010 + 0.001 * r;
            ls_robust_step rs = {r, step, 1, 1, t, t, 0};
            found = ls_slow_feed(&s, &rs);
            if (found >= 0) at = step;
        }
    CHECK_EQ_INT(found, 2);
    CHECK_EQ_INT(at, 16);
    ls_slow_free(&s);
    /* a step is late only with factor x the others' median and min_excess_s (1 ms) more:
     * rank 1 takes 10 ms against 1 ms in steps 4 and 5 of every window and 0.3 ms against
     * 0.1 ms (3x, 0.2 ms more) in the other three, so it is late in 2 of 5 steps and never
     * named; with 3 ms against 1 ms in those three steps it is late in all 5 and named */
    for (int big = 0; big < 2; big++) {
        CHECK(ls_slow_init(&s, 4, 5, 3, 2.0) == LS_OK);
        found = -1;
        for (int step = 1; step <= 30 && found < 0; step++)
            for (int r = 0; r < 4 && found < 0; r++) {
                int slow_step = step % 5 == 4 || step % 5 == 0;
                double base = slow_step ? 1e-3 : big ? 1e-3 : 1e-4;
                double t = r == 1 ? (slow_step ? 10 * base : 3 * base) : base;
                ls_robust_step rs = {r, step, 1, 1, t, t, 0};
                found = ls_slow_feed(&s, &rs);
            }
        CHECK_EQ_INT(found, big ? 1 : -1);
        ls_slow_free(&s);
    }
}

/* One step of 4 ranks on a loaded host: 5 ms of compute +-10%, and with probability p a
 * preemption of 5-60 ms on any rank (load from other processes hits ranks at random). */
static double loaded_delay(ls_rng *g, double p) {
    double t = 0.005 * (0.9 + 0.2 * ls_rng_uniform_f64(g));
    if (ls_rng_uniform_f64(g) < p) t += 0.005 + 0.055 * ls_rng_uniform_f64(g);
    return t;
}

/* Host-wide load alone never names a rank (6 seeds x 3,000 steps, factors 2 and 1.5; windows
 * of 20 steps with a preemption in 15% or 35% of rank-steps, windows of 5 with 15%); a rank 3x slower under the
 * same load, or one stalled 90 ms in every other step (a CPU quota), is named after exactly 3
 * windows (windows of 10 and 20). The load is real: in many windows one rank's mean delay is
 * over 2x the others' median (what a per-rank mean rule would flag), counted independently. */
static void test_slow_detector_under_load(void) {
    int mean_outlier_windows = 0;
    for (int seed = 1; seed <= 6; seed++)
        for (int wi = 0; wi < 2; wi++) {
            int W = wi ? 20 : 5;
            double p = seed % 2 || W == 5 ? 0.15 : 0.35;
            ls_rng g;
            ls_rng_seed(&g, (uint64_t)seed);
            ls_slow_detector s;
            CHECK(ls_slow_init(&s, 4, W, 3, seed > 3 ? 1.5 : 2.0) == LS_OK); /* faults.sh uses 1.5 */
            double sum[4] = {0};
            for (int step = 1; step <= 3000; step++) {
                for (int r = 0; r < 4; r++) {
                    ls_robust_step rs = {r, step, 1, 1, 0, loaded_delay(&g, p), 0};
                    sum[r] += rs.compute_s;
                    int x = ls_slow_feed(&s, &rs);
                    if (x >= 0) fprintf(stderr, "false positive: rank %d, seed %d, window %d, step %d\n", x, seed, W, step);
                    CHECK(x < 0);
                }
                if (step % W == 0) { /* the mean rule: worst rank's mean vs the others' median */
                    int w = 0;
                    for (int r = 1; r < 4; r++) w = sum[r] > sum[w] ? r : w;
                    double o[3];
                    for (int r = 0, n = 0; r < 4; r++)
                        if (r != w) o[n++] = sum[r];
                    double lo = o[0] < o[1] ? o[0] : o[1], hi = o[0] < o[1] ? o[1] : o[0];
                    double med = o[2] < lo ? lo : o[2] > hi ? hi : o[2];
                    mean_outlier_windows += sum[w] > 2 * med;
                    memset(sum, 0, sizeof sum);
                }
            }
            ls_slow_free(&s);
            /* a slow rank under the same load: 3x from step 51 on, or stalled every other step */
            W = wi ? 20 : 10;
            for (int kind = 0; kind < 2; kind++) {
                CHECK(ls_slow_init(&s, 4, W, 3, 2.0) == LS_OK);
                int found = -1, at = -1;
                for (int step = 1; step <= 60 + 5 * W && found < 0; step++)
                    for (int r = 0; r < 4 && found < 0; r++) {
                        double t = loaded_delay(&g, p);
                        if (r == 1 && step > 60) t = kind == 0 ? 3 * t : t + (step % 2 ? 0.09 : 0);
                        ls_robust_step rs = {r, step, 1, 1, 0, t, 0};
                        found = ls_slow_feed(&s, &rs);
                        if (found >= 0) at = step;
                    }
                /* a window starts at step 61 (60 is a multiple of 10 and 20): the third slow
                 * window closes on the first report of step 61 + 3W */
                CHECK_EQ_INT(found, 1);
                CHECK_EQ_INT(at, 61 + 3 * W);
                ls_slow_free(&s);
            }
        }
    fprintf(stderr, "  windows a per-rank mean rule would flag: %d\n", mean_outlier_windows);
    CHECK(mean_outlier_windows > 100);
}

static char *read_fixture(const char *name) {
    char p[4096], *d = NULL;
    size_t n;
    snprintf(p, sizeof p, "%s/tests/robust/stacks/%s", LLMSYS_SOURCE_DIR, name);
    CHECK(ls_file_read(p, &d, &n) == LS_OK);
    return d;
}

/* Recorded dumps of a 4-rank job whose rank 1 was stopped (SIGSTOP) mid-forward: three
 * ranks wait in the all-reduce, one is in the layer norm -> rank 1 is the outlier group. */
static void test_stack_grouping(void) {
    char *t[4];
    for (int r = 0; r < 4; r++) {
        char n[64];
        snprintf(n, sizeof n, "hang-rank%d.txt", r);
        t[r] = read_fixture(n);
    }
    char *s0 = ls_stack_normalise(t[0], NULL), *s1 = ls_stack_normalise(t[1], NULL);
    CHECK_MSG(s0 && !strcmp(s0, "PMPI_Allreduce <- ls_dist_allreduce_sum <- ls_trainer_step <- ls_train_run <- cmd_train"),
              "%s", s0 ? s0 : "(null)");
    CHECK_MSG(s1 && !strcmp(s1, "? <- ls_layernorm_forward <- ls_model_forward <- ls_trainer_step <- ls_train_run <- cmd_train"),
              "%s", s1 ? s1 : "(null)");
    free(s0);
    free(s1);
    ls_stack_groups g;
    CHECK(ls_stack_group((const char *const *)t, 4, NULL, &g) == LS_OK);
    CHECK_EQ_INT(g.n_groups, 2);
    CHECK(g.outlier >= 0 && g.group_of[1] == g.outlier);
    CHECK(g.group_of[0] == g.group_of[2] && g.group_of[2] == g.group_of[3]);
    CHECK_EQ_INT(g.size[g.outlier], 1);
    ls_stack_groups_free(&g);
    /* two against two: no outlier; a missing dump is its own group */
    const char *tt[4] = {t[0], t[1], t[1], t[0]};
    CHECK(ls_stack_group(tt, 4, NULL, &g) == LS_OK);
    CHECK_EQ_INT(g.outlier, -1);
    ls_stack_groups_free(&g);
    /* three groups of 2, 1 and 1: the two smallest tie, so no outlier */
    const char *t3[4] = {t[0], t[0], t[1], NULL};
    CHECK(ls_stack_group(t3, 4, NULL, &g) == LS_OK);
    CHECK_EQ_INT(g.n_groups, 3);
    CHECK_EQ_INT(g.outlier, -1);
    ls_stack_groups_free(&g);
    const char *tm[4] = {t[0], t[0], NULL, t[0]};
    CHECK(ls_stack_group(tm, 4, NULL, &g) == LS_OK);
    CHECK(g.outlier >= 0 && g.group_of[2] == g.outlier);
    ls_stack_groups_free(&g);
    /* addresses and compiler suffixes do not split groups */
    const char *a = "TID 1:\n#0  0x0000000000001000 foo.isra.0 - /x/prog\n#1  0x0000000000002000 main - /x/prog\n";
    const char *b = "TID 9:\n#0  0x0000000000001234 foo - /x/prog\n#1  0x0000000000002345 main - /x/prog\n";
    char *na = ls_stack_normalise(a, NULL), *nb = ls_stack_normalise(b, NULL);
    CHECK(na && nb && !strcmp(na, nb) && !strcmp(na, "foo <- main"));
    free(na);
    free(nb);
    /* every suffix clean_fn documents, and a symbol version, read as the plain name */
    static const char *const sfx[] = {".part.0", ".isra.0", ".constprop.0", ".cold", ".lto_priv.0", "@GLIBC_2.2.5"};
    for (int i = 0; i < 6; i++) {
        char d[256];
        snprintf(d, sizeof d, "TID 1:\n#0  0x0000000000001000 foo%s - /x/prog\n#1  0x0000000000002000 main - /x/prog\n",
                 sfx[i]);
        char *n = ls_stack_normalise(d, NULL);
        CHECK_MSG(n && !strcmp(n, "foo <- main"), "%s: %s", sfx[i], n ? n : "(null)");
        free(n);
    }
    for (int r = 0; r < 4; r++) free(t[r]);
}

static void test_plans(void) {
    ls_fault_plan p;
    const char *ok = "{\"faults\": [{\"kind\": \"crash\", \"step\": 5, \"rank\": 1},"
                     " {\"kind\": \"slow\", \"time\": 2.5, \"rank\": 3, \"share\": 0.1, \"sticky\": 1},"
                     " {\"kind\": \"corrupt-ckpt\", \"step\": 9}]}";
    CHECK(ls_fault_plan_parse(ok, strlen(ok), "plan", 4, &p) == LS_OK);
    CHECK_EQ_INT(p.n, 3);
    CHECK(p.f[0].kind == LS_FAULT_CRASH && p.f[0].step == 5 && p.f[0].rank == 1 && p.f[0].time < 0);
    CHECK(p.f[1].kind == LS_FAULT_SLOW && p.f[1].step == -1 && p.f[1].time == 2.5 && p.f[1].share == 0.1);
    CHECK(p.f[0].sticky == 0 && p.f[1].sticky == 1);
    CHECK(p.f[2].kind == LS_FAULT_CORRUPT_CKPT);
    ls_fault_plan_free(&p);
    const char *bad[] = {
        "{\"faults\": [{\"kind\": \"boom\", \"step\": 1}]}",              /* unknown kind */
        "{\"faults\": [{\"kind\": \"crash\"}]}",                          /* neither step nor time */
        "{\"faults\": [{\"kind\": \"crash\", \"step\": 1, \"time\": 1}]}", /* both */
        "{\"faults\": [{\"kind\": \"crash\", \"step\": 0}]}",             /* step < 1 */
        "{\"faults\": [{\"kind\": \"crash\", \"step\": 1.5}]}",           /* fractional */
        "{\"faults\": [{\"kind\": \"crash\", \"step\": 1, \"rank\": 4}]}", /* rank out of range */
        "{\"faults\": [{\"kind\": \"slow\", \"step\": 1, \"share\": 1}]}", /* share */
        "{\"faults\": [{\"kind\": \"crash\", \"step\": 1, \"rnak\": 0}]}", /* typo */
        "{\"faults\": [{\"kind\": 3, \"step\": 1}]}",                      /* kind not a string */
        "{\"fault\": []}",                                                 /* no faults array */
        "{\"faults\": [",                                                  /* not JSON */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = ls_fault_plan_parse(bad[i], strlen(bad[i]), "plan", 4, &p);
        CHECK_MSG(rc < 0, "accepted: %s", bad[i]);
        CHECK(p.n == 0 && p.f == NULL);
        CHECK(strlen(ls_errmsg()) > 0 && !strchr(ls_errmsg(), '\n'));
    }
}

/* The robust processes' framing (lsr_send / lsr_recv) over a ROUTER and a DEALER in one
 * process: the sender's identity, the JSON and the binary attachment arrive; a message
 * without the magic is refused; frames past the fourth are dropped, not taken as the next
 * message; an identity of 64 bytes or more is not copied. */
static void test_wire(void) {
    void *z = zmq_ctx_new(), *r = NULL, *d = NULL, *d2 = NULL;
    char ep[256] = "";
    CHECK(lsr_socket(z, ZMQ_ROUTER, NULL, "tcp://127.0.0.1:0", NULL, &r, ep) == LS_OK && ep[0]);
    CHECK(lsr_socket(z, ZMQ_DEALER, "rank-3", NULL, ep, &d, NULL) == LS_OK);
    char big[80];
    memset(big, 'x', sizeof big - 1), big[sizeof big - 1] = '\0';
    CHECK(lsr_socket(z, ZMQ_DEALER, big, NULL, ep, &d2, NULL) == LS_OK);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", "beat");
    cJSON_AddNumberToObject(j, "step", 17);
    static const unsigned char blob[5] = {1, 0, 2, 0, 3};
    CHECK(lsr_send(d, NULL, j, blob, sizeof blob) == LS_OK);
    char from[64];
    cJSON *got = NULL;
    void *bin = NULL;
    size_t bl = 0;
    int rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++) { /* lsr_recv does not wait */
        rc = lsr_recv(r, from, &got, &bin, &bl);
        if (rc == 0) usleep(10000);
    }
    CHECK_MSG(rc == 1, "recv gave %d: %s", rc, ls_errmsg());
    CHECK(!strcmp(from, "rank-3"));
    CHECK(!strcmp(lsr_str(got, "type"), "beat") && !strcmp(lsr_str(got, "none"), ""));
    CHECK_NEAR(lsr_num(got, "step", -1), 17, 0);
    CHECK_NEAR(lsr_num(got, "none", -1), -1, 0);
    CHECK_NEAR(lsr_num(got, "type", 2.5), 2.5, 0); /* a string is not a number */
    CHECK(bl == sizeof blob && bin && !memcmp(bin, blob, sizeof blob));
    cJSON_Delete(got), free(bin);
    /* the router answers by identity; the dealer reads it without a sender frame */
    CHECK(lsr_send(r, "rank-3", j, NULL, 0) == LS_OK);
    rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++) {
        rc = lsr_recv(d, NULL, &got, &bin, &bl);
        if (rc == 0) usleep(10000);
    }
    CHECK(rc == 1 && got && lsr_num(got, "step", -1) == 17 && !bin && bl == 0);
    cJSON_Delete(got);
    /* no magic; then six frames; then a good message, which must come through whole */
    zmq_send(d, "JSON{}", 6, 0);
    for (int k = 0; k < 6; k++) zmq_send(d, "LSR1{\"k\":1}", 11, k < 5 ? ZMQ_SNDMORE : 0);
    CHECK(lsr_send(d, NULL, j, NULL, 0) == LS_OK);
    int seen[3] = {0, 0, 0}, good_from = 0;
    for (int i = 0; i < 300 && seen[1] + seen[2] < 3; i++) {
        got = NULL, bin = NULL;
        rc = lsr_recv(r, from, &got, &bin, &bl);
        if (rc == 0) {
            usleep(10000);
            continue;
        }
        if (rc < 0) {
            seen[1]++;
            CHECK_MSG(strstr(ls_errmsg(), "LSR1 magic") != NULL, "%s", ls_errmsg());
        } else {
            seen[2]++;
            good_from += !strcmp(from, "rank-3");
            CHECK(lsr_num(got, "k", 0) == 1 || lsr_num(got, "step", 0) == 17);
        }
        cJSON_Delete(got), free(bin);
    }
    CHECK_EQ_INT(seen[1], 1);
    CHECK_EQ_INT(seen[2], 2); /* the six-frame message (its first JSON) and the good one */
    CHECK_EQ_INT(good_from, 2);
    /* a long identity: the message arrives, its sender is not copied */
    CHECK(lsr_send(d2, NULL, j, NULL, 0) == LS_OK);
    rc = 0;
    strcpy(from, "unchanged");
    for (int i = 0; i < 200 && rc == 0; i++) {
        rc = lsr_recv(r, from, &got, NULL, NULL);
        if (rc == 0) usleep(10000);
    }
    CHECK(rc == 1 && from[0] == '\0');
    cJSON_Delete(got);
    cJSON_Delete(j);
    zmq_close(d), zmq_close(d2), zmq_close(r);
    zmq_ctx_term(z);
    /* a rank's agent list (--robust-agent) must split the ranks evenly, and name each agent */
    ls_robust_client *c = NULL;
    CHECK(ls_robust_client_open(&c, "tcp://127.0.0.1:1,tcp://127.0.0.1:2", 0, 3) == LS_EINVAL &&
          strstr(ls_errmsg(), "2 endpoint(s) do not split 3 ranks evenly") && !c);
    CHECK(ls_robust_client_open(&c, "tcp://127.0.0.1:1,,tcp://127.0.0.1:2", 0, 2) == LS_EINVAL &&
          strstr(ls_errmsg(), "bad endpoint list") && !c);
    CHECK(ls_robust_client_open(&c, "", 0, 2) == LS_EINVAL && !c);
}

/* The restart back-off: the first delay, doubling per failed restart, capped at 8 s. */
static void test_backoff(void) {
    CHECK(ls_robust_backoff(0.5, 0) == 0);
    CHECK(ls_robust_backoff(0.5, -3) == 0);
    CHECK(ls_robust_backoff(0, 4) == 0);
    const double half[] = {0.5, 1, 2, 4, 8, 8, 8};
    for (int i = 0; i < 7; i++) CHECK_MSG(ls_robust_backoff(0.5, i + 1) == half[i], "failures %d", i + 1);
    CHECK(ls_robust_backoff(3, 1) == 3);
    CHECK(ls_robust_backoff(3, 2) == 6);
    CHECK(ls_robust_backoff(3, 3) == LS_ROBUST_BACKOFF_MAX_S);
    CHECK(ls_robust_backoff(20, 1) == LS_ROBUST_BACKOFF_MAX_S);        /* a first delay over the cap */
    CHECK(ls_robust_backoff(0.5, 1 << 30) == LS_ROBUST_BACKOFF_MAX_S); /* no overflow, no long loop */
}

/* Hand-computed simulator cases (one machine, one day: T = 86400 s). */
static void test_sim_hand_cases(void) {
    ls_sim_config c;
    ls_sim_defaults(&c);
    c.gpus = 8, c.gpus_per_node = 8, c.days = 1;
    c.fail_per_1000_node_days = 0;
    c.step_s = 10;
    c.ckpt_bytes = 1e9;
    c.host_GBps = 10; /* 0.1 s blocking per step */
    c.disk_GBps = 1;  /* 1 s per save */
    c.disk_interval_s = 1000;
    ls_sim_result r;
    /* no failure: only the blocking checkpoints cost */
    c.policy = LS_SIM_MEMORY;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_NEAR(r.ettr, 10.0 / 10.1, 1e-12);
    CHECK_EQ_INT(r.failures, 0);
    c.policy = LS_SIM_DISK;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_NEAR(r.ettr, 1000.0 / 1001.0, 1e-12);
    /* one CUDA error at 5005 s, in-memory checkpoints, no standby: detect 2 s, requeue
     * 600 s, the half step since the last snapshot (5 s) redone */
    double one[1] = {5005};
    c.ckpt_bytes = 0;
    c.policy = LS_SIM_MEMORY;
    c.requeue_s = 600;
    c.fail_at = one;
    c.n_fail_at = 1;
    c.fail_kind = 0;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_EQ_INT(r.failures, 1);
    CHECK_NEAR(r.ettr, (86400.0 - 2 - 600 - 5) / 86400.0, 1e-12);
    CHECK_NEAR(r.lost_detect_s, 2, 1e-9);
    CHECK_NEAR(r.lost_restart_s, 600, 1e-9);
    CHECK_NEAR(r.lost_recompute_s, 5, 1e-9);
    /* standbys exhausted: one standby, never repaired; failures at 10000 and 20000 s:
     * the first restarts warm (50 s), the second finds none and requeues (600 s); redo:
     * 10000 mod 10 = 0, then (10000 + 20000 - 10052) mod 10 = 19948 mod 10 = 8 */
    double two[2] = {10000, 20000};
    c.policy = LS_SIM_STANDBY;
    c.standbys = 1;
    c.repair_s = 1e9;
    c.warm_restart_s = 50;
    c.fail_at = two;
    c.n_fail_at = 2;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_EQ_INT(r.failures, 2);
    CHECK_EQ_INT(r.standby_misses, 1);
    CHECK_NEAR(r.ettr, (86400.0 - (2 + 50) - (2 + 600) - 8) / 86400.0, 1e-12);
    /* the same with a 5000 s repair: the standby taken at 10000 s is back at 15000 s, so the
     * second failure restarts warm too */
    c.repair_s = 5000;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_EQ_INT(r.standby_misses, 0);
    CHECK_NEAR(r.ettr, (86400.0 - (2 + 50) - (2 + 50) - 8) / 86400.0, 1e-12);
    /* disk checkpoints at Young's interval sqrt(2 x save x MTBF): one node at 1000 failures per
     * 1000 node-days (MTBF 86400 s), a 1 s save; the only failure is past the end */
    double never[1] = {1e12};
    c.policy = LS_SIM_DISK;
    c.fail_per_1000_node_days = 1000;
    c.ckpt_bytes = 1e9, c.disk_GBps = 1, c.disk_interval_s = 0;
    c.fail_at = never, c.n_fail_at = 1;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_EQ_INT(r.failures, 0);
    double young = sqrt(2 * 1.0 * 86400);
    CHECK_NEAR(r.ettr, young / (young + 1), 1e-12);
    /* in-memory snapshots read back from host memory, not storage: one CPU overload at 5005 s
     * (detect 50 s, localize 10 s), a 1 GB snapshot at 10 GB/s (0.1 s; storage would take 1 s),
     * requeue 600 s; productive share 10 / 10.1 while running, half a step (5 s) redone */
    double f_run = 10.0 / 10.1;
    c.policy = LS_SIM_MEMORY;
    c.fail_per_1000_node_days = 0;
    c.ckpt_bytes = 1e9, c.host_GBps = 10, c.disk_GBps = 1, c.disk_interval_s = 1000;
    c.requeue_s = 600;
    c.fail_at = one, c.n_fail_at = 1, c.fail_kind = 1;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_NEAR(r.lost_detect_s, 50, 1e-9);
    CHECK_NEAR(r.lost_localize_s, 10, 1e-9);
    CHECK_NEAR(r.lost_restart_s, 600.1, 1e-9);
    CHECK_NEAR(r.lost_recompute_s, 5 * f_run, 1e-6);
    CHECK_NEAR(r.ettr, (86400.0 - 50 - 10 - 600.1 - 5) * f_run / 86400.0, 1e-9);
    /* a manual restart (kind 8) needs no new machine: a warm restart (50 s) with no standby
     * left, no miss, and nothing redone (it saves first) */
    c.policy = LS_SIM_STANDBY;
    c.ckpt_bytes = 0;
    c.standbys = 0, c.warm_restart_s = 50;
    c.fail_kind = 8;
    CHECK(ls_sim_run(&c, &r) == LS_OK);
    CHECK_EQ_INT(r.standby_misses, 0);
    CHECK_NEAR(r.lost_restart_s, 50, 1e-9);
    CHECK_NEAR(r.lost_recompute_s, 0, 1e-9);
    CHECK_NEAR(r.ettr, (86400.0 - 50) / 86400.0, 1e-12);
    c.days = 0;
    CHECK(ls_sim_run(&c, &r) == LS_EINVAL);
}

/* The status page under a flood of slow clients from one address (127.0.0.2): each sends
 * half a request and never finishes it. 1,100 of them are more than an unprotected
 * libmicrohttpd daemon serves at once (its default limit is FD_SETSIZE - 4 = 1,020): there
 * they would hold every slot and the probe below would never be answered. The page's
 * per-address limit leaves /metrics answering other clients; a bad address is refused. */
static void test_status_page_flood(void) {
    enum { FLOOD = 1100 };
    /* the flood's sockets and, on an unprotected server, as many of its own in this process */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 3 * FLOOD) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 3 * FLOOD ? 3 * FLOOD : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    lsr_status *st;
    int port = 0;
    CHECK_EQ_INT(lsr_status_start(&st, "127.0.0.1", 0, NULL, &port), LS_OK);
    CHECK(port > 0);
    static int fds[FLOOD];
    int n = half_open("127.0.0.2", port, fds, FLOOD);
    CHECK_MSG(n == FLOOD, "opened %d of %d flood connections (open-file limit %llu)", n, FLOOD,
              (unsigned long long)rl.rlim_cur);
    static const char part[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n"; /* never completed */
    for (int i = 0; i < n; i++) (void)!send(fds[i], part, sizeof part - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    char out[8192];
    for (int i = 0; i < 5; i++) {
        double t0 = ls_now();
        CHECK_EQ_INT(raw_get(port, "/metrics", NULL, out, sizeof out), 200);
        CHECK_MSG(ls_now() - t0 < 5.0, "/metrics took %.1f s during the flood", ls_now() - t0);
    }
    CHECK(strstr(out, "llmsys_robust_step") != NULL);
    for (int i = 0; i < n; i++) close(fds[i]);
    lsr_status_stop(st);
    lsr_status *bad = NULL;
    CHECK_EQ_INT(lsr_status_start(&bad, "127.0.0.300", 0, NULL, &port), LS_EINVAL);
    CHECK(bad == NULL);
}

/* A status page with a key answers only "Authorization: Bearer KEY" (the scheme in any case);
 * one without a key is refused off loopback, before robust run starts anything. */
static void test_status_page_key(void) {
    lsr_status *st;
    int port = 0;
    CHECK_EQ_INT(lsr_status_start(&st, "127.0.0.1", 0, "s3cret", &port), LS_OK);
    char out[8192];
    CHECK_EQ_INT(raw_http_h(port, "GET", "/metrics", NULL, NULL, 0, out, sizeof out), 401);
    CHECK(strstr(out, "llmsys_robust_step") == NULL && strstr(out, "WWW-Authenticate: Bearer") != NULL);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/", "Authorization: Bearer s3cre", NULL, 0, out, sizeof out), 401);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/", "Authorization: Bearer s3cretx", NULL, 0, out, sizeof out), 401);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/", "Authorization: Basic s3cret", NULL, 0, out, sizeof out), 401);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/metrics", "X-API-Key: s3cret", NULL, 0, out, sizeof out), 401);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/metrics", "Authorization: Bearer s3cret", NULL, 0, out, sizeof out), 200);
    CHECK(strstr(out, "llmsys_robust_step") != NULL);
    CHECK_EQ_INT(raw_http_h(port, "GET", "/", "Authorization: bearer s3cret", NULL, 0, out, sizeof out), 200);
    lsr_status_stop(st);
    CHECK_EQ_INT(lsr_status_check("0.0.0.0", NULL), LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "refusing to listen on 0.0.0.0 without authentication") &&
                  strstr(ls_errmsg(), "--status-key"),
              "%s", ls_errmsg());
    CHECK_EQ_INT(lsr_status_check("10.1.2.3", NULL), LS_EINVAL);
    CHECK_EQ_INT(lsr_status_check("0.0.0.0", "k"), LS_OK);
    CHECK_EQ_INT(lsr_status_check("127.0.0.2", NULL), LS_OK);
    CHECK_EQ_INT(lsr_status_check(NULL, NULL), LS_OK);
    /* IPv6: ::1 is loopback (bare, in brackets, or IPv4-mapped 127.x), :: is not */
    CHECK_EQ_INT(lsr_status_check("::1", NULL), LS_OK);
    CHECK_EQ_INT(lsr_status_check("[::1]", NULL), LS_OK);
    CHECK_EQ_INT(lsr_status_check("::ffff:127.0.0.1", NULL), LS_OK);
    CHECK_EQ_INT(lsr_status_check("::", NULL), LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "refusing to listen on :: without authentication"), "%s", ls_errmsg());
    CHECK_EQ_INT(lsr_status_check("::", "k"), LS_OK);
    CHECK_EQ_INT(lsr_status_check("::zz", "k"), LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "bad bind address '::zz' (an IPv4 or IPv6 address"), "%s", ls_errmsg());
    /* an open page on ::1 answers over IPv6 only (skipped where ::1 cannot be bound) */
    int v6 = v6_loopback_ok(), rc = v6 ? lsr_status_start(&st, "::1", 0, NULL, &port) : LS_OK;
    CHECK_MSG(rc == LS_OK, "status page on ::1: %s", ls_errmsg());
    if (!v6) printf("SKIP: ::1 cannot be bound here (IPv6 off): no IPv6 status page check\n");
    if (v6 && rc == LS_OK) {
        CHECK(port > 0);
        int code = 0;
        char *body = NULL;
        CHECK_MSG(ls_http_request("::1", port, "GET", "/metrics", NULL, 10, &code, &body) == LS_OK, "%s", ls_errmsg());
        CHECK(code == 200 && body && strstr(body, "llmsys_robust_step"));
        free(body);
        CHECK_MSG(raw_http_h(port, "GET", "/", NULL, NULL, 0, out, sizeof out) == -1, "::1 page on 127.0.0.1 too");
        lsr_status_stop(st);
    }
    ls_robust_opts o;
    ls_robust_opts_defaults(&o);
    char *cmd[] = {"llmsys", "train", "--config", "tiny", "--steps", "10", "--out", "m.safetensors", NULL};
    o.argc = 8, o.argv = cmd, o.report = "r.json";
    CHECK_MSG(ls_robust_opts_check(&o) == LS_OK, "control: %s", ls_errmsg());
    o.status_port = -1;
    o.status_bind = "0.0.0.0";
    CHECK_EQ_INT(ls_robust_opts_check(&o), LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "--status-key KEY"), "%s", ls_errmsg());
    o.status_key = "";
    CHECK_EQ_INT(ls_robust_opts_check(&o), LS_EINVAL);
    CHECK_MSG(strstr(ls_errmsg(), "--status-key must not be empty"), "%s", ls_errmsg());
    o.status_key = "k";
    CHECK_MSG(ls_robust_opts_check(&o) == LS_OK, "keyed status page off loopback: %s", ls_errmsg());
}

/* Runs ls_sim_table with o (2 trials), returning what it printed (malloc'd) and its JSON. */
static char *sim_table(ls_sim_table_opts *o, cJSON **json) {
    static int k;
    char path[64], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "/tmp/llmsys-simtable-%d-%d.json", (int)getpid(), k++);
    o->c.trials = 2;
    o->out = path;
    FILE *f = open_memstream(&text, &n);
    CHECK(f != NULL);
    if (!f) return NULL;
    int rc = ls_sim_table(o, f);
    fclose(f);
    CHECK_MSG(rc == LS_OK, "%s", ls_errmsg());
    *json = NULL;
    if (rc == LS_OK) CHECK(ls_json_read_file(path, json) == LS_OK);
    unlink(path);
    return text;
}

static int same_policies(const cJSON *a, const cJSON *b) {
    return a && b &&
           cJSON_Compare(cJSON_GetObjectItemCaseSensitive(a, "policies"),
                         cJSON_GetObjectItemCaseSensitive(b, "policies"), 1);
}

/* `llmsys sim robust` as a library call: the training state a catalog model or a parameter
 * count makes (16 bytes per parameter), the llama3 preset as the settings it stands for, the
 * failure rate from a count of interruptions, and the warm restart's default. */
static void test_sim_table(void) {
    ls_sim_table_opts o;
    cJSON *a, *b;
    /* Llama 3 70B (70.6 B parameters by its model card), untied embeddings, on the default
     * 9,600 GPUs */
    ls_sim_table_defaults(&o);
    char *t = sim_table(&o, &a);
    CHECK_MSG(t && strstr(t, "9600 GPUs (1200 machines)") && strstr(t, "state 1.13 TB (71B params x 16 B)"), "%s", t);
    free(t), cJSON_Delete(a);
    /* the preset: 16,384 GPUs, 54 days, 466 interruptions (4.21 per 1,000 machine-days at 8
     * GPUs a machine), a 405 B model, 1 GB/s of storage per machine */
    ls_sim_table_defaults(&o);
    o.preset = "llama3";
    t = sim_table(&o, &a);
    CHECK_MSG(t && strstr(t, "state 6.48 TB (405B params x 16 B)"), "%s", t);
    CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(a, "fail_per_1000_node_days")->valuedouble,
               466.0 / (16384 / 8 * 54) * 1000, 1e-12);
    free(t);
    ls_sim_table_defaults(&o);
    o.c.gpus = 16384, o.c.days = 54, o.interruptions = 466, o.model = "405e9", o.c.disk_GBps = 1.0;
    t = sim_table(&o, &b);
    CHECK_MSG(same_policies(a, b), "the llama3 preset differs from its settings given one by one");
    free(t), cJSON_Delete(a), cJSON_Delete(b);
    /* a warm restart defaults to 1/10.9 of a cold requeue, and it matters to the standby policy */
    ls_sim_table_defaults(&o);
    o.policy = "standby";
    t = sim_table(&o, &a);
    free(t);
    ls_sim_table_defaults(&o);
    o.policy = "standby", o.c.warm_restart_s = o.c.requeue_s / 10.9;
    t = sim_table(&o, &b);
    CHECK(same_policies(a, b));
    free(t), cJSON_Delete(b);
    ls_sim_table_defaults(&o);
    o.policy = "standby", o.c.warm_restart_s = o.c.requeue_s;
    t = sim_table(&o, &b);
    CHECK(!same_policies(a, b) && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(b, "policies")) == 1);
    free(t), cJSON_Delete(a), cJSON_Delete(b);
    /* bad options name their flag; nothing is written */
    ls_sim_table_defaults(&o);
    o.policy = "cloud";
    CHECK(ls_sim_table(&o, stderr) == LS_EINVAL && strstr(ls_errmsg(), "--policy"));
    ls_sim_table_defaults(&o);
    o.preset = "gpt4";
    CHECK(ls_sim_table(&o, stderr) == LS_EINVAL && strstr(ls_errmsg(), "--preset"));
}

int main(void) {
    RUN(test_status_page_flood);
    RUN(test_status_page_key);
    RUN(test_snapshot_exact_resume);
    RUN(test_jump_detector);
    RUN(test_slow_detector);
    RUN(test_slow_detector_under_load);
    RUN(test_stack_grouping);
    RUN(test_plans);
    RUN(test_backoff);
    RUN(test_wire);
    RUN(test_sim_hand_cases);
    RUN(test_sim_table);
    return TEST_RESULT();
}
