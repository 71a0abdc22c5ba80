/* mpi_mask.c - test helper for train.mpi: trains tiny for a few steps on batches whose rows
 * mask different numbers of targets (-1), so ranks hold unequal target counts; rank 0
 * saves the weights to argv[1]. Run alone and under `mpirun -np 2`: the results agree only
 * if the all-reduce weights each rank by its target count. */
#include <stdio.h>
#include <stdlib.h>

#include "llmsys/train.h"

typedef struct {
    ls_batch_source *inner;
} mask_ctx;

/* Row j of the global batch masks its first 5·j targets. */
static int mask_fill(ls_batch_source *s, int64_t step, int row0, int rows, int T, int *tokens, int *targets) {
    mask_ctx *m = s->ctx;
    LS_TRY(m->inner->fill(m->inner, step, row0, rows, T, tokens, targets));
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < 5 * (row0 + r) && i < T; i++) targets[r * T + i] = -1;
    return LS_OK;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mpi_mask OUT.safetensors\n");
        return 2;
    }
    ls_dist *d = NULL;
    if (ls_dist_init(&d) < 0) {
        fprintf(stderr, "mpi_mask: %s\n", ls_errmsg());
        return 1;
    }
    ls_model_set_threads(1);
    /* generated text: the same on every rank */
    size_t n = 60000;
    char *text = malloc(n + 64);
    ls_rng g;
    ls_rng_seed(&g, 4);
    size_t k = 0;
    while (text && k < n)
        k += (size_t)sprintf(text + k, "%u apples and %u pears. ", (unsigned)ls_rng_below(&g, 50),
                             (unsigned)ls_rng_below(&g, 50));
    const char *docs[1] = {text};
    size_t lens[1] = {n};
    ls_corpus *c = NULL;
    ls_trainer *t = NULL;
    ls_batch_source *inner = NULL;
    ls_model_config mc;
    ls_train_config tc = ls_train_defaults();
    tc.batch = 4;
    tc.seq = 16;
    tc.steps = 4;
    tc.opt.warmup_steps = 1;
    int rc = text ? ls_corpus_from_docs(&c, "generated", docs, lens, 1, NULL) : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK) rc = ls_model_config_named("tiny", &mc);
    if (rc == LS_OK) rc = ls_trainer_init(&t, &mc, &tc, d);
    tc.shards = 4; /* the same global batch on any rank count */
    if (rc == LS_OK) rc = ls_batch_source_corpus(&inner, c, &tc, ls_dist_size(d));
    mask_ctx mctx = {inner};
    ls_batch_source src = {"masked", 1, mask_fill, NULL, &mctx};
    float loss = 0;
    for (int s = 0; rc == LS_OK && s < tc.steps; s++) rc = ls_trainer_step(t, &src, &loss, NULL);
    if (rc == LS_OK && ls_dist_rank(d) == 0) {
        rc = ls_ckpt_save(argv[1], ls_trainer_model(t), ls_trainer_step_index(t), NULL, LS_CKPT_WEIGHTS);
        printf("mpi_mask: %d rank(s), final loss %.6f\n", ls_dist_size(d), loss);
    }
    if (rc < 0) fprintf(stderr, "mpi_mask: rank %d: %s\n", ls_dist_rank(d), ls_errmsg());
    ls_batch_source_free(inner);
    ls_trainer_free(t);
    ls_corpus_free(c);
    ls_dist_free(d);
    free(text);
    return rc < 0 ? 1 : 0;
}
