/* sim.c - discrete-event simulation of a long training job at cluster scale: Poisson node
 * failures with ByteRobust's failure mix, detection/localization/restart/recompute costs per
 * recovery policy (disk checkpoints + requeue, in-memory checkpoints + requeue, in-memory +
 * warm standbys), and the resulting ETTR. Assumptions are documented in docs/robust.md. */
#include <math.h>
#include <string.h>

#include "llmsys/robust.h"

/* Failure kinds: share of failures (ByteRobust, 778k jobs over 3 months; the unlisted
 * remainder counted as "other"), detection and localization seconds with robust
 * monitoring (per-step checks, stack aggregation) and with a timeout-based baseline. */
typedef struct {
    const char *name;
    double share;
    double det_robust, loc_robust, det_base, loc_base;
    int evicts; /* needs a new machine (manual restarts do not) */
} sim_kind;

static const sim_kind kinds[] = {
    {"cuda error", 36.1, 2, 0, 30, 0, 1},
    {"cpu overload", 11.0, 50, 10, 600, 0, 1},
    {"cpu oom", 10.1, 2, 0, 30, 0, 1},
    {"disk", 5.0, 10, 0, 60, 0, 1},
    {"infiniband", 2.9, 30, 0, 600, 0, 1},
    {"job hang", 9.9, 600, 30, 1800, 0, 1},
    {"mfu decline", 0.8, 50, 10, 1800, 0, 1},
    {"nan", 0.3, 10, 4289, 600, 4289, 1},
    {"manual restart", 17.3, 0, 0, 0, 0, 0},
    {"other", 6.6, 10, 0, 60, 0, 1},
};
#define N_KINDS (int)(sizeof kinds / sizeof kinds[0])

void ls_sim_defaults(ls_sim_config *c) {
    memset(c, 0, sizeof *c);
    c->gpus = 9600, c->gpus_per_node = 8;
    c->days = 90;
    c->policy = LS_SIM_STANDBY;
    c->fail_per_1000_node_days = 6.5;
    c->step_s = 10;
    c->ckpt_bytes = 70e9 * 16; /* bf16 weights + fp32 master weights and two AdamW moments */
    c->disk_GBps = 0.1, c->host_GBps = 50;
    c->disk_interval_s = 0;
    c->requeue_s = 600;
    c->warm_restart_s = 600 / 10.9;
    c->standbys = -1; /* P99 of the failures within a repair time */
    c->repair_s = 6 * 3600;
    c->detect_scale = 1;
    c->seed = 1;
    c->trials = 1;
}

static double exp_draw(ls_rng *r, double rate) { return -log(1.0 - ls_rng_uniform_f64(r)) / rate; }

/* Smallest k with P(Poisson(mean) <= k) >= 0.99. */
static int poisson_p99(double mean) {
    double p = exp(-mean), cdf = p;
    int k = 0;
    while (cdf < 0.99 && k < 100000) {
        k++;
        p *= mean / k;
        cdf += p;
    }
    return k;
}

static int pick_kind(ls_rng *r) {
    double tot = 0;
    for (int i = 0; i < N_KINDS; i++) tot += kinds[i].share;
    double u = ls_rng_uniform_f64(r) * tot;
    for (int i = 0; i < N_KINDS; i++) {
        if (u < kinds[i].share) return i;
        u -= kinds[i].share;
    }
    return 0;
}

