/* test_rl_sim.c - the four designs' issue rule by hand at its boundaries; the simulator against
 * hand-computed timelines (calibrated costs, fixed lengths, with and without the per-batch refill term,
 * Laminar's waiting queue, complete groups, poll periods; catalog costs from a catalog of round figures
 * for an AReaL interrupt's KV recompute), the best-split search against its fixed splits, and the
 * round-trip micro-measurement's bounds, and the options read off a run's report for calibration. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "llmsys/rl.h"
#include "test.h"

/* The issue rule (ls_rl_may_issue) at its boundaries, by hand. B = 4 units a batch, trainer at
 * P = 2 (8 units consumed), AReaL bound s = 1, laminar window 10. */
static void test_issue_rule(void) {
    ls_rl_issue_state q = {
        .mode = LS_RL_MODE_SYNC, .batch = 4, .staleness = 1, .window = 10, .trainer_version = 2, .consumed = 8};
    /* sync: version 2 only, units 8..11 (batch 2); the cap (P + 1) B = 12 holds for a rollout
     * already at version 3 too */
    CHECK(ls_rl_may_issue(&q, 8, 2) && ls_rl_may_issue(&q, 11, 2));
    CHECK(!ls_rl_may_issue(&q, 12, 2));
    CHECK(!ls_rl_may_issue(&q, 8, 1)); /* P - 1 */
    CHECK(ls_rl_may_issue(&q, 11, 3) && !ls_rl_may_issue(&q, 12, 3));
    /* one step stale: cap (P + 2) B = 16; a rollout at v takes unit i only while v >= i / 4 - 1 */
    q.mode = LS_RL_MODE_ONESTEP;
    CHECK(ls_rl_may_issue(&q, 15, 2));  /* 15 / 4 - 1 = 2 */
    CHECK(!ls_rl_may_issue(&q, 16, 2)); /* at the cap, and 16 / 4 - 1 = 3 */
    CHECK(ls_rl_may_issue(&q, 11, 1));  /* P - 1: 11 / 4 - 1 = 1, batch 2 on version 1 */
    CHECK(!ls_rl_may_issue(&q, 12, 1)); /* 12 / 4 - 1 = 2 > 1: batch 3 needs version 2 */
    /* a rollout ahead of the trainer (pulled version 3 before the trainer's next request reached
     * the manager): 16 / 4 - 1 = 3 would allow unit 16, the cap does not */
    CHECK(ls_rl_may_issue(&q, 15, 3) && !ls_rl_may_issue(&q, 16, 3));
    /* P - 2 is refused by the first clause alone (unit 4: 4 / 4 - 1 = 0 passes the last); no caller
     * asks this, as issued >= P B there, but the rule says it */
    CHECK(!ls_rl_may_issue(&q, 4, 0));
    CHECK(ls_rl_may_issue(&q, 4, 1));
    /* AReaL: unit i while i < (v + s + 1) B, on the asking rollout's version v */
    q.mode = LS_RL_MODE_AREAL;
    CHECK(ls_rl_may_issue(&q, 15, 2) && !ls_rl_may_issue(&q, 16, 2)); /* (2 + 1 + 1) 4 = 16 */
    CHECK(ls_rl_may_issue(&q, 11, 1) && !ls_rl_may_issue(&q, 12, 1)); /* 12 */
    CHECK(ls_rl_may_issue(&q, 19, 3) && !ls_rl_may_issue(&q, 20, 3)); /* 20: no cap in P */
    q.staleness = 0;
    CHECK(ls_rl_may_issue(&q, 11, 2) && !ls_rl_may_issue(&q, 12, 2)); /* bound 0: (2 + 0 + 1) 4 = 12 */
    /* laminar: issued - consumed < window, whatever the version */
    q.mode = LS_RL_MODE_LAMINAR;
    CHECK(ls_rl_may_issue(&q, 17, 0) && ls_rl_may_issue(&q, 17, 2)); /* 17 - 8 = 9 < 10 */
    CHECK(!ls_rl_may_issue(&q, 18, 2));                              /* 10 */
    /* no batch: nothing issues (and no division by zero) */
    q.mode = LS_RL_MODE_ONESTEP, q.batch = 0;
    CHECK(!ls_rl_may_issue(&q, 0, 2));
}

