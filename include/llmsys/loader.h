/*
 * loader.h - multi-source data loading for llmsys training, after OVERLORD
 * (MegaScale-Data, arXiv 2504.09844; see docs/loader.md and docs/references.md §2).
 *
 * Roles. One *source loader* per source owns that source's access state once (its files,
 * the document index, the shuffle order and the epoch) instead of every data-parallel rank
 * holding a copy. One *data constructor* draws documents from the sources by the mixing
 * weights of the current step (largest-deficit selection, as Megatron blends), builds the
 * step's global batch, and splits it across R ranks so that the largest per-rank cost
 * cost(L) = a·L² + b·L is as small as possible (Karmarkar–Karp or greedy LPT). A service
 * (`llmsys loader serve`) runs both and answers "batch for step s, rank r" over ZeroMQ.
 *
 *     ls_loader_mix mix;                       // parsed mix config (sources, schedule, ...)
 *     ls_loader_mix_load("mix.json", &mix);
 *     ls_loader *ld;
 *     ls_loader_open(&ld, &mix, 4, NULL);      // 4 ranks, default options
 *     ls_loader_step *st;
 *     ls_loader_next_step(ld, &st);            // builds step 0
 *     ls_loader_batch b;
 *     ls_loader_step_batch(st, 2, &b);         // rank 2's rows, doc ids, resume state
 *     ...
 *     ls_loader_batch_free(&b); ls_loader_step_free(st); ls_loader_close(ld);
 *     ls_loader_mix_free(&mix);
 *
 * Tokens: bytes 0..255 plus LS_TOK_EOS (257) closing each document; rows are padded
 * with LS_TOK_PAD (258) (see llmsys/model.h). Documents longer than n_ctx are read in
 * segments of at most n_ctx tokens; a segment never crosses a row, so attention can be
 * masked per segment with the per-token doc ids of a batch.
 *
 * Determinism: every step is a pure function of the mix config, the seed and the loader
 * state at the start of that step (a small blob, ls_loader_get_state), so a service
 * restarted from a saved blob serves byte-identical batches from that step on.
 */
#ifndef LLMSYS_LOADER_H
#define LLMSYS_LOADER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "llmsys/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- mix config */

typedef enum {
    LS_SRC_TEXT = 0,   /* a file or a directory of files (recursive, sorted) */
    LS_SRC_JSONL = 1,  /* JSON Lines; the document is the string under `field` */
    LS_SRC_TOKENS = 2, /* pre-tokenized .lstok file (ls_loader_tokenize) */
} ls_loader_src_type;

typedef enum {
    LS_SPLIT_FILE = 0,  /* one document per file */
    LS_SPLIT_BLANK = 1, /* one document per blank-line-separated block */
} ls_loader_split;

typedef enum {
    LS_BALANCE_NAIVE = 0, /* each rank takes its own sequential slice (equal tokens) */
    LS_BALANCE_LPT = 1,   /* greedy longest-processing-time first */
    LS_BALANCE_KK = 2,    /* Karmarkar–Karp largest differencing (multiway) */
} ls_balance_algo;

#define LS_LOADER_MAX_SOURCES 64
#define LS_LOADER_MAX_RANKS 4096   /* data-parallel ranks one service or simulation serves */
#define LS_LOADER_MAX_WINDOW 65536 /* steps of a service's prefetch, and of its history */
#define LS_LOADER_NAME_MAX 48

typedef struct {
    char name[LS_LOADER_NAME_MAX];
    ls_loader_src_type type;
    char *path;  /* resolved against the config file's directory; owned */
    char *field; /* JSONL text field (default "text"); owned */
    ls_loader_split split;
    double weight; /* static weight when there is no schedule */
    /* CPU microseconds a source worker burns per document (a stand-in for heavy preprocessing, to
     * measure worker scaling; 0 = none; the tokens are unchanged, the in-process loader ignores it) */
    double preprocess_us;
} ls_loader_source_spec;

