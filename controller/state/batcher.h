/* A thread that writes what its user queues, in order, a batch at a time:
 * the user keeps its own queue under the writer's lock, and the thread
 * takes everything queued at once and writes it without the lock, so that
 * whoever queues never waits for the store (the runner's events and its
 * journal, runs.c and run/state_io.c).
 *
 * A batch gathers for LINGER_MS after the first item before it is taken
 * (what comes in a burst is one write and one wake-up), except while a
 * flush waits or the writer stops, which cut the linger short. Where the thread
 * cannot be started (batcher.started false) the user writes for itself.
 *
 * Thread-safety: every call but batcher_start and batcher_stop from any
 * thread; the callbacks run on the writer's thread. */
#ifndef SBX_STATE_BATCHER_H
#define SBX_STATE_BATCHER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct batcher_ops {
  /* Under the lock: whether anything is queued. */
  bool (*queued)(void *arg);
  /* Under the lock: what is queued, the queue emptied (NULL when out of
   * memory: it is tried again a moment later). */
  void *(*take)(void *arg);
  /* Without the lock: writes BATCH (TAKE's) and frees it. */
  void (*write)(void *arg, void *batch);
};

struct batcher {
  pthread_mutex_t mu; /* the writer's state and the user's queue */
  pthread_cond_t cv;  /* something queued, a batch written */
  pthread_t thread;
  bool started, stop, busy;
  unsigned flushing; /* flushes waiting */
  unsigned linger_ms;
  const struct batcher_ops *ops;
  void *arg;
};

/* Sets W up and starts its thread. -ENOMEM when the lock cannot be made;
 * a thread that cannot be started leaves W->started false. */
int batcher_start(struct batcher *w, unsigned linger_ms,
                  const struct batcher_ops *ops, void *arg);
/* Writes what is queued, stops the thread and frees W's lock. */
void batcher_stop(struct batcher *w);
void batcher_lock(struct batcher *w);
void batcher_unlock(struct batcher *w);
/* Under the lock, after queuing: wakes the thread. */
void batcher_queued(struct batcher *w);
/* Under the lock: waits until a batch is written (for room in a queue
 * that is full). */
void batcher_wait(struct batcher *w);
/* Returns once everything queued before the call is written. */
void batcher_flush(struct batcher *w);

#endif
