/* The table of model APIs: each enum model_api value's operations
 * (responses.c, chat.c), as sandboxd's dispatch.c is the table of RPCs.
 * The client (model.c) and replay (replay.c) find an API here. */
#include <string.h>

#include "controller/model/model_internal.h"
#include "shared/cleanup.h"

static const struct model_api_ops *const apis[] = {
    [MODEL_API_RESPONSES] = &model_responses_api,
    [MODEL_API_CHAT] = &model_chat_api,
};

/* API's operations, or NULL for an unknown API. */
const struct model_api_ops *model_api_ops(enum model_api api) {
  if ((unsigned)api >= SBX_ARRAY_SIZE(apis))
    return NULL;
  return apis[api];
}

/* The API named NAME in recordings, or NULL. */
const struct model_api_ops *model_api_named(const char *name) {
  for (size_t i = 0; name && i < SBX_ARRAY_SIZE(apis); i++)
    if (apis[i] && strcmp(apis[i]->name, name) == 0)
      return apis[i];
  return NULL;
}

/* What callers may ask of API (model.h), or NULL for an unknown API. */
const struct model_api_features *model_api_features(enum model_api api) {
  const struct model_api_ops *ops = model_api_ops(api);
  return ops ? &ops->features : NULL;
}
