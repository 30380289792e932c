/* torch.save's file format, written: a ZIP of stored (uncompressed) entries in one folder,
 * the "archive", each entry's data at a multiple of 64 bytes as torch's own writer puts it
 * (padding in the local header's extra field, which its reader relies on to map storages),
 * a CRC-32 for every entry (zlib's), and ZIP64's fields where a size or an offset reaches
 * 4 GiB. torch.load reads it (torch 1.6 and later; tested with 1.13 and 2.6), as do unzip
 * and Python's zipfile.
 *
 * Written to a file descriptor front to back, each entry's CRC computed before its header;
 * blocking I/O, for a thread of its own, never the launcher's loop. In its own library
 * (ddptorchzip), with zlib, so that libddp does not need zlib. */
#ifndef DDP_COMMON_TORCHZIP_H
#define DDP_COMMON_TORCHZIP_H

#include "buf.h"
#include "ckpt.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name; /* within the archive: "data.pkl", "data/0", "version" */
    const void *data;
    uint64_t size;
} ddp_torchzip_entry_t;

typedef struct {
    const char *archive; /* the folder of every entry; NULL: "archive", as torch 2.x names it */
    /* An entry of this size or more, or at this offset or more, gets ZIP64's fields, and so
     * does the end of the central directory past it; 0: 0xFFFFFFFF, where ZIP needs them.
     * Tests make it small, to have torch read ZIP64 without writing 4 GiB. */
    uint64_t zip64_from;
} ddp_torchzip_options_t;

/* Writes the `n` entries, in order, as one torch.save file on `fd` (from its current
 * position, taken as the file's start). `options` may be NULL. 0, or -errno of a write
 * (said in `why`), or DDP_EUSAGE for a name that cannot be one (empty, too long). The
 * entries' names are the caller's: torch.load wants data.pkl, version and data/<key>. */
int ddp_torchzip_write(int fd, const ddp_torchzip_entry_t *entries, size_t n,
                       const ddp_torchzip_options_t *options, ddp_buf_t *why);

/* A parsed slot of kind DDP_CKPT_TORCH or DDP_CKPT_PICKLE as torch.save writes that state:
 * its records, and a "version" record (file format 3) where it has none. DDP_EUSAGE for a
 * slot of libddp's buffers, which torch cannot read; else as ddp_torchzip_write. */
int ddp_torchzip_write_slot(int fd, const ddp_ckpt_t *ckpt, const ddp_torchzip_options_t *options,
                            ddp_buf_t *why);

#endif
