/* cmd_train.c - `llmsys train`, `eval`, `generate` and the core demo scenario. */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/robust.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

/* ---------------------------------------------------------------- train */

/* SIGINT/SIGTERM during `train`: finish the current step, save, exit 130. A signal can
 * only reach the process through a global; it is the CLI's only one. */
static volatile sig_atomic_t train_stop_signal = 0;

static void on_stop_signal(int sig) { train_stop_signal = sig; }

/* Runs a checked job on this process's ranks; prints its outcome; returns the exit code. */
static int train_job(const ls_train_job *j) {
    ls_dist *d;
    if (ls_dist_init(&d) < 0) return ls_cli_fail();
    struct sigaction sa, old_int, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1); /* a stop request forwarded by mpirun (--ranks) */
    train_stop_signal = 0;
    ls_train_job_result r;
    int rc = ls_train_job_run(j, d, &r), rank = ls_dist_rank(d), ret = 0;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    if (rc < 0) {
        ret = !r.started && ls_cli_input_error(rc) ? 2 : 1; /* what the command line named, until the run */
        if (r.report_here && ls_dist_size(d) > 1) fprintf(stderr, "llmsys: rank %d: %s\n", rank, ls_errmsg());
        if (r.report_here && ls_dist_size(d) == 1) ls_cli_fail();
    } else if (rank == 0) {
        printf("trained steps %" PRId64 "..%" PRId64 " of %d: loss %.4f -> %.4f, %.0f tokens/s, %.1f s; saved %s\n",
               r.start_step, r.end_step, r.steps, r.first_loss, r.last_loss, r.tokens_per_s, r.wall_s, j->out);
        if (r.stopped)
            fprintf(stderr, "llmsys: interrupted: saved step %" PRId64 " to %s; continue with --resume %s\n",
                    r.end_step, j->out, j->out);
    }
    if (rc == LS_OK && r.stopped) ret = 130;
    ls_dist_free(d);
    return ret;
}

