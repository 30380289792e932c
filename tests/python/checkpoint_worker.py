"""ddp_launch.checkpoint as a training script uses it, and what it refuses:
checkpoint_worker.py MODE [ARGS]; DDP_CHECKPOINT_DIR, RANK and WORLD_SIZE set by the test.
Each mode prints "MODE ok" at its end; a check that fails exits 1 saying which.

api: save/load round trips of checkpoint_state.make_state (slots rank<R>.0 and .1 taken in
  turn), DDP_CHECKPOINT_STEP (a newer slot retired, its slot taken by the next save), a step
  missing, another world size, a state that cannot be pickled (nothing written), saves from
  a forked and a multiprocessing child, no DDP_CHECKPOINT_DIR, the checksum's pinned values;
  saves too big for a memory cgroup (a tree of the test's: ARGS[0]) or the file system,
  refused with the previous checkpoint kept. Leaves step 5's checkpoint, make_state(5).
plain: without torch, a plain state saved as a pickle and loaded; leaves step 8's.
replicas: without torch, a save short of room (a file system of the test's making) that
  replicas of other nodes' ranks in the directory hold: the one that is not its rank's
  newest is removed (though received last), said once, and the save goes on; the others
  stay.
crash MB: steps 1 and 2, then step 3 with a tensor of MB MiB, during which a thread of the
  process SIGKILLs it as soon as step 3's slot is being written.
after-crash MB: the load gives step 2, whole.
steps: saves steps 1 and 2 (then the test writes their checksums, as the launcher would).
corrupt: both slots checksummed by the test (C): step 2 loads; a byte of its data changed,
  it is refused when asked for, and without DDP_CHECKPOINT_STEP step 1 loads instead (said
  on stderr); step 1's header forged, refused when asked for, else none loads (said).
agree: under ddp-launch, 2 ranks with torch.distributed (gloo) up: rank 0 saves steps 1, 2
  and 3, rank 1 steps 1 and 2; every rank's load gives step 2, and rank 0's step 3 is retired.
hold: without torch, under ddp-launch: saves a plain state as step 1, prints "held RANK PID
  DIR", and waits for its end (the test SIGKILLs the launcher, or this rank); in a later
  attempt, loads step 1 and prints "loaded RANK STEP (DDP_CHECKPOINT_STEP=V)".
persist DISK N THEN: under ddp-launch --checkpoint-dir=DISK: loads (prints "loaded RANK STEP
  (DDP_CHECKPOINT_STEP=V)", -1: none), saves the N steps after it ({"rank", "step"} each),
  and with THEN "wait" waits (a deadline) until DISK/rank<R>.ckpt holds the last of them;
  prints "held RANK PID DIR"; THEN "stay": then waits for its end.
load-pt FILE STEP: torch.load of FILE (a slot the test wrote in torch.save's format)
  equals make_state(STEP) ("plain": the plain state; "RANK:STEP": persist's state).
"""
import os
import signal
import subprocess
import sys
import threading
import time

import ddp_launch

ck = ddp_launch.checkpoint
mode, args = sys.argv[1], sys.argv[2:]
directory = os.environ.get("DDP_CHECKPOINT_DIR", "")
rank = int(os.environ.get("RANK", "0"))
PLAIN = {"epoch": 8, "losses": [0.5, 0.25], "name": "plain", "blob": bytes(range(256)) * 40}


def check(cond, what):
    if not cond:
        sys.exit(f"{mode}: {what}")


def refused(fn, words, *fn_args):
    """fn(*fn_args) raises CheckpointError whose message holds `words`."""
    try:
        fn(*fn_args)
    except ck.CheckpointError as err:
        check(words in str(err), f"refusal '{err}' does not say '{words}'")
        return
    check(False, f"{fn.__name__}{fn_args!r:.60} was not refused ({words})")


def header(slot):
    return ck._read_header(os.path.join(directory, f"rank{rank}.{slot}"))[0]


def slots():
    """(state, step) of both slots: None where there is no slot."""
    return [None if h is None else (h.state, h.step) for h in map(header, (0, 1))]