typedef struct {
    int64_t step;
    double *w; /* n_sources weights (>= 0, finite, not all zero); owned */
} ls_loader_sched_point;

typedef struct {
    int n_sources;
    ls_loader_source_spec src[LS_LOADER_MAX_SOURCES];
    int n_points;                  /* 0: the sources' static weights throughout */
    ls_loader_sched_point *points; /* sorted by step */
    int n_ctx;                     /* row length = longest segment (default 512) */
    int tokens_per_rank;           /* global batch = tokens_per_rank · ranks tokens per step */
    int micro_batches;             /* per rank (rows are spread over them by cost) */
    double cost_a, cost_b;         /* cost(L) = a·L² + b·L per segment */
    ls_balance_algo balance;
    uint64_t seed;
    int strict; /* malformed JSON lines: error instead of skip-and-warn */
} ls_loader_mix;

/* Parses and validates a mix config file (format in docs/loader.md). Errors name the file
 * and the offending key, source or schedule point. mix is owned by the caller
 * (ls_loader_mix_free) and valid only on success. */
int ls_loader_mix_load(const char *path, ls_loader_mix *mix);
/* Same from a JSON string; relative source paths resolve against base_dir (may be NULL). */
int ls_loader_mix_parse(const char *json, const char *base_dir, ls_loader_mix *mix);
void ls_loader_mix_free(ls_loader_mix *mix);
/* A mix of one source "input" of the given type, path, JSONL field and split (as a config
 * names them), validated as a config would be (what `loader tokenize` reads). */
int ls_loader_mix_single(const char *type, const char *path, const char *field, const char *split, ls_loader_mix *mix);
/* Checks a weight vector: finite, >= 0, sum > 0. what names it in the message. */
int ls_loader_weights_check(const double *w, int n, const char *what);
/* Normalised weights (sum 1) of the schedule at step: piecewise linear between points,
 * constant before the first and after the last. */
void ls_loader_mix_weights_at(const ls_loader_mix *mix, int64_t step, double *w);
/* Index of a source by name, or -1. */
int ls_loader_mix_find(const ls_loader_mix *mix, const char *name);
const char *ls_balance_algo_name(ls_balance_algo a);
int ls_balance_algo_parse(const char *s, ls_balance_algo *out);

/* ---------------------------------------------------------------- balancing */

/* cost(L) = a·L² + b·L. */
static inline double ls_loader_cost(double a, double b, int len) { return a * (double)len * len + b * (double)len; }

/* Partitions n items (cost[i] >= 0, in draw order) into k parts minimising the largest
 * part sum; writes part[i] in [0, k). NAIVE splits the draw order into k contiguous
 * slices of about equal weight[i] (token count; weight may be NULL = unit). Returns
 * LS_ENOMEM/LS_EINVAL on failure. */
int ls_balance_partition(ls_balance_algo algo, const double *cost, const int *weight, int n, int k, int *part);
/* (KK falls back to LPT when n·k exceeds 2^26, to bound its O(n·k) memory.) */
/* Optimal partition by exhaustive search (tests; n <= 12, k <= 4). Returns the optimum. */
double ls_balance_brute_force(const double *cost, int n, int k, int *part);
/* max/mean of the k part sums of part (1 = perfect; mean 0 -> 1). */
double ls_balance_imbalance(const double *cost, const int *part, int n, int k, double *max_out);

/* ---------------------------------------------------------------- token files */

/* .lstok: pre-tokenized documents. Little-endian:
 *   header (64 B): magic "LSTOKv01", u32 version (1), u32 token bytes (2), u64 n_docs,
 *   u64 n_tokens, u64 index offset, u64 xxh3(tokens), u64 xxh3(index), u64 xxh3(header[0..56))
 *   tokens: n_tokens u16 from byte 64;  index: n_docs+1 u64 token offsets (0 .. n_tokens).
 * Writes every document of the source described by spec (EOS-terminated) in index order,
 * atomically. *n_docs / *n_tokens (may be NULL) receive the counts. */
