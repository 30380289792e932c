/* Log directories and whole-line console output (see logs.h). */
#include "output/logs.h"

#include "env.h"
#include "diagnose/hang.h"
#include "io.h"
#include "progress.h"
#include "template.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

ddp_sink_t ddp_logs_sink(const ddp_launch_config_t *cfg, int local_rank, int std)
{
    bool teed = (ddp_std_for(&cfg->tee, local_rank) & std) != 0;
    bool redirected = (ddp_std_for(&cfg->redirects, local_rank) & std) != 0;
    bool shown = ddp_config_rank_shown(cfg, local_rank);
    if (teed && shown)
        return DDP_SINK_TEE;
    if (teed || redirected)
        return DDP_SINK_FILE;
    return shown ? DDP_SINK_CONSOLE : DDP_SINK_NULL;
}

int ddp_logs_prefix(const ddp_launch_config_t *cfg, int rank, int local_rank, char **out)
{
    char rank_text[16], local_text[16];
    snprintf(rank_text, sizeof rank_text, "%d", rank);
    snprintf(local_text, sizeof local_text, "%d", local_rank);
    if (cfg->prefix_template == NULL)
        return asprintf(out, "[%s%d]:", cfg->role, local_rank) < 0 ? -ENOMEM : 0;
    const ddp_template_var_t vars[] = {
        {"rank", rank_text}, {"local_rank", local_text}, {"role_name", cfg->role}};
    return ddp_template_substitute(cfg->prefix_template, vars, 3, out);
}

static int make_dirs(const char *path)
{
    char *copy = strdup(path);
    int err = 0;
    if (copy == NULL)
        return -ENOMEM;
    for (char *p = copy + 1; err == 0; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(copy, 0777) != 0 && errno != EEXIST)
            err = -errno;
        *p = saved;
        if (saved == '\0')
            break;
    }
    free(copy);
    return err;
}

/* The run id names a directory: keep it readable but never a path. */
static void safe_name(const char *run_id, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = run_id; *p && n + 1 < cap && n < 128; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || (c == '.' && n > 0);
        out[n++] = ok ? c : '_';
    }
    out[n] = '\0';
}

/* mkdtemp(3), but the name is announced before the directory exists. */
static int make_new_dir(const char *parent, ddp_logs_announce_fn announce, void *ctx, char **out)
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (int tries = 0; tries < 100; tries++) {
        uint8_t random[8];
        char suffix[9];
        if (getrandom(random, sizeof random, 0) != (ssize_t)sizeof random)
            return -errno;
        for (size_t i = 0; i < sizeof random; i++)
            suffix[i] = letters[random[i] % (sizeof letters - 1)];
        suffix[8] = '\0';
        char *path;
        if (asprintf(&path, "%s/ddp-launch_%s", parent, suffix) < 0)
            return -ENOMEM;
        if (announce != NULL)
            announce(ctx, path);
        if (mkdir(path, 0700) == 0) {
            *out = path;
            return 0;
        }
        int err = -errno;
        free(path);
        if (err != -EEXIST)
            return err;
    }
    return -EEXIST;
}

/* 0 when this user can make files in directory `path`, else why not (an errno). */
static int writable_dir(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno;
    if (!S_ISDIR(st.st_mode))
        return ENOTDIR;
    return access(path, W_OK | X_OK) == 0 ? 0 : errno;
}

const char *ddp_logs_temp_dir(const ddp_log_t *log)
{
    static const char *const fallbacks[] = {"/tmp", "/var/tmp", "/usr/tmp"};
    const char *tmpdir = ddp_env_get(DDP_ENV_TMPDIR);
    int err = writable_dir(tmpdir);
    if (err == 0)
        return tmpdir;
    for (size_t i = 0; i < sizeof fallbacks / sizeof *fallbacks; i++) {
        if (writable_dir(fallbacks[i]) != 0)
            continue;
        if (log != NULL)
            ddp_log_warn(log,
                         "TMPDIR=%s is no directory this user can write (%s): new directories "
                         "go to %s instead, as Python's tempfile (torchrun's) would do",
                         tmpdir, strerror(err), fallbacks[i]);
        return fallbacks[i];
    }
    return tmpdir; /* nowhere better: what fails there says why */
}

