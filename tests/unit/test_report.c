/* Unit tests of launcher/diagnose/report.c: failure records, error files, the report. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "diagnose/report.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *write_temp(const char *content)
{
    char *path = strdup("/tmp/ddp-error-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    close(fd);
    return path;
}

static void test_exit_and_signal(void **state)
{
    ddp_failure_t f;
    char buf[64];
    assert_int_equal(ddp_failure_init(&f, 3, 1, 4242, W_EXITCODE(7, 0), 100, NULL), 0);
    assert_int_equal(f.exitcode, 7);
    assert_int_equal(ddp_failure_status(&f), 7);
    assert_string_equal(ddp_failure_describe(&f, buf, sizeof buf), "exited with code 7");
    assert_null(f.error_file);
    ddp_failure_free(&f);
    assert_int_equal(ddp_failure_init(&f, 0, 0, 1, W_EXITCODE(0, SIGSEGV), 100, "/nonexistent/e"),
                     0);
    assert_int_equal(f.exitcode, -SIGSEGV);
    assert_int_equal(ddp_failure_status(&f), 128 + SIGSEGV);
    assert_string_equal(ddp_failure_describe(&f, buf, sizeof buf), "was killed by SIGSEGV");
    assert_null(f.error_file); /* no file: not shown */
    ddp_failure_free(&f);
}

static void test_error_file_forms(void **state)
{
    ddp_failure_t f;
    char *nested = write_temp("{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": "
                              "{\"py_callstack\": \"Traceback:\\n  File x\\nRuntimeError: boom\", "
                              "\"timestamp\": \"1700000000\"}}}");
    assert_int_equal(ddp_failure_init(&f, 1, 1, 9, W_EXITCODE(1, 0), 1800000000, nested), 0);
    assert_string_equal(f.error_file, nested);
    assert_string_equal(f.message, "Traceback:\n  File x\nRuntimeError: boom");
    assert_true(f.timestamp == 1700000000);
    ddp_failure_free(&f);

    char *no_stack = write_temp("{\"message\": {\"message\": \"ValueError: x\", \"extraInfo\": "
                                "{\"timestamp\": \"1700000001\"}}}");
    assert_int_equal(ddp_failure_init(&f, 1, 1, 9, W_EXITCODE(1, 0), 1800000000, no_stack), 0);
    assert_string_equal(f.message, "ValueError: x");
    ddp_failure_free(&f);

    char *flat = write_temp("{\"message\": \"plain words\", \"timestamp\": 1700000002}");
    assert_int_equal(ddp_failure_init(&f, 1, 1, 9, W_EXITCODE(1, 0), 1800000000, flat), 0);
    assert_string_equal(f.message, "plain words");
    assert_true(f.timestamp == 1700000002);
    ddp_failure_free(&f);

    char *garbage = write_temp("{\"message\": {\"message\": ");
    assert_int_equal(ddp_failure_init(&f, 1, 1, 9, W_EXITCODE(1, 0), 1800000000, garbage), 0);
    assert_string_equal(f.message, "<the error file is not valid JSON>");
    assert_true(f.timestamp == 1800000000); /* the time it was seen */
    ddp_failure_free(&f);

    char *wrong = write_temp("[1, 2]");
    assert_int_equal(ddp_failure_init(&f, 1, 1, 9, W_EXITCODE(1, 0), 1800000000, wrong), 0);
    assert_string_equal(f.message, "<the error file has no message>");
    ddp_failure_free(&f);

    /* The worker's text is shown on a terminal: its escape sequences are not its to send. */
    char *escapes = write_temp("{\"message\": \"boom\\u001b]0;owned\\u0007\\n  \\u001b[2Jx\", "
                               "\"timestamp\": 1700000003}");
    assert_int_equal(ddp_failure_init(&f, 1, 1, 9, W_EXITCODE(1, 0), 1800000000, escapes), 0);
    assert_string_equal(f.message, "boom\\x1b]0;owned\\x07\n  \\x1b[2Jx");
    ddp_failure_free(&f);

    const char *files[] = {nested, no_stack, flat, garbage, wrong, escapes};
    for (size_t i = 0; i < 6; i++) {
        unlink(files[i]);
        free((char *)files[i]);
    }
}

/* libddp's peer_rank: a rank that failed because its peer went away points at the peer,
 * whose own failure is the root cause even when it was seen later. */
