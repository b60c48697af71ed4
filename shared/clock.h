/* Monotonic and wall clocks. */
#ifndef SBX_CLOCK_H
#define SBX_CLOCK_H

#include <stdint.h>

/* Nanoseconds and milliseconds on CLOCK_MONOTONIC. */
uint64_t sbx_now_ns(void);
uint64_t sbx_now_ms(void);
/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
uint64_t sbx_wall_ms(void);

#endif
