/*
 * plan.h - heterogeneous serving planner: choose the pipeline stages, the bit width of
 * every layer and the prefill / decode micro-batch sizes for a model on a cluster of
 * unequal GPUs, maximising throughput under a quality target.
 *
 * After LLM-PQ (Zhao et al., PPoPP'24) and SplitQuant (CLUSTER'25); see
 * docs/references.md section 3 and docs/plan.md for the formulation, every cost term
 * and the catalogs under data/.
 *
 * Typical use:
 *
 *     ls_plan_catalog *cat;
 *     ls_plan_catalog_load(NULL, &cat);                 // data/gpus.json, data/models.json
 *     ls_plan_arch arch;  ls_plan_catalog_model(cat, "opt-30b", &arch);
 *     ls_plan_cluster *cl; ls_plan_cluster_load(cat, "llmpq-2", &cl);
 *     ls_plan_problem pb; ls_plan_problem_init(&pb, &arch, cl, (ls_plan_workload){32, 512, 100});
 *     ls_plan_quality_default(&arch, pb.omega);          // or _from_checkpoint / _from_file
 *     ls_plan_problem_set_quality(&pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4});
 *     ls_plan_result plan; ls_plan_solve(&pb, LS_PLAN_ALGO_SPLITQUANT, &plan);
 *     ls_plan_result_write(&pb, &plan, "plan.json");
 *
 * The objective (seconds for one batch; throughput = batch*gen / time):
 *   T = sum_j P_j + (m_p - 1) max_j P_j + (gen - 1) max(sum_j D_j, m_d max_j D_j) + theta * Q
 * with P_j / D_j the prefill / decode time of stage j for one micro-batch (layers, head
 * and the send to the next stage), m_p = ceil(B / b_pre), m_d = ceil(B / b_dec), Q the
 * total quality indicator. All algorithms optimise the same T and are evaluated by the
 * same ls_plan_evaluate().
 */
#ifndef LLMSYS_PLAN_H
#define LLMSYS_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/train.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    LS_PLAN_NBITS = 4,       /* bit widths: 3, 4, 8, 16 */
    LS_PLAN_MAX_DEV = 128,   /* devices in one cluster */
    LS_PLAN_MAX_LAYER = 256, /* transformer layers in one model */
    LS_PLAN_NAME = 64,
    LS_PLAN_SIM_MAXB = 4096,         /* sequences in one simulated batch */
    LS_PLAN_SIM_MAX_STEPS = 2000000, /* micro-batch x stage steps one replay may take (~1 s) */
};

/* The bit widths, index 0..3. */
extern const int ls_plan_bits[LS_PLAN_NBITS];
/* Index of a bit width in ls_plan_bits, -1 when not allowed. */
int ls_plan_bits_index(int bits);
/* Bit mask (bit k = ls_plan_bits[k]) of a list like "4,8,16"; LS_EINVAL names a bad entry. */
int ls_plan_bits_mask_parse(const char *list, int *mask);

/* ---------------------------------------------------------------- catalogs */

typedef struct {
    char name[LS_PLAN_NAME];
    double mem_bytes;  /* capacity */
    double bw_Bps;     /* memory bandwidth */
    double fp16_flops; /* dense fp16 tensor throughput */
    double int8_ops;   /* dense int8 tensor throughput; 0 = no int8 tensor cores */
    double link_Bps;   /* device-to-device bandwidth inside a node */
} ls_plan_gpu;

typedef struct {
    char name[LS_PLAN_NAME];
    int n_layer, d_model, n_head, n_kv_head, d_ff, vocab, n_ctx;
    int gated;     /* SwiGLU MLP: three d_model x d_ff matrices */
    int tied;      /* LM head shares the token embedding */
    int pos_embed; /* learned position table (n_ctx x d_model) */
} ls_plan_arch;

typedef struct ls_plan_catalog ls_plan_catalog;

/* Loads data_dir/gpus.json and data_dir/models.json. data_dir NULL: $LLMSYS_DATA, else
 * <source dir>/data. Errors name the file and the bad entry. */
int ls_plan_catalog_load(const char *data_dir, ls_plan_catalog **out);
void ls_plan_catalog_free(ls_plan_catalog *c);
const char *ls_plan_catalog_dir(const ls_plan_catalog *c);
/* Case-insensitive lookups (name or alias). LS_ENOTFOUND lists the known names. */
int ls_plan_catalog_gpu(const ls_plan_catalog *c, const char *name, ls_plan_gpu *out);
int ls_plan_catalog_model(const ls_plan_catalog *c, const char *name, ls_plan_arch *out);
int ls_plan_catalog_num_models(const ls_plan_catalog *c);
const char *ls_plan_catalog_model_name(const ls_plan_catalog *c, int i);
/* Model from a catalog name or an llmsys safetensors checkpoint path (llmsys.config). */
int ls_plan_resolve_model(const ls_plan_catalog *c, const char *name_or_path, ls_plan_arch *out);
/* Checks ranges (layers 1..LS_PLAN_MAX_LAYER, divisibility of heads, ...). */
int ls_plan_arch_validate(const ls_plan_arch *a);

/* ---------------------------------------------------------------- cost model */

/* A cost model fitted from a `llmsys profile` device file (docs/plan-format.md):
 * per bit width, prefill layer time = c0 + c1*b*s + c2*b*s^2, decode layer time =
 * c0 + c1*b + c2*b*ctx (least squares over the rows); head and link likewise. */
