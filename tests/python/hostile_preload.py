"""A --preload module that changes at import what a process passes on to its children, for
the warm-restart tests: it closes stdout and stderr, ignores SIGTERM, handles SIGUSR1,
blocks SIGUSR2 and sets the umask to 077. None of it may reach a worker forked from the
zygote, which must be what a cold worker is."""
import os
import signal

os.close(1)
os.close(2)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGUSR1, lambda signum, frame: None)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
os.umask(0o077)
