#include "clock.h"

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