int ls_loader_tokenize(const ls_loader_source_spec *spec, int strict, const char *out_path, int64_t *n_docs,
                       int64_t *n_tokens);

/* ---------------------------------------------------------------- the loader engine */

typedef struct ls_loader ls_loader;

/* The constructor's end of the source workers (ls_loader_hub_open); NULL in ls_loader_opts: the
 * loader reads its sources itself. */
typedef struct ls_loader_hub ls_loader_hub;

/* threads and queue_docs are ignored (tokens are read once, straight from the mapped source files
 * into each rank's batch). hub (may be NULL): the loader reads no source itself but takes each
 * source's documents, read and preprocessed, from its source workers; batches are the same (the hub's
 * tokenizer must be this one). */
struct ls_bpe;
typedef struct {
    int threads;    /* ignored */
    int queue_docs; /* ignored */
    ls_loader_hub *hub;
    /* (may be NULL: byte tokens) documents are BPE-encoded with this tokenizer (added tokens' text
     * stays text), EOS closing each; part of the state's signature. Must outlive the loader. */
    const struct ls_bpe *tokenizer;
} ls_loader_opts;

/* One piece of a document placed in a batch. */
typedef struct {
    int source;       /* index into mix->src */
    int row, col;     /* where it sits in the rank's rows (batch only) */
    int len;          /* tokens */
    uint32_t epoch;   /* source epoch it was drawn in */
    uint32_t doc;     /* document index within the source (index order, not shuffled) */
    uint32_t doc_off; /* first token's offset within the document */
} ls_loader_seg;

/* A built step: the global batch (segments, not tokens) and its split across ranks. Owned
 * by the caller. Its tokens are read from the loader's mapped source files when a batch is
 * laid out, so a step must be freed before the loader that built it is closed. */
typedef struct {
    int64_t step;
    int n_ranks, n_ctx, micro_batches, n_sources;
    int n_items;
    ls_loader_seg *items; /* draw order */
    double *item_cost;
    int *part;              /* rank of item i under the mix's balancing algorithm */
    double *rank_cost;      /* n_ranks */
    int64_t *source_tokens; /* n_sources: tokens drawn from each source this step */
    double *weights;        /* n_sources: normalised weights used for this step */
    double cost_a, cost_b;
    uint8_t *state_after; /* loader state at the start of step+1 (resume blob) */
    size_t state_len;
    const ls_loader *loader; /* the loader that built it (source files, for the tokens) */
    /* sources read by workers (a hub): the step's tokens in draw order, item i's from item_off[i];
     * NULL: read from the mapped files when a batch is laid out */
    int32_t *tokens;
    int64_t *item_off;
} ls_loader_step;

/* One rank's share of a step, laid out for a trainer. Owned by the caller. */
typedef struct {
    int64_t step;
    int rank, n_ranks, n_ctx, n_rows, micro_batches;
    int32_t *tokens;    /* (n_rows, n_ctx); LS_TOK_PAD after the last segment of a row */
    int32_t *doc_ids;   /* (n_rows, n_ctx): segment index within its row, -1 on padding */
    int32_t *row_micro; /* (n_rows): micro-batch of each row (balanced by cost) */
    int n_segs;
    ls_loader_seg *segs;
    double cost;      /* Σ a·L² + b·L over the rank's segments */
    int64_t n_tokens; /* real (non-pad) tokens */
    uint8_t *state;   /* resume blob for step+1 (what a checkpoint after this step saves) */
    size_t state_len;
    /* a context-parallel shard (ls_loader_batch_place with cp > 1): this is CP rank cp_rank of
     * cp_size, n_ctx is the shard's width, and positions (n_rows, n_ctx) gives each token's
     * column in the DP rank's full row (-1 on padding); otherwise positions is NULL, cp_size 0 */
    int32_t *positions;
    int cp_rank, cp_size;
} ls_loader_batch;