/* Synchronous, one rollout of 4 slots, every response 10 tokens, step 10 ms, train 50 ms, no pull:
 * each update is refill + 10 steps + train, so 3 updates of 4 take 3 (refill + 0.1 + 0.05) s.
 * With a pull of 3 ms and a hand-over of 10 ms (k = 2), as the runtime runs it (batch refill: the
 * rollout pulls from its relay, no global sync): the relay holds version v + 1 10 ms after the
 * update ends; the poll that names it (refill), the pull, and the poll that brings the batch
 * (refill) follow: updates 2 and 3 take 0.01 + 0.007 + 0.1 + 0.05 s each. */
static void test_sync_timeline(void) {
    static const int len[1] = {10};
    for (int k = 0; k < 3; k++) {
        double refill = k ? 0.002 : 0;
        ls_rl_sim_opts o = ls_rl_sim_defaults();
        o.mode = LS_RL_MODE_SYNC, o.gpus = 2, o.batch = 4, o.max_batch = 4, o.updates = 3, o.prompt_len = 8;
        o.step_s = 0.01, o.train_s = 0.05, o.trace = len, o.n_trace = 1, o.refill_s = refill, o.batch_refill = 1;
        if (k == 2) o.pull_s = 0.003, o.trainer_extra_s = 0.01;
        ls_rl_sim_result r;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        double span = 3 * (refill + 10 * 0.01 + 0.05) + (k == 2 ? 2 * (0.01 + 0.002 + 0.003) : 0);
        CHECK_NEAR(r.traj_per_s, 12 / span, 1e-6 * 12 / span);
        CHECK_NEAR(r.tokens_per_s, 120 / span, 1e-6 * 120 / span);
        CHECK_EQ_INT(r.max_staleness, 0);
        /* idle: everything but the 30 decode steps, out of the whole span */
        CHECK_NEAR(r.idle_frac, (span - 0.3) / span, 1e-6);
    }
}

/* Laminar-style with batch refill: the rollout finishes its batch of 4, pulls (refill + pull) when a
 * newer version exists, then refills; two rollouts keep the trainer fed. Checked for consistency:
 * the refill term can only slow the run down, and staleness stays small. */
static void test_laminar_refill(void) {
    static const int len[3] = {3, 10, 30};
    double tps[2];
    for (int k = 0; k < 2; k++) {
        ls_rl_sim_opts o = ls_rl_sim_defaults();
        o.mode = LS_RL_MODE_LAMINAR, o.gpus = 3, o.batch = 8, o.max_batch = 8, o.updates = 6, o.prompt_len = 8;
        o.step_s = 0.02, o.train_s = 0.03, o.pull_s = 0.003, o.trace = len, o.n_trace = 3, o.repack_s = 0.02;
        o.refill_s = k ? 0.005 : 0, o.batch_refill = 1;
        ls_rl_sim_result r;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        tps[k] = r.traj_per_s;
        CHECK(r.max_staleness <= 4);
    }
    CHECK(tps[1] > 0 && tps[1] < tps[0]);
}

/* Laminar's waiting queue, by hand: one replica of 2 slots, responses of 1 and 8 tokens in turn,
 * no poll or pull costs. Without a queue each batch is {1, 8}: 2 trajectories per 8 steps. With a
 * batch of 4 the slot the short one frees takes the next (1 token), then the one after (8): 4
 * trajectories per 10 steps, 1.6x. 32 trajectories at 10 ms a step: 1.28 s against 0.80 s. */