static void test_root_follows_peer_rank(void **state)
{
    ddp_failure_t f[4];
    char *blames_2 = write_temp("{\"message\": {\"message\": \"rank 2 is gone\", \"extraInfo\": "
                                "{\"timestamp\": \"1000\", \"peer_rank\": \"2\"}}}");
    char *blames_0 = write_temp("{\"message\": {\"message\": \"rank 0 is gone\", \"extraInfo\": "
                                "{\"timestamp\": \"1001\", \"peer_rank\": 0}}}");
    char *bad_peer = write_temp("{\"message\": {\"message\": \"x\", \"extraInfo\": "
                                "{\"timestamp\": \"999\", \"peer_rank\": \"-3\"}}}");
    assert_int_equal(ddp_failure_init(&f[0], 0, 0, 100, W_EXITCODE(3, 0), 2000, blames_2), 0);
    assert_int_equal(f[0].peer_rank, 2);
    assert_int_equal(ddp_failure_init(&f[1], 1, 1, 101, W_EXITCODE(3, 0), 2000, blames_0), 0);
    assert_int_equal(f[1].peer_rank, 0);
    assert_int_equal(ddp_failure_init(&f[2], 2, 2, 102, W_EXITCODE(0, SIGKILL), 1500, NULL), 0);
    assert_int_equal(f[2].peer_rank, -1);
    /* Earliest is rank 0 (1000); it blames 2, which failed: 2 is the root. */
    assert_int_equal(ddp_report_root(f, 3), 2);
    /* Without rank 2's failure the chain stops at the earliest. */
    assert_int_equal(ddp_report_root(f, 2), 0);
    /* A cycle (0 blames 1 here, 1 blames 0) ends on it. */
    f[0].peer_rank = 1;
    size_t root = ddp_report_root(f, 2);
    assert_true(root == 0 || root == 1);
    /* A peer_rank that is not a rank is ignored; the earliest stays the root. */
    assert_int_equal(ddp_failure_init(&f[3], 3, 3, 103, W_EXITCODE(3, 0), 2000, bad_peer), 0);
    assert_int_equal(f[3].peer_rank, -1);
    assert_int_equal(ddp_report_root(f, 4), 3);
    for (size_t i = 0; i < 4; i++)
        ddp_failure_free(&f[i]);
    char *files[] = {blames_2, blames_0, bad_peer};
    for (size_t i = 0; i < 3; i++) {
        unlink(files[i]);
        free(files[i]);
    }
}

/* PyTorch writes whole seconds: two ranks that fail in the same second are ordered by
 * their files' modification times, so the rank that failed first (here rank 1, listed
 * second) is the root cause, as it was in a CI run where rank 0 failed on rank 1's closed
 * connection a few milliseconds later. A timestamp of another second is left as written. */
static void test_same_second_ordered_by_file_time(void **state)
{
    const char *text = "{\"message\": {\"message\": \"x\", \"extraInfo\": "
                       "{\"timestamp\": \"1700000000\"}}}";
    char *later = write_temp(text), *first = write_temp(text);
    struct timespec at_later[2] = {{1700000000, 900000000}, {1700000000, 900000000}};
    struct timespec at_first[2] = {{1700000000, 100000000}, {1700000000, 100000000}};
    assert_int_equal(utimensat(AT_FDCWD, later, at_later, 0), 0);
    assert_int_equal(utimensat(AT_FDCWD, first, at_first, 0), 0);
    ddp_failure_t f[3];
    assert_int_equal(ddp_failure_init(&f[0], 0, 0, 100, W_EXITCODE(1, 0), 1800000000, later), 0);
    assert_int_equal(ddp_failure_init(&f[1], 1, 1, 101, W_EXITCODE(1, 0), 1800000000, first), 0);
    assert_true(f[0].timestamp > 1700000000.8 && f[0].timestamp < 1700000001);
    assert_true(f[1].timestamp > 1700000000 && f[1].timestamp < 1700000000.2);
    assert_int_equal(ddp_report_root(f, 2), 1);
    /* The file's time is of another second: the written timestamp stands. */
    struct timespec elsewhere[2] = {{1700000005, 0}, {1700000005, 0}};
    assert_int_equal(utimensat(AT_FDCWD, first, elsewhere, 0), 0);
    assert_int_equal(ddp_failure_init(&f[2], 1, 1, 101, W_EXITCODE(1, 0), 1800000000, first), 0);
    assert_true(f[2].timestamp == 1700000000);
    for (size_t i = 0; i < 3; i++)
        ddp_failure_free(&f[i]);
    unlink(later);
    unlink(first);
    free(later);
    free(first);
}

