/* agent/checkpoint_replicas.c over loopback: two launchers' replica parts on directories of
 * the test's; a slot of rank 2 in A's goes to B at the rate asked, byte for byte, and again
 * once A holds a newer one; what a peer could send B instead (a replica before any round, a
 * request without B's key or with another, no request, an absurd size, a slot whose data
 * no longer matches its checksum, a sender gone mid-transfer): each refused and said,
 * nothing kept or left behind, and B takes the next good one; a GET is answered only with
 * B's key. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/checkpoint_replicas.h"
#include "agent/checkpoint_sums.h"
#include "ckpt.h"
#include "ckpt_file.h"
#include "error.h"
#include "io.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RECORD_BYTES (3u << 20) /* a slot of several of the sender's chunks */
#define RATE         (8u << 20)

static char dir_a[PATH_MAX], dir_b[PATH_MAX];

static void make_dir(char *dir)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, PATH_MAX, "%s/ddp-replicas-XXXXXX", tmp != NULL ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    char path[PATH_MAX + 300];
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d != NULL)
        closedir(d);
    rmdir(dir);
}

/* A complete, checksummed slot of rank 2 (world 4) at `generation`, its one record of
 * `record` bytes filled with `fill`: its bytes (malloc'd) and their number. */
static uint8_t *sized_slot(uint64_t generation, int fill, size_t record, size_t *size)
{
    uint64_t table = ddp_ckpt_align(DDP_CKPT_HEADER_BYTES + record), used = table + 64;
    uint8_t *data = aligned_alloc(64, used);
    assert_non_null(data);
    memset(data, 0, used);
    ddp_ckpt_header_t *h = (ddp_ckpt_header_t *)data;
    *h = (ddp_ckpt_header_t){.version = DDP_CKPT_VERSION,
                             .state = DDP_CKPT_COMPLETE,
                             .generation = generation,
                             .step = (int64_t)generation * 10,
                             .world_size = 4,
                             .rank = 2,
                             .kind = DDP_CKPT_BUFFERS,
                             .records = 1,
                             .table_offset = table,
                             .used_bytes = used};
    memcpy(h->magic, DDP_CKPT_MAGIC, 8);
    ddp_ckpt_record_t *r = (ddp_ckpt_record_t *)(data + table);
    snprintf(r->name, sizeof r->name, "weights");
    r->offset = DDP_CKPT_HEADER_BYTES;
    r->size = record;
    memset(data + DDP_CKPT_HEADER_BYTES, fill, record);
    ddp_ckpt_t c;
    assert_int_equal(ddp_ckpt_parse(data, used, &c, NULL), 0);
    h->checksum = ddp_ckpt_slot_sum(&c);
    h->checksum_generation = generation;
    *size = used;
    return data;
}

/* One of RECORD_BYTES. */
static uint8_t *slot_bytes(uint64_t generation, int fill, size_t *size)
{
    return sized_slot(generation, fill, RECORD_BYTES, size);
}