/* Opens the source loaders of mix (indexing every source: missing/unreadable files, empty
 * sources and malformed lines are reported here) for n_ranks ranks. mix must outlive the
 * loader. opts may be NULL (threads on, queue 64). */
int ls_loader_open(ls_loader **out, const ls_loader_mix *mix, int n_ranks, const ls_loader_opts *opts);
void ls_loader_close(ls_loader *ld);
/* Builds the next step (all ranks) and advances the state. */
int ls_loader_next_step(ls_loader *ld, ls_loader_step **out);
void ls_loader_step_free(ls_loader_step *st);
/* Re-partitions a built step with another algorithm (stats); part/rank_cost replaced. */
int ls_loader_step_rebalance(ls_loader_step *st, ls_balance_algo algo);
/* Writes item i's tokens (items[i].len int32 values) into dst, read from the source. */
int ls_loader_step_item_tokens(const ls_loader_step *st, int i, int32_t *dst);
/* Lays out rank r's items into rows (first-fit decreasing) and micro-batches (LPT),
 * reading and tokenizing each segment straight into its row. Several threads may lay out
 * batches of built steps at once, also while the loader builds further steps. */
int ls_loader_step_batch(const ls_loader_step *st, int rank, ls_loader_batch *out);
void ls_loader_batch_free(ls_loader_batch *b);

/* ---------------------------------------------------------------- placement on a parallel topology */

/* The trainer's process grid. Global rank g has coordinates tp = g mod T, cp = (g / T) mod C,
 * dp = (g / TC) mod D, pp = g / (TCD) (Megatron's order). */
typedef struct {
    int dp, pp, tp, cp;
} ls_topology;

/* Parses "dp=D,pp=P,tp=T,cp=C" (any subset, any order; missing axes are 1). */
int ls_topology_parse(const char *s, ls_topology *t);
int ls_topology_size(const ls_topology *t);
/* Coordinates of global rank g (< size) in *at. */
void ls_topology_coords(const ls_topology *t, int g, ls_topology *at);
/* What process g receives of the batch b of its DP rank: an empty batch (n_rows 0) on pipeline
 * stages after the first; a copy on every TP rank; with cp > 1, CP rank c's shard: chunks c and
 * 2C-1-c of each segment's 2C equal chunks (equal causal-attention cost on every CP rank), the
 * columns they came from in positions. *out is owned by the caller. */
int ls_loader_batch_place(const ls_topology *t, int g, const ls_loader_batch *b, ls_loader_batch *out);

/* The step the next ls_loader_next_step builds. */
int64_t ls_loader_step_index(const ls_loader *ld);
/* Loader state at the start of the next step: malloc'd blob (caller frees), with magic,
 * version and checksum; a few dozen bytes per source. */
int ls_loader_get_state(const ls_loader *ld, uint8_t **blob, size_t *len);
/* Restores a blob from ls_loader_get_state / a batch (same mix, same sources). Rejects a
 * foreign, corrupt or mismatched blob with a clear error and leaves the loader unchanged. */
int ls_loader_set_state(ls_loader *ld, const uint8_t *blob, size_t len);
/* Replaces the schedule's weights from step `at` on (at < 0: the next step built) with w
 * (n_sources entries, checked; NULL returns to the schedule). Steps already built are
 * never changed: at < ls_loader_step_index is LS_ESTATE. Part of the state. */
int ls_loader_set_weights(ls_loader *ld, const double *w, int64_t at);
/* Weight changes set (or restored with a state) that have not yet taken effect. */
int ls_loader_pending_count(const ls_loader *ld);
/* Documents per source and malformed lines skipped while indexing. */
int64_t ls_loader_source_docs(const ls_loader *ld, int s);
int64_t ls_loader_source_skipped(const ls_loader *ld, int s);
/* Bytes of per-source access state held (document index and shuffle order):
 * what a per-rank design would replicate R times. */
