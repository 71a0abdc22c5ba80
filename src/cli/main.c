/* main.c - the llmsys command-line entry point: dispatches to one command per system. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "llmsys/core.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command commands[] = {
    {"demo", cmd_demo, "run the main job: every system's scenario (or one: demo NAME)"},
    {"train", cmd_train, "train a GPT model (data-parallel over MPI with --ranks N)"},
    {"eval", cmd_eval, "loss, bits per byte and perplexity of a checkpoint on text"},
    {"generate", cmd_generate, "sample text from a checkpoint"},
    {"quantize", cmd_quantize, "quantize a checkpoint to per-layer bit widths"},
    {"serve", cmd_serve, "serve a (quantized) model over HTTP, pipeline-parallel by plan"},
    {"profile", cmd_profile, "measure per-layer latencies for the planner's cost model"},
    {"plan", cmd_plan, "plan partition, bits and micro-batches for heterogeneous GPUs"},
    {"loader", cmd_loader, "multi-source data loader service and its statistics"},
    {"victim", cmd_victim, "train or serve a black-box classifier (steal audit target)"},
    {"steal", cmd_steal, "extract a replica of a black-box classifier; evaluate it"},
    {"rl", cmd_rl, "asynchronous RL post-training: tasks, run, worker (relays, repack)"},
    {"robust", cmd_robust, "run training under a fault-detecting, self-healing supervisor"},
    {"tokenizer", cmd_tokenizer, "byte-level BPE: train a vocabulary, encode, decode (tokenizer.json)"},
    {"keys", cmd_keys, "generate ZeroMQ CURVE keys (use: llmsys --keys DIR [--curve] COMMAND)"},
    {"sim", cmd_sim, "discrete-event simulators at cluster scale (sim rl, sim robust)"},
};

static char self_path[4096];

const char *ls_cli_self(void) { return self_path; }

int ls_cli_fail(void) {
    const char *m = ls_errmsg();
    fprintf(stderr, "llmsys: %s\n", m && *m ? m : "unknown error");
    return 1;
}

int ls_cli_status(int rc) { return rc < 0 ? ls_cli_fail() : rc; }

int ls_cli_input_error(int rc) {
    return rc == LS_EINVAL || rc == LS_ENOTFOUND || rc == LS_EFORMAT || rc == LS_ERANGE || rc == LS_ECHECKSUM ||
           rc == LS_EINFEASIBLE;
}

int ls_cli_fail_rc(int rc) {
    ls_cli_fail();
    return ls_cli_input_error(rc) ? 2 : 1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: llmsys COMMAND [options]   (llmsys COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n > 0) self_path[n] = '\0';
    else snprintf(self_path, sizeof self_path, "%s", argv[0]);

    ls_runtime_reexec(argv, LS_REEXEC_ALL);       /* OpenMP wait policy, OpenBLAS kernels */
    int shift = cli_security_options(argc, argv); /* --keys PATH, --curve (llmsys keys) */
    if (shift < 0) return -shift;
    argc -= shift;
    argv += shift;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        char f[160]; /* what a bug report needs: the CPU's features and the kernels they chose */
        printf("llmsys 0.1.0\ncpu: %s; llmsys kernels: %s; OpenBLAS kernels: %s\n",
               ls_cpu_features_str(ls_cpu_features(), f, sizeof f), ls_isa_name(ls_cpu_isa()),
               ls_cpu_blas_core_picked());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "llmsys: unknown command '%s' (see llmsys --help)\n", argv[1]);
    return 2;
}