static void put(const char *dir, const char *name, const void *data, size_t len)
{
    char path[PATH_MAX + 64], tmp[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    assert_int_equal(rename(tmp, path), 0);
}

/* The file DIR/NAME's bytes, or NULL where there is none. */
static char *file_bytes(const char *dir, const char *name, size_t *len)
{
    char path[PATH_MAX + 64], *data = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return ddp_read_file(path, 64u << 20, &data, len) == 0 ? data : NULL;
}

/* Waits (a deadline of 30 s) until DIR/NAME holds `want`; the seconds it took. */
static double wait_for_copy(const char *dir, const char *name, const uint8_t *want, size_t len)
{
    double began = ddp_clock_mono();
    for (;;) {
        size_t got_len = 0;
        char *got = file_bytes(dir, name, &got_len);
        bool same = got != NULL && got_len == len && memcmp(got, want, len) == 0;
        free(got);
        if (same)
            return ddp_clock_mono() - began;
        if (ddp_clock_mono() - began > 30)
            fail_msg("%s/%s never held the slot", dir, name);
        poll(NULL, 0, 10);
    }
}

/* A connection to B's port on loopback. */
static int connect_b(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Sends `len` bytes of a request, then what B answers: 'k', 'n', or 0 where it closed. */
static char ask(int port, const void *data, size_t len, bool half)
{
    int fd = connect_b(port);
    char answer = 0;
    assert_int_equal(send(fd, data, half ? len / 2 : len, MSG_NOSIGNAL),
                     (ssize_t)(half ? len / 2 : len));
    if (half) {
        close(fd); /* gone mid-transfer */
        return 0;
    }
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (recv(fd, &answer, 1, 0) != 1)
        answer = 0;
    close(fd);
    return answer;
}

static const char *key_b; /* B's key */

/* A request of `line` (its '\n' included) carrying `slot` (len bytes) and `trailer`. */
static uint8_t *request(const char *line, const uint8_t *slot, size_t len, uint64_t trailer,
                        size_t *out)
{
    size_t n = strlen(line);
    uint8_t *req = malloc(n + len + 8);
    assert_non_null(req);
    memcpy(req, line, n);
    memcpy(req + n, slot, len);
    memcpy(req + n + len, &trailer, 8);
    *out = n + len + 8;
    return req;
}

/* A PUT request of rank 2's slot 0 carrying `slot` (len bytes) and `trailer`. */
static uint8_t *put_request(const uint8_t *slot, size_t len, uint64_t trailer, size_t *out)
{
    char line[128];
    snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 %zu\n", key_b, len);
    return request(line, slot, len, trailer, out);
}

/* The log's text so far (a buffer of its own, good until the next call). */
static const char *logged_text(int log_fd)
{
    static char buf[1 << 20];
    ssize_t n = pread(log_fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* Whether the log says `text`. */
static bool logged(int log_fd, const char *text)
{
    return strstr(logged_text(log_fd), text) != NULL;
}

/* Only the kept replica in B's directory: no dot file left. */
static void nothing_else(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            fail_msg("%s left in %s", e->d_name, dir);
    closedir(d);
}

/* A log file beside B's directory, already unlinked: its fd. */
static int open_log(void)
{
    char log_path[PATH_MAX + 64];
    snprintf(log_path, sizeof log_path, "%s/../replicas-log-%d", dir_b, (int)getpid());
    int log_fd = open(log_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(log_fd >= 0);
    unlink(log_path);
    return log_fd;
}

/* B alone, on a directory of its own, logging into open_log's, at `rate`, before any round. */
static ddp_checkpoint_replicas_t *start_b_unrounded(uint64_t rate, ddp_log_t *log)
{
    make_dir(dir_b);
    *log = (ddp_log_t){.name = "test", .level = DDP_LOG_DEBUG, .fd = open_log()};
    ddp_checkpoint_replicas_t *b;
    assert_int_equal(ddp_checkpoint_replicas_start(dir_b, rate, log, &b), 0);
    key_b = ddp_checkpoint_replicas_key(b);
    return b;
}

/* As start_b_unrounded, in a round where its rank is 0 of 4. */
static ddp_checkpoint_replicas_t *start_b(uint64_t rate, ddp_log_t *log)
{
    ddp_checkpoint_replicas_t *b = start_b_unrounded(rate, log);
    ddp_checkpoint_replicas_round(b, 0, 1, 4, NULL, 0);
    return b;
}

/* A round of 4 where B holds ranks 0-1 and A rank 2, its slots sent to B. */
static void a_sends_to_b(ddp_checkpoint_replicas_t *a, ddp_checkpoint_replicas_t *b)
{
    ddp_replica_peer_t peer = {"127.0.0.1", ddp_checkpoint_replicas_port(b), "", 0};
    snprintf(peer.key, sizeof peer.key, "%s", key_b);
    ddp_checkpoint_replicas_round(b, 0, 2, 4, NULL, 0);
    ddp_checkpoint_replicas_round(a, 2, 1, 4, &peer, 1);
}

static void test_replicas_over_loopback(void **state)
{
    (void)state;
    make_dir(dir_a);
    make_dir(dir_b);
    int log_fd = open_log();
    ddp_log_t log = {.name = "test", .level = DDP_LOG_DEBUG, .fd = log_fd};
    ddp_checkpoint_replicas_t *a, *b;
    assert_int_equal(ddp_checkpoint_replicas_start(dir_a, RATE, &log, &a), 0);
    assert_int_equal(ddp_checkpoint_replicas_start(dir_b, 0, &log, &b), 0);
    int port = ddp_checkpoint_replicas_port(b);
    assert_true(port > 0);
    key_b = ddp_checkpoint_replicas_key(b);
    assert_int_equal(strlen(key_b), DDP_REPLICA_KEY_CHARS);
    assert_string_not_equal(key_b, ddp_checkpoint_replicas_key(a)); /* random: each its own */

    /* A's rank 2 at generation 1 in its slot 0: B gets it, no faster than the rate. */
    size_t len, req_len;
    uint8_t *one = slot_bytes(1, 0x11, &len);
    size_t small_len; /* (refused at its line: all of it in the socket's buffers) */
    uint8_t *small = sized_slot(2, 0x33, 4096, &small_len);
    /* Before B's first round: refused (the world is not known yet). */
    uint8_t *req = put_request(small, small_len, 2, &req_len);
    assert_int_equal(ask(port, req, req_len, false), 'n');
    assert_true(logged(log_fd, "no round has begun yet"));
    free(req);
    put(dir_a, "rank2.0", one, len);
    ddp_replica_peer_t peer = {"127.0.0.1", port, "", 0};
    snprintf(peer.key, sizeof peer.key, "%s", key_b);
    ddp_checkpoint_replicas_round(a, 2, 1, 4, &peer, 1);
    ddp_checkpoint_replicas_round(b, 0, 2, 4, NULL, 0);
    double took = wait_for_copy(dir_b, "replica2.0", one, len);
    assert_true(took >= 0.8 * (double)len / RATE);

    /* What a peer could send instead: each refused, said, nothing kept or left. */
    char line[160];
    uint8_t *two = slot_bytes(2, 0x22, &len);
    const char *keys[] = {NULL, "00000000000000000000000000000000", "0", ""}; /* "": a prefix */
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (keys[i] == NULL)
            snprintf(line, sizeof line, "DDPREPL1 PUT 2 0 %zu\n", small_len);
        else if (keys[i][0] == '\0')
            snprintf(line, sizeof line, "DDPREPL1 PUT %.31s 2 0 %zu\n", key_b, small_len);
        else
            snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 %zu\n", keys[i], small_len);
        req = request(line, small, small_len, 2, &req_len);
        assert_int_equal(ask(port, req, req_len, false), 'n');
        free(req);
    }
    assert_true(logged(log_fd, "its request is not one of this job's"));
    assert_null(file_bytes(dir_b, "replica2.1", &req_len)); /* nothing written */
    assert_int_equal(ask(port, "junk\n", 5, false), 'n');
    snprintf(line, sizeof line, "DDPREPL1 PUT %s 4 0 4096\n", key_b); /* a world of 4 */
    assert_int_equal(ask(port, line, strlen(line), false), 'n');
    assert_true(logged(log_fd, "rank 4 is not of this job's world of 4"));
    snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 999999999999999999\n", key_b);
    assert_int_equal(ask(port, line, strlen(line), false), 'n');
    assert_true(logged(log_fd, "more than there is room for"));
    /* 19 digits that would wrap past INT64_MAX to rank 2 (2^63 + 2): refused. */
    snprintf(line, sizeof line, "DDPREPL1 PUT %s 9223372036854775810 0 %zu\n", key_b, small_len);
    req = request(line, small, small_len, 2, &req_len);
    assert_int_equal(ask(port, req, req_len, false), 'n');
    free(req);
    /* A GET: answered with B's key ("DDPREPL1 BYTES"), closed unanswered without it. */
    snprintf(line, sizeof line, "DDPREPL1 GET %s 2 10\n", key_b);
    assert_int_equal(ask(port, line, strlen(line), false), 'D');
    const char *get_keyless = "DDPREPL1 GET 2 10\n";
    assert_int_equal(ask(port, get_keyless, strlen(get_keyless), false), 0);
    snprintf(line, sizeof line, "DDPREPL1 GET %s 2 10\n", ddp_checkpoint_replicas_key(a));
    assert_int_equal(ask(port, line, strlen(line), false), 0);
    assert_true(logged(log_fd, "it is not a request of this job's"));
    two[DDP_CKPT_HEADER_BYTES + 5] ^= 1; /* after its checksum */
    req = put_request(two, len, 2, &req_len);
    assert_int_equal(ask(port, req, req_len, false), 'n');
    assert_true(logged(log_fd, "its data does not match its checksum"));
    free(req);
    two[DDP_CKPT_HEADER_BYTES + 5] ^= 1;
    req = put_request(two, len, 0, &req_len); /* the sender saw it change */
    assert_int_equal(ask(port, req, req_len, false), 'n');
    assert_true(logged(log_fd, "the slot changed while it was sent"));
    (void)ask(port, req, req_len, true);
    free(req);
    size_t held_len;
    char *held = file_bytes(dir_b, "replica2.0", &held_len);
    assert_true(held != NULL && held_len == len && memcmp(held, one, len) == 0);
    free(held);

    /* A newer slot of A's (its slot 1) goes too. */
    put(dir_a, "rank2.1", two, len);
    ddp_checkpoint_replicas_summed(a); /* (as the sums' thread tells it) */
    (void)wait_for_copy(dir_b, "replica2.1", two, len);
    nothing_else(dir_b);
    assert_true(ddp_checkpoint_replicas_received(b) == 2 * (uint64_t)len);
    char small_line[128];
    /* A header that is not the slot's the request said (all zeros): refused as soon as it
     * came, the rest of the size it claimed never awaited. */
    uint8_t zeros[DDP_CKPT_HEADER_BYTES] = {0};
    snprintf(small_line, sizeof small_line, "DDPREPL1 PUT %s 2 1 %u\n", key_b, 3u << 20);
    req = request(small_line, zeros, sizeof zeros, 0, &req_len);
    assert_int_equal(ask(port, req, req_len - 8, false), 'n');
    assert_true(logged(log_fd, "its header is not that of a complete, checksummed slot of rank 2"));
    assert_false(logged(log_fd, "did not come within"));
    free(req);
    /* A connection that stalls in its request line holds up no other: a PUT beside it is
     * kept while it is still open, and it is dropped once its line's time ran out. */
    int slow = connect_b(port);
    assert_int_equal(send(slow, "DDPREPL1 PUT ", 13, MSG_NOSIGNAL), 13);
    free(small);
    small = sized_slot(3, 0x44, 4096, &small_len);
    snprintf(small_line, sizeof small_line, "DDPREPL1 PUT %s 2 1 %zu\n", key_b, small_len);
    req = request(small_line, small, small_len, 3, &req_len);
    assert_int_equal(ask(port, req, req_len, false), 'k');
    assert_false(logged(log_fd, "a whole line did not come within"));
    free(req);
    double began = ddp_clock_mono();
    while (!logged(log_fd, "a whole line did not come within 3 s")) {
        if (ddp_clock_mono() - began > 30)
            fail_msg("the stalled connection was never dropped");
        poll(NULL, 0, 20);
    }
    char gone;
    assert_int_equal(recv(slow, &gone, 1, 0), 1); /* its 'n', then the end */
    assert_int_equal(gone, 'n');
    close(slow);
    /* Idle connections from this one address, more than the caps (16 at once, 4 of one
     * address) and than the places for request lines, reopened as they are dropped: a PUT
     * with the key is kept all the same, at once. */
    int idle[80];
    for (int i = 0; i < 80; i++)
        idle[i] = connect_b(port);
    snprintf(small_line, sizeof small_line, "DDPREPL1 PUT %s 2 1 %zu\n", key_b, small_len);
    req = request(small_line, small, small_len, 3, &req_len);
    began = ddp_clock_mono();
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 80; i++) { /* (the dropped ones reopened) */
            char peek;
            if (recv(idle[i], &peek, 1, MSG_DONTWAIT) == 0) {
                close(idle[i]);
                idle[i] = connect_b(port);
            }
        }
        assert_int_equal(ask(port, req, req_len, false), 'k');
    }
    assert_true(ddp_clock_mono() - began < 2.5); /* (before an idle one's line ran out) */
    free(req);
    for (int i = 0; i < 80; i++)
        close(idle[i]);
    free(small);
    /* Refused connections are said 10 at most, then once a minute with their count. */
    for (int i = 0; i < 60; i++)
        assert_int_equal(ask(port, "junk\n", 5, false), 'n');
    assert_true(logged(log_fd, "further refusals said once a minute"));
    int said = 0;
    for (const char *at = logged_text(log_fd); (at = strstr(at, "is refused: ")) != NULL; at++)
        said++;
    assert_int_equal(said, 10);

    ddp_checkpoint_replicas_stop(a);
    ddp_checkpoint_replicas_stop(b);
    free(one);
    free(two);
    close(log_fd);
    remove_dir(dir_a);
    remove_dir(dir_b);
}

/* A peer that refuses every replica (A holds a wrong key for it) comes first in A's round:
 * B, after it, gets A's slot all the same, and the refusing peer is said once and tried
 * again later. */
static void test_one_peer_refusing_holds_up_no_other(void **state)
{
    (void)state;
    make_dir(dir_a);
    make_dir(dir_b);
    int log_fd = open_log();
    ddp_log_t log = {.name = "test", .level = DDP_LOG_DEBUG, .fd = log_fd};
    ddp_checkpoint_replicas_t *a, *b;
    assert_int_equal(ddp_checkpoint_replicas_start(dir_a, 0, &log, &a), 0);
    assert_int_equal(ddp_checkpoint_replicas_start(dir_b, 0, &log, &b), 0);
    size_t len;
    uint8_t *one = sized_slot(1, 0x11, 4096, &len);
    put(dir_a, "rank2.0", one, len);
    ddp_replica_peer_t peers[2] = {{"127.0.0.1", ddp_checkpoint_replicas_port(b), "", 0},
                                   {"127.0.0.1", ddp_checkpoint_replicas_port(b), "", 0}};
    snprintf(peers[0].key, sizeof peers[0].key, "%s", ddp_checkpoint_replicas_key(a));
    snprintf(peers[1].key, sizeof peers[1].key, "%s", ddp_checkpoint_replicas_key(b));
    ddp_checkpoint_replicas_round(b, 0, 2, 4, NULL, 0);
    ddp_checkpoint_replicas_round(a, 2, 1, 4, peers, 2);
    assert_true(wait_for_copy(dir_b, "replica2.0", one, len) < 5);
    assert_true(logged(log_fd, "tried again, the other peers meanwhile"));
    ddp_checkpoint_replicas_stop(a);
    ddp_checkpoint_replicas_stop(b);
    free(one);
    close(log_fd);
    remove_dir(dir_a);
    remove_dir(dir_b);
}

/* A peer that answers a GET, on the listening socket `fd`, with `slot` (len bytes) whatever
 * was asked: its thread. */
typedef struct {
    int fd;
    const uint8_t *slot;
    size_t len;
    uint64_t generation;
} liar_t;

static void *liar_run(void *arg)
{
    liar_t *l = arg;
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        return NULL;
    int c = accept(l->fd, NULL, NULL);
    char ch = 0, head[64];
    while (c >= 0 && recv(c, &ch, 1, 0) == 1 && ch != '\n') {
    }
    int n = snprintf(head, sizeof head, "DDPREPL1 %zu\n", l->len);
    if (c >= 0 && send(c, head, (size_t)n, MSG_NOSIGNAL) == n &&
        send(c, l->slot, l->len, MSG_NOSIGNAL) == (ssize_t)l->len)
        (void)send(c, &l->generation, 8, MSG_NOSIGNAL);
    if (c >= 0)
        close(c);
    return NULL;
}

/* A fetch of step 10 answered with step 20 (a whole, checksummed slot of that rank and
 * world): refused as its header comes, and this node's own slot 0 is left as it was. */
static void test_fetch_of_another_step_leaves_slot_0(void **state)
{
    (void)state;
    make_dir(dir_a);
    size_t own_len, other_len;
    uint8_t *own = sized_slot(1, 0x11, 4096, &own_len);     /* step 10 */
    uint8_t *other = sized_slot(2, 0x22, 4096, &other_len); /* step 20 */
    put(dir_a, "rank2.0", own, own_len);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    liar_t l = {.fd = fd, .slot = other, .len = other_len, .generation = 2};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, liar_run, &l), 0);
    ddp_replica_peer_t peer = {"127.0.0.1", ntohs(a.sin_port), "0123456789abcdef0123456789abcdef",
                               0};
    ddp_buf_t why = DDP_BUF_INIT;
    uint64_t bytes = 0;
    int err = ddp_checkpoint_replicas_fetch(&peer, dir_a, 2, 10, 4, 1, 0, 0, -1, &bytes, &why);
    pthread_join(thread, NULL);
    close(fd);
    assert_int_not_equal(err, 0);
    size_t held_len;
    char *held = file_bytes(dir_a, "rank2.0", &held_len);
    assert_true(held != NULL && held_len == own_len && memcmp(held, own, own_len) == 0);
    assert_non_null(strstr(ddp_buf_str(&why), "of the step asked for"));
    nothing_else(dir_a);
    free(held);
    ddp_buf_free(&why);
    free(own);
    free(other);
    remove_dir(dir_a);
}

