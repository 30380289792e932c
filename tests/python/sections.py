"""Sections as real programs use them, for --hang-timeout=auto: sections.py MODE

overlap: two threads' sections overlap without nesting (A enters "a", B enters "b", A
  leaves, B leaves), then 100 steps of 25 ms; prints "done".
names: sections whose names are cut mid-character (twelve "é", 24 bytes) or hold a
  terminal's escape ("\\x1b[31mred"), each ended once; then "\\x1b[31mred" again, which
  never ends (prints "entered" first).
"""
import sys
import threading
import time

import ddp_launch

mode = sys.argv[1]
ddp_launch.step()
if mode == "overlap":
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with ddp_launch.section("a"):
            a_in.set()
            b_in.wait()
        a_out.set()

    def second():
        a_in.wait()
        with ddp_launch.section("b"):
            b_in.set()
            a_out.wait()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(100):
        time.sleep(0.025)
        ddp_launch.step()
    print("done", flush=True)
else:
    with ddp_launch.section("\u00e9" * 12):
        pass
    with ddp_launch.section("\x1b[31mred"):
        pass
    with ddp_launch.section("\x1b[31mred"):
        print("entered", flush=True)
        time.sleep(600)
