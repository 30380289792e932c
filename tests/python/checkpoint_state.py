"""The checkpoint tests' states: a small model's and its optimizer's state_dict after a few
steps, deterministic for a step number, and a bit-for-bit comparison of two states.

make_state(step): {"model": ..., "optim": ..., "step": step, "rng": a generator's state,
  "extra": a list of a tuple and a float, a shared tensor twice (one storage)}
same(a, b): None when a and b hold the same values (tensors: the same dtype, shape, device
  and bytes), else a line saying where they differ.
"""
import torch


def make_state(step, hidden=16):
    torch.manual_seed(1000 + step)
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 4), torch.nn.BatchNorm1d(4))
    optim = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(2):
        optim.zero_grad()
        model(torch.randn(5, 8)).square().mean().backward()
        optim.step()
    shared = torch.arange(6, dtype=torch.int64)
    return {"model": model.state_dict(), "optim": optim.state_dict(), "step": step,
            "rng": torch.Generator().manual_seed(step).get_state(),
            "extra": [("half", torch.ones(3, dtype=torch.float16)), 0.5, shared, shared[2:]]}


def same(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return f"{where}: a tensor and a {type(b).__name__}"
        if (a.dtype, a.shape, a.device) != (b.dtype, b.shape, b.device):
            return f"{where}: {a.dtype} {tuple(a.shape)} on {a.device}, {b.dtype} " \
                   f"{tuple(b.shape)} on {b.device}"
        if a.cpu().contiguous().numpy().tobytes() != b.cpu().contiguous().numpy().tobytes():
            return f"{where}: other bytes"
        return None
    if type(a) is not type(b):
        return f"{where}: a {type(a).__name__} and a {type(b).__name__}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{where}: keys {list(a)} and {list(b)}"
        return next((d for d in (same(a[k], b[k], f"{where}[{k!r}]") for k in a) if d), None)
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: {len(a)} and {len(b)} items"
        return next((d for d in (same(x, y, f"{where}[{i}]") for i, (x, y) in
                                 enumerate(zip(a, b))) if d), None)
    return None if a == b else f"{where}: {a!r} and {b!r}"
