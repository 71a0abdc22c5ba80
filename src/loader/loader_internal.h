/* loader_internal.h - what the loader's files share: the source loader (document index and
 * reading) used by the engine and the tokenizer. */
#ifndef LLMSYS_LOADER_INTERNAL_H
#define LLMSYS_LOADER_INTERNAL_H

#include <stdint.h>

#include "llmsys/loader.h"

typedef struct ls_src ls_src;

/* Per-thread reading context: scratch buffers. */
typedef struct {
    char *buf;
    size_t cap;
    uint16_t *tok;
    size_t tok_cap;
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

/* Tokens of document doc, EOS included (known from the index, without reading). */
uint32_t ls_src_doc_tokens(const ls_src *s, uint32_t doc);
/* Writes tokens [off, off+len) of document doc (EOS included) as int32 into dst, straight
 * from the mapped file. Safe from several threads at once (reads only immutable state). */
int ls_src_copy_tokens(const ls_src *s, uint32_t doc, uint32_t off, int len, int32_t *dst);
/* Hints the CPU to fetch tokens [off, off+len) of document doc (up to 4 KiB of them). */
void ls_src_prefetch(const ls_src *s, uint32_t doc, uint32_t off, int len);
/* Hints the CPU to fetch document doc's index entry. */
void ls_src_prefetch_meta(const ls_src *s, uint32_t doc);

#endif
