"""ddp_launch.checkpoint: in-memory checkpoints, for ddp-launch.

    step_state = ddp_launch.checkpoint.load()     # (step, state), or None
    if step_state is not None:
        step, state = step_state
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
    ...
    ddp_launch.checkpoint.save(step, {"model": model.state_dict(),
                                      "optim": optim.state_dict()})

A save copies the state into shared memory, into one of this rank's two slot files in the
directory the launcher names in DDP_CHECKPOINT_DIR (a tmpfs it owns; the layout and the
contract are common/ckpt.h's, which this module follows): torch's own serializer walks
the state, the pickle of its structure is one record, and each tensor's storage is copied
straight from its memory into the slot (a CUDA tensor's through torch's copy to the host):
no tensor is pickled, nothing is written to disk. Without torch imported, the state is
pickled whole. The slot it takes is not the one with the newest complete checkpoint, which
a crash in the middle of a save leaves whole.

A load reads the slot of DDP_CHECKPOINT_STEP, which the launcher sets after a restart (the
step every rank has), or else the newest step every rank has where torch.distributed's
default group is up (an all-gather of each rank's steps: every rank calls load()), or else
this rank's newest complete one, checks it before use (a
forged, torn or half-written slot is refused: CheckpointError, or with no step asked for,
the other slot, said on stderr), verifies its checksum where the launcher wrote one, and
gives tensors back on the devices they were saved from. Outside ddp-launch (no
DDP_CHECKPOINT_DIR) save() does nothing and load() returns None.

A save that does not fit (the directory's file system, the memory cgroup's limit: a tmpfs
file's pages are the cgroup's memory) is refused with a message on stderr and returns
False; the training goes on, the previous checkpoint stays. A state that cannot be
pickled, a save or load from a process forked from the worker (a DataLoader's), a
checkpoint of another world size: CheckpointError, saying so.
"""
import ctypes
import os
import pickle
import stat
import struct
import sys
import time

__all__ = ["save", "load", "CheckpointError"]


class CheckpointError(Exception):
    """A checkpoint that cannot be saved or loaded; the message says why."""


class _BadSlot(CheckpointError):
    """A slot that cannot be loaded (forged, torn, corrupted): with no step asked for, the
    other one may be."""


# common/ckpt.h's layout: a 128-byte header, records at multiples of 64, the table last.
_MAGIC = b"DDPCKMEM"
_VERSION = 1
_HEADER = struct.Struct("<8sIIQqIIIIQQQQq40x")
_ENTRY = struct.Struct("<48sQQ")
_ALIGN = 64
_NAME_BYTES = 48
_MAX_RECORDS = 1 << 20
_MAX_WORLD = 1 << 24
_MAX_STEP = 1 << 62
_MAX_GENERATION = 1 << 62
_EMPTY, _WRITING, _COMPLETE = 0, 1, 2
_BUFFERS, _PICKLE, _TORCH = 1, 2, 3
_STATE_AT = 12  # the state field's offset
_LANES = 4096
_K1 = 0x9E3779B185EBCA87
_K2 = 0xC2B2AE3D27D4EB4F
_M64 = (1 << 64) - 1
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/")
_GROW = 2 << 20  # slot files grow in steps of 2 MiB

# Where the memory cgroup is read (tests point them at a tree of their own).
_CGROUP_ROOT = "/sys/fs/cgroup"
_PROC_CGROUP = "/proc/self/cgroup"

_forked = False  # this process was forked from one that imported the module


def _mark_forked():
    global _forked, _maps
    _forked = True
    _maps = {}  # the parent's mappings are the parent's


os.register_at_fork(after_in_child=_mark_forked)