static void test_laminar_queue(void) {
    static const int len[2] = {1, 8};
    double tps[2];
    for (int k = 0; k < 2; k++) {
        ls_rl_sim_opts o = ls_rl_sim_defaults();
        o.mode = LS_RL_MODE_LAMINAR, o.gpus = 2, o.batch = 8, o.max_batch = 2, o.updates = 4, o.prompt_len = 8;
        o.step_s = 0.01, o.train_s = 1e-4, o.trace = len, o.n_trace = 2, o.trace_replay = 1, o.repack = 0;
        o.rollout_batch = k ? 4 : 0, o.batch_refill = 1;
        ls_rl_sim_result r;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        tps[k] = r.traj_per_s;
        fprintf(stderr, "  rollout batch %d: %.3f traj/s\n", o.rollout_batch, r.traj_per_s);
    }
    CHECK(fabs(tps[0] - 32 / (1.28 + 1e-4)) < 1e-6); /* the last update's training ends the span */
    CHECK(fabs(tps[1] - 32 / (0.80 + 1e-4)) < 1e-6);
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    ls_rl_sim_result r;
    o.mode = LS_RL_MODE_LAMINAR, o.max_batch = 2, o.rollout_batch = -1;
    CHECK(ls_rl_simulate(&o, &r) == LS_EINVAL);
}

static char dir[64]; /* the test's work directory (a catalog) */

/* Writes a catalog of one GPU and one model with round figures into dir (catalog-mode costs by hand). */
static int write_catalog(void) {
    static const char *const files[2][2] = {
        {"gpus.json", "{\"format\": \"llmsys-gpus\", \"version\": 1, \"gpus\": [{\"name\": \"unit-gpu\", "
                      "\"memory_GB\": 1, \"bandwidth_GBps\": 1, \"fp16_tflops\": 0.01}, {\"name\": \"unit-gpu-2\", "
                      "\"memory_GB\": 1, \"bandwidth_GBps\": 2, \"fp16_tflops\": 0.02, \"link_GBps\": 4}]}\n"},
        {"models.json", "{\"format\": \"llmsys-models\", \"version\": 1, \"models\": [{\"name\": \"unit-model\", "
                        "\"n_layer\": 1, \"d_model\": 64, \"n_head\": 1, \"n_kv_head\": 1, \"d_ff\": 64, "
                        "\"vocab\": 128, \"n_ctx\": 64, \"tied\": true}, {\"name\": \"gqa-model\", \"n_layer\": 24, "
                        "\"d_model\": 1024, \"n_head\": 16, \"n_kv_head\": 4, \"d_ff\": 4096, \"vocab\": 32000, "
                        "\"n_ctx\": 2048}]}\n"}};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, files[i][0]);
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        int bad = fputs(files[i][1], f) < 0;
        if (fclose(f) != 0 || bad) return -1;
    }
    return 0;
}

/* An AReaL interrupt recomputes each in-flight trajectory's KV cache (its whole length) before
 * decoding resumes; catalog costs, by hand. The model: 1 layer, d 64, 1 head, d_ff 64, vocab 128
 * tied: 64 (64 + 128) + 64^2 + 2 64 64 + 128 64 = 32768 parameters, W = 65536 bytes. The GPU:
 * 1 GB/s (0.7 effective), 0.01 TFLOPS (0.35 effective). 2 GPUs at 50 %: one trains, one replica
 * at tp 1 with 2 slots; batch 1, bound s = 1, prompt 64, mean length 64, responses 1, 16, 1 in
 * issue order. Costs:
 *   step a = W / 0.7 GB/s + 2 ms, per KV token c = 2 x 64 x 2 B / 0.7 GB/s (K and V, one layer),
 *   prefill per token f = 2 x 32768 / 3.5 GFLOP/s, training T = 1 x (64 + 64) x 8 x 32768 / 3.5 GFLOP/s,
 *   global sync b = W / 25 GB/s (replica) + W / 25 GB/s (trainer) + 1 ms x log2(2).
 * Timeline: at 0 the replica takes units 0 and 1 ((0 + 1 + 1) x 1 = 2); unit 0 ends after one step of
 * a + 128 c at t1; training runs t1 .. t2 = t1 + T while unit 1 decodes at a + 65 c a step, holding
 * len = 65 + T / (a + 65 c) tokens at t2 (about 69.5). Version 1: the replica pauses b + len f
 * (the mutant without the length: b + f, 1.3 ms less), then takes unit 2 (cap 3) and unit 2 ends
 * one step of a + (len + 64) c later at t4; the second update ends at t4 + T. */
