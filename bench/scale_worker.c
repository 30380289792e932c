/* bench/scale's worker: says when it started (wall clock), in which world, then waits to
 * be stopped. One write, so the lines of thousands of workers sharing a file never mix. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
    struct timespec now;
    char line[160];
    clock_gettime(CLOCK_REALTIME, &now);
    const char *world = getenv("GROUP_WORLD_SIZE"),
               *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
    int n = snprintf(line, sizeof line, "started %lld.%09ld world %s restarts %s\n",
                     (long long)now.tv_sec, now.tv_nsec, world ? world : "?",
                     restarts ? restarts : "?");
    if (write(1, line, (size_t)n) != n)
        return 1;
    for (;;)
        pause();
}
