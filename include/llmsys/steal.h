/*
 * steal.h - model-extraction audit: victims behind an HTTP prediction API, a black-box
 * attack that builds a DNN replica from label (or probability) answers only, its
 * evaluation, and a PRADA-style detector in the victim server.
 *
 * After ML-Stealer (docs/references.md section 6): synthetic data generation + replica DNN
 * training with no access to the victim's data or type; the published metric is label
 * agreement between replica and victim on held-out natural test data. Peers whose ideas the
 * attack uses: Papernot et al. 2017 (Jacobian-based augmentation x + lambda*sign(grad)),
 * Tramer et al. 2016 (adaptive retraining for label-only APIs), ActiveThief (selection by
 * replica uncertainty). Defence: PRADA (Juuti et al. 2019), Shapiro-Wilk W over the
 * growing set of minimum distances between a client's queries.
 *
 * Typical audit, all over HTTP:
 *
 *     ls_steal_data tr, te;
 *     ls_steal_dataset_open("fmnist", 20000, &tr, &te);           // or a CSV path
 *     ls_victim *v; ls_victim_opts vo; ls_victim_opts_default(&vo, LS_VICTIM_MLP);
 *     ls_victim_train(&vo, &tr, &v);
 *     ls_victim_server *srv; ls_victim_server_opts so; ls_victim_server_opts_default(&so);
 *     ls_victim_server_start(v, &so, &srv);                       // port 0: any free port
 *     ls_steal_client *cl; ls_steal_client_init("http://127.0.0.1:PORT/predict", "key", 10, &cl);
 *     ls_steal_opts ao; ls_steal_opts_default(&ao); ... shape, range, classes, budget ...
 *     ls_replica *r; ls_steal_result res; ls_steal_run(&ao, ls_steal_client_oracle(cl), &r, &res);
 *
 * Every function returns LS_OK or a negative ls_status with a message (core.h).
 */
#ifndef LLMSYS_STEAL_H
#define LLMSYS_STEAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* ---------------------------------------------------------------- datasets */

/* A labelled table: n rows of d features (row-major floats), labels in [0, k). Inputs are
 * normalised to [lo, hi] (the victim API's declared input range). c*h*w == d gives the
 * declared input shape (c = h = 1, w = d for tables). */
typedef struct {
    int64_t n;
    int d, k;
    int c, h, w;
    float lo, hi;
    float *x;   /* n*d, owned */
    int32_t *y; /* n, owned */
    /* The min-max scaler that mapped the rows into [lo, hi]: per-feature raw min and max
     * (d each, owned), NULL when the rows are in their own units (images, raw CSV rows). */
    float *raw_min, *raw_max;
    char name[256]; /* what the user named: a path for CSV files and fmnist:DIR */
} ls_steal_data;

/* Allocates n x d (zeroed), shape (1,1,d), range [0,1]. */
int ls_steal_data_alloc(ls_steal_data *d, int64_t n, int dim, int k);
void ls_steal_data_free(ls_steal_data *d);
/* Reads a gzipped (or plain) idx image file (magic 0x00000803, uint8, dims n x h x w) and
 * its idx label file (0x00000801); pixels scaled to [0,1]. At most max_n rows (0 = all).
 * Errors name the file and what is wrong (magic, dims, truncation, label/image mismatch). */
int ls_steal_idx_load(const char *images_path, const char *labels_path, int64_t max_n, ls_steal_data *out);
/* Reads a numeric CSV: features then a label column; an optional header line (detected
 * when its fields are not numbers). Labels (any numbers) are remapped to 0..k-1 in sorted
 * order. Features are kept raw (use ls_steal_data_normalize). */
int ls_steal_csv_load(const char *path, ls_steal_data *out);
/* Writes features and label as CSV with a header (f0,...,label). Atomic. */
int ls_steal_csv_write(const char *path, const ls_steal_data *d);
/* Deterministic shuffled split: test gets round(test_frac * n) rows. */
int ls_steal_data_split(const ls_steal_data *all, double test_frac, uint64_t seed, ls_steal_data *train,
                        ls_steal_data *test);
/* Random subset of n rows (all rows when n >= src->n), deterministic in seed. */
int ls_steal_data_subset(const ls_steal_data *src, int64_t n, uint64_t seed, ls_steal_data *out);
/* Per-feature min-max scaling to [lo, hi] with the train set's statistics; test (may be NULL)
 * is scaled with the same statistics and clipped into range. Both record the scaler
 * (raw_min, raw_max). LS_ENOMEM (rows untouched) when it cannot be stored. */
int ls_steal_data_normalize(ls_steal_data *train, ls_steal_data *test, float lo, float hi);
/* Scales n rows of d raw values in place as ls_steal_data_normalize does (into [lo, hi],
 * clipped; a constant feature maps to the middle); the inverse maps [lo, hi] back to raw
 * units (a constant feature to its value). */
