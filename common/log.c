/* Logging to a file descriptor, one write(2) per line (see log.h). */
#include "log.h"

#include "error.h"
#include "io.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int ddp_log_parse_level(const char *text, ddp_log_level_t *out)
{
    static const struct {
        const char *name;
        ddp_log_level_t level;
    } names[] = {
        {"error", DDP_LOG_ERROR}, {"warning", DDP_LOG_WARN}, {"warn", DDP_LOG_WARN},
        {"info", DDP_LOG_INFO},   {"debug", DDP_LOG_DEBUG},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(text, names[i].name) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return DDP_EPARSE;
}

void ddp_log_init(ddp_log_t *log, const char *name, ddp_log_level_t level)
{
    log->name = name;
    log->level = level;
    log->fd = 2;
    log->open_line = NULL;
}

void ddp_vlog(const ddp_log_t *log, ddp_log_level_t level, const char *fmt, va_list ap)
{
    static const char *const tags[] = {"error: ", "warning: ", "", "debug: "};
    char line[4096];
    if (level > log->level)
        return;
    bool after = log->open_line != NULL && atomic_exchange(log->open_line, false);
    int head = snprintf(line, sizeof line, "%s%s: %s", after ? "\n" : "", log->name, tags[level]);
    if (head < 0)
        return;
    size_t len = (size_t)head;
    int body = vsnprintf(line + len, sizeof line - len, fmt, ap);
    if (body < 0)
        return;
    len += (size_t)body;
    if (len >= sizeof line - 1) {
        /* Too long for one line: keep what fits and say it was cut. */
        static const char cut[] = "...";
        len = sizeof line - sizeof cut;
        memcpy(line + len, cut, sizeof cut - 1);
        len += sizeof cut - 1;
    }
    line[len++] = '\n';
    (void)ddp_write_all(log->fd, line, len);
}

void ddp_log(const ddp_log_t *log, ddp_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddp_vlog(log, level, fmt, ap);
    va_end(ap);
}