int ddp_logs_make_run_dir(const char *base, const char *run_id, ddp_logs_announce_fn announce,
                          void *ctx, char **base_out, bool *base_created, char **run_dir)
{
    char name[160];
    char *base_path = NULL, *run_path = NULL;
    int err = 0;
    *base_created = false;
    if (base == NULL) {
        if ((err = make_new_dir(ddp_logs_temp_dir(NULL), announce, ctx, &base_path)) != 0)
            return err;
        *base_created = true;
    } else {
        if ((base_path = strdup(base)) == NULL)
            return -ENOMEM;
        if ((err = make_dirs(base_path)) != 0)
            goto fail;
    }
    safe_name(run_id, name, sizeof name);
    if (asprintf(&run_path, "%s/%s_XXXXXX", base_path, name) < 0) {
        err = -ENOMEM;
        goto fail;
    }
    if (mkdtemp(run_path) == NULL) {
        err = -errno;
        goto fail;
    }
    *base_out = base_path;
    *run_dir = run_path;
    return 0;
fail:
    if (*base_created)
        rmdir(base_path);
    *base_created = false;
    free(base_path);
    free(run_path);
    return err;
}

int ddp_logs_make_attempt_dir(const char *run_dir, int attempt, int nworkers, char **attempt_dir)
{
    char *dir;
    if (asprintf(&dir, "%s/attempt_%d", run_dir, attempt) < 0)
        return -ENOMEM;
    int err = 0;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        err = -errno;
    for (int i = 0; i < nworkers && err == 0; i++) {
        char *sub;
        if (asprintf(&sub, "%s/%d", dir, i) < 0) {
            err = -ENOMEM;
            break;
        }
        if (mkdir(sub, 0777) != 0 && errno != EEXIST)
            err = -errno;
        free(sub);
    }
    if (err) {
        free(dir);
        return err;
    }
    *attempt_dir = dir;
    return 0;
}

/* Removes empty directories under `path` (and `path`), with `rings` the rings in them
 * first; true when it is gone. */
static bool prune(const char *path, int depth, bool rings)
{
    DIR *dir = depth < 16 ? opendir(path) : NULL;
    bool empty = dir != NULL;
    struct dirent *entry;
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        char *child;
        if (asprintf(&child, "%s/%s", path, entry->d_name) < 0) {
            empty = false;
            continue;
        }
        if (entry->d_type == DT_DIR)
            empty = prune(child, depth + 1, rings) && empty;
        else
            empty =
                rings && entry->d_type == DT_REG &&
                (ddp_hang_is_ring(entry->d_name) || strcmp(entry->d_name, DDP_PROGRESS_FILE) == 0 ||
                 strcmp(entry->d_name, "hang_timeouts.json") == 0) &&
                unlink(child) == 0 && empty;
        free(child);
    }
    if (dir != NULL)
        closedir(dir);
    return empty && rmdir(path) == 0;
}

void ddp_logs_remove_if_empty(const char *path, bool rings)
{
    (void)prune(path, 0, rings);
}

void ddp_lines_init(ddp_lines_t *lines, const char *prefix, size_t max_line)
{
    memset(lines, 0, sizeof *lines);
    lines->prefix = prefix;
    lines->prefix_len = strlen(prefix);
    lines->max_line = max_line;
}

void ddp_lines_free(ddp_lines_t *lines)
{
    ddp_buf_free(&lines->partial);
}

enum { BATCH = 192 };

typedef struct {
    struct iovec iov[BATCH];
    int n;
    size_t bytes;
} batch_t;

static void batch_flush(batch_t *b, ddp_console_t *console)
{
    if (b->n > 0 && !console->broken && ddp_writev_all(console->fd, b->iov, b->n) != 0)
        console->broken = true;
    b->n = 0;
    b->bytes = 0;
}

static void batch_add(batch_t *b, const void *data, size_t len)
{
    if (len == 0)
        return;
    b->iov[b->n].iov_base = (void *)data;
    b->iov[b->n].iov_len = len;
    b->n++;
    b->bytes += len;
}