def round_trips(make_state, same):
    check(ck.load() is None, "a load from an empty directory")
    for step in (1, 2, 3):
        check(ck.save(step, make_state(step)) is True, f"save {step}")
        got = ck.load()
        check(got is not None and got[0] == step, f"load after save {step}: {got and got[0]}")
        differs = same(make_state(step), got[1])
        check(differs is None, f"step {step} loaded: {differs}")
    check(slots() == [(2, 3), (2, 2)], f"slots after 3 saves: {slots()}")
    os.environ["DDP_CHECKPOINT_STEP"] = "2"
    got = ck.load()
    check(got[0] == 2 and same(make_state(2), got[1]) is None, "DDP_CHECKPOINT_STEP=2")
    check(slots() == [(0, 3), (2, 2)], f"step 3 not retired: {slots()}")
    os.environ["DDP_CHECKPOINT_STEP"] = "9"
    refused(ck.load, "no checkpoint of step 9")
    del os.environ["DDP_CHECKPOINT_STEP"]
    check(ck.load()[0] == 2, "the newest after the retirement")
    check(ck.save(3, make_state(3)) and slots() == [(2, 3), (2, 2)], f"resave: {slots()}")
    os.environ["WORLD_SIZE"] = "4"
    refused(ck.load, "world size 2; this one has 4")
    os.environ["WORLD_SIZE"] = "2"


def refusals():
    before = slots()
    refused(ck.save, "cannot be pickled", 4, {"fn": lambda x: x})
    check(slots() == before, f"an unpicklable state changed the slots: {slots()}")
    pid = os.fork()
    if pid == 0:
        try:
            ck.save(4, {"a": 1})
            os._exit(1)
        except ck.CheckpointError as err:
            os._exit(0 if "forked or spawned from the worker" in str(err) else 2)
    check(os.waitpid(pid, 0)[1] == 0, "a forked child saved")
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=_child_saves)
    child.start()
    child.join(60)
    check(child.exitcode == 0, f"a multiprocessing child: exit {child.exitcode}")
    check(slots() == before, "a child changed the slots")
    saved = os.environ.pop("DDP_CHECKPOINT_DIR")
    check(ck.save(4, {"a": 1}) is False and ck.load() is None, "outside ddp-launch")
    os.environ["DDP_CHECKPOINT_DIR"] = saved


def _child_saves():
    try:
        ck.save(4, {"a": 1})
    except ck.CheckpointError:
        sys.exit(0)
    sys.exit(1)


def too_big(cgroup_tree, make_state, same):
    """memory.max 1 MiB above memory.current: a save of 8 MiB more is refused; so is one
    where the file system has 1 MiB free."""
    import torch

    check(ck.save(4, make_state(4)), "save 4")
    big = make_state(5)
    big["blob"] = torch.zeros(2 << 20)  # 8 MiB
    with open(os.path.join(cgroup_tree, "cgroup"), "w") as f:
        f.write("0::/job\n")
    os.makedirs(os.path.join(cgroup_tree, "sys", "job"), exist_ok=True)
    for name, value in (("memory.max", 5 << 20), ("memory.current", 4 << 20)):
        with open(os.path.join(cgroup_tree, "sys", "job", name), "w") as f:
            f.write(f"{value}\n")
    ck._PROC_CGROUP = os.path.join(cgroup_tree, "cgroup")
    ck._CGROUP_ROOT = os.path.join(cgroup_tree, "sys")
    check(ck.save(5, big) is False, "a save past memory.max")
    ck._PROC_CGROUP = "/nonexistent"
    statvfs = os.statvfs

    class Small:
        f_bavail, f_frsize = 256, 4096

    os.statvfs = lambda path: Small()
    check(ck.save(5, big) is False, "a save past the file system's room")
    os.statvfs = statvfs
    got = ck.load()
    check(got[0] == 4 and same(make_state(4), got[1]) is None, "step 4 after the refusals")
    check(ck.save(5, make_state(5)), "save 5")


def pinned():
    pattern = bytes((i * 131 + 7) & 0xFF for i in range(100003))
    check(ck._checksum(b"", 0) == 0xe3cb0f2f7effd322, "checksum of nothing")
    check(ck._checksum(b"abc", 0) == 0x15dea4d7bb6c09c0, "checksum of abc")
    check(ck._checksum(pattern, 0x1234) == 0x7474cb9fe311aa93, "checksum of the pattern")


def big_state(step, mib):
    import torch

    from checkpoint_state import make_state

    state = make_state(step)
    state["blob"] = torch.full((mib << 18,), float(step))
    return state


