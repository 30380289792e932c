/* Integration tests: worker output through ddp-launch: --redirects, --tee, the line
 * prefix and its template, --local-ranks-filter, whole lines under concurrency, a
 * 10 MB line, binary data and a last line without a newline; closed standard streams, an unusable
 * TMPDIR; a terminal's workers on pseudo-terminals. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* The single <run_id>_<rand> directory under a --log-dir. */
static char *run_dir(const char *logs, const char *run_id)
{
    DIR *dir = opendir(logs);
    struct dirent *entry;
    char *found = NULL;
    size_t len = strlen(run_id);
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        if (strncmp(entry->d_name, run_id, len) == 0 && entry->d_name[len] == '_') {
            free(found);
            assert_true(asprintf(&found, "%s/%s", logs, entry->d_name) > 0);
        }
    }
    if (dir != NULL)
        closedir(dir);
    assert_non_null(found);
    return found;
}

/* The contents of <run>/attempt_0/<name>, or NULL when it does not exist. */
static char *attempt_file(const char *run, const char *name, size_t *len)
{
    char *path, *data = NULL;
    size_t n = 0;
    assert_true(asprintf(&path, "%s/attempt_0/%s", run, name) > 0);
    if (ddp_read_file(path, (size_t)64 << 20, &data, &n) != 0)
        data = NULL;
    free(path);
    if (len)
        *len = n;
    return data;
}

/* The contents of <run>/attempt_0/<rank>/<name>, or NULL when it does not exist. */
static char *log_file(const char *run, int rank, const char *name, size_t *len)
{
    char file[256];
    snprintf(file, sizeof file, "%d/%s", rank, name);
    return attempt_file(run, file, len);
}

static void expect_file(const char *run, int rank, const char *name, const char *content)
{
    char *data = log_file(run, rank, name, NULL);
    if (data == NULL || strcmp(data, content) != 0)
        fail_msg("%s/attempt_0/%d/%s holds '%s', expected '%s'", run, rank, name,
                 data ? data : "(no file)", content);
    free(data);
}

static void test_redirects_layout(void **state)
{
    char *logs = th_tmpdir(), flag[600];
    snprintf(flag, sizeof flag, "--log_dir=%s", logs);
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--redirects", "3", flag,
                          "--no-python", th_worker(),          "streams",     NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "out 0") == NULL); /* redirected, not shown */
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "err 1") == NULL);
    char *run = run_dir(logs, "none");
    for (int rank = 0; rank < 2; rank++) {
        char out[32], err[32];
        snprintf(out, sizeof out, "out %d\n\n", rank);
        snprintf(err, sizeof err, "err %d\n", rank);
        expect_file(run, rank, "stdout.log", out);
        expect_file(run, rank, "stderr.log", err);
    }
    /* A worker that exits 0 writes no error.json. */
    TH_ASSERT(&p, log_file(run, 0, "error.json", NULL) == NULL);
    th_cleanup(&p);
    free(run);
    th_rmtree(logs);
    free(logs);
}

static void test_tee_prefix_on_each_stream(void **state)
{
    char *logs = th_tmpdir(), flag[600];
    snprintf(flag, sizeof flag, "--log-dir=%s", logs);
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "-t",        "3",       "--role", "trainer",
        flag,          "--no-python",        th_worker(), "streams", NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(out, "[trainer0]:out 0\n") != NULL);
    TH_ASSERT(&p, strstr(out, "[trainer1]:out 1\n") != NULL);
    TH_ASSERT(&p, th_count(out, "[trainer1]:\n") == 1); /* the empty line keeps its prefix */
    TH_ASSERT(&p, strstr(err, "[trainer0]:err 0\n") != NULL);
    TH_ASSERT(&p, strstr(out, "err 0") == NULL); /* stderr stays on stderr */
    char *run = run_dir(logs, "none");
    expect_file(run, 1, "stdout.log", "out 1\n\n"); /* the file holds the bytes, no prefix */
    expect_file(run, 1, "stderr.log", "err 1\n");
    th_cleanup(&p);
    free(run);
    th_rmtree(logs);
    free(logs);
}

/* torchrun's --duplicate-std{out,err}-filters: the tee'd lines holding any filter (",," a
 * comma in one; "" any line) also go, prefixed, to the attempt's filtered_std*.log; a
 * stream not tee'd does not. Without the flags there is no such file. */
