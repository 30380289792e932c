/* Addresses as other machines see them: loopback told apart, and this machine's first
 * interface address, for where a name resolves to loopback alone (Debian's /etc/hosts
 * gives a machine's own name 127.0.1.1) while other nodes need to reach it. */
#ifndef DDP_COMMON_NETADDR_H
#define DDP_COMMON_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Whether `sa` is a loopback address (127.0.0.0/8, ::1). */
bool ddp_addr_is_loopback(const struct sockaddr *sa);

/* Whether every address of a resolved list is loopback (an empty list is not). */
struct addrinfo;
bool ddp_addrinfo_loopback(const struct addrinfo *all);

/* Whether `host` is "localhost" or a numeric address (none: a name); *loopback then says
 * whether it is a loopback one (may be NULL). */
bool ddp_host_is_literal(const char *host, bool *loopback);

/* Whether `host`, a name, resolves here to loopback addresses alone; the first is written
 * to addr[cap] (numeric). False where it does not resolve. */
bool ddp_name_is_loopback_here(const char *host, char *addr, size_t cap);

/* This machine's first up, non-loopback interface address, IPv4 else IPv6 (not
 * link-local), numeric in addr[cap] and its interface's name in ifname[ifcap] (may be
 * NULL); false where there is none. */
bool ddp_interface_address(char *addr, size_t cap, char *ifname, size_t ifcap);

/* The same, of an interface `spec` selects, as NCCL_SOCKET_IFNAME does: name prefixes,
 * comma-separated ("=NAME": that name exactly), all but those where `spec` begins with
 * "^". A loopback interface too, where selected; NULL: as ddp_interface_address. */
bool ddp_interface_selected(const char *spec, char *addr, size_t cap, char *ifname, size_t ifcap);

/* The first address `host` (a name or an address) resolves to, numeric in addr[cap]; false
 * where it does not resolve. */
bool ddp_host_numeric(const char *host, char *addr, size_t cap);

#endif
