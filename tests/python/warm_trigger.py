"""The go of the warm-restart tests' failing rank: the file WARM_TRIGGER names, which the
test makes once the launcher's zygote is ready (a restart before that would start cold)."""
import os
import time


def wait_for_trigger():
    """Returns once the file exists, at most 120 s (at once where WARM_TRIGGER is unset)."""
    path = os.environ.get("WARM_TRIGGER")
    deadline = time.monotonic() + 120
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
