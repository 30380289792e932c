/* A mount that never answers, a stand-in for a dead NFS server: `hung_mount DIR` mounts a
 * FUSE file system on DIR from /dev/fuse (no FUSE library) and never reads a request, so
 * every access under DIR waits in the kernel (killably) for an answer that does not come.
 * It prints "mounted" once the mount is there.
 *
 * It ends on SIGTERM, SIGINT or SIGHUP, which it also gets when its parent dies
 * (PR_SET_PDEATHSIG): it aborts the connection (closing /dev/fuse makes the waiting
 * accesses fail) and detaches the mount (umount2 MNT_DETACH). Its source is named
 * "ddp-hung-<pid>", so that what a killed run left is found and removed (the tests' own
 * cleanup). Exit 0; 77 where no FUSE mount can be made (no /dev/fuse, no privilege). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hung_mount DIR\n");
        return 2;
    }
    sigset_t ends;
    sigemptyset(&ends);
    sigaddset(&ends, SIGTERM);
    sigaddset(&ends, SIGINT);
    sigaddset(&ends, SIGHUP);
    sigprocmask(SIG_BLOCK, &ends, NULL);
    int sig_fd = signalfd(-1, &ends, SFD_CLOEXEC);
    if (sig_fd < 0 || prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() == 1)
        return 1;
    int fuse = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fuse < 0) {
        printf("no FUSE mount here: /dev/fuse: %s\n", strerror(errno));
        return 77;
    }
    char source[64], options[128];
    snprintf(source, sizeof source, "ddp-hung-%d", (int)getpid());
    snprintf(options, sizeof options, "fd=%d,rootmode=40000,user_id=0,group_id=0", fuse);
    if (mount(source, argv[1], "fuse", MS_NOSUID | MS_NODEV, options) != 0) {
        printf("no FUSE mount here: mount %s: %s\n", argv[1], strerror(errno));
        return 77;
    }
    printf("mounted\n");
    fflush(stdout);
    struct signalfd_siginfo info;
    while (read(sig_fd, &info, sizeof info) < 0 && errno == EINTR)
        ;
    close(fuse); /* the connection is aborted: what waits in it fails with ENOTCONN */
    if (umount2(argv[1], MNT_DETACH) != 0) {
        fprintf(stderr, "hung_mount: unable to unmount %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    return 0;
}
