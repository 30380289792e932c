/* ddp-bench-restart-probe: measures failure -> restarted worker start.
 *
 * Attempt 0 (TORCHELASTIC_RESTART_COUNT=0) writes "fail <ns>" to the file given as
 * argv[1] and exits 1; a later attempt writes "start <ns>" as its first act and exits
 * 0. Times are CLOCK_MONOTONIC, shared by every process of the machine. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    const char *attempt = getenv("TORCHELASTIC_RESTART_COUNT");
    int first = attempt == NULL || atoi(attempt) == 0;
    FILE *f = argc > 1 ? fopen(argv[1], "a") : NULL;
    if (f == NULL)
        return 2;
    fprintf(f, "%s %lld\n", first ? "fail" : "start", ns);
    fclose(f);
    return first ? 1 : 0;
}