static void test_areal_prefill(void) {
    static const int len[3] = {1, 16, 1};
    CHECK(write_catalog() == 0);
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    o.data_dir = dir, o.model = "unit-model", o.gpu = "unit-gpu";
    o.mode = LS_RL_MODE_AREAL, o.staleness = 1, o.gpus = 2, o.train_frac_pct = 50;
    o.batch = 1, o.max_batch = 2, o.updates = 2, o.prompt_len = 64, o.mean_len = 64;
    o.trace = len, o.n_trace = 3, o.trace_replay = 1;
    ls_rl_sim_result r;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    const double bw = 0.7e9, fl = 0.35 * 0.01e12, W = 65536;
    const double a = W / bw + 2e-3, c = 2.0 * 64 * 2 / bw, f = 2.0 * 32768 / fl;
    const double T = 1.0 * (64 + 64) * 8 * 32768 / fl, b = W / 25e9 + W / 25e9 + 1e-3;
    /* the figures the timeline uses reach the simulator as worked out above */
    CHECK_EQ_INT(r.tp, 1);
    CHECK_EQ_INT(r.replicas, 1);
    CHECK_NEAR(r.step_s, a, 1e-12);
    CHECK_NEAR(r.train_s, T, 1e-12);
    CHECK_NEAR(r.bcast_s, b, 1e-12);
    double t1 = a + 128 * c, t2 = t1 + T, held = 65 + T / (a + 65 * c);
    double pause = b + held * f, t4 = t2 + pause + a + (held + 64) * c, end = t4 + T;
    fprintf(stderr, "  interrupt at %.6f s: %.3f tokens held, pause %.6f s, end %.6f s\n", t2, held, pause, end);
    /* unit 1 runs on past t2 with more than the one token unit 2 needs: unit 2 ends first, at t4 */
    CHECK(held > 69 && held < 70 && 16 - (held - 64) > 1);
    CHECK_NEAR(r.wall_s, end, 1e-9);
    CHECK_NEAR(r.traj_per_s, 2 / end, 1e-9 * 2 / end);
    /* the replica idles only while paused */
    CHECK_NEAR(r.idle_frac, pause / end, 1e-9);
    CHECK_EQ_INT(r.max_staleness, 0);
    /* with batch refill (as the runtime runs AReaL-like) the interrupted replica still takes unit
     * 2 into its free slot at once: the same timeline */
    o.batch_refill = 1;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    CHECK_NEAR(r.wall_s, end, 1e-9);
}

/* Laminar repack, calibrated, by hand: 2 replicas of 4 slots, step 10 ms, train 50 ms, one update of
 * 8; responses by issue order 1, 1, 1, 20 on each replica (then 50s). After one step each replica
 * holds one 20-token trajectory (falling); the repack at 20 ms moves one onto the other, where it
 * arrives at the destination's next poll, one step later: it ends at 0.21 s instead of 0.20 s
 * (the freed replica takes new 50-token work, which the first batch does not wait for). */
static void test_laminar_repack(void) {
    static const int len[12] = {1, 1, 1, 20, 1, 1, 1, 20, 50, 50, 50, 50};
    for (int k = 0; k < 2; k++) {
        ls_rl_sim_opts o = ls_rl_sim_defaults();
        o.mode = LS_RL_MODE_LAMINAR, o.gpus = 3, o.batch = 8, o.max_batch = 4, o.updates = 1, o.prompt_len = 8;
        o.step_s = 0.01, o.train_s = 0.05, o.trace = len, o.n_trace = 12, o.trace_replay = 1, o.batch_refill = 1;
        o.repack = k, o.repack_s = 0.02;
        ls_rl_sim_result r;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        CHECK_NEAR(r.wall_s, (k ? 0.21 : 0.20) + 0.05, 1e-9);
        CHECK_EQ_INT(r.repacks, k);
    }
}