void ls_steal_scale_rows(const float *raw_min, const float *raw_max, int d, float lo, float hi, float *x, int64_t n);
void ls_steal_unscale_rows(const float *raw_min, const float *raw_max, int d, float lo, float hi, float *x, int64_t n);
/* Reproducible synthetic tables (so the benchmark needs no download):
 *   "blobs": make_classification-style - k classes, each a mixture of 2 Gaussian clusters at
 *            random hypercube vertices in 'inf' informative dims, plus linear combinations
 *            (redundant) and noise dims, 3% label noise.
 *   "rings": nonlinear - k classes by the quantiles of the radius of a Gaussian point
 *            (make_gaussian_quantiles-style), plus noise dims.
 * Features are raw; normalise after splitting. n in [2, ls_steal_table_max_rows(d)], d and k
 * in [2, LS_TABLE_MAX_DIM] (n·d and the 2k clusters stay in range), else LS_EINVAL. */
enum { LS_TABLE_MAX_ROWS = INT32_MAX, LS_TABLE_MAX_DIM = 65536 };
/* The most rows of d features a table can have on this machine: LS_TABLE_MAX_ROWS, and its
 * rows (d floats and an int32 label each) within the memory the process may use (ls_mem_total). */
int64_t ls_steal_table_max_rows(int d);
int ls_steal_make_table(const char *kind, int64_t n, int d, int k, uint64_t seed, ls_steal_data *out);
/* ls_steal_make_table written as CSV to path (`victim make-data`). */
int ls_steal_write_table(const char *kind, int64_t n, int d, int k, uint64_t seed, const char *path);
/* Held-out tasks (tasks.c), never used to design the attack: images (1x28x28, 10 classes,
 * 25 000 rows) "glyphs" (letters from the installed DejaVu fonts, FreeType), "shapes",
 * "textures", "fmnist-inv" (a transformed Fashion-MNIST); tables "moons", "checker",
 * "skewed". Index of a name (-1 unknown), count, name, whether an image task, one-line
 * description. ls_steal_task_check: LS_OK for a task's name, else LS_EINVAL naming the tasks. */
int ls_steal_task_index(const char *name);
int ls_steal_task_check(const char *name);
int ls_steal_task_count(void);
const char *ls_steal_task_name(int i);
int ls_steal_task_is_image(int i);
const char *ls_steal_task_what(int i);
/* Generates n rows (n <= 0: the task's size, 25 000 images or 12 000 table rows) of task name
 * deterministically from seed (the same seed, the same rows on a machine with the same
 * fonts); image pixels are 8-bit levels in [0, 1], table features raw. */
int ls_steal_make_task(const char *name, uint64_t seed, int64_t n, ls_steal_data *out);
/* The task at seed 1 split as ls_steal_dataset_open splits (images: the first 20 000 rows
 * train, the other 5 000 test; tables: 80/20 and min-max scaled); max_train > 0 caps train. */
int ls_steal_task_split(const char *name, int64_t max_train, ls_steal_data *train, ls_steal_data *test);
/* Writes task name (seed) under dir: images as Fashion-MNIST's four gzipped idx files
 * (`--data fmnist:DIR` reads them), tables as DIR/NAME.csv. desc (ndesc bytes) says what. */
int ls_steal_write_task(const char *name, uint64_t seed, const char *dir, char *desc, size_t ndesc);
/* Opens a dataset by spec and splits it into train/test, normalised to [0,1]:
 *   "fmnist" or "fmnist:DIR": Debian's Fashion-MNIST idx files (train 60k / test 10k);
 *   "blobs" / "rings": the built-in synthetic tables (reproducible, seed fixed);
 *   "wine" / "cancer" / "digits": real tables from Debian's python3-sklearn (UCI wine,
 *     Wisconsin breast cancer, 8x8 digits, declared as (1,8,8) images), split like any CSV;
 *   a held-out task name (ls_steal_task_index; ls_steal_task_split);
 *   any other string: a CSV path (80/20 split with a fixed seed).
 * max_train > 0 caps the train rows (a deterministic subset); test is always the full test
 * split. */
int ls_steal_dataset_open(const char *spec, int64_t max_train, ls_steal_data *train, ls_steal_data *test);
/* Whether spec names a built-in dataset (fmnist[:DIR], blobs, rings, wine, cancer, digits)
 * rather than a CSV path. */
int ls_steal_dataset_is_named(const char *spec);
/* Test data for evaluation. A named dataset gives its held-out test split (train: the rest,
 * for baselines). A CSV path gives all its rows in their own units with train empty (n 0),
 * unless test_split in (0, 1) is given: then the split and scaling victim training makes
 * (fixed seed; 0.2 reproduces its held-out rows). desc (n bytes) says which rows were used. */
int ls_steal_testset_open(const char *spec, double test_split, ls_steal_data *train, ls_steal_data *test, char *desc,
                          size_t n);

/* ---------------------------------------------------------------- victims */

typedef enum {
    LS_VICTIM_LOGREG = 0,
    LS_VICTIM_SVM,
    LS_VICTIM_TREE,
    LS_VICTIM_FOREST,
    LS_VICTIM_KNN,
    LS_VICTIM_NB,
    LS_VICTIM_MLP,
    LS_VICTIM_CNN, /* image-shaped data only (h, w >= 4) */
    LS_VICTIM_COUNT
} ls_victim_type;

