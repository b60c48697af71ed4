#include "sandboxd/rpc/sandboxd.h"

void sandboxd_limits_default(struct sandboxd_limits *l) {
  *l = (struct sandboxd_limits){
      .max_message_bytes = 64u << 20,
      .max_inflight = 256,
      .max_processes = 64,
      .retention_head = 64u << 10,
      .retention_tail = 1u << 20,
      .max_list_entries = 10000,
      .max_read_bytes = 4u << 20,
      .archive_max_members = 1000000,
      .archive_max_input_bytes = 16ull << 30,
      .archive_max_extracted_bytes = 64ull << 30,
      .max_archives = 16,
      .idempotency_entries = 1024,
  };
}