/* The catalog cost model by hand, on a model whose weights need two GPUs: 24 layers, d 1024, 16
 * heads of 64 sharing 4 KV heads (KV width 256), d_ff 4096, vocab 32000 untied: 24 (1024 (1024 +
 * 512) + 1024^2 + 2 1024 4096) + 2 32000 1024 = 329 777 152 parameters, W = 659 554 304 bytes in
 * bf16. The GPU: 1 GB, 2 GB/s (1.4 effective), 0.02 TFLOPS (0.35 effective), links of 4 GB/s.
 * W is over half the card and W / 2 is not: tp 2. Per step a = (W / 2) / 1.4 GB/s + 2 ms, per KV
 * token c = 2 x 24 layers x 256 x 2 B / (2 x 1.4 GB/s); training 8 x params FLOPs a token.
 * Synchronous (colocated, verl-style): 4 GPUs make 2 replicas of one slot, and all 4 train; batch
 * 2 of 10-token responses after 16-token prompts: each replica ends its trajectory after 10 steps
 * of a + 16 c, then every GPU trains for T. The replicas are never idle: while they wait they
 * train (the idle share leaves that time out). Laminar-style, 25 % of 8 GPUs train: 3 replicas;
 * the figures the timeline uses are those of the relays: a pull of W / 2 over 25 GB/s, the
 * trainer's hand-over W / (8 x 25 GB/s), and a global sync for comparison. */
static void test_catalog_costs(void) {
    static const int len[1] = {10};
    CHECK(write_catalog() == 0);
    const double params = 24.0 * (1024.0 * (1024 + 512) + 1024.0 * 1024 + 2.0 * 1024 * 4096) + 2.0 * 32000 * 1024;
    const double W = 2 * params, bw = 1.4e9, fl = 0.35 * 0.02e12, net = 25e9;
    CHECK(W > 0.5e9 && W / 2 <= 0.5e9);
    const double a = W / 2 / bw + 2e-3, c = 2.0 * 24 * 256 * 2 / (2 * bw);
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    o.data_dir = dir, o.model = "gqa-model", o.gpu = "unit-gpu-2";
    o.mode = LS_RL_MODE_SYNC, o.gpus = 4, o.batch = 2, o.max_batch = 1, o.updates = 1, o.prompt_len = 16;
    o.mean_len = 10, o.trace = len, o.n_trace = 1, o.trace_replay = 1;
    ls_rl_sim_result r;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    double T = 2.0 * (16 + 10) * 8 * params / (4 * fl), end = 10 * (a + 16 * c) + T;
    CHECK_EQ_INT(r.tp, 2);
    CHECK_EQ_INT(r.replicas, 2);
    CHECK_EQ_INT(r.train_pct, 100);
    CHECK_NEAR(r.step_s, a, 1e-12);
    CHECK_NEAR(r.train_s, T, 1e-9 * T);
    CHECK_NEAR(r.bcast_s, W / 2 / 4e9, 1e-12); /* re-sharded over the GPUs' own links */
    CHECK_NEAR(r.wall_s, end, 1e-9 * end);
    CHECK_NEAR(r.traj_per_s, 2 / end, 1e-9 * 2 / end);
    CHECK_NEAR(r.idle_frac, 0, 1e-12);
    o.mode = LS_RL_MODE_LAMINAR, o.gpus = 8, o.train_frac_pct = 25, o.updates = 2;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    CHECK_EQ_INT(r.tp, 2);
    CHECK_EQ_INT(r.replicas, 3);
    CHECK_EQ_INT(r.train_pct, 25);
    CHECK_NEAR(r.train_s, 2.0 * (16 + 10) * 8 * params / (2 * fl), 1e-9 * r.train_s);
    CHECK_NEAR(r.pull_s, W / 2 / net, 1e-12);
    CHECK_NEAR(r.stall_s, W / (8 * net), 1e-12);
    CHECK_NEAR(r.bcast_s, W / 2 / net + W / (2 * net) + 2e-3, 1e-12);
}

/* Response lengths are log-normal with the mean asked for: 4096 draws at mean 50, CV 1 (one
 * synchronous batch, every trajectory of it trained on, prompts of 0 tokens, so the tokens per
 * trajectory are the mean length: whole tokens, so 49.5 expected; 50.06 drawn); under a cap
 * of 20 at mean 1000 every response is 20 tokens. */
