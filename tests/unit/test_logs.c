/* Unit tests of launcher/output/logs.c: whole-line assembly, sinks, prefixes, directories. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/cli.h"
#include "output/logs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A console that is a temporary file, read back after the writes. */
typedef struct {
    FILE *file;
    ddp_console_t console;
} capture_t;

static void capture_open(capture_t *c)
{
    c->file = tmpfile();
    assert_non_null(c->file);
    memset(&c->console, 0, sizeof c->console);
    c->console.fd = fileno(c->file);
}

static char *capture_read(capture_t *c, size_t *len)
{
    long size = lseek(c->console.fd, 0, SEEK_END);
    char *data = malloc((size_t)size + 1);
    assert_int_equal(pread(c->console.fd, data, (size_t)size, 0), size);
    data[size] = '\0';
    *len = (size_t)size;
    fclose(c->file);
    return data;
}

static void test_whole_lines_with_prefix(void **state)
{
    capture_t c;
    ddp_lines_t lines;
    size_t len;
    capture_open(&c);
    ddp_lines_init(&lines, "[default1]:", DDP_LINE_MAX);
    /* Pieces that split lines anywhere, an empty line, and a last line without end. */
    const char *pieces[] = {"hel", "lo\nwor", "ld\n\nlast", " words"};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(ddp_lines_feed(&lines, &c.console, pieces[i], strlen(pieces[i])), 0);
    ddp_lines_finish(&lines, &c.console);
    ddp_lines_finish(&lines, &c.console); /* nothing pending: writes nothing */
    char *out = capture_read(&c, &len);
    assert_string_equal(out, "[default1]:hello\n[default1]:world\n[default1]:\n"
                             "[default1]:last words\n");
    free(out);
    ddp_lines_free(&lines);
}

static void test_carriage_returns(void **state)
{
    capture_t c;
    ddp_lines_t lines;
    size_t len;
    capture_open(&c);
    ddp_lines_init(&lines, "P:", DDP_LINE_MAX);
    /* A progress bar redrawing itself, then a Windows line end split across reads, then
     * a "\r" held at the end of a read that turns out not to start "\r\n". */
    const char *pieces[] = {" 10%\r 20%\r", "done\r", "\nnext\r", "x\n", "last\r"};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(ddp_lines_feed(&lines, &c.console, pieces[i], strlen(pieces[i])), 0);
    ddp_lines_finish(&lines, &c.console);
    char *out = capture_read(&c, &len);
    assert_string_equal(out, "P: 10%\rP: 20%\rP:done\r\nP:next\rP:x\nP:last\r\n");
    free(out);
    ddp_lines_free(&lines);
}

static void feed(ddp_lines_t *lines, ddp_console_t *console, const char *text)
{
    assert_int_equal(ddp_lines_feed(lines, console, text, strlen(text)), 0);
}

/* An unfinished line shown before its end (ddp_lines_show): its next bytes continue it,
 * nothing is written twice, and a held "\r" (perhaps "\r\n") is not shown early. */
static void test_unfinished_line_shown(void **state)
{
    capture_t c;
    ddp_lines_t lines;
    size_t len;
    capture_open(&c);
    ddp_lines_init(&lines, "P:", DDP_LINE_MAX);
    feed(&lines, &c.console, "Epoch 1 ");
    assert_int_equal(ddp_lines_unshown(&lines), 8);
    ddp_lines_show(&lines, &c.console);
    assert_int_equal(ddp_lines_unshown(&lines), 0);
    ddp_lines_show(&lines, &c.console); /* nothing new: writes nothing */
    feed(&lines, &c.console, "..");
    ddp_lines_show(&lines, &c.console);
    feed(&lines, &c.console, ". done\nnext\r");
    assert_int_equal(ddp_lines_unshown(&lines), 4);
    ddp_lines_show(&lines, &c.console);
    feed(&lines, &c.console, "\nlast");
    ddp_lines_show(&lines, &c.console);
    ddp_lines_finish(&lines, &c.console);
    char *out = capture_read(&c, &len);
    assert_string_equal(out, "P:Epoch 1 ... done\nP:next\r\nP:last\n");
    free(out);
    ddp_lines_free(&lines);
}

/* Another stream's line after a shown unfinished one: a newline ends that first, and it is
 * shown again, whole, when it goes on; two progress bars ("\r") share one line instead.
 * Consoles on one file (a terminal's stdout and stderr) share what is open. */
