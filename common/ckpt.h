/* In-memory checkpoints: the files a worker keeps its checkpoints in, and the checks that
 * make them safe to read. Pure: the layout, the checksum, the validation of a slot and the
 * choice of a slot, over bytes the caller has read; ckpt_file.h opens and sizes the files.
 *
 * The contract between the launcher and its workers:
 * - The launcher makes a directory on a tmpfs (/dev/shm/...) that it owns and removes at
 *   the job's end, whatever ends it, and names it in each worker's DDP_CHECKPOINT_DIR. It
 *   outlives the workers' restarts, warm or cold. Without the variable (not run by
 *   ddp-launch) saves and loads do nothing.
 * - Worker rank R (its global RANK) writes two files there and no other: rank<R>.0 and
 *   rank<R>.1, its two slots (double buffering). A save takes the slot that does not hold
 *   the newest complete checkpoint, so a crash in the middle of a save leaves the other
 *   one whole.
 * - After a restart the launcher may set DDP_CHECKPOINT_STEP=S: every rank loads its
 *   checkpoint of step S (the newest that every rank of the round has), or fails. Unset,
 *   the ranks agree on the newest step all of them can load where they can (libddp through
 *   the store; Python through torch.distributed's default group, where it is up), else
 *   each loads its newest. A step names the same point of training on every rank. A load
 *   of step S retires a slot this rank saved after S (the job goes on from S; a later save
 *   must not lose S to a step of the abandoned run): that slot becomes EMPTY.
 * - A slot the launcher puts in place (from a replica, from disk) is written under another
 *   name in the directory and renamed to rank<R>.<s> before rank R's worker starts.
 * - Once a slot is COMPLETE the launcher may checksum it (ddp_ckpt_slot_sum) and write the
 *   sum, then the generation it covers (two 8-byte writes, in that order, at
 *   offsetof(checksum)), which is how it says it did; a reader verifies a slot whose
 *   checksum_generation is its generation. Nothing else in a slot is the launcher's to
 *   write.
 *
 * A slot's life (the state field; the writer is the rank's process, alone):
 *
 *   state     event                                          next
 *   EMPTY     a save takes the slot (state written first)    WRITING
 *   WRITING   every record and the table written, then the    COMPLETE
 *             header's fields; state last (a release store)
 *   WRITING   the save is refused (no room): the file is cut  EMPTY
 *             to its header
 *   WRITING   the writer dies                                 WRITING (the next save takes it)
 *   COMPLETE  a later save takes the slot                     WRITING
 *   COMPLETE  a load of an older step retires it              EMPTY
 *
 * A file is a 128-byte header, the records (each at a multiple of 64 bytes, as torch.save
 * aligns its storages), and the record table (64 bytes an entry) at the end; every field is
 * the host's byte order, little-endian on every host ddp-launch runs on. A reader that
 * shares the file with its writer (the launcher, while the worker may save) copies the
 * header, then what it needs, then reads the generation and state again and drops a copy
 * whose generation or state changed (a sequence lock). It reads with pread, never a shared
 * mapping: a worker may truncate its file at any time (SIGBUS), or change a name between a
 * check and its use. */
#ifndef DDP_COMMON_CKPT_H
#define DDP_COMMON_CKPT_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DDP_CKPT_MAGIC          "DDPCKMEM" /* the header's first 8 bytes */
#define DDP_CKPT_VERSION        1
#define DDP_CKPT_HEADER_BYTES   128
#define DDP_CKPT_ALIGN          64             /* records and the table start at multiples */
#define DDP_CKPT_NAME_BYTES     48             /* a record's name, NUL-terminated */
#define DDP_CKPT_MAX_RECORDS    (1u << 20)     /* a table of at most 64 MiB */
#define DDP_CKPT_MAX_WORLD      (1 << 24)      /* world sizes a header may say */
#define DDP_CKPT_MAX_STEP       (1ll << 62)    /* steps are 0 .. this */
#define DDP_CKPT_MAX_GENERATION (1ull << 62)   /* generations are 0 (none) .. this */
#define DDP_CKPT_SLOT_FILE      "rank%d.%d"    /* printf: the rank, the slot (0 or 1) */
#define DDP_CKPT_REPLICA_FILE   "replica%d.%d" /* another node's rank's, its sender's slot */
#define DDP_CKPT_LANES          4096           /* the checksum's lanes (see ddp_ckpt_sum_t) */

