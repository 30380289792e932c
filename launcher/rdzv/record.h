/* What the launchers of a multi-node job and its coordinator write to each other in the
 * store: the key names and the texts of the records, as pure functions.
 *
 * Every key is under ddp-launch/rdzv/<run id>/ (kept when a round's keys are cleared).
 * A launcher (its id: host-pid) writes
 *   join/<id>            "seq nnodes_min nnodes_max node_rank nproc max_restarts host":
 *                        ready for the next round (node_rank -1: c10d assigns it)
 *   report/<id>          "round failed|succeeded message": its workers' end
 *   beat/<id>            ADD, every keep_alive_interval
 *   abort                "node R (host): why": the job ends on every node
 *   pause/<id>           "pause R" (Ctrl-Z there while round R runs) or "resume R"
 *   leave/<id>           why it leaves the job alone (--exclude-after): the others go on
 * and the coordinator (the launcher that serves the store) answers
 *   coordinator          its id, set before any client can connect
 *   assign/<id>/<seq>    the launcher's place in the round it joined, or the job's end,
 *                        or "pause ROUND K host|node ID WHO" while it waits (a pause):
 *                        then its answer comes at assign/<id>/<seq>.<pauses told>
 *   <round>/outcome      how the round ends: stop (failed or re-form), done, or end
 *   <round>/news         the outcome again, or "hang" from a hang's reporter, or "pause K
 *                        host|node ID WHO" (Ctrl-Z on the store's host, or on node ID):
 *                        what running launchers wait on; after pause K it is
 *                        <round>/news.K
 *   <round>/resume.K     pause K is over (every node that paused it continued)
 * and during a hang report (hang.h) the launchers write
 *   <round>/hang         ADD by each launcher that found the hang: the first reports
 *   <round>/hang/<node>  the rows of node <node>'s workers
 *   status               what the forming round waits for, or what runs, for the waiting
 *                        launchers' notes
 *   left                 every other launcher has gone (the coordinator may go too)
 * Values read from the store may be anything: parsing checks every field. */
#ifndef DDP_LAUNCHER_RDZV_RECORD_H
#define DDP_LAUNCHER_RDZV_RECORD_H

#include "buf.h"
#include "config/config.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define DDP_RDZV_ID_MAX  96
#define DDP_RDZV_MSG_MAX 1536

/* The words of the mailbox between a launcher's loop and its rendezvous thread (rdzv.h):
 * the commands the thread hands the loop, the world of a round, the events the loop posts. */
typedef enum {
    DDP_RDZV_CMD_NONE,
    DDP_RDZV_CMD_START,  /* start the workers of `world` */
    DDP_RDZV_CMD_STOP,   /* another node failed (message): stop the workers */
    DDP_RDZV_CMD_FINISH, /* the job is over: exit with `exit_code` (message: why) */
    /* A hang report (hang.h): another node asks for this node's rows (post them with
     * ddp_rdzv_post_hang); this node reports and every node's rows are in (take them with
     * ddp_rdzv_take_hang_rows); or this node's rows are in the store and another node
     * reports. */
    DDP_RDZV_CMD_HANG,
    DDP_RDZV_CMD_HANG_REPORT,
    DDP_RDZV_CMD_HANG_DONE,
    /* A node was stopped (Ctrl-Z there; message: which): stop the workers; it continued:
     * continue them. The exit code is 1 when that node is this one. */
    DDP_RDZV_CMD_PAUSE,
    DDP_RDZV_CMD_CONTINUE,
    /* --rdzv-backend=etcd: the store failed us mid-job (message: how); the thread has ended,
     * and the job goes on at the store of the launcher etcd elects next. */
    DDP_RDZV_CMD_STORE_LOST,
    /* As STORE_LOST, where the store etcd names was judged from this node before it joined:
     * it refused the connection, or did not answer as a ddp-launch store (in time): its
     * launcher's lease is read before it is ended (that launcher may live, unreachable
     * from here alone). */
    DDP_RDZV_CMD_STORE_UNANSWERED,
} ddp_rdzv_cmd_t;

typedef struct {
    int round;       /* the rendezvous round: its store keys */
    int restarts;    /* TORCHELASTIC_RESTART_COUNT: rounds begun after a failure */
    int node_rank;   /* GROUP_RANK: given (static) or assigned (c10d) */
    int nnodes;      /* GROUP_WORLD_SIZE */
    int rank_offset; /* the global rank of this node's local rank 0 */
    int world_size;  /* the workers of every node */
    int nenv;        /* node 0's --env entries (at the store's key env; none: not read) */
} ddp_rdzv_world_t;

typedef enum {
    DDP_RDZV_EV_FAILED,    /* a local worker failed (message): the round must stop */
    DDP_RDZV_EV_STOPPED,   /* after a failure, every local worker has ended */
    DDP_RDZV_EV_SUCCEEDED, /* every local worker of the round succeeded */
    DDP_RDZV_EV_ABORT,     /* this launcher ends (ddp_rdzv_post_abort): so does the job */
} ddp_rdzv_event_t;

