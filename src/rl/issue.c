/* issue.c - the one owner of the four designs' issue rule: how far ahead of the trainer
 * each design lets rollouts take work. The runtime's manager asks it per group, the
 * simulator per trajectory; both pass counts in their own unit. */
#include "llmsys/rl.h"

int ls_rl_may_issue(const ls_rl_issue_state *q, int64_t issued, int version) {
    int64_t B = q->batch, P = q->trainer_version, s = q->staleness, v = version;
    if (B < 1) return 0; /* no batch: nothing to issue toward (and issued / B below needs B > 0) */
    switch (q->mode) {
    case LS_RL_MODE_SYNC: /* on-policy: the trainer's version only, one batch at a time */
        return v >= P && issued < (P + 1) * B;
    case LS_RL_MODE_ONESTEP: /* batch k + 1 on version k: at most two batches beyond the trainer's */
        return v >= P - 1 && issued < (P + 2) * B && v >= issued / B - 1;
    case LS_RL_MODE_AREAL: /* AReaL's capacity rule, on the version the asking rollout holds */
        return issued < (v + s + 1) * B;
    default: /* laminar: no staleness bound; the buffer holds at most the window beyond what was consumed */
        return issued - q->consumed < q->window;
    }
}
