/* bench_tokenizer.c - the byte-level BPE tokenizer, measured in one run:
 *
 *   build/bench_tokenizer [--quick] [--vocab N] [--mb M] [--rounds R] [--out FILE]
 *
 * Corpus: the repository's own docs and C sources (prose and code), repeated to M MiB.
 * 1. Training: wall time to learn N tokens from the corpus, merges per second.
 * 2. Encoding, one thread, the two sides interleaved R times: the byte tokenizer the loader uses
 *    today (each byte widened to an int32 id: the floor of any tokenizer) vs BPE encode of the
 *    same bytes; MiB/s min/median/max of each, the ratio, and bytes per token.
 * 3. Decoding: MiB/s of ids back to bytes (checked equal to the input).
 * Scalar C on every CPU (no SIMD path); the load average is printed with the figures.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/tokenizer.h"

/* Appends every regular file of dir ending in ext to *buf. */
static void append_dir(const char *dir, const char *ext, char **buf, size_t *len) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name), m = strlen(ext);
        if (n <= m || strcmp(e->d_name + n - m, ext)) continue;
        char path[8192], *data;
        size_t dl;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (ls_file_read(path, &data, &dl) != LS_OK) continue;
        char *nb = realloc(*buf, *len + dl);
        if (nb) {
            memcpy(nb + *len, data, dl);
            *buf = nb;
            *len += dl;
        }
        free(data);
    }
    closedir(d);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static cJSON *stats(const char *name, double *v, int n, double *med) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddNumberToObject(o, "min", v[0]);
    cJSON_AddNumberToObject(o, "median", *med);
    cJSON_AddNumberToObject(o, "max", v[n - 1]);
    return o;
}

