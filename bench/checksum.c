/* ddp-bench-checksum MB: the speed of common/ckpt.h's checksum over MB MiB of memory (faulted
 * in first), as "GB/s" on stdout, the best of 5 passes; bench/checkpoint prints it. */
#include "ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t len = (size_t)(argc > 1 ? atol(argv[1]) : 256) << 20;
    unsigned char *data = malloc(len + 1);
    if (data == NULL)
        return 1;
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)(i * 131 + 7);
    double best = 1e9;
    uint64_t sum = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t = now();
        sum ^= ddp_ckpt_checksum(data, len, 0);
        t = now() - t;
        best = t < best ? t : best;
    }
    printf("%.2f GB/s (%016llx)\n", (double)len / best / 1e9, (unsigned long long)sum);
    free(data);
    return 0;
}