static void test_unfinished_line_and_others(void **state)
{
    capture_t c;
    ddp_lines_t a, b;
    size_t len;
    capture_open(&c);
    ddp_console_t err = c.console;
    err.same_file = &c.console;
    ddp_lines_init(&a, "A:", DDP_LINE_MAX);
    ddp_lines_init(&b, "B:", DDP_LINE_MAX);
    feed(&a, &c.console, "loading");
    ddp_lines_show(&a, &c.console);
    feed(&b, &err, "a warning\n");
    feed(&a, &c.console, " done\n");
    feed(&a, &c.console, "\r 10%");
    ddp_lines_show(&a, &c.console);
    feed(&b, &err, "\r 50%");
    ddp_lines_show(&b, &err);
    feed(&a, &c.console, "\r 20%");
    ddp_lines_show(&a, &c.console);
    feed(&a, &c.console, "\n");
    ddp_lines_finish(&b, &err);
    char *out = capture_read(&c, &len);
    assert_string_equal(out, "A:loading\nB:a warning\nA:loading done\n"
                             "A:\rA: 10%\rB:\rB: 50%\rA: 10%\rA: 20%\nB: 50%\n");
    free(out);
    ddp_lines_free(&a);
    ddp_lines_free(&b);
}

/* A launcher message while a worker's line is open there (a pdb prompt) ends that line
 * first, and the line is shown again, whole, when it goes on; at a line's start, it does not. */
static void test_launcher_message_ends_open_line(void **state)
{
    capture_t c;
    ddp_lines_t a;
    ddp_log_t log;
    atomic_bool open = false;
    size_t len;
    capture_open(&c);
    ddp_log_init(&log, "ddp-launch", DDP_LOG_INFO);
    log.fd = c.console.fd;
    log.open_line = &open;
    c.console.log_line = &open;
    ddp_lines_init(&a, "A:", DDP_LINE_MAX);
    feed(&a, &c.console, "(Pdb) ");
    ddp_lines_show(&a, &c.console);
    assert_true(atomic_load(&open));
    ddp_log_info(&log, "rank 1 finished");
    assert_false(atomic_load(&open));
    feed(&a, &c.console, "p x\n");
    ddp_log_info(&log, "later");
    char *out = capture_read(&c, &len);
    assert_string_equal(out,
                        "A:(Pdb) \nddp-launch: rank 1 finished\nA:(Pdb) p x\nddp-launch: later\n");
    free(out);
    ddp_lines_free(&a);
}

static void test_many_lines_in_one_read(void **state)
{
    capture_t c;
    ddp_lines_t lines;
    ddp_buf_t in = DDP_BUF_INIT, want = DDP_BUF_INIT;
    size_t len;
    capture_open(&c);
    ddp_lines_init(&lines, "P:", DDP_LINE_MAX);
    for (int i = 0; i < 5000; i++) { /* more lines than one writev batch */
        ddp_buf_printf(&in, "line %d\n", i);
        ddp_buf_printf(&want, "P:line %d\n", i);
    }
    assert_int_equal(ddp_lines_feed(&lines, &c.console, in.data, in.len), 0);
    char *out = capture_read(&c, &len);
    assert_int_equal(len, want.len);
    assert_memory_equal(out, want.data, len);
    free(out);
    ddp_buf_free(&in);
    ddp_buf_free(&want);
    ddp_lines_free(&lines);
}

static void test_binary_and_long_lines(void **state)
{
    capture_t c;
    ddp_lines_t lines;
    size_t len;
    capture_open(&c);
    ddp_lines_init(&lines, "", 16);
    const char bin[] = {'a', 0, (char)0xff, '\r', '\n'};
    ddp_lines_feed(&lines, &c.console, bin, sizeof bin);
    /* 40 bytes without a newline with a 16-byte limit come out in pieces. */
    const char *longline = "0123456789012345678901234567890123456789";
    ddp_lines_feed(&lines, &c.console, longline, strlen(longline));
    ddp_lines_finish(&lines, &c.console);
    char *out = capture_read(&c, &len);
    assert_memory_equal(out, bin, sizeof bin);
    assert_string_equal(out + sizeof bin, "0123456789012345678901234567890123456789\n");
    free(out);
    ddp_lines_free(&lines);

    /* Fed in small pieces, the limit splits the line. */
    capture_open(&c);
    ddp_lines_init(&lines, "", 16);
    for (int i = 0; i < 4; i++)
        ddp_lines_feed(&lines, &c.console, longline + 10 * i, 10);
    ddp_lines_finish(&lines, &c.console);
    out = capture_read(&c, &len);
    assert_string_equal(out, "01234567890123456789\n01234567890123456789\n");
    free(out);
    ddp_lines_free(&lines);
}

