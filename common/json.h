/* A small JSON reader and string escaper, for PyTorch's error.json files.
 *
 * The reader parses a whole document into a tree (depth at most DDP_JSON_MAX_DEPTH);
 * the input is untrusted: malformed text is DDP_EPARSE, never a crash. The escaper
 * writes a JSON string literal. No global state; the tree is freed as a whole. */
#ifndef DDP_COMMON_JSON_H
#define DDP_COMMON_JSON_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>

#define DDP_JSON_MAX_DEPTH 64

typedef enum {
    DDP_JSON_NULL,
    DDP_JSON_BOOL,
    DDP_JSON_NUMBER,
    DDP_JSON_STRING,
    DDP_JSON_ARRAY,
    DDP_JSON_OBJECT,
} ddp_json_type_t;

typedef struct ddp_json_s ddp_json_t;

/* Parses `len` bytes. On success *out is the root (free with ddp_json_free).
 * Returns 0, DDP_EPARSE or -ENOMEM. */
int ddp_json_parse(const char *text, size_t len, ddp_json_t **out);
void ddp_json_free(ddp_json_t *value);

ddp_json_type_t ddp_json_type(const ddp_json_t *value);

/* The member `key` of an object (the last one if repeated); NULL when `value` is NULL,
 * not an object, or has no such member. */
const ddp_json_t *ddp_json_get(const ddp_json_t *value, const char *key);

/* The first element of an array or member of an object, and the one after `value` in its
 * array or object; NULL at the end, or when `value` is NULL or no container. */
const ddp_json_t *ddp_json_first(const ddp_json_t *value);
const ddp_json_t *ddp_json_next(const ddp_json_t *value);

/* The text of a string (NUL-terminated; may hold NULs, see *len), or NULL when not a
 * string. */
const char *ddp_json_string(const ddp_json_t *value, size_t *len);

/* The value of a number; false when not a number. */
bool ddp_json_number(const ddp_json_t *value, double *out);

/* Whether `value` is the boolean true (false for false, NULL, or any other type). */
bool ddp_json_true(const ddp_json_t *value);

/* Appends `text` (len bytes) as a quoted JSON string literal. 0 or -ENOMEM. */
int ddp_json_append_string(ddp_buf_t *out, const char *text, size_t len);

#endif
