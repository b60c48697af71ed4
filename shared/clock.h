/* Monotonic and wall clocks. */
#ifndef SBX_CLOCK_H
#define SBX_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds and milliseconds on CLOCK_MONOTONIC. */
uint64_t sbx_now_ns(void);
uint64_t sbx_now_ms(void);
/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
uint64_t sbx_wall_ms(void);
/* The time MS milliseconds from now on CLOCK, for pthread_cond_timedwait
 * (CLOCK_REALTIME unless the condition was set to another clock). */
struct timespec sbx_deadline_in(clockid_t clock, unsigned ms);

#endif
