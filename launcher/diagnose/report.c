/* Failure records, error.json reading and the failure report (see report.h). */
#include "diagnose/report.h"

#include "host/signals.h"
#include "error.h"
#include "io.h"
#include "json.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

/* A timestamp in an error file: a number, or a string holding one (PyTorch writes
 * str(int(time.time()))). */
static bool json_timestamp(const ddp_json_t *value, double *out)
{
    const char *text = ddp_json_string(value, NULL);
    if (text != NULL) {
        char *end;
        double v = strtod(text, &end);
        if (end == text || *end != '\0')
            return false;
        *out = v;
        return true;
    }
    return ddp_json_number(value, out);
}

/* PyTorch's timestamp is whole seconds, so two ranks that fail in the same second tie and
 * the first in rank order would be taken for the root cause (a rank that fails because
 * its peer closed the connection ahead of the peer itself). Within that second the file's
 * modification time orders them. */
static double refine_timestamp(double ts, const char *path)
{
    struct stat st;
    if (ts != (double)(long long)ts || lstat(path, &st) != 0 || (double)st.st_mtim.tv_sec != ts)
        return ts;
    return ts + (double)st.st_mtim.tv_nsec / 1e9;
}

/* A new copy of text[0, len) (a worker's, or a peer's), as a terminal may show it: no
 * escape sequence or control character of its own (ddp_buf_printable); NULL: no memory. */
static char *shown_copy(const char *text, size_t len, bool lines)
{
    ddp_buf_t shown = DDP_BUF_INIT;
    char *copy = ddp_buf_printable(&shown, text, len, lines) == 0 ? ddp_buf_steal(&shown) : NULL;
    ddp_buf_free(&shown);
    return copy;
}

static int read_error_file(ddp_failure_t *f, const char *path)
{
    char *text = NULL;
    size_t len;
    ddp_json_t *root = NULL;
    int err = ddp_read_worker_file(path, DDP_ERROR_FILE_MAX, &text, &len);
    if (err == -ENOENT)
        return 0;
    if ((f->error_file = strdup(path)) == NULL)
        goto nomem;
    if (err) {
        if (asprintf(&f->message, "<unable to read the error file: %s>", ddp_strerror(err)) < 0)
            goto nomem;
        return 0;
    }
    err = ddp_json_parse(text, len, &root);
    free(text);
    text = NULL;
    if (err == -ENOMEM)
        goto nomem;
    const ddp_json_t *message = ddp_json_get(root, "message");
    const char *found = NULL;
    double ts;
    if (ddp_json_string(message, NULL) != NULL) {
        /* The flat form: {"message": "...", "timestamp": N}. */
        found = ddp_json_string(message, NULL);
        if (json_timestamp(ddp_json_get(root, "timestamp"), &ts) && ts > 0)
            f->timestamp = ts;
    } else if (message != NULL) {
        /* PyTorch's @record form: {"message": {"message": "...", "extraInfo":
         * {"py_callstack": "...", "timestamp": "N"}}}. */
        const ddp_json_t *extra = ddp_json_get(message, "extraInfo");
        found = ddp_json_string(ddp_json_get(extra, "py_callstack"), NULL);
        if (found == NULL)
            found = ddp_json_string(ddp_json_get(message, "message"), NULL);
        if (json_timestamp(ddp_json_get(extra, "timestamp"), &ts) && ts > 0)
            f->timestamp = ts;
        double peer;
        if (json_timestamp(ddp_json_get(extra, "peer_rank"), &peer) && peer >= 0 &&
            peer <= INT_MAX && peer == (int)peer)
            f->peer_rank = (int)peer;
    }
    f->timestamp = refine_timestamp(f->timestamp, path);
    if (found == NULL)
        found =
            root == NULL ? "<the error file is not valid JSON>" : "<the error file has no message>";
    f->message = shown_copy(found, strlen(found), true);
    ddp_json_free(root);
    return f->message ? 0 : -ENOMEM;
nomem:
    free(text);
    return -ENOMEM;
}

int ddp_failure_init(ddp_failure_t *f, int rank, int local_rank, pid_t pid, int wait_status,
                     double now, const char *error_file)
{
    memset(f, 0, sizeof *f);
    f->peer_rank = -1;
    f->rank = rank;
    f->local_rank = local_rank;
    f->pid = pid;
    f->exitcode = WIFSIGNALED(wait_status) ? -WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
    f->timestamp = now;
    int err = error_file ? read_error_file(f, error_file) : 0;
    if (err)
        ddp_failure_free(f);
    return err;
}