class _Header:
    """A slot's header, as common/ckpt.h's ddp_ckpt_header_t."""

    __slots__ = ("magic", "version", "state", "generation", "step", "world_size", "rank", "kind",
                 "records", "table_offset", "used_bytes", "checksum", "checksum_generation",
                 "saved_ns")

    def __init__(self, raw):
        for name, value in zip(self.__slots__, _HEADER.unpack(raw)):
            setattr(self, name, value)

    def problem(self, file_size):
        """What makes it no slot's header (ddp_ckpt_header_check), or None."""
        if self.magic != _MAGIC:
            return "it is not a checkpoint slot (no magic DDPCKMEM)"
        if self.version != _VERSION:
            return f"it is a slot of version {self.version}, not {_VERSION}"
        if self.state > _COMPLETE:
            return f"its state {self.state} is none of empty, writing, complete"
        if self.generation > _MAX_GENERATION:
            return f"its generation {self.generation} is out of range"
        if self.state == _EMPTY:
            return None
        if self.generation == 0:
            return "its generation is 0"
        if not 0 <= self.step <= _MAX_STEP:
            return f"its step {self.step} is out of range"
        if not 0 < self.world_size <= _MAX_WORLD or self.rank >= self.world_size:
            return f"its rank {self.rank} of world size {self.world_size} cannot be"
        if not _BUFFERS <= self.kind <= _TORCH:
            return f"its kind {self.kind} is unknown"
        if self.state == _WRITING:
            return None
        if self.records > _MAX_RECORDS:
            return f"it says {self.records} records, over {_MAX_RECORDS}"
        if (self.table_offset < _HEADER.size or self.table_offset % _ALIGN
                or self.table_offset > self.used_bytes
                or self.used_bytes - self.table_offset != self.records * _ENTRY.size):
            return (f"its table at {self.table_offset} of {self.records} records does not end "
                    f"its {self.used_bytes} bytes")
        if self.used_bytes > file_size:
            return f"it says {self.used_bytes} bytes, the file has {file_size}"
        return None


# The C library, for mmap and memcpy at the addresses of tensors' storages.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_PROT_READ, _PROT_WRITE, _MAP_SHARED = 1, 2, 1


class _Map:
    """A slot file mapped shared (kept between saves: writing into pages already mapped costs
    no page faults)."""

    __slots__ = ("fd", "addr", "size", "writable")

    def __init__(self, fd, size, writable):
        self.fd, self.addr, self.size, self.writable = fd, None, 0, writable
        self.remap(size)

    def remap(self, size):
        self.unmap()
        if size == 0:
            return
        prot = _PROT_READ | (_PROT_WRITE if self.writable else 0)
        addr = _libc.mmap(None, size, prot, _MAP_SHARED, self.fd, 0)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.addr, self.size = addr, size

    def unmap(self):
        if self.addr is not None:
            _libc.munmap(self.addr, self.size)
            self.addr, self.size = None, 0

    def close(self):
        self.unmap()
        os.close(self.fd)

    def bytes(self, offset, size):
        return ctypes.string_at(self.addr + offset, size)

    def put(self, offset, data):
        ctypes.memmove(self.addr + offset, data, len(data))


_maps = {}  # path: _Map, this process's writable mappings of its slots


def _open_regular(path, flags):
    """The descriptor of the regular file at `path`, following no link (a FIFO, a device,
    a link: CheckpointError)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    if not (os.fstat(fd).st_mode & 0o170000) == 0o100000:
        os.close(fd)
        raise CheckpointError(f"{path} is not a regular file")
    return fd


def _read_header(path):
    """(header, problem) of the slot at `path`: (None, None) when there is no file, (None,
    what is wrong) for a file that is no slot's (the writer takes it; a load says why)."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None, None
    except (OSError, CheckpointError) as err:
        return None, str(err)
    try:
        size = os.fstat(fd).st_size
        raw = os.pread(fd, _HEADER.size, 0)
    finally:
        os.close(fd)
    if len(raw) < _HEADER.size:
        return None, f"it has {len(raw)} bytes, less than a header"
    header = _Header(raw)
    problem = header.problem(size)
    return (header if problem is None else None), problem


def _env_int(name, default, low, high):
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise CheckpointError(f"{name}={text!r} is not an integer in {low}..{high}")
    return value


class _Place:
    """Where this rank's checkpoints are: the directory, the rank, the world size, and the
    two slots' paths."""

    def __init__(self, directory):
        self.dir = directory
        self.world = _env_int("WORLD_SIZE", 1, 1, _MAX_WORLD)
        self.rank = _env_int("RANK", 0, 0, self.world - 1)
        self.paths = [os.path.join(directory, f"rank{self.rank}.{s}") for s in (0, 1)]

    def headers(self):
        return [_read_header(p)[0] for p in self.paths]

    def problems(self):
        """What is wrong with the slot files that are no slots', a line each."""
        return [f"{p}: {problem}" for p, (_, problem) in zip(self.paths, map(_read_header,
                                                                           self.paths))
                if problem is not None]