typedef struct {
    char device[LS_PLAN_NAME];
    int threads;
    int has_bits[LS_PLAN_NBITS];
    double pre[LS_PLAN_NBITS][3], dec[LS_PLAN_NBITS][3];
    double head_pre[3], head_dec[2];
    double link_lat_s, link_Bps;
    double act_bytes;     /* bytes of one activation element between stages: 4 (fp32, CPU), 2 (fp16) */
    int n_layer, d_model; /* of the profiled model: checked against the planned one */
} ls_plan_profile;

/* Reads and fits a profile file; errors name the file and the bad row. */
int ls_plan_profile_load(const char *path, ls_plan_profile *out);
/* The same for a profile already read (j, from the file path: named in the errors). */
int ls_plan_profile_parse(const struct cJSON *j, const char *path, ls_plan_profile *out);

typedef struct {
    char name[LS_PLAN_NAME]; /* catalog GPU name or "cpu:..." for profiled devices */
    ls_plan_gpu gpu;
    int node;
    int prof;            /* index into cluster->prof, -1 = analytical model from gpu figures */
    double usable_bytes; /* memory the planner may fill */
} ls_plan_device;

typedef struct {
    char name[LS_PLAN_NAME];
    char model[LS_PLAN_NAME]; /* default model named by the file ("" if none) */
    int batch, prompt, gen;   /* default workload (0 if none) */
    int n_dev, n_node;
    ls_plan_device dev[LS_PLAN_MAX_DEV];
    int node_kind[LS_PLAN_MAX_DEV]; /* nodes with equal kind are interchangeable */
    double inter_Bps, inter_lat_s;
    /* devices that share one host ("host" object of the file): the compute they share in
     * units of one device alone (0: each device is its own) and the measured one-way
     * latency of a message between their processes (-1: the link latencies); the serving
     * front's work per micro-batch on that host (0: none) */
    double host_capacity, host_hop_s, host_front_s;
    int n_prof;
    ls_plan_profile prof[8];
} ls_plan_cluster;

/* Loads a cluster from a JSON file or a catalog name (data/clusters/<name>.json). */
int ls_plan_cluster_load(const ls_plan_catalog *c, const char *name_or_path, ls_plan_cluster **out);
void ls_plan_cluster_free(ls_plan_cluster *cl);
/* Names of the catalog clusters (sorted); *names is malloc'd strings, free with
 * ls_plan_names_free. */
int ls_plan_catalog_clusters(const ls_plan_catalog *c, char ***names, int *n);
void ls_plan_names_free(char **names, int n);
/* Prints the catalog directory, its models and its clusters (`llmsys plan list`). */
void ls_plan_catalog_print(FILE *f, const ls_plan_catalog *c);

typedef struct {
    int batch;  /* B: sequences in the batch */
    int prompt; /* s: prompt tokens */
    int gen;    /* n: generated tokens */
} ls_plan_workload;
/* The workload: each of batch, prompt, gen when >= 0, else the cluster file's, else 32, 512, 100. */
ls_plan_workload ls_plan_cluster_workload(const ls_plan_cluster *cl, int batch, int prompt, int gen);

/* Memory terms (bytes). Weights of one transformer layer at bits (group-quantized
 * formats carry their fp16 scales); KV cache of one layer for the whole batch at
 * context prompt+gen; embedding (first stage) and LM head + final norm (last stage);
 * activation workspace for one micro-batch. */
double ls_plan_layer_params(const ls_plan_arch *a);
double ls_plan_layer_weight_bytes(const ls_plan_arch *a, int bits);
double ls_plan_layer_kv_bytes(const ls_plan_arch *a, const ls_plan_workload *w);
double ls_plan_embed_bytes(const ls_plan_arch *a);
double ls_plan_head_bytes(const ls_plan_arch *a);
double ls_plan_workspace_bytes(const ls_plan_arch *a, const ls_plan_workload *w, int mb_pre, int mb_dec);
/* LLM-PQ's usable memory: 0.95 * capacity - 1.93 GB. */
double ls_plan_usable_bytes(double capacity);

/* Time terms (seconds) on device dev of cl: one layer's prefill of mb sequences of seq
 * tokens, one layer's decode step of mb sequences at context ctx, the head's, and a
 * transfer of bytes from device a to device b. */
double ls_plan_layer_prefill_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int bits, int mb, int seq);
double ls_plan_layer_decode_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int bits, int mb, double ctx);
double ls_plan_head_prefill_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int mb, int seq);
double ls_plan_head_decode_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int mb);
double ls_plan_link_s(const ls_plan_cluster *cl, int from, int to, double bytes);

/* ---------------------------------------------------------------- quality */

typedef enum {
    LS_PLAN_Q_NONE = 0, /* no quality term */
    LS_PLAN_Q_THETA,    /* objective += theta * total indicator */
    LS_PLAN_Q_MAX,      /* total indicator <= value */
    LS_PLAN_Q_BITS,     /* total indicator <= that of all layers at `value` bits */
} ls_plan_qkind;

typedef struct {
    ls_plan_qkind kind;
    double value;
} ls_plan_qtarget;

/* Parses "theta:X", "max:X", "bits:B" or "none". */
int ls_plan_qtarget_parse(const char *s, ls_plan_qtarget *out);

/* omega[i*4 + k]: indicator of layer i at ls_plan_bits[k], normalised so that all layers
 * at 4 bits sum to 1. Default profile (no weights): s_i * g(b), documented in
 * docs/plan.md. */
int ls_plan_quality_default(const ls_plan_arch *a, double *omega);
/* Variance-based indicator (LLM-PQ) from an llmsys checkpoint: per linear
 * s_w^2 * sum Var(x), input variances propagated from the weights (docs/plan.md). */
