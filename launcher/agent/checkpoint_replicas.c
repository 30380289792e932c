/* In-memory checkpoints' replicas on other nodes (see agent/checkpoint_replicas.h). Two
 * threads of their own, with blocking I/O bounded by poll: the receiver accepts connections
 * and serves each on a thread of its own (capped; a request line and a transfer each
 * bounded as a whole), checks the request line and the size (the directory's room) before
 * it writes anything, writes the bytes under a dot name, and keeps them only once the slot's
 * header, checksum and generation agree; the sender looks at this node's ranks' slots every
 * time a new sum is written (ddp_checkpoint_replicas_summed), each round, and every IDLE_MS,
 * and sends each rank's newest checksummed one to every peer of the round, in
 * pieces of a quarter second at the rate (4 MiB at most), resting to keep to it. A peer
 * that dies, stalls or refuses costs a transfer (said once a round for a sender's peer) and
 * rests with a backoff while the others go on, never a thread. */
#include "agent/checkpoint_replicas.h"

#include "ckpt.h"
#include "ckpt_file.h"
#include "config/config.h"
#include "error.h"
#include "io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define IDLE_MS 5000  /* the sender's look at the slots with no news of a new sum */
#define IO_MS   10000 /* a read or write that makes no progress this long ends the transfer */
#define LINE_MS 3000  /* a request's line, or a GET's answer line, whole */
#define FLOOR_RATE \
    DDP_CHECKPOINT_REPLICA_MIN_RATE /* bytes/s: a slower transfer (on the whole) ends */
#define RATE_HEADROOM   16          /* a PUT slower than the job's rate / this on the whole ends, */
#define PUT_SLACK_MS    3000        /* this long more (a PUT's whole-transfer deadline) */
#define SIZE_FACTOR     4     /* a replica larger than this times the largest slot held: refused */
#define MAX_CONNS       16    /* connections past the key check served at once; */
#define MAX_PEER_CONNS  4     /* of them PUTs from one address; */
#define MAX_GETS        4     /* GETs (a spare's fetches) at once in all, */
#define MAX_PEER_GETS   2     /* of them from one address */
#define PENDING_MAX     64    /* connections reading their request line at once */
#define LINE_SAID       "3 s" /* LINE_MS, as said */
#define REFUSED_SAID    10    /* refused connections said one by one; then */
#define REFUSED_EVERY_S 60    /* one line this often, with their count */
#define CONNECT_MS      3000  /* a peer's connection */
#define RETRY_MS        1000  /* after a failed transfer, the peer's first rest; */
#define RETRY_MAX_MS    16000 /* doubled after each failure in a row up to this */
#define CHUNK           (4u << 20)
#define REQUEST_MAX     128 /* the request line, its '\n' included */
#define TAG             "DDPREPL1"
#define MAX_PEERS       64 /* --checkpoint-replicas is capped at the nodes less one; and this */

/* The refusals' warnings: the first REFUSED_SAID, then one a minute with their count (one
 * by one again after a minute without any). */
typedef struct {
    int said;
    uint64_t quiet; /* refused since the last line */
    double next;    /* ddp_clock_mono's: the next line */
} refusals_t;

struct ddp_checkpoint_replicas_s {
    const ddp_log_t *log;
    char dir[PATH_MAX];
    uint64_t rate;                       /* its own --checkpoint-replica-rate */
    _Atomic uint64_t job_rate;           /* the lowest the round's records publish (0: own alone) */
    int listen_fd;                       /* the receiver's (swapped for next_listen_fd there) */
    atomic_int port;                     /* where it listens (or is to, next_listen_fd's) */
    char key[DDP_REPLICA_KEY_CHARS + 1]; /* every request's secret */
    int stop_fd;                         /* eventfd: readable once the threads are to end */
    int wake_fd;                         /* eventfd: readable once next_listen_fd is set */
    int send_fd; /* eventfd: readable once a slot is summed or a round set (the sender's look) */
    pthread_t receiver, sender;
    bool receiver_started, sender_started;
    _Atomic uint64_t received; /* bytes kept */
    _Atomic uint64_t claimed;  /* bytes of the PUTs under way */
    atomic_int puts;           /* PUTs under way */
    atomic_int world_size;     /* the round's: a replica of a rank beyond it is refused; 0
                                * before the first round: every replica is */

    pthread_mutex_t mutex; /* the round, from the loop to the sender */
    int first_rank, nranks, npeers;
    ddp_replica_peer_t peers[MAX_PEERS];
    unsigned round_seq;        /* moved on by each round */
    int next_listen_fd;        /* a listener for the receiver to take in place of its own; -1 */
    char bound[64];            /* the address listened at ("": every address) */
    char unbindable[64];       /* the last address that could not be (said once) */
    refusals_t keyed_refusals; /* keyed requests' failures said (the mutex's) */
};