int cmd_train(int argc, char **argv) {
    ls_train_job o = ls_train_job_defaults();
    ls_strlist data = {0};
    ls_robust_train robust = {0}; /* under `llmsys robust run` */
    ls_arg spec[] = {
        {"config", LS_ARG_STR, &o.config, "NAME", "model config: tiny or small (default small)"},
        {"data", LS_ARG_PATH_LIST, &data, "PATH", "text files or directories (recursive)"},
        {"loader", LS_ARG_STR, &o.loader, "URL",
         "fetch each step's batch from `llmsys loader serve` at tcp://host:port instead of --data"},
        {"steps", LS_ARG_INT, &o.steps, "N", "total optimizer steps of the run (the lr schedule length)"},
        {"out", LS_ARG_PATH, &o.out, "FILE", "checkpoint to write (.safetensors, atomic)", 1},
        {"resume", LS_ARG_PATH, &o.resume, "CKPT", "continue the run saved in CKPT exactly"},
        {"tokenizer", LS_ARG_PATH, &o.tokenizer, "FILE", "BPE vocabulary (tokenizer.json; default: bytes)"},
        {"batch", LS_ARG_INT, &o.batch, "B", "global batch: sequences per step over all ranks (default 8)"},
        {"seq", LS_ARG_INT, &o.seq, "T", "tokens per sequence (default: the model's context)"},
        {"lr", LS_ARG_FLOAT, &o.lr, "LR", "peak learning rate (default 1e-3)"},
        {"warmup", LS_ARG_INT, &o.warmup, "N", "linear warmup steps (default steps/10)"},
        {"weight-decay", LS_ARG_FLOAT, &o.weight_decay, "W", "AdamW weight decay on 2-D weights (default 0.1)"},
        {"grad-clip", LS_ARG_FLOAT, &o.grad_clip, "C", "clip the global gradient norm to C (default 1; 0: off)"},
        {"seed", LS_ARG_I64, &o.seed, "S", "seed of model init and data sampling (default 1)"},
        {"ranks", LS_ARG_INT, &o.ranks, "N", "data-parallel ranks: re-launches under mpirun -np N"},
        {"save-every", LS_ARG_INT, &o.save_every, "N", "also checkpoint to --out every N steps"},
        {"stop-at", LS_ARG_INT, &o.stop_at, "STEP", "stop (and save) after STEP steps, as if interrupted"},
        {"log-every", LS_ARG_INT, &o.log_every, "N", "log line every N steps when stderr is not a TTY"},
        {"heldout", LS_ARG_FLOAT, &o.heldout, "FRAC", "share of the data held out (default 0.05)"},
        {"max-bytes", LS_ARG_I64, &o.max_bytes, "N", "read at most N bytes of text (default 256 MiB)"},
        {"threads", LS_ARG_INT, &o.threads, "N", "threads per rank (default: cores / ranks on this host)"},
        {"report", LS_ARG_PATH, &o.report, "FILE", "write a JSON summary (losses, tokens/s, wall time)"},
        {"precision-plan", LS_ARG_PATH, &o.precision_plan, "FILE",
         "per-rank Linear-layer precisions and CPU shares from `llmsys plan train`"},
        {"robust-agent", LS_ARG_STR, &robust.agent, "EPS",
         "report every step to these node agents (set by `llmsys robust run`)"},
        {"robust-park", LS_ARG_STR, &robust.park, "EP,GEN", "wait as a pre-started world (set by `llmsys robust run`)"},
    };
    int rc = ls_args_parse("train",
                           "Trains the GPT on text, data-parallel over MPI ranks (mpirun -np N llmsys train ..., or "
                           "--ranks N). Example:\n  llmsys train --config small --data /usr/share/common-licenses "
                           "--steps 200 --out model.safetensors",
                           spec, LS_NARGS(spec), argc, argv, NULL, 0, NULL);
    o.data = data.v, o.n_data = data.n;
    o.plan_check = ls_tplan_check, o.plan_apply = ls_tplan_apply;
    o.stop_flag = &train_stop_signal;
    ls_robust_train_hooks(&o, &robust);
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (rc)
        rc = LS_ARGS_EXIT(rc);
    else if (ls_train_job_check(&o, ws ? atoi(ws) : 0) < 0)
        rc = ls_usage_err("train", "%s", ls_errmsg());
    else if (o.ranks > 1 && !ws) { /* --ranks N outside mpirun: hand over to mpirun, which starts N copies of us */
        char lost[300];
        rc = ls_cli_status(ls_dist_relaunch(o.ranks, ls_cli_self(), NULL, argc, argv, lost, sizeof lost));
        if (lost[0]) fprintf(stderr, "llmsys train --ranks %d: %s\n", o.ranks, lost);
    } else if (ws && o.ranks > 1 && atoi(ws) != o.ranks)
        rc = ls_usage_err("train", "--ranks %d but mpirun started %s ranks", o.ranks, ws);
    else
        rc = train_job(&o);
    ls_strlist_free(&data);
    return rc;
}

