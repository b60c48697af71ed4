/* GET /v1/openapi.json: docs/openapi.json, built into the program
 * (embed.cmake), so the document served is the one in the repository and
 * a test can hold it to the route table. */
#include "controller/server/server_internal.h"

extern const char sbx_openapi_json[];
extern const size_t sbx_openapi_json_len;

const char *server_openapi_text(void) {
  return sbx_openapi_json;
}

void api_openapi(struct api *a) {
  (void)http_reply(a->r, 200, "application/json", sbx_openapi_json,
                   sbx_openapi_json_len);
}