static void test_broken_console_is_dropped(void **state)
{
    int fds[2];
    ddp_lines_t lines;
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(pipe(fds), 0);
    close(fds[0]);
    ddp_console_t console = {.fd = fds[1], .broken = false};
    ddp_lines_init(&lines, "", DDP_LINE_MAX);
    assert_int_equal(ddp_lines_feed(&lines, &console, "a\nb\n", 4), 0);
    assert_true(console.broken);
    assert_int_equal(ddp_lines_feed(&lines, &console, "c\n", 2), 0);
    close(fds[1]);
    ddp_lines_free(&lines);
}

static void config(ddp_launch_config_t *cfg, const char *redirects, const char *tee,
                   const char *filter)
{
    static char *argv[16]; /* the config points into it */
    int argc = 0;
    char *envp[] = {NULL};
    ddp_buf_t err = DDP_BUF_INIT;
    ddp_log_t log;
    ddp_log_init(&log, "test", DDP_LOG_ERROR);
    argv[argc++] = "ddp-launch";
    argv[argc++] = "--redirects";
    argv[argc++] = (char *)redirects;
    argv[argc++] = "--tee";
    argv[argc++] = (char *)tee;
    if (filter) {
        argv[argc++] = "--local-ranks-filter";
        argv[argc++] = (char *)filter;
    }
    argv[argc++] = "t.py";
    argv[argc] = NULL;
    assert_int_equal(ddp_cli_parse(cfg, argc, argv, envp, &log, &err), 0);
    ddp_buf_free(&err);
}

static void test_sinks(void **state)
{
    ddp_launch_config_t cfg;
    /* Nothing asked: the console. */
    config(&cfg, "0", "0", NULL);
    assert_int_equal(ddp_logs_sink(&cfg, 0, DDP_STD_OUT), DDP_SINK_CONSOLE);
    ddp_config_free(&cfg);
    /* Redirect stdout of rank 1 only; tee stderr of everyone. */
    config(&cfg, "1:1", "2", NULL);
    assert_int_equal(ddp_logs_sink(&cfg, 1, DDP_STD_OUT), DDP_SINK_FILE);
    assert_int_equal(ddp_logs_sink(&cfg, 0, DDP_STD_OUT), DDP_SINK_CONSOLE);
    assert_int_equal(ddp_logs_sink(&cfg, 0, DDP_STD_ERR), DDP_SINK_TEE);
    assert_int_equal(ddp_logs_sink(&cfg, 1, DDP_STD_ERR), DDP_SINK_TEE);
    ddp_config_free(&cfg);
    /* The filter: others reach no console; tee'd ones still get their file. */
    config(&cfg, "0", "0:3", "1");
    assert_int_equal(ddp_logs_sink(&cfg, 0, DDP_STD_OUT), DDP_SINK_FILE);
    assert_int_equal(ddp_logs_sink(&cfg, 1, DDP_STD_OUT), DDP_SINK_CONSOLE);
    assert_int_equal(ddp_logs_sink(&cfg, 2, DDP_STD_ERR), DDP_SINK_NULL);
    ddp_config_free(&cfg);
}

static void test_prefix(void **state)
{
    ddp_launch_config_t cfg;
    char *prefix;
    config(&cfg, "0", "3", NULL);
    assert_int_equal(ddp_logs_prefix(&cfg, 17, 3, &prefix), 0);
    assert_string_equal(prefix, "[default3]:");
    free(prefix);
    cfg.role = "trainer";
    cfg.prefix_template = "${role_name}/${rank}/${local_rank} $$ ${host}|";
    assert_int_equal(ddp_logs_prefix(&cfg, 17, 3, &prefix), 0);
    assert_string_equal(prefix, "trainer/17/3 $ ${host}|");
    free(prefix);
    ddp_config_free(&cfg);
}

typedef struct {
    char *announced;
    bool existed;
} announce_case_t;

static void record_announce(void *ctx, const char *dir)
{
    announce_case_t *c = ctx;
    struct stat st;
    free(c->announced);
    c->announced = strdup(dir);
    c->existed = stat(dir, &st) == 0;
}

/* The default base directory under $TMPDIR is announced (to the orphan guard) before
 * it exists, and is the directory then made. */
static void test_default_base_is_announced_first(void **state)
{
    char tmp[] = "/tmp/ddp-logs-tmpdir-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    setenv("TMPDIR", tmp, 1);
    announce_case_t c = {NULL, false};
    char *base_out, *run_dir;
    bool created;
    assert_int_equal(
        ddp_logs_make_run_dir(NULL, "job", record_announce, &c, &base_out, &created, &run_dir), 0);
    assert_true(created);
    assert_non_null(c.announced);
    assert_false(c.existed);
    assert_string_equal(c.announced, base_out);
    assert_int_equal(strncmp(base_out, tmp, strlen(tmp)), 0);
    struct stat st;
    assert_int_equal(stat(run_dir, &st), 0);
    ddp_logs_remove_if_empty(base_out, false);
    assert_int_equal(stat(base_out, &st), -1);
    rmdir(tmp);
    if (saved != NULL)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
    free(c.announced);
    free(base_out);
    free(run_dir);
}

