/* FashionMNIST (or MNIST) from IDX files, gzip-compressed or not, read through zlib.
 *
 * Debian's dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist.
 * Every way a file can be wrong (missing, not IDX, truncated, corrupt, the images and
 * labels of different lengths) is an error naming the file. */
#ifndef FM_DATA_H
#define FM_DATA_H

#include <stddef.h>
#include <stdint.h>

#define FM_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

typedef struct {
    int count, rows, cols;
    uint8_t *pixels; /* count * rows * cols, row-major */
    uint8_t *labels; /* count, 0 .. 9 */
} fm_dataset_t;

/* Loads the training (train != 0) or test split from `dir`: <prefix>-images-idx3-ubyte
 * and <prefix>-labels-idx1-ubyte, with or without .gz. 0, or -1 with the reason in
 * `why`. */
int fm_dataset_load(const char *dir, int train, fm_dataset_t *out, char *why, size_t why_cap);
void fm_dataset_free(fm_dataset_t *d);

/* Image `i` as floats normalized as torchvision's Normalize((0.2860,), (0.3530,)). */
void fm_dataset_image(const fm_dataset_t *d, int i, float *out);

#endif
