/* tokenizer.h - byte-level BPE (the GPT-2 scheme): train a vocabulary from text, encode and decode
 * exactly, read and write Hugging Face's tokenizer.json (model "BPE", pre-tokenizer "ByteLevel").
 *
 * Text is split into pieces by the GPT-2 pattern (contractions, letter runs, digit runs, other
 * runs, whitespace; each run may take one leading space), each piece's bytes start as byte tokens
 * and the lowest-ranked adjacent pair is merged until no merge applies. Any byte string encodes
 * (invalid UTF-8 included) and decode(encode(x)) == x. A vocabulary trained here gives ids 0..255
 * to the bytes themselves and the next ids to its added tokens; `llmsys tokenizer train` always adds
 * LS_BPE_SPECIALS first, so ids 256-258 are the model's BOS, EOS and PAD and the byte vocabulary of
 * every llmsys model is the special case of zero merges. */

/* The added tokens `llmsys tokenizer train` puts at ids 256, 257, 258 (LS_TOK_BOS, _EOS, _PAD). */
#define LS_BPE_SPECIALS {"<|bos|>", "<|eos|>", "<|pad|>"}
#ifndef LLMSYS_TOKENIZER_H
#define LLMSYS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct ls_bpe ls_bpe;

#define LS_BPE_MAX_VOCAB (1 << 22) /* tokens of a vocabulary, at most */

typedef struct {
    int vocab_size;              /* 256 bytes + merges + specials: 256 + n_specials..LS_BPE_MAX_VOCAB */
    int min_freq;                /* stop when the most frequent pair occurs fewer times (0: 2) */
    const char *const *specials; /* added tokens such as "<|endoftext|>": ids 256.., before the merges; each once */
    int n_specials;
    int progress;       /* progress bar on stderr */
    int model_specials; /* 1: LS_BPE_SPECIALS take ids 256-258 and `specials` follow them */
} ls_bpe_train_opts;

/* Trains on n texts (bytes, any content). Deterministic: ties go to the smaller pair of ids. */
int ls_bpe_train(const char *const *texts, const size_t *lens, int n, const ls_bpe_train_opts *o, ls_bpe **out);
/* ls_bpe_train over the contents of regular files. */
int ls_bpe_train_files(const char *const *paths, int n, const ls_bpe_train_opts *o, ls_bpe **out);

/* Reads a tokenizer.json (BPE model, ByteLevel pre-tokenizer, no normalizer); anything else is
 * refused with a message naming what is unsupported. */
int ls_bpe_load(const char *path, ls_bpe **out);
int ls_bpe_parse(const char *json, size_t len, ls_bpe **out);
/* Writes tokenizer.json atomically. */
int ls_bpe_save(const ls_bpe *t, const char *path);
/* The same document as one compact malloc'd string (checkpoint metadata); NULL when out of memory. */
char *ls_bpe_to_json(const ls_bpe *t);

/* Encodes len bytes into a malloc'd id array (*ids, *n; caller frees). Added (special) tokens that
 * occur literally in the text become their ids (as Hugging Face's tokenizers do). */
int ls_bpe_encode(const ls_bpe *t, const char *text, size_t len, int32_t **ids, size_t *n);
/* The same with flags: LS_BPE_ORDINARY encodes added tokens' text as ordinary text (what data and
 * prompts need: only the pipeline inserts BOS/EOS). */
enum { LS_BPE_ORDINARY = 1 };
int ls_bpe_encode_ex(const ls_bpe *t, const char *text, size_t len, int flags, int32_t **ids, size_t *n);
/* Decodes ids into a malloc'd, NUL-terminated byte string of *len bytes; unknown ids are an error. */
int ls_bpe_decode(const ls_bpe *t, const int32_t *ids, size_t n, char **text, size_t *len);

int ls_bpe_vocab_size(const ls_bpe *t); /* one past the largest id */
int ls_bpe_n_merges(const ls_bpe *t);
/* The bytes of token id (NULL if id is not a token). */
const uint8_t *ls_bpe_token(const ls_bpe *t, int id, size_t *len);
void ls_bpe_free(ls_bpe *t);

/* Text <-> tokens of a model, whatever its vocabulary: t == NULL is llmsys's byte vocabulary
 * (ids 0..255 are the bytes, 256.. specials). Encoding is ordinary (no BOS/EOS, the text of an
 * added token stays text); decoding drops specials. */
int ls_text_encode(const ls_bpe *t, const char *text, size_t len, int **ids, size_t *n);
int ls_text_decode(const ls_bpe *t, const int *ids, size_t n, char **text, size_t *len);
/* Bytes of text token id stands for (0 for specials and ids outside the vocabulary). */
size_t ls_text_token_bytes(const ls_bpe *t, int id);
/* Tokens ids[a, b) as valid UTF-8 (malloc'd, NUL-terminated; invalid bytes become U+FFFD, specials
 * are dropped); NULL when out of memory. */
char *ls_text_utf8(const ls_bpe *t, const int *ids, int a, int b);
/* The largest k in [a, b] such that tokens [a, k) do not end inside a character (all of them when
 * final): what a stream can send now. */
int ls_text_utf8_ready(const ls_bpe *t, const int *ids, int a, int b, int final);

/* The GPT-2 pre-tokenizer: end (exclusive) of the piece that starts at pos < len. */
size_t ls_bpe_piece_end(const char *text, size_t len, size_t pos);

#endif
