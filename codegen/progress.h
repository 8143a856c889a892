/* progress.h: the compile-phase timer both backends print progress with:
 * one line per phase on stderr with --verbose, and by default when stderr is
 * a terminal; never with --quiet.  Where stderr is not a terminal (a log, a
 * pipe) the default is no phase at all, so that a log holds every phase or
 * none; cg_end then prints the one line saying what was written. */
#ifndef VITC_PROGRESS_H
#define VITC_PROGRESS_H

#include <stdio.h>
#include <time.h>
#include <unistd.h>

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
    if (t->verbose > 0 || (t->verbose == 0 && isatty(2)))
        fprintf(stderr, "vitc: %-40s %7.3f s\n", what, now - t->last);
    t->last = now;
}

#endif
