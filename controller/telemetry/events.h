/* The --stream event stream: one JSON object per line, versioned, as
 * docs/events.md documents it (tests/fixtures/events.schema.json is the
 * machine-readable copy the tests hold the code to).
 *
 * Every event carries the common fields version (EVENTS_VERSION), type,
 * run_id, seq (1, 2, ... in the order the lines are written) and timestamp
 * (RFC 3339 UTC with milliseconds). The typed functions below add the
 * fields of one event type each; events_emit is the general form.
 *
 * Thread-safety: an emitter may be used from any number of threads. Each
 * event is written with one fwrite under the emitter's lock and flushed, so
 * lines never interleave and seq follows the line order.
 *
 * Errors: emitting never fails the caller. An event that cannot be built
 * (out of memory) is left out; a write error is logged once at warn.
 * Every function accepts a NULL emitter and then does nothing (no
 * --stream). Strings that are not valid UTF-8 are written with U+FFFD in
 * place of the bad bytes. */
#ifndef SBX_EVENTS_H
#define SBX_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "controller/model/model.h"
#include "shared/errors.h"

#define EVENTS_VERSION 1

struct events;

/* Where an event happened: the agent, the nesting depth (0 for the run
 * itself, 1 and more inside agents used as tools) and the turn number
 * within that (nested) run, from 1 (0 before the first turn). */
struct events_where {
  const char *agent;
  int depth;
  int turn;
};

/* USAGE (NULL: zeros) as the events carry it: {"input_tokens",
 * "output_tokens", "total_tokens", "reasoning_tokens", "cached_tokens"}
 * (new). */
json_t *events_usage_json(const struct model_usage *u);

/* Makes an emitter writing to OUT (borrowed; must outlive the emitter)
 * into *EV (new). RUN_ID (copied) is the run's id, 32 hex digits. 0 or
 * -ENOMEM with E. */
int events_new(FILE *out, const char *run_id, struct events **ev,
               struct sbx_error *e);
/* Receives each event as it is written, under the emitter's lock (so in
 * seq order): its SEQ, TYPE and the JSON text LINE (LEN bytes, no newline;
 * borrowed for the call). */
typedef void (*events_sink_fn)(void *arg, uint64_t seq, const char *type,
                               const char *line, size_t len);
/* Makes an emitter handing every event to FN, and writing it to OUT too
 * when not NULL, numbered from LAST_SEQ + 1 (a run that goes on after an
 * earlier part's events). */
int events_new_sink(events_sink_fn fn, void *arg, FILE *out, const char *run_id,
                    uint64_t last_seq, struct events **ev, struct sbx_error *e);
/* Frees; accepts NULL; returns NULL. Does not close the FILE. */
struct events *events_free(struct events *ev);

/* Writes one event of TYPE with FIELDS (stolen; may be NULL for none) plus
 * the common fields. */
void events_emit(struct events *ev, const char *type, json_t *fields);

/* The typed events, one per section of docs/events.md. Borrowed strings;
 * a NULL string is written as JSON null where the document allows it. */
void events_run_started(struct events *ev, const char *agent,
                        const char *backend, const char *model,
                        int64_t max_turns, const char *trace_id);
/* ATTACHED: a developer-owned sandbox (sbx run --sandbox) rather than a
 * fresh one; EXPOSED_PORTS (borrowed, NULL for none): {"PORT": "endpoint"}. */
void events_sandbox_created(struct events *ev, const struct events_where *w,
                            const char *session_id, const char *backend,
                            bool attached, json_t *exposed_ports);
/* W names the agent used as a tool and the depth of its nested run. */
void events_agent_tool_started(struct events *ev, const struct events_where *w,
                               const char *parent_agent, const char *call_id);
void events_text_delta(struct events *ev, const struct events_where *w,
                       const char *text, size_t len);
void events_tool_call_started(struct events *ev, const struct events_where *w,
                              const char *name, const char *call_id,
                              const char *arguments);
/* For the approvals work: a call waits for a person's decision. RUN_STATE
 * is the run's id in the state store to pass to sbx approve / sbx reject,
 * or NULL. */
void events_approval_requested(struct events *ev, const struct events_where *w,
                               const char *name, const char *call_id,
                               const char *arguments, const char *run_state);
/* STATUS is "completed" or "failed"; OUTPUT (borrowed) what the model is
 * given (a string or an array of content items), NULL when the call failed
 * the run; ERROR why the call failed, NULL when it completed. */
void events_tool_call_finished(struct events *ev, const struct events_where *w,
                               const char *name, const char *call_id,
                               const char *status, json_t *output,
                               const char *error, int64_t duration_ms);
/* W names the agent handing off. */
/* A guardrail's tripwire was triggered: NAME, KIND "input" or "output",
 * INFO its output_info (borrowed; NULL: null); run_failed follows. */
void events_guardrail_tripped(struct events *ev, const struct events_where *w,
                              const char *name, const char *kind, json_t *info);
void events_handoff(struct events *ev, const struct events_where *w,
                    const char *to, const char *call_id);
void events_turn_finished(struct events *ev, const struct events_where *w,
                          const char *model, size_t tool_calls,
                          const struct model_usage *usage);
void events_run_finished(struct events *ev, const char *agent,
                         const char *final_output, int turns,
                         const struct model_usage *usage, int64_t duration_ms);
/* CODE is the error class (sbx_code_name), EXIT_CODE what sbx exits with. */
/* The run stopped to wait for approvals; RUN_STATE is its state file. */
void events_run_paused(struct events *ev, const char *run_state, int turns);
void events_run_failed(struct events *ev, const char *error, const char *code,
                       int exit_code, int turns,
                       const struct model_usage *usage, int64_t duration_ms);

/* The run stopped because it was cancelled (run_options.cancel). USAGE
 * may be NULL (zeros). */
void events_run_cancelled(struct events *ev, int turns,
                          const struct model_usage *usage, int64_t duration_ms);

/* Formats the wall-clock time UNIX_MS as RFC 3339 UTC with milliseconds,
 * "2025-06-01T12:00:00.123Z", into OUT. */
void events_format_timestamp(uint64_t unix_ms, char out[32]);

#endif