/* Before a line of `len` bytes: one write of at most PIPE_BUF bytes is atomic on a pipe, so
 * the launcher's own messages (written by another thread) never land inside a line. */
static void batch_room(batch_t *b, ddp_console_t *console, size_t len)
{
    if (b->bytes > 0 && b->bytes + len > PIPE_BUF)
        batch_flush(b, console);
}

/* The end (one past the terminator) of the first complete line in [p, end): a line
 * ends with "\n", "\r\n", or a "\r" that another byte follows (a progress bar
 * redrawing itself). A "\r" that is the last byte may be the start of "\r\n": wait. */
static const char *line_end(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *limit = nl ? nl : end;
    const char *cr = memchr(p, '\r', (size_t)(limit - p));
    if (cr == NULL)
        return nl ? nl + 1 : NULL;
    if (cr + 1 == end)
        return NULL;
    return cr[1] == '\n' ? cr + 2 : cr + 1;
}

/* Whether the line text[0, len) holds any of the filters ("" holds in every line). */
static bool matches(char *const *filters, const char *text, size_t len)
{
    for (; *filters != NULL; filters++)
        if (**filters == '\0' || memmem(text, len, *filters, strlen(*filters)) != NULL)
            return true;
    return false;
}

/* The line (a, then b) to the duplicate file, prefixed, where a filter matches it. */
static void duplicate(ddp_lines_t *lines, const char *a, size_t alen, const char *b, size_t blen,
                      bool newline)
{
    ddp_buf_t joined = DDP_BUF_INIT;
    const char *text = alen > 0 ? a : b;
    size_t len = alen > 0 ? alen : blen;
    if (alen > 0 && blen > 0) {
        if (ddp_buf_append(&joined, a, alen) != 0 || ddp_buf_append(&joined, b, blen) != 0) {
            ddp_buf_free(&joined);
            return;
        }
        text = joined.data;
        len = joined.len;
    }
    if (matches(lines->filters, text, len)) {
        batch_t out = {.n = 0, .bytes = 0};
        batch_add(&out, lines->prefix, lines->prefix_len);
        batch_add(&out, text, len);
        if (newline)
            batch_add(&out, "\n", 1);
        batch_flush(&out, lines->dup);
    }
    ddp_buf_free(&joined);
}

/* The console's open line, less one that a launcher message has ended meanwhile. */
static const ddp_lines_t **open_line(ddp_console_t *console)
{
    ddp_console_t *file = console->same_file != NULL ? console->same_file : console;
    if (file->open_line != NULL && file->log_line != NULL && !atomic_load(file->log_line))
        file->open_line = NULL;
    return &file->open_line;
}

static void set_open_line(ddp_console_t *console, const ddp_lines_t *lines)
{
    ddp_console_t *file = console->same_file != NULL ? console->same_file : console;
    if (file->open_line == lines)
        return; /* most lines: none was open, none is */
    file->open_line = lines;
    if (file->log_line != NULL)
        atomic_store(file->log_line, lines != NULL);
}

/* Before a stream's bytes reach the console: the end of another stream's open line, and
 * the prefix, unless the console shows this stream's own open line (they continue it). The
 * other's line ends with a newline, or with a "\r" where both redraw a progress bar (`bar`:
 * these bytes do): bars of several ranks share one line, as on their own console. */
static void line_start(ddp_lines_t *lines, batch_t *batch, ddp_console_t *console, bool bar)
{
    const ddp_lines_t *open = *open_line(console);
    if (open == lines)
        return;
    if (open != NULL)
        batch_add(batch, bar && open->redrawing ? "\r" : "\n", 1);
    batch_add(batch, lines->prefix, lines->prefix_len);
}

/* One line into the console's batch: the prefix, its bytes (a, then b; of a, those not
 * shown yet where the console still shows them, all where another stream's bytes came
 * between), and a newline where it had none; and to the duplicate file, where one is kept.
 * The console is at a line's start after it. */
