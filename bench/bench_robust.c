/*
 * bench_robust.c - robust training measured end to end on this machine (4 ranks on 2
 * nodes + standbys, tiny model): detection latency per injected fault kind, restart time on
 * a warm standby vs a cold restart (new node, checkpoint from disk), their parts and ratio,
 * blocking time of an in-memory snapshot vs a disk save of the same state, and the ETTR of
 * a run with a fault at a fixed period. Runs `llmsys robust run` (the binary beside this
 * one) and reads its reports.
 *
 *   build/bench_robust [--quick] [--reps N] [--ettr-minutes M] [--fault-every S] [--part P]... [--out FILE]
 *
 * --part faults|blocking|ettr|sim runs only those parts (repeatable; default all); --part
 * restart runs only the warm vs cold restarts of `faults` (interleaved).
 *
 * --quick: 1 repetition, a 1-minute ETTR run with a fault every 20 s (the full run: 3
 * repetitions, 10 minutes with a fault every 2 minutes).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmsys/robust.h"

static char self_dir[4096], bin[4200], work[256];

static double load1(void) {
    double la[3];
    return ls_load_avg(la) == LS_OK ? la[0] : -1;
}

static void stats(const double *v, int n, double *mn, double *md, double *mx) {
    double t[64];
    memcpy(t, v, (size_t)n * sizeof *t);
    *md = n ? ls_median(t, n) : NAN;
    *mn = n ? t[0] : NAN;
    *mx = n ? t[n - 1] : NAN;
}

/* Runs `llmsys robust run` with a plan and extra options; returns the parsed report. */
static cJSON *robust(const char *name, const char *plan, const char *opts, int steps) {
    char pp[512], rp[512], cmd[16384];
    snprintf(pp, sizeof pp, "%s/%s.plan.json", work, name);
    snprintf(rp, sizeof rp, "%s/%s.json", work, name);
    FILE *f = fopen(pp, "w");
    if (!f) return NULL;
    fputs(plan, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s robust run --quiet --inject %s --report %s %s -- llmsys train --config tiny --data %s/corpus.txt "
             "--batch 16 --seq 64 --steps %d --threads 1 --log-every 1000000 --out %s/%s.st > /dev/null 2> %s/%s.err",
             bin, pp, rp, opts, work, steps, work, name, work, name);
    int rc = system(cmd);
    cJSON *j = NULL;
    if (ls_json_read_file(rp, &j) < 0) {
        fprintf(stderr, "bench_robust: %s failed with %d and wrote no report\n", name, rc);
        return NULL;
    }
    if (rc != 0) { /* e.g. standbys exhausted: the report says why; its figures still count */
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "diagnosis");
        fprintf(stderr, "bench_robust: %s stopped: %s\n", name, cJSON_IsString(d) ? d->valuestring : "?");
    }
    return j;
}

/* 1 when the first fault of a report resumed from `from` (memory, disk, scratch). */
static int resumed_from(const cJSON *j, const char *from) {
    const cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "faults"), 0);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(f, "resumed_from");
    return cJSON_IsString(r) && !strcmp(r->valuestring, from);
}

/* Figures of the first fault of `kind` in a report (-1 when none). */
static double fault_field(const cJSON *j, const char *kind, const char *field) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "faults")) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kind");
        if (cJSON_IsString(k) && !strcmp(k->valuestring, kind))
            return cJSON_GetObjectItemCaseSensitive(e, field)->valuedouble;
    }
    return -1;
}

/* The first crash's restart_parts_s (resume_point, launch, load_connect, first_step) into
 * column i of p (0 when the report has none). */
static void restart_parts(const cJSON *j, double p[4][20], int i) {
    static const char *const pn[4] = {"resume_point", "launch", "load_connect", "first_step"};
    const cJSON *e;
    for (int q = 0; q < 4; q++) p[q][i] = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "faults")) {
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(e, "restart_parts_s");
        if (!rp) continue;
        for (int q = 0; q < 4; q++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(rp, pn[q]);
            p[q][i] = cJSON_IsNumber(x) ? x->valuedouble : 0;
        }
        return;
    }
}

/* Adds n named numbers to o. */
static void add_nums(cJSON *o, const char *const *keys, const double *vals, int n) {
    for (int q = 0; q < n; q++) cJSON_AddNumberToObject(o, keys[q], vals[q]);
}

