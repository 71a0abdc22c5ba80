/* openai.h - the OpenAI-compatible shapes the serving front speaks besides /v1/completions:
 * the chat prompt template for byte-level models, /v1/models and chat (chunk) bodies. */
#ifndef LLMSYS_SERVE_OPENAI_H
#define LLMSYS_SERVE_OPENAI_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Renders a chat "messages" array as the plain prompt text (docs/serve.md, "Chat template"):
 * one "System: ", "User: " or "Assistant: " line per message, then "Assistant:". Content is a
 * string or an array of {"type":"text","text":...} parts. Returns a malloc'd string, or NULL
 * with a one-line reason in err (missing or empty array, unknown role, non-text content). */
char *ls_oai_chat_prompt(const cJSON *messages, char *err, size_t en);

/* The served name of a checkpoint: its file name without directories and extension
 * ("runs/core/model.safetensors" -> "model"), written into buf (n bytes). */
const char *ls_oai_model_stem(const char *path, char *buf, size_t n);

/* GET /v1/models body: {"object":"list","data":[{"id":name,"object":"model",...}]}. */
cJSON *ls_oai_models(const char *name, long created);
/* GET /v1/models/{name} body: one model object. */
cJSON *ls_oai_model(const char *name, long created);

/* Response envelope {id, object, created, model}: object is "text_completion",
 * "chat.completion" or "chat.completion.chunk" by chat and stream. */
cJSON *ls_oai_envelope(int chat, int stream, const char *id, long created, const char *model);
/* One choice: completions carry "text"; chat carries "message" {role, content} or, streamed,
 * "delta" {content} (with role on the first chunk). finish NULL gives "finish_reason": null.
 * tokens (the generated ids) are an llmsys extension every choice carries. */
cJSON *ls_oai_choice(int chat, int stream, int first, const char *text, const int *tokens, int n, const char *finish);

#endif
