"""ddp-launch's zygote: with --warm-restarts, one per node imports the --preload modules
(torch) once and forks each restarted worker from itself, so no restart imports them again.

The launcher starts it as `python -u _zygote.py FD MODULES PAD` with its node's worker
environment less each worker's own variables (ranks, attempt, files); FD is a
SOCK_SEQPACKET socket to the launcher, whose messages are NUL-separated fields
(launcher/spawn/zygote.h). It must never initialise CUDA, which a forked child could not use:
a module that does is refused, saying why. A request forks an intermediate process that
forks the worker and exits at once, so the worker is adopted by the launcher (a child
subreaper), which waits for it as for a worker it started itself. The worker then makes
itself what a cold one is (its session, the orphan guard's record, the parent-death
signal, its streams, limits, binding, directory, environment and argv) and runs the
script or module as __main__; its exit is the interpreter's own.
"""
import os
import sys

_ZYGOTE_FILE = os.path.abspath(__file__)
del sys.path[0]  # this file's folder; a worker gets its script's

import builtins  # noqa: E402 (after the path fix: nothing of this folder is imported)
import ctypes  # noqa: E402
import importlib  # noqa: E402
import importlib.machinery  # noqa: E402
import mmap  # noqa: E402
import resource  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

PR_SET_PDEATHSIG = 1
PR_SET_MM = 35
PR_SET_MM_MAP = 14
MPOL_PREFERRED = 1
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261}
ADOPTION_TIMEOUT_S = 5.0


def _send(sock, *fields):
    sock.send(b"\0".join(f if isinstance(f, bytes) else str(f).encode() for f in fields))


def _cuda_initialised():
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return cuda is not None and cuda.is_initialized()


def _preload(modules):
    """Imports each module: None, or why the zygote cannot serve."""
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as e:  # a module's SystemExit too: the zygote says why
            return f"unable to import {name}: {type(e).__name__}: {e}"
        if _cuda_initialised():
            return (f"importing {name} initialised CUDA, which a forked worker could not "
                    f"use; restarts start cold")
    return None


class _Inherited:
    """What the interpreter had from the launcher before any preloaded module ran, which a
    module may change at import for the whole process and a worker must have as a cold one
    has it: the standard descriptors (a module that closes stdout leaves that number to the
    next descriptor opened, a worker's stream received from the launcher, say), the signal
    dispositions (Python's), the signal mask (empty), the umask and the CPU affinity."""

    def __init__(self):
        self.fds = {}
        for fd in (0, 1, 2):
            try:
                self.fds[fd] = os.dup(fd)
            except OSError:
                pass  # not open: nothing to put back
        self.signals = {}
        for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
            handler = signal.getsignal(sig)
            if handler is not None:  # (None: a handler not Python's, which it has none of)
                self.signals[sig] = handler
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.affinity = os.sched_getaffinity(0)

    def restore_descriptors(self):
        """In the zygote once the modules are imported: its standard descriptors back."""
        for fd, saved in self.fds.items():
            os.dup2(saved, fd)
            os.close(saved)

    def restore(self):
        """In a worker: the dispositions, umask and affinity the interpreter had, and the
        empty mask."""
        for sig, handler in self.signals.items():
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass  # as it was set: the interpreter's own would not change
        os.umask(self.umask)
        try:
            os.sched_setaffinity(0, self.affinity)
        except OSError:
            pass  # CPUs gone since (a cpuset changed): the kernel's choice stands
        signal.pthread_sigmask(signal.SIG_SETMASK, [])


class _Request:
    """One worker to start, as the launcher sent it."""

    def __init__(self, fields, fds):
        it = iter(fields)
        if next(it) != b"spawn":
            raise ValueError("not a spawn request")
        self.local_rank = int(next(it))
        self.cwd = next(it)
        self.nofile = int(next(it))
        self.cpus = [int(c) for c in next(it).split(b",") if c]
        self.mem_node = int(next(it))
        self.bind_fallback = next(it) == b"1"
        self.bind_text = next(it).decode(errors="replace")
        self.python_stacks = next(it) == b"1"
        has_guard = next(it) == b"1"
        argc = int(next(it))
        self.argv = [next(it) for _ in range(argc)]
        self.env = list(it)
        if len(fds) != 2 + has_guard:
            raise ValueError(f"{len(fds)} descriptors")
        self.out_fd, self.err_fd = fds[0], fds[1]
        self.guard_fd = fds[2] if has_guard else -1
        args = self.argv[1:]
        if args[:1] != [b"-u"] or len(args) < 2 or (args[1] == b"-m" and len(args) < 3):
            raise ValueError("not a 'python -u script|-m module' command")
        self.module = args[1] == b"-m"
        self.target = os.fsdecode(args[2] if self.module else args[1])

    def close(self):
        for fd in (self.out_fd, self.err_fd, self.guard_fd):
            if fd >= 0:
                os.close(fd)