/* Which ends are failures of their own, and which the effect of our stop: a table. */
static void test_own_failure(void **state)
{
    static const ddp_stop_state_t running = {false, false, SIGTERM, false, 0},
                                  failing = {true, true, SIGTERM, false, 0},
                                  killing = {true, true, SIGTERM, true, 0},
                                  signalled = {true, false, SIGINT, false, 0},
                                  after = {true, true, SIGTERM, false, 1};
    ddp_failure_t blaming = {.rank = 0, .peer_rank = 2}, blames_other = {.rank = 0, .peer_rank = 5};
    const struct {
        const ddp_stop_state_t *stop;
        int status;
        bool message; /* it wrote an error file */
        bool blamed;  /* a recorded failure names it as its lost peer */
        bool own;
    } cases[] = {
        {&running, W_EXITCODE(1, 0), false, false, true}, /* nothing stopping: always */
        {&running, W_EXITCODE(0, SIGTERM), false, false, true},
        {&failing, W_EXITCODE(0, SIGTERM), false, false, false},   /* our stop signal */
        {&failing, W_EXITCODE(0, SIGSEGV), false, false, true},    /* not ours: its own */
        {&killing, W_EXITCODE(0, SIGKILL), false, false, false},   /* our escalation */
        {&failing, W_EXITCODE(0, SIGKILL), false, false, true},    /* SIGKILL we never sent */
        {&signalled, W_EXITCODE(0, SIGSEGV), false, false, false}, /* stopping for a signal */
        {&failing, W_EXITCODE(3, 0), false, false, false},         /* exited during our stop */
        {&failing, W_EXITCODE(3, 0), false, true, true},           /* ...but blamed, with a code */
        {&failing, W_EXITCODE(0, 0), true, true, true},            /* ...or its own error file */
        {&failing, W_EXITCODE(0, SIGTERM), false, true, false},    /* blamed, ended by us */
        /* ...blamed by the failure that began the stop (it waited for this rank in vain) */
        {&after, W_EXITCODE(0, SIGTERM), false, true, true},
        {&after, W_EXITCODE(0, SIGTERM), false, false, false}, /* not blamed */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ddp_failure_t f = {.rank = 2, .peer_rank = -1};
        f.message = cases[i].message ? "Traceback" : NULL;
        const ddp_failure_t *recorded = cases[i].blamed ? &blaming : &blames_other;
        bool own = ddp_report_own_failure(&f, cases[i].status, cases[i].stop, recorded, 1);
        if (own != cases[i].own)
            fail_msg("case %zu: %s, expected %s", i, own ? "own" : "ours",
                     cases[i].own ? "own" : "ours");
    }
    ddp_failure_t f = {.rank = 2, .peer_rank = -1};
    assert_false(ddp_report_own_failure(&f, W_EXITCODE(3, 0), &failing, NULL, 0));
}