def _place(what):
    """This rank's _Place, or None outside ddp-launch; refuses a process forked or spawned
    from the worker."""
    directory = os.environ.get("DDP_CHECKPOINT_DIR", "")
    if directory == "":
        return None
    mp = sys.modules.get("multiprocessing")
    spawned = mp is not None and mp.parent_process() is not None
    # The zygote's warm workers are forked too, but each leads its session, as a cold
    # worker does; a DataLoader's worker never does.
    if spawned or (_forked and os.getsid(0) != os.getpid()):
        raise CheckpointError(
            f"ddp_launch.checkpoint.{what}() in a process forked or spawned from the worker "
            "(a DataLoader's?): only the worker's own process saves and loads its rank's "
            "checkpoints")
    return _Place(directory)


def _slot_to_write(headers):
    """(slot, generation) of a save: ddp_ckpt_slot_to_write."""
    most = max((h.generation for h in headers if h is not None), default=0)
    complete = [(h.generation, s) for s, h in enumerate(headers)
                if h is not None and h.state == _COMPLETE]
    newest = max(complete)[1] if complete else -1
    return (1 if newest == 0 else 0), most + 1


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _round_up(n):
    return (n + _GROW - 1) // _GROW * _GROW


class _NoRoom(Exception):
    pass


def _cgroup_room():
    """(bytes, what sets them) of the tightest memory cgroup above this process, as
    ckpt_file.c's ddp_ckpt_room: v1's memory controller, else v2's; (None, "") when none
    limits."""
    try:
        with open(_PROC_CGROUP) as f:
            lines = f.read().splitlines()
    except OSError:
        return None, ""
    path, v1 = None, False
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        if "memory" in parts[1].split(","):
            path, v1 = parts[2], True
        elif parts[1] == "" and path is None:
            path = parts[2]
    if path is None:
        return None, ""
    top = _CGROUP_ROOT + ("/memory" if v1 else "")
    files = ("memory.limit_in_bytes", "memory.usage_in_bytes") if v1 else \
        ("memory.max", "memory.current")
    best, said = None, ""
    d = top + ("" if path == "/" else path)
    while True:
        values = []
        for name in files:
            try:
                with open(os.path.join(d, name)) as f:
                    text = f.read(64).strip()
                values.append(None if text == "max" else int(text))
            except (OSError, ValueError):
                values.append(-1)
        limit, used = values
        if limit is not None and limit >= 0 and limit < 1 << 62 and used is not None \
                and used >= 0:
            left = max(limit - used, 0)
            if best is None or left < best:
                best = left
                said = f"the memory cgroup {d} ({files[0]} {limit} bytes, {used} in use)"
        if len(d) <= len(top):
            return best, said
        d = d.rsplit("/", 1)[0]


def _room(directory):
    """(bytes a save may add in `directory`, what sets them): ddp_ckpt_room."""
    vfs = os.statvfs(directory)
    room = vfs.f_bavail * vfs.f_frsize
    said = f"the file system of {directory} ({room} bytes free)"
    cgroup, cgroup_said = _cgroup_room()
    if cgroup is not None and cgroup < room:
        return cgroup, cgroup_said
    return room, said


def _replica_rank(name):
    """The rank of a replica's name, exactly "replica<R>.<s>" (s 0 or 1), else None."""
    rank, dot, slot = name[len("replica"):].partition(".")
    if not name.startswith("replica") or not dot or slot not in ("0", "1") \
            or not rank.isascii() or not rank.isdigit() or len(rank) > 9:
        return None
    return int(rank)


_DROPPING_MAX_S = 60  # ckpt_file.h's DDP_CKPT_DROPPING_MAX_S


