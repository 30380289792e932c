/* The launcher's event log (--event-log-handler): one JSON line for every launcher event,
 * for a scheduler or a dashboard to read (fields in ddp-launch(1), EVENT LOG).
 *
 *   null         nothing (the default)
 *   console      to ddp-launch's stderr
 *   file:PATH    appended to PATH (created 0644)
 *
 * Each line is one write(2), so lines of several launchers sharing a file never mix. */
#ifndef DDP_LAUNCHER_OUTPUT_EVENTS_H
#define DDP_LAUNCHER_OUTPUT_EVENTS_H

#include "buf.h"

#include <stdbool.h>

typedef struct {
    int fd; /* -1: null */
    bool own_fd;
    const char *run_id;
    int node_rank; /* -1 until known (elastic) */
    char host[256];
} ddp_events_t;

/* Opens the handler of `spec` (already valid). 0 or -errno (the file cannot be opened). */
int ddp_events_open(ddp_events_t *ev, const char *spec, const char *run_id, int node_rank);
void ddp_events_close(ddp_events_t *ev);

/* One event: {"time": <unix s>, "event": name, "run_id", "host", "node", then `fields`}
 * where `fields` is ",\"key\": value" text made with ddp_events_int/double/str (may be NULL). */
void ddp_events_emit(const ddp_events_t *ev, const char *name, const ddp_buf_t *fields);
void ddp_events_int(ddp_buf_t *fields, const char *key, long long value);
void ddp_events_double(ddp_buf_t *fields, const char *key, double value);
void ddp_events_str(ddp_buf_t *fields, const char *key, const char *value);

#endif
