/* demo.c - `llmsys demo`: the main job, every system's scenario in turn (or one by name). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"

typedef struct {
    const char *name;
    int (*fn)(const ls_demo_ctx *);
    const char *help;
} scenario;

/* In dependency order: later scenarios may reuse what "core" trained (workdir/core/). */
static const scenario scenarios[] = {
    {"core", demo_core, "train the small GPT on local text, save, evaluate, sample"},
    {"loader", demo_loader, "three sources, a curriculum, 4 ranks: shares and cost balance"},
    {"serve", demo_serve, "quantize to mixed bits, serve on 2 pipeline stages over HTTP"},
    {"plan", demo_plan, "plan OPT-30B and Llama-2-70B on mixed GPU clusters vs baselines"},
    {"steal", demo_steal, "steal two Fashion-MNIST victims over HTTP; PRADA and the query monitor"},
    {"rl", demo_rl, "async RL with relays and repack vs synchronous; reward rises; simulator"},
    {"qsync", demo_qsync, "2 ranks, one throttled: per-layer precision plan, predicted vs measured, loss"},
    {"robust", demo_robust, "4 ranks + a warm standby survive a crash, a hang and a NaN; ETTR"},
};
#define N_SCENARIOS (int)(sizeof scenarios / sizeof scenarios[0])

int cmd_demo(int argc, char **argv) {
    int list = 0, quick = 0;
    const char *workdir = "demo-out";
    const char *pos[8];
    int npos = 0;
    ls_arg spec[] = {
        {"list", LS_ARG_FLAG, &list, NULL, "name the scenarios and exit"},
        {"quick", LS_ARG_FLAG, &quick, NULL, "reduced run of each scenario (seconds, for tests)"},
        {"workdir", LS_ARG_PATH, &workdir, "DIR", "where scenarios write their files (default demo-out)"},
    };
    int rc = ls_args_parse(
        "demo", "Runs every scenario (about ten minutes on 2 cores), or only those named: llmsys demo [NAME...]", spec,
        LS_NARGS(spec), argc, argv, pos, LS_NARGS(pos), &npos);
    if (rc) return LS_ARGS_EXIT(rc);
    if (list) {
        for (int i = 0; i < N_SCENARIOS; i++) printf("%-8s %s\n", scenarios[i].name, scenarios[i].help);
        return 0;
    }
    for (int p = 0; p < npos; p++) {
        int found = 0;
        for (int i = 0; i < N_SCENARIOS; i++) found |= !strcmp(pos[p], scenarios[i].name);
        if (!found) return ls_usage_err("demo", "unknown scenario '%s' (see llmsys demo --list)", pos[p]);
    }
    if (ls_mkdirs(workdir) != LS_OK) return ls_cli_fail();
    ls_demo_ctx ctx = {workdir, quick};
    double t0 = ls_now();
    int failed = 0, ran = 0;
    for (int i = 0; i < N_SCENARIOS; i++) {
        int want = npos == 0;
        for (int p = 0; p < npos; p++) want |= !strcmp(pos[p], scenarios[i].name);
        if (!want) continue;
        printf("\n=== demo %s: %s\n", scenarios[i].name, scenarios[i].help);
        fflush(stdout);
        double ts = ls_now();
        int src = scenarios[i].fn(&ctx);
        ran++;
        printf("=== demo %s: %s (%.1f s)\n", scenarios[i].name, src == 0 ? "ok" : "FAILED", ls_now() - ts);
        fflush(stdout);
        if (src != 0) failed++;
    }
    printf("\ndemo: %d scenario(s), %d failed, %.1f s\n", ran, failed, ls_now() - t0);
    return failed ? 1 : 0;
}
