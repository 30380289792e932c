/* Strict text parsers (see parse.h). */
#include "parse.h"

#include "error.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int ddp_parse_long(const char *text, long min, long max, long *out)
{
    if (text == NULL || *text == '\0' || isspace((unsigned char)*text))
        return DDP_EPARSE;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (*end != '\0')
        return DDP_EPARSE;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int ddp_parse_double(const char *text, double min, double max, double *out)
{
    if (text == NULL || *text == '\0' || isspace((unsigned char)*text))
        return DDP_EPARSE;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (*end != '\0' || !isfinite(v))
        return DDP_EPARSE;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int ddp_parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return DDP_EPARSE;
}

/* Whether text[0..len) is an IPv6 address, a zone (%eth0) after it or not. */
static bool is_ipv6(const char *text, size_t len)
{
    char addr[INET6_ADDRSTRLEN];
    struct in6_addr parsed;
    const char *zone = memchr(text, '%', len);
    size_t addr_len = zone != NULL ? (size_t)(zone - text) : len;
    if (addr_len >= sizeof addr || (zone != NULL && zone + 1 == text + len))
        return false;
    memcpy(addr, text, addr_len);
    addr[addr_len] = '\0';
    return inet_pton(AF_INET6, addr, &parsed) == 1;
}

/* Whether text[0..len) is a host name or an IPv4 address: letters, digits, '-', '.', '_'. */
static bool is_host_name(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)text[i]) && strchr("-._", text[i]) == NULL)
            return false;
    return true;
}

int ddp_parse_host_port(const char *text, int default_port, char *host, size_t host_cap, int *port)
{
    const char *host_start = text, *host_end, *port_text = NULL;
    if (text[0] == '[') {
        host_start = text + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL || !is_ipv6(host_start, (size_t)(host_end - host_start)))
            return DDP_EPARSE;
        if (host_end[1] == ':')
            port_text = host_end + 2;
        else if (host_end[1] != '\0')
            return DDP_EPARSE;
    } else {
        const char *colon = strchr(text, ':');
        if (colon != NULL && strchr(colon + 1, ':') != NULL) {
            /* Several colons and no brackets: an IPv6 address without a port, or nothing
             * (a URL, a HOST:PORT:PORT). */
            host_end = text + strlen(text);
            if (!is_ipv6(text, (size_t)(host_end - text)))
                return DDP_EPARSE;
        } else if (colon != NULL) {
            host_end = colon;
            port_text = colon + 1;
        } else {
            host_end = text + strlen(text);
        }
    }
    size_t host_len = (size_t)(host_end - host_start);
    if (host_len == 0)
        return DDP_EPARSE;
    if (host_start == text && !is_ipv6(text, host_len) && !is_host_name(text, host_len))
        return DDP_EPARSE; /* ("user@host", a path: no name's) */
    if (host_len >= host_cap)
        return -ENAMETOOLONG;
    long port_value = default_port;
    if (port_text != NULL) {
        int err = ddp_parse_long(port_text, 0, 65535, &port_value);
        if (err)
            return DDP_EPARSE;
    }
    memcpy(host, host_start, host_len);
    host[host_len] = '\0';
    *port = (int)port_value;
    return 0;
}

void ddp_host_port_text(char *out, size_t cap, const char *host, int port)
{
    snprintf(out, cap, strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host, port);
}