/* Waits for `events` on fd, or the stop: 1 ready, -ECANCELED (stop), DDP_ETIMEOUT, -errno. */
static int wait_io(int stop, int fd, short events, int timeout_ms)
{
    struct pollfd p[2] = {{.fd = stop, .events = POLLIN}, {.fd = fd, .events = events}};
    for (;;) {
        int n = poll(p + (stop < 0), (fd >= 0 ? 2 : 1) - (stop < 0), timeout_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (stop >= 0 && p[0].revents != 0)
            return -ECANCELED;
        return n == 0 ? DDP_ETIMEOUT : 1;
    }
}

/* The wait before an I/O (IO_MS, less where `deadline`, ddp_clock_mono's, is nearer; 0: none):
 * its ms, or -1 once the deadline passed. */
static int wait_ms(double deadline)
{
    if (deadline <= 0)
        return IO_MS;
    double left = (deadline - ddp_clock_mono()) * 1000;
    return left <= 0 ? -1 : left < IO_MS ? (int)left + 1 : IO_MS;
}

/* The rate a transfer to or from this node is held to: the job's (`own`, rate_now); the
 * RATE its request says (`said`) only where this node has none. A request's word never
 * lowers it: a key holder saying a tiny rate would get the FLOOR_RATE floor back (a GET
 * held, a PUT holding its places and room, for minutes); the round's records say the
 * job's rate instead. */
static uint64_t job_rate(uint64_t own, uint64_t said)
{
    return own != 0 ? own : said;
}

/* This node's rate now: the job's (the lowest of the round's records and its own). */
static uint64_t rate_now(const ddp_checkpoint_replicas_t *r)
{
    uint64_t job = atomic_load(&r->job_rate);
    return job > 0 && (r->rate == 0 || job < r->rate) ? job : r->rate;
}

/* The bytes a second a transfer at `rate` (job_rate) comes at on the whole at least, one
 * of `n` under way at once over this node's link: a sixteenth of the rate shared by them,
 * FLOOR_RATE at least. */
static uint64_t rate_floor(uint64_t rate, int n)
{
    uint64_t floor = rate / RATE_HEADROOM / (uint64_t)(n > 1 ? n : 1);
    return floor > FLOOR_RATE ? floor : FLOOR_RATE;
}

/* The seconds `bytes` may take as a whole at `floor` bytes a second: PUT_SLACK_MS more. */
static double whole_limit(uint64_t floor, uint64_t bytes)
{
    return (double)bytes / (double)floor + PUT_SLACK_MS / 1000.0;
}

static int send_all(int stop, double deadline, int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        int ms = wait_ms(deadline), err = ms < 0 ? DDP_ETIMEOUT : wait_io(stop, fd, POLLOUT, ms);
        if (err < 0)
            return err;
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int recv_all(int stop, double deadline, int fd, void *data, size_t len)
{
    char *p = data;
    while (len > 0) {
        int ms = wait_ms(deadline), err = ms < 0 ? DDP_ETIMEOUT : wait_io(stop, fd, POLLIN, ms);
        if (err < 0)
            return err;
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return DDP_ECLOSED;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Receiving. */

/* A decimal number of 1 to 19 digits, all of `text`, at most max. */
static bool number(const char *text, int64_t max, int64_t *out)
{
    int64_t value = 0;
    size_t n = strlen(text);
    if (n == 0 || n > 19)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (text[i] < '0' || text[i] > '9' || value > (INT64_MAX - (text[i] - '0')) / 10)
            return false; /* (not a digit, or beyond INT64_MAX: refused before it wraps) */
        value = value * 10 + (text[i] - '0');
    }
    if (value > max)
        return false;
    *out = value;
    return true;
}

/* Whether `given` is `key`, in a time that does not tell how much of it is. */
static bool key_matches(const char *given, const char *key)
{
    if (strlen(given) != DDP_REPLICA_KEY_CHARS)
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < DDP_REPLICA_KEY_CHARS; i++)
        diff |= (unsigned char)(given[i] ^ key[i]);
    return diff == 0;
}

/* The request `line` ("DDPREPL1 VERB KEY ...", its '\n' cut) split in place into at most
 * `max` words: their number, or -1 where it is not of `verb` or its key is not `key`. */
static int request_words(char *line, const char *verb, const char *key, char **word, int max)
{
    char *save;
    int n = 0;
    for (char *w = strtok_r(line, " ", &save); w != NULL && n < max; w = strtok_r(NULL, " ", &save))
        word[n++] = w;
    if (n < 3 || strcmp(word[0], TAG) != 0 || strcmp(word[1], verb) != 0 ||
        !key_matches(word[2], key))
        return -1;
    return n;
}

/* "DDPREPL1 PUT KEY RANK SLOT BYTES [RATE]" (the line, its '\n' cut; RATE the sender's
 * --checkpoint-replica-rate, 0 where it has none or did not say it): exactly that, each in
 * range. */
static bool parse_put(char *line, const char *key, int *rank, int *slot, uint64_t *bytes,
                      uint64_t *rate)
{
    char *word[8] = {0};
    int64_t r, s, b, rt = 0;
    int n = request_words(line, "PUT", key, word, 8);
    if ((n != 6 && n != 7) || !number(word[3], DDP_CKPT_MAX_WORLD - 1, &r) ||
        !number(word[4], 1, &s) || !number(word[5], INT64_MAX, &b) ||
        (n == 7 && !number(word[6], INT64_MAX, &rt)))
        return false;
    *rank = (int)r;
    *slot = (int)s;
    *bytes = (uint64_t)b;
    *rate = (uint64_t)rt;
    return true;
}

/* The request line, a byte at a time (it is short), into line[REQUEST_MAX], whole within
 * LINE_MS. */
static int read_line(int stop, int fd, char *line, ddp_buf_t *why)
{
    double deadline = ddp_clock_mono() + LINE_MS / 1000.0;
    for (size_t n = 0; n < REQUEST_MAX - 1; n++) {
        int err = recv_all(stop, deadline, fd, &line[n], 1);
        if (err == DDP_ETIMEOUT)
            ddp_buf_printf(why, "a whole line did not come within %d s", LINE_MS / 1000);
        if (err != 0)
            return err;
        if (line[n] == '\n') {
            line[n] = '\0';
            return 0;
        }
        if (line[n] == '\0')
            break;
    }
    ddp_buf_printf(why, "its request is not one");
    return DDP_EPARSE;
}

/* The received file open at fd (`bytes` of rank `rank`'s, generation `trailer` at its end,
 * `sum` its checksum as received): a header ddp_ckpt_header_check takes, complete, of that
 * rank and size, a checksum of its generation that `sum` matches. 0, or an error with `why`. */
static int check_received(int fd, int rank, uint64_t bytes, uint64_t trailer, uint64_t sum,
                          ddp_buf_t *why)
{
    ddp_ckpt_header_t h;
    uint64_t size;
    int err = ddp_ckpt_pread_header(fd, &h, &size, why);
    if (err == 0 && (h.state != DDP_CKPT_COMPLETE || h.rank != (uint32_t)rank ||
                     h.used_bytes != bytes || size != bytes))
        err = (ddp_buf_printf(
                   why, "its header is not that of a complete slot of rank %d, %" PRIu64 " bytes",
                   rank, bytes),
               DDP_EPARSE);
    if (err == 0 && (trailer != h.generation || h.checksum_generation != h.generation))
        err = (ddp_buf_printf(why, "the slot changed while it was sent, or has no checksum"),
               DDP_EPARSE);
    if (err == 0 && sum != h.checksum)
        err =
            (ddp_buf_printf(why, "its data does not match its checksum (step %" PRId64 ")", h.step),
             DDP_EPARSE);
    return err;
}

/* What a transfer into a directory is to be. */
typedef struct {
    int rank, world;  /* the slot's, as its header must say (world 0: any) */
    int64_t step;     /* the same (-1: any) */
    uint64_t bytes;   /* its used bytes, as the request said */
    uint64_t reserve; /* of the directory's room, kept for others */
    uint64_t largest; /* a size it may not pass (0: the room alone bounds it) */
    uint64_t floor;   /* bytes/s it comes at on the whole, at least (0: FLOOR_RATE) ... */
    int slack_ms;     /* ... with this long more (0: IO_MS) */
    double until;     /* ... and by this time at the latest (ddp_clock_mono's; 0: none) */
    bool unique;      /* a name of its own for the temporary */
} expect_t;

typedef enum { SAY_ONE, SAY_LAST, SAY_COUNT, SAY_NONE } say_t;

/* How one more refusal is said: one by one (SAY_LAST the last of those), in a line of
 * their *count, or not yet. */
static say_t refusal_turn(refusals_t *q, uint64_t *count)
{
    double now = ddp_clock_mono();
    if (q->said >= REFUSED_SAID && q->quiet == 0 && now >= q->next)
        q->said = 0; /* (a minute without any) */
    if (q->said < REFUSED_SAID) {
        q->said++;
        q->next = now + REFUSED_EVERY_S;
        return q->said == REFUSED_SAID ? SAY_LAST : SAY_ONE;
    }
    q->quiet++;
    if (now < q->next)
        return SAY_NONE;
    *count = q->quiet;
    q->quiet = 0;
    q->next = now + REFUSED_EVERY_S;
    return SAY_COUNT;
}

#define FURTHER_SAID " (further refusals said once a minute)"

/* Whether the header `h` that came first is that of a complete, checksummed slot of rank
 * `rank` (of a world of `world`: 0 any; of step `step`: -1 any), `bytes` in all. 0, or
 * DDP_EPARSE with `why`. */
static int check_first(const ddp_ckpt_header_t *h, int rank, int world, int64_t step,
                       uint64_t bytes, ddp_buf_t *why)
{
    ddp_buf_t detail = DDP_BUF_INIT;
    int err = ddp_ckpt_header_check(h, bytes, &detail);
    if (err == 0 &&
        (h->state != DDP_CKPT_COMPLETE || h->rank != (uint32_t)rank ||
         (world > 0 && h->world_size != (uint32_t)world) || (step >= 0 && h->step != step) ||
         h->used_bytes != bytes || h->checksum_generation != h->generation))
        err = DDP_EPARSE;
    if (err != 0)
        ddp_buf_printf(why,
                       "its header is not that of a complete, checksummed slot of rank %d of a "
                       "world of %d%s, %" PRIu64 " bytes (step %" PRId64 ")%s%s",
                       rank, world, step >= 0 ? ", of the step asked for" : "", bytes, h->step,
                       detail.len > 0 ? ": " : "", detail.len > 0 ? ddp_buf_str(&detail) : "");
    ddp_buf_free(&detail);
    return err;
}

/* The bytes `e` says into the file open at `out`, then its trailer, within a deadline of
 * e->floor bytes a second (e->slack_ms more): *trailer and the checksum of what came as *sum. */
static int receive_bytes(int stop, int fd, int out, const expect_t *e, uint64_t *trailer,
                         uint64_t *sum, ddp_buf_t *why)
{
    uint64_t bytes = e->bytes, floor = e->floor > 0 ? e->floor : FLOOR_RATE;
    double limit = (double)bytes / (double)floor + (e->slack_ms > 0 ? e->slack_ms : IO_MS) / 1000.0,
           deadline = ddp_clock_mono() + limit;
    if (e->until > 0 && e->until < deadline)
        limit -= deadline - e->until, deadline = e->until;
    char *buf = malloc(CHUNK);
    ddp_ckpt_sum_t *state = malloc(sizeof *state);
    int err = buf == NULL || state == NULL ? -ENOMEM : 0;
    for (uint64_t done = 0; err == 0 && done < bytes;) {          /* (bytes: a header's at least) */
        size_t n = done == 0              ? DDP_CKPT_HEADER_BYTES /* (checked first, alone) */
                   : bytes - done < CHUNK ? (size_t)(bytes - done)
                                          : CHUNK,
               skip = 0;
        err = recv_all(stop, deadline, fd, buf, n);
        if (err == 0 && done == 0) { /* the checksum as the bytes come (ckpt.h's seed) */
            ddp_ckpt_header_t h;
            memcpy(&h, buf, sizeof h);
            err = check_first(&h, e->rank, e->world, e->step, bytes, why);
            ddp_ckpt_sum_init(state, ddp_ckpt_header_seed(&h));
            skip = DDP_CKPT_HEADER_BYTES;
        }
        if (err == 0 && pwrite(out, buf, n, (off_t)done) != (ssize_t)n)
            err = (ddp_buf_printf(why, "unable to write it: %s", strerror(errno)), -EIO);
        if (err == 0)
            ddp_ckpt_sum_update(state, buf + skip, n - skip);
        done += n;
    }
    if (err == 0)
        err = recv_all(stop, deadline, fd, trailer, sizeof *trailer);
    if (err == DDP_ETIMEOUT)
        ddp_buf_printf(why, "%" PRIu64 " bytes did not come within %.1f s (%" PRIu64 " KiB/s)",
                       bytes, limit, floor >> 10);
    if (err == 0)
        *sum = ddp_ckpt_sum_final(state);
    free(state);
    free(buf);
    return err;
}

/* `e->bytes` of rank `e->rank`'s slot from `fd` into DIR/NAME: the size checked against the
 * directory's room less e->reserve first, the header as soon as it came (check_first), written as
 * DIR/.NAME.incoming (DIR/.NAME.<n>.incoming where `unique`: n a count of its own), checked
 * (check_received) and renamed. 0, or an error with `why` (nothing left). */
/* Whether `e->bytes` fit the directory's room less e->reserve, and e->largest: 0, or
 * DDP_ETOOBIG (or the room's error) with `why`. */
static int check_room(const char *dir, const expect_t *e, ddp_buf_t *why)
{
    uint64_t bytes = e->bytes;
    ddp_ckpt_room_t room;
    int err = ddp_ckpt_room(dir, "/sys/fs/cgroup", "/proc/self/cgroup", &room);
    uint64_t left = room.bytes > e->reserve ? room.bytes - e->reserve : 0;
    if (err == 0 && (bytes < DDP_CKPT_HEADER_BYTES || bytes > left))
        err = (ddp_buf_printf(why,
                              "%" PRIu64 " bytes: not a slot, or more than there is room for "
                              "(%" PRIu64 ", %" PRIu64 " of it kept for this node's own saves "
                              "and the transfers under way)",
                              bytes, room.bytes, room.bytes - left),
               DDP_ETOOBIG);
    if (err == 0 && e->largest > 0 && bytes / SIZE_FACTOR > e->largest)
        err = (ddp_buf_printf(why,
                              "%" PRIu64 " bytes: more than %d times the largest slot of this "
                              "node's own ranks (%" PRIu64 ")",
                              bytes, SIZE_FACTOR, e->largest),
               DDP_ETOOBIG);
    return err;
}

static int receive_into(int stop, int fd, const char *dir, const char *name, const expect_t *e,
                        ddp_buf_t *why)
{
    char tmp[PATH_MAX + 96], path[PATH_MAX + 96];
    uint64_t trailer = 0, sum = 0, bytes = e->bytes;
    bool unique = e->unique;
    int out = -1, err = check_room(dir, e, why);
    if (err == 0) {
        static atomic_uint seq; /* (the listener's transfers at once: a name each) */
        if (unique)
            snprintf(tmp, sizeof tmp, "%s/.%s.%u.incoming", dir, name, atomic_fetch_add(&seq, 1));
        else
            snprintf(tmp, sizeof tmp, "%s/.%s.incoming", dir, name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        out = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
            err = (ddp_buf_printf(why, "unable to create %s: %s", tmp, strerror(errno)), -errno);
    }
    if (err == 0)
        err = receive_bytes(stop, fd, out, e, &trailer, &sum, why);
    if (err == 0)
        err = check_received(out, e->rank, bytes, trailer, sum, why);
    if (err == 0 && rename(tmp, path) != 0)
        err = (ddp_buf_printf(why, "unable to rename it: %s", strerror(errno)), -errno);
    if (out >= 0)
        close(out);
    if (out >= 0 && err != 0)
        unlink(tmp);
    return err;
}

static int newest_slot(const char *dir, int rank, int *in, ddp_ckpt_header_t *h);

/* a + b, UINT64_MAX where that would wrap (a claim said by a peer may be absurd). */
static uint64_t add_capped(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* What this node holds, for a replica (e->bytes): kept beside it (added to e->reserve), one
 * more save of each of its own ranks first .. first + nranks - 1 (of this replica's size for
 * a rank that has saved none yet: data-parallel ranks hold states of about one size, so its
 * first save has its room before peers' replicas take it); and the largest newest slot of
 * those ranks (e->largest, 0: none saved yet, the room alone bounds it), which a replica may
 * pass SIZE_FACTOR times at most (states of about one size, which may grow: an optimizer's
 * state after the first step), so that a peer cannot claim all of the room for a trickle.
 * Replicas held are not counted: what a peer put cannot raise the bound for its next. */
static void held_here(const char *dir, int first, int nranks, expect_t *e)
{
    for (int i = 0; i < nranks; i++) {
        ddp_ckpt_header_t h;
        int in = -1;
        if (newest_slot(dir, first + i, &in, &h) >= 0) {
            e->reserve = add_capped(e->reserve, h.used_bytes);
            e->largest = h.used_bytes > e->largest ? h.used_bytes : e->largest;
            close(in);
        } else {
            e->reserve = add_capped(e->reserve, e->bytes);
        }
    }
}

/* A PUT (its request `line`): received as replica<R>.<s>. 0, or an error with `why`. */
static int receive_put(ddp_checkpoint_replicas_t *r, int fd, char *line, int *rank, ddp_buf_t *why)
{
    char name[64];
    int slot;
    uint64_t bytes, rate;
    int world = atomic_load(&r->world_size);
    if (!parse_put(line, r->key, rank, &slot, &bytes, &rate))
        return ddp_buf_printf(why, "its request is not one of this job's"), DDP_EPARSE;
    if (world == 0)
        return ddp_buf_printf(why, "no round has begun yet"), DDP_EPARSE;
    if (*rank >= world)
        return ddp_buf_printf(why, "rank %d is not of this job's world of %d", *rank, world),
               DDP_EPARSE;
    snprintf(name, sizeof name, DDP_REPLICA_FILE, *rank, slot);
    pthread_mutex_lock(&r->mutex);
    int first = r->first_rank, nranks = r->nranks;
    pthread_mutex_unlock(&r->mutex);
    /* Checked before its claim counts (an absurd one refused then takes no room meanwhile),
     * and again with the claims under way counted. */
    expect_t e = {.rank = *rank,
                  .world = world,
                  .step = -1,
                  .bytes = bytes,
                  .slack_ms = PUT_SLACK_MS,
                  .unique = true};
    held_here(r->dir, first, nranks, &e);
    uint64_t held = e.reserve;
    e.reserve = add_capped(held, atomic_load(&r->claimed));
    int err = check_room(r->dir, &e, why);
    if (err != 0)
        return err;
    int puts = atomic_fetch_add(&r->puts, 1) + 1; /* (this one's share of the link) */
    e.reserve = add_capped(held, atomic_fetch_add(&r->claimed, bytes));
    e.floor = rate_floor(job_rate(rate_now(r), rate), puts);
    err = receive_into(r->stop_fd, fd, r->dir, name, &e, why);
    atomic_fetch_sub(&r->claimed, bytes);
    atomic_fetch_sub(&r->puts, 1);
    if (err == 0)
        atomic_fetch_add(&r->received, bytes);
    return err;
}

static int send_bytes(int stop, double deadline, uint64_t rate, int fd, int in,
                      const ddp_ckpt_header_t *h);

/* "DDPREPL1 GET KEY RANK STEP [RATE]" (RATE the asker's --checkpoint-replica-rate, as a
 * PUT's): exactly that, each in range. */
static bool parse_get(char *line, const char *key, int *rank, int64_t *step, uint64_t *rate)
{
    char *word[7] = {0};
    int64_t r, rt = 0;
    int n = request_words(line, "GET", key, word, 7);
    if ((n != 5 && n != 6) || !number(word[3], DDP_CKPT_MAX_WORLD - 1, &r) ||
        !number(word[4], DDP_CKPT_MAX_STEP, step) || (n == 6 && !number(word[5], INT64_MAX, &rt)))
        return false;
    *rank = (int)r;
    *rate = (uint64_t)rt;
    return true;
}

/* A GET (its request `line`): the replica of that rank and step, complete and checksummed,
 * sent at the job's rate as a PUT is ("DDPREPL1 BYTES\n", the bytes, the generation again;
 * unpaced, a key holder's GETs in a loop pulled 1.5 GB/s at a rate of 1M); "DDPREPL1 0\n"
 * where there is none; within a PUT's whole deadline (whole_limit: a reader slower than a
 * sixteenth of the job's rate is dropped). 0, or an error with `why`. */
static int serve_get(ddp_checkpoint_replicas_t *r, int fd, char *line, ddp_buf_t *why)
{
    char path[PATH_MAX + 64], head[REQUEST_MAX];
    int rank, in = -1;
    int64_t step;
    ddp_ckpt_header_t h = {0}, again;
    uint64_t size, trailer = 0, rate;
    if (!parse_get(line, r->key, &rank, &step, &rate))
        return ddp_buf_printf(why, "it is not a request of this job's"), DDP_EPARSE;
    for (int slot = 0; slot < 2 && in < 0; slot++) {
        snprintf(path, sizeof path, "%s/" DDP_REPLICA_FILE, r->dir, rank, slot);
        in = ddp_open_worker_file(path);
        if (in >= 0 && !(ddp_ckpt_pread_header(in, &h, &size, NULL) == 0 && h.step == step &&
                         h.state == DDP_CKPT_COMPLETE && h.checksum_generation == h.generation &&
                         h.used_bytes <= size)) {
            close(in);
            in = -1;
        }
    }
    int len = snprintf(head, sizeof head, TAG " %" PRIu64 "\n", in >= 0 ? h.used_bytes : 0);
    double deadline =
        ddp_clock_mono() + whole_limit(rate_floor(job_rate(rate_now(r), rate), 1), h.used_bytes);
    int err = send_all(r->stop_fd, deadline, fd, head, (size_t)len);
    if (err == 0 && in >= 0)
        err = send_bytes(r->stop_fd, deadline, job_rate(rate_now(r), rate), fd, in, &h);
    if (err == 0 && in >= 0 && ddp_ckpt_pread_header(in, &again, &size, NULL) == 0 &&
        again.generation == h.generation)
        trailer = h.generation;
    if (err == 0 && in >= 0)
        err = send_all(r->stop_fd, deadline, fd, &trailer, sizeof trailer);
    if (in >= 0)
        close(in);
    if (err != 0)
        ddp_buf_printf(why, "unable to send rank %d's step %" PRId64 ": %s", rank, step,
                       ddp_strerror(err));
    return err;
}

/* A keyed request's failure ("WHAT HOST DONE: WHY") said as refusals are (refusal_turn):
 * a key holder's refused requests in a loop cannot fill the log. */
static void keyed_refused(ddp_checkpoint_replicas_t *r, const char *what, const char *host,
                          const char *done, const char *why)
{
    uint64_t count = 0;
    pthread_mutex_lock(&r->mutex);
    say_t say = refusal_turn(&r->keyed_refusals, &count);
    pthread_mutex_unlock(&r->mutex);
    if (say == SAY_ONE || say == SAY_LAST)
        ddp_log_warn(r->log, "in-memory checkpoints: %s %s%s: %s%s", what, host, done, why,
                     say == SAY_LAST ? FURTHER_SAID : "");
    else if (say == SAY_COUNT)
        ddp_log_warn(r->log,
                     "in-memory checkpoints: %" PRIu64 " more replicas dropped or not sent in "
                     "the last %d s, the last %s %s%s: %s",
                     count, REFUSED_EVERY_S, what, host, done, why);
}

/* One connection whose request `line` (its '\n' cut) carried the key: a PUT taken
 * (answered 'k' or 'n') or a GET served; said. */
static void serve(ddp_checkpoint_replicas_t *r, int fd, char *line, const char *host)
{
    ddp_buf_t why = DDP_BUF_INIT;
    int rank = -1, err = 0;
    if (strncmp(line, TAG " GET ", strlen(TAG " GET ")) == 0) {
        if ((err = serve_get(r, fd, line, &why)) != 0 && err != -ECANCELED)
            keyed_refused(r, "a replica asked for by", host, "", ddp_buf_str(&why));
        ddp_buf_free(&why);
        return;
    }
    err = receive_put(r, fd, line, &rank, &why);
    if (err == 0) /* (said before the answer: the sender may look) */
        ddp_log_debug(r->log, "in-memory checkpoints: rank %d's slot from %s kept as a replica",
                      rank, host);
    else if (err != -ECANCELED)
        keyed_refused(r, "a replica from", host, " is dropped",
                      why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
    char answer = err == 0 ? 'k' : 'n';
    if (err != -ECANCELED)
        (void)send_all(r->stop_fd, ddp_clock_mono() + LINE_MS / 1000.0, fd, &answer, 1);
    ddp_buf_free(&why);
}

/* A connection that showed the key, served on a thread of its own. */
typedef struct {
    ddp_checkpoint_replicas_t *r;
    pthread_t thread;
    bool used;
    bool get;         /* a GET's (else a PUT's) */
    atomic_bool done; /* its thread may be joined */
    int fd;
    char host[64];
    char line[REQUEST_MAX];
} conn_t;

static void *serve_run(void *arg)
{
    conn_t *c = arg;
    serve(c->r, c->fd, c->line, c->host);
    close(c->fd);
    atomic_store(&c->done, true);
    return NULL;
}

/* The connections' threads that ended joined (all of them, where `all`, once they end):
 * how many are left from `host` (NULL: at all), GETs' where `gets`, PUTs' else. */
static int reap(conn_t *conns, bool all, const char *host, bool gets)
{
    int left = 0;
    for (int i = 0; i < MAX_CONNS; i++) {
        if (conns[i].used && (all || atomic_load(&conns[i].done))) {
            pthread_join(conns[i].thread, NULL);
            conns[i].used = false;
        }
        left += conns[i].used && conns[i].get == gets &&
                (host == NULL || strcmp(conns[i].host, host) == 0);
    }
    return left;
}

/* A connection still reading its request line, in the accept thread. */
typedef struct {
    int fd; /* -1: a free place */
    double deadline;
    size_t len;
    char line[REQUEST_MAX];
    char host[64];
} pending_t;

static void refused(const ddp_checkpoint_replicas_t *r, refusals_t *q, const char *host,
                    const char *why)
{
    uint64_t count = 0;
    say_t say = refusal_turn(q, &count);
    if (say == SAY_ONE || say == SAY_LAST)
        ddp_log_warn(r->log, "in-memory checkpoints: a connection from %s is refused: %s%s", host,
                     why, say == SAY_LAST ? FURTHER_SAID : "");
    else if (say == SAY_COUNT)
        ddp_log_warn(r->log,
                     "in-memory checkpoints: %" PRIu64 " more connections refused in the last "
                     "%d s, the last from %s: %s",
                     count, REFUSED_EVERY_S, host, why);
}

/* Whether the request `line` is "DDPREPL1 PUT|GET KEY ..." with the listener's key. */
static bool keyed(const char *line, const char *key)
{
    char copy[REQUEST_MAX], *word[3] = {0}, *save;
    int n = 0;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *w = strtok_r(copy, " ", &save); w != NULL && n < 3; w = strtok_r(NULL, " ", &save))
        word[n++] = w;
    return n == 3 && strcmp(word[0], TAG) == 0 &&
           (strcmp(word[1], "PUT") == 0 || strcmp(word[1], "GET") == 0) &&
           key_matches(word[2], key);
}

/* What came on pending connection p, read without waiting: 1 its whole line (its '\n' cut),
 * 0 not yet, or -1 with `why` (closed, or not a line). */
static int read_pending(pending_t *p, const char **why)
{
    for (;;) {
        ssize_t n = recv(p->fd, &p->line[p->len], 1, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return *why = NULL, -1; /* (gone: nothing to say) */
        char c = p->line[p->len++];
        if (c == '\n') {
            p->line[p->len - 1] = '\0';
            return 1;
        }
        if (c == '\0' || p->len >= REQUEST_MAX - 1)
            return *why = "its request is not one", -1;
    }
}

/* The pending connection p ended: refused where `why` (a PUT's answered 'n'; a GET's closed
 * unanswered), else closed. */
static void end_pending(const ddp_checkpoint_replicas_t *r, refusals_t *q, pending_t *p,
                        const char *why)
{
    if (why != NULL) {
        refused(r, q, p->host, why);
        p->line[p->len < REQUEST_MAX ? p->len : REQUEST_MAX - 1] = '\0';
        if (strncmp(p->line, TAG " GET ", strlen(TAG " GET ")) != 0)
            (void)send(p->fd, "n", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    close(p->fd);
    p->fd = -1;
}

/* A connection whose line carried the key onto a thread of its own: at most MAX_CONNS at
 * once, MAX_PEER_CONNS PUTs of one address; GETs apart, MAX_GETS in all and MAX_PEER_GETS
 * of one address, so that slow GETs cannot take the places of PUTs (one more is closed at
 * once: its sender tries again, a fetch asks another holder). */
static void hand_over(ddp_checkpoint_replicas_t *r, conn_t *conns, pending_t *p)
{
    bool get = strncmp(p->line, TAG " GET ", strlen(TAG " GET ")) == 0;
    int all = reap(conns, false, NULL, false) + reap(conns, false, NULL, true),
        kind = reap(conns, false, NULL, get), from = reap(conns, false, p->host, get), i = 0;
    while (i < MAX_CONNS && conns[i].used)
        i++;
    if (all >= MAX_CONNS || from >= (get ? MAX_PEER_GETS : MAX_PEER_CONNS) ||
        (get && kind >= MAX_GETS)) {
        ddp_log_debug(r->log,
                      "in-memory checkpoints: a connection from %s is closed: %d are "
                      "served, %d %ss, %d of them from there",
                      p->host, all, kind, get ? "GET" : "PUT", from);
        close(p->fd);
        p->fd = -1;
        return;
    }
    conns[i] = (conn_t){.r = r, .used = true, .get = get, .fd = p->fd};
    snprintf(conns[i].host, sizeof conns[i].host, "%s", p->host);
    memcpy(conns[i].line, p->line, sizeof conns[i].line);
    p->fd = -1;
    if (pthread_create(&conns[i].thread, NULL, serve_run, &conns[i]) != 0) {
        conns[i].used = false;
        close(conns[i].fd);
    }
}

/* Takes what is waiting on the listening socket (at most PENDING_MAX / 4, so that the lines
 * of those taken are read between): each a place among the pending, the oldest's where all
 * are taken (dropped: a flood of idle connections slows a key holder's, never stops it). */
static void take_new(const ddp_checkpoint_replicas_t *r, pending_t *pending)
{
    for (int taken = 0; taken < PENDING_MAX / 4; taken++) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof addr;
        int fd =
            accept4(r->listen_fd, (struct sockaddr *)&addr, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        int at = 0;
        for (int i = 0; i < PENDING_MAX; i++) {
            if (pending[i].fd < 0) {
                at = i;
                break;
            }
            if (pending[i].deadline < pending[at].deadline)
                at = i;
        }
        if (pending[at].fd >= 0)
            close(pending[at].fd);
        pending[at] = (pending_t){.fd = fd, .deadline = ddp_clock_mono() + LINE_MS / 1000.0};
        snprintf(pending[at].host, sizeof pending[at].host, "?");
        (void)getnameinfo((struct sockaddr *)&addr, len, pending[at].host, sizeof pending[at].host,
                          NULL, 0, NI_NUMERICHOST);
    }
}

/* The listener ddp_checkpoint_replicas_listen_at made, in place of the receiver's own (what
 * the old one had not accepted is closed: its port was never published, or is no more). */
static void take_listener(ddp_checkpoint_replicas_t *r)
{
    uint64_t count;
    if (read(r->wake_fd, &count, sizeof count) < 0) {
        /* (nothing to read: another wake took it) */
    }
    pthread_mutex_lock(&r->mutex);
    if (r->next_listen_fd >= 0) {
        close(r->listen_fd);
        r->listen_fd = r->next_listen_fd;
        r->next_listen_fd = -1;
    }
    pthread_mutex_unlock(&r->mutex);
}

/* Accepts connections and reads each one's request line here, without waiting on any (at
 * most PENDING_MAX at once, each within LINE_MS); one whose line carries the key is served
 * on a thread of its own (hand_over), so that a slow one holds up no other and connections
 * that never show the key take no place of those that do. */
static void *receive_run(void *arg)
{
    ddp_checkpoint_replicas_t *r = arg;
    conn_t conns[MAX_CONNS] = {0};
    pending_t pending[PENDING_MAX];
    struct pollfd p[PENDING_MAX + 3];
    int at[PENDING_MAX + 3];
    refusals_t q = {0};
    for (int i = 0; i < PENDING_MAX; i++)
        pending[i].fd = -1;
    for (;;) {
        double now = ddp_clock_mono(), next = 0;
        int n = 3;
        p[0] = (struct pollfd){.fd = r->stop_fd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
        p[2] = (struct pollfd){.fd = r->wake_fd, .events = POLLIN};
        for (int i = 0; i < PENDING_MAX; i++) {
            if (pending[i].fd < 0)
                continue;
            if (next == 0 || pending[i].deadline < next)
                next = pending[i].deadline;
            at[n] = i;
            p[n++] = (struct pollfd){.fd = pending[i].fd, .events = POLLIN};
        }
        int ms = next == 0 ? -1 : next <= now ? 0 : (int)((next - now) * 1000) + 1;
        if (poll(p, (nfds_t)n, ms) < 0 && errno != EINTR)
            break;
        if (p[0].revents != 0)
            break;
        now = ddp_clock_mono();
        for (int k = 3; k < n; k++) {
            pending_t *c = &pending[at[k]];
            const char *why = NULL;
            int got = p[k].revents != 0 ? read_pending(c, &why) : 0;
            if (got == 0 && now >= c->deadline)
                got = -1, why = "a whole line did not come within " LINE_SAID;
            if (got < 0)
                end_pending(r, &q, c, why);
            else if (got > 0 && !keyed(c->line, r->key))
                end_pending(r, &q, c,
                            strncmp(c->line, TAG " GET ", strlen(TAG " GET ")) == 0
                                ? "it is not a request of this job's"
                                : "its request is not one of this job's");
            else if (got > 0)
                hand_over(r, conns, c);
        }
        if (p[1].revents != 0)
            take_new(r, pending);
        if (p[2].revents != 0)
            take_listener(r);
    }
    for (int i = 0; i < PENDING_MAX; i++)
        if (pending[i].fd >= 0)
            close(pending[i].fd);
    (void)reap(conns, true, NULL, false); /* (each ends at its next wait: the stop) */
    return NULL;
}

/* Sending. */

/* A connection to `peer` within CONNECT_MS: the socket, or an error. */
static int connect_peer(int stop, const ddp_replica_peer_t *peer)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                    *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", peer->port);
    if (getaddrinfo(peer->host, port, &hints, &ai) != 0)
        return -EINVAL;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
    if (fd < 0)
        err = -errno;
    else if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS)
        err = -errno;
    else if ((err = wait_io(stop, fd, POLLOUT, CONNECT_MS)) == 1) {
        socklen_t len = sizeof err;
        err = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ? -errno : -err;
    }
    freeaddrinfo(ai);
    if (err != 0 && fd >= 0)
        close(fd);
    return err != 0 ? err : fd;
}

/* The sender's rest: until a slot is summed or a round set (send_fd), `seconds` at most;
 * false at the stop. */
static bool news(const ddp_checkpoint_replicas_t *r, double seconds)
{
    uint64_t count;
    if (wait_io(r->stop_fd, r->send_fd, POLLIN, (int)(seconds * 1000) + 1) == -ECANCELED)
        return false;
    if (read(r->send_fd, &count, sizeof count) < 0) {
        /* (nothing to read: the rest ran out) */
    }
    return true;
}

/* The sender told to look (send_fd). */
static void tell_sender(const ddp_checkpoint_replicas_t *r)
{
    uint64_t one = 1;
    if (r != NULL && r->send_fd >= 0 && write(r->send_fd, &one, sizeof one) < 0) {
        /* (it cannot fail: a counter far from its limit) */
    }
}

/* The used bytes of the slot open at `in` (header h) over `fd`, at most `rate` bytes a second
 * (0: no limit), by `deadline` (0: none). */
static int send_bytes(int stop, double deadline, uint64_t rate, int fd, int in,
                      const ddp_ckpt_header_t *h)
{
    char *buf = malloc(CHUNK);
    int err = buf == NULL ? -ENOMEM : 0;
    double began = ddp_clock_mono();
    /* Pieces of a quarter second at the rate: no rest comes near the receiver's IO_MS. */
    size_t piece = rate > 0 && rate / 4 < CHUNK ? (size_t)(rate / 4) + 1 : CHUNK;
    for (uint64_t done = 0; err == 0 && done < h->used_bytes;) {
        size_t n = h->used_bytes - done < piece ? (size_t)(h->used_bytes - done) : piece;
        ssize_t got = pread(in, buf, n, (off_t)done);
        if (got != (ssize_t)n)
            err = got < 0 ? -errno : DDP_ECLOSED; /* cut meanwhile */
        if (err == 0)
            err = send_all(stop, deadline, fd, buf, n);
        done += n;
        double due = rate > 0 ? began + (double)done / (double)rate : 0, now = ddp_clock_mono();
        int ms = due - now < IO_MS / 2000.0 ? (int)((due - now) * 1000) + 1 : IO_MS / 2;
        if (err == 0 && due > now && wait_io(stop, -1, 0, ms) == -ECANCELED)
            err = -ECANCELED;
    }
    free(buf);
    return err;
}

/* Whether the slot open at `in` is still the one of header h (complete, of its generation):
 * 1 yes, 0 saved again (or being saved), -1 its header unreadable. */
static int still_the_slot(int in, const ddp_ckpt_header_t *h)
{
    ddp_ckpt_header_t now;
    uint64_t size;
    if (ddp_ckpt_pread_header(in, &now, &size, NULL) != 0)
        return -1;
    return now.generation == h->generation && now.state == DDP_CKPT_COMPLETE;
}

/* Rank `rank`'s slot `slot` (open at `in`, header h) sent to `peer`, within the deadline a
 * receiver at this node's rate gives it (a sixteenth of the rate, PUT_SLACK_MS more: a peer
 * slower than that costs the one sender thread that long, not the whole transfer at its
 * pace): 0 once it said it kept it, else an error (-ESTALE: refused, the slot saved again
 * while it went). */
static int send_slot(const ddp_checkpoint_replicas_t *r, const ddp_replica_peer_t *peer, int in,
                     int rank, int slot, const ddp_ckpt_header_t *h)
{
    char line[REQUEST_MAX], answer = 0;
    uint64_t trailer = 0;
    int fd = connect_peer(r->stop_fd, peer), err = fd < 0 ? fd : 0;
    int len = snprintf(line, sizeof line, TAG " PUT %s %d %d %" PRIu64 " %" PRIu64 "\n", peer->key,
                       rank, slot, h->used_bytes, rate_now(r));
    double deadline = ddp_clock_mono() + whole_limit(rate_floor(rate_now(r), 1), h->used_bytes);
    if (err == 0)
        err = send_all(r->stop_fd, deadline, fd, line, (size_t)len);
    if (err == 0)
        err = send_bytes(r->stop_fd, deadline, rate_now(r), fd, in, h);
    if (err == 0 && still_the_slot(in, h) == 1)
        trailer = h->generation; /* (else 0: the receiver drops it) */
    if (err == 0)
        err = send_all(r->stop_fd, deadline, fd, &trailer, sizeof trailer);
    if (err == 0) /* (its check after the bytes: a line's time more) */
        err = recv_all(r->stop_fd, deadline + LINE_MS / 1000.0, fd, &answer, 1);
    if (err == 0 && answer != 'k')
        err = trailer == 0 ? -ESTALE : -EREMOTEIO; /* (refused: its log says why) */
    /* A receiver refuses a header that changed before it went as soon as it comes, and
     * closes: the send fails (a reset), and the slot saved again is why. */
    if (err != 0 && err != -ECANCELED && err != -ESTALE && fd >= 0 && still_the_slot(in, h) == 0)
        err = -ESTALE;
    if (fd >= 0)
        close(fd);
    return err;
}

/* Rank `rank`'s newest complete, checksummed slot: its number, open at *in, with *h; or -1. */
static int newest_slot(const char *dir, int rank, int *in, ddp_ckpt_header_t *h)
{
    int best = -1;
    for (int slot = 0; slot < 2; slot++) {
        char path[PATH_MAX + 32];
        ddp_ckpt_header_t seen;
        uint64_t size;
        if (ddp_ckpt_slot_path(path, sizeof path, dir, rank, slot) != 0)
            continue;
        int fd = ddp_open_worker_file(path);
        if (fd < 0)
            continue;
        if (ddp_ckpt_pread_header(fd, &seen, &size, NULL) == 0 && seen.state == DDP_CKPT_COMPLETE &&
            seen.checksum_generation == seen.generation && seen.used_bytes <= size &&
            (best < 0 || seen.generation > h->generation)) {
            if (best >= 0)
                close(*in);
            best = slot;
            *in = fd;
            *h = seen;
        } else {
            close(fd);
        }
    }
    return best;
}

/* A peer of the round, as the sender sees it. */
typedef struct {
    double next;    /* ddp_clock_mono's: not tried before (0: at once) */
    double backoff; /* s: the next rest after a failure (0: none failed yet) */
    bool said;      /* a failure said this round */
} peer_state_t;

/* One look: each rank's newest slot, where it is newer than what went there, to every peer
 * not resting after a failure. A peer that fails or refuses is said (once a round) and
 * rests, RETRY_MS at first and twice as long after each failure in a row (RETRY_MAX_MS at
 * most), while the others go on: one bad peer holds up no other. sent[i * npeers + p]: the
 * generation of rank first + i's slot that went to peer p. */
static void send_look(ddp_checkpoint_replicas_t *r, int first, int nranks,
                      const ddp_replica_peer_t *peers, int npeers, uint64_t *sent,
                      peer_state_t *state)
{
    for (int i = 0; i < nranks; i++) {
        ddp_ckpt_header_t h = {0};
        int in = -1, slot = newest_slot(r->dir, first + i, &in, &h);
        if (slot < 0 || h.world_size != (uint32_t)atomic_load(&r->world_size)) { /* (refused) */
            if (in >= 0)
                close(in);
            continue;
        }
        for (int p = 0; p < npeers; p++) {
            double began = ddp_clock_mono();
            if (h.generation <= sent[i * npeers + p] || began < state[p].next)
                continue;
            int err = send_slot(r, &peers[p], in, first + i, slot, &h);
            if (err == -ECANCELED)
                break;
            if (err == 0) { /* (bench/checkpoint reads the time) */
                ddp_log_debug(r->log,
                              "in-memory checkpoints: rank %d's step %" PRId64
                              " sent to %s:%d as a replica (%" PRIu64 " bytes in %.4f s)",
                              first + i, h.step, peers[p].host, peers[p].port, h.used_bytes,
                              ddp_clock_mono() - began);
                sent[i * npeers + p] = h.generation;
                state[p].backoff = 0;
                continue;
            }
            char why[512];
            if (err == -ESTALE) /* (refused: what went is no slot any more) */
                snprintf(why, sizeof why,
                         "the slot was saved again while it went: saves come faster than the "
                         "job's replica rate carries it (%" PRIu64 " bytes at %" PRIu64
                         " bytes a second take %.1f s; the job's rate is the lowest "
                         "--checkpoint-replica-rate of its nodes%s); give every node a higher "
                         "rate or save less often",
                         h.used_bytes, rate_now(r),
                         rate_now(r) > 0 ? (double)h.used_bytes / (double)rate_now(r) : 0.0,
                         rate_now(r) < r->rate ? ", lower than this node's: another node's" : "");
            else if (err == -EREMOTEIO)
                snprintf(why, sizeof why,
                         "the peer refused it (its log says why: a node whose round has not "
                         "begun yet refuses replicas until it has)");
            else
                snprintf(why, sizeof why, "%s", ddp_strerror(err));
            if (!state[p].said)
                ddp_log_warn(r->log,
                             "in-memory checkpoints: unable to send rank %d's step %" PRId64
                             " to %s:%d: %s; tried again, the other peers meanwhile",
                             first + i, h.step, peers[p].host, peers[p].port, why);
            state[p].said = true;
            state[p].backoff = state[p].backoff == 0 ? RETRY_MS / 1000.0
                               : state[p].backoff * 2 < RETRY_MAX_MS / 1000.0
                                   ? state[p].backoff * 2
                                   : RETRY_MAX_MS / 1000.0;
            state[p].next = ddp_clock_mono() + state[p].backoff;
        }
        close(in);
    }
}

static void *send_run(void *arg)
{
    ddp_checkpoint_replicas_t *r = arg;
    unsigned seq = 0;
    int first = 0, nranks = 0, npeers = 0;
    uint64_t *sent = NULL;
    peer_state_t state[MAX_PEERS];
    ddp_replica_peer_t peers[MAX_PEERS];
    for (double rest_s = IDLE_MS / 1000.0; news(r, rest_s);) {
        pthread_mutex_lock(&r->mutex);
        bool new_round = r->round_seq != seq;
        if (new_round) {
            seq = r->round_seq;
            first = r->first_rank;
            nranks = r->nranks;
            npeers = r->npeers;
            memcpy(peers, r->peers, sizeof peers);
        }
        pthread_mutex_unlock(&r->mutex);
        if (new_round) {
            free(sent);
            sent = calloc(((size_t)nranks + 1) * ((size_t)npeers + 1), sizeof *sent);
            memset(state, 0, sizeof state);
        }
        if (sent != NULL && npeers > 0)
            send_look(r, first, nranks, peers, npeers, sent, state);
        /* Until the news, or the first peer resting after a failure is due again. */
        double now = ddp_clock_mono();
        rest_s = IDLE_MS / 1000.0;
        for (int p = 0; p < npeers; p++)
            if (state[p].next > now && state[p].next - now < rest_s)
                rest_s = state[p].next - now;
    }
    free(sent);
    return NULL;
}

/* Setup. */

/* A listening socket at `addr` (its port 0: one the system picks; the IPv6 wildcard takes
 * IPv4 too): the socket with *port, or -errno. */
static int listen_on(const struct sockaddr *addr, socklen_t addr_len, int *port)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), off = 0;
    int err = fd < 0 ? -errno : 0;
    struct sockaddr_storage bound;
    socklen_t len = sizeof bound;
    if (err == 0 && addr->sa_family == AF_INET6 &&
        IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr) &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) != 0)
        err = -errno;
    if (err == 0 && (bind(fd, addr, addr_len) != 0 || listen(fd, 4 * PENDING_MAX) != 0 ||
                     getsockname(fd, (struct sockaddr *)&bound, &len) != 0))
        err = -errno;
    if (err != 0) {
        if (fd >= 0)
            close(fd);
        return err;
    }
    *port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                              : ((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

/* A listening socket on every address, port 0: IPv6 with IPv4 mapped where it can. */
static int listen_any(int *port)
{
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    int fd = listen_on((struct sockaddr *)&a6, sizeof a6, port);
    return fd >= 0 ? fd : listen_on((struct sockaddr *)&a4, sizeof a4, port);
}

/* A listening socket at the numeric address `host`, port 0: the socket with *port, or an
 * error. */
static int listen_host(const char *host, int *port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE},
                    *ai = NULL;
    int fd = getaddrinfo(host, "0", &hints, &ai) != 0
                 ? -EINVAL
                 : listen_on(ai->ai_addr, ai->ai_addrlen, port);
    if (ai != NULL)
        freeaddrinfo(ai);
    return fd;
}

int ddp_checkpoint_replicas_listen_at(ddp_checkpoint_replicas_t *r, const char *host)
{
    pthread_mutex_lock(&r->mutex);
    bool known = strcmp(r->bound, host) == 0 || strcmp(r->unbindable, host) == 0;
    pthread_mutex_unlock(&r->mutex);
    if (known)
        return atomic_load(&r->port);
    int port = 0, fd = listen_host(host, &port), err = fd < 0 ? fd : 0;
    if (err != 0)
        ddp_log_warn(r->log,
                     "in-memory checkpoints: unable to listen for replicas at %s alone: %s; they "
                     "are taken on every address (the secret keeps others out)",
                     host, ddp_strerror(err));
    pthread_mutex_lock(&r->mutex);
    if (err != 0) {
        snprintf(r->unbindable, sizeof r->unbindable, "%s", host);
        /* (bound to another address before: every address again) */
        fd = r->bound[0] != '\0' ? listen_any(&port) : -1;
    }
    if (fd >= 0) {
        if (r->next_listen_fd >= 0)
            close(r->next_listen_fd);
        r->next_listen_fd = fd;
        snprintf(r->bound, sizeof r->bound, "%s", err == 0 ? host : "");
        atomic_store(&r->port, port);
    }
    pthread_mutex_unlock(&r->mutex);
    uint64_t one = 1;
    if (fd >= 0 && write(r->wake_fd, &one, sizeof one) < 0) {
        /* (it cannot fail: a counter far from its limit) */
    }
    if (fd >= 0 && err == 0)
        ddp_log_debug(r->log, "in-memory checkpoints: replicas are taken at %s:%d alone", host,
                      port);
    return atomic_load(&r->port);
}

int ddp_checkpoint_replicas_start(const char *dir, uint64_t rate, const ddp_log_t *log,
                                  ddp_checkpoint_replicas_t **out)
{
    ddp_checkpoint_replicas_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->log = log;
    r->rate = rate;
    r->stop_fd = r->wake_fd = r->send_fd = r->next_listen_fd = -1;
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    pthread_mutex_init(&r->mutex, NULL);
    uint8_t secret[DDP_REPLICA_KEY_CHARS / 2];
    int err = getrandom(secret, sizeof secret, 0) == (ssize_t)sizeof secret ? 0 : -errno;
    for (size_t i = 0; err == 0 && i < sizeof secret; i++)
        snprintf(&r->key[2 * i], 3, "%02x", secret[i]);
    int port = 0;
    if (err == 0)
        err = r->listen_fd = listen_any(&port);
    else
        r->listen_fd = -1;
    atomic_store(&r->port, port);
    if (err >= 0)
        err = (r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ? -errno : 0;
    if (err == 0)
        err = (r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ? -errno : 0;
    if (err == 0)
        err = (r->send_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ? -errno : 0;
    if (err == 0)
        err = -pthread_create(&r->receiver, NULL, receive_run, r);
    r->receiver_started = err == 0;
    if (err == 0)
        err = -pthread_create(&r->sender, NULL, send_run, r);
    r->sender_started = err == 0;
    if (err == 0) { /* (named for top -H and the tests) */
        (void)pthread_setname_np(r->receiver, "ddp-repl-recv");
        (void)pthread_setname_np(r->sender, "ddp-repl-send");
    }
    if (err != 0) {
        ddp_log_warn(log,
                     "in-memory checkpoints: unable to listen for replicas or start their "
                     "threads: %s; no replica is kept or sent",
                     ddp_strerror(err));
        ddp_checkpoint_replicas_stop(r);
        return err;
    }
    ddp_log_debug(log, "in-memory checkpoints: replicas are taken on port %d", port);
    *out = r;
    return 0;
}

/* The answer line of a GET: "DDPREPL1 BYTES". */
static bool parse_answer(char *line, uint64_t *bytes)
{
    char *save, *word[3] = {0};
    int n = 0;
    for (char *w = strtok_r(line, " ", &save); w != NULL && n < 3; w = strtok_r(NULL, " ", &save))
        word[n++] = w;
    int64_t b;
    if (n != 2 || strcmp(word[0], TAG) != 0 || !number(word[1], INT64_MAX, &b))
        return false;
    *bytes = (uint64_t)b;
    return true;
}

int ddp_checkpoint_replicas_fetch(const ddp_replica_peer_t *peer, const char *dir, int rank,
                                  int64_t step, int world_size, int nranks, uint64_t rate,
                                  double deadline, int stop_fd, uint64_t *bytes, ddp_buf_t *why)
{
    char line[REQUEST_MAX], name[64], path[PATH_MAX + 64];
    uint64_t size = 0;
    int fd = connect_peer(stop_fd, peer), err = fd < 0 ? fd : 0;
    int len = snprintf(line, sizeof line, TAG " GET %s %d %" PRId64 " %" PRIu64 "\n", peer->key,
                       rank, step, rate);
    if (err == 0 && deadline > 0 && ddp_clock_mono() >= deadline)
        err = (ddp_buf_printf(why, "no time was left for it"), DDP_ETIMEOUT);
    if (err == 0)
        err = send_all(stop_fd, ddp_clock_mono() + LINE_MS / 1000.0, fd, line, (size_t)len);
    if (err == 0)
        err = read_line(stop_fd, fd, line, why);
    if (err == 0 && !parse_answer(line, &size))
        err = (ddp_buf_printf(why, "its answer is not one"), DDP_EPARSE);
    if (err == 0 && size == 0)
        err = (ddp_buf_printf(why, "it holds none"), -ENOENT);
    snprintf(name, sizeof name, DDP_CKPT_SLOT_FILE, rank, 0);
    /* Its step checked as its header comes (slot 0 replaced by that alone); the size against
     * the room less as much again for each of this node's ranks (each rank's next save, of
     * about that size, is to have its room beside it); within a PUT's deadline at this
     * node's rate and the whole `deadline`, so that a holder that claims much and trickles
     * holds the exchange thread seconds, not hours. */
    expect_t e = {.rank = rank,
                  .world = world_size,
                  .step = step,
                  .bytes = size,
                  .reserve = size > UINT64_MAX / (uint64_t)(nranks > 1 ? nranks : 1)
                                 ? UINT64_MAX
                                 : size * (uint64_t)(nranks > 1 ? nranks : 1),
                  .floor = rate_floor(rate, 1),
                  .slack_ms = PUT_SLACK_MS,
                  .until = deadline};
    if (err == 0)
        err = receive_into(stop_fd, fd, dir, name, &e, why);
    if (err == 0 && ddp_ckpt_slot_path(path, sizeof path, dir, rank, 1) == 0)
        (void)unlink(path); /* (older: the load must find the fetched step alone) */
    if (err != 0 && why->len == 0)
        ddp_buf_printf(why, "%s", ddp_strerror(err));
    if (fd >= 0)
        close(fd);
    if (err == 0)
        *bytes = size;
    return err;
}

uint64_t ddp_checkpoint_replicas_rate(const ddp_checkpoint_replicas_t *r)
{
    return r != NULL ? r->rate : 0;
}

void ddp_checkpoint_replicas_job_rate(ddp_checkpoint_replicas_t *r, uint64_t rate)
{
    if (r != NULL)
        atomic_store(&r->job_rate, rate);
}

int ddp_checkpoint_replicas_port(const ddp_checkpoint_replicas_t *r)
{
    return r != NULL ? atomic_load(&r->port) : 0;
}

const char *ddp_checkpoint_replicas_key(const ddp_checkpoint_replicas_t *r)
{
    return r != NULL ? r->key : "";
}

void ddp_checkpoint_replicas_round(ddp_checkpoint_replicas_t *r, int first_rank, int nranks,
                                   int world_size, const ddp_replica_peer_t *peers, int n)
{
    if (r == NULL)
        return;
    atomic_store(&r->world_size, world_size);
    pthread_mutex_lock(&r->mutex);
    r->first_rank = first_rank;
    r->nranks = nranks;
    r->npeers = n < MAX_PEERS ? n : MAX_PEERS;
    if (r->npeers > 0)
        memcpy(r->peers, peers, (size_t)r->npeers * sizeof *peers);
    r->round_seq++;
    pthread_mutex_unlock(&r->mutex);
    tell_sender(r);
}

void ddp_checkpoint_replicas_world(ddp_checkpoint_replicas_t *r, int world_size)
{
    if (r != NULL)
        atomic_store(&r->world_size, world_size);
}

void ddp_checkpoint_replicas_summed(void *r)
{
    tell_sender(r);
}

uint64_t ddp_checkpoint_replicas_received(const ddp_checkpoint_replicas_t *r)
{
    return r != NULL ? atomic_load(&r->received) : 0;
}

void ddp_checkpoint_replicas_stop(ddp_checkpoint_replicas_t *r)
{
    if (r == NULL)
        return;
    uint64_t one = 1;
    if (r->stop_fd >= 0 && write(r->stop_fd, &one, sizeof one) < 0) {
        /* (it cannot fail: a counter far from its limit) */
    }
    if (r->receiver_started)
        pthread_join(r->receiver, NULL);
    if (r->sender_started)
        pthread_join(r->sender, NULL);
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    if (r->next_listen_fd >= 0)
        close(r->next_listen_fd);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    if (r->send_fd >= 0)
        close(r->send_fd);
    if (r->stop_fd >= 0)
        close(r->stop_fd);
    pthread_mutex_destroy(&r->mutex);
    free(r);
}
