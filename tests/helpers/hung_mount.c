/* ddp-test-hung-mount: runs a command beside a file system that never answers (a FUSE
 * mount whose requests nobody reads: a stand-in for a dead NFS server), for the tests of
 * what a hung path does to the launcher.
 *
 *   ddp-test-hung-mount DIR COMMAND [ARG...]
 *
 * In a mount namespace of its own (private: nothing propagates out), it mounts the file
 * system on DIR and runs COMMAND there with HUNG_MOUNT=DIR in its environment. Anything
 * that looks under DIR then waits, deaf to every signal but SIGKILL, until the file system
 * is aborted. SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to COMMAND; once it ends,
 * the helper closes /dev/fuse (which aborts the file system), detaches the mount and exits
 * with COMMAND's status (128+N for a signal N). Whatever happens to the test, the mount
 * goes with the namespace's last process: killed, the helper's /dev/fuse is closed too.
 * Exits 77 (a test's skip) where it cannot mount: no /dev/fuse, no privilege. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define SKIP 77

/* The namespace and the mount; the /dev/fuse descriptor (close-on-exec), or -1. */
static int mount_hung(const char *dir)
{
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        fprintf(stderr, "hung-mount: unable to make a mount namespace: %s\n", strerror(errno));
        return -1;
    }
    int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "hung-mount: unable to open /dev/fuse: %s\n", strerror(errno));
        return -1;
    }
    char options[128];
    snprintf(options, sizeof options, "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
    if (mount("ddp-hung", dir, "fuse", MS_NOSUID | MS_NODEV, options) != 0) {
        fprintf(stderr, "hung-mount: unable to mount on %s: %s\n", dir, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ddp-test-hung-mount DIR COMMAND [ARG...]\n");
        return 2;
    }
    int fd = mount_hung(argv[1]);
    if (fd < 0)
        return SKIP;
    sigset_t passed, old;
    sigemptyset(&passed);
    int names[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        sigaddset(&passed, names[i]);
    sigprocmask(SIG_BLOCK, &passed, &old);
    pid_t child = fork();
    if (child == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setenv("HUNG_MOUNT", argv[1], 1);
        execvp(argv[2], argv + 2);
        fprintf(stderr, "hung-mount: unable to run %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (child > 0) {
        int sig = sigwaitinfo(&passed, NULL);
        if (sig > 0 && sig != SIGCHLD)
            kill(child, sig);
        if (waitpid(child, &status, WNOHANG) == child)
            break;
    }
    close(fd); /* the last descriptor of the connection: it is aborted */
    umount2(argv[1], MNT_DETACH);
    if (child < 0)
        return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
