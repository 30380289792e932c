"""Checks train_fashion.py's choice of device for GPU counts this machine may not have.

Run with the flavour's python (it imports torch, as the example does); prints
"device choice ok" or fails with the case that went wrong.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch"))
import train_fashion  # noqa: E402

choose = train_fashion.choose_device
# auto: GPUs only where every local rank has one.
assert choose("auto", 0, 2, True, 2) == ("cuda", None)
assert choose("auto", 1, 2, True, 8) == ("cuda", None)
kind, why = choose("auto", 0, 2, True, 1)
assert kind == "cpu" and "2 workers on this node but 1 GPU(s)" in why, why
assert choose("auto", 0, 2, False, 0) == ("cpu", None)
assert choose("cpu", 0, 2, True, 2) == ("cpu", None)
# cuda: an error naming the shortfall, not "invalid device ordinal" later.
try:
    choose("cuda", 1, 2, True, 1)
    raise AssertionError("--device=cuda with 1 GPU for 2 workers was accepted")
except SystemExit as e:
    assert "needs a GPU per worker: local rank 1 of 2 workers, 1 GPU(s)" in str(e), e
assert choose("cuda", 0, 2, True, 2) == ("cuda", None)
print("device choice ok")
