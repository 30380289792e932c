/* Strict parsers for text from outside: flags, environment variables, config values.
 *
 * Every parser accepts the whole string or nothing (no trailing junk, no empty input,
 * no silent overflow) and writes its out-parameter only on success. Pure functions. */
#ifndef DDP_COMMON_PARSE_H
#define DDP_COMMON_PARSE_H

#include <stdbool.h>
#include <stddef.h>

/* A decimal integer in [min, max]. Returns 0, DDP_EPARSE, or -ERANGE when outside. */
int ddp_parse_long(const char *text, long min, long max, long *out);

/* A finite decimal number in [min, max]. Returns 0, DDP_EPARSE or -ERANGE. */
int ddp_parse_double(const char *text, double min, double max, double *out);

/* "1"/"0", "true"/"false", "yes"/"no", "on"/"off" (any case). 0 or DDP_EPARSE. */
int ddp_parse_bool(const char *text, bool *out);

/* Splits "host", "host:port", "[v6addr]" or "[v6addr]:port" (also a bare IPv6 address
 * without brackets, which then has no port). `host` receives the host without brackets;
 * `*port` is left as `default_port` when none is given. Ports are 0..65535.
 * Returns 0, DDP_EPARSE (empty host, bad brackets, bad port, several colons or brackets
 * around what is not an IPv6 address, "%zone" after it or not, a host of other than letters,
 * digits, '-', '.' and '_': "user@host", a path) or -ENAMETOOLONG. */
int ddp_parse_host_port(const char *text, int default_port, char *host, size_t host_cap, int *port);

/* Its inverse, for messages and connections: "host:port", or "[host]:port" where the host is
 * an IPv6 address (it holds a colon), into out (cut at cap). */
void ddp_host_port_text(char *out, size_t cap, const char *host, int port);

#endif
