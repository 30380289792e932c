/* Looking a function up in a library loaded with dlopen, into a typed function pointer:
 * ISO C has no cast between the void * that dlsym returns and a function pointer, so
 * the bytes are copied. Header-only (its users link libdl themselves). */
#ifndef DDP_COMMON_DL_H
#define DDP_COMMON_DL_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* Sets the function pointer at `fn` (`size` bytes) to symbol `name` of `lib`, or NULL;
 * true when the symbol exists. */
static inline bool ddp_dl_symbol(void *lib, const char *name, void *fn, size_t size)
{
    void *sym = dlsym(lib, name);
    memcpy(fn, &sym, size);
    return sym != NULL;
}

#endif