static void test_duplicate_filters(void **state)
{
    char *logs = th_tmpdir(), flag[600];
    snprintf(flag, sizeof flag, "--log-dir=%s", logs);
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=3",
                          "--tee=0:3,1:1",
                          "--duplicate-stdout-filters=loss,a,,b",
                          "--duplicate_stderr_filters=",
                          flag,
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "echo step 1 loss 0.5; echo other; echo 'x a,b y'; echo 'has a only'; "
                          "echo warn >&2; printf 'no newline loss'",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    char *run = run_dir(logs, "none");
    char *out = attempt_file(run, "filtered_stdout.log", NULL),
         *err = attempt_file(run, "filtered_stderr.log", NULL);
    TH_ASSERT(&p, out != NULL && err != NULL);
    for (int rank = 0; rank < 2; rank++) {
        char line[3][64];
        snprintf(line[0], sizeof line[0], "[default%d]:step 1 loss 0.5\n", rank);
        snprintf(line[1], sizeof line[1], "[default%d]:x a,b y\n", rank);
        snprintf(line[2], sizeof line[2], "[default%d]:no newline loss\n", rank);
        for (int i = 0; i < 3; i++)
            TH_ASSERT(&p, strstr(out, line[i]) != NULL);
    }
    TH_ASSERT(&p, th_count(out, "\n") == 6); /* nothing else, rank 2 (not tee'd) none */
    TH_ASSERT(&p, strcmp(err, "[default0]:warn\n") == 0); /* only rank 0 tees stderr */
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "nothing is copied") == NULL);
    free(out);
    free(err);
    free(run);
    th_cleanup(&p);
    th_rmtree(logs);

    const char *plain[] = {th_launcher(), "--tee=3", flag, "--no-python",
                           "/bin/echo",   "loss",    NULL};
    th_run(&p, plain, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    run = run_dir(logs, "none");
    TH_ASSERT(&p, (out = attempt_file(run, "filtered_stdout.log", NULL)) == NULL);
    free(run);
    th_cleanup(&p);

    /* Filters for a stream no rank tees: said, as they copy nothing. */
    const char *untee[] = {th_launcher(), "--tee=1", "--duplicate-stderr-filters=x", "/bin/true",
                           NULL};
    th_run(&p, untee, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "--duplicate-stderr-filters copies only what --tee "
                                          "sends to the console, and no stderr is tee'd") != NULL);
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

static void test_tee_map_with_many_digits(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=12", "--tee=11:1,0:2",
                          "--no-python", th_worker(),           "streams",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(out, "[default11]:out 11\n") != NULL);
    TH_ASSERT(&p, strstr(err, "[default0]:err 0\n") != NULL);
    TH_ASSERT(&p, strstr(out, "\nout 3\n") != NULL || strncmp(out, "out 3\n", 6) == 0);
    TH_ASSERT(&p, strstr(out, "[default3]") == NULL);
    th_cleanup(&p);
}

static void test_prefix_template(void **state)
{
    const char *env[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=<${rank}|${role_name}|$$> ", NULL};
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--tee=1",
                          "--no-python", th_worker(),          "streams",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "<1|default|$> out 1\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "<0|default|$> out 0\n") != NULL);
    th_cleanup(&p);
}

static void test_local_ranks_filter(void **state)
{
    char *logs = th_tmpdir(), flag[600];
    snprintf(flag, sizeof flag, "--log-dir=%s", logs);
    /* Without --tee: only rank 1 reaches the console, the others nowhere. */
    const char *plain[] = {th_launcher(), "--nproc-per-node=3", "--local-ranks-filter=1",
                           "--no-python", th_worker(),          "streams",
                           NULL};
    th_proc_t p;
    th_run(&p, plain, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "out 1\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "err 1\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "out 0") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "out 2") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "err 2") == NULL);
    th_cleanup(&p);
    /* With --tee: every rank's file, only rank 1 on the console. */
    const char *teed[] = {th_launcher(),
                          "--nproc-per-node=3",
                          "--local-ranks-filter=1",
                          "-t3",
                          flag,
                          "--no-python",
                          th_worker(),
                          "streams",
                          NULL};
    th_run(&p, teed, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "[default1]:out 1\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "out 0") == NULL);
    char *run = run_dir(logs, "none");
    expect_file(run, 0, "stdout.log", "out 0\n\n");
    expect_file(run, 2, "stderr.log", "err 2\n");
    th_cleanup(&p);
    free(run);
    th_rmtree(logs);
    free(logs);
}

