/* internal.h - the byte-level BPE tokenizer's representation, shared by its trainer, its
 * encoder and its tokenizer.json codec. */
#ifndef LLMSYS_TEXT_INTERNAL_H
#define LLMSYS_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "llmsys/tokenizer.h"

#define LS_BPE_MAX_TOKEN 4096 /* bytes in one token */

typedef struct {
    uint8_t *bytes; /* NULL: no token has this id */
    uint32_t len;
    uint8_t special; /* an added token: matched literally in text, never merged */
} ls_bpe_tok;

typedef struct {
    int32_t a, b, to;
} ls_bpe_merge;

struct ls_bpe {
    ls_bpe_tok *tok;
    int n_tok; /* one past the largest id */
    ls_bpe_merge *merge;
    int n_merge;
    int32_t byte_id[256]; /* token of each single byte */
    int add_prefix_space; /* ByteLevel's option: a space is put before text that does not start with one */
    /* pair (a, b) -> merge rank: open addressing on a power-of-two table */
    uint64_t *pair_key;
    int32_t *pair_rank;
    size_t pair_cap;
    /* bytes -> id, open addressing over ids */
    int32_t *id_slot;
    size_t id_cap;
    int *special_ids; /* longest first */
    int n_special;
};

/* A 64-bit mixer for the tokenizer's hash tables of pairs. */
static inline uint64_t ls_bpe_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* An empty tokenizer with room for cap ids. */
int ls_bpe_alloc(ls_bpe **out, int cap);
/* Sets token id to a copy of the bytes; grows n_tok. */
int ls_bpe_set_token(ls_bpe *t, int id, const void *bytes, size_t len, int special);
/* Builds the lookup tables (byte ids, pair ranks, bytes -> id, specials) once tokens and merges are set. */
int ls_bpe_index(ls_bpe *t);
/* The id of a byte string, or -1. */
int ls_bpe_find(const ls_bpe *t, const void *bytes, size_t len);

#endif
