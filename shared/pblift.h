/* Lifting one large bytes field out of an encoded protobuf message, so that
 * it can be used where it lies instead of being copied by the decoder.
 *
 * protobuf-c copies every bytes field it decodes. For the few messages that
 * carry bulk data (a FileWrite request, a FileRead or ExecRead reply), the
 * caller instead decodes a small copy of the message without that field and
 * points the field at the bytes inside the received buffer, which it keeps
 * for as long as the decoded message lives.
 *
 * Input is hostile: every length is checked against the buffer. A shape the
 * lift does not handle plainly (the field or its parent repeated, a group, a
 * malformed varint) is left to the ordinary decoder, which applies the full
 * protobuf rules. Thread-safe (no state). */
#ifndef SBX_PBLIFT_H
#define SBX_PBLIFT_H

#include <stddef.h>
#include <stdint.h>

/* Bytes fields shorter than this are not worth lifting. */
#define SBX_PB_LIFT_MIN 4096

struct sbx_pb_lift {
  uint8_t *rest;   /* new: BUF without the lifted field; free() it */
  size_t rest_len; /* its length */
  size_t data_off; /* the field's bytes: BUF[data_off, data_off+data_len) */
  size_t data_len;
};

/* Finds in BUF (LEN bytes) the sub-message field OUTER, and in it the bytes
 * field INNER of at least SBX_PB_LIFT_MIN bytes, each present once, and fills
 * L. Returns 1 when lifted, 0 when not (decode BUF as it is), -ENOMEM. */
int sbx_pb_lift(const uint8_t *buf, size_t len, uint32_t outer, uint32_t inner,
                struct sbx_pb_lift *l);

#endif
