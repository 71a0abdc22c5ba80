/* mpi_indicator.c - test helper for plan.qsync: the QSync indicator's statistics of the tiny
 * model on a generated corpus (global batch 4), computed by ls_tplan_indicator_run alone or
 * collectively under `mpirun -np 2` (each rank its shard, summed); rank 0 writes them to
 * argv[1], one line per Linear layer: fwd, dx, dw for fp32, bf16, fp16, int8, then xmass.
 * The two runs see the same rows and weights, so every statistic but int8's (each rank
 * scales by its own tensors' ranges) must agree within float tolerance. */
#include <stdio.h>
#include <stdlib.h>

#include "../train/train_util.h"
#include "llmsys/plan.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mpi_indicator OUT.txt\n");
        return 2;
    }
    ls_dist *d = NULL;
    if (ls_dist_init(&d) < 0) {
        fprintf(stderr, "mpi_indicator: %s\n", ls_errmsg());
        return 1;
    }
    static const char *const words[] = {"apples", "and", "pears", "seven", "twelve", "of", "the", "ripe", "green"};
    ls_corpus *c = test_sentences(words, 9, 60000, 4, 6);
    ls_tplan *p = calloc(1, sizeof *p);
    ls_tplan_indicator *acc = calloc(1, sizeof *acc);
    int rc = c && p && acc ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK) rc = ls_model_config_named("tiny", &p->cfg);
    p->batch = 4, p->seq = 16, p->ranks = ls_dist_size(d);
    if (rc == LS_OK) rc = ls_tplan_indicator_run(p, c, NULL, 1, ls_dist_size(d) > 1 ? d : NULL, acc);
    if (rc == LS_OK && ls_dist_rank(d) == 0) {
        FILE *f = fopen(argv[1], "w");
        for (int i = 0; f && i < acc->n_lin; i++) {
            for (int q = 0; q < LS_PREC_COUNT; q++)
                fprintf(f, "%.9g %.9g %.9g ", acc->fwd[i][q], acc->dx[i][q], acc->dw[i][q]);
            fprintf(f, "%.9g %d\n", acc->xmass[i], acc->passes);
        }
        if (!f || fclose(f) != 0) rc = ls_err(LS_EIO, "cannot write %s", argv[1]);
    }
    if (rc < 0) fprintf(stderr, "mpi_indicator: %s\n", ls_errmsg());
    ls_corpus_free(c);
    free(p), free(acc);
    ls_dist_free(d);
    return rc < 0;
}