static void test_directories(void **state)
{
    char base[] = "/tmp/ddp-logs-test-XXXXXX";
    assert_non_null(mkdtemp(base));
    char *base_out, *run_dir, *attempt_dir, *nested;
    bool created;
    assert_true(asprintf(&nested, "%s/a/b", base) > 0);
    /* A run id that is not a safe file name is made one. */
    assert_int_equal(
        ddp_logs_make_run_dir(nested, "../ns/job 1", NULL, NULL, &base_out, &created, &run_dir), 0);
    assert_false(created);
    assert_string_equal(base_out, nested);
    assert_int_equal(strncmp(run_dir + strlen(nested), "/_._ns_job_1_", 13), 0);
    assert_int_equal(ddp_logs_make_attempt_dir(run_dir, 2, 3, &attempt_dir), 0);
    char *rank2;
    assert_true(asprintf(&rank2, "%s/attempt_2/2", run_dir) > 0);
    struct stat st;
    assert_int_equal(stat(rank2, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    /* Empty directories go; a file keeps its directory. */
    char *file;
    assert_true(asprintf(&file, "%s/stdout.log", rank2) > 0);
    int fd = open(file, O_CREAT | O_WRONLY, 0644);
    close(fd);
    /* A flight recorder ring goes only when asked (a job that succeeded). */
    char *ring;
    assert_true(asprintf(&ring, "%s/attempt_2/1/flight_main.ring", run_dir) > 0);
    fd = open(ring, O_CREAT | O_WRONLY, 0644);
    close(fd);
    ddp_logs_remove_if_empty(base, false);
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(stat(ring, &st), 0);
    char *rank0;
    assert_true(asprintf(&rank0, "%s/attempt_2/0", run_dir) > 0);
    assert_int_equal(stat(rank0, &st), -1);
    ddp_logs_remove_if_empty(base, true);
    assert_int_equal(stat(ring, &st), -1);
    assert_int_equal(stat(file, &st), 0); /* a log stays */
    unlink(file);
    ddp_logs_remove_if_empty(base, false);
    assert_int_equal(stat(base, &st), -1);
    free(ring);
    free(nested);
    free(base_out);
    free(run_dir);
    free(attempt_dir);
    free(rank2);
    free(rank0);
    free(file);
}

/* A TMPDIR that is missing or no directory: new directories go to /tmp, as Python's
 * tempfile puts torchrun's (the launcher ended 3, "unable to create the log directory"). */
static void test_unusable_tmpdir_falls_back(void **state)
{
    char dir[] = "/tmp/ddp-logs-tmpdir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    char file[64], missing[64];
    snprintf(file, sizeof file, "%s/file", dir);
    snprintf(missing, sizeof missing, "%s/missing", dir);
    close(open(file, O_CREAT | O_WRONLY, 0644));
    setenv("TMPDIR", dir, 1);
    assert_string_equal(ddp_logs_temp_dir(NULL), dir);
    setenv("TMPDIR", file, 1);
    assert_string_equal(ddp_logs_temp_dir(NULL), "/tmp");
    setenv("TMPDIR", missing, 1);
    assert_string_equal(ddp_logs_temp_dir(NULL), "/tmp");
    char *base_out, *run_dir;
    bool created;
    assert_int_equal(ddp_logs_make_run_dir(NULL, "job", NULL, NULL, &base_out, &created, &run_dir),
                     0);
    assert_true(created);
    assert_int_equal(strncmp(base_out, "/tmp/ddp-launch_", 16), 0);
    ddp_logs_remove_if_empty(base_out, false);
    struct stat st;
    assert_int_equal(stat(base_out, &st), -1);
    unlink(file);
    rmdir(dir);
    if (saved != NULL)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
    free(base_out);
    free(run_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_lines_with_prefix),
        cmocka_unit_test(test_carriage_returns),
        cmocka_unit_test(test_unfinished_line_shown),
        cmocka_unit_test(test_unfinished_line_and_others),
        cmocka_unit_test(test_launcher_message_ends_open_line),
        cmocka_unit_test(test_many_lines_in_one_read),
        cmocka_unit_test(test_binary_and_long_lines),
        cmocka_unit_test(test_broken_console_is_dropped),
        cmocka_unit_test(test_sinks),
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_directories),
        cmocka_unit_test(test_default_base_is_announced_first),
        cmocka_unit_test(test_unusable_tmpdir_falls_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