size_t ls_loader_state_bytes(const ls_loader *ld);

/* ---------------------------------------------------------------- statistics (stats.c) */

/* What N steps of a mix look like when built in-process (`llmsys loader stats`, the demo):
 * token shares against the targets and per-rank cost imbalance of each balance algorithm. */
typedef struct {
    int steps, ranks, n_sources;
    double *cost_naive, *cost_bal; /* per-rank cost [step * ranks + r]: naive, and the mix's balancer (kk if naive) */
    double imb_sum[3], imb_max[3]; /* max/mean per step, summed and worst, per ls_balance_algo */
    int64_t tokens[LS_LOADER_MAX_SOURCES];
    double target[LS_LOADER_MAX_SOURCES];
    /* tokens drawn and targeted in the first and last fifth of the run (the curriculum's two ends) */
    int64_t early[LS_LOADER_MAX_SOURCES], late[LS_LOADER_MAX_SOURCES];
    double early_t[LS_LOADER_MAX_SOURCES], late_t[LS_LOADER_MAX_SOURCES];
    double seconds; /* wall time of building the steps */
} ls_loader_stats;

/* Builds `steps` steps of mix for `ranks` ranks, rebalancing each with every algorithm (progress on stderr).
 * Every step's per-rank costs are kept: steps past what memory holds are LS_EINVAL, before any work. */
int ls_loader_stats_run(const ls_loader_mix *mix, int ranks, int steps, ls_loader_stats *out);
void ls_loader_stats_free(ls_loader_stats *s);
/* Prints the share table and the imbalance table to f. */
void ls_loader_stats_print(FILE *f, const ls_loader_mix *mix, const ls_loader_stats *s);
/* Writes an SVG chart of per-rank cost per step, naive beside bal_name ("lpt" or "kk"), atomically. */
int ls_loader_stats_svg(const char *path, const ls_loader_stats *s, const char *bal_name);
/* Writes the JSON summary (steps, ranks, seconds, shares, imbalance per algorithm) atomically. */
int ls_loader_stats_report(const char *path, const ls_loader_mix *mix, const ls_loader_stats *s);

/* The demo's three sources under base/data (prose: licence texts, code: C headers, math:
 * generated sums written as JSON Lines and pre-tokenized into math.lstok); quick shrinks them.
 * The counts (may be NULL) are what each source got. */
typedef struct {
    int prose_files, code_files;
    int64_t math_docs, math_tokens;
} ls_loader_demo_counts;
int ls_loader_demo_data(const char *base, int quick, ls_loader_demo_counts *counts);
/* `llmsys demo loader` under workdir/loader, printing to f: the demo data and mix, shares and
 * cost balance of 200 steps (with an SVG chart), then a service with 4 ranks fetching 8 steps
 * while a control message moves the weights. */
int ls_loader_demo(FILE *f, const char *workdir, int quick);
/* `llmsys loader fetch`: fetches count steps from step on for rank and prints a line per
 * step (rows, segments, tokens, cost, a hash of its content) to f; state_out (may be NULL)
 * receives the resume state after the last one. */
int ls_loader_fetch_print(FILE *f, const char *addr, int rank, int64_t step, int count, int timeout,
                          const char *state_out);

/* ---------------------------------------------------------------- source workers (workers.c) */

/* Source loaders as processes of their own. A worker serves one source: it reads and preprocesses
 * the documents the constructor asks for (at most `credit` outstanding per worker) and sends their
 * tokens; the hub (the constructor's end) puts them back in the order the loader consumes them, so
 * batches equal the in-process loader's whichever worker read a document. A worker that dies or
 * stays silent with work outstanding loses its share to the source's other workers (and is started
 * again when the hub started it). The hub sizes each source's workers by its measured preprocessing
 * cost (seconds per token, measured by each worker at start and with every document) times its
 * weight, within a budget of worker processes. */
