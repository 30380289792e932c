/* Line-oriented logging for ddp-launch and libddp.
 *
 * A logger is a small value owned by whoever logs (the launcher's config, a worker
 * context); nothing here is global. Each message is formatted into one buffer and
 * written with a single write(2), so lines from concurrent writers never mix. */
#ifndef DDP_COMMON_LOG_H
#define DDP_COMMON_LOG_H

#include <stdarg.h>
#include <stdatomic.h>

typedef enum {
    DDP_LOG_ERROR = 0,
    DDP_LOG_WARN = 1,
    DDP_LOG_INFO = 2,
    DDP_LOG_DEBUG = 3,
} ddp_log_level_t;

typedef struct ddp_log_s {
    const char *name;      /* printed first on every line, e.g. "ddp-launch" */
    ddp_log_level_t level; /* messages above this level are dropped */
    int fd;                /* where lines go (2 unless a test says otherwise) */
    /* NULL, or a flag set while `fd` shows an unfinished line of another writer (the
     * launcher's console writer: a worker's prompt): a message then ends that line first,
     * and clears the flag to say so. */
    atomic_bool *open_line;
} ddp_log_t;

/* Parses "error", "warning"/"warn", "info" or "debug". Returns 0 or DDP_EPARSE. */
int ddp_log_parse_level(const char *text, ddp_log_level_t *out);

/* Sets up a logger writing to stderr at `level`. `name` must outlive it. */
void ddp_log_init(ddp_log_t *log, const char *name, ddp_log_level_t level);

void ddp_log(const ddp_log_t *log, ddp_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ddp_vlog(const ddp_log_t *log, ddp_log_level_t level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#define ddp_log_error(log, ...) ddp_log((log), DDP_LOG_ERROR, __VA_ARGS__)
#define ddp_log_warn(log, ...)  ddp_log((log), DDP_LOG_WARN, __VA_ARGS__)
#define ddp_log_info(log, ...)  ddp_log((log), DDP_LOG_INFO, __VA_ARGS__)
#define ddp_log_debug(log, ...) ddp_log((log), DDP_LOG_DEBUG, __VA_ARGS__)

#endif