/* "logreg", "svm", ... and back (-1 when unknown). LS_VICTIM_TYPES: every name, "|"-separated. */
#define LS_VICTIM_TYPES "logreg|svm|tree|forest|knn|nb|mlp|cnn"
const char *ls_victim_type_name(int type);
int ls_victim_type_parse(const char *s);

typedef struct {
    int type;
    uint64_t seed;
    int epochs;      /* logreg/svm/mlp/cnn passes over the data */
    int max_depth;   /* tree/forest */
    int min_leaf;    /* tree/forest: fewest rows in a leaf */
    int trees;       /* forest */
    int knn_k;       /* knn neighbours */
    int64_t knn_ref; /* knn: reference rows kept (subsampled for prediction speed) */
    int hidden;      /* mlp hidden width; cnn fc hidden width (0 = conv features straight to the classes) */
    int conv1;       /* cnn: channels of the first conv layer */
    int conv2;       /* cnn: channels of the second conv layer */
    int kernel;      /* cnn: odd kernel size of both conv layers (same padding) */
    int verbose;     /* progress bar */
} ls_victim_opts;

typedef struct ls_victim ls_victim;

void ls_victim_opts_default(ls_victim_opts *o, int type);
/* LS_OK when what o sizes before training fits this machine: a forest's trees (each at least a
 * root node of up to 64 classes) within the memory the process may use, an mlp's hidden
 * layer within the network's width, a knn's k at most 64. Else LS_EINVAL naming --trees,
 * --hidden or knn_k and its bound;
 * ls_victim_train checks it before allocating. */
int ls_victim_opts_fit(const ls_victim_opts *o);
/* Trains a victim on train (rows in [lo,hi]); *out is owned by the caller. LS_EINVAL for a
 * cnn on table-shaped data (h or w below 4, e.g. the (1,1,d) of a CSV). */
int ls_victim_train(const ls_victim_opts *o, const ls_steal_data *train, ls_victim **out);
void ls_victim_free(ls_victim *v);
/* Class probabilities (n*k; rows sum to 1). Reentrant: safe from several threads. */
int ls_victim_predict_proba(const ls_victim *v, const float *x, int64_t n, float *proba);
/* Arg-max labels. */
int ls_victim_predict(const ls_victim *v, const float *x, int64_t n, int32_t *labels);
/* Fraction of rows of d whose predicted label equals d->y. */
int ls_victim_accuracy(const ls_victim *v, const ls_steal_data *d, double *acc);
int ls_victim_kind(const ls_victim *v);
/* Input dim, classes, declared range and shape. */
void ls_victim_info(const ls_victim *v, int *d, int *k, float *lo, float *hi, int shape[3]);
/* The scaler of its training data (per-feature raw min and max, d each; both NULL when its
 * inputs were never rescaled, or it was loaded from a version-1 file). Borrowed. */
void ls_victim_scaler(const ls_victim *v, const float **raw_min, const float **raw_max);
/* Maps n rows in the units of the training data into the model's [lo, hi] (in place; clipped
 * as training scaled its test split); a no-op without a scaler. */
void ls_victim_scale_inputs(const ls_victim *v, float *x, int64_t n);
/* victim.bin: magic "LSVICTIM", version, type, dims, payload, scaler (version 2), XXH3
 * checksum. Atomic write; load reads versions 1 and 2, validates everything and names the
 * file on error. */
int ls_victim_save(const ls_victim *v, const char *path);
int ls_victim_load(const char *path, ls_victim **out);

/* ---------------------------------------------------------------- PRADA detector */

/* Shapiro-Wilk W of x[0..n) (3 <= n <= 5000), coefficients by Royston's (1992, AS R94)
 * approximation; *pval (may be NULL) from Royston's normalising transform. */
int ls_shapiro_wilk(const double *x, int n, double *w, double *pval);

typedef enum { LS_PRADA_OFF = 0, LS_PRADA_LOG, LS_PRADA_THROTTLE, LS_PRADA_REFUSE } ls_prada_mode;
/* Their names, in that order (ls_prada_mode_parse takes one of them). */
#define LS_DETECTOR_MODES "off|log|throttle|refuse"
const char *ls_prada_mode_name(int mode);
int ls_prada_mode_parse(const char *s);

typedef struct {
    double delta;  /* flag when W < delta */
    int min_dists; /* need this many distances before testing */
    int window;    /* test the latest window distances (<= 5000) */
    int max_set;   /* cap on the growing set per class (oldest evicted) */
} ls_prada_opts;

typedef struct ls_prada ls_prada;
void ls_prada_opts_default(ls_prada_opts *o);
int ls_prada_init(const ls_prada_opts *o, int d, int k, ls_prada **out);
void ls_prada_free(ls_prada *p);
/* Feeds n queries with their predicted labels. Returns 1 when the client is (now or was
 * before) flagged, 0 if not, negative on error. Tests W once per call (per request). */
int ls_prada_observe(ls_prada *p, const float *x, const int32_t *labels, int n);
/* Queries seen, queries seen when first flagged (-1 never), latest W (1 before testing). */
void ls_prada_state(const ls_prada *p, int64_t *queries, int64_t *flagged_at, double *last_w);
/* Lowest W seen so far (1 before testing): the client would be flagged at any delta above it. */
double ls_prada_min_w(const ls_prada *p);

