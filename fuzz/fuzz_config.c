/* fuzz_config.c - libFuzzer target for every JSON config file llmsys reads; built once per
 * kind (FUZZ_KIND, see fuzz/CMakeLists.txt): plan, cluster, mix, tasks, faults, rlconfig,
 * tplan, profile, train, model. Each parser must refuse bad input with an error, never crash. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/rl.h"
#include "llmsys/robust.h"
#include "llmsys/train.h"
#include "rl/internal.h"

#define KIND_PLAN 1
#define KIND_CLUSTER 2
#define KIND_MIX 3
#define KIND_TASKS 4
#define KIND_FAULTS 5
#define KIND_RLCONFIG 6
#define KIND_TPLAN 7
#define KIND_PROFILE 8
#define KIND_TRAIN 9
#define KIND_MODEL 10

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
#if FUZZ_KIND == KIND_CLUSTER
    static ls_plan_catalog *cat;
#endif
    if (!init) {
        fuzz_quiet();
#if FUZZ_KIND == KIND_CLUSTER
        if (ls_plan_catalog_load(NULL, &cat) != LS_OK) abort();
#endif
        init = 1;
    }
    char *s = fuzz_str(data, size);
#if FUZZ_KIND == KIND_PLAN
    ls_plan *p = malloc(sizeof *p);
    if (p) (void)ls_plan_parse(s, size, "plan", 0, p);
    free(p);
#elif FUZZ_KIND == KIND_CLUSTER
    ls_plan_cluster *cl;
    if (ls_plan_cluster_load(cat, fuzz_file(data, size, ".json"), &cl) == LS_OK) ls_plan_cluster_free(cl);
#elif FUZZ_KIND == KIND_MIX
    ls_loader_mix mix;
    if (ls_loader_mix_parse(s, "/nonexistent-fuzz-dir", &mix) == LS_OK) ls_loader_mix_free(&mix);
#elif FUZZ_KIND == KIND_TASKS
    ls_rl_task *t;
    int n;
    if (ls_rl_tasks_read(fuzz_file(data, size, ".jsonl"), &t, &n) == LS_OK) ls_rl_tasks_free(t, n);
#elif FUZZ_KIND == KIND_FAULTS
    ls_fault_plan fp;
    if (ls_fault_plan_parse(s, size, "faults", 4, &fp) == LS_OK) ls_fault_plan_free(&fp);
#elif FUZZ_KIND == KIND_RLCONFIG
    rl_config c;
    (void)rl_config_from_json(s, size, &c);
#elif FUZZ_KIND == KIND_TPLAN
    ls_tplan *p = malloc(sizeof *p);
    if (p) (void)ls_tplan_load(fuzz_file(data, size, ".json"), p);
    free(p);
#elif FUZZ_KIND == KIND_PROFILE
    ls_plan_profile prof;
    (void)ls_plan_profile_load(fuzz_file(data, size, ".json"), &prof);
#elif FUZZ_KIND == KIND_TRAIN
    ls_train_config c = ls_train_defaults();
    (void)ls_train_config_from_json(s, &c);
#elif FUZZ_KIND == KIND_MODEL
    ls_model_config c;
    (void)ls_model_config_from_json(s, &c);
#else
#error "FUZZ_KIND must name a config kind"
#endif
    free(s);
    fuzz_file_done();
    return 0;
}