static void test_report_layout(void **state)
{
    ddp_failure_t f[3];
    ddp_buf_t out = DDP_BUF_INIT;
    assert_int_equal(ddp_failure_init(&f[0], 0, 0, 100, W_EXITCODE(0, SIGKILL), 2000, NULL), 0);
    assert_int_equal(ddp_failure_init(&f[1], 5, 1, 101, W_EXITCODE(3, 0), 1000, NULL), 0);
    assert_int_equal(ddp_failure_init(&f[2], 6, 2, 102, W_EXITCODE(1, 0), 1000, NULL), 0);
    f[2].message = strdup("line one\nline two");
    assert_int_equal(ddp_report_root(f, 3), 1); /* earliest; the first of equals */
    assert_int_equal(ddp_report_format(&out, "train.py", "node0", f, 3, true), 0);
    const char *text = ddp_buf_str(&out);
    const char *title = strstr(text, "train.py FAILED\n");
    const char *root = strstr(text, "Root Cause (first observed failure):\n[1]:\n");
    assert_non_null(title);
    assert_non_null(root);
    assert_non_null(strstr(root, "  rank      : 5 (local_rank: 1)\n"));
    assert_non_null(strstr(root, "  exitcode  : 3 (pid: 101)\n"));
    assert_non_null(strstr(root, "  host      : node0\n"));
    assert_non_null(strstr(root, "  error_file: <N/A>\n"));
    assert_non_null(strstr(root, "https://pytorch.org/docs/stable/elastic/errors.html"));
    /* The others are listed before the root cause. */
    const char *failures = strstr(text, "Failures:\n[0]:\n");
    assert_non_null(failures);
    assert_true(failures < root);
    assert_non_null(strstr(failures, "  exitcode  : -9 (pid: 100)\n"));
    assert_non_null(strstr(failures, "  traceback : Signal 9 (SIGKILL) received by PID 100\n"));
    assert_non_null(strstr(failures, "[2]:\n"));
    assert_non_null(strstr(failures, "  traceback : line one\n  line two\n"));
    /* Banners are at most 60 wide and frame the report. */
    char border[61];
    memset(border, '=', 60);
    border[60] = '\0';
    assert_int_equal(strncmp(text, border, 60), 0);
    assert_int_equal(text[60], '\n');
    for (int i = 0; i < 3; i++)
        ddp_failure_free(&f[i]);
    ddp_buf_free(&out);

    /* A lone failure: <NO_OTHER_FAILURES>; a program gets its own hint. */
    ddp_failure_t one;
    assert_int_equal(ddp_failure_init(&one, 0, 0, 7, W_EXITCODE(2, 0), 1, NULL), 0);
    assert_int_equal(ddp_report_format(&out, "./train", "h", &one, 1, false), 0);
    assert_non_null(strstr(ddp_buf_str(&out), "Failures:\n  <NO_OTHER_FAILURES>\n"));
    assert_non_null(strstr(ddp_buf_str(&out), "the program wrote no error file"));
    assert_non_null(strstr(ddp_buf_str(&out), "./train FAILED"));
    ddp_failure_free(&one);
    ddp_buf_free(&out);
}

