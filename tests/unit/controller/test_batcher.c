/* The batcher (controller/state/batcher.h): what is queued is written in
 * order, a burst in one batch; a flush returns once everything queued
 * before it is written and cuts the linger short; a stop writes what is
 * left. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "controller/state/batcher.h"

#define QMAX 64

struct user {
  struct batcher b;
  int queue[QMAX]; /* under b's lock */
  size_t n;
  int written[1024]; /* the writer's */
  size_t nwritten, batches;
};

struct batch {
  size_t n;
  int items[QMAX];
};

static bool u_queued(void *arg) {
  return ((struct user *)arg)->n > 0;
}

static void *u_take(void *arg) {
  struct user *u = arg;
  struct batch *b = malloc(sizeof(*b));
  if (!b)
    return NULL;
  b->n = u->n;
  memcpy(b->items, u->queue, u->n * sizeof(int));
  u->n = 0;
  return b;
}

static void u_write(void *arg, void *p) {
  struct user *u = arg;
  struct batch *b = p;
  for (size_t i = 0; i < b->n; i++)
    u->written[u->nwritten++] = b->items[i];
  u->batches++;
  free(b);
}

static const struct batcher_ops ops = {
    .queued = u_queued, .take = u_take, .write = u_write};

/* Queues V, waiting for room while the queue is full. */
static void push(struct user *u, int v) {
  batcher_lock(&u->b);
  while (u->n == QMAX)
    batcher_wait(&u->b);
  bool first = u->n == 0;
  u->queue[u->n++] = v;
  if (first)
    batcher_queued(&u->b);
  batcher_unlock(&u->b);
}

Test(batcher, a_burst_is_written_in_order_and_in_one_batch) {
  static struct user u;
  cr_assert_eq(batcher_start(&u.b, 2000, &ops, &u), 0);
  cr_assert(u.b.started);
  for (int i = 0; i < 10; i++)
    push(&u, i);
  batcher_flush(&u.b);
  cr_assert_eq(u.nwritten, 10);
  for (int i = 0; i < 10; i++)
    cr_expect_eq(u.written[i], i);
  /* The ten came within the linger of the first: one batch. */
  cr_expect_eq(u.batches, 1, "batches: %zu", u.batches);
  batcher_stop(&u.b);
}

/* A minute's linger would outlast the test's timeout: the flush and the
 * stop cut it short. */
Test(batcher, a_flush_and_a_stop_do_not_wait_for_the_linger, .timeout = 20) {
  static struct user u;
  cr_assert_eq(batcher_start(&u.b, 60000, &ops, &u), 0);
  push(&u, 1);
  batcher_flush(&u.b);
  cr_expect_eq(u.nwritten, 1);
  push(&u, 2);
  push(&u, 3);
  batcher_stop(&u.b); /* writes what is left */
  cr_assert_eq(u.nwritten, 3);
  cr_expect_eq(u.written[1], 2);
  cr_expect_eq(u.written[2], 3);
}

/* More than the queue holds: the producer waits for room, nothing is
 * lost or reordered. */
Test(batcher, a_full_queue_waits_for_room, .timeout = 20) {
  static struct user u;
  cr_assert_eq(batcher_start(&u.b, 1, &ops, &u), 0);
  for (int i = 0; i < 1000; i++)
    push(&u, i);
  batcher_stop(&u.b);
  cr_assert_eq(u.nwritten, 1000);
  for (int i = 0; i < 1000; i++)
    cr_assert_eq(u.written[i], i, "item %d", i);
  cr_expect_gt(u.batches, 1000 / QMAX - 1);
}