/* A replica of two thirds of B's room, while B's own rank has saved nothing yet: refused at
 * its line, as that rank's first save (of about that size) is to have its room. */
static void test_room_kept_for_a_first_save(void **state)
{
    (void)state;
    make_dir(dir_b);
    int log_fd = open_log();
    ddp_log_t log = {.name = "test", .level = DDP_LOG_DEBUG, .fd = log_fd};
    ddp_checkpoint_replicas_t *b;
    assert_int_equal(ddp_checkpoint_replicas_start(dir_b, 0, &log, &b), 0);
    ddp_checkpoint_replicas_round(b, 0, 1, 4, NULL, 0); /* its rank 0: no slot yet */
    ddp_ckpt_room_t room;
    assert_int_equal(ddp_ckpt_room(dir_b, "/sys/fs/cgroup", "/proc/self/cgroup", &room), 0);
    char line[160];
    uint8_t zeros[DDP_CKPT_HEADER_BYTES] = {0};
    snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 %" PRIu64 "\n", ddp_checkpoint_replicas_key(b),
             room.bytes / 3 * 2);
    key_b = ddp_checkpoint_replicas_key(b);
    size_t req_len;
    uint8_t *req = request(line, zeros, sizeof zeros, 0, &req_len);
    assert_int_equal(ask(ddp_checkpoint_replicas_port(b), req, req_len - 8, false), 'n');
    assert_true(logged(log_fd, "more than there is room for"));
    free(req);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* `req` (len bytes) sent to B's port 32 KiB every 100 ms (320 KiB/s): what B answered ('k',
 * 'n'; 0 where it closed unanswered) and, in *took, when. */