/* ---------------------------------------------------------------- query-distribution monitor */

/* A detector built for extraction attacks that PRADA misses (qmon.c): the victim's training
 * rows give a profile (mean, top-`rank` principal subspace with its Mahalanobis metric,
 * residual energy outside it); a query is an outlier when its score exceeds the `quantile`
 * of scores of training rows the profile was not fitted on (4-fold out-of-fold); a client
 * is flagged once z = (k - n p0) / sqrt(n p0 (1 - p0)) > z for its n queries with k
 * outliers (p0 = null_rate, deliberately above 1 - quantile), n >= min_queries. */
typedef struct {
    int rank;           /* principal subspace rank (default 24; capped at d) */
    double quantile;    /* outlier threshold quantile (default 0.99) */
    double null_rate;   /* p0 of the z-test (default 0.05) */
    double z;           /* flag threshold (default 4) */
    int64_t min_queries; /* test from this many queries on (default 50) */
    int64_t max_rows;   /* reference rows used (subsample, default 4000) */
    uint64_t seed;
    /* images (h, w > 1): a second view of each row, the quantiles of its pixel levels and of
     * its neighbouring pixels' differences, with its own profile and threshold; a query is an
     * outlier when either view's score passes its threshold (default 1; 0 = pixels only) */
    int image_stats;
} ls_qmon_opts;
typedef struct ls_qmon_ref ls_qmon_ref; /* the profile: shared by all clients, read-only */
typedef struct ls_qmon ls_qmon;         /* one client's counters */
#define LS_QMON_GRID 8
/* The z thresholds at which every client records its flag position (trade-off curves). */
extern const double ls_qmon_grid[LS_QMON_GRID];
void ls_qmon_opts_default(ls_qmon_opts *o);
/* Fits the profile to ref's rows (in the model's units, as the victim was trained). */
int ls_qmon_fit(const ls_steal_data *ref, const ls_qmon_opts *o, ls_qmon_ref **out);
void ls_qmon_ref_free(ls_qmon_ref *r);
int ls_qmon_ref_dim(const ls_qmon_ref *r);
/* Scores n rows into score[n] (the pixel view's score) and, when outlier is non-NULL, whether
 * each is an outlier (past the threshold of either view). */
int ls_qmon_score(const ls_qmon_ref *r, const float *x, int64_t n, double *score, int *outlier);
int ls_qmon_init(const ls_qmon_ref *ref, ls_qmon **out);
void ls_qmon_free(ls_qmon *q);
/* Feeds n queries (one request); returns 1 when the client is (now or before) flagged, 0 if
 * not, negative on error. */
int ls_qmon_observe(ls_qmon *q, const float *x, int n);
/* Queries at the first flag with threshold z (z <= 0: the options' z; or one of ls_qmon_grid;
 * another z tells only whether, giving the current count); -1 never. */
int64_t ls_qmon_flagged_at(const ls_qmon *q, double z);
/* Queries, outliers, the latest z and the largest z so far. */
void ls_qmon_state(const ls_qmon *q, int64_t *queries, int64_t *outliers, double *z, double *max_z);

/* ---------------------------------------------------------------- the prediction API */

/* One API key of the key file: a name (shown in /stats and the log), the secret sent in
 * X-API-Key, and its query budget (<= 0: the server's --budget). */
typedef struct {
    char name[64], secret[128];
    int64_t budget;
} ls_victim_key;

/* Reads a key file: one key per line, "NAME SECRET [BUDGET]" separated by blanks; '#' starts
 * a comment. Names and secrets are unique, secrets at least 8 characters. *keys is malloc'd. */
int ls_victim_keys_read(const char *path, ls_victim_key **keys, int *n);

typedef struct {
    const char *bind;     /* IPv4 or IPv6 address to listen on (NULL: 127.0.0.1) */
    int port;             /* 0: any free port (see ls_victim_server_port) */
    unsigned max_conns, max_conns_per_ip; /* open connections in total / per address (0: 512 / 64) */
    const ls_victim_key *keys; /* n_keys > 0: only these keys may query, each with its budget */
    int n_keys;
    const char *keys_path; /* or a key file, read at start (ls_victim_keys_read) */
    int output_proba;     /* 1: answer probabilities, 0: labels only */
    int64_t budget;       /* per-client query budget (inputs), <= 0 unlimited; a client is a key
                             of keys, or without keys a source address (X-API-Key then ignored) */
    double rate_qps;      /* per-client token bucket refill, inputs per second, <= 0 unlimited */
    double burst;         /* token bucket size (inputs) */
    int max_batch;        /* inputs per request */
    size_t max_body;      /* bytes per request */
    const char *log_path; /* query log (JSON lines), NULL none */
    int prada_mode;       /* ls_prada_mode */
    ls_prada_opts prada;
    double throttle_s;     /* THROTTLE: delay per request of a flagged client */
    const char *admin_key; /* X-API-Key exempt from budget, rate and detector (auditor), needed for
                              /stats; NULL none */
    int model_units;       /* 1: inputs already in the model's [lo, hi], the stored scaler skipped */
    const ls_qmon_ref *monitor; /* query-distribution monitor profile (borrowed), NULL none */
    int monitor_mode;           /* ls_prada_mode for the monitor's flag: off, log, throttle, refuse */
} ls_victim_server_opts;