int ls_plan_quality_from_checkpoint(const char *path, const ls_plan_arch *a, double *omega);
/* Measured-loss variant: per layer, mean squared output error of each linear when its
 * weights are round-trip quantized at each bit width, on random unit inputs scaled by
 * the LayerNorm gains. */
int ls_plan_quality_measured(const char *path, const ls_plan_arch *a, double *omega);
/* Calibration (LLM-PQ's indicator from activations): the per-feature variance of every
 * block Linear's input over the windows ls_eval_tokens would score of tok (T tokens, B per
 * forward, about max_tokens, 0 all). var holds n_layer·(3·d_model + d_ff) entries, per layer
 * the inputs of qkv, proj, fc (d_model each) and mproj (d_ff); rstd2 (may be NULL) 2·n_layer
 * + 1: the mean 1/σ² of the input rows of ln1 and ln2 of each layer, then of the final
 * LayerNorm; r gets the windows' loss. */
int ls_plan_calib_var(ls_model *m, const uint16_t *tok, size_t n, int T, int B, size_t max_tokens, double *var,
                      double *rstd2, ls_eval_result *r);
enum {
    LS_PLAN_QUALITY_MEASURED = 1, /* the quantization-error term instead of the variance term */
    LS_PLAN_QUALITY_RELATIVE = 2  /* each layer's terms times the mean 1/σ² of the LayerNorms after
                                     them (from ln2 of the layer for attention, from ln1 of the next
                                     for the MLP, the final one included): an error stays in the
                                     residual stream, and each of those reads it relative to the
                                     stream there */
};
/* The variance indicator or (flags LS_PLAN_QUALITY_MEASURED) the quantization-error one of
 * the fp32 checkpoint at path with its input variances measured by ls_plan_calib_var on the
 * train split of the corpus paths (tokenized as the checkpoint was trained, windows of n_ctx,
 * about max_tokens) instead of propagated, scaled as LS_PLAN_QUALITY_RELATIVE says when set;
 * r gets the calibration text's loss. */
int ls_plan_quality_calibrated(const char *path, const char *const *paths, int n_paths, size_t max_tokens,
                               const ls_plan_arch *a, double *omega, int flags, ls_eval_result *r);
/* Scales omega so that all layers at 4 bits sum to 1 (a unit the user can reason with);
 * LS_EINVAL when that sum is 0 or not finite. Every indicator above ends with it. */
int ls_plan_quality_normalise(const ls_plan_arch *a, double *omega);
/* User file {"format":"llmsys-indicator","version":1,"omega":[[w3,w4,w8,w16],...]}. */
int ls_plan_quality_from_file(const char *path, const ls_plan_arch *a, double *omega);
int ls_plan_quality_write(const char *path, const ls_plan_arch *a, const double *omega);
/* The indicator `llmsys plan serve --indicator how` uses for model (a catalog name or a
 * checkpoint path): "default" (or NULL) = variance for a checkpoint, else the default
 * profile; "variance" / "measured" (checkpoints only); anything else an indicator file. */
int ls_plan_quality_load(const char *how, const char *model, const ls_plan_arch *a, double *omega);
/* The indicator `llmsys plan indicator --method how` computes: "default" (the profile),
 * "variance" or "measured" (model a checkpoint path); LS_EINVAL for another method. */
int ls_plan_quality_method(const char *how, const char *model, const ls_plan_arch *a, double *omega);

/* ---------------------------------------------------------------- problem and plan */

typedef struct {
    const ls_plan_arch *arch;
    const ls_plan_cluster *cl;
    ls_plan_workload wl;
    double omega[LS_PLAN_MAX_LAYER * LS_PLAN_NBITS];
    double theta;        /* seconds per indicator unit in the objective */
    double qmax;         /* max total indicator (INFINITY: none) */
    int bits_mask;       /* allowed bit widths, bit k = ls_plan_bits[k] */
    double time_limit_s; /* ILP: total time limit */
    int time_limit_cpu;  /* ILP: the limit counts CPU seconds of the solving thread, not wall (for
                          * measuring on a loaded machine what an idle one does in wall time) */
    int fix_mb;          /* baselines: b_pre = b_dec = ceil(B / n_dev) */
    int replay_select;   /* splitquant: > 0 re-ranks the best plans of this many top candidates and the
                          * baselines meeting the target by ls_plan_simulate on the cluster's host
                          * (the closed form stays the search's objective); 0 = by objective */
} ls_plan_problem;

typedef enum {
    LS_PLAN_ALGO_SPLITQUANT = 0,
    LS_PLAN_ALGO_ILP,
    LS_PLAN_ALGO_UNIFORM,
    LS_PLAN_ALGO_PIPEEDGE,
    LS_PLAN_ALGO_ADABITS,
    LS_PLAN_ALGO_BRUTE, /* exhaustive, tiny problems only (tests) */
    LS_PLAN_ALGO_COUNT
} ls_plan_algo;

const char *ls_plan_algo_name(ls_plan_algo a);
/* -1 when unknown. LS_PLAN_SERVE_ALGOS: the serving planners' names (no "brute"), "|"-separated. */
int ls_plan_algo_parse(const char *s);
#define LS_PLAN_SERVE_ALGOS "splitquant|ilp|uniform|pipeedge|adabits"
/* Parses a comma-separated list of serving planners (no "brute") into algos (at most max);
 * returns the count, or LS_EINVAL naming the entry that is not one (or one too many). */
int ls_plan_algos_parse(const char *list, int *algos, int max);