static void test_lines_never_mix(void **state)
{
    /* Four workers write 3000 lines each in three pieces per line. */
    const int workers = 4, lines = 3000;
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=4", "--no-python", th_worker(), "lines", "3000", NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    int next[4] = {0, 0, 0, 0};
    char payload[200];
    const char *at = ddp_buf_str(&p.out);
    while (*at) {
        const char *nl = strchr(at, '\n');
        TH_ASSERT(&p, nl != NULL);
        int rank, i, used = 0;
        if (sscanf(at, "line rank=%d i=%d %n", &rank, &i, &used) != 2 || rank < 0 ||
            rank >= workers) {
            th_dump(&p);
            fail_msg("mixed line: '%.*s'", (int)(nl - at), at);
        }
        memset(payload, 'a' + rank, 199);
        payload[199] = '\0';
        /* The rest of the line is this rank's payload and its end marker, nothing else. */
        TH_ASSERT(&p, (size_t)(nl - (at + used)) == 199 + 4);
        TH_ASSERT(&p, strncmp(at + used, payload, 199) == 0 && strncmp(nl - 4, " end", 4) == 0);
        TH_ASSERT(&p, i == next[rank]); /* in order, nothing lost */
        next[rank]++;
        at = nl + 1;
    }
    for (int r = 0; r < workers; r++)
        TH_ASSERT(&p, next[r] == lines);
    th_cleanup(&p);
}

/* --tee with a console nobody reads for a while (a pager, `| (sleep 4; wc -l)`): the
 * worker writes its log file at full speed and ends; the console copy lags and then comes
 * whole, every line once, in order. Two workers, 1 MB each, well past what the pipes hold. */
