/* --hang-dump's stack tools and Python arming (see stacks.h). */
#include "diagnose/stacks.h"

#include "env.h"
#include "io.h"
#include "host/proc.h"
#include "diagnose/unwind.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uv_process_t process;
    ddp_stacks_t *owner;
    bool started;
} tool_t;

struct ddp_stacks_s {
    uv_timer_t timer;
    void (*done)(void *ctx);
    void *ctx;
    int n, running;
    bool ended;  /* done has run */
    int closing; /* handles still closing */
    tool_t *tools;
};

static void on_closed(uv_handle_t *handle)
{
    ddp_stacks_t *s = handle->data;
    if (--s->closing == 0) {
        free(s->tools);
        free(s);
    }
}

/* Every tool ended (or was killed): `done`, then the handles close. */
static void end_when_all_exited(ddp_stacks_t *s)
{
    if (s->ended || s->running > 0)
        return;
    s->ended = true;
    uv_timer_stop(&s->timer);
    s->done(s->ctx);
    s->closing = 1;
    uv_close((uv_handle_t *)&s->timer, on_closed);
    for (int i = 0; i < s->n; i++) {
        if (!s->tools[i].started)
            continue;
        s->closing++;
        s->tools[i].process.data = s; /* on_closed's, as the timer's */
        uv_close((uv_handle_t *)&s->tools[i].process, on_closed);
    }
}

static void on_exit_cb(uv_process_t *process, int64_t status, int sig)
{
    (void)status;
    (void)sig;
    tool_t *t = process->data;
    t->owner->running--;
    end_when_all_exited(t->owner);
}

static void on_timeout(uv_timer_t *timer)
{
    ddp_stacks_t *s = timer->data;
    for (int i = 0; i < s->n; i++)
        if (s->tools[i].started)
            (void)uv_process_kill(&s->tools[i].process, SIGKILL); /* exits come after */
    if (s->running == 0)
        end_when_all_exited(s);
}

int ddp_stacks_start(uv_loop_t *loop, const pid_t *pids, char *const *paths, int n, double timeout,
                     void (*done)(void *ctx), void *ctx, const char **tool)
{
    ddp_stacks_t *s = calloc(1, sizeof *s);
    char *found = NULL;
    if (s == NULL || (s->tools = calloc((size_t)(n > 0 ? n : 1), sizeof *s->tools)) == NULL) {
        free(s);
        return -ENOMEM;
    }
    s->done = done;
    s->ctx = ctx;
    s->n = n;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    *tool = NULL;
    /* libunwind in a helper (this binary as DDP_UNWIND_NAME), else a tool on PATH. */
    char self[PATH_MAX], why[512];
    if (ddp_proc_self(self, sizeof self) == 0 && ddp_unwind_available(why, sizeof why) &&
        (found = strdup(self)))
        *tool = "libunwind";
    else if (ddp_proc_find("eu-stack", ddp_env_get(DDP_ENV_PATH), &found) == 0)
        *tool = "eu-stack";
    else if (ddp_proc_find("gdb", ddp_env_get(DDP_ENV_PATH), &found) == 0)
        *tool = "gdb";
    for (int i = 0; *tool != NULL && i < n; i++) {
        char pid[24];
        snprintf(pid, sizeof pid, "%d", (int)pids[i]);
        char *helper[] = {(char *)DDP_UNWIND_NAME, pid, NULL};
        char *eu[] = {found, "-p", pid, NULL};
        char *gdb[] = {found, "-batch", "-nx", "-p", pid, "-ex", "thread apply all bt", NULL};
        int fd = ddp_create_worker_file(paths[i]);
        if (fd < 0)
            continue;
        uv_stdio_container_t stdio[3] = {
            {.flags = UV_IGNORE},
            {.flags = UV_INHERIT_FD, .data.fd = fd},
            {.flags = UV_INHERIT_FD, .data.fd = fd},
        };
        uv_process_options_t options = {
            .exit_cb = on_exit_cb,
            .file = found,
            .args = strcmp(*tool, "gdb") == 0        ? gdb
                    : strcmp(*tool, "eu-stack") == 0 ? eu
                                                     : helper,
            .stdio_count = 3,
            .stdio = stdio,
        };
        s->tools[i].owner = s;
        s->tools[i].process.data = &s->tools[i];
        if (uv_spawn(loop, &s->tools[i].process, &options) == 0) {
            s->tools[i].started = true;
            s->running++;
        } else {
            static const char failed[] = "ddp-launch: unable to start the stack tool\n";
            (void)ddp_write_all(fd, failed, sizeof failed - 1);
            s->tools[i].started = true; /* a failed uv_spawn still needs uv_close */
        }
        close(fd);
    }
    free(found);
    uv_timer_start(&s->timer, on_timeout, s->running > 0 ? (uint64_t)(timeout * 1000) : 0, 0);
    return 0;
}

/* Arms faulthandler on DDP_DUMP_SIGNAL, writing to python_stack.txt beside the worker's
 * error file, then imports the sitecustomize this one shadows (Debian's, a venv's). A worker
 * forked by --warm-restarts, whose interpreter ran this before it had a rank, is armed the
 * same way by worker/python/ddp_launch/_zygote.py (_arm_python_stacks). */
static const char sitecustomize[] =
    "# Written by ddp-launch --hang-dump: on the launcher's dump signal (DDP_DUMP_SIGNAL)\n"
    "# Python's faulthandler writes every thread's stack to python_stack.txt beside the\n"
    "# worker's error file. Then the sitecustomize this one shadows, if any, is loaded.\n"
    "import os\n"
    "import sys\n"
    "\n"
    "\n"
    "def _ddp_launch_arm():\n"
    "    sig = os.environ.get('DDP_DUMP_SIGNAL', '')\n"
    "    err = os.environ.get('TORCHELASTIC_ERROR_FILE', '')\n"
    "    if not sig.isdigit() or not err:\n"
    "        return\n"
    "    try:\n"
    "        import faulthandler\n"
    "        out = open(os.path.join(os.path.dirname(err), 'python_stack.txt'), 'a')\n"
    "        faulthandler.register(int(sig), file=out, all_threads=True)\n"
    "    except (OSError, ValueError, RuntimeError, AttributeError):\n"
    "        pass\n"
    "\n"
    "\n"
    "_ddp_launch_arm()\n"
    "_here = os.path.dirname(os.path.abspath(__file__))\n"
    "_path = [p for p in sys.path if os.path.abspath(p or '.') != _here]\n"
    "del sys.modules['sitecustomize']\n"
    "sys.path[:] = _path\n"
    "try:\n"
    "    import sitecustomize  # noqa: F401 (the next one)\n"
    "except ImportError:\n"
    "    pass\n";

int ddp_stacks_write_sitecustomize(const char *dir)
{
    char path[4096];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -errno;
    if (snprintf(path, sizeof path, "%s/sitecustomize.py", dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int err = ddp_write_all(fd, sitecustomize, sizeof sitecustomize - 1);
    if (close(fd) != 0 && err == 0)
        err = -errno;
    return err;
}
