/* Native stacks through libunwind's ptrace interface (see unwind.h). */
#include "diagnose/unwind.h"

#include "ddp_config.h"

#include <stdio.h>
#include <string.h>

#if DDP_HAVE_LIBUNWIND

#include "dl.h"

#include <dirent.h>
#include <errno.h>
#include <libunwind-ptrace.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#define STR2(x) #x
#define STR(x)  STR2(x)
/* A remote unwinding function's exported name: "_Ux86_64_step" for step. */
#define REMOTE(fn) STR(UNW_OBJ(fn))
#define TARGET_LIB "libunwind-" STR(UNW_TARGET) ".so.8"
#define PTRACE_LIB "libunwind-ptrace.so.0"

#define MAX_THREADS 4096
#define MAX_FRAMES  128

typedef struct {
    void *(*upt_create)(pid_t);
    void (*upt_destroy)(void *);
    unw_accessors_t *accessors;
    unw_addr_space_t (*create_addr_space)(unw_accessors_t *, int);
    void (*destroy_addr_space)(unw_addr_space_t);
    int (*init_remote)(unw_cursor_t *, unw_addr_space_t, void *);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
    int (*get_proc_name)(unw_cursor_t *, char *, size_t, unw_word_t *);
} unwind_api_t;

#define SYMBOL(lib, name, field) ddp_dl_symbol(lib, name, &(field), sizeof(field))

/* Loads libunwind (the target's library first, globally: the ptrace one calls into it). */
static bool load(unwind_api_t *api, char *why, size_t cap)
{
    void *target = dlopen(TARGET_LIB, RTLD_NOW | RTLD_GLOBAL);
    void *ptrace_lib = target != NULL ? dlopen(PTRACE_LIB, RTLD_NOW) : NULL;
    if (ptrace_lib == NULL) {
        snprintf(why, cap, "unable to load libunwind (%s, %s; Debian's libunwind8): %s", TARGET_LIB,
                 PTRACE_LIB, dlerror());
        return false;
    }
    api->accessors = dlsym(ptrace_lib, "_UPT_accessors");
    if (SYMBOL(ptrace_lib, "_UPT_create", api->upt_create) &&
        SYMBOL(ptrace_lib, "_UPT_destroy", api->upt_destroy) && api->accessors != NULL &&
        SYMBOL(target, REMOTE(create_addr_space), api->create_addr_space) &&
        SYMBOL(target, REMOTE(destroy_addr_space), api->destroy_addr_space) &&
        SYMBOL(target, REMOTE(init_remote), api->init_remote) &&
        SYMBOL(target, REMOTE(step), api->step) && SYMBOL(target, REMOTE(get_reg), api->get_reg) &&
        SYMBOL(target, REMOTE(get_proc_name), api->get_proc_name))
        return true;
    snprintf(why, cap, "libunwind lacks a function of its remote interface (%s)", TARGET_LIB);
    return false;
}

bool ddp_unwind_available(char *why, size_t cap)
{
    unwind_api_t api;
    return load(&api, why, cap);
}

/* The threads of `pid` (up to MAX_THREADS), from /proc. */
static int threads_of(pid_t pid, pid_t *tids)
{
    char path[64];
    int n = 0;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d != NULL && n < MAX_THREADS && (e = readdir(d)) != NULL) {
        long tid = strtol(e->d_name, NULL, 10);
        if (tid > 0)
            tids[n++] = (pid_t)tid;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* Seizes and stops thread `tid`: 0 and the signal to give back at the detach (a signal
 * that arrived meanwhile), or -errno. */
static int stop_thread(pid_t tid, int *give_back)
{
    int status;
    *give_back = 0;
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0 ||
        ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) != 0)
        return -errno;
    while (waitpid(tid, &status, __WALL) < 0) {
        if (errno != EINTR)
            return -errno;
    }
    if (!WIFSTOPPED(status))
        return -ESRCH; /* it exited */
    if (status >> 16 == 0 && WSTOPSIG(status) != SIGTRAP)
        *give_back = WSTOPSIG(status); /* a signal-delivery-stop: the signal is the thread's */
    return 0;
}

static void print_frames(const unwind_api_t *api, unw_addr_space_t as, pid_t tid)
{
    void *ui = api->upt_create(tid);
    unw_cursor_t cursor;
    if (ui == NULL || api->init_remote(&cursor, as, ui) != 0) {
        printf("  (unable to unwind this thread)\n");
        if (ui != NULL)
            api->upt_destroy(ui);
        return;
    }
    for (int k = 0; k < MAX_FRAMES; k++) {
        unw_word_t ip = 0, offset = 0;
        char name[512];
        api->get_reg(&cursor, UNW_REG_IP, &ip);
        if (api->get_proc_name(&cursor, name, sizeof name, &offset) == 0)
            printf("#%-2d 0x%016lx in %s+0x%lx ()\n", k, (unsigned long)ip, name,
                   (unsigned long)offset);
        else
            printf("#%-2d 0x%016lx in ?? ()\n", k, (unsigned long)ip);
        if (api->step(&cursor) <= 0)
            break;
    }
    api->upt_destroy(ui);
}

int ddp_unwind_main(const char *pid_text)
{
    char why[512], comm_path[96], comm[64];
    unwind_api_t api;
    static pid_t tids[MAX_THREADS];
    static int errs[MAX_THREADS], give_back[MAX_THREADS];
    char *end;
    long pid = strtol(pid_text, &end, 10);
    if (end == pid_text || *end != '\0' || pid <= 0) {
        printf("ddp-stacks: '%s' is not a process id\n", pid_text);
        return 1;
    }
    if (!load(&api, why, sizeof why)) {
        printf("ddp-stacks: %s\n", why);
        return 1;
    }
    unw_addr_space_t as = api.create_addr_space(api.accessors, 0);
    int n = threads_of((pid_t)pid, tids);
    /* Every thread stopped first, so the stacks are of one moment; then each unwound;
     * then every one let go. */
    for (int i = 0; i < n; i++)
        errs[i] = stop_thread(tids[i], &give_back[i]);
    printf("process %ld: %d thread(s), unwound by libunwind\n", pid, n);
    for (int i = 0; i < n; i++) {
        snprintf(comm_path, sizeof comm_path, "/proc/%ld/task/%d/comm", pid, (int)tids[i]);
        FILE *f = fopen(comm_path, "r");
        if (f == NULL || fgets(comm, sizeof comm, f) == NULL)
            comm[0] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        if (f != NULL)
            fclose(f);
        printf("\nThread %d (LWP %d \"%s\"):\n", i + 1, (int)tids[i], comm);
        if (errs[i] != 0)
            printf("  (unable to stop it: %s)\n", strerror(-errs[i]));
        else
            print_frames(&api, as, tids[i]);
    }
    for (int i = 0; i < n; i++) {
        if (errs[i] == 0)
            ptrace(PTRACE_DETACH, tids[i], NULL, (void *)(long)give_back[i]);
    }
    api.destroy_addr_space(as);
    fflush(stdout);
    return 0;
}

#else /* without libunwind's headers at build time */

bool ddp_unwind_available(char *why, size_t cap)
{
    snprintf(why, cap, "this ddp-launch was built without libunwind (libunwind-dev)");
    return false;
}

int ddp_unwind_main(const char *pid_text)
{
    (void)pid_text;
    printf("ddp-stacks: this ddp-launch was built without libunwind (libunwind-dev)\n");
    return 1;
}

#endif