typedef struct ls_victim_server ls_victim_server;

void ls_victim_server_opts_default(ls_victim_server_opts *o);
/* Starts serving v (borrowed; must outlive the server) on o->bind (127.0.0.1 by default):
 *   POST /predict  {"inputs": [[...], ...]} -> {"labels": [...]} or {"probs": [[...]], "labels": [...]}
 *   GET  /info     {"input_shape":[c,h,w], "input_range":[lo,hi], "classes":k, "output":"label|proba",
 *                   "units":"raw|model"; with a scaler also "feature_min", "feature_max", "model_range"}
 * A victim with a scaler takes inputs in its training data's units ("raw": scaled and clipped
 * per feature, input_range spans the raw ranges) unless o->model_units; otherwise inputs must
 * lie in [lo, hi] ("model").
 *   GET  /stats    per-client queries, budget left, PRADA W and flag (admin key only, else 401)
 * Bad requests get a 4xx JSON {"error": "..."}; the server keeps serving. */
/* What ls_victim_server_start refuses about o before anything starts: LS_EINVAL naming the
 * flag (port, --max-batch, --prada-delta in (0, 1), --burst >= 1, --throttle >= 0, an empty
 * --admin-key). */
int ls_victim_server_opts_check(const ls_victim_server_opts *o);
int ls_victim_server_start(const ls_victim *v, const ls_victim_server_opts *o, ls_victim_server **out);
int ls_victim_server_port(const ls_victim_server *s);
/* The input range the API takes (GET /info's input_range): the span of the training data's
 * feature ranges when it takes raw units (returns 1), else the model's range (returns 0). */
int ls_victim_server_input_range(const ls_victim_server *s, float *lo, float *hi);
/* Stats of one client ("key:<key name>" or "addr:<ip>"): queries, PRADA flag position (-1 never)
 * and the lowest W seen (1 before testing). LS_ENOTFOUND for an unknown client. */
/* The monitor's flag position at threshold z (see ls_qmon_flagged_at; -1 never or no monitor)
 * and largest z of a client. LS_ENOTFOUND for an unknown client. */
int ls_victim_server_monitor(ls_victim_server *s, const char *client, double z, int64_t *flagged_at, double *max_z);
int ls_victim_server_client(ls_victim_server *s, const char *client, int64_t *queries, int64_t *flagged_at,
                            double *min_w);
/* The whole /stats object (caller frees with cJSON_Delete). */
struct cJSON *ls_victim_server_stats(ls_victim_server *s);
void ls_victim_server_stop(ls_victim_server *s);

/* ---------------------------------------------------------------- the attacker's side */

/* An oracle answers n inputs with labels (always) and probabilities (proba non-NULL and the
 * API gives them: *got_proba = 1). Returns LS_OK or a negative status with a message. */
typedef struct {
    void *ctx;
    int (*query)(void *ctx, const float *x, int n, int32_t *labels, float *proba, int *got_proba);
} ls_steal_oracle;

typedef struct ls_steal_client ls_steal_client;
/* HTTP/1.1 client over plain sockets for URL "http://host:port/path" (an IPv6 host in
 * brackets: "http://[::1]:8080/predict"; port 80 when absent). api_key (may be NULL)
 * goes in X-API-Key. timeout_s bounds connect, send and each receive. d and k: the expected
 * input width and class count (answers with another class count are an error). */
int ls_steal_client_init(const char *url, const char *api_key, double timeout_s, int d, int k, ls_steal_client **out);
/* LS_OK when url is a target ls_steal_client_init takes (nothing is sent); else LS_EINVAL naming it. */
int ls_steal_target_check(const char *url);
void ls_steal_client_free(ls_steal_client *c);
int ls_steal_client_query(ls_steal_client *c, const float *x, int n, int32_t *labels, float *proba, int *got_proba);
/* GET of another path on the same host (e.g. "/stats"); *body owned by caller. */
int ls_steal_client_get(ls_steal_client *c, const char *path, int *status, char **body);
ls_steal_oracle ls_steal_client_oracle(ls_steal_client *c);
/* Requests sent, inputs answered. */
void ls_steal_client_counts(const ls_steal_client *c, int64_t *requests, int64_t *inputs);

/* A replica: one or more MLPs d -> h1 -> h2 -> k (ReLU) whose softmax outputs are averaged
 * (members trained on the same answers from different initialisations), plus optionally a
 * CART whose leaf probabilities are added to that mean (ls_steal_opts.tree_member), a CNN
 * whose softmax is added too (ls_steal_opts.cnn_member) and a softmax regression whose softmax
 * is added too (ls_steal_opts.linear_member). Saved as
 * safetensors: member 0 as fc{i}.w (out,in) and fc{i}.b, member m >= 1 as m{m}.fc{i}.w/.b,
 * the CART as tree.feat, tree.left, tree.right (I32, one per node), tree.thr (F32, one per
 * node), tree.probs (F32, leaves x k), the CNN as cnn.arch (I32: conv1, conv2, kernel, hidden
 * widths) and cnn.params (F32, every weight in the order of the victim CNN's file), the
 * softmax regression as lin.w (F32, k x d) and lin.b (F32, k); metadata "llmsys.steal" = JSON
 * with shape, range, classes, "members" (absent = 1), "tree", "cnn" and "linear" (absent = 0)
 * and, with a CNN, "cnn_weight" (its softmax's weight in the sum; absent = 1). */
