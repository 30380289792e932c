/* Addresses as other machines see them (see netaddr.h). */
#include "netaddr.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool ddp_addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    return sa->sa_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

bool ddp_host_is_literal(const char *host, bool *loopback)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    bool literal = true, lo = true;
    if (strcasecmp(host, "localhost") == 0)
        lo = true;
    else if (inet_pton(AF_INET, host, &v4.sin_addr) == 1)
        lo = ddp_addr_is_loopback((const struct sockaddr *)&v4);
    else if (inet_pton(AF_INET6, host, &v6.sin6_addr) == 1)
        lo = ddp_addr_is_loopback((const struct sockaddr *)&v6);
    else
        literal = lo = false;
    if (loopback != NULL)
        *loopback = lo;
    return literal;
}

static bool numeric(const struct sockaddr *sa, char *addr, size_t cap)
{
    socklen_t len =
        sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    return getnameinfo(sa, len, addr, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) == 0;
}

bool ddp_addrinfo_loopback(const struct addrinfo *all)
{
    for (const struct addrinfo *ai = all; ai != NULL; ai = ai->ai_next)
        if (!ddp_addr_is_loopback(ai->ai_addr))
            return false;
    return all != NULL;
}

bool ddp_name_is_loopback_here(const char *host, char *addr, size_t cap)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *all = NULL;
    if (getaddrinfo(host, NULL, &hints, &all) != 0)
        return false;
    bool loopback = ddp_addrinfo_loopback(all);
    if (loopback && !numeric(all->ai_addr, addr, cap))
        snprintf(addr, cap, "?");
    freeaddrinfo(all);
    return loopback;
}

/* Whether `spec` (see ddp_interface_selected) selects the interface `name`. */
static bool selects(const char *spec, const char *name)
{
    bool except = *spec == '^', listed = false;
    for (const char *p = spec + except; *p != '\0' && !listed;) {
        size_t len = strcspn(p, ",");
        bool exact = *p == '=';
        const char *want = p + exact;
        size_t wlen = len - exact;
        listed = wlen > 0 && strncmp(name, want, wlen) == 0 && (!exact || name[wlen] == '\0');
        p += len + (p[len] == ',');
    }
    return listed != except;
}

/* The first such address of `family`, of an interface `spec` selects (NULL: any but
 * loopback ones). */
static bool first_of(const struct ifaddrs *all, int family, const char *spec, char *addr,
                     size_t cap, char *ifname, size_t ifcap)
{
    for (const struct ifaddrs *i = all; i != NULL; i = i->ifa_next) {
        const struct sockaddr *sa = i->ifa_addr;
        if (sa == NULL || sa->sa_family != family || !(i->ifa_flags & IFF_UP) ||
            (spec == NULL && ((i->ifa_flags & IFF_LOOPBACK) || ddp_addr_is_loopback(sa))) ||
            (spec != NULL && !selects(spec, i->ifa_name)) ||
            (family == AF_INET6 &&
             IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr)) ||
            !numeric(sa, addr, cap))
            continue;
        if (ifname != NULL)
            snprintf(ifname, ifcap, "%s", i->ifa_name);
        return true;
    }
    return false;
}

bool ddp_interface_address(char *addr, size_t cap, char *ifname, size_t ifcap)
{
    return ddp_interface_selected(NULL, addr, cap, ifname, ifcap);
}

bool ddp_interface_selected(const char *spec, char *addr, size_t cap, char *ifname, size_t ifcap)
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0)
        return false;
    bool found = first_of(all, AF_INET, spec, addr, cap, ifname, ifcap) ||
                 first_of(all, AF_INET6, spec, addr, cap, ifname, ifcap);
    freeifaddrs(all);
    return found;
}

bool ddp_host_numeric(const char *host, char *addr, size_t cap)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *all = NULL;
    if (getaddrinfo(host, NULL, &hints, &all) != 0)
        return false;
    bool ok = numeric(all->ai_addr, addr, cap);
    freeaddrinfo(all);
    return ok;
}