void ddp_failure_free(ddp_failure_t *f)
{
    free(f->error_file);
    free(f->message);
    free(f->host);
    free(f->last_line);
    f->host = f->last_line = NULL;
    f->error_file = f->message = NULL;
}

int ddp_failure_to_json(const ddp_failure_t *f, const char *host, ddp_buf_t *out)
{
    int err = ddp_buf_printf(out,
                             "{\"rank\": %d, \"local_rank\": %d, \"pid\": %d, \"exitcode\": %d, "
                             "\"timestamp\": %.6f, \"peer_rank\": %d, \"host\": ",
                             f->rank, f->local_rank, (int)f->pid, f->exitcode, f->timestamp,
                             f->peer_rank);
    if (err == 0)
        err =
            ddp_json_append_string(out, f->host ? f->host : host, strlen(f->host ? f->host : host));
    if (err == 0 && f->error_file != NULL && (err = ddp_buf_puts(out, ", \"error_file\": ")) == 0)
        err = ddp_json_append_string(out, f->error_file, strlen(f->error_file));
    if (err == 0 && f->message != NULL && (err = ddp_buf_puts(out, ", \"message\": ")) == 0)
        err = ddp_json_append_string(out, f->message, strlen(f->message));
    if (err == 0 && f->last_line != NULL && (err = ddp_buf_puts(out, ", \"last_line\": ")) == 0)
        err = ddp_json_append_string(out, f->last_line, strlen(f->last_line));
    return err ? err : ddp_buf_puts(out, "}\n");
}

/* An integer member of `obj` within [lo, hi]; false otherwise. */
static bool json_int(const ddp_json_t *obj, const char *name, double lo, double hi, int *out)
{
    double v;
    if (!ddp_json_number(ddp_json_get(obj, name), &v) || v < lo || v > hi || v != (double)(int)v)
        return false;
    *out = (int)v;
    return true;
}

int ddp_failure_from_json(const char *line, size_t len, ddp_failure_t *f)
{
    ddp_json_t *root = NULL;
    int err = ddp_json_parse(line, len, &root), pid = 0;
    memset(f, 0, sizeof *f);
    if (err)
        return err;
    const char *host = ddp_json_string(ddp_json_get(root, "host"), NULL);
    const char *file = ddp_json_string(ddp_json_get(root, "error_file"), NULL);
    const char *message = ddp_json_string(ddp_json_get(root, "message"), NULL);
    const char *last = ddp_json_string(ddp_json_get(root, "last_line"), NULL);
    if (!json_int(root, "rank", 0, INT_MAX, &f->rank) ||
        !json_int(root, "local_rank", 0, INT_MAX, &f->local_rank) ||
        !json_int(root, "pid", 0, INT_MAX, &pid) ||
        !json_int(root, "exitcode", -255, 255, &f->exitcode) ||
        !json_int(root, "peer_rank", -1, INT_MAX, &f->peer_rank) ||
        !ddp_json_number(ddp_json_get(root, "timestamp"), &f->timestamp) || host == NULL) {
        ddp_json_free(root);
        memset(f, 0, sizeof *f);
        return DDP_EPARSE;
    }
    f->pid = (pid_t)pid;
    f->host = shown_copy(host, strlen(host), false);
    f->error_file = file != NULL ? shown_copy(file, strlen(file), false) : NULL;
    f->message = message != NULL ? shown_copy(message, strlen(message), true) : NULL;
    err = last != NULL ? ddp_failure_set_last_line(f, last, strlen(last)) : 0; /* never trusted */
    ddp_json_free(root);
    if (f->host == NULL || (file != NULL && f->error_file == NULL) ||
        (message != NULL && f->message == NULL) || err != 0) {
        ddp_failure_free(f);
        return -ENOMEM;
    }
    return 0;
}

int ddp_failure_set_last_line(ddp_failure_t *f, const char *text, size_t len)
{
    ddp_buf_t shown = DDP_BUF_INIT;
    size_t line = 0;
    while (line < len && text[line] != '\r' && text[line] != '\n')
        line++;
    free(f->last_line);
    f->last_line = NULL;
    if (ddp_buf_printable_cut(&shown, text, line, DDP_LAST_LINE_MAX, false) == 0)
        f->last_line = ddp_buf_steal(&shown);
    ddp_buf_free(&shown);
    return f->last_line != NULL ? 0 : -ENOMEM;
}

int ddp_failure_status(const ddp_failure_t *f)
{
    return f->exitcode < 0 ? 128 - f->exitcode : f->exitcode;
}

