/* cmd_tokenizer.c - `llmsys tokenizer train|encode|decode`: byte-level BPE vocabularies in the
 * Hugging Face tokenizer.json format. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/tokenizer.h"

static int tok_train(int argc, char **argv) {
    ls_strlist inputs = {0}, specials = {0};
    const char *out = NULL;
    int vocab = 0, min_freq = 2;
    ls_arg spec[] = {
        {"input", LS_ARG_PATH_LIST, &inputs, "FILE", "training text files", 1},
        {"vocab-size", LS_ARG_INT, &vocab, "N", "tokens in all: 256 bytes + 3 model specials + added + merges", 1,
         LS_RANGE(259, LS_BPE_MAX_VOCAB)},
        {"min-freq", LS_ARG_INT, &min_freq, "N", "stop when the best pair occurs fewer times (default 2)", 0,
         LS_RANGE(1, INT_MAX)},
        {"special", LS_ARG_STR_LIST, &specials, "TOKEN",
         "more added tokens, e.g. '<|endoftext|>' (ids 256-258 are always <|bos|> <|eos|> <|pad|>)"},
        {"out", LS_ARG_PATH, &out, "FILE", "tokenizer.json to write", 1},
    };
    int rc = ls_args("tokenizer train", "Trains a byte-level BPE vocabulary (GPT-2 pre-tokenizer).", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    ls_bpe_train_opts o = {vocab, min_freq, (const char *const *)specials.v, specials.n, 1, 1};
    ls_bpe *t = NULL;
    double t0 = ls_now();
    if (ls_out_path_check("out", out)) /* before the training */
        rc = ls_cli_fail();
    else if ((rc = ls_bpe_train_files(inputs.v, inputs.n, &o, &t))) /* reads --input, trains here */
        rc = ls_cli_fail_rc(rc);
    else if (ls_bpe_save(t, out))
        rc = ls_cli_fail();
    else
        printf("tokenizer: %d tokens (%d merges) from %d file(s) in %.2f s -> %s\n", ls_bpe_vocab_size(t),
               ls_bpe_n_merges(t), inputs.n, ls_now() - t0, out);
    ls_bpe_free(t);
    ls_strlist_free(&inputs);
    ls_strlist_free(&specials);
    return rc;
}

/* Reads --text or --input into a malloc'd buffer. */
static int read_text(const char *text, const char *input, char **buf, size_t *len) {
    if (input) return ls_file_read(input, buf, len);
    *len = strlen(text);
    *buf = strdup(text);
    return *buf ? LS_OK : ls_err(LS_ENOMEM, "text");
}

static int tok_encode(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *input = NULL;
    int count = 0;
    ls_arg spec[] = {
        {"tokenizer", LS_ARG_PATH, &path, "FILE", "tokenizer.json", 1},
        {"text", LS_ARG_STR, &text, "STRING", "text to encode"},
        {"input", LS_ARG_PATH, &input, "FILE", "file to encode (instead of --text)"},
        {"count", LS_ARG_FLAG, &count, NULL, "print only the byte and token counts"},
    };
    int rc = ls_args("tokenizer encode", "Prints the token ids of a text, space-separated.", spec, LS_NARGS(spec), argc,
                     argv);
    if (rc >= 0) return rc;
    if (!text == !input) return fprintf(stderr, "llmsys tokenizer encode: give one of --text or --input\n"), 2;
    ls_bpe *t = NULL;
    char *buf = NULL;
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    rc = ls_bpe_load(path, &t);
    if (rc == LS_OK) rc = read_text(text, input, &buf, &len);
    if (rc == LS_OK) rc = ls_bpe_encode(t, buf, len, &ids, &n);
    if (rc == LS_OK && count) printf("%zu bytes -> %zu tokens (%.3f bytes/token)\n", len, n, n ? (double)len / n : 0.0);
    for (size_t i = 0; rc == LS_OK && !count && i < n; i++) printf("%d%c", ids[i], i + 1 == n ? '\n' : ' ');
    free(ids);
    free(buf);
    ls_bpe_free(t);
    return rc ? ls_cli_fail_rc(rc) : 0; /* the inputs, then local work */
}

static int tok_decode(int argc, char **argv) {
    const char *path = NULL, *list = NULL, *input = NULL;
    ls_arg spec[] = {
        {"tokenizer", LS_ARG_PATH, &path, "FILE", "tokenizer.json", 1},
        {"ids", LS_ARG_STR, &list, "\"ID ID ...\"", "token ids separated by spaces or commas"},
        {"input", LS_ARG_PATH, &input, "FILE", "read the ids from a file (instead of --ids)"},
    };
    int rc = ls_args("tokenizer decode", "Writes the text of token ids to stdout, byte for byte.", spec, LS_NARGS(spec),
                     argc, argv);
    if (rc >= 0) return rc;
    if (!list == !input) return fprintf(stderr, "llmsys tokenizer decode: give one of --ids or --input\n"), 2;
    char *buf = NULL;
    size_t blen;
    if (input && (rc = ls_file_read(input, &buf, &blen)) != LS_OK) return ls_cli_fail_rc(rc);
    /* a NUL byte would end the list early: such a file is not a list of ids */
    int *v = NULL, n = input && strlen(buf) != blen ? -1 : ls_args_int_list(input ? buf : list, " ,\n\t\r", &v);
    free(buf);
    if (n < 0 && input) return fprintf(stderr, "llmsys: %s: the ids are not a list of integers\n", input), 2;
    if (n < 0) return fprintf(stderr, "llmsys tokenizer decode: the ids are not a list of integers\n"), 2;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    ls_bpe *t = NULL;
    char *out = NULL;
    size_t len = 0;
    rc = ids ? ls_bpe_load(path, &t) : ls_err(LS_ENOMEM, "ids");
    for (int i = 0; rc == LS_OK && i < n; i++) ids[i] = v[i];
    if (rc == LS_OK) rc = ls_bpe_decode(t, ids, (size_t)n, &out, &len);
    if (rc == LS_OK) fwrite(out, 1, len, stdout);
    free(out);
    free(ids);
    free(v);
    ls_bpe_free(t);
    return rc ? ls_cli_fail_rc(rc) : 0; /* --tokenizer, and ids it has no token for */
}

int cmd_tokenizer(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"train", tok_train}, {"encode", tok_encode}, {"decode", tok_decode}};
    return ls_args_subcommand("tokenizer", subs, LS_NARGS(subs), argc, argv,
                              "usage: llmsys tokenizer SUBCOMMAND [options]\n"
                              "  train    train a byte-level BPE vocabulary from text files\n"
                              "  encode   print the token ids of a text\n"
                              "  decode   print the text of token ids\n");
}