def _bind(req, libc):
    """--numa-binding's CPUs and memory node, as the launcher's spawn does; a refusal is a
    message and exit 126 unless the binding may fall back."""
    what = "CPUs"
    try:
        if req.cpus:
            os.sched_setaffinity(0, req.cpus)
        if req.mem_node >= 0:
            what = "its memory node"
            nr = SYS_SET_MEMPOLICY.get(os.uname().machine)
            if nr is None:
                raise OSError(38, "set_mempolicy's number is not known on this machine")
            words = req.mem_node // 64 + 2
            mask = (ctypes.c_ulong * words)()
            mask[req.mem_node // 64] = 1 << (req.mem_node % 64)
            if libc.syscall(nr, MPOL_PREFERRED, mask, ctypes.c_ulong(64 * words)) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
    except OSError as e:
        tail = "; it runs without (--numa-binding-fallback)" if req.bind_fallback else ""
        os.write(2, (f"ddp-launch: unable to bind worker local rank {req.local_rank} to "
                     f"{what} ({req.bind_text}): {e.strerror}{tail}\n").encode())
        if not req.bind_fallback:
            os._exit(126)


class _MmMap(ctypes.Structure):
    """struct prctl_mm_map (linux/prctl.h): a process's memory layout, for PR_SET_MM_MAP."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "start_code", "end_code", "start_data", "end_data", "start_brk", "brk", "start_stack",
        "arg_start", "arg_end", "env_start", "env_end", "auxv")] + [
        ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


def _show_in_proc(req, libc):
    """What /proc/PID/cmdline and /proc/PID/environ show of the worker (ps, pgrep, tools
    that read a process's environment): its own argv and environment, as the kernel shows
    the ones a cold worker was executed with. Both are laid out in a memory area of the
    worker's that the kernel is told is its argument and environment area (PR_SET_MM_MAP,
    which needs no privilege where the kernel has it: CONFIG_CHECKPOINT_RESTORE, as
    distributions build it). Where it is refused, the command line is written over the
    zygote's, which the launcher padded to make room, as setproctitle does (one string, the
    arguments joined by spaces), and the environment /proc shows stays the zygote's."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        field = lambda number: int(fields[number - 3])  # noqa: E731 (proc(5)'s numbers)
        field(51)
    except (OSError, IndexError, ValueError):
        return
    args = b"".join(arg + b"\0" for arg in req.argv)
    env = b"".join(entry + b"\0" for entry in req.env)
    if not _move_areas(libc, field, args, env):
        _write_over_command_line(field(48), field(49), b" ".join(req.argv))


def _move_areas(libc, field, args, env):
    """args and env in a new memory area, made the process's argument and environment
    areas: whether the kernel took it."""
    size = len(args) + len(env)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.sbrk.restype = ctypes.c_void_p
    base = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base is None or base == ctypes.c_void_p(-1).value:
        return False
    ctypes.memmove(base, args + env, size)
    layout = _MmMap(start_code=field(26), end_code=field(27), start_data=field(45),
                    end_data=field(46), start_brk=field(47), brk=libc.sbrk(0),
                    start_stack=field(28), arg_start=base, arg_end=base + len(args),
                    env_start=base + len(args), env_end=base + size, exe_fd=0xFFFFFFFF)
    if libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(layout), ctypes.sizeof(layout), 0) == 0:
        return True
    libc.munmap(ctypes.c_void_p(base), ctypes.c_size_t(size))
    return False


def _write_over_command_line(start, end, text):
    """text over the argument area [start, end), NUL-ended and the rest spaces: its last
    byte not NUL, the kernel shows it as one string up to that NUL (setproctitle's way; a
    NUL-filled rest would show as that many empty arguments)."""
    if end - start < 2:
        return
    text = text[:end - start - 2] + b"\0"
    ctypes.memmove(start, text.ljust(end - start, b" "), end - start)


