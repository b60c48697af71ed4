/* A thread that writes what is queued, a batch at a time (batcher.h). */
#include "controller/state/batcher.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *batcher_main(void *arg) {
  struct batcher *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->ops->queued(w->arg) && !w->stop)
      (void)pthread_cond_wait(&w->cv, &w->mu);
    if (!w->ops->queued(w->arg))
      break;
    /* The linger, cut short by a flush or the stop. */
    if (w->linger_ms) {
      struct timespec until;
      (void)clock_gettime(CLOCK_MONOTONIC, &until);
      until.tv_nsec += (long)w->linger_ms * 1000000L;
      until.tv_sec += until.tv_nsec / 1000000000L;
      until.tv_nsec %= 1000000000L;
      while (!w->stop && !w->flushing &&
             pthread_cond_timedwait(&w->cv, &w->mu, &until) == 0)
        ;
    }
    void *batch = w->ops->take(w->arg);
    if (!batch) { /* out of memory: the queue waits a moment */
      pthread_mutex_unlock(&w->mu);
      (void)usleep(10000);
      pthread_mutex_lock(&w->mu);
      continue;
    }
    w->busy = true;
    pthread_mutex_unlock(&w->mu);
    w->ops->write(w->arg, batch);
    pthread_mutex_lock(&w->mu);
    w->busy = false;
    (void)pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int batcher_start(struct batcher *w, unsigned linger_ms,
                  const struct batcher_ops *ops, void *arg) {
  memset(w, 0, sizeof(*w));
  w->linger_ms = linger_ms;
  w->ops = ops;
  w->arg = arg;
  if (pthread_mutex_init(&w->mu, NULL) != 0)
    return -ENOMEM;
  pthread_condattr_t ca;
  bool made = pthread_condattr_init(&ca) == 0;
  if (made) {
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    made = pthread_cond_init(&w->cv, &ca) == 0;
    (void)pthread_condattr_destroy(&ca);
  }
  if (!made) {
    (void)pthread_mutex_destroy(&w->mu);
    return -ENOMEM;
  }
  w->started = pthread_create(&w->thread, NULL, batcher_main, w) == 0;
  return 0;
}

void batcher_stop(struct batcher *w) {
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  (void)pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (w->started)
    (void)pthread_join(w->thread, NULL);
  w->started = false;
  (void)pthread_cond_destroy(&w->cv);
  (void)pthread_mutex_destroy(&w->mu);
}

void batcher_lock(struct batcher *w) {
  pthread_mutex_lock(&w->mu);
}

void batcher_unlock(struct batcher *w) {
  pthread_mutex_unlock(&w->mu);
}

void batcher_queued(struct batcher *w) {
  (void)pthread_cond_broadcast(&w->cv);
}

void batcher_wait(struct batcher *w) {
  if (w->started)
    (void)pthread_cond_wait(&w->cv, &w->mu);
}

void batcher_flush(struct batcher *w) {
  pthread_mutex_lock(&w->mu);
  w->flushing++;
  (void)pthread_cond_broadcast(&w->cv);
  while (w->started && (w->ops->queued(w->arg) || w->busy))
    (void)pthread_cond_wait(&w->cv, &w->mu);
  w->flushing--;
  pthread_mutex_unlock(&w->mu);
}
