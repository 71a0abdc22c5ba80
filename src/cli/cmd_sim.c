/* cmd_sim.c - `llmsys sim SYSTEM`: dispatches to each system's cluster-scale simulator. */
#include "cli/args.h"
#include "cli/cli.h"

int cmd_sim(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"rl", cmd_sim_rl}, {"robust", cmd_sim_robust}};
    return ls_args_subcommand("sim", subs, LS_NARGS(subs), argc, argv,
                              "usage: llmsys sim SYSTEM [options]\n  rl       asynchronous RL designs at 64-1024 GPUs\n"
                              "  robust   ETTR of a long training job under failures, per recovery policy\n");
}
