#include "controller/sandbox/progress.h"

#include <stdio.h>
#include <unistd.h>

#include "shared/clock.h"

bool progress_enabled(bool json) {
  return !json && isatty(2);
}

/* Formats N bytes as "12.3 MiB" into OUT. */
static void human(double n, char *out, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) {
    n /= 1024;
    u++;
  }
  (void)snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", n, units[u]);
}

void progress_snapshot(void *arg, const struct snapshot_progress *p) {
  (void)arg;
  char done[32], total[32], rate[32];
  human((double)p->bytes_done, done, sizeof(done));
  human((double)p->bytes_total, total, sizeof(total));
  human(p->rate, rate, sizeof(rate));
  char left[48] = "";
  if (p->bytes_total > p->bytes_done && p->rate > 0)
    (void)snprintf(left, sizeof(left), ", %.0f s left",
                   (double)(p->bytes_total - p->bytes_done) / p->rate);
  char files[48] = "";
  if (p->files_done)
    (void)snprintf(files, sizeof(files), ", %llu files",
                   (unsigned long long)p->files_done);
  if (p->bytes_total)
    fprintf(stderr, "\r\033[K%s: %s of %s%s, %s/s%s", p->phase, done, total,
            files, rate, left);
  else
    fprintf(stderr, "\r\033[K%s: %s%s, %s/s", p->phase, done, files, rate);
  if (p->finished)
    fputc('\n', stderr);
  fflush(stderr);
}

void progress_meter_start(struct progress_meter *m, snapshot_progress_fn fn,
                          void *arg, const char *phase) {
  m->fn = fn;
  m->arg = arg;
  m->phase = phase;
  m->t0_ns = sbx_now_ns();
  m->last_ns = 0;
}

void progress_meter_update(struct progress_meter *m, uint64_t done,
                           uint64_t total, bool finished) {
  if (!m->fn)
    return;
  uint64_t now = sbx_now_ns();
  if (!finished && m->last_ns && now - m->last_ns < 250000000ULL)
    return;
  m->last_ns = now;
  double secs = (double)(now - m->t0_ns) / 1e9;
  struct snapshot_progress p = {
      .phase = m->phase,
      .bytes_done = done,
      .bytes_total = total,
      .rate = secs > 0 ? (double)done / secs : 0,
      .finished = finished,
  };
  m->fn(m->arg, &p);
}
