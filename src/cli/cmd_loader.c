/* cmd_loader.c - `llmsys loader serve|fetch|control|stats|tokenize` and the loader demo
 * scenario (three sources, a curriculum, 4 ranks: shares and cost balance). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/loader.h"
#include "llmsys/tokenizer.h"
#include "llmsys/zsec.h"

/* ---------------------------------------------------------------- options */

/* Options more than one subcommand takes, spelled once so their flag and help agree. */
static ls_arg opt_mix(const char **dst) { return (ls_arg){"mix", LS_ARG_PATH, dst, "FILE", "mix config (JSON)", 1}; }
static ls_arg opt_addr(const char **dst) {
    return (ls_arg){"addr", LS_ARG_STR, dst, "URL", "service endpoint, tcp://host:port", 1};
}

/* ---------------------------------------------------------------- serve */

/* The one server a signal may stop (signal handlers cannot take arguments). */
static ls_loader_server *g_serving;

static void on_signal(int sig) {
    (void)sig;
    if (g_serving) ls_loader_server_stop(g_serving);
}

static int loader_serve(int argc, char **argv) {
    const char *mix_path = NULL, *bind = "127.0.0.1", *resume = NULL, *port_file = NULL, *journal = NULL,
               *topology = NULL, *shadow_of = NULL, *workers = NULL, *tokenizer = NULL;
    int ranks = 0, port = 0, prefetch = 4, history = 4;
    ls_arg spec[] = {
        opt_mix(&mix_path),
        {"ranks", LS_ARG_INT, &ranks, "R", "data-parallel ranks served", 1, LS_RANGE(1, LS_LOADER_MAX_RANKS)},
        {"port", LS_ARG_PORT, &port, "P", "TCP port (0 picks a free one; see --port-file)", 1},
        {"bind", LS_ARG_BIND, &bind, "ADDR",
         "address to bind, IPv4 or IPv6 (default 127.0.0.1; 0.0.0.0 or :: for all; ::1: IPv6 loopback)"},
        {"resume", LS_ARG_PATH, &resume, "FILE", "start from a saved loader state blob"},
        {"prefetch", LS_ARG_INT, &prefetch, "N", "steps built ahead of the furthest request (default 4)", 0,
         LS_RANGE(1, LS_LOADER_MAX_WINDOW)},
        {"history", LS_ARG_INT, &history, "N", "fetched steps kept for retried requests (default 4)", 0,
         LS_RANGE(1, LS_LOADER_MAX_WINDOW)},
        {"port-file", LS_ARG_PATH, &port_file, "FILE", "write the bound port here once serving"},
        {"journal", LS_ARG_PATH, &journal, "FILE",
         "record acknowledged weight changes here; with --resume, replay those the state lacks"},
        {"topology", LS_ARG_STR, &topology, "dp=D,pp=P,tp=T,cp=C",
         "the trainer's grid (D = --ranks): clients fetch by global rank, each DP group read once"},
        {"shadow-of", LS_ARG_STR, &shadow_of, "URL",
         "run as a standby of the primary at URL: follow its state, take over on the first request"},
        {"source-workers", LS_ARG_STR, &workers, "auto|N",
         "read the sources in N worker processes (auto: one per CPU), sized per source by cost"},
        {"tokenizer", LS_ARG_PATH, &tokenizer, "FILE", "BPE-encode documents with this tokenizer.json (the run's)"},
    };
    int rc =
        ls_args("loader serve", "Runs the source loaders and the data constructor; trainers fetch batches over ZeroMQ.",
                spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    /* before binding */
    if ((port_file && ls_out_path_check("port-file", port_file)) || (journal && ls_out_path_check("journal", journal)))
        return ls_cli_fail();
    char *wend = NULL;
    long nw = workers && strcmp(workers, "auto") ? strtol(workers, &wend, 10) : 0;
    if (wend && (wend == workers || *wend || nw < 1 || nw > 4096))
        return ls_usage_err("loader serve", "--source-workers must be auto or a count in [1, 4096], got '%s'", workers);
    ls_loader_hub_opts ho = {NULL, 0, (int)nw, ls_cli_self(), 0, 0};
    ls_topology topo;
    if (topology && ls_topology_parse(topology, &topo) != LS_OK) return ls_usage_err("loader serve", "%s", ls_errmsg());
    ls_loader_mix mix;
    if ((rc = ls_loader_mix_load(mix_path, &mix)) != LS_OK) return ls_cli_fail_rc(rc);
    char *state = NULL;
    size_t state_len = 0;
    if (resume && (rc = ls_file_read(resume, &state, &state_len)) != LS_OK) {
        ls_loader_mix_free(&mix);
        return ls_cli_fail_rc(rc);
    }
    ls_bpe *bpe = NULL;
    ls_loader_serve_opts o = {
        prefetch, history, 1, journal, topology ? &topo : NULL, shadow_of, 0, workers ? &ho : NULL, NULL, resume};
    ls_loader_server *srv = NULL;
    /* start-up: the tokenizer, the sources and the --resume state are read, the port is bound */
    rc = tokenizer ? ls_bpe_load(tokenizer, &bpe) : LS_OK;
    o.tokenizer = bpe;
    if (rc == LS_OK) rc = ls_loader_server_open(&srv, &mix, ranks, bind, port, &o, (const uint8_t *)state, state_len);
    free(state);
    int code = rc != LS_OK ? ls_cli_fail_rc(rc) : 0;
    if (rc == LS_OK && port_file) rc = ls_port_file_write(port_file, ls_loader_server_port(srv));
    if (rc == LS_OK) {
        char host[256];
        ls_url_host(bind, host, sizeof host); /* ::1 -> [::1] */
        printf("llmsys loader: serving %d ranks on tcp://%s:%d (%d sources, %d tokens per rank per step)", ranks, host,
               ls_loader_server_port(srv), mix.n_sources, mix.tokens_per_rank);
        if (workers) printf("; source workers on tcp://%s:%d", host, ls_loader_server_worker_port(srv));
        printf("\n");
        fflush(stdout);
        g_serving = srv;
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        rc = ls_loader_server_run(srv);
        g_serving = NULL;
    }
    ls_loader_server_close(srv);
    ls_bpe_free(bpe);
    ls_loader_mix_free(&mix);
    if (code || rc != LS_OK) return code ? code : ls_cli_fail(); /* serving: what a client sends is never 2 */
    printf("llmsys loader: stopped\n");
    return 0;
}

static int loader_worker(int argc, char **argv) {
    const char *role = NULL, *source = NULL, *constructor = NULL;
    ls_arg spec[] = {
        {"role", LS_ARG_STR, &role, "source", "the role to run (source: one source loader)", 1, LS_CHOICES("source")},
        {"source", LS_ARG_STR, &source, "NAME", "the mix's source to read and preprocess", 1},
        {"constructor", LS_ARG_STR, &constructor, "URL", "the constructor's worker link, tcp://host:port", 1},
    };
    int rc = ls_args("loader worker", "Runs a source loader for a constructor (loader serve --source-workers).", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if ((rc = ls_zsec_check(constructor, 0, "loader source worker"))) return ls_cli_fail_rc(rc);
    /* its source and what to read come from the constructor: the run's */
    return ls_loader_worker_run(constructor, source) < 0 ? ls_cli_fail() : 0;
}

/* ---------------------------------------------------------------- fetch / control */

static int loader_fetch(int argc, char **argv) {
    const char *addr = NULL, *state_out = NULL;
    int rank = 0, count = 1, timeout = 10000;
    int64_t step = 0;
    ls_arg spec[] = {
        opt_addr(&addr),
        {"rank", LS_ARG_INT, &rank, "R", "rank to fetch for (default 0)", 0, LS_MIN(0)},
        {"step", LS_ARG_I64, &step, "S", "first step (default 0)", 0, LS_MIN(0)},
        {"count", LS_ARG_INT, &count, "N", "steps to fetch (default 1)", 0, LS_MIN(1)},
        {"timeout-ms", LS_ARG_INT, &timeout, "MS", "per-attempt timeout (default 10000)", 0, LS_MIN(1)},
        {"state-out", LS_ARG_PATH, &state_out, "FILE", "save the resume state after the last step fetched"},
    };
    int rc = ls_args("loader fetch",
                     "Fetches batches from a loader service and prints one line per step (debugging, tests).", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if ((rc = ls_zsec_check(addr, 0, "loader client"))) return ls_cli_fail_rc(rc); /* --addr, before the work */
    return ls_loader_fetch_print(stdout, addr, rank, step, count, timeout, state_out) < 0 ? ls_cli_fail() : 0;
}

static int loader_control(int argc, char **argv) {
    const char *addr = NULL, *weights = NULL;
    int info = 0, shutdown = 0, reset = 0;
    int64_t step = LS_ARG_UNSET64; /* -1: the next step built (a given step is >= 0) */
    ls_arg spec[] = {
        opt_addr(&addr),
        {"weights", LS_ARG_STR, &weights, "JSON",
         "new weights, e.g. '{\"prose\":0.5,\"math\":0.5}' (unnamed sources get 0)"},
        {"step", LS_ARG_I64, &step, "S", "first step the weights apply to (default: the next step built)"},
        {"schedule", LS_ARG_FLAG, &reset, NULL, "return to the mix config's schedule"},
        {"info", LS_ARG_FLAG, &info, NULL, "print the service's window and sources"},
        {"shutdown", LS_ARG_FLAG, &shutdown, NULL, "stop the service"},
    };
    int rc = ls_args("loader control", "Changes mixing weights of a running service, or queries / stops it.", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (!!weights + info + shutdown + reset != 1)
        return ls_usage_err("loader control", "give exactly one of --weights, --schedule, --info, --shutdown");
    if (ls_args_given64("loader control", "step", &step, 0, -1)) return 2;
    if ((rc = ls_zsec_check(addr, 0, "loader client"))) return ls_cli_fail_rc(rc); /* --addr, before the work */
    ls_loader_client *c; /* what the service answers (an unknown source included) is the run's: 1 */
    if (ls_loader_client_open(&c, addr, 0, 10000, 1) != LS_OK) return ls_cli_fail();
    char *reply = NULL;
    if (shutdown)
        rc = ls_loader_client_shutdown(c);
    else if (info)
        rc = ls_loader_client_control(c, NULL, &reply);
    else
        rc = ls_loader_client_set_weights(c, reset ? NULL : weights, step, &reply);
    ls_loader_client_close(c);
    if (rc != LS_OK) return ls_cli_fail();
    printf("%s\n", reply ? reply : "{\"ok\":true}");
    free(reply);
    return 0;
}

/* ---------------------------------------------------------------- tokenize */

static int loader_tokenize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = "text", *field = "text", *split = "file";
    int strict = 0;
    ls_arg spec[] = {
        {"in", LS_ARG_PATH, &in, "PATH", "text file/directory or JSON Lines file", 1},
        {"out", LS_ARG_PATH, &out, "FILE", "the .lstok file to write", 1},
        {"type", LS_ARG_STR, &type, "T", "text (default) or jsonl", 0, LS_CHOICES("text|jsonl")},
        {"field", LS_ARG_STR, &field, "NAME", "JSONL text field (default text)"},
        {"split", LS_ARG_STR, &split, "S", "text: file (default) or blank (blank-line blocks)", 0,
         LS_CHOICES("file|blank")},
        {"strict", LS_ARG_FLAG, &strict, NULL, "malformed JSON lines are an error, not skipped"},
    };
    int rc = ls_args("loader tokenize", "Writes a pre-tokenized .lstok file (tokens + document index, checksummed).",
                     spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (!*field) return ls_usage_err("loader tokenize", "--field must name a JSON field, got ''");
    if (ls_out_path_check("out", out)) return ls_cli_fail(); /* before the work */
    ls_loader_mix mix;
    if ((rc = ls_loader_mix_single(type, in, field, split, &mix)) != LS_OK) return ls_cli_fail_rc(rc);
    int64_t nd, nt;
    double t0 = ls_now();
    rc = ls_loader_tokenize(&mix.src[0], strict, out, &nd, &nt); /* reads --in, writes --out (LS_EIO) */
    ls_loader_mix_free(&mix);
    if (rc != LS_OK) return ls_cli_fail_rc(rc);
    printf("llmsys loader: wrote %s: %lld documents, %lld tokens (%.2f s)\n", out, (long long)nd, (long long)nt,
           ls_now() - t0);
    return 0;
}

/* ---------------------------------------------------------------- stats */

static int loader_stats(int argc, char **argv) {
    const char *mix_path = NULL, *svg = NULL, *report = NULL;
    int ranks = 0, steps = 100;
    ls_arg spec[] = {
        opt_mix(&mix_path),
        {"ranks", LS_ARG_INT, &ranks, "R", "data-parallel ranks", 1, LS_RANGE(1, LS_LOADER_MAX_RANKS)},
        {"steps", LS_ARG_INT, &steps, "N", "steps to simulate (default 100)", 0, LS_MIN(1)},
        {"svg", LS_ARG_PATH, &svg, "FILE", "write a chart of per-rank cost per step, naive vs balanced"},
        {"report", LS_ARG_PATH, &report, "FILE", "write a JSON summary"},
    };
    int rc = ls_args("loader stats",
                     "Builds N steps in-process: token shares vs targets, per-rank cost imbalance per algorithm.", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    /* before the work (was: the --svg written, then --report failed) */
    if ((svg && ls_out_path_check("svg", svg)) || (report && ls_out_path_check("report", report))) return ls_cli_fail();
    ls_loader_mix mix;
    if ((rc = ls_loader_mix_load(mix_path, &mix)) != LS_OK) return ls_cli_fail_rc(rc);
    ls_loader_stats s;
    rc = ls_loader_stats_run(&mix, ranks, steps, &s); /* reads the mix's sources, in-process */
    int code = rc != LS_OK ? ls_cli_fail_rc(rc) : 0;
    if (rc == LS_OK) {
        ls_loader_stats_print(stdout, &mix, &s);
        const char *bn = mix.balance == LS_BALANCE_LPT ? "lpt" : "kk";
        if (svg && (rc = ls_loader_stats_svg(svg, &s, bn)) == LS_OK) printf("wrote %s\n", svg);
        if (rc == LS_OK && report && (rc = ls_loader_stats_report(report, &mix, &s)) == LS_OK)
            printf("wrote %s\n", report);
        if (rc != LS_OK) code = ls_cli_fail();
    }
    ls_loader_stats_free(&s);
    ls_loader_mix_free(&mix);
    return code;
}

/* ---------------------------------------------------------------- dispatch */

static const char loader_usage[] = "usage: llmsys loader <command> [options]\n\n"
                                   "Multi-source data loading with mixing and cost balancing (OVERLORD).\n\ncommands:\n"
                                   "  serve      run the loader service (source loaders + data constructor)\n"
                                   "  worker     run one source loader for a constructor (any host)\n"
                                   "  fetch      fetch batches from a service (debugging, tests)\n"
                                   "  control    change a running service's weights; query or stop it\n"
                                   "  stats      token shares and per-rank cost balance of a mix, with an SVG chart\n"
                                   "  tokenize   write a pre-tokenized .lstok file\n";

int cmd_loader(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"serve", loader_serve}, {"worker", loader_worker},
                                     {"fetch", loader_fetch}, {"control", loader_control},
                                     {"stats", loader_stats}, {"tokenize", loader_tokenize}};
    return ls_args_subcommand("loader", subs, LS_NARGS(subs), argc, argv, loader_usage);
}

/* ---------------------------------------------------------------- demo */

int demo_loader(const ls_demo_ctx *ctx) {
    return ls_loader_demo(stdout, ctx->workdir, ctx->quick) < 0 ? ls_cli_fail() : 0;
}
