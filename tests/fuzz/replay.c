/* Runs the fuzz target over seed files (hex, one input a line) without libFuzzer, so
 * the seeds are a regression test in every build, gcc's included. With --corpus DIR
 * first, it writes each input to DIR/seed-N instead (libFuzzer's corpus layout). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int write_input(const char *dir, int n, const uint8_t *bytes, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%d", dir, n);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int inputs = 0, first = 1;
    const char *corpus = NULL;
    if (argc > 2 && strcmp(argv[1], "--corpus") == 0) {
        corpus = argv[2];
        first = 3;
    }
    for (int i = first; i < argc; i++) {
        FILE *f = fopen(argv[i], "r");
        char line[65536];
        if (f == NULL) {
            perror(argv[i]);
            return 1;
        }
        while (fgets(line, sizeof line, f) != NULL) {
            uint8_t bytes[sizeof line / 2];
            size_t n = 0;
            if (line[0] == '#' || line[0] == '\n')
                continue;
            for (char *p = line; *p && *p != '\n';) {
                unsigned byte;
                if (*p == ' ') {
                    p++;
                    continue;
                }
                if (sscanf(p, "%2x", &byte) != 1) {
                    fprintf(stderr, "%s: bad hex in '%s'\n", argv[i], line);
                    return 1;
                }
                bytes[n++] = (uint8_t)byte;
                p += 2;
            }
            inputs++;
            if (corpus != NULL && write_input(corpus, inputs, bytes, n) != 0)
                return 1;
            if (corpus == NULL)
                LLVMFuzzerTestOneInput(bytes, n);
        }
        fclose(f);
    }
    printf("replayed %d inputs\n", inputs);
    return inputs > 0 ? 0 : 1;
}