/* This node's name in the rendezvous (its messages, its id): --local-addr, else its host
 * name, into host[cap]. */
void ddp_rdzv_own_host(const ddp_launch_config_t *cfg, char *host, size_t cap);

/* This launcher's id among all: "host-pid-nonce", the nonce 64 random bits drawn once per
 * process (16 hex digits), so that two launchers with one host name and pid (containers
 * with --network=host, each launcher PID 1) are two; the same in every call. */
void ddp_rdzv_launcher_id(char id[DDP_RDZV_ID_MAX], const char *host);

/* "ddp-launch/rdzv/<run id>/" then the formatted rest, into key[cap]. */
/* The key, outside every job's prefix, that holds the run id of the job a store's
 * launcher serves: a launcher of another job reads it to name both. */
#define DDP_RDZV_SERVED_KEY "ddp-launch/rdzv-served" /* under DDP_STORE_KEEP: kept */

void ddp_rdzv_key(char *key, size_t cap, const char *run_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* What a running round's launchers wait on after `pauses` pauses of the job
 * (ddp_rdzv_coord_pause): <round>/news, then <round>/news.<pauses>. */
void ddp_rdzv_news_key(char *key, size_t cap, const char *run_id, int round, int pauses);
/* Where a waiting launcher's answer to join `seq` comes: assign/<id>/<seq>, or after the
 * store's host told it of `pauses` pauses (Ctrl-Z on a node), assign/<id>/<seq>.<pauses>. */
void ddp_rdzv_assign_key(char *key, size_t cap, const char *run_id, const char *id, int seq,
                         int pauses);

typedef struct {
    int seq; /* the launcher's joins so far: its answer comes at assign/<id>/<seq> */
    int nnodes_min, nnodes_max;
    int node_rank; /* static: --node-rank; c10d: -1 */
    int nproc, max_restarts;
    char host[256];
} ddp_rdzv_join_t;

int ddp_rdzv_join_format(const ddp_rdzv_join_t *join, ddp_buf_t *out);
/* false when the text is not a join record. */
bool ddp_rdzv_join_parse(const void *text, size_t len, ddp_rdzv_join_t *out);

typedef enum {
    DDP_RDZV_VERDICT_WORLD,       /* assign: start the round with this world */
    DDP_RDZV_VERDICT_STOP_FAILED, /* outcome: a failure; the next round spends a restart */
    DDP_RDZV_VERDICT_STOP_REFORM, /* outcome: the nodes changed (c10d); no restart spent */
    DDP_RDZV_VERDICT_DONE,        /* outcome: every node's workers succeeded */
    DDP_RDZV_VERDICT_END,         /* assign or outcome: the job ends with exit_code */
} ddp_rdzv_verdict_kind_t;

typedef struct {
    ddp_rdzv_verdict_kind_t kind;
    ddp_rdzv_world_t world; /* WORLD */
    int exit_code;          /* END */
    char message[DDP_RDZV_MSG_MAX];
} ddp_rdzv_verdict_t;

int ddp_rdzv_verdict_format(const ddp_rdzv_verdict_t *verdict, ddp_buf_t *out);
bool ddp_rdzv_verdict_parse(const void *text, size_t len, ddp_rdzv_verdict_t *out);

typedef struct {
    int round;
    bool failed; /* else succeeded */
    char message[DDP_RDZV_MSG_MAX];
} ddp_rdzv_report_t;

int ddp_rdzv_report_format(const ddp_rdzv_report_t *report, ddp_buf_t *out);
bool ddp_rdzv_report_parse(const void *text, size_t len, ddp_rdzv_report_t *out);

/* The id of the launcher of node rank i, for ddp_rdzv_round_record_format. */
typedef const char *(*ddp_rdzv_member_id_fn)(void *ctx, int i);

/* etcd's record of the job's last round, which a coordinator that takes the job over
 * resumes from: "round R restarts K ranks ID0 ID1 ..." (the launchers by node rank). */
int ddp_rdzv_round_record_format(ddp_buf_t *out, int round, int restarts,
                                 ddp_rdzv_member_id_fn id_of, void *ctx, int n);
/* The most a round record's round and restarts may be: the coordinator that resumes from it
 * counts both on (the next round is R+1, each after it one more), and a count near INT_MAX
 * would wrap. A record's counts come from etcd, where anyone may have written them. */
#define DDP_RDZV_RECORD_COUNT_MAX (INT_MAX / 2)

/* 0 with *round, *restarts and *ranks (within `text`: the ids, space-separated), or
 * DDP_EPARSE (a count over DDP_RDZV_RECORD_COUNT_MAX too). */
int ddp_rdzv_round_record_parse(const char *text, int *round, int *restarts, const char **ranks);

#endif
