/* test_pool.c: the runtime's thread pool (runtime/pool.c) hands every task of
 * a job out exactly once, in claims no larger than n / (4 * threads) tasks
 * that end in small ones, for job sizes around the edges of its ticket
 * (units of several tasks past 65535) and for 1 to 4 threads; a job started
 * from inside a task runs too, without waiting on the busy workers. */
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt_impl.h"

typedef struct {
    int64_t n;
    _Atomic unsigned char *seen;
    atomic_llong claims, largest, last_size, nested_bad;
    rt_pool *pool;
    int nest;
} job;

static void count_task(void *arg, int64_t begin, int64_t end)
{
    job *j = arg;
    if (begin < 0 || end > j->n || begin >= end) {
        atomic_fetch_add(&j->nested_bad, 1000000);
        return;
    }
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&j->seen[i], 1);
    atomic_fetch_add(&j->claims, 1);
    long long size = end - begin, big = atomic_load(&j->largest);
    while (size > big && !atomic_compare_exchange_weak(&j->largest, &big, size))
        ;
    if (end == j->n)
        atomic_store(&j->last_size, size);
    if (j->nest) { /* a job from inside a task: run inline when the workers are busy, never a hang */
        job inner = {.n = 5};
        _Atomic unsigned char marks[5] = {0};
        inner.seen = marks;
        rt_parallel_for(j->pool, 5, count_task, &inner);
        for (int i = 0; i < 5; i++)
            if (atomic_load(&marks[i]) != 1)
                atomic_fetch_add(&j->nested_bad, 1);
    }
}

static void test_every_task_once(void **state)
{
    (void)state;
    static const int64_t sizes[] = {1, 2, 3, 7, 8, 16, 33, 44, 143, 1000, 65535, 65536, 70001, 200000};
    int64_t nmax = 200000;
    _Atomic unsigned char *seen = malloc((size_t)nmax);
    assert_non_null(seen);
    for (int nt = 1; nt <= 4; nt++) {
        rt_pool *p = rt_pool_new(nt);
        assert_non_null(p);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            for (int nest = 0; nest < 2; nest++) {
                int64_t n = sizes[s];
                if (nest && n > 1000)
                    continue;
                memset((void *)seen, 0, (size_t)n);
                job j = {.n = n, .seen = seen, .pool = p, .nest = nest};
                rt_parallel_for(p, n, count_task, &j);
                int64_t wrong = 0;
                for (int64_t i = 0; i < n; i++)
                    wrong += atomic_load(&seen[i]) != 1;
                /* the largest claim: n / (4 * threads) tasks, rounded up to whole units of ceil(n / 65535) */
                int64_t unit = (n + 65534) / 65535, units = (n + unit - 1) / unit;
                int64_t most = (units + 4 * nt - 1) / (4 * nt) * unit, least = (units + 63) / 64 * unit;
                long long claims = atomic_load(&j.claims), largest = atomic_load(&j.largest);
                long long last = atomic_load(&j.last_size);
                if (wrong || atomic_load(&j.nested_bad) || (nt > 1 && (largest > most || last > least)))
                    fail_msg("%d threads, n %lld%s: %lld tasks not run exactly once, %lld bad nested runs, "
                             "%lld claims, largest %lld (at most %lld), last %lld (at most %lld)",
                             nt, (long long)n, nest ? " nested" : "", (long long)wrong,
                             (long long)atomic_load(&j.nested_bad), claims, largest, (long long)most, last,
                             (long long)least);
                if (nt == 2 && !nest && (n == 44 || n == 200000))
                    print_message("2 threads, %lld tasks: %lld claims, the largest %lld tasks, the last %lld\n",
                                  (long long)n, claims, largest, last);
                if (nt > 1 && n > 1)
                    assert_true(claims <= 4 * nt + 2 * 64);
            }
        }
        rt_pool_free(p);
    }
    free((void *)seen);
}

TU_MAIN(NULL, NULL, test_every_task_once)