typedef enum {
    DDP_CKPT_EMPTY = 0,    /* holds nothing (a new file, a refused save, a retired step) */
    DDP_CKPT_WRITING = 1,  /* a save is in progress, or died */
    DDP_CKPT_COMPLETE = 2, /* every byte written: loadable */
} ddp_ckpt_state_t;

/* What the records are, for whoever turns a slot into a file on disk. */
typedef enum {
    DDP_CKPT_BUFFERS = 1, /* libddp's named buffers (ddp_checkpoint_save) */
    DDP_CKPT_PICKLE = 2,  /* Python without torch: one record, data.pkl, a plain pickle */
    DDP_CKPT_TORCH = 3,   /* torch.save's records: data.pkl, data/<key>, byteorder */
} ddp_ckpt_kind_t;

typedef struct {
    char magic[8];                /* DDP_CKPT_MAGIC */
    uint32_t version;             /* DDP_CKPT_VERSION */
    uint32_t state;               /* ddp_ckpt_state_t */
    uint64_t generation;          /* this save's number among the rank's saves, from 1 */
    int64_t step;                 /* the saver's step, 0 .. DDP_CKPT_MAX_STEP */
    uint32_t world_size, rank;    /* of the job that saved it */
    uint32_t kind;                /* ddp_ckpt_kind_t */
    uint32_t records;             /* entries in the table */
    uint64_t table_offset;        /* where the table starts: after the last record */
    uint64_t used_bytes;          /* header, records and table; the file may be longer */
    uint64_t checksum;            /* the launcher's ddp_ckpt_slot_sum, once it wrote it */
    uint64_t checksum_generation; /* the generation `checksum` is of; 0: none */
    int64_t saved_ns;             /* when the save completed, CLOCK_REALTIME */
    uint8_t reserved[40];         /* zero */
} ddp_ckpt_header_t;

typedef struct {
    char name[DDP_CKPT_NAME_BYTES]; /* [A-Za-z0-9._/-], not "/"-led, no ".." part */
    uint64_t offset;                /* from the file's start, a multiple of DDP_CKPT_ALIGN */
    uint64_t size;
} ddp_ckpt_record_t;

_Static_assert(sizeof(ddp_ckpt_header_t) == DDP_CKPT_HEADER_BYTES, "the header's size");
_Static_assert(sizeof(ddp_ckpt_record_t) == 64, "a table entry's size");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the layout is little-endian");
/* The offsets the Python module (worker/python/ddp_launch/checkpoint.py's struct format) and
 * the tests write at. */
_Static_assert(offsetof(ddp_ckpt_header_t, state) == 12 &&
                   offsetof(ddp_ckpt_header_t, world_size) == 32 &&
                   offsetof(ddp_ckpt_header_t, records) == 44 &&
                   offsetof(ddp_ckpt_header_t, table_offset) == 48 &&
                   offsetof(ddp_ckpt_header_t, checksum) == 64 &&
                   offsetof(ddp_ckpt_header_t, checksum_generation) == 72,
               "the header's fields where others write them");

/* The checksum: 64 bits, at memory speed. The data is taken as little-endian 8-byte words
 * (the last one padded with zero bytes); word i goes to lane i % DDP_CKPT_LANES, which
 * takes it as lane = (lane ^ word) * K; lane ^= lane >> 29. The lanes start from the seed
 * and their number, and are folded into one value with the length. Independent lanes keep
 * a CPU's multipliers busy (memory bandwidth, not latency, is the limit); that many lanes
 * let numpy compute the same sum a row of 4096 words at a time (ddp_launch.checkpoint). It
 * detects torn and corrupted data, not forgeries. State of 32 KiB: in an allocation or on
 * a thread's stack. */
typedef struct {
    uint64_t lane[DDP_CKPT_LANES];
    uint64_t seed, length;
    uint8_t partial[8]; /* the bytes of a word not complete yet */
} ddp_ckpt_sum_t;

