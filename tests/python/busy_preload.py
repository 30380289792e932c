"""A --preload module whose import keeps a CPU busy until the file WARM_TRIGGER.rest exists
(at most 120 s; at once where WARM_TRIGGER is unset), for the test of a zygote that must
take no CPU from the first attempt's busy workers."""
import os
import time

_trigger = os.environ.get("WARM_TRIGGER")
_deadline = time.monotonic() + 120
while _trigger and not os.path.exists(_trigger + ".rest") and time.monotonic() < _deadline:
    pass
