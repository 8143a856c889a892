/* pool.c: the thread pool behind vitc_abi_parallel_for.
 *
 * One pool per context: nthreads - 1 worker threads plus the thread that runs
 * the model.  A job (fn, arg, n) is cut into at most 4 chunks per thread that
 * threads claim from one atomic ticket, so uneven tasks balance themselves and
 * nothing is allocated per call.  The caller waits for the chunks, not for the
 * workers: a worker the OS has not scheduled yet (more threads than free
 * cores) finds nothing left to claim and does not hold the job up.
 *
 * Idle workers spin briefly (the kernels of one model run follow each other
 * within microseconds), then yield, then sleep on a condition variable, so an
 * idle pool burns no CPU. */
#include "runtime/rt_impl.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SPIN_ROUNDS 2000  /* pause instructions before yielding: some microseconds */
#define YIELD_ROUNDS 8    /* sched_yield calls before sleeping */
#define CHUNKS_PER_THREAD 4

/* The ticket packs the job id (high 32 bits), the job's chunk count (16 bits)
 * and the next unclaimed chunk (low 16 bits): a claim is one compare-and-swap
 * that fails once a newer job has replaced the one the claimer saw. */
#define T_JOB(t) ((uint32_t)((t) >> 32))
#define T_NCHUNKS(t) ((uint32_t)(((t) >> 16) & 0xffff))
#define T_NEXT(t) ((uint32_t)((t) & 0xffff))
#define T_MAKE(job, nchunks) (((uint64_t)(job) << 32) | ((uint64_t)(nchunks) << 16))

struct rt_pool {
    int nthreads;                 /* workers + the caller */
    int nworkers;                 /* started */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;          /* workers sleep here between jobs */
    pthread_cond_t done_cv;       /* the caller sleeps here until the last chunk is done */
    int sleeping;                 /* workers waiting on wake (under mu) */
    int caller_sleeping;          /* the caller waiting on done_cv (under mu) */
    atomic_int stop;              /* set before the ticket change that announces it */
    _Atomic uint64_t ticket;
    atomic_uint done;             /* chunks of the current job finished */
    /* The current job: written before the ticket that publishes it, and stable
     * while any of its chunks is unfinished (the caller waits for all). */
    vitc_abi_task fn;
    void *arg;
    int64_t n, chunk;
};

/* Set while a thread runs a task, so that a nested parallel_for runs inline
 * instead of waiting on workers that are busy with the outer job. */
static _Thread_local int in_task;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Claims the next chunk of job `job`; -1 when it has none left or is over. */
static int claim(rt_pool *p, uint32_t job)
{
    uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
    for (;;) {
        if (T_JOB(t) != job || T_NEXT(t) >= T_NCHUNKS(t))
            return -1;
        if (atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + 1, memory_order_acq_rel, memory_order_acquire))
            return (int)T_NEXT(t);
    }
}

/* Runs chunks of job `job` until none are left. */
static void work_on(rt_pool *p, uint32_t job, uint32_t nchunks)
{
    int c;
    in_task = 1;
    while ((c = claim(p, job)) >= 0) {
        int64_t begin = c * p->chunk;
        int64_t end = p->n - begin < p->chunk ? p->n : begin + p->chunk;
        p->fn(p->arg, begin, end);
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == nchunks) {
            pthread_mutex_lock(&p->mu); /* the last chunk: the caller may be asleep */
            if (p->caller_sleeping)
                pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    in_task = 0;
}

/* Waits until the ticket names a job other than seen; returns the ticket. */
static uint64_t wait_for_job(rt_pool *p, uint32_t seen)
{
    uint64_t t;
    for (int i = 0; i < SPIN_ROUNDS + YIELD_ROUNDS; i++) {
        t = atomic_load_explicit(&p->ticket, memory_order_acquire);
        if (T_JOB(t) != seen)
            return t;
        if (i < SPIN_ROUNDS)
            cpu_relax();
        else
            sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    while (T_JOB(t = atomic_load_explicit(&p->ticket, memory_order_acquire)) == seen) {
        p->sleeping++;
        pthread_cond_wait(&p->wake, &p->mu);
        p->sleeping--;
    }
    pthread_mutex_unlock(&p->mu);
    return t;
}

static void *worker_main(void *arg)
{
    rt_pool *p = arg;
    uint32_t seen = 0;
    for (;;) {
        uint64_t t = wait_for_job(p, seen);
        if (atomic_load(&p->stop))
            break;
        seen = T_JOB(t);
        work_on(p, seen, T_NCHUNKS(t));
    }
    return NULL;
}

/* Publishes a ticket and wakes the workers that sleep. */
static void publish(rt_pool *p, uint64_t ticket)
{
    atomic_store_explicit(&p->ticket, ticket, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleeping)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

rt_pool *rt_pool_new(int nthreads)
{
    rt_pool *p = calloc(1, sizeof *p);
    if (!p || (nthreads > 1 && !(p->workers = calloc((size_t)nthreads - 1, sizeof(pthread_t))))) {
        free(p);
        rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory for a pool of %d threads", nthreads);
        return NULL;
    }
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->ticket, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, 0);
    for (int i = 0; i + 1 < nthreads; i++) {
        int err = pthread_create(&p->workers[i], NULL, worker_main, p);
        if (err) {
            rt_pool_free(p);
            rt_fail(err == EAGAIN ? VITC_STATUS_OUT_OF_MEMORY : VITC_STATUS_INTERNAL,
                    "could not start thread %d of %d: %s", i + 2, nthreads, strerror(err));
            return NULL;
        }
        p->nworkers++;
    }
    return p;
}

void rt_pool_free(rt_pool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    publish(p, T_MAKE(T_JOB(atomic_load(&p->ticket)) + 1, 0));
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

void rt_parallel_for(void *pool, int64_t n, vitc_abi_task fn, void *arg)
{
    rt_pool *p = pool;
    if (n <= 0 || !fn)
        return;
    if (!p || p->nworkers == 0 || n == 1 || in_task) {
        fn(arg, 0, n);
        return;
    }
    int64_t want = (int64_t)p->nthreads * CHUNKS_PER_THREAD;
    if (want > 0xffff)
        want = 0xffff;
    int64_t chunk = (n + (n < want ? n : want) - 1) / (n < want ? n : want);
    uint32_t nchunks = (uint32_t)((n + chunk - 1) / chunk);
    uint32_t job = T_JOB(atomic_load(&p->ticket)) + 1;
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    publish(p, T_MAKE(job, nchunks));

    work_on(p, job, nchunks);

    for (int i = 0; i < SPIN_ROUNDS + YIELD_ROUNDS; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == nchunks)
            return;
        if (i < SPIN_ROUNDS)
            cpu_relax();
        else
            sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    p->caller_sleeping = 1;
    while (atomic_load_explicit(&p->done, memory_order_acquire) != nchunks)
        pthread_cond_wait(&p->done_cv, &p->mu);
    p->caller_sleeping = 0;
    pthread_mutex_unlock(&p->mu);
}