int main(int argc, char **argv) {
    int quick = 0, vocab = 4096, rounds = 5;
    double mb = 8;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1, vocab = 1024, mb = 1, rounds = 3;
        else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else {
            fprintf(stderr, "usage: bench_tokenizer [--quick] [--vocab N] [--mb M] [--rounds R] [--out FILE]\n");
            return 2;
        }
    }
    if (vocab < 260 || mb <= 0 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "bench_tokenizer: --vocab >= 260, --mb > 0, --rounds in [1, 1000]\n");
        return 2;
    }
    const char *src = getenv("LLMSYS_SOURCE_DIR") ? getenv("LLMSYS_SOURCE_DIR") : LLMSYS_SOURCE_DIR;
    char *corpus = NULL, path[4096];
    size_t clen = 0;
    static const char *const dirs[][2] = {{"docs", ".md"}, {"src/core", ".c"},   {"src/model", ".c"},
                                          {"src/train", ".c"}, {"src/serve", ".c"}, {"src/loader", ".c"},
                                          {"src/plan", ".c"}, {"src/text", ".c"}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", src, dirs[i][0]);
        append_dir(path, dirs[i][1], &corpus, &clen);
    }
    if (clen < 1000) {
        fprintf(stderr, "bench_tokenizer: no corpus under %s (set LLMSYS_SOURCE_DIR)\n", src);
        return 1;
    }
    double load[3] = {0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(lf);
    }

    /* 1. training */
    const char *specials[] = LS_BPE_SPECIALS;
    ls_bpe_train_opts o = {vocab, 2, specials, 3, 0};
    ls_bpe *t = NULL;
    const char *texts[] = {corpus};
    double t0 = ls_now();
    if (ls_bpe_train(texts, &clen, 1, &o, &t) != LS_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", ls_errmsg());
        return 1;
    }
    double train_s = ls_now() - t0;

    /* 2. encoding: the corpus repeated to mb MiB */
    size_t n = (size_t)(mb * 1048576.0);
    char *text = malloc(n);
    int32_t *bytes_ids = malloc(sizeof(int32_t) * n);
    double *r_byte = calloc((size_t)rounds, sizeof(double)), *r_bpe = calloc((size_t)rounds, sizeof(double));
    double *r_dec = calloc((size_t)rounds, sizeof(double));
    if (!text || !bytes_ids || !r_byte || !r_bpe || !r_dec) return 1;
    for (size_t i = 0; i < n; i += clen) memcpy(text + i, corpus, n - i < clen ? n - i : clen);
    size_t n_tok = 0;
    volatile int64_t sink = 0;
    for (int r = 0; r < rounds; r++) {
        t0 = ls_now();
        for (size_t i = 0; i < n; i++) bytes_ids[i] = (unsigned char)text[i];
        sink += bytes_ids[n / 2];
        r_byte[r] = (double)n / 1048576.0 / (ls_now() - t0);
        int32_t *ids;
        t0 = ls_now();
        if (ls_bpe_encode(t, text, n, &ids, &n_tok) != LS_OK) return 1;
        r_bpe[r] = (double)n / 1048576.0 / (ls_now() - t0);
        char *back;
        size_t blen;
        t0 = ls_now();
        if (ls_bpe_decode(t, ids, n_tok, &back, &blen) != LS_OK) return 1;
        r_dec[r] = (double)n / 1048576.0 / (ls_now() - t0);
        if (blen != n || memcmp(back, text, n)) {
            fprintf(stderr, "bench_tokenizer: decode(encode(x)) != x\n");
            return 1;
        }
        free(back);
        free(ids);
    }
    double m_byte, m_bpe, m_dec;
    cJSON *j = cJSON_CreateObject(), *rows = cJSON_CreateArray();
    cJSON_AddItemToArray(rows, stats("byte tokens (int32 widening)", r_byte, rounds, &m_byte));
    cJSON_AddItemToArray(rows, stats("bpe encode", r_bpe, rounds, &m_bpe));
    cJSON_AddItemToArray(rows, stats("bpe decode", r_dec, rounds, &m_dec));

    printf("bench_tokenizer: corpus %.2f MiB (docs + C sources) repeated to %.1f MiB, vocab %d, %d rounds, "
           "scalar C, load average %.2f %.2f %.2f%s\n",
           clen / 1048576.0, n / 1048576.0, vocab, rounds, load[0], load[1], load[2], quick ? " (quick)" : "");
    printf("training: %d merges in %.2f s (%.0f merges/s)\n", ls_bpe_n_merges(t), train_s,
           ls_bpe_n_merges(t) / train_s);
    printf("%-30s %10s %10s %10s\n", "MiB/s, one thread", "min", "median", "max");
    const char *names[] = {"byte tokens (int32 widening)", "bpe encode", "bpe decode"};
    double *vals[] = {r_byte, r_bpe, r_dec};
    for (int k = 0; k < 3; k++) printf("%-30s %10.1f %10.1f %10.1f\n", names[k], vals[k][0], vals[k][rounds / 2], vals[k][rounds - 1]);
    printf("bpe encode / byte tokens: %.3f (median); %.2f bytes per token; %.2f M tokens/s encoded\n", m_bpe / m_byte,
           (double)n / n_tok, m_bpe * 1048576.0 / ((double)n / n_tok) / 1e6);

    cJSON_AddStringToObject(j, "bench", "tokenizer");
    cJSON_AddNumberToObject(j, "corpus_bytes", (double)clen);
    cJSON_AddNumberToObject(j, "encoded_bytes", (double)n);
    cJSON_AddNumberToObject(j, "vocab", vocab);
    cJSON_AddNumberToObject(j, "merges", ls_bpe_n_merges(t));
    cJSON_AddNumberToObject(j, "train_s", train_s);
    cJSON_AddNumberToObject(j, "bytes_per_token", (double)n / n_tok);
    cJSON_AddNumberToObject(j, "encode_over_bytes", m_bpe / m_byte);
    cJSON_AddItemToObject(j, "mib_per_s", rows);
    cJSON_AddNumberToObject(j, "load1", load[0]);
    cJSON_AddBoolToObject(j, "quick", quick);
    int rc = 0;
    if (out && ls_json_write_file(out, j) != LS_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", ls_errmsg());
        rc = 1;
    }
    cJSON_Delete(j);
    ls_bpe_free(t);
    free(corpus);
    free(text);
    free(bytes_ids);
    free(r_byte);
    free(r_bpe);
    free(r_dec);
    (void)sink;
    return rc;
}
