/* The rendezvous thread's state, shared by rdzv.c (the mailbox between the thread and
 * the agent's loop) and rdzv/node.c (what the thread does: the launcher's phases). */
#ifndef DDP_LAUNCHER_RDZV_NODE_H
#define DDP_LAUNCHER_RDZV_NODE_H

#include "config/config.h"
#include "log.h"
#include "rdzv/record.h"
#include "store_client.h"

#include <pthread.h>
#include <uv.h>

/* What the loop has posted since the thread last looked. */
typedef struct {
    bool failed, stopped, succeeded, aborted, quit;
    int abort_signal; /* aborted: the signal this launcher received */
    char message[1024];
    char *hang_rows;    /* this node's hang rows (owned), or NULL */
    bool hang_initiate; /* ... found here: the first such node reports */
    double hang_wait;   /* s the reporter waits for every node's rows */
    char *failures;     /* this node's failures for the job's report (owned), or NULL */
    char *stragglers;   /* this node's straggler rows (owned), or NULL */
    int pause_request;  /* Ctrl-Z here: 1 pause the job, 2 it continued; 0 none (the last) */
    char leave[400];    /* this launcher leaves the job alone: why; "" it does not */
} ddp_rdzv_events_t;

typedef struct ddp_rdzv_s ddp_rdzv_t;

struct ddp_rdzv_s {
    const ddp_launch_config_t *cfg;
    const ddp_log_t *log;
    uv_async_t async;
    void (*on_command)(void *ctx);
    void *ctx;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mutex;
    int wake_fd;  /* eventfd: readable while the loop has posted something */
    int end_fd;   /* eventfd: readable once this launcher ends (its abort or quit posted):
                   * a health check waits on it */
    int guard_fd; /* the orphan guard's pipe (guard.h), for the health checks; or -1 */

    /* Thread to loop, under the mutex: node 0's --env entries ("NAME=VALUE"), read at each
     * round's assignment, before the START that uses them. */
    char **job_env;
    char *hang_rows;         /* CMD_HANG_REPORT's text (owned until taken) */
    bool failures_published; /* this node's failures are in the store for the job's report */
    bool straggler_named;    /* the store host named this node's rank a straggler */
    bool unhealthy;          /* this node failed its health check before a round */
    bool left;               /* the loop posted this launcher's leave */

    /* Loop to thread, under the mutex. */
    ddp_rdzv_events_t events;
    bool closed;
    /* Thread to loop, under the mutex: the thread waits for this node's workers to end.
     * Only then does a STOPPED post wake it; otherwise it takes the post with the next
     * (a re-form's end of the old workers costs no store round trips while the thread
     * waits for its place). */
    bool awaits_stop;

    /* Thread to loop, under the mutex: commands in order (a STOP may follow a START
     * before the loop has taken it). */
    struct {
        ddp_rdzv_cmd_t cmd;
        ddp_rdzv_world_t world;
        int exit_code;
        char message[DDP_RDZV_MSG_MAX];
    } queue[8];
    int head, count;

    /* The thread's own. */
    char id[DDP_RDZV_ID_MAX];
    char host[256];
    int seq;                    /* joins so far */
    int round;                  /* the round it last started (its failures' key), -1 none */
    int node_rank;              /* its node rank in that round, -1 none */
    int pauses;                 /* the running round's pauses of the store's host so far */
    uint64_t last_note;         /* the hash of the status it said last (said once each) */
    double next_beat;           /* when the next heartbeat is due */
    bool local_running;         /* this node's workers of the current round have not all ended */
    ddp_store_client_t *client; /* joins, reads, reports and heartbeats */
    ddp_store_client_t *waiter; /* the thread's WAITs, outstanding across heartbeats */
    bool beat_failed;           /* the last wait on the waiter ended in a failed beat */
    bool waiter_failed;         /* the store was lost on the waiter (its error says why) */
};

/* The thread's body (rdzv/node.c). */
void *ddp_rdzv_node_run(void *arg);

/* The thread's side of the mailbox (node.c; the loop's is rdzv.c). A command for the loop,
 * queued and signalled. */
void ddp_rdzv_command(ddp_rdzv_t *r, ddp_rdzv_cmd_t cmd, const ddp_rdzv_world_t *world,
                      int exit_code, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Takes what the loop has posted (and empties the wake fd). */
ddp_rdzv_events_t ddp_rdzv_take_events(ddp_rdzv_t *r);
bool ddp_rdzv_quitting(ddp_rdzv_t *r);
/* Whether this launcher ends: quitting, or an abort posted and not yet taken. */
bool ddp_rdzv_ending(ddp_rdzv_t *r);
/* Whether a STOPPED post is to wake the thread (see awaits_stop). */
void ddp_rdzv_awaiting_stop(ddp_rdzv_t *r, bool awaits);
/* The pause request posted since the last look (1 pause, 2 resume), or 0; taken alone,
 * the other posts left for later. */
int ddp_rdzv_take_pause_request(ddp_rdzv_t *r);

#endif
