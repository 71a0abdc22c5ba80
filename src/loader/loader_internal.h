/* loader_internal.h - what the loader's files share: the source loader (document index and
 * reading) used by the engine and the tokenizer. */
#ifndef LLMSYS_LOADER_INTERNAL_H
#define LLMSYS_LOADER_INTERNAL_H

#include <stdint.h>

#include "llmsys/loader.h"
#include "llmsys/tokenizer.h"

typedef struct ls_src ls_src;

/* Per-thread reading context: scratch buffers. */
typedef struct {
    char *buf;
    size_t cap;
    uint16_t *tok;
    size_t tok_cap;
    int32_t *ids; /* a preprocessed document (ls_src_encode_doc) */
    size_t ids_cap;
} ls_src_reader;

/* Indexes a source (every file, every document; malformed JSON lines skipped with a
 * file:line warning, or an error when strict). Fails on missing/unreadable files and on a
 * source with no documents. */
int ls_src_open(ls_src **out, const ls_loader_source_spec *spec, int strict);
void ls_src_close(ls_src *s);
uint32_t ls_src_ndocs(const ls_src *s);
int64_t ls_src_skipped(const ls_src *s);
size_t ls_src_state_bytes(const ls_src *s);

void ls_src_reader_init(ls_src_reader *r);
void ls_src_reader_free(ls_src_reader *r);
/* Reads document doc as EOS-terminated tokens into r->tok; *len gets the count. */
int ls_src_read_doc(const ls_src *s, ls_src_reader *r, uint32_t doc, int *len);

/* Reads and preprocesses document doc into r->ids (*len tokens, EOS last): its bytes, or with a
 * tokenizer their BPE encoding (added tokens' text stays text). What a source worker sends, and what
 * the loader lays out when it tokenizes with BPE itself. */
int ls_src_encode_doc(const ls_src *s, ls_src_reader *r, uint32_t doc, const ls_bpe *bpe, uint32_t *len);

/* Tokens of document doc, EOS included (known from the index, without reading). */
uint32_t ls_src_doc_tokens(const ls_src *s, uint32_t doc);
/* Writes tokens [off, off+len) of document doc (EOS included) as int32 into dst, straight
 * from the mapped file. Safe from several threads at once (reads only immutable state). */
int ls_src_copy_tokens(const ls_src *s, uint32_t doc, uint32_t off, int len, int32_t *dst);
/* Hints the CPU to fetch tokens [off, off+len) of document doc (up to 4 KiB of them). */
void ls_src_prefetch(const ls_src *s, uint32_t doc, uint32_t off, int len);
/* Hints the CPU to fetch document doc's index entry. */
void ls_src_prefetch_meta(const ls_src *s, uint32_t doc);

/* A tokenizer's fingerprint: the hash of its tokenizer.json (never 0). */
uint64_t ls_loader_tokenizer_print(const ls_bpe *t);

/* Binds sock (ZMQ_LINGER 0, the CURVE policy) on tcp://bind:port (bind an IPv4 or IPv6 address,
 * ls_bind_check; NULL: 127.0.0.1; port 0: a free one); *bound gets the
 * port, last (may be NULL, cap bytes) the bound endpoint. what names the socket in errors. */
int ls_lzmq_bind(void *zctx, void *sock, const char *bind, int port, const char *what, int *bound, char *last,
                 size_t cap);

/* The wire frames of the service and of the worker link: header (magic, u16 version, ...) | payload |
 * xxh3 of both (service.c). */
int ls_lwire_pack(const void *hdr, size_t hlen, const void *payload, size_t plen, uint8_t **out, size_t *olen);
/* Validates magic, version, length and checksum of a frame; points *payload into it. */
int ls_lwire_check(const uint8_t *p, size_t n, const char *magic, size_t hdr_size, uint32_t len_field,
                   const uint8_t **payload);

/* The shuffle order of a source's documents in an epoch (engine.c): perm[0..n) from (seed, source
 * index, epoch) alone, so a source worker rebuilds the constructor's order. */
void ls_loader_perm(uint64_t seed, int idx, uint64_t epoch, uint32_t *perm, uint32_t n);

/* The constructor's side of the source workers (workers.c), used from one thread at a time (the
 * one building steps). ls_hub_doc returns document perm[pos] of epoch of source s (EOS included)
 * once a worker has sent it, waiting for it; the pointer stays valid until ls_hub_consumed(s),
 * which drops the document at the head of s (the one last returned). ls_hub_plan tells the hub the
 * weights of the step being built, from which it sizes each source's workers. */
int ls_hub_doc(ls_loader_hub *h, int s, uint64_t epoch, uint64_t pos, uint32_t doc, const int32_t **tok, uint32_t *len);
void ls_hub_consumed(ls_loader_hub *h, int s);
void ls_hub_plan(ls_loader_hub *h, const double *w);

#endif