static void test_length_draws(void) {
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    o.mode = LS_RL_MODE_SYNC, o.gpus = 2, o.batch = 4096, o.max_batch = 4096, o.updates = 1, o.prompt_len = 0;
    o.step_s = 1e-3, o.train_s = 1e-3, o.mean_len = 50, o.cv = 1, o.max_len = 100000;
    ls_rl_sim_result r;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    double mean = r.tokens_per_s / r.traj_per_s;
    fprintf(stderr, "  mean 50, CV 1: %.2f tokens a response over 4096\n", mean);
    CHECK(mean > 49.5 * 0.96 && mean < 49.5 * 1.04); /* the standard error is 1.6 % */
    o.mean_len = 1000, o.max_len = 20;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    CHECK_NEAR(r.tokens_per_s / r.traj_per_s, 20, 1e-9);
}

/* The GPU-count list of `sim rl --gpus`: counts in [2, 2^20], at most 16. */
static void test_gpus_list(void) {
    int gl[16];
    CHECK_EQ_INT(ls_rl_sim_gpus_parse("2,1048576", gl), 2);
    CHECK(gl[0] == 2 && gl[1] == 1048576);
    CHECK(ls_rl_sim_gpus_parse("1", gl) < 0);
    CHECK(ls_rl_sim_gpus_parse("1048577", gl) < 0);
    CHECK_EQ_INT(ls_rl_sim_gpus_parse("2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", gl), 16);
    CHECK_EQ_INT(gl[15], 17);
    CHECK(ls_rl_sim_gpus_parse("2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18", gl) < 0);
    CHECK(ls_rl_sim_gpus_parse("2,", gl) < 0 && ls_rl_sim_gpus_parse("2,,3", gl) < 0);
}

/* The best split is at least as good as every fixed split of its coarse pass, and is what a
 * simulation at the split it reports gives. */
static void test_best_split(void) {
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    o.gpus = 64, o.batch = 256, o.updates = 2, o.mean_len = 500, o.max_len = 4096;
    ls_rl_sim_result best, r;
    o.train_frac_pct = 0;
    CHECK(ls_rl_simulate(&o, &best) == LS_OK);
    for (int pct = 20; pct <= 80; pct += 10) {
        o.train_frac_pct = pct;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        CHECK_EQ_INT(r.train_pct, pct);
        CHECK(best.traj_per_s >= r.traj_per_s * (1 - 1e-9));
    }
    o.train_frac_pct = best.train_pct;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    CHECK_NEAR(best.traj_per_s, r.traj_per_s, 1e-9 * r.traj_per_s);
    /* the refinement: 5 points either side of the coarse best, then 2 either side of that */
    int at = 0;
    double top = 0;
    for (int pct = 20; pct <= 80; pct += 10) {
        o.train_frac_pct = pct;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        if (r.traj_per_s > top) top = r.traj_per_s, at = pct;
    }
    for (int step = 5; step >= 2; step -= 3) {
        int c0 = at;
        for (int d = -1; d <= 1; d += 2) {
            o.train_frac_pct = c0 + d * step;
            CHECK(ls_rl_simulate(&o, &r) == LS_OK);
            fprintf(stderr, "  split %d %%: %.4f traj/s\n", o.train_frac_pct, r.traj_per_s);
            CHECK(best.traj_per_s >= r.traj_per_s * (1 - 1e-9));
            if (r.traj_per_s > top) top = r.traj_per_s, at = o.train_frac_pct;
        }
    }
    CHECK_EQ_INT(best.train_pct, at);
}

/* The trainer takes complete groups only: one rollout of 4 slots, responses 1, 5, 5, 1 tokens,
 * step 10 ms, train 50 ms, one update of 2. Singly, trajectories 0 and 3 make the batch after one
 * step; in groups of 2 the first complete group is {2, 3} after five steps. */
static void test_groups(void) {
    static const int len[4] = {1, 5, 5, 1};
    for (int g = 1; g <= 2; g++) {
        ls_rl_sim_opts o = ls_rl_sim_defaults();
        o.mode = LS_RL_MODE_LAMINAR, o.gpus = 2, o.batch = 2, o.max_batch = 4, o.updates = 1, o.prompt_len = 8;
        o.step_s = 0.01, o.train_s = 0.05, o.trace = len, o.n_trace = 4, o.trace_replay = 1, o.batch_refill = 1;
        o.group = g;
        ls_rl_sim_result r;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        double span = (g == 1 ? 1 : 5) * 0.01 + 0.05;
        CHECK_NEAR(r.traj_per_s, 2 / span, 1e-6 * 2 / span);
    }
}