static int count_lines(const char *text)
{
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

/* Another node's failure through the store: the same record back, its host in the report;
 * a record that is not one (wrong types, out of range, not JSON) is refused. */
static void test_failure_json_round_trip(void **state)
{
    ddp_failure_t f = {.rank = 7,
                       .local_rank = 3,
                       .pid = 4242,
                       .exitcode = -9,
                       .timestamp = 1700000000.25,
                       .peer_rank = 2};
    f.error_file = strdup("/logs/3/error.json");
    f.message = strdup("line \"one\"\nline two\t\x01");
    ddp_buf_t line = DDP_BUF_INIT;
    assert_int_equal(ddp_failure_to_json(&f, "gpu07", &line), 0);
    assert_int_equal(count_lines(ddp_buf_str(&line)), 1);
    ddp_failure_t back;
    assert_int_equal(ddp_failure_from_json(line.data, line.len - 1, &back), 0);
    assert_int_equal(back.rank, 7);
    assert_int_equal(back.local_rank, 3);
    assert_int_equal(back.pid, 4242);
    assert_int_equal(back.exitcode, -9);
    assert_int_equal(back.peer_rank, 2);
    assert_true(back.timestamp == f.timestamp);
    assert_string_equal(back.host, "gpu07");
    assert_string_equal(back.error_file, f.error_file);
    assert_string_equal(back.message, "line \"one\"\nline two\t\\x01"); /* (a control: shown) */
    ddp_buf_t report = DDP_BUF_INIT;
    assert_int_equal(ddp_report_format(&report, "t.py", "here", &back, 1, true), 0);
    assert_non_null(strstr(ddp_buf_str(&report), "host      : gpu07\n"));
    ddp_buf_free(&report);
    ddp_failure_free(&back);
    /* Without an error file's message, the last line it wrote is carried and shown. */
    free(f.message);
    f.message = NULL;
    f.last_line = strdup("ModuleNotFoundError: No module named 'x'");
    ddp_buf_clear(&line);
    assert_int_equal(ddp_failure_to_json(&f, "gpu07", &line), 0);
    assert_int_equal(ddp_failure_from_json(line.data, line.len - 1, &back), 0);
    assert_string_equal(back.last_line, f.last_line);
    assert_int_equal(ddp_report_format(&report, "t.py", "here", &back, 1, true), 0);
    assert_non_null(strstr(ddp_buf_str(&report), "  traceback : Signal 9 (SIGKILL) received by "
                                                 "PID 4242\n  last line : ModuleNotFoundError: "
                                                 "No module named 'x'\n"));
    ddp_buf_free(&report);
    ddp_failure_free(&back);
    /* Another node's last line is one line, however it came. */
    const char *two = "{\"rank\": 1, \"local_rank\": 0, \"pid\": 1, \"exitcode\": 1, "
                      "\"timestamp\": 1, \"peer_rank\": -1, \"host\": \"h\", \"last_line\": "
                      "\"one\\ntwo\"}";
    assert_int_equal(ddp_failure_from_json(two, strlen(two), &back), 0);
    assert_string_equal(back.last_line, "one");
    ddp_failure_free(&back);
    /* Nor are another node's (its host, error file, message and last line). */
    const char *raw = "{\"rank\": 1, \"local_rank\": 0, \"pid\": 1, \"exitcode\": 1, "
                      "\"timestamp\": 1, \"peer_rank\": -1, \"host\": \"h\\u001b[1m\", "
                      "\"error_file\": \"/e\\u009b\", \"message\": \"m\\u001b\\nn\", "
                      "\"last_line\": \"l\\u0007\"}";
    assert_int_equal(ddp_failure_from_json(raw, strlen(raw), &back), 0);
    assert_string_equal(back.host, "h\\x1b[1m");
    assert_string_equal(back.error_file, "/e\\xc2\\x9b");
    assert_string_equal(back.message, "m\\x1b\nn");
    assert_string_equal(back.last_line, "l\\x07");
    ddp_failure_free(&back);
    ddp_failure_free(&f);
    ddp_buf_free(&line);
    static const char *const bad[] = {
        "",
        "not json",
        "[1, 2]",
        "{\"rank\": 1}",
        "{\"rank\": -1, \"local_rank\": 0, \"pid\": 1, \"exitcode\": 1, \"timestamp\": 1, "
        "\"peer_rank\": -1, \"host\": \"h\"}",
        "{\"rank\": 1.5, \"local_rank\": 0, \"pid\": 1, \"exitcode\": 1, \"timestamp\": 1, "
        "\"peer_rank\": -1, \"host\": \"h\"}",
        "{\"rank\": 1, \"local_rank\": 0, \"pid\": 1, \"exitcode\": 999, \"timestamp\": 1, "
        "\"peer_rank\": -1, \"host\": \"h\"}",
        "{\"rank\": 1, \"local_rank\": 0, \"pid\": 1, \"exitcode\": 1, \"timestamp\": 1, "
        "\"peer_rank\": -1, \"host\": 5}",
        "{\"rank\": 1, \"local_rank\": 0, \"pid\": 1, \"exitcode\": 1, \"timestamp\": \"x\", "
        "\"peer_rank\": -1, \"host\": \"h\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ddp_failure_t g;
        if (ddp_failure_from_json(bad[i], strlen(bad[i]), &g) == 0)
            fail_msg("accepted '%s'", bad[i]);
    }
}

/* Where a worker's core went, from the kernel's core_pattern, as the error line says. */
static void test_core_dump_note(void **state)
{
    char buf[300];
    int dumped = SIGSEGV | 0x80, not_dumped = SIGSEGV, exited = 3 << 8;
    assert_string_equal(ddp_core_dump_note(dumped, 42, "core\n", 0, "/w", buf, sizeof buf),
                        " (core dumped: /w/core)");
    assert_string_equal(ddp_core_dump_note(dumped, 42, "core", 1, "/w", buf, sizeof buf),
                        " (core dumped: /w/core.42)");
    assert_string_equal(ddp_core_dump_note(dumped, 42, "/var/cores/c\n", 0, "/w", buf, sizeof buf),
                        " (core dumped: /var/cores/c)");
    assert_string_equal(ddp_core_dump_note(dumped, 42, "|/usr/lib/systemd/systemd-coredump %P %u\n",
                                           0, "/w", buf, sizeof buf),
                        " (core dumped, to /usr/lib/systemd/systemd-coredump)");
    assert_string_equal(ddp_core_dump_note(dumped, 42, "core.%e.%p\n", 0, "/w", buf, sizeof buf),
                        " (core dumped, named by core_pattern 'core.%e.%p' in /w)");
    assert_string_equal(ddp_core_dump_note(dumped, 42, "", 0, "/w", buf, sizeof buf),
                        " (core dumped)");
    assert_string_equal(ddp_core_dump_note(not_dumped, 42, "core", 0, "/w", buf, sizeof buf), "");
    assert_string_equal(ddp_core_dump_note(exited, 42, "core", 0, "/w", buf, sizeof buf), "");
}

static void test_failure_summary(void **state)
{
    (void)state;
    const char *cases[][2] = {
        {"gloo: Connection closed by peer", "gloo: Connection closed by peer"},
        {"first line\nsecond line", "first line"},
        {"Traceback (most recent call last):\n  File \"t.py\", line 9, in <module>\n"
         "    main()\nRuntimeError: [pair.cc:598] Connection closed by peer\n\n",
         "RuntimeError: [pair.cc:598] Connection closed by peer"},
        {"Traceback (most recent call last):\n  File \"t.py\"\nValueError: a\n\nDuring "
         "handling of the above exception, another exception occurred:\n\nTraceback (most "
         "recent call last):\n  File \"t.py\"\nKeyError: 'b'\n  \n",
         "KeyError: 'b'"},
        {"Traceback (most recent call last):", "Traceback (most recent call last):"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = ddp_failure_summary(cases[i][0]);
        assert_non_null(got);
        assert_string_equal(got, cases[i][1]);
        free(got);
    }
    /* One line of a megabyte (a flat error.json's message) is its first 400 bytes; a byte
     * no terminal should see is shown escaped, whoever made the message. */
    size_t big = 1 << 20;
    char *line = malloc(big + 1), *got;
    assert_non_null(line);
    memset(line, 'y', big);
    line[big] = '\0';
    line[0] = '\x1b';
    assert_non_null(got = ddp_failure_summary(line));
    assert_int_equal(strlen(got), 4 + (DDP_LAST_LINE_MAX - 1) + 3); /* \x1b, 399 y, ... */
    assert_memory_equal(got, "\\x1byyy", 7);
    assert_string_equal(got + 4 + DDP_LAST_LINE_MAX - 1, "...");
    free(got);
    free(line);
}

/* A traceback of megabytes (an error.json's message may hold 4 MiB) is shown by its last
 * 64 KiB, from a line's start, saying how much is left out. */
static void test_long_traceback_cut(void **state)
{
    (void)state;
    ddp_failure_t f;
    ddp_buf_t message = DDP_BUF_INIT, out = DDP_BUF_INIT;
    assert_int_equal(ddp_failure_init(&f, 0, 0, 100, W_EXITCODE(1, 0), 1000, NULL), 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(ddp_buf_printf(&message, "  File \"t.py\", line %d\n", i), 0);
    assert_int_equal(ddp_buf_puts(&message, "RuntimeError: the end"), 0);
    f.message = ddp_buf_steal(&message);
    assert_int_equal(ddp_report_format(&out, "train.py", "node0", &f, 1, true), 0);
    const char *text = ddp_buf_str(&out), *cut = strstr(text, "  traceback : ... (");
    assert_true(out.len < 72 << 10); /* (each line indented 2 bytes more) */
    assert_non_null(cut);
    assert_non_null(strstr(cut, " bytes before are left out here: see the error file)\n"
                                "    File \"t.py\", line "));
    assert_non_null(strstr(cut, "line 99999\n  RuntimeError: the end\n"));
    ddp_failure_free(&f);
    ddp_buf_free(&out);
}

/* A worker's last line is its own text: escaped, one line, its first DDP_LAST_LINE_MAX
 * bytes; set again, the old one goes. */
static void test_last_line_shown(void **state)
{
    (void)state;
    ddp_failure_t f;
    char line[1001];
    memset(&f, 0, sizeof f);
    assert_int_equal(ddp_failure_set_last_line(&f, "a\x1b]52;c;aGk=\x07\x7f b\rhidden", 23), 0);
    assert_string_equal(f.last_line, "a\\x1b]52;c;aGk=\\x07\\x7f b");
    memset(line, 'x', 1000);
    line[1000] = '\0';
    assert_int_equal(ddp_failure_set_last_line(&f, line, 1000), 0);
    assert_int_equal(strlen(f.last_line), DDP_LAST_LINE_MAX + 3);
    assert_string_equal(f.last_line + DDP_LAST_LINE_MAX, "...");
    ddp_failure_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_and_signal),
        cmocka_unit_test(test_error_file_forms),
        cmocka_unit_test(test_root_follows_peer_rank),
        cmocka_unit_test(test_own_failure),
        cmocka_unit_test(test_report_layout),
        cmocka_unit_test(test_same_second_ordered_by_file_time),
        cmocka_unit_test(test_failure_json_round_trip),
        cmocka_unit_test(test_core_dump_note),
        cmocka_unit_test(test_failure_summary),
        cmocka_unit_test(test_last_line_shown),
        cmocka_unit_test(test_long_traceback_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