typedef struct ls_replica ls_replica;
#define LS_REPLICA_MAX_MEMBERS 8
int ls_replica_save(const ls_replica *r, const char *path, const char *meta_json);
/* Loads what ls_replica_save wrote; every shape, tree index and leaf table is checked
 * (LS_EFORMAT with a message naming the file otherwise). */
int ls_replica_load(const char *path, ls_replica **out);
/* 1 when the replica holds a CART member. */
int ls_replica_has_tree(const ls_replica *r);
/* 1 when the replica holds a CNN member. */
int ls_replica_has_cnn(const ls_replica *r);
/* Frees the replica's CNN member, if any: it then predicts with its MLPs (and CART) alone. */
void ls_replica_drop_cnn(ls_replica *r);
/* 1 when the replica holds a linear member (a softmax regression). */
int ls_replica_has_linear(const ls_replica *r);
/* Frees the replica's linear member, if any: it then predicts without it. */
void ls_replica_drop_linear(ls_replica *r);
void ls_replica_free(ls_replica *r);
int ls_replica_predict(const ls_replica *r, const float *x, int64_t n, int32_t *labels);
void ls_replica_info(const ls_replica *r, int *d, int *k);

typedef enum {
    LS_STEAL_SYNTH = 0, /* our synthetic generation (seeds, Jacobian, boundary, active) */
    LS_STEAL_RANDOM,    /* baseline: uniform random inputs in range */
    LS_STEAL_NATURAL,   /* upper reference: real samples (opts.natural) labelled by the victim */
} ls_steal_strategy;

typedef struct {
    int c, h, w;                  /* declared input shape */
    float lo, hi;                 /* declared input range */
    int k;                        /* classes */
    int64_t budget;               /* queries, never exceeded */
    int strategy;                 /* ls_steal_strategy */
    const ls_steal_data *natural; /* LS_STEAL_NATURAL only */
    uint64_t seed;
    int batch; /* inputs per HTTP request */
    int hidden1, hidden2;
    int final_epochs; /* epochs of the last replica fit (default 30; 0 = 30) */
    int members;      /* replica MLPs averaged at prediction, 1..LS_REPLICA_MAX_MEMBERS (default 3) */
    int use_proba;    /* use probabilities when the API gives them */
    int verbose;      /* progress bar */
    /* images: add to the replica a CART fitted on the queries when a CART fitted on 4 of every 5
     * answers predicts the 5th better than an MLP of the replica's shape (default 1; 0 = MLPs only) */
    int tree_member;
    /* images: add to the replica a small CNN trained on the answers when an MLP's softmax plus a
     * CNN's, both fitted on 4 of every 5 answers, predicts the 5th better than the MLP's alone
     * by more than two standard errors (ls_steal_result.cnn_better; default 1 = tested;
     * 0 = no CNN, about 2.5 times faster at 20k queries on 28x28 images) */
    int cnn_member;
    /* images, with cnn_member: the CNN trained on answers each moved by a random offset of up to
     * cnn_shift pixels each way, drawn anew per epoch (labels kept; default 0 = as asked) */
    int cnn_shift;
    int cnn_epochs; /* images, with cnn_member: the CNN's epochs (0 = LS_STEAL_CNN_EPOCHS) */
    /* images, with cnn_member: the CNN's softmax enters the replica's sum, and its test, times
     * this weight (default LS_STEAL_CNN_WEIGHT; 0 also means it; at most 10) */
    double cnn_weight;
    /* images, with cnn_member: the CNN's test also runs once the seeds are answered; when it keeps
     * the CNN there, every later round ranks its candidates by the MLP's softmax plus the CNN's
     * (times cnn_weight), the CNN refitted for cnn_rank epochs on every answer before each round
     * (default 0 = off: the MLP alone ranks; at most LS_STEAL_CNN_RANK_MAX). With tree_member the
     * CART's test runs there first, and a CART that wins it leaves the MLP alone ranking (the
     * replica would keep the CART, which the CNN's ranking costs). Asks nothing more. */
    int cnn_rank;
    /* images: add to the replica a softmax regression of the answers (one linear layer, its
     * softmax added to the sum with weight 1) when the MLP's softmax plus its own, both fitted on
     * 4 of every 5 answers, predicts the 5th better than the MLP's alone by more than two
     * standard errors (ls_steal_result.linear_better; default 1 = tested; 0 = none) */
    int linear_member;
    /* images, when the CART is not kept: the members distilled into new ones trained on the
     * answers plus distill x answers unlabeled draws of the prior, labelled by the members'
     * mean softmax (default 1; 0 = off) */
    double distill;
} ls_steal_opts;