static char trickle(int port, const uint8_t *req, size_t len, double *took)
{
    int fd = connect_b(port);
    char answer = 0;
    double began = ddp_clock_mono();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (size_t at = 0; at < len;) {
        size_t n = len - at < (32u << 10) ? len - at : (32u << 10);
        if (send(fd, req + at, n, MSG_NOSIGNAL) != (ssize_t)n)
            break; /* (closed: its answer is read below) */
        at += n;
        if (at < len && poll(&p, 1, 100) == 1)
            break;
    }
    if (poll(&p, 1, 30000) == 1 && recv(fd, &answer, 1, 0) != 1)
        answer = 0;
    *took = ddp_clock_mono() - began;
    close(fd);
    return answer;
}

/* A keyed peer cannot hold B's room for long: a replica claimed larger than 4 times the
 * largest slot B holds is refused at its line; one within that, trickled far below the
 * job's rate (a sixteenth of it, 3 s more, is the floor), ends at that deadline, not at
 * the 64 KiB/s floor's (a minute here). */
static void test_claim_bounded_by_the_slots_held(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(256u << 20, &log);
    int log_fd = log.fd, port = ddp_checkpoint_replicas_port(b);
    size_t own_len, big_len, req_len;
    uint8_t *own = sized_slot(1, 0x11, 4096, &own_len); /* B's rank 0's (its header says) */
    ((ddp_ckpt_header_t *)own)->rank = 0;
    put(dir_b, "rank0.0", own, own_len);
    uint8_t *big = sized_slot(1, 0x22, 1u << 20, &big_len);
    char line[160];
    snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 %zu\n", key_b, big_len);
    uint8_t *req = request(line, big, DDP_CKPT_HEADER_BYTES, 0, &req_len);
    assert_int_equal(ask(port, req, req_len - 8, false), 'n'); /* (its line and header) */
    assert_true(logged(log_fd, "more than 4 times the largest slot of this node's own ranks"));
    free(req);
    free(own);
    own = slot_bytes(1, 0x11, &own_len); /* B's rank 0 holds 3 MiB: a replica of 3 is taken */
    ((ddp_ckpt_header_t *)own)->rank = 0;
    put(dir_b, "rank0.0", own, own_len);
    free(big);
    big = slot_bytes(2, 0x22, &big_len);
    req = put_request(big, big_len, 2, &req_len);
    double took;
    char answer = trickle(port, req, req_len, &took);
    assert_true(logged(log_fd, "did not come within 3.2 s (16384 KiB/s)"));
    assert_true(answer != 'k' && took < 6); /* (the trickle's whole: 10 s) */
    free(req);
    free(big);
    free(own);
    ddp_checkpoint_replicas_stop(b);
    nothing_else(dir_b);
    close(log_fd);
    remove_dir(dir_b);
}

