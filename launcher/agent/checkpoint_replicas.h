/* In-memory checkpoints' replicas on other nodes (agent/checkpoint_replicas.c): each
 * launcher of a multi-node job listens on a TCP port of its own (its address published with
 * its record of the round, agent/checkpoint_common.h) and keeps what other nodes send it as
 * replica<R>.<s> in its checkpoint directory, verified against the slot's checksum before it
 * is renamed into place (a torn or wrong transfer is dropped and said). A sender thread
 * sends each of this node's ranks' newest complete, checksummed slot to the round's next N
 * nodes, at a bounded rate, once told a slot was summed or a round set (it sleeps
 * meanwhile: a job that saves nothing costs no wake-ups). Both threads (and the receiver's, one a
 * connection, capped) are blocking-socket threads that poll a stop eventfd with every wait (a stop
 * acts at once) and bound every read and write in time, a request line and a transfer as a whole
 * too; the functions here run on the agent's loop and only take a mutex. The wire: "DDPREPL1 PUT
 * KEY RANK SLOT BYTES RATE\n", BYTES of the slot file, its generation again as 8 bytes (0: it
 * changed while sent), then one byte back: 'k' kept, 'n' not; or "DDPREPL1 GET KEY RANK
 * STEP RATE\n", answered "DDPREPL1 BYTES\n" (0: none held), the bytes and the generation
 * again. RATE is the asker's --checkpoint-replica-rate, taken only by a node without one of
 * its own: a transfer must come at a sixteenth of the job's rate (the lowest the round's
 * records publish, ddp_checkpoint_replicas_job_rate) on the whole, shared by the PUTs under
 * way here, DDP_CHECKPOINT_REPLICA_MIN_RATE at least, so a request's word cannot lower it.
 * KEY is the listener's secret, random, 128
 * bits in hex, published with its address in the round's store: a request without it is
 * refused before anything is read or written (compared in constant time), so that only who
 * can read the job's store reaches the replicas (the bytes go in plain text). */
#ifndef DDP_LAUNCHER_AGENT_CHECKPOINT_REPLICAS_H
#define DDP_LAUNCHER_AGENT_CHECKPOINT_REPLICAS_H

#include "buf.h"
#include "ckpt.h"
#include "log.h"

#include <stdbool.h>
#include <stdint.h>

#define DDP_REPLICA_FILE      DDP_CKPT_REPLICA_FILE /* printf: the rank, the sender's slot */
#define DDP_REPLICA_KEY_CHARS 32                    /* a listener's secret: 128 bits in hex */

/* A launcher's replica port, as its record says it. */
typedef struct {
    char host[64];                       /* numeric; "" none */
    int port;                            /* 0: none */
    char key[DDP_REPLICA_KEY_CHARS + 1]; /* its secret, [0-9a-f]; "" none */
    uint64_t rate;                       /* its --checkpoint-replica-rate (0: not said) */
} ddp_replica_peer_t;

/* A replica a node holds: rank `rank`'s checkpoint of `step` (node: which node, where that
 * is said). */
typedef struct {
    int node, rank;
    int64_t step;
} ddp_replica_step_t;

typedef struct ddp_checkpoint_replicas_s ddp_checkpoint_replicas_t;

/* Listens on a port of every address (IPv6 and IPv4 where it can, else IPv4; until
 * ddp_checkpoint_replicas_listen_at says the one to take) and starts
 * both threads over `dir` (copied): received replicas are kept there; this node's ranks'
 * slots are read there and sent at most `rate` bytes a second (0: no limit, which
 * --checkpoint-replica-rate does not give: its least is DDP_CHECKPOINT_REPLICA_MIN_RATE); a
 * replica received must come at a sixteenth of the lower of it and its sender's on the
 * whole, shared by the PUTs under way at once, at DDP_CHECKPOINT_REPLICA_MIN_RATE at least.
 * 0 and *out, or -errno (said). */