char *ddp_failure_summary(const char *message)
{
    const char *start = message, *end = message + strcspn(message, "\n");
    if (strncmp(message, "Traceback (most recent call last):", 34) == 0) {
        /* The last line with something on it: the exception raised. */
        for (const char *p = message; *p != '\0'; p += *p == '\n') {
            const char *line = p;
            p += strcspn(p, "\n");
            if (line + strspn(line, " \t\r") < p)
                start = line, end = p;
        }
    }
    ddp_buf_t line = DDP_BUF_INIT;
    char *said = NULL;
    if (ddp_buf_printable_cut(&line, start, (size_t)(end - start), DDP_LAST_LINE_MAX, false) == 0)
        said = ddp_buf_steal(&line);
    ddp_buf_free(&line);
    return said;
}

char *ddp_failure_said(const ddp_failure_t *f)
{
    const char *said = f->message != NULL ? f->message : f->last_line;
    return said != NULL ? ddp_failure_summary(said) : NULL;
}

const char *ddp_failure_describe(const ddp_failure_t *f, char *buf, size_t cap)
{
    char name[32];
    if (f->exitcode < 0)
        snprintf(buf, cap, "was killed by %s", ddp_signal_name(-f->exitcode, name, sizeof name));
    else
        snprintf(buf, cap, "exited with code %d", f->exitcode);
    return buf;
}

/* The start of a small file (a /proc/sys setting) in buf[cap]: its length, or 0. */
static size_t read_setting(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    size_t n = f != NULL ? fread(buf, 1, cap - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    return n;
}

const char *ddp_core_dump_note(int status, pid_t pid, const char *pattern, int uses_pid,
                               const char *cwd, char *buf, size_t cap)
{
    char text[256] = "", flag[8] = "", suffix[24] = "";
    buf[0] = '\0';
    if (!WIFSIGNALED(status) || !WCOREDUMP(status))
        return buf;
    if (pattern == NULL && read_setting("/proc/sys/kernel/core_pattern", text, sizeof text) > 0)
        pattern = text;
    if (uses_pid < 0)
        uses_pid =
            read_setting("/proc/sys/kernel/core_uses_pid", flag, sizeof flag) > 0 && flag[0] == '1';
    if (uses_pid)
        snprintf(suffix, sizeof suffix, ".%d", (int)pid);
    int len = pattern != NULL ? (int)strcspn(pattern, "\n") : 0;
    if (len == 0)
        snprintf(buf, cap, " (core dumped)");
    else if (pattern[0] == '|') /* systemd-coredump, apport: coredumpctl and the like */
        snprintf(buf, cap, " (core dumped, to %.*s)", (int)strcspn(pattern + 1, " \n"),
                 pattern + 1);
    else if (memchr(pattern, '%', (size_t)len) != NULL)
        snprintf(buf, cap, " (core dumped, named by core_pattern '%.*s' in %s)", len, pattern, cwd);
    else
        snprintf(buf, cap, " (core dumped: %s%s%.*s%s)", pattern[0] == '/' ? "" : cwd,
                 pattern[0] == '/' ? "" : "/", len, pattern, suffix);
    return buf;
}

bool ddp_report_own_failure(const ddp_failure_t *f, int wait_status, const ddp_stop_state_t *stop,
                            const ddp_failure_t *recorded, size_t n)
{
    if (!stop->stopping)
        return true;
    int sig = WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0;
    bool not_ours = stop->for_failure && sig != 0 && sig != stop->sent_signal &&
                    !(stop->sent_sigkill && sig == SIGKILL);
    int blamer = ddp_report_blamer(recorded, n, f->rank);
    bool own_end = (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) != 0) || f->message != NULL;
    /* Blamed by what caused the stop: the rank that never came to the call the others
     * waited in is the culprit though our stop ended it (the hang verdict names it too). */
    bool culprit = blamer >= 0 && (size_t)blamer < stop->recorded_before;
    return not_ours || (blamer >= 0 && own_end) || culprit;
}

int ddp_report_blamer(const ddp_failure_t *recorded, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++)
        if (recorded[i].peer_rank == rank)
            return (int)i;
    return -1;
}

size_t ddp_report_root(const ddp_failure_t *failures, size_t n)
{
    size_t root = 0;
    for (size_t i = 1; i < n; i++) {
        if (failures[i].timestamp < failures[root].timestamp)
            root = i;
    }
    for (size_t step = 0; step < n && failures[root].peer_rank >= 0; step++) {
        size_t next = n;
        for (size_t i = 0; i < n && next == n; i++) {
            if (i != root && failures[i].rank == failures[root].peer_rank)
                next = i;
        }
        if (next == n)
            break;
        root = next;
    }
    return root;
}

