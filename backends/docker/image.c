/* The image of a docker sandbox (inspected, pulled when missing) and the
 * static sandboxd injected into images without one. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/docker/docker_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* True when the ELF file at PATH asks for no program interpreter, i.e. is
 * statically linked. *ERR gets the reason when it cannot tell. */
static bool is_static_elf(const char *path, int *err) {
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  Elf64_Ehdr eh;
  *err = 0;
  if (fd < 0 || pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh)) {
    *err = fd < 0 ? errno : ENOEXEC;
    return false;
  }
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256) {
    *err = ENOEXEC;
    return false;
  }
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) !=
        (ssize_t)sizeof(ph)) {
      *err = ENOEXEC;
      return false;
    }
    if (ph.p_type == PT_INTERP)
      return false;
  }
  return true;
}

/* The static sandboxd to inject: O's, $SBX_SANDBOXD_STATIC, sandboxd-static
 * next to sbx, then the build tree's ../build-static/sandboxd. */
int find_static_sandboxd(const struct docker_options *o, char **out,
                         struct sbx_error *e) {
  const char *p = o->sandboxd_static;
  if (!p || !*p)
    p = getenv("SBX_SANDBOXD_STATIC");
  char cand[PATH_MAX];
  if (!p || !*p) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash = n > 0 ? (self[n] = '\0', strrchr(self, '/')) : NULL;
    if (slash) {
      *slash = '\0';
      static const char *const rel[] = {"/sandboxd-static",
                                        "/../build-static/sandboxd"};
      for (size_t i = 0; i < SBX_ARRAY_SIZE(rel) && !p; i++) {
        int k = snprintf(cand, sizeof(cand), "%s%s", self, rel[i]);
        if (k > 0 && (size_t)k < sizeof(cand) && access(cand, X_OK) == 0)
          p = cand;
      }
    }
  }
  if (!p)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "the image has no sandboxd (no %s label) and no "
                         "static sandboxd was found to inject: build one with "
                         "`make static` and set SBX_SANDBOXD_STATIC to "
                         "build-static/sandboxd",
                         DOCKER_IMAGE_LABEL);
  int err;
  if (!is_static_elf(p, &err))
    return err ? sbx_error_set(e, SBX_NOT_FOUND, err,
                               "cannot use \"%s\" as the static sandboxd: %s",
                               p, strerror(err))
               : sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                               "sandboxd \"%s\" is dynamically linked; a "
                               "container needs the static build (`make "
                               "static` makes build-static/sandboxd)",
                               p);
  *out = realpath(p, NULL);
  if (!*out)
    return sbx_error_set(e, SBX_OK, errno, "cannot resolve \"%s\": %m", p);
  return 0;
}

/* Pulls IMAGE; the engine reports failures inside the progress stream. */
static int pull_image(struct docker_engine *en, const char *image,
                      struct sbx_error *e) {
  _cleanup_free_ char *esc = docker_engine_escape(image, false);
  if (!esc)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  char path[1024];
  int n = snprintf(path, sizeof(path), "/images/create?fromImage=%s", esc);
  if (n < 0 || (size_t)n >= sizeof(path))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "image name is too long");
  _cleanup_buf_ struct sbx_buf body = {0};
  sbx_buf_init(&body, 16 * 1024);
  struct docker_request req = {.method = "POST",
                               .path = path,
                               .timeout_ms = PULL_TIMEOUT_MS,
                               .max_bytes = 16 * 1024,
                               .keep_tail = true};
  log_info("pulling image \"%s\"", image);
  int r = docker_engine_raw(en, &req, &body, e);
  if (r < 0)
    return r;
  /* The last JSON line says how it ended. */
  while (body.len &&
         (body.data[body.len - 1] == '\n' || body.data[body.len - 1] == '\r'))
    body.data[--body.len] = '\0';
  const char *last = strrchr(body.data, '\n');
  last = last ? last + 1 : body.data;
  json_error_t je;
  _cleanup_json_ json_t *j = json_loads(last, 0, &je);
  const char *err = json_string_value(json_object_get(j, "error"));
  if (err)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "cannot pull image \"%s\": %.300s", image, err);
  return 0;
}

/* Inspects IMAGE, pulling it first when missing (unless O says never), and
 * tells where its baked sandboxd is (*BAKED new, NULL when none). */
int prepare_image(struct docker_engine *en, const char *image,
                  const struct docker_options *o, char **baked,
                  struct sbx_error *e) {
  *baked = NULL;
  _cleanup_free_ char *esc = docker_engine_escape(image, true);
  if (!esc)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  char path[1024];
  int n = snprintf(path, sizeof(path), "/images/%s/json", esc);
  if (n < 0 || (size_t)n >= sizeof(path))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "image name is too long");
  struct docker_request req = {.method = "GET", .path = path};
  _cleanup_json_ json_t *j = NULL;
  int r = docker_engine_json(en, &req, &j, e);
  if (r == -ENOENT) {
    if (o->never_pull)
      return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                           "image \"%s\" is not in the container engine and "
                           "pulling is off",
                           image);
    sbx_error_clear(e);
    r = pull_image(en, image, e);
    if (r < 0)
      return r;
    r = docker_engine_json(en, &req, &j, e);
  }
  if (r < 0)
    return r;
  const char *label = json_string_value(
      json_object_get(json_object_get(json_object_get(j, "Config"), "Labels"),
                      DOCKER_IMAGE_LABEL));
  if (label && label[0] == '/' && strlen(label) < 1024) {
    *baked = strdup(label);
    if (!*baked)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  return 0;
}