/* ---------------------------------------------------------------- eval */

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *report = NULL, *split_name = "heldout";
    int seq = 0, batch = 8, threads = 0;
    int64_t max_tokens = 0, max_bytes = 0;
    ls_strlist data = {0};
    ls_corpus_opts co = ls_corpus_defaults();
    ls_arg spec[] = {
        {"model", LS_ARG_PATH, &model, "CKPT", "checkpoint (.safetensors)", 1},
        {"data", LS_ARG_PATH_LIST, &data, "PATH", "text files or directories", 1},
        {"split", LS_ARG_STR, &split_name, "S", "heldout (default), train or all", 0, LS_CHOICES(LS_SPLITS)},
        {"seq", LS_ARG_INT, &seq, "T", "window length (default: the model's context)", 0, LS_MIN(0)},
        {"batch", LS_ARG_INT, &batch, "B", "windows per forward pass (default 8)", 0, LS_MIN(1)},
        {"max-tokens", LS_ARG_I64, &max_tokens, "N", "evaluate at most N tokens (default all)", 0, LS_MIN(0)},
        {"heldout", LS_ARG_FLOAT, &co.heldout_frac, "FRAC", "held-out share, as used in training (default 0.05)"},
        {"max-bytes", LS_ARG_I64, &max_bytes, "N", "read at most N bytes of text", 0, LS_MIN(0)},
        {"threads", LS_ARG_INT, &threads, "N", "threads (default: all cores)", 0, LS_RANGE(0, LS_MODEL_MAX_THREADS)},
        {"report", LS_ARG_PATH, &report, "FILE", "write a JSON summary"},
    };
    int rc = ls_args("eval",
                     "Loss, bits per byte and perplexity of a checkpoint on the held-out part of a corpus "
                     "(the same split training used).",
                     spec, LS_NARGS(spec), argc, argv);
    ls_split split = LS_SPLIT_HELDOUT;
    ls_eval_ckpt_result r;
    ls_split_parse(split_name, &split);                          /* one of its names: the parser checked */
    if (rc < 0 && report && ls_out_path_check("report", report)) /* before the work */
        rc = ls_cli_fail();
    if (rc >= 0) {
        ls_strlist_free(&data);
        return rc;
    }
    ls_model_set_threads(threads);
    if (max_bytes > 0) co.max_bytes = (size_t)max_bytes;
    rc = ls_eval_checkpoint(model, data.v, data.n, &co, split, seq, batch, (size_t)max_tokens, &r);
    ls_strlist_free(&data);
    if (rc < 0) return ls_cli_fail_rc(rc); /* reads the inputs, then computes: no run of its own to fail */
    printf("%s on %s split: %zu tokens (%zu bytes)\n", model, split_name, r.r.tokens, r.r.bytes);
    printf("  loss        %.4f nats/token\n", r.r.loss);
    printf("  bits/byte   %.4f   (unigram entropy of this text: %.4f)\n", r.r.bits_per_byte, r.unigram_entropy);
    printf("  perplexity  %.3f\n", r.r.perplexity);
    return report && ls_eval_report_write(report, model, split, &r) < 0 ? ls_cli_fail() : 0;
}

/* ---------------------------------------------------------------- generate */

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = "", *report = NULL;
    int tokens = 256, top_k = 0, threads = 0;
    double temperature = 0.8, top_p = 1.0;
    int64_t seed = 1;
    ls_arg spec[] = {
        {"model", LS_ARG_PATH, &model, "CKPT", "checkpoint (.safetensors)", 1},
        {"prompt", LS_ARG_STR, &prompt, "TEXT", "text to continue (default: start of a document)"},
        {"tokens", LS_ARG_INT, &tokens, "N", "bytes to generate (default 256)", 0, LS_RANGE(1, 1000000)},
        {"temperature", LS_ARG_FLOAT, &temperature, "T", "sampling temperature; 0 = greedy (default 0.8)"},
        {"top-k", LS_ARG_INT, &top_k, "K", "sample among the K most likely bytes (0: off)", 0, LS_MIN(0)},
        {"top-p", LS_ARG_FLOAT, &top_p, "P", "nucleus sampling mass in (0, 1] (1: off)"},
        {"seed", LS_ARG_I64, &seed, "S", "sampling seed (default 1)", 0, LS_MIN(0)},
        {"threads", LS_ARG_INT, &threads, "N", "threads (default: all cores)", 0, LS_RANGE(0, LS_MODEL_MAX_THREADS)},
        {"report", LS_ARG_PATH, &report, "FILE", "write a JSON summary (text, tokens/s)"},
    };
    int rc = ls_args("generate", "Samples text from a checkpoint: the prompt, then its continuation.", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    ls_model_set_threads(threads);
    ls_sample_config s = {(float)temperature, top_k, (float)top_p};
    rc = ls_generate_checkpoint(model, prompt, tokens, &s, (uint64_t)seed, stdout, report);
    return rc < 0 ? ls_cli_fail_rc(rc) : 0; /* as eval: the inputs, then local compute and writes (LS_EIO) */
}

/* ---------------------------------------------------------------- demo core */

int demo_core(const ls_demo_ctx *ctx) {
    int learned = 0;
    if (ls_train_demo_core(stdout, ctx->workdir, ctx->quick, &learned) < 0) return ls_cli_fail();
    /* the tiny quick run is only a smoke test; the full run must show the model learned */
    return learned || ctx->quick ? 0 : 1;
}
