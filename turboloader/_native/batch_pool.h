/*
 * batch_pool.h -- a small fixed pool of POSIX threads that runs one job at a time: the
 * items 0..n-1 of a job are handed out one by one (an atomic counter), to the pool's
 * threads and to the thread that calls tl_pool_run, which works on the job too.
 *
 * Contract:
 *   - No Python here: nothing takes or needs the GIL; the pool's threads never call into
 *     Python. The job function must not either (Cython: `noexcept nogil`).
 *   - tl_pool_run calls are serialized by the pool's own mutex (a second caller waits until
 *     the first job is done); the job function gets the index of the thread running it
 *     (0 = the calling thread, 1..threads-1 = the pool's), so it can use per-thread scratch.
 *   - The pool's threads block every signal (signals go to the interpreter's threads) and
 *     are named "tl-batch" (Linux).
 *   - Not fork-safe: a forked child has the struct but not the threads. Callers check the
 *     creating pid (tl_pool_pid) and make a new pool in the child; the old one is abandoned.
 *   - tl_pool_destroy stops and joins every thread; it must not race with tl_pool_run.
 */
#ifndef TURBOLOADER_BATCH_POOL_H
#define TURBOLOADER_BATCH_POOL_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_pool tl_pool;

/* Runs item `item` of a job on thread `thread` (0 <= thread < tl_pool_threads). */
typedef void (*tl_pool_fn)(void *ctx, long item, int thread);

/* A pool of `threads` - 1 new threads (threads >= 1; 1 starts none). Returns NULL on
 * failure with a message in errmsg (200 bytes). */
tl_pool *tl_pool_create(int threads, char *errmsg);

/* Number of threads that work on a job, the caller's included. */
int tl_pool_threads(const tl_pool *pool);

/* The pid of the process that created the pool. */
pid_t tl_pool_pid(const tl_pool *pool);

/* Run fn(ctx, i, thread) for i in 0..n_items-1 and return when all have returned. */
void tl_pool_run(tl_pool *pool, tl_pool_fn fn, void *ctx, long n_items);

/* Stop and join the pool's threads, then free it. NULL is allowed. */
void tl_pool_destroy(tl_pool *pool);

#ifdef __cplusplus
}
#endif

#endif /* TURBOLOADER_BATCH_POOL_H */
