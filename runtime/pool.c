/* pool.c: the thread pool behind vitc_abi_parallel_for.
 *
 * One pool per context: nthreads - 1 worker threads plus the thread that runs
 * the model.  Threads claim a job's (fn, arg, n) tasks from one atomic ticket
 * in chunks of n / (4 * threads) tasks that shrink as the job drains (a claim
 * takes at most 1/(2 * threads) of what is left, and at least 1/64 of the
 * job): few claims, and a tail fine enough that neither thread waits long
 * for the other.  Chunks of n / (4 * threads) to the end left one thread a
 * whole chunk more than the other whenever the chunks did not pair up (44
 * equal GEMM tasks in chunks of 6: 24 tasks against 20, 9% more time than
 * an even split).  Nothing is allocated per call.  The caller waits for the
 * tasks, not for the workers: a worker the OS has not scheduled yet (more
 * threads than free cores) finds nothing left to claim and does not hold the
 * job up.
 *
 * Idle workers spin briefly (the kernels of one model run follow each other
 * within microseconds), then yield, then sleep on a condition variable, so an
 * idle pool burns no CPU.
 *
 * Each worker is pinned to a CPU of its own (VITC_PIN_THREADS=0: not), taken
 * in turn from the process's allowed CPUs, the creating thread's left to it:
 * a worker the OS woke on the caller's CPU (it does so after a pause) shared
 * that CPU with the caller for whole runs, at one thread's speed (a 2-core
 * ViT-S/16 run at batch 1: 14 ms for 9). */
#include "runtime/rt_impl.h"
#include "runtime/rt_knobs.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SPIN_ROUNDS 2000  /* pause instructions before yielding: some microseconds */
#define YIELD_ROUNDS 8    /* sched_yield calls before sleeping */
#define CHUNKS_PER_THREAD 4 /* the largest claim: n / (CHUNKS_PER_THREAD * threads) */
#define MIN_CLAIM_DIV 64    /* the smallest claim: n / MIN_CLAIM_DIV */
#define MAX_UNITS 0xffff  /* a job of more tasks claims them in units of several */

/* The ticket packs the job id (high 32 bits), the job's unit count (16 bits)
 * and the next unclaimed unit (low 16 bits): a claim is one compare-and-swap
 * that fails once a newer job has replaced the one the claimer saw. */
#define T_JOB(t) ((uint32_t)((t) >> 32))
#define T_NUNITS(t) ((uint32_t)(((t) >> 16) & 0xffff))
#define T_NEXT(t) ((uint32_t)((t) & 0xffff))
#define T_MAKE(job, nunits) (((uint64_t)(job) << 32) | ((uint64_t)(nunits) << 16))

struct rt_pool {
    int nthreads;                 /* workers + the caller */
    int nworkers;                 /* started */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;          /* workers sleep here between jobs */
    pthread_cond_t done_cv;       /* the caller sleeps here until the last unit is done */
    int sleeping;                 /* workers waiting on wake (under mu) */
    int caller_sleeping;          /* the caller waiting on done_cv (under mu) */
    atomic_int stop;              /* set before the ticket change that announces it */
    _Atomic uint64_t ticket;
    atomic_uint done;             /* units of the current job finished */
    /* The current job: written before the ticket that publishes it, and stable
     * while any of its units is unfinished (the caller waits for all). */
    vitc_abi_task fn;
    void *arg;
    int64_t n, unit;              /* tasks, tasks per unit */
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

/* Claims the next chunk of job `job`: its first unit, *count units; -1 when
 * the job has none left or is over. */
static int claim(rt_pool *p, uint32_t job, uint32_t *count)
{
    uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
    for (;;) {
        if (T_JOB(t) != job || T_NEXT(t) >= T_NUNITS(t))
            return -1;
        uint32_t n = T_NUNITS(t), left = n - T_NEXT(t), share = 2 * (uint32_t)p->nthreads;
        uint32_t most = (n + CHUNKS_PER_THREAD * (uint32_t)p->nthreads - 1) / (CHUNKS_PER_THREAD * (uint32_t)p->nthreads);
        uint32_t c = (left + share - 1) / share, least = (n + MIN_CLAIM_DIV - 1) / MIN_CLAIM_DIV;
        c = c > most ? most : c;
        c = c < least ? least : c;
        c = c > left ? left : c;
        if (atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + c, memory_order_acq_rel, memory_order_acquire)) {
            *count = c;
            return (int)T_NEXT(t);
        }
    }
}

/* Runs chunks of job `job` until none are left. */
static void work_on(rt_pool *p, uint32_t job, uint32_t nunits)
{
    int u;
    uint32_t c;
    in_task = 1;
    while ((u = claim(p, job, &c)) >= 0) {
        int64_t begin = u * p->unit, end = (u + (int64_t)c) * p->unit;
        p->fn(p->arg, begin, end < p->n ? end : p->n);
        if (atomic_fetch_add_explicit(&p->done, c, memory_order_acq_rel) + c == nunits) {
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
        work_on(p, seen, T_NUNITS(t));
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

/* The next CPU the workers of any pool are pinned to: pools spread over the CPUs. */
static atomic_uint next_cpu;

/* Pins each worker to one CPU (see the top), where the process may use at
 * least as many CPUs as the pool has threads; best effort. */
static void pin_workers(rt_pool *p)
{
    cpu_set_t allowed, one;
    if (p->nworkers == 0 || !rt_knob(RT_KNOB_PIN_THREADS) || sched_getaffinity(0, sizeof allowed, &allowed) ||
        CPU_COUNT(&allowed) < p->nthreads)
        return;
    int cpus[CPU_SETSIZE], n = 0, self = sched_getcpu();
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed) && c != self)
            cpus[n++] = c;
    for (int i = 0; i < p->nworkers && n > 0; i++) {
        CPU_ZERO(&one);
        CPU_SET(cpus[atomic_fetch_add(&next_cpu, 1) % (unsigned)n], &one);
        pthread_setaffinity_np(p->workers[i], sizeof one, &one);
    }
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
    pin_workers(p);
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
    int64_t unit = (n + MAX_UNITS - 1) / MAX_UNITS;
    uint32_t nunits = (uint32_t)((n + unit - 1) / unit);
    uint32_t job = T_JOB(atomic_load(&p->ticket)) + 1;
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->unit = unit;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    publish(p, T_MAKE(job, nunits));

    work_on(p, job, nunits);

    for (int i = 0; i < SPIN_ROUNDS + YIELD_ROUNDS; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == nunits)
            return;
        if (i < SPIN_ROUNDS)
            cpu_relax();
        else
            sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    p->caller_sleeping = 1;
    while (atomic_load_explicit(&p->done, memory_order_acquire) != nunits)
        pthread_cond_wait(&p->done_cv, &p->mu);
    p->caller_sleeping = 0;
    pthread_mutex_unlock(&p->mu);
}
