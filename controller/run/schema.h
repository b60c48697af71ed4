/* A small JSON Schema validator for agents' output_type: type (incl.
 * arrays of types and "integer"), properties, required,
 * additionalProperties (false or a schema), items, enum, const, anyOf,
 * minimum/maximum, minLength/maxLength, minItems/maxItems. Unknown keywords
 * are ignored. Depth is bounded. */
#ifndef SBX_SCHEMA_H
#define SBX_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>

#include "shared/errors.h"

/* 0 when VALUE satisfies SCHEMA; else -EINVAL with E naming the JSON
 * pointer of the first violation ("/items/2/name: expected a string"). */
int schema_validate(json_t *schema, json_t *value, struct sbx_error *e);

/* The output key of a wrapped output_type, the Python SDK's. */
#define SCHEMA_OUTPUT_KEY "response"

/* Whether OUTPUT_TYPE goes to the model wrapped, as the Python SDK's
 * AgentOutputSchema wraps what is not an object: a schema whose "type"
 * is not "object". */
bool schema_output_wrapped(json_t *output_type);
/* The schema the model is asked for (new; NULL on OOM): OUTPUT_TYPE, or
 * when wrapped {"type": "object", "properties": {"response": OUTPUT_TYPE},
 * "required": ["response"], "additionalProperties": false}. */
json_t *schema_output_for_model(json_t *output_type);

#endif
