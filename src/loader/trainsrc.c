/* trainsrc.c - a training batch source (train.h) fed by the loader service: each step,
 * each rank fetches its own cost-balanced batch over ZeroMQ. */
#include <stdlib.h>
#include <string.h>

#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "llmsys/train.h"
#include "loader/loader_internal.h"

typedef struct {
    ls_loader_client *c;
    int rank;
    uint8_t *state; /* resume state after the last step fetched */
    size_t state_len;
    int64_t state_step;
} svc_src;

/* Rows [row0, row0 + rows) of the trainer's batch are this rank's rows; the loader's rows
 * (n_ctx <= T tokens each) go first, the rest is padding (target -1). A target crosses
 * neither a segment boundary nor the end of a row, so each packed document is trained on
 * its own next tokens only. */
static int svc_fill(ls_batch_source *s, int64_t step, int row0, int rows, int T, int *tokens, int *targets) {
    (void)row0;
    svc_src *x = s->ctx;
    ls_loader_batch b;
    LS_TRY(ls_loader_client_batch(x->c, step, &b));
    int rc = LS_OK;
    if (b.n_ctx > T)
        rc = ls_err(LS_EINVAL,
                    "the loader's rows hold %d tokens but the trainer's sequences only %d: set --seq %d or the mix's "
                    "n_ctx <= %d",
                    b.n_ctx, T, b.n_ctx, T);
    else if (b.n_rows > rows)
        rc = ls_err(LS_EINVAL,
                    "step %lld: the loader packed rank %d's share into %d rows but the trainer holds %d per rank: "
                    "raise --batch or lower the mix's tokens_per_rank",
                    (long long)step, x->rank, b.n_rows, rows);
    if (rc == LS_OK) {
        for (int i = 0; i < rows * T; i++) tokens[i] = LS_TOK_PAD, targets[i] = -1;
        for (int r = 0; r < b.n_rows; r++) {
            const int32_t *bt = b.tokens + (size_t)r * b.n_ctx, *bd = b.doc_ids + (size_t)r * b.n_ctx;
            int *tt = tokens + (size_t)r * T, *tg = targets + (size_t)r * T;
            for (int t = 0; t < b.n_ctx; t++) {
                tt[t] = bt[t];
                tg[t] = (bd[t] >= 0 && t + 1 < b.n_ctx && bd[t + 1] == bd[t]) ? bt[t + 1] : -1;
            }
        }
        uint8_t *st = malloc(b.state_len);
        if (!st)
            rc = ls_err(LS_ENOMEM, "out of memory");
        else {
            memcpy(st, b.state, b.state_len);
            free(x->state);
            x->state = st;
            x->state_len = b.state_len;
            x->state_step = step + 1;
        }
    }
    ls_loader_batch_free(&b);
    return rc;
}

static void svc_destroy(ls_batch_source *s) {
    svc_src *x = s->ctx;
    if (x) {
        ls_loader_client_close(x->c);
        free(x->state);
        free(x);
    }
    s->ctx = NULL; /* ls_batch_source_free frees s itself */
}

int ls_loader_batch_source(struct ls_batch_source **out, const char *endpoint, int rank, int n_ranks,
                           const ls_bpe *tokenizer, int timeout_ms) {
    *out = NULL;
    ls_batch_source *s = calloc(1, sizeof *s);
    svc_src *x = calloc(1, sizeof *x);
    if (!s || !x) {
        free(s);
        free(x);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    int rc = ls_loader_client_open(&x->c, endpoint, rank, timeout_ms, 2);
    /* A run with other rank counts than the service would stall its window: refuse early. */
    char *info = NULL;
    if (rc == LS_OK) rc = ls_loader_client_control(x->c, NULL, &info);
    if (rc == LS_OK) {
        const char *p = strstr(info, "\"ranks\":");
        int served = p ? atoi(p + 8) : -1;
        if (served != n_ranks)
            rc = ls_err(LS_EINVAL,
                        "the loader service at %s serves %d ranks but this run has %d: start it with --ranks %d",
                        endpoint, served, n_ranks, n_ranks);
        /* the service's tokens must be the model's: the same tokenizer, or bytes on both sides */
        char want[24];
        snprintf(want, sizeof want, "%016llx",
                 tokenizer ? (unsigned long long)ls_loader_tokenizer_print(tokenizer) : 0ull);
        const char *t = strstr(info, "\"tokenizer\":\"");
        int bytes = !t || !strncmp(t + 13, "bytes\"", 6), same = tokenizer ? t && !strncmp(t + 13, want, 16) : bytes;
        if (rc == LS_OK && !same && tokenizer)
            rc = ls_err(LS_EINVAL,
                        "the loader service at %s tokenizes %s but this run's model uses a BPE tokenizer: "
                        "start the service with --tokenizer (the run's tokenizer.json)",
                        endpoint, bytes ? "into bytes" : "with another tokenizer");
        else if (rc == LS_OK && !same)
            rc = ls_err(LS_EINVAL,
                        "the loader service at %s tokenizes with a BPE tokenizer but this run's model uses "
                        "byte tokens: give train the service's --tokenizer, or start the service without one",
                        endpoint);
    }
    free(info);
    if (rc < 0) {
        ls_loader_client_close(x->c);
        free(s);
        free(x);
        return rc;
    }
    x->rank = rank;
    x->state_step = -1;
    s->name = "loader";
    s->exact = 1; /* replayable: a service restarted from the saved state serves the same batches */
    s->fill = svc_fill;
    s->destroy = svc_destroy;
    s->ctx = x;
    *out = s;
    return LS_OK;
}

int ls_loader_batch_source_save_state(struct ls_batch_source *s, const char *path, int64_t *step) {
    svc_src *x = s->ctx;
    if (!x || !x->state) return ls_err(LS_ESTATE, "no batch fetched from the loader yet: nothing to save");
    if (step) *step = x->state_step;
    return ls_file_write_atomic(path, x->state, x->state_len);
}