def _remove_stale_drops(directory, names):
    """The bytes of drops' asides (.replica<R>.<s>.<pid>.dropping) removed from `directory`
    (its `names`) whose dropper is no process here or that were renamed there more than
    _DROPPING_MAX_S ago: a dropper killed between its rename and its unlink left them, their
    room taken for the rest of the job (ckpt_file.c's ddp_ckpt_remove_stale_drops)."""
    freed = 0
    for name in names:
        parts = name.split(".")
        if len(parts) != 5 or parts[0] != "" or parts[4] != "dropping" \
                or _replica_rank(".".join(parts[1:3])) is None \
                or not parts[3].isascii() or not parts[3].isdigit() or len(parts[3]) > 9 \
                or int(parts[3]) <= 0:
            continue
        path, pid = os.path.join(directory, name), int(parts[3])
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            dead = False
            if pid != os.getpid():
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    dead = True
                except OSError:
                    pass
            if dead or time.time() - st.st_ctime > _DROPPING_MAX_S:
                os.unlink(path)
                freed += st.st_blocks * 512
        except OSError:
            pass
    return freed


def _drop_replicas(directory, need):
    """(bytes, number) of the replicas of other nodes' ranks removed from `directory` for
    `need` bytes of room: ckpt_file.c's ddp_ckpt_drop_replicas (the oldest received first,
    those that are not the newest of their rank before any that is)."""
    held = []
    try:
        names = os.listdir(directory)
    except OSError:
        return 0, 0
    freed = _remove_stale_drops(directory, names)
    for name in names:
        rank = _replica_rank(name)
        if rank is None:
            continue
        try:
            fd = _open_regular(os.path.join(directory, name), os.O_RDONLY)
        except (OSError, CheckpointError):
            continue
        try:
            st = os.fstat(fd)
            raw = os.pread(fd, _HEADER.size, 0)
        finally:
            os.close(fd)
        if st.st_uid != os.geteuid() or len(raw) < _HEADER.size:
            continue
        header = _Header(raw)
        if header.problem(st.st_size) is None:
            held.append([name, rank, header.generation, st.st_blocks * 512, st.st_mtime_ns,
                         (st.st_dev, st.st_ino)])
    for entry in held:
        entry.append(all(o[1] != entry[1] or o[2] <= entry[2] for o in held))
    held.sort(key=lambda entry: (entry[6], entry[4]))
    count = 0
    for name, _, _, size, _, listed, _ in held:
        if freed >= need:
            break
        if _drop_listed(directory, name, listed):
            freed, count = freed + size, count + 1
    return freed, count


def _drop_listed(directory, name, listed):
    """Removes replica `name` of `directory` where that name still holds the file listed
    ((st_dev, st_ino) `listed`): ckpt_file.c's drop_listed (moved aside first, so a newer
    replica the launcher renames onto the name meanwhile is kept, linked back). Whether the
    file listed was removed."""
    path = os.path.join(directory, name)
    aside = os.path.join(directory, ".%s.%d.dropping" % (name, os.getpid()))
    try:
        os.rename(path, aside)
    except OSError:
        return False  # (gone meanwhile)
    try:
        st = os.lstat(aside)
        same = (st.st_dev, st.st_ino) == listed
    except OSError:
        same = False
    if not same:
        try:
            os.link(aside, path)
        except FileExistsError:
            pass  # (a newer one yet holds the name: this one goes)
        except OSError:
            try:
                os.replace(aside, path)  # (no link here: back as it was)
            except OSError:
                pass
            return False
    try:
        os.unlink(aside)
    except OSError:
        pass
    return same


