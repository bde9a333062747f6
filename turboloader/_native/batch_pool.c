/*
 * batch_pool.c -- the thread pool behind turboloader's batch calls; see batch_pool.h.
 *
 * One job at a time (run_lock). A job is published under `mu` with a new generation number;
 * each pool thread runs every generation exactly once, taking items from the shared `next`
 * counter, and the caller returns only when every pool thread has finished the generation,
 * so the job's context (on the caller's stack) is never touched after tl_pool_run returns.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* pthread_setname_np */
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch_pool.h"

typedef struct {
    tl_pool *pool;
    int index;
} tl_worker_arg;

struct tl_pool {
    int threads;                  /* the caller's included */
    int n_started;                /* pool threads running */
    pid_t pid;
    pthread_t *tids;
    tl_worker_arg *args;
    pthread_mutex_t run_lock;     /* one job at a time */
    pthread_mutex_t mu;           /* guards everything below */
    pthread_cond_t start_cv;
    pthread_cond_t done_cv;
    unsigned long generation;
    int stop;
    int active;                   /* pool threads not yet done with this generation */
    tl_pool_fn fn;
    void *ctx;
    long n_items;
    long next;                    /* next item to hand out (atomic) */
};

static void tl_pool_work(tl_pool *p, tl_pool_fn fn, void *ctx, long n, int thread)
{
    for (;;) {
        long i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (i >= n)
            return;
        fn(ctx, i, thread);
    }
}

static void *tl_pool_main(void *arg)
{
    tl_worker_arg *a = (tl_worker_arg *)arg;
    tl_pool *p = a->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        tl_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        long n = p->n_items;
        pthread_mutex_unlock(&p->mu);
        tl_pool_work(p, fn, ctx, n, a->index);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void tl_pool_stop(tl_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->tids[i], NULL);
    p->n_started = 0;
}

static void tl_pool_free(tl_pool *p)
{
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->start_cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_lock);
    free(p->tids);
    free(p->args);
    free(p);
}

tl_pool *tl_pool_create(int threads, char *errmsg)
{
    if (errmsg)
        errmsg[0] = 0;
    if (threads < 1 || threads > 1024) {
        if (errmsg)
            snprintf(errmsg, 200, "threads must be in 1..1024, got %d", threads);
        return NULL;
    }
    tl_pool *p = (tl_pool *)calloc(1, sizeof(tl_pool));
    if (p == NULL) {
        if (errmsg)
            snprintf(errmsg, 200, "cannot allocate a thread pool");
        return NULL;
    }
    p->threads = threads;
    p->pid = getpid();
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (threads > 1) {
        p->tids = (pthread_t *)calloc((size_t)threads - 1, sizeof(pthread_t));
        p->args = (tl_worker_arg *)calloc((size_t)threads - 1, sizeof(tl_worker_arg));
        if (p->tids == NULL || p->args == NULL) {
            if (errmsg)
                snprintf(errmsg, 200, "cannot allocate a thread pool");
            tl_pool_free(p);
            return NULL;
        }
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);   /* inherited by the new threads */
        int rc = 0;
        for (int i = 0; i < threads - 1; i++) {
            p->args[i].pool = p;
            p->args[i].index = i + 1;
            rc = pthread_create(&p->tids[i], NULL, tl_pool_main, &p->args[i]);
            if (rc != 0)
                break;
            p->n_started++;
#if defined(__linux__)
            pthread_setname_np(p->tids[i], "tl-batch");   /* seen in top, py-spy, /proc */
#endif
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            if (errmsg)
                snprintf(errmsg, 200, "cannot start thread %d of %d: %s", p->n_started + 1,
                         threads - 1, strerror(rc));
            tl_pool_stop(p);
            tl_pool_free(p);
            return NULL;
        }
    }
    return p;
}

int tl_pool_threads(const tl_pool *pool)
{
    return pool->threads;
}

pid_t tl_pool_pid(const tl_pool *pool)
{
    return pool->pid;
}

void tl_pool_run(tl_pool *p, tl_pool_fn fn, void *ctx, long n_items)
{
    if (n_items <= 0)
        return;
    pthread_mutex_lock(&p->run_lock);
    if (p->n_started == 0 || n_items == 1) {
        for (long i = 0; i < n_items; i++)
            fn(ctx, i, 0);
        pthread_mutex_unlock(&p->run_lock);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n_items;
    __atomic_store_n(&p->next, 0, __ATOMIC_RELAXED);
    p->active = p->n_started;
    p->generation++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    tl_pool_work(p, fn, ctx, n_items, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->run_lock);
}

void tl_pool_destroy(tl_pool *p)
{
    if (p == NULL)
        return;
    tl_pool_stop(p);
    tl_pool_free(p);
}
