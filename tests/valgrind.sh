#!/bin/sh
# The wrapper of `meson test --setup valgrind`: unit test binaries run under memcheck;
# integration test binaries run directly (valgrind lacks pidfd_open, which the harness
# waits with) and put the launcher itself under memcheck through DDP_TEST_WRAPPER.
case "$(basename "$1")" in
itest_*) exec "$@" ;;
*) exec $DDP_TEST_WRAPPER "$@" ;;
esac
