/* test_loader_balance.c - naive / LPT / Karmarkar–Karp partitioning against exhaustive
 * search and the known approximation bounds. */
#include <stdlib.h>

#include "llmsys/loader.h"
#include "test.h"

static double part_max(const double *c, const int *p, int n, int k) {
    double s[16] = {0}, mx = 0;
    for (int i = 0; i < n; i++) s[p[i]] += c[i];
    for (int j = 0; j < k; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

static int valid(const int *p, int n, int k) {
    for (int i = 0; i < n; i++)
        if (p[i] < 0 || p[i] >= k) return 0;
    return 1;
}

static void test_known_cases(void) {
    /* Classic KK example: {8,7,6,5,4} in two parts. Optimum 15 ({8,7}, {6,5,4}); KK's
     * differencing 8-7, 6-5, 4-1, 3-1 ends with spread 2, i.e. sums 16 / 14. LPT: 8,7 ->
     * 6 to 7's side (13), 5 to 8's (13), 4 -> 17/13. */
    double c[5] = {8, 7, 6, 5, 4};
    int p[5];
    CHECK_NEAR(ls_balance_brute_force(c, 5, 2, p), 15, 0);
    CHECK_NEAR(part_max(c, p, 5, 2), 15, 0);
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_KK, c, NULL, 5, 2, p), 0);
    CHECK_NEAR(part_max(c, p, 5, 2), 16, 0);
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_LPT, c, NULL, 5, 2, p), 0);
    CHECK_NEAR(part_max(c, p, 5, 2), 17, 0);
    /* Naive: contiguous slices of equal weight in draw order. */
    int w[6] = {1, 1, 1, 1, 1, 1};
    double c6[6] = {1, 1, 1, 1, 1, 1};
    int q[6];
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_NAIVE, c6, w, 6, 3, q), 0);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(q[i], i / 2);
    /* Empty input and one part are fine; zero parts is an error. */
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_KK, c, NULL, 0, 3, p), 0);
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_KK, c, NULL, 5, 1, p), 0);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(p[i], 0);
    CHECK(ls_balance_partition(LS_BALANCE_KK, c, NULL, 5, 0, p) == LS_EINVAL);
}

static void test_vs_brute_force(void) {
    ls_rng r;
    ls_rng_seed(&r, 7);
    double worst_lpt = 0, worst_kk = 0, sum_kk = 0;
    int cases = 0;
    for (int t = 0; t < 300; t++) {
        int n = 3 + (int)ls_rng_below(&r, 8), k = 2 + (int)ls_rng_below(&r, 3);
        double c[12];
        int p[12];
        for (int i = 0; i < n; i++) {
            int len = 1 + (int)ls_rng_below(&r, 512);
            c[i] = ls_loader_cost(1.0, 64.0, len);
        }
        double opt = ls_balance_brute_force(c, n, k, p);
        CHECK(valid(p, n, k));
        CHECK_NEAR(part_max(c, p, n, k), opt, 1e-9 * opt);
        CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_LPT, c, NULL, n, k, p), 0);
        CHECK(valid(p, n, k));
        double lpt = part_max(c, p, n, k) / opt;
        CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_KK, c, NULL, n, k, p), 0);
        CHECK(valid(p, n, k));
        double kk = part_max(c, p, n, k) / opt;
        /* Graham's bound for LPT and the 4/3 bound for multiway KK (Michiels et al.). */
        CHECK_MSG(lpt <= 4.0 / 3.0 - 1.0 / (3.0 * k) + 1e-9, "case %d: LPT/OPT = %.4f", t, lpt);
        CHECK_MSG(kk <= 4.0 / 3.0 + 1e-9, "case %d: KK/OPT = %.4f", t, kk);
        CHECK(lpt >= 1 - 1e-12 && kk >= 1 - 1e-12);
        worst_lpt = lpt > worst_lpt ? lpt : worst_lpt;
        worst_kk = kk > worst_kk ? kk : worst_kk;
        sum_kk += kk;
        cases++;
    }
    fprintf(stderr, "  300 cases: worst LPT/OPT %.3f, worst KK/OPT %.3f, mean KK/OPT %.4f\n", worst_lpt, worst_kk,
            sum_kk / cases);
    CHECK(sum_kk / cases < 1.05);
}

/* Many items with a long tail: balanced algorithms land near perfect, naive does not. */
static void test_long_tail(void) {
    ls_rng r;
    ls_rng_seed(&r, 11);
    enum { N = 600, K = 8 };
    double c[N];
    int w[N], p[N];
    for (int i = 0; i < N; i++) {
        double u = ls_rng_uniform_f64(&r);
        int len = (int)(32.0 / pow(1.0 - u * 0.999, 0.9)); /* Pareto-like, capped by n_ctx */
        if (len > 2048) len = 2048;
        w[i] = len;
        c[i] = ls_loader_cost(1.0, 256.0, len);
    }
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_NAIVE, c, w, N, K, p), 0);
    double naive = ls_balance_imbalance(c, p, N, K, NULL);
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_LPT, c, w, N, K, p), 0);
    double lpt = ls_balance_imbalance(c, p, N, K, NULL);
    CHECK_EQ_INT(ls_balance_partition(LS_BALANCE_KK, c, w, N, K, p), 0);
    double kk = ls_balance_imbalance(c, p, N, K, NULL);
    fprintf(stderr, "  long tail max/mean: naive %.3f, LPT %.4f, KK %.4f\n", naive, lpt, kk);
    CHECK(kk <= 1.02 && lpt <= 1.05);
    CHECK(naive > kk);
}

int main(void) {
    RUN(test_known_cases);
    RUN(test_vs_brute_force);
    RUN(test_long_tail);
    return TEST_RESULT();
}