/* The bytes of a message (an error.json's traceback, up to 4 MiB) the report shows: its
 * end, where the exception is. */
#define TRACEBACK_SHOWN_MAX ((size_t)64 << 10)

static int format_failure(ddp_buf_t *out, size_t idx, const char *host, const ddp_failure_t *f,
                          bool python)
{
    char when[64], name[32];
    time_t t = (time_t)f->timestamp;
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d_%H:%M:%S", &tm);
    int err = ddp_buf_printf(out,
                             "[%zu]:\n"
                             "  time      : %s\n"
                             "  host      : %s\n"
                             "  rank      : %d (local_rank: %d)\n"
                             "  exitcode  : %d (pid: %d)\n"
                             "  error_file: %s\n"
                             "  traceback : ",
                             idx, when, host, f->rank, f->local_rank, f->exitcode, (int)f->pid,
                             f->error_file ? f->error_file : "<N/A>");
    if (err)
        return err;
    if (f->message != NULL) {
        const char *p = f->message;
        size_t total = strlen(p);
        if (total > TRACEBACK_SHOWN_MAX) { /* its last lines, from a line's start */
            const char *from = p + total - TRACEBACK_SHOWN_MAX, *nl = strchr(from, '\n');
            from = nl != NULL && nl[1] != '\0' ? nl + 1 : from;
            err = ddp_buf_printf(out,
                                 "... (%zu bytes before are left out here: see the error "
                                 "file)\n  ",
                                 (size_t)(from - p));
            p = from;
        }
        /* Indent the traceback's lines under the field, as torchrun does. */
        while (*p && err == 0) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            err = ddp_buf_append(out, p, len);
            if (err == 0 && nl != NULL && nl[1] != '\0')
                err = ddp_buf_puts(out, "\n  ");
            p += len + (nl != NULL);
        }
    } else if (f->exitcode < 0) {
        err = ddp_buf_printf(out, "Signal %d (%s) received by PID %d", -f->exitcode,
                             ddp_signal_name(-f->exitcode, name, sizeof name), (int)f->pid);
    } else if (python) {
        err = ddp_buf_puts(out, "To enable traceback see: "
                                "https://pytorch.org/docs/stable/elastic/errors.html");
    } else {
        err = ddp_buf_puts(out, "<N/A> (the program wrote no error file; see its stderr)");
    }
    /* Without an error file, what it said last (a SyntaxError before any @record ran). */
    if (err == 0 && f->message == NULL && f->last_line != NULL)
        err = ddp_buf_printf(out, "\n  last line : %s", f->last_line);
    return err ? err : ddp_buf_puts(out, "\n");
}

/* The widest line of `text`, for the banner (torchrun caps it at 60). */
static size_t widest_line(const char *text)
{
    size_t widest = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        widest = len > widest ? len : widest;
        p += len + (nl != NULL);
    }
    return widest;
}

int ddp_report_format(ddp_buf_t *out, const char *name, const char *host,
                      const ddp_failure_t *failures, size_t n, bool python)
{
    ddp_buf_t root = DDP_BUF_INIT, others = DDP_BUF_INIT;
    size_t root_index = ddp_report_root(failures, n);
    int err = 0;
    for (size_t i = 0; i < n && err == 0; i++)
        err = format_failure(i == root_index ? &root : &others, i,
                             failures[i].host ? failures[i].host : host, &failures[i], python);
    if (err == 0 && others.len == 0)
        err = ddp_buf_puts(&others, "  <NO_OTHER_FAILURES>\n");
    if (err == 0) {
        char title[512];
        snprintf(title, sizeof title, "%s FAILED", name);
        size_t width = strlen(title);
        size_t w1 = widest_line(ddp_buf_str(&root)), w2 = widest_line(ddp_buf_str(&others));
        width = w1 > width ? w1 : width;
        width = w2 > width ? w2 : width;
        width = width > 60 ? 60 : width;
        char border[61], section[61];
        memset(border, '=', width);
        memset(section, '-', width);
        border[width] = section[width] = '\0';
        err = ddp_buf_printf(out,
                             "%s\n%s\n%s\nFailures:\n%s%s\n"
                             "Root Cause (first observed failure):\n%s%s\n",
                             border, title, section, ddp_buf_str(&others), section,
                             ddp_buf_str(&root), border);
    }
    ddp_buf_free(&root);
    ddp_buf_free(&others);
    return err;
}