class _Writer:
    """One save into one slot: torch's zip_file for torch.serialization._save (its
    write_record), or the records given to it one by one. The slot is made WRITING at the
    first record, COMPLETE by finish()."""

    def __init__(self, place, slot, generation, step, kind, estimate):
        self.place, self.path = place, place.paths[slot]
        self.header = [_MAGIC, _VERSION, _WRITING, generation, step, place.world, place.rank,
                       kind, 0, 0, 0, 0, 0, 0]
        self.estimate = estimate
        self.map = None
        self.cursor = _HEADER.size
        self.table = []
        self.allocated = 0  # bytes of pages the slot file has
        self.room_to = 0  # where the last look at the room said writing may go
        self.started = False  # the slot is WRITING

    def _open(self):
        m = _maps.get(self.path)
        if m is None:
            fd = _open_regular(self.path, os.O_RDWR | os.O_CREAT)
            m = _maps[self.path] = _Map(fd, 0, True)
        st = os.fstat(m.fd)
        self.allocated = st.st_blocks * 512
        if m.size != st.st_size:
            m.remap(st.st_size)
        self.map = m
        self._reserve(_HEADER.size + self.estimate)  # refused here, nothing has changed
        m.put(_STATE_AT, struct.pack("<I", _WRITING))  # before anything else changes
        self.started = True
        m.put(0, _HEADER.pack(*self.header))

    def _reserve(self, end):
        """The file at least `end` bytes long, where there is room for what writing up to
        there adds (the pages the file does not have yet: a tmpfs file's pages are taken
        as they are written). One look at the room says how far it goes."""
        if end > self.allocated and end > self.room_to:
            room, said = _room(self.place.dir)
            if end - self.allocated > room and self._drop_replicas(end - self.allocated - room):
                room, said = _room(self.place.dir)
            if end - self.allocated > room:
                raise _NoRoom(f"it needs {end} bytes in {self.place.dir} "
                              f"({end - self.allocated} more than this slot holds), and {said} "
                              f"leaves {room}")
            self.room_to = self.allocated + room
        m = self.map
        if end > m.size:
            size = _round_up(max(end, m.size + m.size // 2))
            os.ftruncate(m.fd, size)
            m.remap(size)

    def _drop_replicas(self, more):
        """Short of `more` bytes: the replicas of other nodes' ranks give them (this node's
        own ranks come first), said in one line; the asides of drops cut short too. Whether
        any bytes were removed."""
        freed, count = _drop_replicas(self.place.dir, more)
        if count > 0:
            print(f"ddp_launch.checkpoint: step {self.header[4]} needs {more} more bytes in "
                  f"{self.place.dir}: {count} replicas of other nodes' ranks ({freed} bytes) "
                  f"removed for it, this node's own ranks' checkpoints come first",
                  file=sys.stderr)
        return freed > 0

    def write_record(self, name, data, size):
        """torch's PyTorchFileWriter.write_record: `data` is bytes, a str, the address of
        `size` bytes (torch 1.x) or a storage (torch 2.x)."""
        if self.map is None:
            self._open()
        raw = name.encode() if isinstance(name, str) else bytes(name)
        if (not raw or len(raw) >= _NAME_BYTES or raw[0] == 0x2F or not set(raw) <= _NAME_CHARS
                or b".." in raw.split(b"/")):
            raise CheckpointError(f"a record's name {name!r} cannot be a slot's")
        if len(self.table) >= _MAX_RECORDS:
            raise CheckpointError(f"more than {_MAX_RECORDS} records")
        offset = _align(self.cursor)
        self._reserve(offset + size)
        if isinstance(data, str):
            data = data.encode()
        if size > 0:
            if isinstance(data, (bytes, bytearray)):
                if len(data) < size:
                    raise CheckpointError(f"record {name}: {len(data)} bytes for {size}")
                ctypes.memmove(self.map.addr + offset, bytes(data), size)
            else:
                address = data if isinstance(data, int) else data.data_ptr()
                ctypes.memmove(self.map.addr + offset, address, size)
        self.table.append(_ENTRY.pack(raw, offset, size))
        self.cursor = offset + size

    def finish(self):
        """The table and the header; COMPLETE last."""
        if self.map is None:
            self._open()
        table_offset = _align(self.cursor)
        table = b"".join(self.table)
        used = table_offset + len(table)
        self._reserve(used)
        self.map.put(table_offset, table)
        h = self.header
        h[8], h[9], h[10], h[13] = len(self.table), table_offset, used, time.time_ns()
        self.map.put(0, _HEADER.pack(*h))
        self.map.put(_STATE_AT, struct.pack("<I", _COMPLETE))
        return used

    def abandon(self):
        """A save refused once it began: the slot EMPTY, cut to its header (its memory given
        back)."""
        if not self.started:
            return
        m = _maps.pop(self.path)
        try:
            m.put(_STATE_AT, struct.pack("<I", _EMPTY))
            m.unmap()
            os.ftruncate(m.fd, _HEADER.size)
        finally:
            m.close()


_byteorder_arg = None  # whether torch's _save takes _disable_byteorder_record (2.x)


def _torch_save(state, writer):
    """torch's serializer with our writer: its pickle of the structure, then each storage."""
    global _byteorder_arg
    import torch

    _save = torch.serialization._save
    if _byteorder_arg is None:
        import inspect

        _byteorder_arg = "_disable_byteorder_record" in inspect.signature(_save).parameters
    args = [state, writer, pickle, torch.serialization.DEFAULT_PROTOCOL]
    if _byteorder_arg:
        args.append(False)  # torch 2.x: the byteorder record, as torch.save writes it
    _save(*args)


def save(step, state):
    """Saves `state` as this rank's checkpoint of `step` (an int, 0 .. 2**62): True once it
    is complete; False outside ddp-launch, or when it does not fit (said on stderr; the
    previous checkpoint stays). CheckpointError for a state that cannot be pickled or a
    process forked from the worker."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= _MAX_STEP:
        raise ValueError(f"step {step!r} is not an integer in 0..2**62")
    place = _place("save")
    if place is None:
        return False
    headers = place.headers()
    slot, generation = _slot_to_write(headers)
    newest = max((h for h in headers if h is not None and h.state == _COMPLETE),
                 key=lambda h: h.generation, default=None)
    estimate = newest.used_bytes - _HEADER.size if newest is not None else 0
    kind = _TORCH if "torch" in sys.modules else _PICKLE
    data = None
    if kind == _PICKLE:
        data = _pickled(state, step)
    writer = _Writer(place, slot, generation, step, kind, estimate)
    try:
        if kind == _PICKLE:
            writer.write_record("data.pkl", data, len(data))
        else:
            try:
                _torch_save(state, writer)
            except (CheckpointError, _NoRoom, OSError):
                raise
            except Exception as err:  # pickling is all that can fail in torch's _save
                raise CheckpointError(f"unable to save step {step}: the state cannot be "
                                      f"pickled: {type(err).__name__}: {err}") from err
        writer.finish()
    except _NoRoom as err:
        writer.abandon()
        print(f"ddp_launch.checkpoint: step {step} not saved: {err}; the checkpoint of step "
              f"{newest.step if newest else '(none)'} stays", file=sys.stderr)
        return False
    except BaseException:
        writer.abandon()
        raise
    return True


def _pickled(state, step):
    try:
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:
        raise CheckpointError(f"unable to save step {step}: the state cannot be pickled: "
                              f"{type(err).__name__}: {err}") from err


class _Slot:
    """A complete slot, mapped read-only and checked (ddp_ckpt_parse): its records by
    name."""

    def __init__(self, path):
        fd = _open_regular(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        self.map = _Map(fd, size, False) if size >= _HEADER.size else None
        if self.map is None:
            os.close(fd)
            raise _BadSlot(f"{path}: it has {size} bytes, less than a header")
        try:
            self.header = _Header(self.map.bytes(0, _HEADER.size))
            self.records = self._check(path, size)
        except BaseException:
            self.map.close()
            raise

    def _check(self, path, size):
        h = self.header
        problem = h.problem(size)
        if problem is None and h.state != _COMPLETE:
            problem = "it is " + ("empty" if h.state == _EMPTY else
                                  "not complete: being written, or its save died")
        if problem is not None:
            raise _BadSlot(f"{path}: {problem}")
        table = self.map.bytes(h.table_offset, h.records * _ENTRY.size)
        records, end = {}, _HEADER.size
        for i in range(h.records):
            raw, offset, length = _ENTRY.unpack_from(table, i * _ENTRY.size)
            name = raw.split(b"\0", 1)[0]
            if (b"\0" not in raw or not name or name[0] == 0x2F or not set(name) <= _NAME_CHARS
                    or b".." in name.split(b"/")):
                raise _BadSlot(f"{path}: record {i} has no name or a name that cannot be")
            if offset < end or offset % _ALIGN or offset > h.table_offset \
                    or length > h.table_offset - offset:
                raise _BadSlot(f"{path}: record {i} ('{name.decode()}') at {offset}, "
                                      f"{length} bytes, is not between the previous one and "
                                      "the table")
            records.setdefault(name.decode(), (offset, length))
            end = offset + length
        return records

    def verify(self, path):
        """Raises CheckpointError where the launcher's checksum of this generation differs."""
        h = self.header
        if h.checksum_generation != h.generation:
            return
        raw = bytearray(self.map.bytes(0, _HEADER.size))
        raw[_STATE_AT:_STATE_AT + 4] = bytes(4)
        raw[64:80] = bytes(16)
        seed = _checksum(bytes(raw), 0)
        body = (ctypes.c_uint8 * (h.used_bytes - _HEADER.size)).from_address(
            self.map.addr + _HEADER.size)
        if _checksum(body, seed) != h.checksum:
            raise _BadSlot(f"{path}: its data does not match its checksum (step "
                                  f"{h.step}, {h.used_bytes} bytes): torn or corrupted")

    def record(self, name):
        if name not in self.records:
            raise _BadSlot(f"the checkpoint has no record {name!r}")
        offset, size = self.records[name]
        return offset, size

    # torch.serialization._load's zip_file (PyTorchFileReader's methods it calls).
    def get_record(self, name):
        offset, size = self.record(name)
        return self.map.bytes(offset, size)

    def has_record(self, name):
        return name in self.records

    def get_all_records(self):
        return list(self.records)

    def get_record_offset(self, name):
        return self.record(name)[0]

    def serialization_id(self):
        return f"ddp_launch-{self.header.generation}"

    def get_storage_from_record(self, name, numel, _dtype):
        import torch

        offset, size = self.record(name)
        if size != numel:
            raise _BadSlot(f"record {name} has {size} bytes, its tensor {numel}")
        tensor = torch.empty(numel, dtype=torch.uint8)
        if numel > 0:
            ctypes.memmove(tensor.data_ptr(), self.map.addr + offset, numel)
        return tensor


def _checksum(data, seed):
    """ddp_ckpt_checksum of `data` (bytes or a ctypes array): numpy's, a row of 4096 words
    at a time, where numpy is there; else Python's, slow but the same."""
    n = len(data)
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        words = np.frombuffer(data, dtype="<u8", count=n // 8)
        rows = len(words) // _LANES
        with np.errstate(over="ignore"):
            lane = np.arange(1, _LANES + 1, dtype=np.uint64) * np.uint64(_K2)
            np.bitwise_xor(lane, np.uint64(seed), out=lane)
            tmp = np.empty(_LANES, dtype=np.uint64)
            k1, s29 = np.uint64(_K1), np.uint64(29)
            for row in words[:rows * _LANES].reshape(rows, _LANES):
                np.bitwise_xor(lane, row, out=lane)
                np.multiply(lane, k1, out=lane)
                np.right_shift(lane, s29, out=tmp)
                np.bitwise_xor(lane, tmp, out=lane)
        lanes = lane.tolist()
        rest = words[rows * _LANES:].tolist()  # fewer than a row: lanes 0, 1, ...
    else:
        lanes = [seed ^ (((l + 1) * _K2) & _M64) for l in range(_LANES)]
        rest = list(struct.unpack_from(f"<{n // 8}Q", bytes(data)))
    if n % 8:
        rest.append(int.from_bytes(bytes(data[n - n % 8:]).ljust(8, b"\0"), "little"))
    for i, w in enumerate(rest):
        lanes[i % _LANES] = _mix(lanes[i % _LANES], w)
    h = seed ^ ((n * _K2) & _M64)
    for v in lanes:
        h = _mix(h, v)
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    return h ^ (h >> 33)


def _mix(lane, word):
    a = ((lane ^ word) * _K1) & _M64
    return a ^ (a >> 29)


def load():
    """This rank's checkpoint: (step, state), the step DDP_CHECKPOINT_STEP names, else the
    newest step every rank has where torch.distributed's default group is up (every rank
    calls load() then), else this rank's newest; None when there is none (or outside
    ddp-launch). CheckpointError when the step asked for is missing or refused, or the
    checkpoint is of another world size."""
    place = _place("load")
    if place is None:
        return None
    asked = _env_int("DDP_CHECKPOINT_STEP", -1, 0, _MAX_STEP)
    headers = place.headers()
    problems = place.problems()
    if asked < 0 and _agreeing(place):
        asked = _agree(place, headers, problems)
        if asked < 0:
            for problem in problems:
                print(f"ddp_launch.checkpoint: {problem}: not loaded", file=sys.stderr)
            return None
    order = sorted((h.generation, s) for s, h in enumerate(headers)
                   if h is not None and h.state == _COMPLETE and asked in (-1, h.step))
    if asked >= 0 and not order:
        raise CheckpointError(f"rank {place.rank} has no checkpoint of step {asked} in "
                              f"{place.dir} (DDP_CHECKPOINT_STEP)"
                              + "".join(f"; {p}" for p in problems))
    for problem in problems:
        print(f"ddp_launch.checkpoint: {problem}: not loaded", file=sys.stderr)
    for i, (_, s) in enumerate(reversed(order)):
        try:
            return _load_slot(place, s)
        except _BadSlot as err:
            if i + 1 == len(order):
                raise
            print(f"ddp_launch.checkpoint: {err}; loading the "
                  f"{'other slot of that step' if asked >= 0 else 'one before'}", file=sys.stderr)
    return None


def _agreeing(place):
    """Whether the ranks can agree on a step: torch.distributed's default group is up, of
    this job's world size."""
    dist = sys.modules.get("torch.distributed")
    return (place.world > 1 and dist is not None and dist.is_available()
            and dist.is_initialized() and dist.get_world_size() == place.world)


def _agree(place, headers, problems):
    """The newest step every rank can load (its slot checked whole), through an all-gather
    of each rank's on the default group; -1 when there is none. This rank's own error
    (another world size) is raised once it has taken part, so that no rank waits."""
    steps, error = [], None
    for s, h in enumerate(headers):
        if h is None or h.state != _COMPLETE:
            continue
        try:
            _checked_slot(place, s).map.close()
            steps.append(h.step)
        except _BadSlot as err:
            problems.append(str(err))
        except CheckpointError as err:
            error = error or err
    dist = sys.modules["torch.distributed"]
    gathered = [None] * place.world
    dist.all_gather_object(gathered, steps)
    if error is not None:
        raise error
    common = set(gathered[0]).intersection(*map(set, gathered[1:]))
    return max(common, default=-1)


def _checked_slot(place, s):
    """Slot `s`, mapped and checked whole (its checksum too, where the launcher wrote one),
    of this rank and world size and a Python state; the caller closes its map."""
    path = place.paths[s]
    slot = _Slot(path)
    try:
        h = slot.header
        if h.world_size != place.world:
            raise CheckpointError(
                f"{path} is a checkpoint of a job of world size {h.world_size}; this one has "
                f"{place.world}: it cannot be loaded here")
        if h.rank != place.rank:
            raise _BadSlot(f"{path} says it is rank {h.rank}'s, not {place.rank}'s")
        slot.verify(path)
        if h.kind == _BUFFERS:
            raise CheckpointError(f"{path} is a checkpoint of libddp's buffers "
                                  "(ddp_checkpoint_save), not a Python state")
    except BaseException:
        slot.map.close()
        raise
    return slot


def _load_slot(place, s):
    path = place.paths[s]
    slot = _checked_slot(place, s)
    try:
        state = _unpickle(path, slot)
        step, generation = slot.header.step, slot.header.generation
    finally:
        slot.map.close()
    _retire_newer(place, generation)
    return step, state


def _unpickle(path, slot):
    """The state of a checked slot: pickle's, or torch's for torch's records."""
    try:
        if slot.header.kind == _PICKLE and not any(n.startswith("data/") for n in slot.records):
            return pickle.loads(slot.get_record("data.pkl"))
        import torch

        return torch.serialization._load(slot, None, pickle)
    except CheckpointError:
        raise
    except Exception as err:  # a slot whose data no checksum covered
        raise _BadSlot(f"{path}: unable to unpickle its state: {type(err).__name__}: {err}") \
            from err


def _retire_newer(place, generation):
    """A load of an older step: a slot saved after it becomes EMPTY (the job goes on from
    the step loaded; a later save must not take its slot for that abandoned one's)."""
    for path in place.paths:
        header = _read_header(path)[0]
        if header is None or header.state != _COMPLETE or header.generation <= generation:
            continue
        fd = _open_regular(path, os.O_RDWR)
        try:
            os.pwrite(fd, struct.pack("<I", _EMPTY), _STATE_AT)
        finally:
            os.close(fd)