typedef struct {
    int n_stage;
    int dev[LS_PLAN_MAX_DEV];       /* device index of each stage, pipeline order */
    int begin[LS_PLAN_MAX_DEV + 1]; /* stage j holds layers [begin[j], begin[j+1]) */
    unsigned char bits[LS_PLAN_MAX_LAYER];
    int mb_prefill, mb_decode;
    /* filled by ls_plan_evaluate */
    double stage_prefill_s[LS_PLAN_MAX_DEV], stage_decode_s[LS_PLAN_MAX_DEV];
    double stage_mem[LS_PLAN_MAX_DEV], stage_usable[LS_PLAN_MAX_DEV];
    double prefill_s, decode_s, total_s, throughput_tok_s, quality, objective;
    /* filled by the solver */
    ls_plan_algo algo;
    double solve_s;
    double ilp_gap;   /* relative gap (ILP), 0 when proven optimal */
    int ilp_optimal;  /* every ILP subproblem proven optimal */
    int n_candidates; /* outer (order, micro-batch) candidates examined */
} ls_plan_result;

/* Fills defaults: quality none, all bits allowed, ILP time limit 10 s. omega gets the
 * default profile of arch. */
int ls_plan_problem_init(ls_plan_problem *p, const ls_plan_arch *a, const ls_plan_cluster *cl, ls_plan_workload wl);
/* Applies a quality target (sets theta / qmax). LS_EINFEASIBLE when bits:B is not allowed. */
int ls_plan_problem_set_quality(ls_plan_problem *p, ls_plan_qtarget q);
/* Checks workload numbers (positive, within the model context) and cluster size. */
int ls_plan_problem_validate(const ls_plan_problem *p);

/* Computes every predicted field of plan and checks validity: each layer exactly once,
 * contiguous stages, allowed bits, memory within every device's budget, quality target.
 * LS_EINVAL for a malformed plan, LS_EINFEASIBLE (message names the device and GB over)
 * when memory or quality is violated; predicted fields are filled either way. */
int ls_plan_evaluate(const ls_plan_problem *p, ls_plan_result *plan);

/* Solves with algo. LS_EINFEASIBLE with a message saying what is missing (GB short on
 * which devices, or the best reachable quality). */
int ls_plan_solve(const ls_plan_problem *p, ls_plan_algo algo, ls_plan_result *out);

/* A planning request as `llmsys plan serve` states it; batch, prompt, gen -1: the cluster
 * file's (else 32, 512, 100); model NULL: the cluster file's; indicator, bits NULL: default. */
typedef struct {
    const char *data, *cluster, *model, *indicator, *bits;
    int batch, prompt, gen;
    double time_limit_s;
    int replay_select;
    ls_plan_qtarget quality;
} ls_plan_request;

/* What a failed request got wrong: the machine (runtime), a name, file or number it gave
 * (input), or an option's value (option; the message names the option). */
enum { LS_PLAN_REQ_RUNTIME = 0, LS_PLAN_REQ_INPUT = 1, LS_PLAN_REQ_OPTION = 2 };

/* Loads the catalog and cluster (*cat, *cl: the caller frees them, also on failure), resolves
 * the model into *arch (which must outlive the problem) and sets up *pb (malloc'd; free()). */
int ls_plan_request_problem(const ls_plan_request *r, ls_plan_catalog **cat, ls_plan_cluster **cl, ls_plan_arch *arch,
                            ls_plan_problem **pb, int *kind);

/* ---------------------------------------------------------------- simulation */

/* What the closed-form objective leaves out, for ls_plan_simulate. */
typedef struct {
    double hop_s;    /* one message between processes (front -> stage 0 -> ... -> front), on top of the
                      * bytes over the link bandwidth; < 0: the cluster's link latency between stages and
                      * no cost for the front's two hops */
    double capacity; /* compute the stages share, in units of one stage running alone (a host with
                      * C free cores: C); <= 0: every stage has a device of its own */
    double front_s;  /* the front's work per micro-batch it takes back (sample, answer, schedule the
                      * next), seconds at full speed, on the host the stages share; 0: none */
} ls_plan_sim_opts;

typedef struct {
    double seconds, tok_s;          /* the whole batch, first submission to last token */
    int mb_prefill, mb_decode;      /* micro-batches sent */
    double busy_s[LS_PLAN_MAX_DEV]; /* per stage: wall seconds spent computing */
} ls_plan_sim_result;

/* Default options: hop -1, capacity 0, front 0. */
ls_plan_sim_opts ls_plan_sim_defaults(void);
/* The defaults with the cluster's "host" facts (capacity, hop, front) filled in. */
ls_plan_sim_opts ls_plan_sim_for_cluster(const ls_plan_cluster *cl);
/* Replays serving one batch of the problem's workload with plan the way `llmsys serve` does
 * (all B requests admitted at once, continuous batching: a micro-batch is formed from the
 * requests ready when one of the #stages in-flight slots frees, prefill and decode alternating,
 * each stage a FIFO server), with every stage's time for each actual micro-batch (its size
 * and mean context) from the same cost terms the planner uses, and processor sharing when
 * the busy stages exceed `capacity`. Plan must have passed ls_plan_evaluate. LS_EINVAL
 * when the batch exceeds LS_PLAN_SIM_MAXB or the replay would take more than
 * LS_PLAN_SIM_MAX_STEPS micro-batch steps (callers then report the closed form alone). */
int ls_plan_simulate(const ls_plan_problem *p, const ls_plan_result *plan, const ls_plan_sim_opts *o,
                     ls_plan_sim_result *out);

/* ---------------------------------------------------------------- the plan file */