def crash(mib):
    """Step 3's save SIGKILLed by a thread of ours once its slot is being written."""
    for step in (1, 2):
        check(ck.save(step, big_state(step, mib)), f"save {step}")
    target = [h is not None and h.state == 2 and h.step == 1 for h in map(header, (0, 1))]
    path = os.path.join(directory, f"rank{rank}.{target.index(True)}")
    state3 = big_state(3, mib)

    def watch():
        fd = os.open(path, os.O_RDONLY)
        while os.pread(fd, 4, 12) != b"\x01\x00\x00\x00":  # WRITING
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
    ck.save(3, state3)
    print("crash: step 3 was saved before the kill")
    sys.exit(3)


def corrupt(same, make_state):
    """The test wrote both slots' checksums (C's sum): Python's must agree. Then both
    slots of one step, the newer damaged: DDP_CHECKPOINT_STEP loads the other."""
    got = ck.load()
    check(got[0] == 2 and same(make_state(2), got[1]) is None, "step 2 with its checksum")
    s2 = [s for s in (0, 1) if header(s).step == 2][0]
    path = os.path.join(directory, f"rank{rank}.{s2}")
    slot = ck._Slot(path)
    offset, size = slot.record("data/0")
    slot.map.close()
    fd = os.open(path, os.O_RDWR)
    byte = os.pread(fd, 1, offset + size // 2)
    os.pwrite(fd, bytes([byte[0] ^ 0x04]), offset + size // 2)
    os.environ["DDP_CHECKPOINT_STEP"] = "2"
    refused(ck.load, "does not match its checksum")
    del os.environ["DDP_CHECKPOINT_STEP"]
    got = ck.load()
    check(got[0] == 1 and same(make_state(1), got[1]) is None, "step 1 instead of step 2")
    s1 = 1 - s2
    path1 = os.path.join(directory, f"rank{rank}.{s1}")
    fd1 = os.open(path1, os.O_RDWR)
    os.pwrite(fd1, (2**32 - 1).to_bytes(4, "little"), 44)  # records
    os.environ["DDP_CHECKPOINT_STEP"] = "1"
    refused(ck.load, "records, over")
    del os.environ["DDP_CHECKPOINT_STEP"]
    os.pwrite(fd1, (1).to_bytes(4, "little"), 44)
    os.pwrite(fd1, (2**63).to_bytes(8, "little"), 48)  # table_offset: said on stderr
    check(ck.load() is None, "a slot with its table out of the file loaded")
    os.close(fd1)
    os.close(fd)
    # Both slots of the step asked for (step 3 saved twice), the newer one damaged: the
    # other one loads (the damaged one raised, the other untried).
    ck.save(3, make_state(3))
    ck.save(3, make_state(3))
    newer = max((0, 1), key=lambda s: header(s).generation)
    slot = ck._Slot(os.path.join(directory, f"rank{rank}.{newer}"))
    offset, size = slot.record("data.pkl")
    slot.map.close()
    fd = os.open(os.path.join(directory, f"rank{rank}.{newer}"), os.O_RDWR)
    os.pwrite(fd, b"\xff" * size, offset)  # no pickle: found only at the load
    os.close(fd)
    os.environ["DDP_CHECKPOINT_STEP"] = "3"
    got = ck.load()
    del os.environ["DDP_CHECKPOINT_STEP"]
    check(got[0] == 3 and same(make_state(3), got[1]) is None, "step 3 from its other slot")


def replicas(blob):
    """Step 1 saved, its slot copied as replicas (rank 3's older one received last) and as a
    dead dropper's aside; room for half of a save more: step 2's save removes the aside and
    that one replica alone and goes on."""
    check(ck.save(1, {"blob": blob}), "save 1")
    with open(os.path.join(directory, f"rank{rank}.0"), "rb") as f:
        data = bytearray(f.read())
    for name, generation, when in (("replica3.0", 1, 300), ("replica3.1", 2, 100),
                                   ("replica5.0", 4, 200)):
        fields = list(ck._HEADER.unpack_from(data))
        fields[ck._Header.__slots__.index("generation")] = generation
        ck._HEADER.pack_into(data, 0, *fields)
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, (when, when))

    def used():
        return sum(os.stat(os.path.join(directory, n)).st_blocks * 512
                   for n in os.listdir(directory))

    budget = used() + len(blob) // 2
    # A drop's aside that its dropper, killed between its rename and its unlink, left: its
    # room taken past the budget, removed by the next drop.
    dead = subprocess.Popen(["true"])
    dead.wait()
    aside = os.path.join(directory, f".replica3.0.{dead.pid}.dropping")
    with open(aside, "wb") as f:
        f.write(data[:1 << 16])
    statvfs = os.statvfs

    class Room:
        f_frsize = 4096

        @property
        def f_bavail(self):
            return max(budget - used(), 0) // 4096

    ck._PROC_CGROUP = "/nonexistent"
    os.statvfs = lambda path: Room()
    check(ck.save(2, {"blob": blob}), "save 2, short of room the replicas hold")
    os.statvfs = statvfs
    left = sorted(n for n in os.listdir(directory) if n.startswith("replica"))
    check(left == ["replica3.1", "replica5.0"], f"replicas left: {left}")
    check(not os.path.exists(aside), "a dead dropper's aside left")
    check(ck.load()[0] == 2, "step 2 loaded")


if mode == "plain":
    check("torch" not in sys.modules, "torch was imported")
    check(ck.save(7, {"epoch": 7}) and ck.save(8, PLAIN), "plain saves")
    check(header(0).kind == 2, f"a plain state's kind: {header(0).kind}")
    check(ck.load() == (8, PLAIN), "the plain state loaded")
    check("torch" not in sys.modules, "a load imported torch")
elif mode == "replicas":
    replicas(os.urandom(1 << 20))
elif mode == "hold" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
    got = ck.load()
    asked = os.environ.get("DDP_CHECKPOINT_STEP", "-")
    print(f"loaded {rank} {got and got[0]} (DDP_CHECKPOINT_STEP={asked})", flush=True)
    check(got == (1, PLAIN), "the plain state loaded")
elif mode == "hold":
    check(ck.save(1, PLAIN), "the save")
    print(f"held {rank} {os.getpid()} {directory}", flush=True)
    signal.pause()
elif mode == "persist":
    disk, count, then = args[0], int(args[1]), args[2]
    got = ck.load()
    asked = os.environ.get("DDP_CHECKPOINT_STEP", "-")
    print(f"loaded {rank} {got[0] if got else -1} (DDP_CHECKPOINT_STEP={asked})", flush=True)
    start = got[0] if got else 0
    check(got is None or got[1] == {"rank": rank, "step": start}, "the state loaded")
    for step in range(start + 1, start + count + 1):
        check(ck.save(step, {"rank": rank, "step": step}), f"save {step}")
    copy = os.path.join(disk, f"rank{rank}.ckpt")
    deadline = time.monotonic() + 60
    while then == "wait" and (ck._read_header(copy)[0] is None
                              or ck._read_header(copy)[0].step != start + count):
        check(time.monotonic() < deadline, f"no copy of step {start + count} in {disk}")
        time.sleep(0.02)
    print(f"held {rank} {os.getpid()} {directory}", flush=True)
    if then == "stay":
        signal.pause()
elif mode == "load-pt":
    import torch

    from checkpoint_state import make_state, same

    if ":" in args[1]:  # RANK:STEP, persist's state
        want = dict(zip(("rank", "step"), map(int, args[1].split(":"))))
    else:
        want = PLAIN if args[1] == "plain" else make_state(int(args[1]))
    differs = same(want, torch.load(args[0]))
    check(differs is None, f"{args[0]}: {differs}")
else:
    from checkpoint_state import make_state, same

    if mode == "api":
        pinned()
        round_trips(make_state, same)
        refusals()
        too_big(args[0], make_state, same)
    elif mode == "crash":
        crash(int(args[0]))
    elif mode == "after-crash":
        got = ck.load()
        check(got is not None and got[0] == 2, f"loaded {got and got[0]} after the crash")
        check(same(big_state(2, int(args[0])), got[1]) is None, "step 2 is whole")
    elif mode == "agree":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        for step in (1, 2, 3) if rank == 0 else (1, 2):
            check(ck.save(step, make_state(step)), f"save {step}")
        got = ck.load()
        check(got[0] == 2 and same(make_state(2), got[1]) is None, f"rank {rank} loaded {got[0]}")
        check(rank == 1 or slots() == [(0, 3), (2, 2)], f"rank 0's slots: {slots()}")
        dist.destroy_process_group()
    elif mode == "steps":
        check(ck.save(1, make_state(1)) and ck.save(2, make_state(2)), "saves")
    elif mode == "corrupt":
        corrupt(same, make_state)
    else:
        sys.exit(f"unknown mode {mode}")
print(mode, "ok")