/* The CNN member's training epochs and weight when ls_steal_opts.cnn_epochs, cnn_weight are 0. */
#define LS_STEAL_CNN_EPOCHS 15
#define LS_STEAL_CNN_WEIGHT 1.0
/* The most epochs ls_steal_opts.cnn_rank may refit the ranking CNN for before a round. */
#define LS_STEAL_CNN_RANK_MAX 100
/* The linear member's training: epochs of Adam at this step (it decays to 2 % of it), larger
 * than the MLPs' 1e-3: a softmax regression is fitted on separable answers far into its margin. */
#define LS_STEAL_LINEAR_EPOCHS 100
#define LS_STEAL_LINEAR_LR 0.05f

/* The image prior's styles, in the order of ls_steal_result.style_share. */
#define LS_STEAL_NSTYLE 5
extern const char *const ls_steal_style_names[LS_STEAL_NSTYLE];

typedef struct {
    int64_t queries; /* answered queries spent */
    int rounds;
    int used_proba;
    int stopped_early; /* the oracle failed; replica trained on what was gathered */
    char error[256];   /* the oracle's message when stopped_early */
    double seconds;
    int64_t class_count[64]; /* answered labels per class (first 64 classes) */
    int tree_tested;          /* opts.tree_member: the CART's test ran (images) */
    int tree_kept;            /* ... and the CART was kept in the replica */
    double tree_acc, mlp_acc; /* the test: the CART's and the MLP's accuracy on the held-back fifth */
    int cnn_tested;           /* opts.cnn_member: the CNN's test ran (images) */
    int cnn_kept;             /* ... and the CNN was kept in the replica */
    double cnn_acc;           /* the test: the accuracy of the MLP's plus the CNN's softmax there */
    /* ... and its held-back rows that sum gets right and the MLP wrong (better), and the other
     * way round (worse): kept when better - worse > 2 sqrt(better + worse) */
    int64_t cnn_better, cnn_worse;
    /* opts.cnn_rank: the CNN's test after the seeds ran, on this many answers; it kept the CNN
     * for the ranking; the accuracies and paired counts as cnn_acc, mlp_acc, cnn_better and
     * cnn_worse; and the rounds then ranked with it. With tree_member, the CART's test there
     * first (cart_tested, its accuracy cart_acc): when the CART won it (cart_won), the CNN's test
     * did not run and the MLP alone ranked. */
    int cnn_rank_tested, cnn_rank_kept, cnn_rank_rounds, cnn_rank_cart_tested, cnn_rank_cart_won;
    int64_t cnn_rank_answers, cnn_rank_better, cnn_rank_worse;
    double cnn_rank_acc, cnn_rank_mlp_acc, cnn_rank_cart_acc;
    int linear_tested;                   /* opts.linear_member: the softmax regression's test ran (images) */
    int linear_kept;                     /* ... and it was kept in the replica */
    double linear_acc;                   /* the test: the accuracy of the MLP's plus its softmax there */
    int64_t linear_better, linear_worse; /* ... its paired counts, as cnn_better and cnn_worse */
    int distilled;            /* opts.distill: the members were replaced by distilled ones */
    /* images: the share of each query style (ls_steal_style_names) among all answered queries,
     * and of the pixel blends (bisection midpoints of two answers, which have no style); the
     * style shares and the blend share sum to 1 */
    double style_share[LS_STEAL_NSTYLE];
    double blend_share;
} ls_steal_result;

void ls_steal_opts_default(ls_steal_opts *o);
/* Runs the attack against oracle; *out (the replica) is set whenever at least one answer
 * was gathered, even when the oracle fails midway (then res->stopped_early = 1 and the
 * return is LS_OK); fails only when nothing could be learned. Never sends more than
 * o->budget inputs. */
int ls_steal_run(const ls_steal_opts *o, ls_steal_oracle oracle, ls_replica **out, ls_steal_result *res);

/* Agreement of replica and victim labels (vlabels) on test, and replica accuracy on test->y. */
int ls_steal_agreement(const ls_replica *r, const ls_steal_data *test, const int32_t *vlabels, double *agreement,
                       double *accuracy);

/* ---------------------------------------------------------------- evaluation (eval.c) */

/* The API's labels on every row of d (requests of 256 rows) into labels[d->n]. */
int ls_steal_client_labels(ls_steal_client *cl, const ls_steal_data *d, int32_t *labels);
/* Puts the rows of sets[] into the units the target's GET /info declares ("raw": the
 * training data's units, undoing a dataset scaler; "model": scaled by the target's stored
 * scaler), so victim and replica see the inputs the API takes; sets' lo/hi become the
 * target's input range. Without /info the rows stay as they are. *units names the result
 * ("raw units", "model units", "as given"). LS_EINVAL when rows in their own units fall
 * outside the range of a target that stores no scaler. */
int ls_steal_match_units(ls_steal_client *cl, ls_steal_data **sets, int nsets, const char **units);
/* The query count a replica file records (its "llmsys.steal.report" metadata); 0 if none. */
int64_t ls_replica_recorded_queries(const char *path);
/* Sets o's declared shape, range and class count to those of d. */
void ls_steal_opts_for_data(ls_steal_opts *o, const ls_steal_data *d);
/* The summary of a run (what `llmsys steal` stores as the replica's "llmsys.steal.report"
 * metadata): target, strategy, budget, queries, rounds, answers per class, ...; caller frees. */
