"""ddp_launch.step() and ddp_launch.section(): a worker's progress, for ddp-launch.

They write into the ring ddp-launch names in DDP_PROGRESS_RING (the layout of
common/progress.h: little-endian int64 words), mapped once: a call is a few stores to
memory, no system call. Without DDP_PROGRESS_RING (not run by ddp-launch), or when the
ring cannot be made, they do nothing; a file there that is no ring is left as it is. A
process forked from the worker (a DataLoader's) does not write.

Once step() has attached, the blocking collectives of torch.distributed called through
the module (dist.all_reduce(...), dist.barrier(), ...) are timed: their time is the
step's wait, so that a rank the others wait for shows as the one working longer. DDP's own
all-reduces run inside backward(), out of sight, unless the model is given to watch(): a
comm hook then times them. While a rank waits in a timed collective, the ring says since
when (--hang-timeout=auto then names the rank it waits for, not it).
"""
import mmap
import os
import stat
import sys
import threading
import time

_MAGIC = 0x3130304750504444  # "DDPPG001"
_VERSION = 1
_SLOTS = 64
_SLOT0 = 16  # word of slot 0 (4 words a slot)
_SECTIONS = 16
_SECTION0 = _SLOT0 + 4 * _SLOTS  # word of section 0 (6 words a section)
_NAME = 24
_WORDS = _SECTION0 + 6 * _SECTIONS

# Header words.
_STEPS, _LAST, _WAIT, _IN, _IN_NS, _EXIT_NS, _LONGEST, _COLL_NS = 3, 4, 5, 6, 7, 8, 9, 10

_mono = time.monotonic_ns
_thread_id = threading.get_ident
_w = None  # the ring's words (memoryview of int64), once attached
_map = None
_off = False  # nothing to attach to: every call returns at once
_last_wait = 0
_names = {}
_open = []  # the sections open now (any thread's), in the order entered
_lock = threading.RLock()  # sections' bookkeeping, from any thread (a signal handler too)
_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
                "reduce_scatter", "reduce_scatter_tensor", "reduce", "barrier", "all_to_all",
                "all_to_all_single", "gather", "scatter", "all_gather_object",
                "broadcast_object_list", "gather_object", "scatter_object_list")
_wrapped = False
_ddp_lock = threading.Lock()
_ddp_wait = 0  # ns waited in watched DDP all-reduces since the last step()


def _detach():
    global _w, _map, _off
    _w, _map, _off = None, None, True


def _map_ring(path, size):
    """The ring file at `path` mapped: made here, exclusively, or one already there (a
    ring of this version and size, which an earlier process of the worker made). Any
    other file is left as it is (DDP_PROGRESS_RING may name one the user cares about):
    NotARing."""
    made = True
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        made = False
        if not stat.S_ISREG(os.lstat(path).st_mode):  # opening a device may act
            raise _NotARing() from None
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if made:
            os.ftruncate(fd, size)
        elif not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise _NotARing()
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    w = memoryview(m).cast("q")
    if made:
        w[1] = _VERSION
        w[0] = _MAGIC
    elif w[0] != _MAGIC or w[1] != _VERSION:
        w.release()
        m.close()
        raise _NotARing()
    return m, w


class _NotARing(Exception):
    pass


def _attach():
    """Maps the ring (made here, the first time) or turns every call off."""
    global _w, _map, _off
    path = os.environ.get("DDP_PROGRESS_RING")
    if not path:
        _off = True
        return None
    try:
        m, w = _map_ring(path, _WORDS * 8)
    except _NotARing:
        print(f"ddp_launch: progress not recorded: {path} exists and is not a progress ring; "
              "it is left as it is", file=sys.stderr)
        _off = True
        return None
    except (OSError, ValueError) as err:
        print(f"ddp_launch: progress not recorded: {path}: {err}", file=sys.stderr)
        _off = True
        return None
    w[2] = os.getpid()
    _map, _w = m, w
    os.register_at_fork(after_in_child=_detach)
    _wrap_torch()
    return w


def _timed(fn):
    def call(*args, **kwargs):
        if kwargs.get("async_op"):
            return fn(*args, **kwargs)
        began = _mono()
        w = _w
        outer = 0
        if w is not None:
            outer = w[_COLL_NS]
            w[_COLL_NS] = outer or began
        try:
            return fn(*args, **kwargs)
        finally:
            if w is not None:
                w[_WAIT] += _mono() - began
                w[_COLL_NS] = outer

    call.__name__ = getattr(fn, "__name__", "collective")
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.__doc__ = getattr(fn, "__doc__", None)
    call.__wrapped__ = fn
    call._ddp_launch_timed = True
    return call


def _wrap_torch():
    """Times torch.distributed's blocking collectives, once torch.distributed is imported."""
    global _wrapped
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    _wrapped = True
    for name in _COLLECTIVES:
        fn = getattr(dist, name, None)
        if callable(fn) and not getattr(fn, "_ddp_launch_timed", False):
            setattr(dist, name, _timed(fn))