/* A serving plan: the model split into pipeline stages, the bit width of every layer and the
 * micro-batch sizes. The plan module owns it: `llmsys plan serve --out` writes it, `llmsys
 * serve --plan` and every stage worker read it, all through the functions below
 * (docs/plan-format.md, "llmsys-plan" version 1). A plain value: no _free. */
typedef struct {
    char device[LS_PLAN_NAME];  /* free-form device name */
    char address[256];          /* ZeroMQ endpoint the stage's input binds; "" when absent */
    int layer_begin, layer_end; /* layers [begin, end) */
} ls_plan_stage;

typedef struct {
    char model_name[256]; /* catalog name or checkpoint path; informational */
    int n_layer, n_stages;
    ls_plan_stage stages[LS_PLAN_MAX_DEV]; /* pipeline order */
    int bits[LS_PLAN_MAX_LAYER];           /* per model layer: 3, 4, 8, 16, or 32 (fp32 weights as they are) */
    int mb_prefill, mb_decode;             /* sequences per prefill / decode micro-batch */
    int group; /* group size of layers quantized on load; 0: the checkpoint's own, else the engine's default */
} ls_plan;

/* Checks a plan: 1..LS_PLAN_MAX_LAYER layers, 1..LS_PLAN_MAX_DEV contiguous stages covering
 * [0, n_layer) exactly once, an allowed width per layer, micro-batches in [1, 1024], group 0
 * or 32..256. LS_EINVAL with a message that starts with `what` and names the stage. */
int ls_plan_validate(const ls_plan *p, const char *what);
/* Parses and validates plan JSON; unknown keys are ignored. expect_n_layer > 0 also checks
 * the plan is for a model of that depth. Messages name `what` and the offending stage. */
int ls_plan_parse(const char *json, size_t len, const char *what, int expect_n_layer, ls_plan *p);
/* ls_plan_parse of a file; messages name the path. */
int ls_plan_read(const char *path, int expect_n_layer, ls_plan *p);
/* The plan as JSON (caller deletes), NULL when out of memory. */
struct cJSON *ls_plan_encode(const ls_plan *p);
/* Validates and writes a plan file (atomic). */
int ls_plan_write(const char *path, const ls_plan *p);
/* A one-stage plan over the whole model at bits (n_layer entries). */
int ls_plan_single(ls_plan *p, int n_layer, const int *bits, int mb_prefill, int mb_decode);
/* The plan of a planner result: model name and depth from the problem's arch, each stage's
 * device name from the cluster. */
int ls_plan_from_result(const ls_plan_problem *pb, const ls_plan_result *r, ls_plan *out);
/* The reverse: each stage takes the first unused cluster device of its name (pipeline order),
 * then ls_plan_evaluate fills the predicted fields. LS_EFORMAT (naming what) when the plan does
 * not fit the problem's model or cluster. */
int ls_plan_to_result(const ls_plan_problem *pb, const ls_plan *p, const char *what, ls_plan_result *out);

/* ---------------------------------------------------------------- output */

/* Writes the plan file of a planner result with its predicted fields. */
int ls_plan_result_write(const ls_plan_problem *p, const ls_plan_result *plan, const char *path);
/* The plan file's JSON with the predicted fields (caller deletes); report adds per-device
 * memory, quality, solve time, vLLM export. */
struct cJSON *ls_plan_to_json(const ls_plan_problem *p, const ls_plan_result *plan, int report);
/* Reads a plan file back for a problem (ls_plan_read, then ls_plan_to_result). */
int ls_plan_result_read(const char *path, const ls_plan_problem *p, ls_plan_result *out);
/* vLLM launch arguments: "--pipeline-parallel-size N" and VLLM_PP_LAYER_PARTITION. */
int ls_plan_export_vllm(const ls_plan_problem *p, const ls_plan_result *plan, const char *path);
/* Writes ls_plan_to_json's report form to path (`llmsys plan serve --report`). */
int ls_plan_report_write(const ls_plan_problem *p, const ls_plan_result *plan, const char *path);
/* The plan as `llmsys plan serve` prints it: a row per stage (device, layers, bits, memory,
 * decode time), micro-batches, the predicted figures and the replay of serve's schedule. */
void ls_plan_print(FILE *f, const ls_plan_problem *p, const ls_plan_result *plan);
/* `llmsys demo plan`: every algorithm on a catalog model and cluster, each held to the
 * uniform baseline's quality, printed as a table (throughput, ratio, stages). */
int ls_plan_demo_compare(FILE *f, const ls_plan_catalog *cat, const char *cluster, const char *model, int quick);

/* ---------------------------------------------------------------- training precision plans
 * Hybrid-device data-parallel training (after QSync, Zhao et al., IPDPS'24; docs/qsync.md):
 * slow ranks run chosen Linear layers in lower precision so that they keep pace with the
 * fast ones. The predictor is an indicator of each layer's sensitivity per precision,
 * computed from the model's real weights, activations and gradients, and a replayer that
 * sums per-operator costs of one step (profiled here per precision, or modelled from the
 * GPU catalog) with the casts between neighbouring operators of different precision and
 * the all-reduce. The allocator picks, per slow rank, the least total indicator whose
 * predicted step time stays within the fast ranks' (exact dynamic programme over time). */

enum {
    LS_TPLAN_MAX_RANK = 16,
    LS_TPLAN_MAX_LIN = 128, /* Linear layers: 4 per block */
};

/* QSYNC: the exact programme; GREEDY: QSync's own greedy (start at each layer's fastest
 * precision, repeatedly raise the layer with the largest indicator gain that still fits). */
typedef enum { LS_TPLAN_QSYNC = 0, LS_TPLAN_UNIFORM, LS_TPLAN_FP32, LS_TPLAN_GREEDY } ls_tplan_strategy;

