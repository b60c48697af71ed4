/* Packing a reply whose bulk field (rpc.h's struct rpc_bulk) is read from
 * its file straight into the message that is sent: the bytes are read once,
 * by pread(2), and copied nowhere else in sandboxd. */
#include "sandboxd/server/bulk.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* Packing into a message's body, with a bulk field (rpc.h) read from its
 * file where it lands. */
struct bulk_buffer {
  ProtobufCBuffer base;
  uint8_t *dst;
  size_t cap; /* dst's size: the packed size */
  size_t pos;
  const struct rpc_bulk *bulk;
  size_t at;  /* where the bulk field's bytes start in dst */
  size_t got; /* how many of them were read */
  int err;    /* errno of a failed read */
};

static void bulk_append(ProtobufCBuffer *pb, size_t len, const uint8_t *data) {
  struct bulk_buffer *b = (struct bulk_buffer *)pb;
  if (len > b->cap - b->pos) {
    b->err = EOVERFLOW; /* not the size it was measured at: never packed */
    return;
  }
  if (data != (const uint8_t *)b->bulk || len != b->bulk->field->len) {
    memcpy(b->dst + b->pos, data, len);
    b->pos += len;
    return;
  }
  b->at = b->pos;
  uint8_t *to = b->dst + b->pos;
  while (b->got < len) {
    ssize_t r = pread(b->bulk->fd, to + b->got, len - b->got,
                      (off_t)(b->bulk->offset + b->got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      b->err = errno;
    if (r <= 0)
      break;
    b->got += (size_t)r;
  }
  b->pos += len;
}

int server_pack_bulk(Sbx__V1__Response *resp, Sbx__V1__Error *error,
                     struct rpc_call *call, size_t n, nng_msg **out) {
  struct rpc_bulk *bk = &call->bulk;
  nng_msg *m = NULL;
  if (nng_msg_alloc(&m, n) != 0)
    return -ENOMEM;
  struct bulk_buffer b = {.base = {.append = bulk_append},
                          .dst = nng_msg_body(m),
                          .cap = n,
                          .bulk = bk};
  bk->field->data = (uint8_t *)bk; /* the marker bulk_append looks for */
  (void)sbx__v1__response__pack_to_buffer(resp, &b.base);
  if (b.got == bk->field->len && b.pos == n) {
    bk->field->data = NULL;
    *out = m;
    return 0;
  }
  if (b.err) {
    nng_msg_free(m);
    bk->field->data = NULL;
    sbx_error_set(&call->err, sbx_code_from_errno(-b.err), b.err,
                  "cannot read: %s", strerror(b.err));
    resp->body_case = SBX__V1__RESPONSE__BODY__NOT_SET;
    error->code = (Sbx__V1__Code)call->err.code;
    error->errno_value = b.err;
    error->message = call->err.msg;
    resp->error = error;
    return 1;
  }
  uint8_t *keep = b.got ? sbx_arena_alloc_raw(&call->arena, b.got) : NULL;
  if (keep)
    memcpy(keep, b.dst + b.at, b.got);
  nng_msg_free(m);
  bk->field->data = keep;
  bk->field->len = keep ? b.got : 0;
  *bk->eof = keep || !b.got;
  return 1;
}