def _become_worker(req, launcher, libc, inherited):
    """In the forked worker: everything a cold worker gets before its program runs."""
    intermediate = os.getppid()
    os.setsid()
    inherited.restore()
    if req.guard_fd >= 0:
        try:
            os.write(req.guard_fd, struct.pack("=i", os.getpid()))
        except OSError:
            pass  # a guard that is gone does not stop the start
    deadline = time.monotonic() + ADOPTION_TIMEOUT_S
    while True:
        # One look a turn: the intermediate may exit between two, and a second look at
        # the launcher as parent was taken for a stranger (exit 137 at random).
        parent = os.getppid()
        if parent == launcher:
            break
        if parent != intermediate or time.monotonic() > deadline:
            os._exit(128 + signal.SIGKILL)  # the launcher is gone
        time.sleep(0.0001)
    # Set only now: the intermediate's exit would have sent it.
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != launcher:
        os._exit(128 + signal.SIGKILL)
    os.dup2(req.out_fd, 1)
    os.dup2(req.err_fd, 2)
    req.close()
    if req.nofile > 0:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (req.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    if req.cpus or req.mem_node >= 0:
        _bind(req, libc)
    os.chdir(req.cwd)
    os.environ.clear()
    for entry in req.env:
        name, _, value = entry.partition(b"=")
        if name:
            os.environb[name] = value
    _show_in_proc(req, libc)
    if hasattr(sys, "orig_argv"):  # 3.10 on
        sys.orig_argv[:] = [os.fsdecode(a) for a in req.argv]
    sys.argv[:] = [req.target] + [os.fsdecode(a) for a in req.argv[4 if req.module else 3:]]
    _reseed()
    if req.python_stacks:
        _arm_python_stacks()


def _reseed():
    """Each worker's own random state, as a new interpreter's: what a preloaded module seeded
    at import from the OS's entropy is seeded again from it, and a seed it set is not kept.
    Python's random reseeds itself at fork, and numpy's default_rng() draws fresh entropy at
    each call; numpy's global generator and torch's default one do neither. CUDA's
    generators are made, and seeded, at a process's first CUDA call (never in the zygote):
    a seed queued for them at import is dropped."""
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()
    torch = sys.modules.get("torch")
    generator = getattr(torch, "default_generator", None)
    if generator is not None:
        generator.seed()
    cuda = sys.modules.get("torch.cuda")
    tracker = getattr(cuda, "_lazy_seed_tracker", None)
    if tracker is not None and not cuda.is_initialized():
        cuda._lazy_seed_tracker = type(tracker)()


def _arm_python_stacks():
    """--hang-dump: what its sitecustomize (launcher/diagnose/stacks.c) arms in a cold worker."""
    sig = os.environ.get("DDP_DUMP_SIGNAL", "")
    err = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if not sig.isdigit() or not err:
        return
    try:
        import faulthandler
        out = open(os.path.join(os.path.dirname(err), "python_stack.txt"), "a")
        faulthandler.register(int(sig), file=out, all_threads=True)
    except (OSError, ValueError, RuntimeError, AttributeError):
        pass


def _fork_worker(sock, req, launcher, libc, inherited):
    """Forks the intermediate, which forks the worker: returns in the worker, with the
    reply sent by the zygote; None in the zygote."""
    rfd, wfd = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        os.close(rfd)
        try:
            worker = os.fork()
        except OSError as e:
            os.write(wfd, f"E{e.strerror}".encode())
            os._exit(1)
        if worker == 0:
            os.close(wfd)
            _become_worker(req, launcher, libc, inherited)
            return True
        os.write(wfd, str(worker).encode())
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as pipe:
        said = pipe.read()
    os.waitpid(intermediate, 0)
    req.close()
    if said[:1].isdigit():
        _send(sock, b"spawned", said)
    else:
        _send(sock, b"failed", b"unable to fork: " + said[1:])
    return None


def _serve(fd, modules):
    """The zygote's life: preload, then a worker per request until the launcher goes.
    Returns the request only in a forked worker."""
    sock = socket.socket(fileno=fd)
    launcher = os.getppid()
    inherited = _Inherited()
    why = _preload(modules)
    inherited.restore_descriptors()
    if why is not None:
        _send(sock, b"refused", why)
        sys.exit(0)
    libc = ctypes.CDLL(None, use_errno=True)
    threads = len(os.listdir("/proc/self/task"))
    _send(sock, b"ready", threads)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
        except InterruptedError:
            continue
        if not msg:
            sys.exit(0)  # the launcher closed its end
        try:
            req = _Request(msg.split(b"\0"), fds)
        except (ValueError, StopIteration) as e:
            for fd in fds:
                os.close(fd)
            _send(sock, b"failed", f"a request it cannot read: {e}")
            continue
        if _fork_worker(sock, req, launcher, libc, inherited):
            sock.close()
            return req


def _run(req):
    """The worker's program as __main__ in a new module, as `python -u script` or
    `python -u -m module` runs it (argv, sys.path[0], __file__)."""
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    if req.module:
        sys.path.insert(0, os.getcwd())
        runpy._run_module_as_main(req.target)
        return
    path = os.path.abspath(req.target)
    sys.path.insert(0, os.path.dirname(os.path.realpath(req.target)))
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        print(f"{sys.executable}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}",
              file=sys.stderr)
        sys.exit(2)
    main.__file__ = path if sys.version_info >= (3, 9) else req.target
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    exec(compile(source, main.__file__, "exec"), main.__dict__)


def _main():
    if len(sys.argv) not in (3, 4) or not sys.argv[1].isdigit():
        print("usage: _zygote.py FD MODULE[,MODULE] [PAD] (ddp-launch --warm-restarts runs it;"
              " PAD: room for the workers' command lines)", file=sys.stderr)
        sys.exit(2)
    return _serve(int(sys.argv[1]), [m for m in sys.argv[2].split(",") if m])


if __name__ == "__main__":
    _request = _main()
    _failure = None
    try:
        _run(_request)
    except SystemExit:
        raise
    except BaseException as e:  # shown as a cold interpreter shows it: without our frames
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == _ZYGOTE_FILE:
            tb = tb.tb_next
        _failure = e.with_traceback(tb)
    if _failure is not None:
        sys.excepthook(type(_failure), _failure, _failure.__traceback__)
        if isinstance(_failure, KeyboardInterrupt):
            import atexit
            atexit._run_exitfuncs()
            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)
