/* What an operator gives a developer-owned sandbox beyond its manifest,
 * kept in its record: a name, labels, a time to live and an idle timeout;
 * and what `sbx sandbox ls` and prune select by (--filter) and show
 * (status, time left).
 *
 * Names follow docker's rule, [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most
 * META_NAME_MAX bytes, and do not look like an id (12 hex digits). Label
 * keys are [A-Za-z0-9][A-Za-z0-9._/-]* of at most META_LABEL_KEY_MAX
 * bytes, not "sbx" nor "sbx.*" (sbx's own); values are printable UTF-8 of
 * at most META_LABEL_VALUE_MAX bytes; at most META_LABELS_MAX labels.
 *
 * Durations are Go's and docker's ("90s", "5m", "1h30m", "2d") or bare
 * seconds, from 1 s to META_DURATION_MAX.
 *
 * Record keys (absent when not given): "name", "labels" (an object),
 * "ttl_seconds", "expires_at" (RFC 3339), "expires_at_unix",
 * "idle_timeout_seconds". All functions are pure but for the clock. */
#ifndef SBX_META_H
#define SBX_META_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "shared/errors.h"

#define META_NAME_MAX 64
#define META_LABELS_MAX 64
#define META_LABEL_KEY_MAX 128
#define META_LABEL_VALUE_MAX 1024
#define META_DURATION_MAX (366u * 86400u)
#define META_FILTERS_MAX 32

/* The record keys lifecycle_resave carries over, NULL-terminated. */
extern const char *const meta_record_keys[];

int meta_check_name(const char *name, struct sbx_error *e);
/* Adds "KEY=VALUE" (or "KEY": an empty value) to LABELS (an object);
 * refuses a bad, reserved or repeated key. */
int meta_add_label(json_t *labels, const char *kv, struct sbx_error *e);
/* A duration into *SECS. */
int meta_parse_duration(const char *s, unsigned *secs, struct sbx_error *e);
/* SECS as "1h2m3s" ("0s" for 0). */
void meta_format_duration(uint64_t secs, char *out, size_t n);

/* The record keys for NAME (may be NULL), LABELS (borrowed, may be NULL),
 * TTL_S and IDLE_S (0: none) at Unix time NOW: a new object, or NULL when
 * out of memory. */
json_t *meta_record(const char *name, json_t *labels, unsigned ttl_s,
                    unsigned idle_s, int64_t now);
/* The Unix time REC's sandbox expires at; 0: never. */
int64_t meta_expires_at(json_t *rec);

/* Its status as shown: "running", "stopped", or "expired" (stopped, its
 * time to live over). */
const char *meta_status(json_t *rec, bool running, int64_t now);
/* Adds "status" and, with a time to live, "expires_in_seconds" (0 once
 * over) to SHOWN. 0 or -ENOMEM. */
int meta_show(json_t *shown, bool running, int64_t now);

/* --filter: docker's spelling. Different keys must all match; values of
 * one key (name, status, id) are alternatives; every label must match. */
enum meta_filter_key {
  META_FILTER_NAME,   /* name=TEXT: the name contains TEXT */
  META_FILTER_STATUS, /* status=running|stopped|expired */
  META_FILTER_LABEL,  /* label=KEY or label=KEY=VALUE */
  META_FILTER_ID,     /* id=PREFIX */
};
struct meta_filters {
  struct {
    enum meta_filter_key key;
    const char *value; /* borrowed from the command line */
    size_t keylen;     /* label: KEY's length in value (no '=': all) */
  } f[META_FILTERS_MAX];
  size_t n;
};
/* Adds "KEY=VALUE" (borrowed); refuses an unknown key or status. */
int meta_filter_add(struct meta_filters *fs, const char *spec,
                    struct sbx_error *e);
/* Whether SHOWN (a record with its status) passes FS. */
bool meta_filter_match(const struct meta_filters *fs, json_t *shown);

#endif
