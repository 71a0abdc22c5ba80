/* openai.c - chat prompt template and OpenAI response shapes for the serving front
 * (server.c owns the requests; this file only turns JSON into prompt text and back). */
#include "serve/openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *b;
    size_t n, cap;
} sbuf;

static int sb_add(sbuf *s, const char *t) {
    size_t k = strlen(t);
    if (s->n + k + 1 > s->cap) {
        size_t nc = (s->n + k + 1) * 2;
        char *nb = realloc(s->b, nc);
        if (!nb) return -1;
        s->b = nb, s->cap = nc;
    }
    memcpy(s->b + s->n, t, k + 1);
    s->n += k;
    return 0;
}

/* Role of a message as its line label; NULL for roles a byte-level model has no use for. */
static const char *role_label(const char *role) {
    if (!strcmp(role, "system") || !strcmp(role, "developer")) return "System";
    if (!strcmp(role, "user")) return "User";
    if (!strcmp(role, "assistant")) return "Assistant";
    return NULL;
}

char *ls_oai_chat_prompt(const cJSON *messages, char *err, size_t en) {
    err[0] = '\0';
    if (!messages) {
        snprintf(err, en, "\"messages\" is required: an array of {\"role\", \"content\"} objects");
        return NULL;
    }
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0) {
        snprintf(err, en, "\"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
        return NULL;
    }
    sbuf s = {0};
    int i = 0, bad = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const char *label = cJSON_IsString(role) ? role_label(role->valuestring) : NULL;
        if (!cJSON_IsObject(m)) {
            snprintf(err, en, "messages[%d] must be an object with \"role\" and \"content\"", i);
            bad = 1;
        } else if (!cJSON_IsString(role)) {
            snprintf(err, en, "messages[%d].role is required: \"system\", \"user\" or \"assistant\"", i);
            bad = 1;
        } else if (!label) {
            snprintf(err, en, "messages[%d].role '%.40s' is not supported (use system, developer, user or assistant)",
                     i, role->valuestring);
            bad = 1;
        }
        bad = bad || sb_add(&s, label) || sb_add(&s, ": ");
        if (!bad && cJSON_IsString(content)) {
            bad = sb_add(&s, content->valuestring);
        } else if (!bad && cJSON_IsArray(content)) {
            int k = 0;
            const cJSON *part;
            cJSON_ArrayForEach(part, content) {
                const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx)) {
                    snprintf(
                        err, en,
                        "messages[%d].content[%d]: only {\"type\": \"text\", \"text\": string} parts are supported", i,
                        k);
                    bad = 1;
                    break;
                }
                if (sb_add(&s, tx->valuestring)) bad = 1;
                k++;
            }
        } else if (!bad) {
            snprintf(err, en, "messages[%d].content must be a string (or an array of text parts)", i);
            bad = 1;
        }
        bad = bad || sb_add(&s, "\n");
        if (bad) break;
        i++;
    }
    if (!bad && sb_add(&s, "Assistant:")) bad = 1;
    if (bad) {
        if (!err[0]) snprintf(err, en, "out of memory");
        free(s.b);
        return NULL;
    }
    return s.b;
}

const char *ls_oai_model_stem(const char *path, char *buf, size_t n) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!*base) base = path;
    snprintf(buf, n, "%s", base);
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf) *dot = '\0';
    return buf;
}

cJSON *ls_oai_model(const char *name, long created) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "owned_by", "llmsys");
    return o;
}

cJSON *ls_oai_models(const char *name, long created) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(j, "data");
    cJSON_AddItemToArray(d, ls_oai_model(name, created));
    return j;
}

cJSON *ls_oai_envelope(int chat, int stream, const char *id, long created, const char *model) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "object",
                            !chat    ? "text_completion"
                            : stream ? "chat.completion.chunk"
                                     : "chat.completion");
    cJSON_AddNumberToObject(j, "created", (double)created);
    cJSON_AddStringToObject(j, "model", model);
    return j;
}

cJSON *ls_oai_choice(int chat, int stream, int first, const char *text, const int *tokens, int n, const char *finish) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (!chat) {
        cJSON_AddStringToObject(c, "text", text);
    } else {
        cJSON *m = cJSON_AddObjectToObject(c, stream ? "delta" : "message");
        if (!stream || first) cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text);
    }
    if (chat) cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToObject(c, "tokens", cJSON_CreateIntArray(tokens, n));
    return c;
}
