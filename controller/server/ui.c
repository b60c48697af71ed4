/* The web page: GET / and its script and style, controller/server/ui/
 * built into the program (embed.cmake), so that nothing is read from
 * disk or loaded from elsewhere. The page talks to the API with its
 * session cookie (session.c). Its Content-Security-Policy allows this
 * origin only: no inline script or style, no frames around it. */
#include <stddef.h>

#include "controller/server/server_internal.h"

extern const char sbx_ui_index_html[], sbx_ui_app_js[], sbx_ui_app_css[];
extern const size_t sbx_ui_index_html_len, sbx_ui_app_js_len,
    sbx_ui_app_css_len;

static void asset(struct api *a, const char *ctype, const char *body,
                  size_t len) {
  (void)http_add_header(a->r, "Content-Security-Policy",
                        "default-src 'none'; script-src 'self'; "
                        "style-src 'self'; connect-src 'self'; "
                        "img-src 'self'; form-action 'self'; "
                        "base-uri 'none'; frame-ancestors 'none'");
  (void)http_add_header(a->r, "X-Frame-Options", "DENY");
  (void)http_add_header(a->r, "Referrer-Policy", "no-referrer");
  (void)http_reply(a->r, 200, ctype, body, len);
}

void api_ui_page(struct api *a) {
  asset(a, "text/html; charset=utf-8", sbx_ui_index_html,
        sbx_ui_index_html_len);
}

void api_ui_script(struct api *a) {
  asset(a, "text/javascript; charset=utf-8", sbx_ui_app_js, sbx_ui_app_js_len);
}

void api_ui_style(struct api *a) {
  asset(a, "text/css; charset=utf-8", sbx_ui_app_css, sbx_ui_app_css_len);
}
