"""python -m ddp_launch ARGS: run the launcher with ARGS (exec: its pid, its exit status).

Also, for build scripts: --include-dir, --library-dir, --pkgconfig-dir print one path.
"""
import os
import sys

import ddp_launch

_PATHS = {
    "--include-dir": ddp_launch.get_include,
    "--library-dir": ddp_launch.get_library_dir,
    "--pkgconfig-dir": ddp_launch.get_pkgconfig_dir,
}


def main():
    if len(sys.argv) == 2 and sys.argv[1] in _PATHS:
        print(_PATHS[sys.argv[1]]())
        return 0
    try:
        launcher = ddp_launch.get_launcher()
    except FileNotFoundError as err:
        print(f"python -m ddp_launch: {err}", file=sys.stderr)
        return 127
    sys.stdout.flush()
    os.execv(launcher, ["ddp-launch", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