class _Buckets:
    """A comm hook around `hook` that times one DDP model's all-reduces. DDP launches a
    bucket's all-reduce as soon as its gradients are ready, in order, while backward()
    goes on; once the last bucket is launched the rank's own gradients are done, and
    from then until every bucket's all-reduce has completed (DDP waits for them all
    before backward() returns) it waits for the other ranks. The hook runs on the
    backward pass's thread, the completions on the process group's: a lock."""

    __slots__ = ("hook", "launched", "done", "since")

    def __init__(self, hook):
        self.hook = hook
        self.launched = self.done = self.since = 0

    def launch(self, state, bucket):
        """The comm hook (DDP wants a function with a name, its bucket called `bucket`)."""
        with _ddp_lock:
            w = _w
            if bucket.index() == 0:  # a new backward pass (the last one may have failed)
                if w is not None and self.since and w[_COLL_NS] == self.since:
                    w[_COLL_NS] = 0
                self.launched = self.done = self.since = 0
            self.launched += 1
            if bucket.is_last():
                self.since = _mono()
                if w is not None and not w[_COLL_NS]:
                    w[_COLL_NS] = self.since
        return self.hook(state, bucket).then(self._completed)

    def _completed(self, fut):
        global _ddp_wait
        with _ddp_lock:
            self.done += 1
            if self.since and self.done == self.launched:
                _ddp_wait += _mono() - self.since
                w = _w
                if w is not None and w[_COLL_NS] == self.since:
                    w[_COLL_NS] = 0
                self.since = 0
        return fut.value()


def watch(model, hook=None, state=None):
    """Lets ddp-launch see a DistributedDataParallel model's gradient all-reduces, which
    run inside backward(): their wait is each step's, as for a timed dist.all_reduce, so
    that --straggler-report can name a slow rank and --hang-timeout=auto the rank the
    others wait for. Call it once, after wrapping the model; keep calling step() once an
    iteration.

    It registers a comm hook (DDP allows one): DDP's default all-reduce (the mean of
    the gradients), or `hook` with `state` (as for model.register_comm_hook), timed.
    Not under ddp-launch it registers nothing. Returns the model."""
    if not callable(getattr(model, "register_comm_hook", None)):
        raise TypeError("ddp_launch.watch() takes a DistributedDataParallel model, not "
                        + type(model).__name__)
    if _w is None and (_off or _attach() is None):
        return model
    if hook is None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        hook = allreduce_hook
    model.register_comm_hook(state, _Buckets(hook).launch)
    return model


def _take_ddp_wait():
    """The watched models' wait since the last call (ns)."""
    global _ddp_wait
    with _ddp_lock:
        took, _ddp_wait = _ddp_wait, 0
    return took


def step():
    """Marks the end of one training iteration (call it once an iteration)."""
    global _last_wait
    w = _w
    if w is None:
        if _off:
            return
        w = _attach()
        if w is None:
            return
    if not _wrapped:
        _wrap_torch()
    if _ddp_wait:
        w[_WAIT] += _take_ddp_wait()
    now = _mono()
    last = w[_LAST]
    n = w[_STEPS] + 1
    i = _SLOT0 + ((n - 1) % _SLOTS) * 4
    wait = w[_WAIT]
    w[i] = 0  # torn while it is written
    w[i + 1] = now
    w[i + 2] = now - last if last else 0
    w[i + 3] = wait - _last_wait
    w[i] = n
    _last_wait = wait
    if last and not w[_IN]:
        began = last if last > w[_EXIT_NS] else w[_EXIT_NS]
        if now - began > w[_LONGEST]:
            w[_LONGEST] = now - began
    w[_LAST] = now
    w[_STEPS] = n


def _section_index(name):
    """The name's entry in the ring (added when new), or None when 16 are taken. Under
    _lock."""
    index = _names.get(name)
    if index is not None or len(_names) >= _SECTIONS:
        return index
    # Whole characters only: the launcher shows the name and writes it as JSON.
    data = name.encode("utf-8", "replace")[: _NAME - 1].decode("utf-8", "ignore").encode()
    data = data.ljust(_NAME, b"\0")
    index = len(_names)
    at = (_SECTION0 + 6 * index) * 8
    _map[at:at + _NAME] = data
    _names[name] = index
    return index


class section:
    """`with ddp_launch.section("checkpoint"):` around a phase that is not a step
    (checkpoint, eval): --hang-timeout=auto judges it by its own longest duration. Up
    to 16 names are kept; sections nest, and those of several threads (or asyncio tasks)
    may overlap: the rank is in a section while any is open, the latest entered."""

    __slots__ = ("name", "_entries")

    def __init__(self, name):
        self.name = str(name)
        self._entries = None  # (index, entered at, thread) of each time it is open now

    def __enter__(self):
        w = _w
        if w is None and not _off:
            w = _attach()
        if w is None:
            return self
        with _lock:
            index = _section_index(self.name)
            if index is None:
                return self
            entry = (index, _mono(), _thread_id())
            _open.append(entry)
            if self._entries is None:
                self._entries = [entry]
            else:
                self._entries.append(entry)
            w[_IN_NS] = entry[1]
            w[_IN] = index + 1
        return self

    def __exit__(self, *exc):
        w = _w
        if w is None:
            return False
        entries = self._entries
        if not entries:
            return False
        thread = _thread_id()
        with _lock:
            entry = entries[-1] if entries else None
            if entry is not None and entry[2] != thread:  # open in several threads
                entry = next((e for e in reversed(entries) if e[2] == thread), None)
            if entry is None:  # not entered by this thread (the ring was not there)
                return False
            entries.remove(entry)
            if _open[-1] is entry:
                del _open[-1]
            else:
                _open.remove(entry)
            now = _mono()
            took = now - entry[1]
            at = _SECTION0 + 6 * entry[0] + 3
            if took > w[at + 1]:
                w[at + 1] = took
            w[at + 2] += took
            w[at] += 1
            # The ring's section: the latest entered of those open (any thread's), or none.
            w[_EXIT_NS] = now
            w[_IN] = 0
            if _open:
                latest = _open[-1]
                w[_IN_NS] = latest[1]
                w[_IN] = latest[0] + 1
        return False