typedef struct {
    char name[LS_PLAN_NAME]; /* "cpu@0.50" (a rank here at that CPU share) or a catalog GPU */
    int gpu;                 /* 1: catalog GPU, costs modelled; 0: a rank here, costs measured */
    double share;            /* here: cores granted by the throttle (0: unthrottled) */
    double slowdown;         /* here: this rank's fp32 step over the fastest rank's, as profiled (1: none) */
    double cpu_share;        /* here: CPU over wall seconds of this rank while it computed in the
                              * profile, its throttle included (0: unknown, e.g. a catalog GPU) */
    double mem_bytes;        /* capacity the plan must fit */
    int supported[LS_PREC_COUNT];
    /* one step on this device, seconds: the three GEMMs of each Linear layer without casts,
     * the casts of its input activation and output gradient (needed when the neighbouring
     * operator runs another precision: the model's other operators are fp32), the casts of
     * its fp32 master weight (needed for any other precision), everything else */
    double lin_s[LS_TPLAN_MAX_LIN][LS_PREC_COUNT];
    double cast_in_s[LS_TPLAN_MAX_LIN][LS_PREC_COUNT];
    double cast_w_s[LS_TPLAN_MAX_LIN][LS_PREC_COUNT];
    double other_s;
    /* here: the seconds this rank's step gains when the other ranks run every Linear layer at
     * precision q instead of fp32 (they share this machine's cores, caches and memory);
     * 0 at fp32 and on catalog GPUs */
    double neigh_s[LS_PREC_COUNT];
} ls_tplan_device;

typedef struct {
    ls_model_config cfg;
    int batch, seq, ranks, n_lin, per_channel;
    char cluster[128];
    char throttle[96]; /* mechanism ("cgroup v1 ...", "duty cycle ...", "modelled") */
    ls_tplan_device dev[LS_TPLAN_MAX_RANK];
    double allreduce_s; /* the synchronisation per step: here measured (the gradient all-reduce and the
                         * stop agreement of the rank that waited least), on GPUs modelled */
    double omega[LS_TPLAN_MAX_LIN][LS_PREC_COUNT]; /* indicator, 0 at fp32 */
    /* the result */
    ls_tplan_strategy strategy;
    uint8_t prec[LS_TPLAN_MAX_RANK][LS_TPLAN_MAX_LIN];
    double pred_s[LS_TPLAN_MAX_RANK], pred_fp32_s[LS_TPLAN_MAX_RANK];
    double mem_need[LS_TPLAN_MAX_RANK];
    int keeps_pace[LS_TPLAN_MAX_RANK];
    double target_s, pred_iter_s, quality, solve_s;
    double step_cv;   /* here: the spread of one step's time in the profile, a robust standard deviation
                       * over the median (0: none); each rank's step is taken as normal with it */
} ls_tplan;

/* E[max] of n independent normal step times with means mu and standard deviations cv·mu
 * (Clark's moments, exact for n = 2): the iteration of synchronous ranks whose steps vary. */
double ls_tplan_expected_max(const double *mu, double cv, int n);
/* Replays one step of Linear layers prec (n_lin entries) on device d: other_s plus each
 * layer's GEMMs and the casts its neighbours and master weight require. Seconds. */
double ls_tplan_replay(const ls_tplan_device *d, const uint8_t *prec, int n_lin);
/* Memory of one rank (bytes): fp32 weights, gradients, AdamW moments, activations of
 * batch/ranks sequences (ls_model_acts_floats), and the low-precision GEMM scratch the plan
 * grows (what ls_model_prec_scratch_bytes reads after a step where oneDNN runs the 16-bit formats). */
double ls_tplan_memory(const ls_model_config *cfg, int rows, int seq, const uint8_t *prec, int n_lin);

/* The sensitivity indicator, accumulated over backward passes by a Linear-layer observer
 * (ls_model_set_linear_observer with ls_tplan_indicator_observe, user = the struct). */
typedef struct {
    int n_lin, passes;
    double fwd[LS_TPLAN_MAX_LIN][LS_PREC_COUNT]; /* E[<dY, dY_noise>^2]: forward noise seen by the loss */
    double dx[LS_TPLAN_MAX_LIN][LS_PREC_COUNT];  /* E|noise of dX|^2 per element */
    double dw[LS_TPLAN_MAX_LIN][LS_PREC_COUNT];  /* E|noise of dW|^2 */
    double xmass[LS_TPLAN_MAX_LIN];              /* OC * |X|^2: how dX noise reaches dW */
} ls_tplan_indicator;
void ls_tplan_indicator_observe(void *ind, int lin, const float *x, const float *w, const float *dy, int N, int IC,
                                int OC);
/* omega[i][p] = fwd/sum(fwd at int8) + bwd/sum(bwd at int8), bwd = dw + dx * sum over the
 * layers before i of xmass (their weight gradients receive the noise through the residual
 * stream); 0 at fp32. */
void ls_tplan_indicator_finish(const ls_tplan_indicator *ind, double omega[][LS_PREC_COUNT]);

/* Allocates per-rank precisions by strategy (uniform_prec: the precision of every slow rank's
 * layers for LS_TPLAN_UNIFORM, -1 = each rank's fastest) and fills the predictions.
 * LS_EINFEASIBLE when a rank's memory does not fit; LS_EINVAL when uniform_prec is not
 * supported by a slow rank's device. */
int ls_tplan_allocate(ls_tplan *p, ls_tplan_strategy s, int uniform_prec);
/* Fills the predictions of p's current precisions (pred_s with each rank's neighbour term,
 * keeps_pace against target_s, quality, mem_need, pred_iter_s); LS_EINFEASIBLE when a rank's
 * memory does not fit. ls_tplan_allocate ends with it; a caller that sets prec by hand calls it. */
