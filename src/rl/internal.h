/* internal.h - the rl runtime's messages (sealed header + little-endian payload), a
 * growable byte buffer, ZeroMQ helpers and the run config shared by all worker roles.
 * Internal to src/rl/. */
#ifndef LLMSYS_RL_INTERNAL_H
#define LLMSYS_RL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "llmsys/rl.h"

#define RL_MAGIC 0x4c52534cu /* "LSRL" */
#define RL_WIRE_VERSION 1
#define RL_CHUNK_BYTES (256u * 1024u)

enum {
    M_HELLO = 1,   /* worker -> manager: role, id, endpoint */
    M_CONFIG,      /* manager -> worker: run config JSON */
    M_POLL,        /* rollout -> manager: status and streamed partial responses */
    M_POLL_REPLY,  /* manager -> rollout: stop / pull / drops / assignments */
    M_RELAY_HB,    /* relay -> manager: id, endpoint, newest complete version */
    M_RELAY_REPLY, /* manager -> relay: successor endpoint, stop */
    M_GET_BATCH,   /* trainer -> manager: version, wanted groups, last update's stats */
    M_BATCH,       /* manager -> trainer: master relay endpoint, groups (maybe none), stop */
    M_DONE,        /* trainer -> manager: final figures */
    M_CHUNK,       /* weights: chunk header + bytes */
    M_PULL,        /* rollout -> relay: version held */
    M_PULL_NONE,   /* relay -> rollout: nothing newer */
    M_ACK,
};

typedef struct {
    uint32_t magic;
    uint16_t version, type;
    uint64_t payload_bytes;
    uint64_t checksum; /* XXH3 of the header (this field 0) and the payload */
} rl_hdr;

/* Growable buffer; writes a header placeholder first (rl_msg_begin) and seals at the end. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
    int oom;
} rl_buf;

void rl_msg_begin(rl_buf *b, int type);
void rl_put(rl_buf *b, const void *d, size_t n);
void rl_put_i32(rl_buf *b, int32_t v);
void rl_put_i64(rl_buf *b, int64_t v);
void rl_put_f64(rl_buf *b, double v);
void rl_put_str(rl_buf *b, const char *s);
/* Seals the header; LS_ENOMEM if any put failed. */
int rl_msg_end(rl_buf *b);
void rl_buf_free(rl_buf *b);

/* Reader over a received message's payload; any short read sets bad. */
typedef struct {
    const uint8_t *p;
    size_t n, off;
    int bad;
    int type;
} rl_rd;

/* Checks magic, version, length and checksum; what names the sender for the message. */
int rl_msg_open(const void *msg, size_t len, const char *what, rl_rd *r);
int32_t rl_get_i32(rl_rd *r);
int64_t rl_get_i64(rl_rd *r);
double rl_get_f64(rl_rd *r);
/* Copies a string into dst (cap bytes, truncated); returns dst. */
char *rl_get_str(rl_rd *r, char *dst, size_t cap);
const void *rl_get_bytes(rl_rd *r, size_t n);

/* ZeroMQ helpers: a socket with linger 0; send one frame; receive with a timeout
 * (ms, -1 forever): LS_ETIMEDOUT when nothing came. *msg malloc'd. */
void *rl_socket(void *zctx, int type);
int rl_send(void *sock, const void *d, size_t n, int more);
int rl_recv(void *sock, int timeout_ms, void **msg, size_t *len, int *more);
/* ROUTER: receives [identity][payload]; identity copied into id (cap 64), *idn its size. */
int rl_recv_routed(void *sock, int timeout_ms, uint8_t *id, size_t *idn, void **msg, size_t *len);
int rl_send_routed(void *sock, const uint8_t *id, size_t idn, const void *d, size_t n);
/* Binds ep (port 0 = ephemeral) under the CURVE policy of llmsys/zsec.h (off loopback, or
 * forced: the server keys, and only allowed clients get in; what names the socket in errors)
 * and writes the actual endpoint into out. */
int rl_bind(void *zctx, void *sock, const char *ep, const char *what, char *out, size_t cap);

/* Sends the chunk messages of one version blob to sock (DEALER, or ROUTER with id). */
int rl_send_version(void *sock, const uint8_t *id, size_t idn, int64_t version, const void *blob, size_t len);

/* Index of name in names[0..n) (-1: none, or name NULL). */
int rl_name_index(const char *const *names, int n, const char *name);

/* How long an idle rollout and a trainer without a batch wait before asking the manager again
 * (the simulator's prediction of a real run uses the same periods). */
enum { RL_IDLE_POLL_MS = 10, RL_TRAINER_POLL_MS = 5 };

/* The run config every worker receives from the manager (JSON on the wire). */
typedef struct {
    int mode;
    char tasks[1024], heldout[1024], init[1024], report[1024], workdir[1024];
    int rollouts, relays, updates, group, batch_groups, max_seqs, max_new, staleness, repack, eval_n, ppo_epochs;
    int rollout_batch; /* laminar: trajectories a rollout takes at one version (a multiple of group) */
    double lr, clip_eps, is_cap, step_ms, train_ms, hb_timeout_s;
    uint64_t seed;
    /* the initial checkpoint's model: rollouts build their engine from it and take every weight
     * version, the first (0) included, from their relay; only the trainer reads init */
    ls_model_config model;
} rl_config;

char *rl_config_to_json(const rl_config *c);
int rl_config_from_json(const char *s, size_t n, rl_config *c);
/* LS_OK for a model RL can run: tasks, prompts and rewards are bytes, so its vocabulary must be
 * bytes too (a BPE model would read its prompts as byte tokens and have its merged tokens
 * scored as no text); else LS_EINVAL naming what (a file or "model"). */
int rl_model_check(const ls_model_config *mc, const char *what);

/* What an rl command read at its start-up (rl.h). */
struct ls_rl_inputs {
    rl_config cfg;       /* a manager's --config; rl run's: only the --init checkpoint's model */
    ls_rl_task *tasks;   /* rl run's --tasks; a manager's: the task file its config names */
    ls_rl_task *heldout; /* rl run's --heldout (NULL: none) */
    int n_tasks, n_heldout;
};

/* Worker roles. The manager runs on its config and tasks as ls_rl_worker_check read them. */
int rl_manager_main(const ls_rl_worker_opts *o, const ls_rl_inputs *in);
int rl_trainer_main(const ls_rl_worker_opts *o);
int rl_rollout_main(const ls_rl_worker_opts *o);
int rl_relay_main(const ls_rl_worker_opts *o);

/* Connects a DEALER to the manager, says hello and receives the config. */
int rl_join(void *zctx, const char *manager, const char *role, int id, const char *endpoint, void **sock,
            rl_config *cfg);
/* Request/reply with the manager: sends b, waits up to timeout_ms for one reply. */
int rl_call(void *sock, rl_buf *b, int timeout_ms, void **reply, size_t *len, rl_rd *r, const char *what);

#endif
