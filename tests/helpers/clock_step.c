/* LD_PRELOAD for the tests: the wall clock steps, as NTP's step or a VM's resume makes it.
 * DDP_TEST_CLOCK_STEP="AFTER:BY": CLOCK_REALTIME reads BY seconds later from AFTER seconds
 * (monotonic) after the process first read it; every other clock is untouched. What the
 * launcher decides by elapsed time must not change with it. */
#include "dl.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

int clock_gettime(clockid_t id, struct timespec *ts);

int clock_gettime(clockid_t id, struct timespec *ts)
{
    static clock_gettime_fn real;
    static double after = -1, by, first = -1; /* races between threads: the same values */
    if (real == NULL)
        (void)ddp_dl_symbol(RTLD_NEXT, "clock_gettime", &real, sizeof real);
    int rc = real(id, ts);
    if (rc != 0 || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE))
        return rc;
    if (after < 0) {
        const char *spec = getenv("DDP_TEST_CLOCK_STEP");
        if (spec == NULL || sscanf(spec, "%lf:%lf", &after, &by) != 2 || after < 0)
            after = 1e18, by = 0;
    }
    struct timespec m;
    real(CLOCK_MONOTONIC, &m);
    double now = (double)m.tv_sec + (double)m.tv_nsec / 1e9;
    if (first < 0)
        first = now;
    if (now - first >= after)
        ts->tv_sec += (time_t)by;
    return rc;
}
