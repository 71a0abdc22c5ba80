/* test_rl_sim.c - the simulator against hand-computed timelines (calibrated costs, fixed lengths,
 * with and without the per-batch refill term, Laminar's waiting queue, complete groups, poll periods), the best-split
 * search against its fixed splits, and the round-trip micro-measurement's bounds. */
#include <math.h>

#include "llmsys/rl.h"
#include "test.h"

/* Synchronous, one rollout of 4 slots, every response 10 tokens, step 10 ms, train 50 ms, no pull:
 * each update is refill + 10 steps + train, so 3 updates of 4 take 3 (refill + 0.1 + 0.05) s. */
static void test_sync_timeline(void) {
    static const int len[1] = {10};
    for (int k = 0; k < 2; k++) {
        double refill = k ? 0.002 : 0;
        ls_rl_sim_opts o = ls_rl_sim_defaults();
        o.mode = LS_RL_MODE_SYNC, o.gpus = 2, o.batch = 4, o.max_batch = 4, o.updates = 3, o.prompt_len = 8;
        o.step_s = 0.01, o.train_s = 0.05, o.trace = len, o.n_trace = 1, o.refill_s = refill, o.batch_refill = 1;
        ls_rl_sim_result r;
        CHECK(ls_rl_simulate(&o, &r) == LS_OK);
        double span = 3 * (refill + 10 * 0.01 + 0.05);
        CHECK_NEAR(r.traj_per_s, 12 / span, 1e-6 * 12 / span);
        CHECK_NEAR(r.tokens_per_s, 120 / span, 1e-6 * 120 / span);
        CHECK_EQ_INT(r.max_staleness, 0);
        /* idle: the refill pauses and the training time, out of the whole span */
        CHECK_NEAR(r.idle_frac, 3 * (refill + 0.05) / span, 1e-6);
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

int main(void) {
    RUN(test_sync_timeline);
    RUN(test_laminar_refill);
    RUN(test_laminar_queue);
    RUN(test_best_split);
    RUN(test_groups);
    RUN(test_poll_periods);
    RUN(test_staleness_bounds);
    RUN(test_rtt);
    return TEST_RESULT();
}