/* Whether a connection to ADDR:port is refused (nothing listens there). */
static bool refused_at(const char *addr, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    assert_int_equal(inet_pton(AF_INET, addr, &a.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    bool refused = connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno == ECONNREFUSED;
    close(fd);
    return refused;
}

/* The listener takes the address the record publishes alone: an address it cannot bind is
 * said and every address kept; 127.0.0.1 taken on a port of its own, where a PUT is kept,
 * while 127.0.0.2 (loopback too) is refused there and the first port is closed. */
static void test_listener_at_the_published_address(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(0, &log);
    int log_fd = log.fd, any = ddp_checkpoint_replicas_port(b);
    assert_int_equal(ddp_checkpoint_replicas_listen_at(b, "192.0.2.1"), any); /* not here */
    assert_true(logged(log_fd, "unable to listen for replicas at 192.0.2.1 alone"));
    assert_false(refused_at("127.0.0.2", any));
    int port = ddp_checkpoint_replicas_listen_at(b, "127.0.0.1");
    assert_true(port > 0 && port != any && ddp_checkpoint_replicas_port(b) == port);
    assert_int_equal(ddp_checkpoint_replicas_listen_at(b, "127.0.0.1"), port); /* (once) */
    double began = ddp_clock_mono();
    while (!refused_at("127.0.0.1", any)) { /* (the receiver takes the new one) */
        if (ddp_clock_mono() - began > 10)
            fail_msg("the listener on every address was never closed");
        poll(NULL, 0, 10);
    }
    assert_true(refused_at("127.0.0.2", port));
    size_t len, req_len;
    uint8_t *slot = sized_slot(1, 0x11, 4096, &len);
    uint8_t *req = put_request(slot, len, 1, &req_len);
    assert_int_equal(ask(port, req, req_len, false), 'k');
    free(req);
    free(slot);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* A GET of B's replica of rank 2's step 10, sent and never read: its connection. */
static int unread_get(int port)
{
    char line[128];
    int fd = connect_b(port), n = snprintf(line, sizeof line, "DDPREPL1 GET %s 2 10\n", key_b);
    assert_int_equal(send(fd, line, (size_t)n, MSG_NOSIGNAL), n);
    return fd;
}

/* The seconds until B ends the GET at fd (its bytes read, closed), within 30 s. */
static double get_ended(int fd, double began)
{
    static char buf[1 << 20];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 30000) == 1 && recv(fd, buf, sizeof buf, 0) > 0) {
    }
    return ddp_clock_mono() - began;
}

/* A GET is sent at B's rate, as a PUT is: 4 MiB at 4M a second, read at once, take about
 * a second (a quarter second's piece first), where they came unpaced in milliseconds. */
static void test_get_sent_at_the_rate(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(4u << 20, &log);
    int log_fd = log.fd, port = ddp_checkpoint_replicas_port(b);
    size_t big_len;
    uint8_t *big = sized_slot(1, 0x77, 4u << 20, &big_len);
    put(dir_b, "replica2.0", big, big_len);
    double began = ddp_clock_mono();
    int fd = unread_get(port);
    double took = get_ended(fd, began);
    close(fd);
    if (took < 0.7 || took > 10)
        fail_msg("4 MiB at 4M a second took %.2f s", took);
    free(big);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* A key holder's GETs that never read a large replica take no PUT's place and end at a
 * PUT's deadline: 2 of one address are served, the third and fourth closed at once; a
 * PUT from that address is kept meanwhile; the GETs end after a sixteenth of the job's
 * rate, 3 s more (3.5 s here), not after the 64 KiB/s floor's (over 8 minutes). */
static void test_slow_gets_hold_no_put_place(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(1u << 30, &log);
    int log_fd = log.fd, port = ddp_checkpoint_replicas_port(b), gets[4];
    size_t big_len, len, req_len;
    uint8_t *big = sized_slot(1, 0x33, 32u << 20, &big_len); /* (more than sockets buffer) */
    put(dir_b, "replica2.0", big, big_len);
    double began = ddp_clock_mono();
    for (int i = 0; i < 4; i++)
        gets[i] = unread_get(port);
    uint8_t *slot = sized_slot(2, 0x11, 4096, &len);
    uint8_t *req = put_request(slot, len, 2, &req_len);
    assert_int_equal(ask(port, req, req_len, false), 'k');
    assert_true(logged(log_fd, "is closed: 2 are served, 2 GETs, 2 of them from there"));
    for (int i = 0; i < 4; i++) {
        double took = get_ended(gets[i], began);
        assert_true(took < 10);
        close(gets[i]);
    }
    free(req);
    free(slot);
    free(big);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* The job's rate (the lowest the round's records publish) is B's floor where it is lower
 * than B's own: B at 1G, told the job's rate is 4M, keeps 1 MiB trickled at 320 KiB/s (a
 * sixteenth of 4M, 3 s more: 7 s), which its own rate's floor (3 s) dropped: nodes given
 * different rates agree on one. */
static void test_put_floor_at_the_jobs_rate(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(1u << 30, &log);
    int log_fd = log.fd, port = ddp_checkpoint_replicas_port(b);
    ddp_checkpoint_replicas_job_rate(b, 4u << 20);
    size_t len, req_len;
    uint8_t *slot = sized_slot(1, 0x44, 1u << 20, &len);
    uint8_t *req = put_request(slot, len, 1, &req_len);
    double took;
    char answer = trickle(port, req, req_len, &took);
    if (answer != 'k')
        fail_msg("not kept after %.1f s: %s", took, logged_text(log_fd));
    free(req);
    free(slot);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* A PUT's RATE word cannot lower B's floor: B at 1G a second drops a PUT saying it sends
 * at 1 byte a second and trickling 2 MiB at 320 KiB/s at B's own rate's floor (a sixteenth
 * of it, 3 s more: 3 s), where the 64 KiB/s floor the word asked for (35 s) kept it after
 * 6.4 s. */
static void test_put_rate_word_lowers_no_floor(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(1u << 30, &log);
    int log_fd = log.fd, port = ddp_checkpoint_replicas_port(b);
    size_t len, req_len;
    uint8_t *slot = sized_slot(1, 0x44, 2u << 20, &len);
    char line[160];
    snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 %zu 1\n", key_b, len);
    uint8_t *req = request(line, slot, len, 1, &req_len);
    double took;
    char answer = trickle(port, req, req_len, &took);
    if (answer == 'k' || took > 6)
        fail_msg("'%c' after %.1f s: %s", answer, took, logged_text(log_fd));
    assert_true(logged(log_fd, "did not come within"));
    nothing_else(dir_b);
    free(req);
    free(slot);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* A holder that answers a GET with `l->len` bytes said, the header of l->slot, and then
 * nothing until the fetch gives up (30 s at most). */
static void *stalling_holder_run(void *arg)
{
    liar_t *l = arg;
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        return NULL;
    int c = accept(l->fd, NULL, NULL);
    char ch = 0, head[64];
    while (c >= 0 && recv(c, &ch, 1, 0) == 1 && ch != '\n') {
    }
    int n = snprintf(head, sizeof head, "DDPREPL1 %zu\n", l->len);
    p.fd = c;
    if (c >= 0 && send(c, head, (size_t)n, MSG_NOSIGNAL) == n &&
        send(c, l->slot, DDP_CKPT_HEADER_BYTES, MSG_NOSIGNAL) == DDP_CKPT_HEADER_BYTES)
        (void)poll(&p, 1, 30000); /* (until the fetch closes) */
    if (c >= 0)
        close(c);
    return NULL;
}

/* A fetch from a holder that sends a good header of a 4 MiB slot and then stalls ends at a
 * PUT's deadline at the fetcher's rate (256M: 16 MiB/s, 3 s more: 3.3 s), not at the 64
 * KiB/s floor's (74 s); and nothing is left. */
static void test_fetch_bounded_at_the_rate(void **state)
{
    (void)state;
    make_dir(dir_a);
    size_t len;
    uint8_t *slot = sized_slot(1, 0x55, 4u << 20, &len); /* step 10 */
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    liar_t l = {.fd = fd, .slot = slot, .len = len, .generation = 1};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, stalling_holder_run, &l), 0);
    ddp_replica_peer_t peer = {"127.0.0.1", ntohs(a.sin_port), "0123456789abcdef0123456789abcdef",
                               0};
    ddp_buf_t why = DDP_BUF_INIT;
    uint64_t bytes = 0;
    double began = ddp_clock_mono();
    int err =
        ddp_checkpoint_replicas_fetch(&peer, dir_a, 2, 10, 4, 1, 256u << 20, 0, -1, &bytes, &why);
    double took = ddp_clock_mono() - began;
    pthread_join(thread, NULL);
    close(fd);
    assert_int_equal(err, DDP_ETIMEOUT);
    if (took > 8 || strstr(ddp_buf_str(&why), "(16384 KiB/s)") == NULL)
        fail_msg("the fetch ended after %.1f s: %s", took, ddp_buf_str(&why));
    nothing_else(dir_a);
    ddp_buf_free(&why);
    free(slot);
    remove_dir(dir_a);
}

/* A fetch from a stalling holder at the 64 KiB/s floor (a node with no rate: 67 s for 4
 * MiB) ends by the whole deadline its round gives (1 s here); and one whose size with room
 * for one save of each of this node's ranks (2^20 of them) is more than the room is
 * refused at once (room for one save alone was kept). */
static void test_fetch_bounded_as_a_whole(void **state)
{
    (void)state;
    make_dir(dir_a);
    size_t len;
    uint8_t *slot = sized_slot(1, 0x55, 4u << 20, &len); /* step 10 */
    for (int round = 0; round < 2; round++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t alen = sizeof a;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(listen(fd, 4), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
        liar_t l = {.fd = fd, .slot = slot, .len = len, .generation = 1};
        pthread_t thread;
        assert_int_equal(pthread_create(&thread, NULL, stalling_holder_run, &l), 0);
        ddp_replica_peer_t peer = {"127.0.0.1", ntohs(a.sin_port),
                                   "0123456789abcdef0123456789abcdef", 0};
        ddp_buf_t why = DDP_BUF_INIT;
        uint64_t bytes = 0;
        double began = ddp_clock_mono();
        int err = ddp_checkpoint_replicas_fetch(&peer, dir_a, 2, 10, 4, round == 0 ? 1 : 1 << 20, 0,
                                                began + 1, -1, &bytes, &why);
        double took = ddp_clock_mono() - began;
        pthread_join(thread, NULL);
        close(fd);
        if (round == 0 && (err != DDP_ETIMEOUT || took > 4))
            fail_msg("the fetch ended after %.1f s: %s", took, ddp_buf_str(&why));
        if (round == 1 && (err != DDP_ETOOBIG || took > 4))
            fail_msg("the fetch ended after %.1f s: %s", took, ddp_buf_str(&why));
        nothing_else(dir_a);
        ddp_buf_free(&why);
    }
    free(slot);
    remove_dir(dir_a);
}

static atomic_bool slow_reader_done;

/* A peer that reads what comes on the listening socket `fd` 64 KiB every 250 ms (256
 * KiB/s) until its sender closes, or slow_reader_done (40 s at most): its thread. */
static void *slow_reader_run(void *arg)
{
    int *fd = arg;
    static char buf[64u << 10];
    struct pollfd p = {.fd = *fd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        return NULL;
    int c = accept(*fd, NULL, NULL);
    double began = ddp_clock_mono();
    while (c >= 0 && !atomic_load(&slow_reader_done) && ddp_clock_mono() - began < 40 &&
           recv(c, buf, sizeof buf, 0) > 0)
        poll(NULL, 0, 250);
    if (c >= 0)
        close(c);
    return NULL;
}

/* A peer reading A's PUT of 8 MiB at 256 KiB/s comes first in A's round (256M a second):
 * A's one sender gives it up after a sixteenth of its rate, 3 s more (3.5 s), and B, after
 * it, gets the replica then, not after the slow peer's 32 s. */
static void test_slow_peer_holds_the_sender_bounded(void **state)
{
    (void)state;
    make_dir(dir_a);
    make_dir(dir_b);
    int log_fd = open_log(), small = 64 << 10;
    ddp_log_t log = {.name = "test", .level = DDP_LOG_DEBUG, .fd = log_fd};
    ddp_checkpoint_replicas_t *a, *b;
    assert_int_equal(ddp_checkpoint_replicas_start(dir_a, 256u << 20, &log, &a), 0);
    assert_int_equal(ddp_checkpoint_replicas_start(dir_b, 0, &log, &b), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &alen), 0);
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, slow_reader_run, &fd), 0);
    size_t len;
    uint8_t *one = sized_slot(1, 0x66, 8u << 20, &len);
    put(dir_a, "rank2.0", one, len);
    ddp_replica_peer_t peers[2] = {{"127.0.0.1", ntohs(sa.sin_port), "", 0},
                                   {"127.0.0.1", ddp_checkpoint_replicas_port(b), "", 0}};
    snprintf(peers[0].key, sizeof peers[0].key, "%s", ddp_checkpoint_replicas_key(b));
    snprintf(peers[1].key, sizeof peers[1].key, "%s", ddp_checkpoint_replicas_key(b));
    ddp_checkpoint_replicas_round(b, 0, 2, 4, NULL, 0);
    ddp_checkpoint_replicas_round(a, 2, 1, 4, peers, 2);
    double took = wait_for_copy(dir_b, "replica2.0", one, len);
    if (took > 10)
        fail_msg("B got it after %.1f s", took);
    assert_true(logged(log_fd, "tried again, the other peers meanwhile"));
    ddp_checkpoint_replicas_stop(a);
    ddp_checkpoint_replicas_stop(b);
    atomic_store(&slow_reader_done, true);
    pthread_join(thread, NULL);
    close(fd);
    free(one);
    close(log_fd);
    remove_dir(dir_a);
    remove_dir(dir_b);
}

/* The 4 times bound is of B's own ranks' slots alone: a replica of rank 2 of 64 KiB that B
 * holds (a peer put it) does not let the next of 64 KiB in against B's slot of 4 KiB, so
 * PUTs each 4 times the last cannot climb to the room. */
static void test_size_bound_by_own_slots_alone(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(0, &log);
    int log_fd = log.fd;
    size_t own_len, held_len, req_len;
    uint8_t *own = sized_slot(1, 0x11, 4096, &own_len);
    ((ddp_ckpt_header_t *)own)->rank = 0;
    put(dir_b, "rank0.0", own, own_len);
    uint8_t *held = sized_slot(1, 0x22, 64u << 10, &held_len);
    put(dir_b, "replica2.1", held, held_len);
    uint8_t *next = sized_slot(2, 0x33, 64u << 10, &held_len);
    uint8_t *req = put_request(next, held_len, 2, &req_len);
    assert_int_equal(ask(ddp_checkpoint_replicas_port(b), req, req_len, false), 'n');
    assert_true(logged(log_fd, "more than 4 times the largest slot of this node's own ranks"));
    free(req);
    free(next);
    free(held);
    free(own);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* Keyed PUTs claiming 9e18 bytes, from 127.0.0.2, until `stop`. */
typedef struct {
    int port;
    atomic_bool stop;
    atomic_int sent;
} flood_t;

static void *absurd_flood_run(void *arg)
{
    flood_t *f = arg;
    char line[128];
    int n = snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 9000000000000000000\n", key_b);
    while (!atomic_load(&f->stop)) {
        struct sockaddr_in from = {.sin_family = AF_INET},
                           to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
        from.sin_addr.s_addr = htonl(0x7f000002);
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        char answer;
        if (fd >= 0 && bind(fd, (struct sockaddr *)&from, sizeof from) == 0 &&
            connect(fd, (struct sockaddr *)&to, sizeof to) == 0 &&
            send(fd, line, (size_t)n, MSG_NOSIGNAL) == n && recv(fd, &answer, 1, 0) >= 0)
            atomic_fetch_add(&f->sent, 1);
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

/* Absurd claims, refused at once, take no room meanwhile: 60 real PUTs taken while 2 threads
 * send keyed PUTs claiming 9e18 bytes are all kept (the claims counted before their check
 * refused real PUTs for room). */
static void test_absurd_claims_take_no_room(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(1u << 30, &log);
    int log_fd = log.fd;
    flood_t f = {.port = ddp_checkpoint_replicas_port(b)};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, absurd_flood_run, &f), 0);
    size_t len, req_len;
    uint8_t *slot = sized_slot(1, 0x66, 4096, &len);
    uint8_t *req = put_request(slot, len, 1, &req_len);
    int kept = 0;
    for (int i = 0; i < 60; i++)
        kept += ask(f.port, req, req_len, false) == 'k';
    atomic_store(&f.stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    if (kept != 60 || atomic_load(&f.sent) == 0)
        fail_msg("%d of 60 kept beside %d absurd claims", kept, atomic_load(&f.sent));
    free(req);
    free(slot);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* How many times the log says `text`. */
static int logged_times(int log_fd, const char *text)
{
    int n = 0;
    for (const char *at = logged_text(log_fd); (at = strstr(at, text)) != NULL; at++)
        n++;
    return n;
}

/* A key holder's refused requests are said as unkeyed ones are: 30 PUTs claiming 9e18 bytes,
 * each refused ('n'), are said for the first 10 alone (each said before: 95,000 lines in 20
 * s from a loop). */
static void test_keyed_refusals_said_bounded(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(1u << 30, &log);
    int log_fd = log.fd, port = ddp_checkpoint_replicas_port(b);
    char line[128];
    int n = snprintf(line, sizeof line, "DDPREPL1 PUT %s 2 0 9000000000000000000\n", key_b);
    for (int i = 0; i < 30; i++)
        assert_int_equal(ask(port, line, (size_t)n, false), 'n');
    int said = logged_times(log_fd, "is dropped: ");
    if (said != 10 || !logged(log_fd, "(further refusals said once a minute)"))
        fail_msg("%d said: %s", said, logged_text(log_fd));
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_b);
}

/* Whether `dir` holds a transfer under way (a .incoming file). */
static bool incoming(const char *dir)
{
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d != NULL && !found && (e = readdir(d)) != NULL;)
        found = strstr(e->d_name, ".incoming") != NULL;
    if (d != NULL)
        closedir(d);
    return found;
}

/* A slot saved again while it went (its header rewritten in place) is refused by B, and
 * A's sender says why: saves come faster than the rate carries the slot (it said only
 * "malformed input"). Also where the header changed before it went (B refuses it as it
 * comes and closes: A's send is reset; it said "Connection reset by peer"). */
static void test_slot_saved_again_while_sent_said(void **state)
{
    (void)state;
    make_dir(dir_a);
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(1u << 30, &log), *a;
    int log_fd = log.fd;
    assert_int_equal(ddp_checkpoint_replicas_start(dir_a, 1u << 20, &log, &a), 0);
    size_t len;
    uint8_t *slot = sized_slot(1, 0x88, 2u << 20, &len); /* 2 s at 1M */
    put(dir_a, "rank2.0", slot, len);
    a_sends_to_b(a, b);
    /* Its header rewritten in place once B receives it (a save of generation 2). */
    char path[PATH_MAX + 32], said[200];
    snprintf(path, sizeof path, "%s/rank2.0", dir_a);
    double began = ddp_clock_mono();
    while (!incoming(dir_b) && ddp_clock_mono() - began < 30)
        poll(NULL, 0, 10);
    ((ddp_ckpt_header_t *)slot)->generation = 2;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, slot, sizeof(ddp_ckpt_header_t), 0),
                     (ssize_t)sizeof(ddp_ckpt_header_t));
    close(fd);
    while (!logged(log_fd, "saved again while it went") && ddp_clock_mono() - began < 30)
        poll(NULL, 0, 10);
    snprintf(said, sizeof said,
             "saves come faster than the job's replica rate carries it (%zu bytes at "
             "1048576 bytes a second take 2.0 s; the job's rate is the lowest "
             "--checkpoint-replica-rate of its nodes)",
             len);
    if (!logged(log_fd, said))
        fail_msg("not said: %s", logged_text(log_fd));
    free(slot);
    ddp_checkpoint_replicas_stop(a);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_a);
    remove_dir(dir_b);
}

