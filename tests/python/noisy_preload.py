"""A module that writes at import, through Python and straight to the descriptors, the
last line without its newline: what the zygote writes of it is logged by the launcher
("warm restarts: zygote: ..."), not written bare among the workers' lines."""
import os

print("noisy_preload: a line on stdout")
os.write(2, b"noisy_preload: a line on stderr\nnoisy_preload: no newline")