struct cJSON *ls_steal_result_json(const char *target, const char *strategy, const ls_steal_opts *o,
                                   const ls_steal_result *res);
/* Share of labels[i] == d->y[i] over d's rows (0 for no rows). */
double ls_steal_label_accuracy(const int32_t *labels, const ls_steal_data *d);

/* ---------------------------------------------------------------- workflows (audit.c) */

/* What ls_victim_train_file did: the data's name, rows, shape, accuracies, wall seconds,
 * whether a scaler was stored, the knn reference rows kept. */
typedef struct {
    char data_name[256];
    int64_t train_rows, test_rows;
    int d, k;
    double train_acc, test_acc, seconds;
    int has_scaler;
    int64_t knn_ref;
} ls_victim_train_summary;
/* The defaults of type, overridden by the fields of g that were given (epochs, trees,
 * max_depth, knn_ref, conv1, conv2, kernel > 0; hidden >= 0). */
void ls_victim_opts_given(ls_victim_opts *o, int type, const ls_victim_opts *g);
/* `victim train`: refuses an out that would replace data or report, and o past
 * ls_victim_opts_fit, before anything is read; opens data (ls_steal_dataset_open, at most train_n rows), trains a
 * victim with o, measures train and test accuracy, saves it to out and, when report is non-NULL, writes a JSON summary
 * there. */
int ls_victim_train_file(const ls_victim_opts *o, const char *data, int64_t train_n, const char *out,
                         const char *report, ls_victim_train_summary *s);
/* `victim serve`: loads model and serves it with so, prints the serving line to out, writes
 * the bound port to port_file (may be NULL), and serves until *stop becomes non-zero or
 * duration seconds (> 0) pass; then prints the final /stats and stops. With so->monitor_mode
 * on, the query monitor's profile is fitted (mo) to the training split of dataset spec
 * monitor_data first. */
/* What ls_victim_serve_file refuses before it reads anything: ls_victim_server_opts_check,
 * a monitor without monitor_data, a monitor z <= 0. */
int ls_victim_serve_check(const ls_victim_server_opts *so, const char *monitor_data, const ls_qmon_opts *mo);
int ls_victim_serve_file(const char *model, const ls_victim_server_opts *so, const char *monitor_data,
                         const ls_qmon_opts *mo, const char *port_file, double duration, const volatile int *stop,
                         FILE *out);
/* `steal`: the attack o against the API at target (client with api_key, timeout_s); saves the
 * replica to out with the run's summary as metadata, and the summary to report (may be
 * NULL). A target failing midway: LS_OK with res->stopped_early and the replica saved. */
int ls_steal_attack_url(const ls_steal_opts *o, const char *target, const char *api_key, double timeout_s,
                        const char *out, const char *report, ls_steal_result *res);
/* LS_OK when the memory attack o sizes by its options fits this machine: it keeps every query
 * it spends (its input, c·h·w floats, and its answer, k probabilities and a label), and holds
 * the answers of one request of o->batch inputs. Else LS_EINVAL naming --budget or --batch and
 * its bound; likewise for --distill outside [0, 8], --cnn-weight outside (0, 10] and
 * --cnn-rank without the CNN member. Checked before anything is allocated or sent. */
int ls_steal_opts_fit(const ls_steal_opts *o);

typedef struct {
    const char *replica, *target, *data, *api_key, *report;
    int64_t test_n, budget; /* test rows (0 all); baselines' budget (0: the replica's own count) */
    int baselines, epochs;
    double timeout_s, test_split;
} ls_steal_eval_opts;
typedef struct {
    char desc[1200];   /* which rows were evaluated */
    const char *units; /* "raw units", "model units", "as given" */
    int64_t test_rows;
    int evaluated; /* agreement and accuracies below are valid (even if a baseline failed) */
    int queried;   /* the inputs were read and checked: a failure is the run's (the victim, the
                    * network), not the command line's */
    double agreement, accuracy, victim_accuracy;
    int has_base[2];          /* [0] random, [1] natural */
    int natural_skipped;      /* the whole file was the test set: no natural rows */
    int64_t base_queries[2];
    double base_agree[2], base_acc[2];
} ls_steal_eval_result;
void ls_steal_eval_opts_default(ls_steal_eval_opts *o);
/* What ls_steal_eval refuses about eo before it reads anything: LS_EINVAL naming the flag
 * (--test-split outside [0, 1) or with a named dataset, --timeout outside (0, 86400] s, a
 * --report that would replace the replica or the test data). */
int ls_steal_eval_opts_check(const ls_steal_eval_opts *eo);
/* `steal eval`: agreement of a replica file with the target on test rows, replica and victim
 * accuracy, optional random/natural baselines with the same budget, JSON report. LS_EINVAL is
 * for what the caller gave (a bad target URL, a replica that does not fit the test data, a
 * baseline budget past ls_steal_opts_fit), found before any query. */
int ls_steal_eval(const ls_steal_eval_opts *o, ls_steal_eval_result *r);
/* The `llmsys demo steal` scenario under dir (created): two victims on Fashion-MNIST, the
 * attack and the random baseline, a table printed to out. quick: a reduced run. */
int ls_steal_demo(const char *dir, int quick, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_STEAL_H */