/* The voluntary context switches of this process's thread named `name` (-1: none). */
/* The /proc/self/task/<tid>/`file` of the thread named `name` (NULL: none), opened. */
static FILE *thread_file(const char *name, const char *file)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    FILE *found = NULL;
    char path[300], line[200];
    while (d != NULL && found == NULL && (e = readdir(d)) != NULL) {
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        bool it = f != NULL && fgets(line, sizeof line, f) != NULL &&
                  strncmp(line, name, strlen(name)) == 0 && line[strlen(name)] == '\n';
        if (f != NULL)
            fclose(f);
        snprintf(path, sizeof path, "/proc/self/task/%s/%s", e->d_name, file);
        if (it)
            found = fopen(path, "r");
    }
    if (d != NULL)
        closedir(d);
    return found;
}

/* The voluntary context switches of the thread named `name` (its sleeps); -1: none. */
static long thread_switches(const char *name)
{
    FILE *f = thread_file(name, "status");
    long switches = -1;
    char line[200];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &switches) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return switches;
}

/* The CPU time of the thread named `name` in ms (its schedstat, to the nanosecond); -1. */
static double thread_cpu_ms(const char *name)
{
    FILE *f = thread_file(name, "schedstat");
    unsigned long long ns;
    double ms = f != NULL && fscanf(f, "%llu", &ns) == 1 ? ns / 1e6 : -1;
    if (f != NULL)
        fclose(f);
    return ms;
}

