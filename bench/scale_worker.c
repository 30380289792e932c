/* bench/scale's worker: says when it started (wall clock), in which world, then waits to
 * be stopped. One write, so the lines of thousands of workers sharing a file never mix.
 * With `--tick MS` it wakes every MS milliseconds instead of sleeping for good: the floor
 * of a launcher's steady state (a heartbeat a keep-alive interval). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
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
    int tick_ms = argc == 3 && strcmp(argv[1], "--tick") == 0 ? atoi(argv[2]) : 0;
    for (;;) {
        if (tick_ms > 0)
            poll(NULL, 0, tick_ms);
        else
            pause();
    }
}