/* Poll periods, synchronous, one rollout of 4 slots, responses of 10 tokens, step 10 ms, train 50 ms;
 * the rollout asks every 40 ms once idle, the trainer every 30 ms. Batch 1 runs 0-0.10; the trainer
 * (asking since 0) starts at 0.12 and publishes at 0.17; the rollout (asking since 0.10) starts batch 2
 * at 0.18, done at 0.28; the trainer (asking since 0.17) starts at 0.29 and ends at 0.34. */
static void test_poll_periods(void) {
    static const int len[1] = {10};
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    o.mode = LS_RL_MODE_SYNC, o.gpus = 2, o.batch = 4, o.max_batch = 4, o.updates = 2, o.prompt_len = 8;
    o.step_s = 0.01, o.train_s = 0.05, o.trace = len, o.n_trace = 1, o.batch_refill = 1;
    o.idle_poll_s = 0.04, o.trainer_poll_s = 0.03;
    ls_rl_sim_result r;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    CHECK_NEAR(r.traj_per_s, 8 / 0.34, 1e-6 * 8 / 0.34);
    /* the trainer asking every 50 ms: its poll at 0.10 finds batch 1 just done (train to 0.15);
     * the rollout (asking since 0.10) starts batch 2 at 0.18, done at 0.28; the trainer (asking
     * since 0.15) starts at 0.30 and ends at 0.35 */
    o.trainer_poll_s = 0.05;
    CHECK(ls_rl_simulate(&o, &r) == LS_OK);
    CHECK_NEAR(r.traj_per_s, 8 / 0.35, 1e-6 * 8 / 0.35);
}

/* The staleness bounds, with generation much faster than training (step 1 ms, 10-token
 * responses, train 0.5 s) so rollouts run ahead as far as each design lets them: a batch the
 * trainer consumes at version P was issued at version >= P - s under AReaL's rule (issued <
 * (P + s + 1) B), >= P - 1 one step stale (a rollout at version v takes trajectory `issued`
 * only while v >= issued / B - 1); both bounds are reached. */
static void test_staleness_bounds(void) {
    static const int len[1] = {10};
    for (int m = 0; m < 4; m++) {
        ls_rl_sim_opts o = ls_rl_sim_defaults();
        int s = m < 3 ? m + 1 : 1;
        o.mode = m < 3 ? LS_RL_MODE_AREAL : LS_RL_MODE_ONESTEP, o.staleness = s;
        o.gpus = 3, o.batch = 4, o.max_batch = 4, o.updates = 8, o.prompt_len = 8;
        o.step_s = 0.001, o.train_s = 0.5, o.trace = len, o.n_trace = 1, o.batch_refill = m == 3;
        /* one step stale with pulls: for 0.2 s after each update the relays still hold the
         * previous version, so idle rollouts ask for work one version behind the trainer */
        if (m == 3) o.trainer_extra_s = 0.2;
        ls_rl_sim_result r;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        fprintf(stderr, "  %s, bound %d: max staleness %d, mean %.3f\n", m < 3 ? "areal" : "one-step", s,
                r.max_staleness, r.mean_staleness);
        CHECK_EQ_INT(r.max_staleness, s);
    }
}

static void test_rtt(void) {
    double rtt = -1;
    CHECK(ls_rl_measure_rtt(50, &rtt) == LS_OK);
    CHECK(rtt > 0 && rtt < 0.5);
}

/* The simulator's options from a run's report (`sim rl --calibrate`), field by field by hand: one
 * GPU per rollout plus the trainer's, batch = group x batch groups, the decode step measured plus
 * the run's manager round trip, the issued lengths replayed in order (0 as 1), the polls' and the
 * trainer's extra costs; the round trip measured apart where the report has none; a report of a
 * run without --step-ms refused. */