typedef struct {
    const char *bind; /* IPv4 or IPv6 address to bind (default 127.0.0.1) */
    int port;         /* 0: a free one (ls_loader_hub_port) */
    int workers;      /* worker processes in all (<= 0: one per online CPU); at least one per source */
    const char *exe;  /* llmsys binary that starts workers (`loader worker`); NULL: start none, wait for workers
                         started elsewhere */
    int timeout_ms;   /* a worker silent this long with work outstanding is dead (default 3000) */
    int wait_ms;      /* how long to wait for a source's first worker, and for a live one (default 30000) */
    const struct ls_bpe *tokenizer; /* the workers BPE-encode with it (NULL: byte tokens) */
} ls_loader_hub_opts;

/* Binds the worker link, starts one worker per source (with exe), waits until every source has a
 * worker that has indexed it and measured its cost, then starts the workers the costs call for. mix
 * must outlive the hub; pass the hub in ls_loader_opts. */
int ls_loader_hub_open(ls_loader_hub **out, const ls_loader_mix *mix, const ls_loader_hub_opts *opts);
/* Tells every worker to stop, reaps those the hub started, closes the link. */
void ls_loader_hub_close(ls_loader_hub *h);
int ls_loader_hub_port(const ls_loader_hub *h);
/* Source s: its documents, its live workers, the count its cost calls for, its measured preprocessing
 * rate per worker (tokens/s), and the workers lost so far. */
typedef struct {
    int64_t docs, skipped, lost;
    int live, want;
    double tokens_per_s;
} ls_loader_hub_source;
void ls_loader_hub_source_info(const ls_loader_hub *h, int s, ls_loader_hub_source *out);

/* Runs one source worker (`llmsys loader worker --role source`): connects to the constructor's hub
 * at endpoint, asks for the spec of source `name`, serves it until told to stop. Returns LS_OK on a
 * stop, an error when the hub refuses it (unknown source, other data). */
int ls_loader_worker_run(const char *endpoint, const char *name);

/* ---------------------------------------------------------------- service */

typedef struct ls_loader_server ls_loader_server;

typedef struct {
    int prefetch; /* steps built ahead of the furthest request (default 4; at most LS_LOADER_MAX_WINDOW) */
    int history;  /* fully-fetched steps kept for retries (default 4; at most LS_LOADER_MAX_WINDOW) */
    int threads;  /* source loader threads (default 1) */
    /* Journal of acknowledged weight changes (NULL: none). Each change is written here
     * (atomically) before it is acknowledged; a service resumed from a state blob replays
     * the changes acknowledged after that blob was built, so none is lost by a restart. A
     * service started without a state begins a new, empty journal. */
    const char *journal;
    /* The trainer's grid (NULL: every client is a DP rank). Clients then connect with their
     * global rank; each DP group's batch is read from the sources once and placed on its members
     * (ls_loader_batch_place; the placed batch's rank and n_ranks are the process's global rank and
     * the grid's size). topology->dp must equal n_ranks. */
    const ls_topology *topology;
    /* Shadow mode: the endpoint of a primary service with the same mix, ranks and topology. The
     * shadow pulls the primary's state (the state at its oldest unfetched step, plus the
     * acknowledged weight changes) every shadow_ms (default 200) and serves nothing of its own
     * until the first batch request reaches it; then it takes over from the last pulled state and
     * serves byte-identical batches. Clients list it after the primary (ls_loader_client_open). */
    const char *shadow_of;
    int shadow_ms;
    /* Source workers (NULL: the service reads its sources itself): the service opens this hub on
     * its bind address and takes every source's documents from the workers. */
    const ls_loader_hub_opts *workers;
    /* BPE tokenizer of the run (NULL: byte tokens): the service (or its workers) encodes every
     * document with it; info reports its vocabulary size and fingerprint, which trainers check. */
    const struct ls_bpe *tokenizer;
    /* Where the resume state came from (its file; NULL: none), named in its errors. */
    const char *state_from;
} ls_loader_serve_opts;

