/* progress.h: the compile-phase timer both backends print progress with:
 * one line per phase on stderr with --verbose; by default when stderr is a
 * terminal or once the compile has taken longer than PROGRESS_SLOW_SECONDS;
 * never with --quiet. */
#ifndef VITC_PROGRESS_H
#define VITC_PROGRESS_H

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_SLOW_SECONDS 3.0

typedef struct {
    double start, last;
    int verbose; /* cg_options.verbose: 1, 0 or -1 */
} timer;

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reports the phase that just ended, timed from the previous report. */
static inline void phase_done(timer *t, const char *what)
{
    double now = now_s();
    if (t->verbose > 0 || (t->verbose == 0 && (now - t->start > PROGRESS_SLOW_SECONDS || isatty(2))))
        fprintf(stderr, "vitc: %-40s %7.3f s\n", what, now - t->last);
    t->last = now;
}

#endif