void ddp_ckpt_sum_init(ddp_ckpt_sum_t *sum, uint64_t seed);
/* Adds `len` bytes: the same sum whatever the split of the data into calls. */
void ddp_ckpt_sum_update(ddp_ckpt_sum_t *sum, const void *data, size_t len);
uint64_t ddp_ckpt_sum_final(const ddp_ckpt_sum_t *sum);
/* All three at once (the state on the stack). */
uint64_t ddp_ckpt_checksum(const void *data, size_t len, uint64_t seed);

/* The seed of a slot's checksum: the sum of its header with state, checksum and
 * checksum_generation zeroed, so that every other field of the header is covered too. A
 * slot's checksum is ddp_ckpt_checksum(file + DDP_CKPT_HEADER_BYTES, used_bytes - HEADER,
 * ddp_ckpt_header_seed(header)). */
uint64_t ddp_ckpt_header_seed(const ddp_ckpt_header_t *header);

/* Whether `header` can be a slot's (of a file of `file_size` bytes): the magic, the
 * version, a known state, a generation in range, and for any state but EMPTY every count,
 * kind and offset in range (rank < world size, the table after the header and within used_bytes,
 * used_bytes within the file). 0, or DDP_EPARSE with what is wrong in `why` (may be NULL). */
int ddp_ckpt_header_check(const ddp_ckpt_header_t *header, uint64_t file_size, ddp_buf_t *why);

/* A complete slot, checked, its pointers into the bytes given to ddp_ckpt_parse. */
typedef struct {
    const ddp_ckpt_header_t *header;
    const ddp_ckpt_record_t *records; /* header->records entries */
    const uint8_t *base;              /* the file's first byte */
} ddp_ckpt_t;

/* Checks the `size` bytes of a slot file at `data` (at least used_bytes of it; aligned to
 * 8): a COMPLETE header that ddp_ckpt_header_check takes, and every record named as
 * ddp_ckpt_record_t says, in order of offset, not overlapping, between the header and the
 * table. 0 with *out; DDP_EPARSE with `why` (a slot being written is one: "it is being
 * written, or its save died"). The checksum is not looked at: ddp_ckpt_verify. Pass a copy
 * the writer cannot change while it is used. */
int ddp_ckpt_parse(const void *data, size_t size, ddp_ckpt_t *out, ddp_buf_t *why);

/* The record named `name`, or NULL. */
const ddp_ckpt_record_t *ddp_ckpt_find(const ddp_ckpt_t *ckpt, const char *name);

/* A parsed slot's checksum, as the launcher writes it. */
uint64_t ddp_ckpt_slot_sum(const ddp_ckpt_t *ckpt);

/* Whether the slot's data is what was checksummed: 0 when it is, or when there is no
 * checksum of this generation to compare with (*verified says which; may be NULL);
 * DDP_EPARSE when it differs (said in `why`). */
int ddp_ckpt_verify(const ddp_ckpt_t *ckpt, bool *verified, ddp_buf_t *why);

/* The slots' headers as read (NULL: no file, or one ddp_ckpt_header_check refuses). */
typedef const ddp_ckpt_header_t *ddp_ckpt_slots_t[2];

/* The slot a save takes (0 or 1): not the one holding the newest complete checkpoint (the
 * highest generation); of two that are not complete, 0. *generation: the save's, one more
 * than any the slots hold. */
int ddp_ckpt_slot_to_write(const ddp_ckpt_slots_t slots, uint64_t *generation);

/* The slot a load reads: with step >= 0 the complete one of that step (the newer if both
 * are), else the newest complete; -ENOENT when there is none. */
int ddp_ckpt_slot_to_load(const ddp_ckpt_slots_t slots, int64_t step);

/* Whether `name` may name a record (see ddp_ckpt_record_t). */
bool ddp_ckpt_name_ok(const char *name);

/* `offset` rounded up to DDP_CKPT_ALIGN; UINT64_MAX when that overflows. */
uint64_t ddp_ckpt_align(uint64_t offset);

#endif