static void test_slow_console_never_stalls_the_files(void **state)
{
    const int lines = 5000;
    char *logs = th_tmpdir(), log_flag[600], script[1200];
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    snprintf(script, sizeof script, "'%s' lines %d && : > '%s/done'$LOCAL_RANK", th_worker(), lines,
             logs);
    const char *argv[] = {th_launcher(),    "--nproc-per-node=2",
                          "--tee=3",        log_flag,
                          "--rdzv-id=slow", "--no-python",
                          "/bin/sh",        "-c",
                          script,           NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    /* Not reading the launcher's stdout: both workers must still finish writing. */
    char done[2][700];
    bool finished = false;
    for (int r = 0; r < 2; r++)
        snprintf(done[r], sizeof done[r], "%s/done%d", logs, r);
    double deadline = th_now() + 20;
    while (!finished && th_now() < deadline) {
        finished = access(done[0], F_OK) == 0 && access(done[1], F_OK) == 0;
        if (!finished)
            poll(NULL, 0, 20); /* bounded: a file is the condition, 20 s the deadline */
    }
    TH_ASSERT(&p, finished);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0);
    char *run = run_dir(logs, "slow");
    for (int r = 0; r < 2; r++) {
        char *file = log_file(run, r, "stdout.log", NULL);
        TH_ASSERT(&p, file != NULL && th_count(file, " end\n") == lines);
        free(file);
        /* The console has each line once, prefixed, in the worker's order. */
        char needle[64];
        int next = 0;
        snprintf(needle, sizeof needle, "[default%d]:line rank=%d i=", r, r);
        for (const char *at = ddp_buf_str(&p.out); (at = strstr(at, needle)) != NULL; at++)
            TH_ASSERT(&p, atoi(at + strlen(needle)) == next++);
        TH_ASSERT(&p, next == lines);
    }
    free(run);
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

static void test_ten_megabyte_line(void **state)
{
    const size_t bytes = 10u << 20;
    char *logs = th_tmpdir(), flag[600], size[32];
    snprintf(flag, sizeof flag, "--log-dir=%s", logs);
    snprintf(size, sizeof size, "%zu", bytes);
    const char *argv[] = {th_launcher(), "--tee=1",  flag, "--no-python",
                          th_worker(),   "big-line", size, NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, p.out.len == strlen("[default0]:") + bytes + 1);
    TH_ASSERT(&p, strncmp(out, "[default0]:xxxx", 15) == 0 && out[p.out.len - 1] == '\n');
    TH_ASSERT(&p, strspn(out + 11, "x") == bytes);
    char *run = run_dir(logs, "none");
    size_t len;
    char *file = log_file(run, 0, "stdout.log", &len);
    TH_ASSERT(&p, file != NULL && len == bytes + 1);
    free(file);
    th_cleanup(&p);
    free(run);
    th_rmtree(logs);
    free(logs);
}

static void test_binary_and_unterminated_output(void **state)
{
    char *logs = th_tmpdir(), flag[600];
    snprintf(flag, sizeof flag, "--log-dir=%s", logs);
    const char *argv[] = {th_launcher(), "--tee=1", flag, "--no-python",
                          th_worker(),   "binary",  NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    /* What the worker wrote: every byte but the newline, then "\nend". */
    char bytes[260];
    size_t nbytes = 0;
    for (int c = 0; c < 256; c++) {
        if (c != '\n')
            bytes[nbytes++] = (char)c;
    }
    memcpy(bytes + nbytes, "\nend", 4);
    nbytes += 4;
    /* The console: the "\r" (byte 13) ends a line as a terminal would show it, and the
     * unterminated last line gets a newline. */
    char expected[320];
    size_t n = 0;
    memcpy(expected + n, "[default0]:", 11);
    n += 11;
    memcpy(expected + n, bytes, 13); /* up to and with the '\r' (value 13) */
    n += 13;
    memcpy(expected + n, "[default0]:", 11);
    n += 11;
    memcpy(expected + n, bytes + 13, 255 - 13);
    n += 255 - 13;
    memcpy(expected + n, "\n[default0]:end\n", 16);
    n += 16;
    TH_ASSERT(&p, p.out.len == n && memcmp(p.out.data, expected, n) == 0);
    /* The file: exactly the bytes the worker wrote. */
    char *run = run_dir(logs, "none");
    size_t len;
    char *file = log_file(run, 0, "stdout.log", &len);
    TH_ASSERT(&p, file != NULL && len == nbytes && memcmp(file, bytes, nbytes) == 0);
    free(file);
    th_cleanup(&p);
    free(run);
    th_rmtree(logs);
    free(logs);
}

/* A failing worker whose stderr went to its log file only: the report is followed by its
 * last 10 lines (not the 5 before them); with --tee they were on the console already and
 * are not repeated. */
/* `ddp-launch ... > log 2>&1`: the launcher's stdout and stderr are one file, and a
 * worker that alternates "out i" on stdout and "err i" on stderr keeps that order in it
 * (two workers, 2000 pairs each; with a pipe a stream, thousands of pairs came out of
 * order). Each worker's lines are checked in the order they appear. */
static void test_one_file_keeps_order(void **state)
{
    char *dir = th_tmpdir(), cmd[2000], path[700];
    snprintf(path, sizeof path, "%s/log", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' --nproc-per-node=2 --no-python /bin/sh -c 'i=0; while [ $i -lt 2000 ]; do "
             "echo \"out $LOCAL_RANK $i\"; echo \"err $LOCAL_RANK $i\" >&2; i=$((i+1)); done' "
             "> '%s' 2>&1",
             th_launcher(), path);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    char *text = NULL;
    size_t len;
    TH_ASSERT(&p, ddp_read_file(path, 1 << 24, &text, &len) == 0);
    int next[2] = {0, 0}, bad = 0; /* per rank: the next line expected, as 2 * i + err */
    for (char *line = text; line != NULL && *line != '\0';) {
        char kind[4];
        int rank, i;
        if (sscanf(line, "%3s %d %d", kind, &rank, &i) == 3 && (rank == 0 || rank == 1)) {
            int got = 2 * i + (strcmp(kind, "err") == 0);
            bad += got != next[rank];
            next[rank] = got + 1;
        }
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    free(text);
    printf("lines out of order: %d\n", bad);
    TH_ASSERT(&p, bad == 0 && next[0] == 4000 && next[1] == 4000);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* The stderr tail after the report is the launcher's lines: a redirected worker's escape
 * sequences and control characters are shown escaped there, and none reaches the console. */
static void test_stderr_tail_shown_escaped(void **state)
{
    const char *redirected[] = {th_launcher(),
                                "-r",
                                "2",
                                "--no-python",
                                "/bin/sh",
                                "-c",
                                "printf 'one\\n\\033[2J\\033]52;c;aGk=\\007 two\\r\\n' >&2; exit 4",
                                NULL};
    th_proc_t p;
    th_run(&p, redirected, NULL, 60);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "  | one\n  | \\x1b[2J\\x1b]52;c;aGk=\\x07 two\\x0d\n") != NULL);
    TH_ASSERT(&p, strpbrk(err, "\x1b\x07\r") == NULL);
    th_cleanup(&p);
}

static void test_report_shows_stderr_tail(void **state)
{
    const char *script = "if [ $RANK = 1 ]; then i=1; while [ $i -le 15 ]; do echo \"line $i\" "
                         ">&2; i=$((i + 1)); done; echo 'boom: the cause' >&2; exit 4; fi; "
                         "sleep 0.3";
    const char *redirected[] = {th_launcher(), "-r",      "2",  "--nproc-per-node=2",
                                "--no-python", "/bin/sh", "-c", script,
                                NULL};
    th_proc_t p;
    th_run(&p, redirected, NULL, 60);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "the last lines of rank 1's stderr (") != NULL);
    TH_ASSERT(&p, strstr(err, "  | line 7\n") != NULL && strstr(err, "  | line 15\n") != NULL);
    TH_ASSERT(&p, strstr(err, "  | boom: the cause\n") != NULL);
    TH_ASSERT(&p, strstr(err, "  | line 6\n") == NULL);
    th_cleanup(&p);
    const char *teed[] = {th_launcher(), "-t",      "2",  "--nproc-per-node=2",
                          "--no-python", "/bin/sh", "-c", script,
                          NULL};
    th_run(&p, teed, NULL, 60);
    err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "boom: the cause") != NULL); /* on the console, prefixed */
    TH_ASSERT(&p, strstr(err, "the last lines of rank") == NULL);
    th_cleanup(&p);
}

