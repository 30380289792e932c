"""torch.save's format as common/torchzip.c writes it, read by torch.load:
checkpoint_torchzip.py MODE ARGS

records DIR: torch.save of checkpoint_state.make_state(7) into memory, its records (without
  torch's own version record) into DIR: DIR/index has a line "NAME FILE" a record, FILE its
  bytes in DIR; prints "records N".
load FILE...: torch.load of each FILE (torch's defaults: weights_only in 2.6) equals
  make_state(7) bit for bit; prints "loaded FILE" for each.
"""
import io
import os
import sys
import zipfile

import torch

from checkpoint_state import make_state, same

mode, args = sys.argv[1], sys.argv[2:]
if mode == "records":
    out = args[0]
    buf = io.BytesIO()
    torch.save(make_state(7), buf)
    names = []
    with zipfile.ZipFile(buf) as z:
        for info in z.infolist():
            name = info.filename.split("/", 1)[1]
            if name in ("version", ".data/version", ".data/serialization_id"):
                continue  # the writer's own
            names.append(name)
            with open(os.path.join(out, f"r{len(names)}"), "wb") as f:
                f.write(z.read(info))
    with open(os.path.join(out, "index"), "w") as f:
        f.writelines(f"{name} r{i + 1}\n" for i, name in enumerate(names))
    print("records", len(names))
elif mode == "load":
    want = make_state(7)
    for path in args:
        differs = same(want, torch.load(path))
        if differs:
            sys.exit(f"{path}: {differs}")
        print("loaded", path)
else:
    sys.exit(f"unknown mode {mode}")
