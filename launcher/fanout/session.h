/* A node started over ssh by --hosts ends with its ssh session. */
#ifndef DDP_LAUNCHER_FANOUT_SESSION_H
#define DDP_LAUNCHER_FANOUT_SESSION_H

#include "log.h"

#include <stdbool.h>
#include <uv.h>

typedef struct {
    uv_poll_t poll;
    int fd; /* the session's stdin, kept by the launcher alone; -1 when not watched */
    bool watching;
    double since; /* when the watch began (monotonic s) */
    const ddp_log_t *log;
} ddp_session_t;

/* The byte the --hosts supervisor writes to a node's ssh stdin before closing it (its end
 * of the job): the node's hangup, however soon after its start it comes. */
#define DDP_SESSION_END '\x04'

/* Where DDP_LAUNCH_SSH_NODE=1 (set by the --hosts supervisor on the nodes it starts;
 * unset here so that the workers do not inherit it): takes stdin, the ssh session's
 * pipe, for the launcher alone (the workers get /dev/null, as under ssh -n) and watches
 * it on `loop`. Its end (the supervisor gone, however it ended, or closing the sessions
 * after node 0 ended) is taken as a hangup: one line, then SIGHUP to this process, which
 * stops the job as a received SIGHUP does; so is DDP_SESSION_END read from it. An end in
 * the first 2 seconds with no DDP_SESSION_END before it is a command that does not pass its
 * input on (ssh -n, or another DDP_LAUNCH_SSH): said, and the watch ends. Elsewhere a
 * no-op. */
void ddp_session_watch(uv_loop_t *loop, ddp_session_t *s, const ddp_log_t *log);

/* Stops watching and closes the descriptor (with the loop's other handles). */
void ddp_session_close(ddp_session_t *s);

#endif