/* A launcher started with a standard stream closed (`<&-`, some schedulers) runs the job
 * as with /dev/null there: its workers read an empty stdin, and no pipe or socket of the
 * launcher takes the free number (libuv aborted closing one: status 134). */
static void test_closed_standard_streams(void **state)
{
    const char *worker = "readlink /proc/self/fd/0; cat || echo 'stdin unreadable'; "
                         "echo \"rank $RANK done\"; echo \"rank $RANK err\" >&2";
    const char *closes[] = {"0<&-", "2>&-", "0<&- 2>&-"};
    for (size_t i = 0; i < sizeof closes / sizeof *closes; i++) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "exec \"$@\" %s", closes[i]);
        const char *argv[] = {
            "/bin/sh",     "-c",      cmd,  "sh",   th_launcher(), "--nproc-per-node=2",
            "--no-python", "/bin/sh", "-c", worker, NULL};
        th_proc_t p;
        th_run(&p, argv, NULL, 60);
        const char *out = ddp_buf_str(&p.out);
        printf("streams closed: %s, status %d\n", closes[i], th_status(&p));
        TH_ASSERT(&p, th_status(&p) == 0);
        TH_ASSERT(&p, th_count(out, "/dev/null\n") == 2 && th_count(out, " done\n") == 2);
        TH_ASSERT(&p, strstr(out, "stdin unreadable") == NULL);
        th_cleanup(&p);
    }
}

/* The reader of ddp-launch's stdout goes away (| head): the job goes on to its end, the
 * log files keep everything, and stderr says once that the console's copy is dropped. */
