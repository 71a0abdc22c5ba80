/*
 * safetensors.h - read and write the safetensors format (the ecosystem's checkpoint
 * format): an 8-byte little-endian header length, a JSON header naming every tensor
 * (dtype, shape, byte offsets) plus a "__metadata__" map of strings, then the raw
 * little-endian data.
 *
 * llmsys adds two metadata keys on every file it writes: "format" = "llmsys" and
 * "llmsys.xxh3" = 16 hex digits of XXH3-64 over the whole data section. On read the
 * checksum is always verified, so a corrupt file is refused with a message naming it.
 * A file without the checksum (written by another tool, or with the key stripped) is
 * refused too, unless the caller passes LS_ST_ALLOW_UNCHECKED or the environment sets
 * LLMSYS_ALLOW_UNCHECKED=1 (docs/reliability.md).
 *
 * Every tensor's data is aligned to its element size whatever the file's layout (data a
 * file places misaligned is copied into aligned memory), so callers may load floats
 * directly. Only regular files are opened; duplicate header keys are refused.
 *
 *     ls_st_file *f;
 *     if (ls_st_open("ckpt.safetensors", &f) != LS_OK) { ...ls_errmsg()... }
 *     const ls_st_tensor *t = ls_st_find(f, "wte");
 *     ls_st_close(f);
 */
#ifndef LLMSYS_SAFETENSORS_H
#define LLMSYS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LS_DT_F32 = 0,
    LS_DT_F16,
    LS_DT_BF16,
    LS_DT_F64,
    LS_DT_I8,
    LS_DT_U8,
    LS_DT_I16,
    LS_DT_I32,
    LS_DT_I64,
    LS_DT_COUNT
} ls_dtype;

#define LS_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    ls_dtype dtype;
    int ndim;
    int64_t shape[LS_ST_MAX_DIMS];
    int64_t numel;
    const void *data; /* valid until ls_st_close; aligned to the element size (ls_dtype_size) */
    size_t nbytes;
} ls_st_tensor;

/* "F32", "I8", ... and back; ls_dtype_parse returns -1 when unknown. */
const char *ls_dtype_name(ls_dtype dt);
int ls_dtype_parse(const char *s);
size_t ls_dtype_size(ls_dtype dt);

/* ---------------------------------------------------------------- reading */

typedef struct ls_st_file ls_st_file;

/* Opens and fully validates a file (header bounds, JSON, dtypes, shapes vs byte ranges,
 * checksum). Errors: LS_ENOTFOUND/LS_EIO (file), LS_EFORMAT (truncated or foreign),
 * LS_ECHECKSUM (corrupt); the message names the file and the problem. */
int ls_st_open(const char *path, ls_st_file **out);
/* Flags for ls_st_open_ex. */
#define LS_ST_ALLOW_UNCHECKED 1u /* accept a file without the llmsys.xxh3 checksum */
/* ls_st_open with flags (ls_st_open is ls_st_open_ex(path, 0, out)). A file without a
 * checksum gives LS_ECHECKSUM unless LS_ST_ALLOW_UNCHECKED or LLMSYS_ALLOW_UNCHECKED=1. */
int ls_st_open_ex(const char *path, unsigned flags, ls_st_file **out);
void ls_st_close(ls_st_file *f);
const char *ls_st_path(const ls_st_file *f);
int ls_st_count(const ls_st_file *f);
const ls_st_tensor *ls_st_get(const ls_st_file *f, int i);
/* NULL when absent. */
const ls_st_tensor *ls_st_find(const ls_st_file *f, const char *name);
/* Metadata string, NULL when absent. */
const char *ls_st_meta(const ls_st_file *f, const char *key);
/* Looks up a tensor and checks dtype and shape; errors name the file and tensor. */
int ls_st_expect(const ls_st_file *f, const char *name, ls_dtype dt, int ndim, const int64_t *shape,
                 const ls_st_tensor **out);

/* ---------------------------------------------------------------- writing */

typedef struct ls_st_writer ls_st_writer;

int ls_st_writer_init(ls_st_writer **out);
void ls_st_writer_free(ls_st_writer *w);
/* Adds a tensor; data is borrowed (not copied) and must stay valid until write. Names are
 * unique. */
int ls_st_writer_add(ls_st_writer *w, const char *name, ls_dtype dt, int ndim, const int64_t *shape,
                     const void *data);
/* Sets a metadata string (copied); a later call with the same key replaces it. */
int ls_st_writer_meta(ls_st_writer *w, const char *key, const char *value);
/* Writes atomically (temp file, fsync, rename) with the llmsys checksum. */
int ls_st_writer_write(ls_st_writer *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_SAFETENSORS_H */