int ddp_checkpoint_replicas_start(const char *dir, uint64_t rate, const ddp_log_t *log,
                                  ddp_checkpoint_replicas_t **out);

/* The rate it was started with (0 for NULL). */
uint64_t ddp_checkpoint_replicas_rate(const ddp_checkpoint_replicas_t *r);

/* The job's rate for the round: the lowest --checkpoint-replica-rate the round's records
 * publish (0: none said). Sends, GETs and a transfer's floor go at it where it is lower
 * than the node's own, so that nodes given different rates agree on one (a receiver's
 * floor above a slower sender's rate would drop all of its replicas). NULL: nothing. */
void ddp_checkpoint_replicas_job_rate(ddp_checkpoint_replicas_t *r, uint64_t rate);

/* The port it listens on. */
int ddp_checkpoint_replicas_port(const ddp_checkpoint_replicas_t *r);

/* `host` (numeric) is this launcher's address, as its record of the round publishes it: from
 * now on the listener takes connections at that address alone, on a port of its own (what
 * the old listener had not accepted is dropped: call it before the port is published), or
 * where it cannot be bound there (said once an address) on every address. The port to
 * publish with `host`. Any thread (the round's exchange). */
int ddp_checkpoint_replicas_listen_at(ddp_checkpoint_replicas_t *r, const char *host);

/* Its secret, which every request to it carries (DDP_REPLICA_KEY_CHARS hex digits); "" for
 * NULL. */
const char *ddp_checkpoint_replicas_key(const ddp_checkpoint_replicas_t *r);

/* A round of `world_size` ranks began: this node's ranks are first_rank .. first_rank +
 * nranks - 1, and their slots go to `peers` (n of them, copied; n = 0: to none); a replica
 * of a rank beyond the world is refused from now on (every replica is, before the first). Slots
 * already sent go again to the new peers. */
void ddp_checkpoint_replicas_round(ddp_checkpoint_replicas_t *r, int first_rank, int nranks,
                                   int world_size, const ddp_replica_peer_t *peers, int n);

/* A round of `world_size` ranks is forming here (its step agreed before its peers are
 * known): replicas of its ranks are taken from now on (a hot spare refused the survivors'
 * until its own agreement and fetches were over). NULL: nothing. */
void ddp_checkpoint_replicas_world(ddp_checkpoint_replicas_t *r, int world_size);

/* A slot of this node was summed (agent/checkpoint_sums.h's `summed`, on its thread): the
 * sender looks now rather than at its idle look (5 s). `r`: the replicas, or NULL. */
void ddp_checkpoint_replicas_summed(void *r);

/* The bytes of replicas received and kept so far (for the job's end). */
uint64_t ddp_checkpoint_replicas_received(const ddp_checkpoint_replicas_t *r);

/* Fetches rank `rank`'s replica of `step` (a world of `world_size`; `rate`: the job's
 * replica rate, the lowest its nodes publish, at which the holder sends, said to the peer,
 * 0 none) from `peer` into
 * DIR/rank<R>.0 (received under a dot name, checked as a received replica is, its size
 * against the room less room for one save of each of this node's `nranks` ranks, renamed;
 * a rank<R>.1 there, older, removed): for the node that now runs that rank, before its
 * workers start. Blocking, each wait bounded, the whole by `deadline` (ddp_clock_mono's; 0:
 * none) too, and ended by `stop_fd` becoming readable (-1: none). 0 with *bytes, or an
 * error with `why`. */
int ddp_checkpoint_replicas_fetch(const ddp_replica_peer_t *peer, const char *dir, int rank,
                                  int64_t step, int world_size, int nranks, uint64_t rate,
                                  double deadline, int stop_fd, uint64_t *bytes, ddp_buf_t *why);

/* Ends both threads (a transfer under way stops at its next wait) and frees. NULL:
 * nothing. */
void ddp_checkpoint_replicas_stop(ddp_checkpoint_replicas_t *r);

#endif
