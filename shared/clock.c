#include "shared/clock.h"

#include <time.h>

uint64_t sbx_now_ns(void) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t sbx_now_ms(void) {
  return sbx_now_ns() / 1000000ULL;
}

uint64_t sbx_wall_ms(void) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000ULL + (uint64_t)ts.tv_nsec / 1000000ULL;
}

struct timespec sbx_deadline_in(clockid_t clock, unsigned ms) {
  struct timespec ts;
  (void)clock_gettime(clock, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}