static void test_console_reader_gone(void **state)
{
    char *dir = th_tmpdir(), go[600], logs[600], *text = NULL;
    snprintf(go, sizeof go, "%s/go", dir);
    snprintf(logs, sizeof logs, "--log-dir=%s/logs", dir);
    const char *argv[] = {th_launcher(),
                          "--tee=1",
                          logs,
                          "--rdzv-id=gone",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "echo first; i=0; while [ ! -e \"$1\" ] && [ $i -lt 600 ]; do sleep 0.1; "
                          "i=$((i + 1)); done; i=0; while [ $i -lt 5000 ]; do echo line $i; "
                          "i=$((i + 1)); done",
                          "sh",
                          go,
                          NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "first\n", 1, 30));
    close(p.out_fd);
    p.out_fd = -1;
    TH_ASSERT(&p, th_touch(go));
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), "warning: stdout is closed (its reader went "
                                                "away): the job goes on") == 1);
    char *run = run_dir(logs + strlen("--log-dir="), "gone");
    TH_ASSERT(&p, (text = log_file(run, 0, "stdout.log", NULL)) != NULL);
    TH_ASSERT(&p, strstr(text, "line 4999\n") != NULL);
    free(text);
    free(run);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* TMPDIR missing (a per-job scratch a node's prolog did not make): the job runs, its log
 * directory and watchdog FIFO in /tmp, as torchrun's would be, and the launcher says so
 * (it ended 3: "unable to create the log directory under /nonexistent"). */
static void test_unusable_tmpdir(void **state)
{
    char *dir = th_tmpdir(), tmpdir[600], want[800];
    snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s/missing", dir);
    const char *env[] = {tmpdir, "TORCHELASTIC_ENABLE_FILE_TIMER=1", NULL};
    const char *argv[] = {th_launcher(), "--nproc-per-node=2",
                          "--no-python", "/bin/sh",
                          "-c",          "echo \"timer $TORCHELASTIC_TIMER_FILE\"",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    snprintf(want, sizeof want,
             "warning: %s is no directory this user can write (No such file or directory): new "
             "directories go to /tmp instead",
             tmpdir);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), want) == 1);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "timer /tmp/watchdog_timer_") == 2);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* A worker's unfinished line (dots, "loading... ", a progress bar) reaches the console
 * before its end, as on the worker's own console (it waited for the newline, as long as
 * the worker took); another rank's line ends it, and it is shown again, whole, when it
 * goes on. Each step waits for the last to be on the launcher's stdout (a pipe here). */
static void test_unfinished_line_is_shown(void **state)
{
    char *dir = th_tmpdir(), first[600], second[600];
    snprintf(first, sizeof first, "T1=%s/first", dir);
    snprintf(second, sizeof second, "T2=%s/second", dir);
    const char *worker =
        "wait_for() { i=0; while [ ! -e \"$1\" ] && [ $i -lt 600 ]; do sleep 0.05; "
        "i=$((i+1)); done; }\n"
        "if [ \"$RANK\" = 0 ]; then printf 'loading... '; wait_for \"$T2\"; echo done; "
        "else wait_for \"$T1\"; echo 'rank 1 line'; fi";
    const char *env[] = {first, second, NULL};
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--tee=3", "--no-python", "/bin/sh", "-c", worker,
        NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    TH_ASSERT(&p, th_wait_output(&p, 1, "[default0]:loading... ", 1, 30));
    TH_ASSERT(&p, th_touch(first + 3));
    TH_ASSERT(&p, th_wait_output(&p, 1, "[default1]:rank 1 line\n", 1, 30));
    TH_ASSERT(&p, th_touch(second + 3));
    TH_ASSERT(&p, th_wait_exit(&p, 30) && th_status(&p) == 0);
    TH_ASSERT(&p, strcmp(ddp_buf_str(&p.out), "[default0]:loading... \n[default1]:rank 1 line\n"
                                              "[default0]:loading... done\n") == 0);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* torchrun's LOGLEVEL (Python's names) sets ddp-launch's verbosity where
 * DDP_LAUNCH_LOG_LEVEL does not: LOGLEVEL=DEBUG to see a rendezvous was ignored. */
static void test_torchrun_loglevel(void **state)
{
    static const struct {
        const char *env[3];
        bool debug, info, bad;
    } cases[] = {
        {{"DDP_LAUNCH_LOG_LEVEL", "LOGLEVEL=DEBUG", NULL}, true, true, false},
        {{"DDP_LAUNCH_LOG_LEVEL", "LOGLEVEL=WARNING", NULL}, false, false, false},
        {{"DDP_LAUNCH_LOG_LEVEL", "LOGLEVEL=CRITICAL", NULL}, false, false, false},
        {{"LOGLEVEL=WARNING", "DDP_LAUNCH_LOG_LEVEL=info", NULL}, false, true, false},
        {{"DDP_LAUNCH_LOG_LEVEL", "LOGLEVEL=loud", NULL}, false, true, true},
    };
    /* "true", no file here: said at info that it runs directly. The tests' environment
     * sets DDP_LAUNCH_LOG_LEVEL: a lone name removes it. */
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "true", NULL};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        th_proc_t p;
        th_run(&p, argv, cases[i].env, 60);
        const char *err = ddp_buf_str(&p.err);
        printf("%s %s: status %d\n", cases[i].env[0], cases[i].env[1], th_status(&p));
        TH_ASSERT(&p, th_status(&p) == 0);
        TH_ASSERT(&p, (strstr(err, "debug: started worker rank 1") != NULL) == cases[i].debug);
        TH_ASSERT(&p, (strstr(err, "running it directly") != NULL) == cases[i].info);
        TH_ASSERT(&p, (strstr(err, "warning: LOGLEVEL=loud is not DEBUG") != NULL) == cases[i].bad);
        th_cleanup(&p);
    }
}