static int sim_once(const ls_sim_config *c, uint64_t seed, ls_sim_result *r) {
    int nodes = c->gpus / c->gpus_per_node;
    double T = c->days * 86400.0;
    double rate = nodes * c->fail_per_1000_node_days / 1000.0 / 86400.0; /* per second */
    double shard = c->ckpt_bytes / nodes;
    double save_s = c->disk_GBps > 0 ? shard / (c->disk_GBps * 1e9) : 0;
    double snap_s = c->host_GBps > 0 ? shard / (c->host_GBps * 1e9) : 0;
    double interval = c->disk_interval_s;
    if (interval <= 0) /* Young's optimum: sqrt(2 x save time x mean time between failures) */
        interval = rate > 0 ? sqrt(2 * save_s / rate) : T;
    /* productive share while running: periodic blocking checkpoints */
    double f_run = c->policy == LS_SIM_DISK ? interval / (interval + save_s) : c->step_s / (c->step_s + snap_s);
    double ckpt_period = c->policy == LS_SIM_DISK ? interval : c->step_s;
    int standbys = c->standbys;
    if (standbys < 0) standbys = poisson_p99(rate * c->repair_s);
    double back[4096];
    int nback = 0;
    ls_rng rng;
    ls_rng_seed(&rng, seed);
    memset(r, 0, sizeof *r);
    double t = 0, prod = 0;
    int next_fixed = 0;
    while (t < T) {
        double run = rate > 0 ? exp_draw(&rng, rate) : T;
        if (c->n_fail_at > 0) run = next_fixed < c->n_fail_at ? fmax(0, c->fail_at[next_fixed++] - t) : T;
        if (t + run > T) run = T - t;
        prod += run * f_run;
        r->lost_ckpt_s += run * (1 - f_run);
        t += run;
        if (t >= T) break;
        const sim_kind *k = &kinds[c->n_fail_at > 0 ? c->fail_kind % N_KINDS : pick_kind(&rng)];
        r->failures++;
        int robust = c->policy != LS_SIM_DISK;
        double det = (robust ? k->det_robust : k->det_base) * c->detect_scale;
        double loc = robust ? k->loc_robust : k->loc_base;
        /* standbys come back after repair */
        for (int i = 0; i < nback;) {
            if (back[i] <= t) {
                standbys++;
                back[i] = back[--nback];
            } else {
                i++;
            }
        }
        double restart = c->requeue_s;
        if (c->policy == LS_SIM_STANDBY) {
            if (!k->evicts) {
                restart = c->warm_restart_s;
            } else if (standbys > 0) {
                restart = c->warm_restart_s;
                standbys--;
                if (nback < 4096) back[nback++] = t + c->repair_s;
            } else {
                r->standby_misses++;
            }
        }
        /* reading the state back: from storage, or from a peer's memory */
        restart += c->policy == LS_SIM_DISK ? save_s : snap_s;
        /* the work since the last checkpoint is redone (a manual restart saves first) */
        double redo = k->evicts ? fmod(prod, ckpt_period * f_run > 0 ? ckpt_period * f_run : 1) / f_run : 0;
        if (redo > prod) redo = prod;
        prod -= redo * f_run;
        double lost = det + loc + restart;
        if (t + lost > T) lost = T - t;
        r->lost_detect_s += fmin(det, lost);
        r->lost_localize_s += fmin(loc, fmax(0, lost - det));
        r->lost_restart_s += fmax(0, lost - det - loc);
        r->lost_recompute_s += redo * f_run;
        t += lost;
    }
    r->wall_s = T;
    r->productive_s = prod;
    r->ettr = T > 0 ? prod / T : 0;
    return LS_OK;
}

int ls_sim_run(const ls_sim_config *c, ls_sim_result *out) {
    if (c->gpus < 1 || c->gpus_per_node < 1 || c->gpus < c->gpus_per_node)
        return ls_err(LS_EINVAL, "--gpus must be >= --gpus-per-node >= 1");
    if (!(c->days > 0 && c->days <= 3650)) return ls_err(LS_EINVAL, "--days must be in (0, 3650]");
    if (c->policy < LS_SIM_DISK || c->policy > LS_SIM_STANDBY) return ls_err(LS_EINVAL, "unknown policy");
    if (!(c->fail_per_1000_node_days >= 0) || !(c->step_s > 0) || c->ckpt_bytes < 0 || !(c->disk_GBps > 0) ||
        !(c->host_GBps > 0) || c->requeue_s < 0 || c->warm_restart_s < 0 || c->repair_s < 0)
        return ls_err(LS_EINVAL, "simulator: rates, times and sizes must be >= 0 (step time and bandwidths > 0)");
    int trials = c->trials < 1 ? 1 : c->trials;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < trials; i++) {
        ls_sim_result r;
        LS_TRY(sim_once(c, c->seed + (uint64_t)i * 7919, &r));
        out->ettr += r.ettr / trials;
        out->wall_s += r.wall_s / trials;
        out->productive_s += r.productive_s / trials;
        out->failures += r.failures;
        out->lost_detect_s += r.lost_detect_s / trials;
        out->lost_localize_s += r.lost_localize_s / trials;
        out->lost_restart_s += r.lost_restart_s / trials;
        out->lost_recompute_s += r.lost_recompute_s / trials;
        out->lost_ckpt_s += r.lost_ckpt_s / trials;
        out->standby_misses += r.standby_misses;
    }
    out->failures = (out->failures + trials / 2) / trials;
    out->standby_misses = (out->standby_misses + trials / 2) / trials;
    return LS_OK;
}