static void line_out(ddp_lines_t *lines, batch_t *batch, ddp_console_t *console, const char *a,
                     size_t alen, const char *b, size_t blen, bool newline)
{
    bool continuing = a == lines->partial.data && *open_line(console) == lines;
    size_t shown = continuing ? lines->shown : 0;
    const char *last = blen > 0 ? b + blen - 1 : alen > 0 ? a + alen - 1 : NULL;
    bool bar = !newline && last != NULL && *last == '\r';
    line_start(lines, batch, console, bar);
    lines->redrawing = bar;
    batch_add(batch, a + shown, alen - shown);
    batch_add(batch, b, blen);
    if (newline)
        batch_add(batch, "\n", 1);
    set_open_line(console, NULL);
    lines->shown = 0;
    if (lines->dup != NULL && !lines->dup->broken)
        duplicate(lines, a, alen, b, blen, newline);
}

size_t ddp_lines_unshown(const ddp_lines_t *lines)
{
    size_t len = lines->partial.len;
    if (len > 0 && lines->partial.data[len - 1] == '\r')
        len--; /* perhaps the start of "\r\n" */
    return len > lines->shown ? len - lines->shown : 0;
}

int ddp_lines_show(ddp_lines_t *lines, ddp_console_t *console)
{
    size_t more = ddp_lines_unshown(lines);
    if (more == 0)
        return 0;
    /* Another stream's bytes came after those shown: the line is shown again, whole. */
    size_t from = *open_line(console) == lines ? lines->shown : 0;
    batch_t b;
    b.n = 0;
    b.bytes = 0;
    line_start(lines, &b, console, lines->redrawing);
    batch_add(&b, lines->partial.data + from, lines->shown + more - from);
    /* Open before it is written: a launcher message from now on ends it first (at worst
     * after a blank line), rather than landing inside it. */
    set_open_line(console, lines);
    batch_flush(&b, console);
    lines->shown += more;
    return 0;
}

int ddp_lines_feed(ddp_lines_t *lines, ddp_console_t *console, const char *data, size_t len)
{
    batch_t b;
    const char *p = data, *end = data + len;
    b.n = 0;
    b.bytes = 0;
    if (lines->partial.len > 0 && lines->partial.data[lines->partial.len - 1] == '\r' && len > 0) {
        /* A held "\r": with a "\n" after it the two end one line, else it ended its own. */
        bool crlf = data[0] == '\n';
        if (crlf && ddp_buf_append(&lines->partial, "\n", 1) != 0)
            return -ENOMEM;
        p += crlf;
        line_out(lines, &b, console, lines->partial.data, lines->partial.len, NULL, 0, false);
        batch_flush(&b, console);
        ddp_buf_clear(&lines->partial);
    }
    while (p < end) {
        const char *eol = line_end(p, end);
        if (eol == NULL) {
            size_t rest = (size_t)(end - p);
            int err = ddp_buf_append(&lines->partial, p, rest);
            if (err)
                return err;
            if (lines->partial.len >= lines->max_line) {
                /* A line with no end in sight: show it in pieces rather than hold it. */
                line_out(lines, &b, console, lines->partial.data, lines->partial.len, NULL, 0,
                         true);
                batch_flush(&b, console);
                ddp_buf_clear(&lines->partial);
            }
            break;
        }
        batch_room(&b, console, lines->prefix_len + lines->partial.len + (size_t)(eol - p));
        line_out(lines, &b, console, lines->partial.data, lines->partial.len, p, (size_t)(eol - p),
                 false);
        if (lines->partial.len > 0) {
            batch_flush(&b, console); /* before the partial buffer is reused */
            ddp_buf_clear(&lines->partial);
        }
        p = eol;
        if (b.n > BATCH - 4)
            batch_flush(&b, console);
    }
    batch_flush(&b, console);
    return 0;
}

int ddp_lines_finish(ddp_lines_t *lines, ddp_console_t *console)
{
    if (lines->partial.len == 0)
        return 0;
    batch_t b;
    b.n = 0;
    b.bytes = 0;
    line_out(lines, &b, console, lines->partial.data, lines->partial.len, NULL, 0, true);
    batch_flush(&b, console);
    ddp_buf_clear(&lines->partial);
    return 0;
}