/* Launched from a terminal, workers whose output goes only to it write to a terminal too
 * (as torchrun's do): a C program's stdio is line-buffered, so a printf shows while the
 * worker runs, not at its exit; isatty() is true, the size is the console's; 3 MB from
 * four ranks arrive whole; a resize reaches the worker. A tee'd worker writes to a pipe, as
 * under torchrun. */
static void test_terminal_workers_see_a_terminal(void **state)
{
    char *dir = th_tmpdir(), go[600];
    snprintf(go, sizeof go, "%s/go", dir);
    const char *stdio[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", th_worker(), "stdio", go, NULL};
    th_proc_t p;
    th_start_terminal(&p, stdio, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "stdio 0 tty=1\n", 1, 30));
    TH_ASSERT(&p, th_wait_output(&p, 1, "stdio 1 tty=1\n", 1, 30));
    TH_ASSERT(&p, th_touch(go));
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0);
    th_cleanup(&p);
    const char *size[] = {
        th_launcher(), "--no-python", "/bin/sh", "-c", "stty -F /proc/self/fd/2 size", NULL};
    th_start_terminal(&p, size, NULL);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "40 120\n") != NULL);
    th_cleanup(&p);
    /* Resized: the worker's pseudo-terminal takes the new size and its group SIGWINCH. */
    const char *resized[] = {th_launcher(),
                             "--no-python",
                             "/bin/sh",
                             "-c",
                             "trap 'stty -F /proc/self/fd/2 size; exit 0' WINCH; echo ready; i=0; "
                             "while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; exit 3",
                             NULL};
    th_start_terminal(&p, resized, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready\n", 1, 30));
    struct winsize bigger = {.ws_row = 50, .ws_col = 132};
    TH_ASSERT(&p, ioctl(p.out_fd, TIOCSWINSZ, &bigger) == 0 && kill(p.pid, SIGWINCH) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "50 132\n") != NULL);
    th_cleanup(&p);
    const char *lines[] = {
        th_launcher(), "--nproc-per-node=4", "--no-python", th_worker(), "lines", "3000", NULL};
    th_start_terminal(&p, lines, NULL);
    TH_ASSERT(&p, th_wait_exit(&p, 120));
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int rank = 0; rank < 4; rank++) {
        char last[64];
        snprintf(last, sizeof last, "line rank=%d i=2999 ", rank);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), last) != NULL);
    }
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), " end\n") == 4 * 3000);
    th_cleanup(&p);
    const char *teed[] = {th_launcher(), "--tee=3", "--no-python", th_worker(), "stdio", go, NULL};
    th_start_terminal(&p, teed, NULL);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "stdio 0 tty=0\n") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TH_TEST(test_redirects_layout),
        TH_TEST(test_tee_prefix_on_each_stream),
        TH_TEST(test_tee_map_with_many_digits),
        TH_TEST(test_duplicate_filters),
        TH_TEST(test_prefix_template),
        TH_TEST(test_local_ranks_filter),
        TH_TEST(test_lines_never_mix),
        TH_TEST(test_slow_console_never_stalls_the_files),
        TH_TEST(test_ten_megabyte_line),
        TH_TEST(test_binary_and_unterminated_output),
        TH_TEST(test_report_shows_stderr_tail),
        TH_TEST(test_stderr_tail_shown_escaped),
        TH_TEST(test_one_file_keeps_order),
        TH_TEST(test_closed_standard_streams),
        TH_TEST(test_console_reader_gone),
        TH_TEST(test_unusable_tmpdir),
        TH_TEST(test_unfinished_line_is_shown),
        TH_TEST(test_torchrun_loglevel),
        TH_TEST(test_terminal_workers_see_a_terminal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