/* A job that saves nothing: the sender sleeps (it looked every 0.1 s, 1.75x the launchers'
 * steady CPU at 1024 simulated nodes); told of a sum, it sends at once. */
static void test_sender_sleeps_until_a_sum(void **state)
{
    (void)state;
    make_dir(dir_a);
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b(1u << 30, &log), *a;
    int log_fd = log.fd;
    assert_int_equal(ddp_checkpoint_replicas_start(dir_a, 1u << 30, &log, &a), 0);
    a_sends_to_b(a, b);
    poll(NULL, 0, 100); /* (its first look, the round's) */
    long before = thread_switches("ddp-repl-send");
    assert_true(before >= 0);
    poll(NULL, 0, 1000);
    long after = thread_switches("ddp-repl-send");
    printf("the sender woke %ld times in 1 s with nothing saved\n", after - before);
    assert_true(after - before <= 2);
    size_t len;
    uint8_t *one = slot_bytes(1, 0x11, &len);
    put(dir_a, "rank2.0", one, len);
    ddp_checkpoint_replicas_summed(a);
    assert_true(wait_for_copy(dir_b, "replica2.0", one, len) < 1);
    free(one);
    ddp_checkpoint_replicas_stop(a);
    ddp_checkpoint_replicas_stop(b);
    close(log_fd);
    remove_dir(dir_a);
    remove_dir(dir_b);
}

