/* cmd_keys.c - `llmsys keys gen` (CURVE key pairs) and the global --keys/--curve options. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/zsec.h"

static int keys_gen(int argc, char **argv) {
    const char *out = NULL;
    int force = 0;
    ls_arg spec[] = {
        {"out", LS_ARG_PATH, &out, "DIR", "directory for server.key and client.key (mode 0600)", 1},
        {"force", LS_ARG_FLAG, &force, NULL, "replace existing key files", 0},
    };
    int rc = ls_args("keys gen", "Generate ZeroMQ CURVE keys for the loader service and pipeline stages.", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if ((rc = ls_zsec_keygen(out, force))) return ls_cli_fail_rc(rc); /* existing keys: 2; a write: LS_EIO */
    printf("wrote %s/server.key and %s/client.key (use: llmsys --keys %s COMMAND ...)\n", out, out, out);
    return 0;
}

int cmd_keys(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"gen", keys_gen}};
    return ls_args_subcommand("keys", subs, LS_NARGS(subs), argc, argv,
                              "usage: llmsys keys gen --out DIR [--force]\n"
                              "  writes a CURVE server and client key pair: DIR/server.key, DIR/client.key\n");
}

int cli_security_options(int argc, char **argv) {
    const char *keys = NULL;
    int force = 0, i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--curve"))
            force = 1;
        else if (!strncmp(argv[i], "--keys=", 7))
            keys = argv[i] + 7;
        else if (!strcmp(argv[i], "--keys") && i + 1 < argc)
            keys = argv[++i];
        else if (!strcmp(argv[i], "--keys"))
            return fprintf(stderr, "llmsys: --keys needs a PATH\n"), -2;
        else
            break;
    }
    if (keys && !*keys) return fprintf(stderr, "llmsys: --keys needs a path, got ''\n"), -2; /* as the parser says */
    /* reads --keys: a missing or malformed key file is a usage error */
    int rc = keys || force ? ls_zsec_configure(keys, force ? 1 : -1) : LS_OK;
    if (rc) return -ls_cli_fail_rc(rc);
    return i - 1;
}
