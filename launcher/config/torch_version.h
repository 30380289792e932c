/* Which torch a Python worker will import, read from files without running Python.
 *
 * The launcher decides from it what torchrun of that torch would set (the legacy
 * NCCL_ASYNC_ERROR_HANDLING only for torch < 2.2). It looks where the interpreter
 * would: PYTHONPATH, a venv's site-packages, the user's site, then the prefix's
 * site-packages and Debian's dist-packages, and reads torch/version.py in the first
 * that has torch. A few stats and one small read, once at start-up; nothing here runs
 * Python or blocks on anything but local files. */
#ifndef DDP_LAUNCHER_CONFIG_TORCH_VERSION_H
#define DDP_LAUNCHER_CONFIG_TORCH_VERSION_H

#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>

/* A torch version as major * 1000 + minor (2.11 is 2011); 0: unknown. */
#define DDP_TORCH_VERSION(major, minor) ((major)*1000 + (minor))

/* The version of the torch that `python` (a path to the interpreter, as found on PATH,
 * not resolved: a venv's bin/python3 is a link out of the venv) imports, given
 * `pythonpath` and `home` (either may be NULL): 0 where it is not found or its version
 * cannot be read (a wrapper script, a torch without version.py). `where` (cap bytes, may
 * be NULL) gets the version file read, or "". */
int ddp_torch_version(const char *python, const char *pythonpath, const char *home, char *where,
                      size_t cap);

/* Whether `python` (as above) finds package `package` (a folder) in the same places. */
bool ddp_python_has_package(const char *python, const char *pythonpath, const char *home,
                            const char *package);

/* "2.11.0+cu130" (a version.py's __version__) as DDP_TORCH_VERSION, or 0. Pure. */
int ddp_torch_parse_version(const char *text);

/* The torch the workers of `cfg` import, where they run Python (not --no-python): their
 * interpreter found on `envp`'s PATH, its PYTHONPATH and HOME; 0 where unknown. `where`
 * (cap bytes) gets its version file or "". */
int ddp_torch_version_of_workers(const ddp_launch_config_t *cfg, char *const *envp, char *where,
                                 size_t cap);

#endif