static void test_calibration_opts(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/report.json", dir);
    const char *rep = "{\"mode\": \"areal\", \"step_ms\": 20, \"train_mean_s\": 0.05, \"rollouts\": 3, \"group\": 4,"
                      " \"batch_groups\": 2, \"traj_per_s\": 12.5, \"updates\": 9, \"max_seqs\": 6,"
                      " \"decode_step_mean_s\": 0.021, \"pull_mean_s\": 0.003, \"repack_enabled\": 0,"
                      " \"staleness_bound\": 2, \"poll_rtt_mean_s\": 0.0004, \"trainer_stall_mean_s\": 0.001,"
                      " \"rollout_batch\": 12, \"issued_response_lengths\": [3, 5, 0, 7]}";
    CHECK_EQ_INT(ls_file_write_atomic(path, rep, strlen(rep)), LS_OK);
    ls_rl_sim_opts o;
    int *lens = NULL, nl = 0;
    double tps = 0;
    CHECK_EQ_INT(ls_rl_sim_opts_from_report(path, NULL, 0, 0.0009, &o, &lens, &nl, &tps), LS_OK);
    CHECK(o.mode == LS_RL_MODE_AREAL && o.gpus == 4 && o.batch == 8 && o.group == 4 && o.updates == 9);
    CHECK(o.max_batch == 6 && o.rollout_batch == 12 && o.staleness == 2 && o.repack == 0 && o.batch_refill == 1);
    CHECK_NEAR(o.step_s, 0.021 + 0.0004, 1e-12);
    CHECK_NEAR(o.repack_s, o.step_s, 0);
    CHECK_NEAR(o.train_s, 0.05, 0);
    CHECK_NEAR(o.pull_s, 0.003, 0);
    CHECK_NEAR(o.refill_s, 0.0004, 0);
    CHECK_NEAR(o.idle_poll_s, 0.010 + 0.0004, 1e-12);    /* the rollouts' idle poll, 10 ms */
    CHECK_NEAR(o.trainer_poll_s, 0.005 + 0.0004, 1e-12); /* the trainer's, 5 ms */
    CHECK_NEAR(o.trainer_extra_s, 0.001 + 0.0004, 1e-12);
    CHECK_NEAR(tps, 12.5, 0);
    CHECK(nl == 4 && o.trace == lens && o.n_trace == 4 && o.trace_replay == 1);
    CHECK(lens && lens[0] == 3 && lens[1] == 5 && lens[2] == 1 && lens[3] == 7);
    free(lens);
    /* no round trip in the report: the one measured apart; the decode step from --step-ms */
    const char *rep2 = "{\"step_ms\": 20, \"rollouts\": 2, \"updates\": 3, \"traj_per_s\": 4,"
                       " \"response_lengths\": [2, 4]}";
    CHECK_EQ_INT(ls_file_write_atomic(path, rep2, strlen(rep2)), LS_OK);
    CHECK_EQ_INT(ls_rl_sim_opts_from_report(path, NULL, 0, 0.0009, &o, &lens, &nl, &tps), LS_OK);
    CHECK(o.mode == LS_RL_MODE_LAMINAR && o.gpus == 3 && o.batch == 16 && o.max_batch == 8 && nl == 2);
    CHECK_NEAR(o.step_s, 0.020 + 0.0009, 1e-12);
    CHECK_NEAR(o.refill_s, 0.0009, 0);
    free(lens);
    const char *rep3 = "{\"rollouts\": 2, \"updates\": 3, \"response_lengths\": [2, 4]}";
    CHECK_EQ_INT(ls_file_write_atomic(path, rep3, strlen(rep3)), LS_OK);
    CHECK_EQ_INT(ls_rl_sim_opts_from_report(path, NULL, 0, 0.0009, &o, &lens, &nl, &tps), LS_EINVAL);
    free(lens);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/llmsys-rl-sim-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_issue_rule);
    RUN(test_sync_timeline);
    RUN(test_laminar_refill);
    RUN(test_laminar_queue);
    RUN(test_laminar_repack);
    RUN(test_areal_prefill);
    RUN(test_catalog_costs);
    RUN(test_length_draws);
    RUN(test_gpus_list);
    RUN(test_best_split);
    RUN(test_groups);
    RUN(test_poll_periods);
    RUN(test_staleness_bounds);
    RUN(test_rtt);
    RUN(test_calibration_opts);
    return TEST_RESULT_RMTREE(dir);
}