/* Binds tcp://<bind>:port (bind an IPv4 or IPv6 address, checked by ls_bind_check before any
 * work; port 0 picks a free one, see ls_loader_server_port) and starts the constructor thread. state (may be NULL)
 * resumes from a blob (one of another mix, corrupt or foreign: LS_EFORMAT, LS_ECHECKSUM, LS_EINVAL, the
 * message led by opts->state_from). */
int ls_loader_server_open(ls_loader_server **out, const ls_loader_mix *mix, int n_ranks, const char *bind, int port,
                          const ls_loader_serve_opts *opts, const uint8_t *state, size_t state_len);
int ls_loader_server_port(const ls_loader_server *srv);
/* The port of the worker link (0 without source workers). */
int ls_loader_server_worker_port(const ls_loader_server *srv);
/* Serves requests until a shutdown request or ls_loader_server_stop (from any thread). */
int ls_loader_server_run(ls_loader_server *srv);
void ls_loader_server_stop(ls_loader_server *srv);
void ls_loader_server_close(ls_loader_server *srv);

typedef struct ls_loader_client ls_loader_client;

/* Connects to endpoint ("tcp://host:port", or "tcp://primary:p,tcp://shadow:q,..." for fail-over)
 * as rank. timeout_ms bounds one attempt; a timed-out request is resent (same step: the service
 * answers it idempotently) up to `retries` times, then sent to the next endpoint; LS_ETIMEDOUT when
 * none answers. */
int ls_loader_client_open(ls_loader_client **out, const char *endpoint, int rank, int timeout_ms, int retries);
/* The endpoint the client talks to now (the primary until a fail-over). */
const char *ls_loader_client_endpoint(const ls_loader_client *c);
/* Fetches rank's batch for step (waits while the service builds it). Service-side errors
 * (step evicted or too far ahead, bad rank) come back as their status with the message. */
int ls_loader_client_batch(ls_loader_client *c, int64_t step, ls_loader_batch *out);
/* Sends a control message (JSON, e.g. {"weights":{"prose":0.5,"math":0.5},"step":120});
 * *reply (may be NULL) receives the service's JSON answer (caller frees). */
int ls_loader_client_control(ls_loader_client *c, const char *json, char **reply);
/* Sends new weights (JSON object of source name -> weight; NULL: back to the config's
 * schedule) from step on (< 0: the next step built); *reply as for ls_loader_client_control. */
int ls_loader_client_set_weights(ls_loader_client *c, const char *weights, int64_t step, char **reply);
/* Asks the service to exit cleanly. */
int ls_loader_client_shutdown(ls_loader_client *c);
void ls_loader_client_close(ls_loader_client *c);

/* A training batch source (llmsys/train.h) that fetches rank's batch for each step from
 * the service at endpoint: rows are copied into the trainer's (rows, T) batch, padding
 * and segment ends get target -1. Fails at open when the service serves another number
 * of ranks than n_ranks or tokenizes otherwise than tokenizer (NULL: byte tokens), and on a
 * step whose rows do not fit. */
struct ls_batch_source;
int ls_loader_batch_source(struct ls_batch_source **out, const char *endpoint, int rank, int n_ranks,
                           const struct ls_bpe *tokenizer, int timeout_ms);
/* Writes the loader state after the last fetched step (what `loader serve --resume`
 * takes) atomically to path; *step (may be NULL) gets the step it resumes at. */
int ls_loader_batch_source_save_state(struct ls_batch_source *s, const char *path, int64_t *step);

/* Serialisation of a batch (the wire payload; exposed for tests). */
int ls_loader_batch_encode(const ls_loader_batch *b, uint8_t **buf, size_t *len);
int ls_loader_batch_decode(const uint8_t *buf, size_t len, ls_loader_batch *out);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_LOADER_H */
