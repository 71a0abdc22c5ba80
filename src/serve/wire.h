/* wire.h - the pipeline's ZeroMQ message: a fixed header (magic, version, type, ids,
 * per-stage busy time, XXH3 checksum of header and payload) followed by the payload.
 * Internal to src/serve/. */
#ifndef LLMSYS_SERVE_WIRE_H
#define LLMSYS_SERVE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "llmsys/serve.h"

#define LS_WIRE_MAGIC 0x5750534cu /* "LSPW" little-endian */
#define LS_WIRE_VERSION 1

enum {
    LS_MSG_FORWARD = 1, /* payload: nseq × {slot,pos,n} int32, then tokens (int32) or activations (f32) */
    LS_MSG_RESULT = 2,  /* last stage -> front: seqs, then nseq × V logits */
    LS_MSG_PING = 3,    /* travels the ring once every stage is loaded */
    LS_MSG_SHUTDOWN = 4,
    LS_MSG_ERROR = 5, /* payload: a NUL-terminated message; travels on to the front */
};

typedef struct {
    uint32_t magic;
    uint16_t version, type;
    uint32_t mb_id, nseq, ntok;
    int32_t stage; /* stage that produced the message (-1: front) */
    uint64_t payload_bytes;
    double busy_s[LS_SERVE_MAX_STAGES]; /* cumulative busy seconds of each stage so far */
    uint64_t checksum;                 /* XXH3 of header (this field 0) + payload */
} ls_wire_hdr;

/* Fills the checksum of a message buffer (header followed by payload). */
void ls_wire_seal(void *msg, size_t len);
/* Validates size, magic, version, payload length and checksum; what names the socket. */
int ls_wire_check(const void *msg, size_t len, const char *what);
/* Checks a checked FORWARD message's sequence table against its payload (1 <= nseq, every
 * n >= 0, ntok their sum, payload = the table then ntok int32 tokens on the first stage or
 * ntok x d_model floats elsewhere) and points *seqs and *body into msg. */
int ls_wire_forward_parse(const void *msg, size_t len, int first, int d_model, const ls_engine_seq **seqs,
                          const void **body);

/* Removes the files a serve front's temp dir holds (plan.json, the front's and the stages'
 * ipc sockets), not the dir itself. */
void ls_serve_tmpdir_remove(const char *dir);

#endif
