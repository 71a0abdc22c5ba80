/* cmd_sim.c - `llmsys sim SYSTEM`: dispatches to each system's cluster-scale simulator. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int cmd_sim(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: llmsys sim SYSTEM [options]\n  rl       asynchronous RL designs at 64-1024 GPUs\n"
                "  robust   ETTR of a long training job under failures, per recovery policy\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "rl")) return cmd_sim_rl(argc - 1, argv + 1);
    if (!strcmp(argv[1], "robust")) return cmd_sim_robust(argc - 1, argv + 1);
    fprintf(stderr, "llmsys sim: unknown system '%s' (known: rl, robust)\n", argv[1]);
    return 2;
}