int ls_tplan_predict(ls_tplan *p);
/* Rank r's predicted step: ls_tplan_replay of its precisions plus its neighbour term (neigh_s
 * weighted by the share of the other ranks' Linear time spent at each precision). Seconds. */
double ls_tplan_rank_step(const ls_tplan *p, int r);
/* The plan's iteration time on this machine when rank r runs at share[r] of a core (each
 * rank's CPU seconds over wall seconds in a run while computing): each rank's step
 * (ls_tplan_rank_step) rescaled from the share it got in the profile (dev[r].cpu_share) to
 * share[r], the ranks' expected maximum (ls_tplan_expected_max with p->step_cv); plus sync_s,
 * the time per step at the synchronisations measured in a run, or when sync_s < 0 the
 * profiled synchronisation (allreduce_s) rescaled by the slowest rank's share. Seconds;
 * p->pred_iter_s when p has no profile shares (catalog GPUs); step_s (may be NULL) gets each
 * rank's compute. */
double ls_tplan_predict_at(const ls_tplan *p, const double *share, double sync_s, double *step_s);
/* Least total indicator under the time budget by exhaustion (tests; n_lin <= 10). */
double ls_tplan_brute_force(const ls_tplan *p, int rank, double budget_s, uint8_t *best);

/* The indicator (omega) from two training steps on corpus, after two warm-up steps; weights
 * from ckpt when not NULL, else initialised from seed 1. d NULL: one rank's share of the batch,
 * alone. Otherwise collective on d's ranks: each observes its own shard of the global batch
 * and the ranks sum what they observed, so the indicator covers the whole batch (each rank's
 * int8 terms from its own tensors' ranges, as its casts would have). acc (may be NULL) gets
 * the summed statistics. */
int ls_tplan_indicator_run(ls_tplan *p, const ls_corpus *corpus, const char *ckpt, int threads, ls_dist *d,
                           ls_tplan_indicator *acc);
/* Profiles this machine for the plan, collectively on d's ranks (one process per planned rank,
 * d may be NULL for one rank): every rank trains real data-parallel steps on corpus (weights
 * from ckpt when not NULL, else initialised) under its throttle (shares, p->ranks entries,
 * 0 = unthrottled), in rounds that interleave the precisions: the slower ranks run every
 * Linear layer at one precision while the fastest run fp32. Per rank: each Linear kind's cost
 * per precision in situ (split into GEMM and casts by an isolated profile), the rest of the
 * step, its neighbour term, its share of a core; the synchronisation measured; the indicator.
 * Every rank gets the whole profile in p (dev[], omega, step_cv, allreduce_s). */
int ls_tplan_profile_here(ls_tplan *p, const ls_corpus *corpus, const char *ckpt, const double *shares, int threads,
                          int reps, ls_dist *d);
/* Models catalog GPUs (names per rank) for the plan from their datasheet figures; the
 * indicator still needs real tensors (omega filled by the caller). */
int ls_tplan_model_gpus(ls_tplan *p, const ls_plan_catalog *cat, char names[][LS_PLAN_NAME]);
/* Writes / reads the plan file (format "llmsys-precision-plan"); load checks layer names,
 * precisions and each precision against the rank's device support. */
int ls_tplan_write(const ls_tplan *p, const char *path);
int ls_tplan_load(const char *path, ls_tplan *p);

/* ---- `llmsys plan train` and `llmsys train --precision-plan` (trainrun.c) */
typedef struct {
    const char *model;       /* llmsys config name or checkpoint (default "small") */
    const char *cluster;     /* "local:1,0.5" (CPU shares here) or "A100x2,T4" (catalog GPUs) */
    const char *out;         /* plan file to write */
    const char *const *data; /* corpus paths for the profile and indicator (none: the docs) */
    int n_data;
    int batch, seq, threads, reps; /* seq 0: the model's context; threads 0: cores / ranks here */
    const char *strategy;          /* qsync (default), greedy, uniform, fp32 */
    const char *uniform;           /* precision of the uniform strategy (NULL: each rank's fastest) */
    const char *int8;              /* int8 scales: channel (default) or tensor */
    double mem_gb;                 /* memory per rank (0: the device's, or RAM / ranks here) */
    ls_dist *dist;                 /* a local cluster of R > 1 ranks: the R processes (under mpirun) */
} ls_tplan_opts;
ls_tplan_opts ls_tplan_defaults(void);
/* "local:1,0.5" (CPU shares) or "A100x2,T4" (catalog names): fills shares or names and *local;
 * returns the rank count or a negative status. */
int ls_tplan_parse_cluster(const char *s, double *shares, char names[][LS_PLAN_NAME], int *local);
/* The options alone (no profiling, nothing written): 0 and *local_ranks = the rank count of a
 * local cluster (0 for catalog GPUs), or a negative status. */
int ls_tplan_check_opts(const ls_tplan_opts *o, int *local_ranks);
/* Checks the options (before any profiling), profiles this machine or models the catalog GPUs,
 * allocates and writes o->out; p receives the plan. Bad input: LS_EINVAL, LS_ENOTFOUND,
 * LS_EFORMAT, LS_ERANGE or LS_EINFEASIBLE (memory), with nothing written. */
