/* The launcher's event log (see events.h). */
#include "output/events.h"

#include "io.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int ddp_events_open(ddp_events_t *ev, const char *spec, const char *run_id, int node_rank)
{
    memset(ev, 0, sizeof *ev);
    ev->fd = -1;
    ev->run_id = run_id;
    ev->node_rank = node_rank;
    if (gethostname(ev->host, sizeof ev->host - 1) != 0)
        strcpy(ev->host, "localhost");
    if (spec == NULL || strcmp(spec, "null") == 0)
        return 0;
    if (strcmp(spec, "console") == 0) {
        ev->fd = 2;
        return 0;
    }
    ev->fd = open(spec + 5, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    ev->own_fd = ev->fd >= 0;
    return ev->fd >= 0 ? 0 : -errno;
}

void ddp_events_close(ddp_events_t *ev)
{
    if (ev->own_fd)
        close(ev->fd);
    ev->fd = -1;
    ev->own_fd = false;
}

void ddp_events_int(ddp_buf_t *fields, const char *key, long long value)
{
    ddp_buf_printf(fields, ", \"%s\": %lld", key, value);
}

void ddp_events_double(ddp_buf_t *fields, const char *key, double value)
{
    ddp_buf_printf(fields, ", \"%s\": %.6g", key, value);
}

void ddp_events_str(ddp_buf_t *fields, const char *key, const char *value)
{
    ddp_buf_printf(fields, ", \"%s\": ", key);
    ddp_json_append_string(fields, value, strlen(value));
}

void ddp_events_emit(const ddp_events_t *ev, const char *name, const ddp_buf_t *fields)
{
    if (ev->fd < 0)
        return;
    struct timespec now;
    ddp_buf_t line = DDP_BUF_INIT;
    clock_gettime(CLOCK_REALTIME, &now);
    ddp_buf_printf(&line, "{\"time\": %lld.%06ld, \"event\": \"%s\"", (long long)now.tv_sec,
                   now.tv_nsec / 1000, name);
    ddp_events_str(&line, "run_id", ev->run_id != NULL ? ev->run_id : "none");
    ddp_events_str(&line, "host", ev->host);
    ddp_events_int(&line, "node", ev->node_rank);
    if (fields != NULL && fields->len > 0)
        ddp_buf_append(&line, fields->data, fields->len);
    ddp_buf_puts(&line, "}\n");
    (void)ddp_write_all(ev->fd, line.data, line.len);
    ddp_buf_free(&line);
}
