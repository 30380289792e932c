/* IDX files through zlib (see data.h). */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define MEAN 0.2860f
#define STD  0.3530f

/* The path of `name` in `dir`: compressed if that exists, else plain. */
static void find(const char *dir, const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s.gz", dir, name);
    if (access(path, R_OK) != 0)
        snprintf(path, cap, "%s/%s", dir, name);
}

static int read_exact(gzFile f, void *buf, size_t len, const char *path, char *why, size_t cap)
{
    size_t have = 0;
    while (have < len) {
        unsigned chunk = len - have > (1u << 30) ? 1u << 30 : (unsigned)(len - have);
        int n = gzread(f, (char *)buf + have, chunk);
        if (n < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            snprintf(why, cap, "%s is corrupt: %s", path, zerr == Z_ERRNO ? strerror(errno) : msg);
            return -1;
        }
        if (n == 0) {
            snprintf(why, cap, "%s is truncated: %zu of %zu bytes", path, have, len);
            return -1;
        }
        have += (size_t)n;
    }
    return 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads an IDX file of unsigned bytes with `dims` dimensions; dims[] and *data are out. */
static int read_idx(const char *path, int ndims, uint32_t *dims, uint8_t **data, char *why,
                    size_t cap)
{
    uint8_t header[16];
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        snprintf(why, cap, "unable to open %s: %s", path, errno ? strerror(errno) : "no memory");
        return -1;
    }
    int rc = -1;
    size_t header_len = 4 + 4 * (size_t)ndims, total = 1;
    if (read_exact(f, header, header_len, path, why, cap) != 0)
        goto out;
    if (be32(header) != (0x0800u | (uint32_t)ndims)) {
        snprintf(why, cap, "%s is not an IDX file of %d-dimensional unsigned bytes (magic %08x)",
                 path, ndims, be32(header));
        goto out;
    }
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(header + 4 + 4 * i);
        if (dims[i] == 0 || dims[i] > (1u << 24)) {
            snprintf(why, cap, "%s has an implausible dimension %u", path, dims[i]);
            goto out;
        }
        total *= dims[i];
    }
    if (total > ((size_t)1 << 32) || (*data = malloc(total)) == NULL) {
        snprintf(why, cap, "%s: %zu bytes is too many", path, total);
        goto out;
    }
    if (read_exact(f, *data, total, path, why, cap) != 0) {
        free(*data);
        *data = NULL;
        goto out;
    }
    rc = 0;
out:
    gzclose(f);
    return rc;
}

int fm_dataset_load(const char *dir, int train, fm_dataset_t *out, char *why, size_t why_cap)
{
    const char *prefix = train ? "train" : "t10k";
    char images[4096], labels[4096], name[64];
    uint32_t idims[3], ldims[1];
    fm_dataset_t d = {0};
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    find(dir, name, images, sizeof images);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    find(dir, name, labels, sizeof labels);
    if (read_idx(images, 3, idims, &d.pixels, why, why_cap) != 0 ||
        read_idx(labels, 1, ldims, &d.labels, why, why_cap) != 0)
        goto fail;
    if (idims[0] != ldims[0]) {
        snprintf(why, why_cap, "%s has %u images but %s has %u labels", images, idims[0], labels,
                 ldims[0]);
        goto fail;
    }
    if (idims[1] != 28 || idims[2] != 28) {
        snprintf(why, why_cap, "%s holds %ux%u images, not 28x28", images, idims[1], idims[2]);
        goto fail;
    }
    for (uint32_t i = 0; i < ldims[0]; i++) {
        if (d.labels[i] > 9) {
            snprintf(why, why_cap, "%s: label %u of item %u is not a class 0..9", labels,
                     d.labels[i], i);
            goto fail;
        }
    }
    d.count = (int)idims[0];
    d.rows = (int)idims[1];
    d.cols = (int)idims[2];
    *out = d;
    return 0;
fail:
    fm_dataset_free(&d);
    return -1;
}

void fm_dataset_free(fm_dataset_t *d)
{
    free(d->pixels);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

void fm_dataset_image(const fm_dataset_t *d, int i, float *out)
{
    size_t n = (size_t)d->rows * (size_t)d->cols;
    const uint8_t *p = d->pixels + (size_t)i * n;
    for (size_t k = 0; k < n; k++)
        out[k] = ((float)p[k] / 255.0f - MEAN) / STD;
}
