/* A small JSON Schema validator for agents' output_type: type (incl.
 * arrays of types and "integer"), properties, required,
 * additionalProperties (false or a schema), items, enum, const, anyOf,
 * minimum/maximum, minLength/maxLength, minItems/maxItems. Unknown keywords
 * are ignored. Depth is bounded. */
#ifndef SBX_SCHEMA_H
#define SBX_SCHEMA_H

#include <jansson.h>

#include "shared/errors.h"

/* 0 when VALUE satisfies SCHEMA; else -EINVAL with E naming the JSON
 * pointer of the first violation ("/items/2/name: expected a string"). */
int schema_validate(json_t *schema, json_t *value, struct sbx_error *e);

#endif
