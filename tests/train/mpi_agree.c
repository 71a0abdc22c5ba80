/* mpi_agree.c - test helper for train.mpi: ls_dist_agree under `mpirun -np 2`. A failure on
 * rank 1 alone reaches rank 0 as LS_EPEER naming rank 1, and rank 1 keeps its own status;
 * both ranks learn that rank 1 failed first; with both failing, rank 0 is the first; with
 * none, every rank goes on. Exits 0 when every check holds on this rank. */
#include <stdio.h>
#include <string.h>

#include "llmsys/train.h"

static int bad_checks;

static void check(int ok, const char *what, int rank) {
    if (!ok) fprintf(stderr, "mpi_agree: rank %d: %s (%s)\n", rank, what, ls_errmsg());
    bad_checks += !ok;
}

int main(void) {
    ls_dist *d = NULL;
    if (ls_dist_init(&d) < 0) {
        fprintf(stderr, "mpi_agree: %s\n", ls_errmsg());
        return 1;
    }
    int r = ls_dist_rank(d), first = -2;
    if (ls_dist_size(d) != 2) {
        fprintf(stderr, "mpi_agree: run under mpirun -np 2\n");
        ls_dist_free(d);
        return 2;
    }
    int rc = ls_dist_agree(d, r == 1 ? ls_err(LS_EIO, "rank 1's own failure") : LS_OK, &first);
    check(r == 1 ? rc == LS_EIO : rc == LS_EPEER && strstr(ls_errmsg(), "rank 1 failed"), "one rank failed", r);
    check(first == 1, "the first failed rank is 1", r);
    rc = ls_dist_agree(d, ls_err(LS_EINVAL, "both"), &first);
    check(rc == LS_EINVAL && first == 0, "both failed: the first is rank 0", r);
    rc = ls_dist_agree(d, LS_OK, &first);
    check(rc == LS_OK && first == -1, "none failed", r);
    ls_dist_free(d);
    return bad_checks ? 1 : 0;
}