static double num(const cJSON *j, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

int main(int argc, char **argv) {
    int quick = 0, reps = 3;
    double ettr_min = 10, every = 120;
    const char *out = NULL;
    int parts = 0; /* bit k: part k of {faults, blocking, ettr, sim}; 0: all */
    static const char *const part_names[5] = {"faults", "blocking", "ettr", "sim", "restart"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--part") && i + 1 < argc) {
            int k = 0;
            while (k < 5 && strcmp(argv[i + 1], part_names[k])) k++;
            if (k == 5) {
                fprintf(stderr, "bench_robust: --part must be faults, blocking, ettr, sim or restart (warm vs cold only)\n");
                return 2;
            }
            parts |= 1 << k;
            i++;
            continue;
        }
        /* clang-format off */
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ettr-minutes") && i + 1 < argc) ettr_min = atof(argv[++i]);
        else if (!strcmp(argv[i], "--fault-every") && i + 1 < argc) every = atof(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        /* clang-format on */
        else {
            fprintf(stderr, "usage: bench_robust [--quick] [--reps N] [--ettr-minutes M] [--fault-every S] [--part P] "
                            "[--out FILE]\n");
            return 2;
        }
    }
    if (!parts) parts = 15;
    if (quick) {
        reps = 1;
        ettr_min = 1;
        every = 20;
    }
    if (reps < 1 || reps > 20 || !(ettr_min > 0) || !(every > 5)) {
        fprintf(stderr, "bench_robust: --reps in [1, 20], --ettr-minutes > 0, --fault-every > 5\n");
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self_dir, sizeof self_dir - 1);
    if (n <= 0) return 1;
    self_dir[n] = '\0';
    *strrchr(self_dir, '/') = '\0';
    snprintf(bin, sizeof bin, "%s/llmsys", self_dir);
    snprintf(work, sizeof work, "/tmp/llmsys-bench-robust-%d", (int)getpid());
    ls_mkdirs(work);
    char cp[512];
    snprintf(cp, sizeof cp, "%s/corpus.txt", work);
    FILE *cf = fopen(cp, "w");
    if (!cf) return 1;
    for (int i = 1; i <= 3000; i++)
        fprintf(cf, "line %d: the quick brown fox jumps over the lazy dog %d times; copy %d.\n", i, i * 7 % 13, i % 5);
    fclose(cf);
    double load0 = load1();
    printf("bench_robust: 2 nodes x 2 ranks, tiny model, batch 16 x seq 64, %d repetition(s); load %.2f\n", reps,
           load0);

    /* 1. detection latency per kind, and warm vs cold restarts, interleaved per repetition */
    enum { K_CRASH, K_HANG, K_NAN, K_SLOW, K_OOM, NK };
    static const char *const kn[NK] = {"crash", "hang", "nan", "slow", "oom"};
    double det[NK][20], warm[20], cold[20], wpart[4][20], cpart[4][20], wstep[20];
    int nd[NK] = {0}, nw = 0, nc = 0, warm_ok = 0, cold_ok = 0;
    double hang_timeout = 3;
    for (int r = 0; r < reps && (parts & 17); r++) {
        cJSON *j = !(parts & 1) ? NULL :
            robust("mixed",
                   "{\"faults\": [{\"kind\": \"crash\", \"step\": 6, \"rank\": 3}, {\"kind\": \"nan\", \"step\": 14,"
                   " \"rank\": 1}, {\"kind\": \"oom\", \"step\": 22, \"rank\": 2}]}",
                   "--standby 3", 30);
        if (j) {
            int ks[3] = {K_CRASH, K_NAN, K_OOM};
            for (int k = 0; k < 3; k++) {
                double d = fault_field(j, kn[ks[k]], "detection_s");
                if (d >= 0) det[ks[k]][nd[ks[k]]++] = d;
            }
            cJSON_Delete(j);
        }
        /* warm vs cold: the same crash at step 20 of 30, a standby and its pre-started world
         * (parked by then) vs a new node, a fresh mpirun and the disk checkpoint */
        const char *crash20 = "{\"faults\": [{\"kind\": \"crash\", \"step\": 20, \"rank\": 3}]}";
        j = robust("warm", crash20, "--standby 1 --disk-every 2", 30);
        if (j) {
            double w = fault_field(j, "crash", "restart_s");
            if (w > 0) restart_parts(j, wpart, nw);
            if (w > 0) wstep[nw] = num(j, "productive_s", NULL) / num(j, "end_step", NULL);
            if (w > 0) warm[nw++] = w;
            warm_ok += resumed_from(j, "memory");
            cJSON_Delete(j);
        }
        j = robust("cold", crash20, "--standby 0 --cold --disk-every 2", 30);
        if (j) {
            double cr = fault_field(j, "crash", "restart_s");
            if (cr > 0) restart_parts(j, cpart, nc);
            if (cr > 0) cold[nc++] = cr;
            cold_ok += resumed_from(j, "disk");
            cJSON_Delete(j);
        }
        if (!(parts & 1)) continue;
        char ho[64];
        snprintf(ho, sizeof ho, "--hang-timeout %g", hang_timeout);
        j = robust("hang", "{\"faults\": [{\"kind\": \"hang\", \"step\": 6, \"rank\": 1}]}", ho, 20);
        if (j) {
            double d = fault_field(j, "hang", "detection_s");
            if (d >= 0) det[K_HANG][nd[K_HANG]++] = d;
            cJSON_Delete(j);
        }
        j = robust("slow", "{\"faults\": [{\"kind\": \"slow\", \"step\": 2, \"rank\": 2, \"share\": 0.01}]}",
                   "--slow-window 5 --hang-timeout 5", 40);
        if (j) {
            double d = fault_field(j, "slow", "detection_s");
            if (d >= 0) det[K_SLOW][nd[K_SLOW]++] = d;
            cJSON_Delete(j);
        }
    }
    cJSON *res = cJSON_CreateObject();
    if (parts & 1) {
        cJSON *dj = cJSON_AddObjectToObject(res, "detection_s");
        printf("\n  %-28s %8s %8s %8s %5s  goal\n", "detection latency (s)", "min", "median", "max", "runs");
        static const char *const goal[NK] = {"<= 2 s", "<= timeout + 5 s", "at the step", "within 3 windows", "(exit)"};
        for (int k = 0; k < NK; k++) {
            double mn, md, mx;
            stats(det[k], nd[k], &mn, &md, &mx);
            char lbl[64];
            snprintf(lbl, sizeof lbl, "%s%s", kn[k], k == K_HANG ? " (timeout 3 s)" : "");
            printf("  %-28s %8.3f %8.3f %8.3f %5d  %s\n", lbl, mn, md, mx, nd[k], goal[k]);
            cJSON *e = cJSON_AddObjectToObject(dj, kn[k]);
            cJSON_AddNumberToObject(e, "min", mn);
            cJSON_AddNumberToObject(e, "median", md);
            cJSON_AddNumberToObject(e, "max", mx);
            cJSON_AddNumberToObject(e, "runs", nd[k]);
        }
    }
    if (parts & 17) {
        double wmn, wmd, wmx, cmn, cmd, cmx;
        stats(warm, nw, &wmn, &wmd, &wmx);
        stats(cold, nc, &cmn, &cmd, &cmx);
        printf("\n  %-28s %8s %8s %8s %5s\n", "restart after a crash (s)", "min", "median", "max", "runs");
        printf("  %-28s %8.3f %8.3f %8.3f %5d\n", "warm: pre-started, memory", wmn, wmd, wmx, nw);
        printf("  %-28s %8.3f %8.3f %8.3f %5d\n", "cold: new node+mpirun, disk", cmn, cmd, cmx, nc);
        printf("  %-28s %8.2fx (ByteRobust at scale: 10.9x); resumed from memory %d/%d, from disk %d/%d\n",
               "cold / warm (medians)", cmd / wmd, warm_ok, nw, cold_ok, nc);
        cJSON *rj = cJSON_AddObjectToObject(res, "restart_s");
        static const char *const rk[] = {"warm_min", "warm_median", "warm_max",      "cold_min",
                                         "cold_median", "cold_max", "cold_over_warm"};
        add_nums(rj, rk, (const double[]){wmn, wmd, wmx, cmn, cmd, cmx, cmd / wmd}, 7);
        /* where the time goes (the report's restart_parts_s), and the ratio of the restart
         * proper: everything before the relaunched job's first step */
        static const char *const pn[4] = {"resume_point", "launch", "load_connect", "first_step"};
        printf("  %-28s %8s %8s   (medians, s)\n", "restart parts", "warm", "cold");
        double wpre = 0, cpre = 0;
        cJSON *pj = cJSON_AddObjectToObject(res, "restart_parts_median_s");
        for (int q = 0; q < 4; q++) {
            double a, wm, b, cm;
            stats(wpart[q], nw, &a, &wm, &b);
            stats(cpart[q], nc, &a, &cm, &b);
            printf("  %-28s %8.3f %8.3f\n", pn[q], wm, cm);
            cJSON *e = cJSON_AddObjectToObject(pj, pn[q]);
            cJSON_AddNumberToObject(e, "warm", wm);
            cJSON_AddNumberToObject(e, "cold", cm);
        }
        double wb[20], cb[20];
        for (int i = 0; i < nw; i++) wb[i] = warm[i] - wpart[3][i];
        for (int i = 0; i < nc; i++) cb[i] = cold[i] - cpart[3][i];
        double bmn, bmx;
        stats(wb, nw, &bmn, &wpre, &bmx);
        stats(cb, nc, &bmn, &cpre, &bmx);
        printf("  %-28s %8.2fx (%.3f s / %.3f s: localized until every rank holds the state, the first step "
               "left out)\n", "cold / warm before 1st step", cpre / wpre, cpre, wpre);
        double smd;
        stats(wstep, nw, &bmn, &smd, &bmx);
        printf("  %-28s %8.3f s (the warm runs' productive time per step, median)\n", "one training step", smd);
        cJSON_AddNumberToObject(rj, "step_median", smd);
        cJSON_AddNumberToObject(rj, "cold_over_warm_before_first_step", cpre / wpre);
        cJSON_AddNumberToObject(rj, "load", load1());
    }

    /* 2. blocking time of one checkpoint: snapshot into memory vs atomic disk save, same
     * trainer state, interleaved */
    if (parts & 2) {
        /* the trainer blocks for ls_snapshot_copy into its (reused, already mapped) slot; the
         * checksum is the agent's (ls_snapshot_seal, shown for reference); the disk save is
         * the atomic writer with fsync. tiny, small and small x 4 layers (~256 MiB). */
        static const char *const cfgs[3] = {"tiny", "small", "small-28L"};
        cJSON *cj = cJSON_AddArrayToObject(res, "checkpoint_blocking_s");
        printf("\n  %-22s %8s %10s %10s %10s %8s  %s\n", "checkpoint blocking (s)", "state", "memory", "disk", "ratio",
               "seal", "(medians; seal = the agent's checksum, off the trainer's path)");
        for (int ci = 0; ci < (quick ? 2 : 3); ci++) {
            ls_model_config mc;
            ls_model_config_named(ci == 0 ? "tiny" : "small", &mc);
            if (ci == 2) mc.n_layer = 28;
            ls_train_config tc = ls_train_defaults();
            tc.batch = 2;
            tc.seq = 16;
            ls_trainer *t = NULL;
            if (ls_trainer_init(&t, &mc, &tc, NULL) < 0) continue;
            size_t cap = ls_snapshot_size(t), len = 0;
            void *buf = malloc(cap);
            if (buf) memset(buf, 0, cap); /* mapped once, reused every step (as the shared-memory slots) */
            char dp[512];
            snprintf(dp, sizeof dp, "%s/blocking.safetensors", work);
            int R = quick ? 3 : ci == 2 ? 7 : 15;
            double mem[32], disk[32], seal[32];
            for (int r = 0; r < R && buf; r++) { /* interleaved */
                double t0 = ls_now();
                ls_snapshot_copy(t, buf, cap, &len);
                mem[r] = ls_now() - t0;
                t0 = ls_now();
                ls_snapshot_seal(buf, len, NULL);
                seal[r] = ls_now() - t0;
                t0 = ls_now();
                ls_trainer_save(t, dp);
                disk[r] = ls_now() - t0;
            }
            double a, m1, b, c2, m2, d2, s1, sm, s2;
            stats(mem, R, &a, &m1, &b);
            stats(disk, R, &c2, &m2, &d2);
            stats(seal, R, &s1, &sm, &s2);
            char sz[32];
            printf("  %-22s %8s %10.5f %10.5f %9.0fx %10.5f  (%d pairs; min %.5f / %.5f, max %.5f / %.5f; load %.1f)\n",
                   cfgs[ci], ls_fmt_bytes((double)len, sz, sizeof sz), m1, m2, m2 / m1, sm, R, a, c2, b, d2, load1());
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "config", cfgs[ci]);
            static const char *const keys[] = {"bytes",    "memory_median", "memory_min", "memory_max",
                                               "disk_median", "disk_min",   "disk_max",   "seal_median"};
            add_nums(e, keys, (const double[]){(double)len, m1, a, b, m2, c2, d2, sm}, 8);
            cJSON_AddItemToArray(cj, e);
            free(buf);
            ls_trainer_free(t);
        }
    }

    /* 3. ETTR of a longer run with a fault at a fixed period (crash, hang, NaN in turn) */
    if (parts & 4) {
        double dur = ettr_min * 60;
        cJSON *probe = robust("probe", "{\"faults\": []}", "", 20);
        double step_s = probe ? num(probe, "productive_s", NULL) / 20 : 0.1;
        cJSON_Delete(probe);
        int steps = (int)(dur / (step_s > 0 ? step_s : 0.1));
        char plan[8192] = "{\"faults\": [";
        static const char *const cyc[3] = {"crash", "hang", "nan"};
        int nf = 0;
        for (double t = every; t < dur - 5; t += every, nf++)
            snprintf(plan + strlen(plan), sizeof plan - strlen(plan),
                     "%s{\"kind\": \"%s\", \"time\": %.0f, \"rank\": %d}", nf ? ", " : "", cyc[nf % 3], t,
                     (nf * 3 + 1) % 4);
        strcat(plan, "]}");
        char eo[128];
        snprintf(eo, sizeof eo, "--repair %g --hang-timeout 5", every / 4);
        cJSON *ej = robust("ettr", plan, eo, steps);
        double ettr = ej ? num(ej, "ettr", NULL) : NAN, wall = ej ? num(ej, "wall_s", NULL) : NAN;
        int faults = ej ? cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ej, "faults")) : 0;
        double lost = ej ? num(ej, "lost_to_faults_s", NULL) : NAN,
               other = ej ? num(ej, "other_overhead_s", NULL) : NAN;
        char kinds[512] = "";
        const cJSON *fe, *fl = ej ? cJSON_GetObjectItemCaseSensitive(ej, "faults") : NULL;
        cJSON_ArrayForEach(fe, fl) {
            const cJSON *k = cJSON_GetObjectItemCaseSensitive(fe, "kind"),
                        *inj = cJSON_GetObjectItemCaseSensitive(fe, "injected");
            if (cJSON_IsString(k) && strlen(kinds) + 32 < sizeof kinds)
                snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%s%s", kinds[0] ? " " : "",
                         k->valuestring, cJSON_IsTrue(inj) ? "" : "(not injected)");
        }
        printf("\n  ETTR, %d steps (~%.0f s) with a fault every %.0f s: %.3f over %.1f s wall, %d faults [%s], %.1f s "
               "lost "
               "to faults, %.1f s other overhead (start-up, checkpoints, reports)  (goal >= 0.90)\n",
               steps, dur, every, ettr, wall, faults, kinds, lost, other);
        cJSON *ettrj = cJSON_AddObjectToObject(res, "ettr_run");
        static const char *const ek[] = {"steps", "fault_every_s", "ettr", "wall_s", "faults", "lost_to_faults_s"};
        add_nums(ettrj, ek, (const double[]){steps, every, ettr, wall, faults, lost}, 6);
        cJSON_Delete(ej);
    }

    /* 4. the simulator at 9,600 GPUs for 90 days, per policy */
    if (parts & 8) {
        ls_sim_config sc;
        ls_sim_defaults(&sc);
        sc.trials = quick ? 5 : 20;
        cJSON *sj = cJSON_AddObjectToObject(res, "sim_ettr_9600_gpus_90_days");
        printf("\n  simulated ETTR, 9,600 GPUs, 90 days:");
        static const char *const pn[3] = {"disk", "memory", "standby"};
        for (int k = 0; k < 3; k++) {
            sc.policy = k;
            ls_sim_result sr;
            if (ls_sim_run(&sc, &sr) == LS_OK) {
                printf(" %s %.2f%%", pn[k], 100 * sr.ettr);
                cJSON_AddNumberToObject(sj, pn[k], sr.ettr);
            }
        }
    }
    double load_end = load1();
    printf("\n\nload average: %.2f at start, %.2f at end (2 cores shared)\n", load0, load_end);
    cJSON_AddNumberToObject(res, "load_start", load0);
    cJSON_AddNumberToObject(res, "load_end", load_end);
    cJSON_AddBoolToObject(res, "quick", quick);
    if (out && ls_json_write_file(out, res) < 0) fprintf(stderr, "bench_robust: %s\n", ls_errmsg());
    cJSON_Delete(res);
    char rm[512];
    snprintf(rm, sizeof rm, "rm -rf %s", work);
    if (system(rm) != 0) fprintf(stderr, "bench_robust: could not remove %s\n", work);
    return 0;
}
