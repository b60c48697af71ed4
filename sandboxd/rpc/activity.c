/* Activity and expiry: the clock an idle timeout runs on, and whether a
 * sandbox's time to live or idle timeout has come. */
#include <stdio.h>

#include "sandboxd/rpc/sandboxd.h"
#include "shared/clock.h"

void rpc_activity_begin(struct sandboxd *d) {
  d->active_calls++;
  d->active_at_ms = sbx_now_ms();
}

void rpc_activity_end(struct sandboxd *d) {
  d->active_at_ms = sbx_now_ms();
  d->active_calls--;
}

uint64_t rpc_idle_ms(struct sandboxd *d) {
  if (d->active_calls > 0)
    return 0;
  uint64_t now = sbx_now_ms(), at = d->active_at_ms;
  return now > at ? now - at : 0;
}

bool rpc_expiry_due(struct sandboxd *d, int64_t wall_s, char *why, size_t n) {
  if (d->expires_at > 0 && wall_s >= d->expires_at) {
    (void)snprintf(why, n, "its time to live has ended");
    return true;
  }
  uint64_t idle = rpc_idle_ms(d);
  if (d->idle_timeout_s > 0 && idle >= (uint64_t)d->idle_timeout_s * 1000) {
    (void)snprintf(why, n, "idle for %llu s (idle timeout %u s)",
                   (unsigned long long)(idle / 1000), d->idle_timeout_s);
    return true;
  }
  return false;
}