int ls_tplan_make(const ls_tplan_opts *o, ls_tplan *p);
/* The plan as a table: per rank device, slowdown, predicted steps, mix, keeps pace. */
void ls_tplan_print(FILE *f, const ls_tplan *p);
/* "fp32/bf16/fp16/int8" layer counts of one rank's plan into buf; returns buf. */
const char *ls_tplan_mix(const ls_tplan *p, int rank, char *buf, size_t n);
/* Loads a plan file and checks it plans `ranks` ranks (before any launch). */
int ls_tplan_check(const char *path, int ranks);
/* On each rank (collective): sets the model's per-layer precisions from the plan, applies the
 * rank's throttle (thr; release it when the run ends) and writes every rank's mix and
 * throttle into summary (n bytes). */
int ls_tplan_apply(const char *path, ls_model *m, ls_dist *d, int batch, int seq, ls_throttle *thr, char *summary,
                   size_t n);

/* ---- the measured experiment behind `llmsys demo qsync` and bench_qsync (trainexp.c) */
/* The share of one core this process gets now (CPU over wall time of a 0.3 s busy loop). */
double ls_tplan_exp_cpu_fraction(void);
/* Held-out bits/byte of a checkpoint on the corpus's held-out split. */
int ls_tplan_exp_eval(const char *ckpt, const ls_corpus *c, int seq, double *bpb);
enum { LS_TPLAN_EXP_MAX = 8, LS_TPLAN_EXP_ROUNDS = 8 }; /* plans, interleaved rounds */
typedef struct {
    const char *bin;           /* the llmsys binary that trains */
    const char *config, *data; /* model config name, training corpus path */
    const char *dir;           /* plans, checkpoints, reports and logs go here */
    int batch, seq, steps;     /* per run */
    int repeats;               /* interleaved rounds of every plan (1..LS_TPLAN_EXP_ROUNDS) */
    int reps;                  /* profile repetitions */
    double share;              /* rank 1's CPU share */
    int reprofile;             /* 1: profile again before every round after the first */
} ls_tplan_exp;
typedef struct {
    /* in: the plan */
    char name[32];
    ls_tplan_strategy strategy;
    int uniform; /* precision of LS_TPLAN_UNIFORM, -1: the fastest */
    int eq_time; /* also train it at the first plan's wall time */
    int fixed;   /* 1: no strategy; rank 1 runs kinds[k] on every Linear layer of kind k, rank 0 fp32 */
    int kinds[LS_LIN_COUNT];
    /* out */
    char mix[32];                                /* rank 1's fp32/bf16/fp16/int8 layer counts */
    double pred_s, meas_s, meas_lo_s, meas_hi_s; /* predicted; measured median and quartiles */
    int n_steps_timed;
    /* per run, predicted at the share of a core each rank got in that run (ls_tplan_predict_at)
     * vs that run's median step: mean signed error over the runs and the largest |error|;
     * "run": with the profiled synchronisation; "sync": with the synchronisation time measured in
     * that run */
    double share0, share1, sync_s; /* mean share of a core of rank 0 and 1 while computing, sync s per step */
    double run_share[2];           /* mean share of a core of rank 0 and 1 over the whole run */
    /* the @run prediction by part, means over the runs: each rank's compute predicted and
     * measured (per step, the first left out), the expected maximum's excess over the larger
     * compute, the profiled synchronisation at the run's shares */
    double comp_pred_s[2], comp_meas_s[2], emax_s, sync_pred_s;
    double pred_run_s, err_run, err_run_max;
    double pred_sync_s, err_sync, err_sync_max;
    /* per round: its run's median step and the prediction from the profile taken just before
     * it (e->reprofile; else the plan file's); "rounds": the mean of those predictions vs
     * meas_s, and the largest |error| of one round's prediction vs that round's median */
    double run_meas_s[LS_TPLAN_EXP_ROUNDS], run_pred_s[LS_TPLAN_EXP_ROUNDS];
    double pred_rounds_s, err_rounds, err_rounds_max;
    double bpb;    /* held-out bits/byte after e->steps */
    int eq_steps;  /* steps that fit the first plan's e->steps at its measured pace */
    double eq_bpb; /* held-out bits/byte after eq_steps (eq_time), else bpb */
} ls_tplan_exp_row;
/* The experiment: profiles a 2-rank cluster here (rank 1 at e->share), writes each plan, runs
 * every plan in e->repeats interleaved rounds as `bin train --ranks 2` (each round starting one
 * plan later; per-step times from the report, the first step of each run left out; median and
 * quartiles; with e->reprofile a new profile before each later round predicts it), evaluates
 * each after e->steps and, where asked, at the first plan's wall time. p receives the qsync plan. */
int ls_tplan_exp_run(const ls_tplan_exp *e, const ls_corpus *c, int n, const ls_tplan_exp_row *want, ls_tplan *p,
                     ls_tplan_exp_row *rows, double *profile_s);
/* The rows as a table (predicted vs measured, error, bits/byte; equal wall time); p: the
 * profiled plan. */
void ls_tplan_exp_print(FILE *f, const ls_tplan_exp *e, const ls_tplan_exp_row *rows, int n, const ls_tplan *p);
/* Mean |error| over the rows and the largest |error| of: [0] the plan files' predictions
 * (vs the median step), [1] the rounds' profiles, [2] @run, [3] @sync (ls_tplan_exp_row). */
void ls_tplan_exp_errors(const ls_tplan_exp_row *rows, int n, double err[4][2]);
/* `llmsys demo qsync`: profiles, plans (fp32, uniform, qsync), trains each as a 2-rank run of
 * bin with rank 1 throttled, and prints predicted vs measured and the loss tables to out;
 * files under <workdir>/qsync. quick: the tiny model, a few steps. */
int ls_tplan_demo(const char *bin, const char *workdir, int quick, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_PLAN_H */
