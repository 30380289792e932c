/* Unit tests: the hang report's rows (from a ring file, in text and back), its verdict,
 * and what it reads of /proc and of Python's faulthandler output. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "flight.h"
#include "diagnose/hang.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ddp_hang_row_t ring_row(int rank, uint64_t completed, uint64_t current, const char *now)
{
    ddp_hang_row_t r = {
        .rank = rank, .ring = true, .completed = completed, .current = current, .peer = -1};
    snprintf(r.last, sizeof r.last, "all_reduce #%llu of 10 float32 (sum)",
             (unsigned long long)completed);
    snprintf(r.now, sizeof r.now, "%s", now);
    return r;
}

/* The verdict on rows[n], checked to be of kind `kind`. */
static char *verdict_of(ddp_hang_row_t *rows, size_t n, ddp_hang_verdict_t kind)
{
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_hang_sort(rows, n);
    assert_int_equal(ddp_hang_verdict(rows, n, &out), kind);
    return (char *)ddp_buf_str(&out); /* the buffer's storage: freed by the caller */
}

static void test_verdict_names_the_rank_that_never_entered(void **state)
{
    const char *in5 = "all_reduce #5 of 10 float32 (sum)";
    ddp_hang_row_t rows[] = {ring_row(3, 4, 5, in5), ring_row(1, 4, 0, ""), ring_row(0, 4, 5, in5),
                             ring_row(2, 4, 5, in5)};
    char *v = verdict_of(rows, 4, DDP_HANG_VERDICT_COLLECTIVE);
    assert_string_equal(v, "rank 1 never entered all_reduce #5; ranks 0, 2-3 wait in it");
    free(v);
    assert_int_equal(rows[0].rank, 0); /* sorted */
    assert_int_equal(rows[3].rank, 3);
}

static void test_verdict_other_cases(void **state)
{
    const char *in9 = "broadcast #9 of 4 int64 from rank 0";
    /* One waits, one is behind, one is in an earlier collective, one has no ring. */
    ddp_hang_row_t rows[] = {ring_row(0, 8, 9, in9),
                             ring_row(1, 6, 0, ""),
                             ring_row(2, 7, 8, "barrier #8"),
                             {.rank = 3, .peer = -1}};
    char *v = verdict_of(rows, 4, DDP_HANG_VERDICT_COLLECTIVE);
    assert_string_equal(v, "rank 0 waits in broadcast #9; rank 1 is behind, between collectives "
                           "after #6; rank 2 is in barrier #8; rank 3 without a flight recorder");
    free(v);
    ddp_hang_row_t idle[] = {ring_row(0, 3, 0, ""), ring_row(1, 3, 0, "")};
    v = verdict_of(idle, 2, DDP_HANG_VERDICT_BETWEEN);
    assert_string_equal(v, "ranks 0-1 between collectives, in none");
    free(v);
    /* Without rings: ranks grouped by where Python is. */
    ddp_hang_row_t py[3] = {{.rank = 0}, {.rank = 1}, {.rank = 2}};
    snprintf(py[0].note, sizeof py[0].note, "sleeping; Python in all_reduce (c10d.py:15)");
    snprintf(py[1].note, sizeof py[1].note, "sleeping; Python in wait (train.py:3)");
    snprintf(py[2].note, sizeof py[2].note, "sleeping; Python in all_reduce (c10d.py:15)");
    v = verdict_of(py, 3, DDP_HANG_VERDICT_PYTHON);
    assert_string_equal(v, "ranks 0, 2 in all_reduce (c10d.py:15); rank 1 in wait (train.py:3)");
    free(v);
    ddp_hang_row_t none[1] = {{.rank = 0}};
    v = verdict_of(none, 1, DDP_HANG_VERDICT_BLIND);
    assert_non_null(strstr(v, "no rank runs libddp's flight recorder"));
    free(v);
}

