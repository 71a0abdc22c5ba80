/* ckpt_cmp.c - test helper: max |a - b| over the parameters of two checkpoints; exit 0
 * when it is <= TOL, 1 when larger, 2 on bad input. Used by the MPI equivalence test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmsys/train.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: ckpt_cmp A.safetensors B.safetensors TOL\n");
        return 2;
    }
    double tol = atof(argv[3]);
    ls_model *a = NULL, *b = NULL;
    if (ls_ckpt_load(argv[1], LS_CKPT_WEIGHTS, &a, NULL) < 0 || ls_ckpt_load(argv[2], LS_CKPT_WEIGHTS, &b, NULL) < 0) {
        fprintf(stderr, "ckpt_cmp: %s\n", ls_errmsg());
        if (a) ls_model_free(a);
        return 2;
    }
    size_t n = ls_model_num_params(a);
    if (n != ls_model_num_params(b)) {
        fprintf(stderr, "ckpt_cmp: different parameter counts %zu and %zu\n", n, ls_model_num_params(b));
        ls_model_free(a);
        ls_model_free(b);
        return 2;
    }
    const float *pa = ls_model_params(a), *pb = ls_model_params(b);
    double maxd = 0, maxa = 0;
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)pa[i] - (double)pb[i]);
        if (d > maxd) maxd = d;
        if (fabs(pa[i]) > maxa) maxa = fabs(pa[i]);
        differ += pa[i] != pb[i];
    }
    printf("ckpt_cmp: %zu params, %zu differ, max |diff| %.3g (max |param| %.3g), tolerance %.3g: %s\n", n, differ,
           maxd, maxa, tol, maxd <= tol ? "ok" : "FAIL");
    ls_model_free(a);
    ls_model_free(b);
    return maxd <= tol ? 0 : 1;
}