static void on_summed(void *ctx)
{
    atomic_store((atomic_bool *)ctx, true);
}

/* A job that keeps no checkpoint: the checksums' thread sleeps while the directory is empty
 * (it looked every 0.1 s: 87% of a simulated node's steady CPU, the launchers' 162% of two
 * cores at 1024 nodes); a slot made there is summed at once. */
static void test_sums_sleep_while_nothing_is_kept(void **state)
{
    (void)state;
    make_dir(dir_a);
    ddp_log_t log = {
        .name = "test", .level = DDP_LOG_DEBUG, .fd = open("/dev/null", O_WRONLY | O_CLOEXEC)};
    int log_fd = log.fd;
    atomic_bool summed = false;
    ddp_checkpoint_sums_t *sums;
    assert_int_equal(ddp_checkpoint_sums_start(dir_a, NULL, 0, on_summed, &summed, &log, &sums), 0);
    poll(NULL, 0, 100); /* (its first look) */
    long before = thread_switches("ddp-ckpt-sums");
    assert_true(before >= 0);
    poll(NULL, 0, 1000);
    long after = thread_switches("ddp-ckpt-sums");
    printf("the checksums' thread woke %ld times in 1 s with the directory empty\n",
           after - before);
    assert_true(after - before <= 2);
    size_t len;
    uint8_t *one = slot_bytes(1, 0x11, &len);
    ((ddp_ckpt_header_t *)one)->checksum_generation = 0; /* not summed yet */
    double put_at = ddp_clock_mono();
    put(dir_a, "rank2.0", one, len);
    while (!atomic_load(&summed) && ddp_clock_mono() < put_at + 5)
        poll(NULL, 0, 10);
    printf("summed %.2f s after it was made\n", ddp_clock_mono() - put_at);
    /* (0.01 s here; up to 1 s where inotify is refused: fs.inotify.max_user_instances
     * taken by a thousand launchers of another suite) */
    assert_true(atomic_load(&summed) && ddp_clock_mono() < put_at + 2);
    assert_true(ddp_checkpoint_sums_held(sums, NULL) >= len);
    /* and with a file there, looked at as before (a save through a mapping says nothing) */
    before = thread_switches("ddp-ckpt-sums");
    poll(NULL, 0, 1000);
    after = thread_switches("ddp-ckpt-sums");
    assert_true(after - before >= 5);
    /* Emptied again, then a worker that makes and removes a file every ms: looked at no
     * more often than a directory with files (it woke at each file: ~900 times). */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/rank2.0", dir_a);
    assert_int_equal(unlink(path), 0);
    poll(NULL, 0, 300);
    snprintf(path, sizeof path, "%s/churn", dir_a);
    before = thread_switches("ddp-ckpt-sums");
    double cpu = thread_cpu_ms("ddp-ckpt-sums");
    long made = 0;
    for (double until = ddp_clock_mono() + 1; ddp_clock_mono() < until; made++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(unlink(path), 0);
        poll(NULL, 0, 1); /* (there an instant in each ms: each look finds it empty) */
    }
    after = thread_switches("ddp-ckpt-sums");
    cpu = thread_cpu_ms("ddp-ckpt-sums") - cpu;
    printf("%ld files made and removed in 1 s: the thread slept %ld times, ran %.1f ms\n", made,
           after - before, cpu);
    assert_true(after - before <= 25 && cpu >= 0 && cpu < 50);
    /* The directory removed by a worker, and made again later: its slots still summed at
     * once (the old watch, of the directory gone, would never fire: 10 s) */
    assert_int_equal(rmdir(dir_a), 0);
    poll(NULL, 0, 300);
    assert_int_equal(mkdir(dir_a, 0700), 0);
    atomic_store(&summed, false);
    put_at = ddp_clock_mono();
    put(dir_a, "rank2.0", one, len);
    while (!atomic_load(&summed) && ddp_clock_mono() < put_at + 15)
        poll(NULL, 0, 10);
    printf("the directory made again: a slot summed %.2f s after it was made\n",
           ddp_clock_mono() - put_at);
    assert_true(atomic_load(&summed) && ddp_clock_mono() < put_at + 2.5);
    ddp_checkpoint_sums_stop(sums, false);
    free(one);
    close(log_fd);
    remove_dir(dir_a);
}

/* A hot spare's round is forming (its step being agreed, ddp_checkpoint_replicas_world)
 * before its peers are known: a survivor's replica is taken then (refused before: "no round
 * has begun yet", and the survivor backed off up to 16 s). */
static void test_replica_taken_while_the_round_forms(void **state)
{
    (void)state;
    ddp_log_t log;
    ddp_checkpoint_replicas_t *b = start_b_unrounded(1u << 30, &log);
    int port = ddp_checkpoint_replicas_port(b);
    size_t len, req_len;
    uint8_t *slot = sized_slot(2, 0x33, 4096, &len);
    uint8_t *req = put_request(slot, len, 2, &req_len);
    assert_int_equal(ask(port, req, req_len, false), 'n'); /* (no round at all yet) */
    ddp_checkpoint_replicas_world(b, 4);
    assert_int_equal(ask(port, req, req_len, false), 'k');
    free(req);
    free(slot);
    ddp_checkpoint_replicas_stop(b);
    close(log.fd);
    remove_dir(dir_b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_over_loopback),
        cmocka_unit_test(test_one_peer_refusing_holds_up_no_other),
        cmocka_unit_test(test_fetch_of_another_step_leaves_slot_0),
        cmocka_unit_test(test_room_kept_for_a_first_save),
        cmocka_unit_test(test_claim_bounded_by_the_slots_held),
        cmocka_unit_test(test_listener_at_the_published_address),
        cmocka_unit_test(test_slow_gets_hold_no_put_place),
        cmocka_unit_test(test_put_rate_word_lowers_no_floor),
        cmocka_unit_test(test_put_floor_at_the_jobs_rate),
        cmocka_unit_test(test_fetch_bounded_at_the_rate),
        cmocka_unit_test(test_fetch_bounded_as_a_whole),
        cmocka_unit_test(test_slow_peer_holds_the_sender_bounded),
        cmocka_unit_test(test_size_bound_by_own_slots_alone),
        cmocka_unit_test(test_absurd_claims_take_no_room),
        cmocka_unit_test(test_keyed_refusals_said_bounded),
        cmocka_unit_test(test_get_sent_at_the_rate),
        cmocka_unit_test(test_slot_saved_again_while_sent_said),
        cmocka_unit_test(test_sender_sleeps_until_a_sum),
        cmocka_unit_test(test_sums_sleep_while_nothing_is_kept),
        cmocka_unit_test(test_replica_taken_while_the_round_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