static void test_rows_text_round_trip(void **state)
{
    ddp_hang_row_t rows[2] = {ring_row(7, 11, 12, "all_gather #12 of 3 float64 a rank"),
                              {.rank = 8, .peer = -1, .waited = 61.5}};
    rows[0].failed = rows[0].timed_out = true;
    rows[0].peer = 6;
    rows[0].waited = 3.25;
    snprintf(rows[1].note, sizeof rows[1].note, "tab\there, newline\nthere");
    ddp_buf_t text = DDP_BUF_INIT;
    assert_int_equal(ddp_hang_rows_format(rows, 2, &text), 0);
    ddp_hang_row_t *back = NULL;
    size_t n = 0;
    assert_int_equal(ddp_hang_rows_parse(ddp_buf_str(&text), &back, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(back[0].rank, 7);
    assert_true(back[0].ring && back[0].failed && back[0].timed_out);
    assert_int_equal(back[0].completed, 11);
    assert_int_equal(back[0].current, 12);
    assert_int_equal(back[0].peer, 6);
    assert_true(back[0].waited > 3.24 && back[0].waited < 3.26);
    assert_string_equal(back[0].now, "all_gather #12 of 3 float64 a rank");
    assert_false(back[1].ring);
    assert_int_equal(back[1].peer, -1);
    assert_string_equal(back[1].note, "tab here, newline there"); /* no field breaks */
    free(back);
    ddp_buf_free(&text);
}

static void test_rows_text_malformed(void **state)
{
    static const char *const bad[] = {
        "x\tr-\t1\t2\t-1\t0.5\ta\tb\tc\n",   /* rank */
        "1\tr\t1\t2\t-1\t0.5\ta\tb\tc\n",    /* flags without their end */
        "1\tr-\t-1\t2\t-1\t0.5\ta\tb\tc\n",  /* completed */
        "1\tr-\t1\t2\t-7\t0.5\ta\tb\tc\n",   /* peer */
        "1\tr-\t1\t2\t-1\tsoon\ta\tb\tc\n",  /* waited */
        "1\tr-\t1\t2\t-1\t0.5\ta\tb\n",      /* a field short */
        "1\tr-\t1\t2\t-1\t0.5\ta\tb\tc\td\n" /* one too many */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_hang_row_t *rows = NULL;
        size_t n = 0;
        char text[200];
        /* A good row first: kept. */
        snprintf(text, sizeof text, "0\t-\t0\t0\t-1\t1.0\t\t\tok\n%s", bad[i]);
        assert_int_equal(ddp_hang_rows_parse(text, &rows, &n), DDP_EPARSE);
        assert_int_equal(n, 1);
        assert_string_equal(rows[0].note, "ok");
        free(rows);
    }
}

static char *tmpdir(void)
{
    char *dir = strdup("/tmp/ddp-test-hang-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return dir;
}

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static void remove_dir(char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/* A ring as libddp writes it: rank 5 in all_reduce #7 for 2 s, waiting on rank 4. */
static void test_row_from_ring_file(void **state)
{
    char *dir = tmpdir();
    ddp_hang_row_t row;
    bool found = true;
    assert_int_equal(ddp_hang_row_from_dir(dir, 100.0, &row), -ENOENT);
    assert_int_equal(ddp_hang_progress(dir, &found), 0);
    assert_false(found);
    static ddp_flight_ring_t ring;
    memset(&ring, 0, sizeof ring);
    ring.magic = DDP_FLIGHT_MAGIC;
    ring.version = DDP_FLIGHT_VERSION;
    ring.rank = 5;
    ring.world_size = 8;
    snprintf(ring.group, sizeof ring.group, "main");
    for (uint64_t s = 1; s <= 7; s++) {
        ddp_flight_entry_t *e = &ring.slots[(s - 1) % DDP_FLIGHT_SLOTS];
        *e = (ddp_flight_entry_t){.seq = s,
                                  .count = 10,
                                  .op = DDP_FLIGHT_ALL_REDUCE,
                                  .entered_ns = (int64_t)(90 + s) * 1000000000,
                                  .left_ns = s < 7 ? (int64_t)(90 + s) * 1000000000 + 1000 : 0,
                                  .peer = 4};
    }
    ring.entered = 7;
    ring.completed = 6;
    write_file(dir, "flight_main.ring", &ring, sizeof ring);
    write_file(dir, "flight_x.ring", "short", 5); /* not a ring: skipped */
    row.rank = 3; /* the launcher's: the ring's 5 is the worker's word */
    assert_int_equal(ddp_hang_row_from_dir(dir, 99.0, &row), 0);
    assert_true(row.ring);
    assert_int_equal(row.rank, 3);
    assert_int_equal(row.completed, 6);
    assert_int_equal(row.current, 7);
    assert_int_equal(row.peer, 4);
    assert_false(row.failed);
    assert_true(row.waited > 1.99 && row.waited < 2.01);
    assert_string_equal(row.now, "all_reduce #7 of 10 float32 (sum)");
    assert_string_equal(row.last, "all_reduce #6 of 10 float32 (sum)");
    assert_int_equal(ddp_hang_progress(dir, &found), 6);
    assert_true(found);
    /* It failed there, for a timeout. */
    ring.slots[6].left_ns = 99000000000;
    ring.slots[6].error = DDP_ETIMEOUT;
    write_file(dir, "flight_main.ring", &ring, sizeof ring);
    assert_int_equal(ddp_hang_row_from_dir(dir, 120.0, &row), 0);
    assert_true(row.failed && row.timed_out);
    assert_true(row.waited > 1.99 && row.waited < 2.01); /* until it left */
    /* Another magic: not a ring. */
    ring.magic = 1;
    write_file(dir, "flight_main.ring", &ring, sizeof ring);
    assert_int_equal(ddp_hang_row_from_dir(dir, 120.0, &row), -ENOENT);
    remove_dir(dir);
}

/* What a worker may write is bounded before use: a ring with a count, a rank or a time out
 * of range is none (a completed of 2^64-1 made the launcher loop forever); nor is a ring,
 * or a worker's directory, that is a symbolic link (it could point into a hung file
 * system); a directory's files are looked for the same way. */
static void test_rings_bounded_and_not_followed(void **state)
{
    char *dir = tmpdir(), sub[600], elsewhere[600];
    static ddp_flight_ring_t ring;
    ddp_hang_row_t row;
    bool found;
    memset(&ring, 0, sizeof ring);
    ring.magic = DDP_FLIGHT_MAGIC;
    ring.version = DDP_FLIGHT_VERSION;
    ring.world_size = 2;
    ring.slots[0] = (ddp_flight_entry_t){.seq = 1, .entered_ns = 1000, .left_ns = 2000};
    ring.entered = ring.completed = 1;
    write_file(dir, "flight_main.ring", &ring, sizeof ring);
    assert_int_equal(ddp_hang_progress(dir, &found), 1);
    const struct {
        uint64_t entered, completed;
        int32_t rank, world_size;
        int64_t left_ns;
    } forged[] = {
        {UINT64_MAX, UINT64_MAX, 0, 2, 2000},
        {1, DDP_FLIGHT_MAX_SEQ + 1, 0, 2, 2000},
        {1, 1, -2, 2, 2000},
        {1, 1, DDP_FLIGHT_MAX_WORLD, 2, 2000},
        {1, 1, 0, -1, 2000},
        {1, 1, 0, 2, -1},
        {1, 1, 0, 2, INT64_MAX},
    };
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        static ddp_flight_ring_t bad;
        bad = ring;
        bad.entered = forged[i].entered;
        bad.completed = forged[i].completed;
        bad.rank = forged[i].rank;
        bad.world_size = forged[i].world_size;
        bad.slots[0].left_ns = forged[i].left_ns;
        write_file(dir, "flight_main.ring", &bad, sizeof bad);
        assert_int_equal(ddp_hang_row_from_dir(dir, 3.0, &row), -ENOENT);
    }
    /* A link to a good ring, and a directory that is a link: none. */
    snprintf(sub, sizeof sub, "%s/0", dir);
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(mkdir(elsewhere, 0755), 0);
    write_file(elsewhere, "flight_main.ring", &ring, sizeof ring);
    write_file(elsewhere, "stack.txt", "x", 1);
    char target[700], link_path[700];
    snprintf(target, sizeof target, "%s/flight_main.ring", elsewhere);
    snprintf(link_path, sizeof link_path, "%s/flight_main.ring", sub);
    assert_int_equal(symlink(target, link_path), 0);
    assert_int_equal(ddp_hang_row_from_dir(sub, 3.0, &row), -ENOENT);
    assert_true(ddp_hang_dir_has(elsewhere, "stack.txt"));
    assert_true(ddp_hang_dir_has(elsewhere, "flight_*.ring"));
    assert_false(ddp_hang_dir_has(sub, "flight_*.ring"));
    snprintf(link_path, sizeof link_path, "%s/1", dir);
    assert_int_equal(symlink(elsewhere, link_path), 0);
    assert_int_equal(ddp_hang_row_from_dir(link_path, 3.0, &row), -ENOENT);
    assert_false(ddp_hang_dir_has(link_path, "stack.txt"));
    assert_int_equal(ddp_hang_row_from_dir(elsewhere, 3.0, &row), 0);
    remove_dir(dir);
}

static void test_python_frame(void **state)
{
    char *dir = tmpdir(), frame[200];
    assert_false(ddp_hang_python_frame(dir, frame, sizeof frame));
    static const char dump[] =
        "Thread 0x00007f0000000001 (most recent call first):\n"
        "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
        "  File \"/usr/lib/python3.11/threading.py\", line 995 in _bootstrap\n"
        "\n"
        "Current thread 0x00007f0000000002 (most recent call first):\n"
        "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line "
        "1541 in all_reduce\n"
        "  File \"/work/train.py\", line 27 in main\n"
        "  File \"/work/train.py\", line 33 in <module>\n";
    write_file(dir, "python_stack.txt", dump, sizeof dump - 1);
    assert_true(ddp_hang_python_frame(dir, frame, sizeof frame));
    assert_string_equal(frame, "all_reduce (distributed_c10d.py:1541)");
    write_file(dir, "python_stack.txt", "garbage\n", 8);
    assert_false(ddp_hang_python_frame(dir, frame, sizeof frame));
    /* The file is the worker's: what a terminal would act on is shown escaped. */
    static const char forged[] = "Current thread 0x1 (most recent call first):\n"
                                 "  File \"/w/\x1b[2J.py\", line 1 in \x1b]52;c;aGk=\x07\n"
                                 "  File \"/w/t.py\", line 2 in <module>\n";
    write_file(dir, "python_stack.txt", forged, sizeof forged - 1);
    assert_true(ddp_hang_python_frame(dir, frame, sizeof frame));
    assert_string_equal(frame, "\\x1b]52;c;aGk=\\x07 (\\x1b[2J.py:1)");
    remove_dir(dir);
}

static void on_usr1(int sig)
{
    (void)sig;
}

static void test_proc(void **state)
{
    assert_false(ddp_hang_catches(getpid(), SIGUSR1));
    signal(SIGUSR1, on_usr1);
    assert_true(ddp_hang_catches(getpid(), SIGUSR1));
    assert_false(ddp_hang_catches(getpid(), SIGUSR2));
    signal(SIGUSR1, SIG_DFL);
    assert_true(ddp_hang_cpu_seconds(getpid()) >= 0);
    assert_true(ddp_hang_cpu_seconds(-1) < 0);
    ddp_hang_row_t row;
    ddp_hang_row_from_proc(getpid(), 3, 12.0, NULL, &row);
    assert_int_equal(row.rank, 3);
    assert_false(row.ring);
    assert_non_null(strstr(row.note, "no output and no CPU for 12 s; running"));
    ddp_hang_row_from_proc(getpid(), 3, 12.0, "ddp_launch.step() #4 2.0 s ago", &row);
    assert_non_null(strstr(row.note, "no libddp ring; ddp_launch.step() #4 2.0 s ago; running"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdict_names_the_rank_that_never_entered),
        cmocka_unit_test(test_verdict_other_cases),
        cmocka_unit_test(test_rows_text_round_trip),
        cmocka_unit_test(test_rows_text_malformed),
        cmocka_unit_test(test_row_from_ring_file),
        cmocka_unit_test(test_rings_bounded_and_not_followed),
        cmocka_unit_test(test_python_frame),
        cmocka_unit_test(test_proc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
