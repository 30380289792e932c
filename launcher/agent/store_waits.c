/* Long waits in the store (--store-wait-notice; see agent/store_waits.h): a worker blocked
 * in a WAIT for a key nobody has set (a peer's address in init_process_group, say) is
 * named once the wait passes the notice, with the ranks of this node that do not wait:
 * the ones that have not reached the call that sets it. Said again only when the oldest
 * wait has grown NOTICE_GROWTH-fold, or a new one has replaced it. Runs on the loop
 * thread of the launcher that serves the store; costs nothing while nobody waits long. */
#include "agent/store_waits.h"

#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOOK_MAX_S    5.0 /* the longest time between two looks */
#define WAITS_SEEN    64  /* long waits looked at */
#define KEYS_SHOWN    3   /* distinct keys named in one notice */
#define RANKS_SHOWN   8   /* ranks named in one list */
#define HOSTS_SHOWN   4   /* addresses of other clients named in one line */
#define NOTICE_GROWTH 5.0 /* the oldest wait's growth that is said again */
#define NET_TABLE_MAX (64 << 20)

struct ddp_store_waits_s {
    ddp_group_t *g;
    uv_timer_t timer; /* the looks */
    /* The age of the oldest wait the last notice named (0: none since the long waits
     * last ended). */
    double noted;
};

int ddp_store_waits_new(ddp_group_t *g, ddp_store_waits_t **out)
{
    ddp_store_waits_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        return -ENOMEM;
    w->g = g;
    uv_timer_init(g->loop, &w->timer);
    w->timer.data = w;
    *out = w;
    return 0;
}

void ddp_store_waits_close(ddp_store_waits_t *w)
{
    uv_close((uv_handle_t *)&w->timer, NULL);
}

void ddp_store_waits_free(ddp_store_waits_t *w)
{
    free(w);
}

void ddp_store_waits_stop(ddp_store_waits_t *w)
{
    uv_timer_stop(&w->timer);
}

/* The peer's address as /proc/net/tcp{,6} shows a local one: 8 or 32 hex digits, each
 * 32-bit word as the kernel holds it; an IPv4-mapped IPv6 peer as its IPv4 address. */
static void peer_words(const struct sockaddr_storage *peer, uint32_t words[4], int *nwords,
                       unsigned *port)
{
    if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
        memcpy(words, &in6->sin6_addr, 16);
        *port = ntohs(in6->sin6_port);
        *nwords = 4;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            words[0] = words[3];
            *nwords = 1;
        }
    } else {
        const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
        words[0] = in->sin_addr.s_addr;
        *port = ntohs(in->sin_port);
        *nwords = 1;
    }
}

/* inodes[i]: the socket inode of waits[i]'s client where it is a socket of this machine
 * (its address and port local in the kernel's table), else 0. */
static void client_inodes(const ddp_store_long_wait_t *waits, size_t n, unsigned long *inodes)
{
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    uint32_t want[WAITS_SEEN][4];
    int nwant[WAITS_SEEN];
    unsigned want_port[WAITS_SEEN];
    for (size_t i = 0; i < n && i < WAITS_SEEN; i++)
        peer_words(&waits[i].peer, want[i], &nwant[i], &want_port[i]);
    for (size_t t = 0; t < 2; t++) {
        char *text = NULL;
        size_t len;
        if (ddp_read_file(tables[t], NET_TABLE_MAX, &text, &len) != 0)
            continue;
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            char hex[40];
            unsigned port;
            unsigned long inode;
            if (sscanf(line, " %*u: %39[0-9A-Fa-f]:%x %*s %*s %*s %*s %*s %*s %*s %lu", hex, &port,
                       &inode) != 3)
                continue;
            int nwords = strlen(hex) == 32 ? 4 : strlen(hex) == 8 ? 1 : 0;
            uint32_t words[4];
            for (int k = 0; k < nwords; k++) {
                char word[9];
                memcpy(word, hex + 8 * k, 8);
                word[8] = '\0';
                words[k] = (uint32_t)strtoul(word, NULL, 16);
            }
            /* An IPv4 socket of a dual-stack IPv6 one shows as ::ffff:a.b.c.d. */
            if (nwords == 4 && words[0] == 0 && words[1] == 0 && words[2] == htonl(0xffff)) {
                words[0] = words[3];
                nwords = 1;
            }
            for (size_t i = 0; i < n && i < WAITS_SEEN && nwords > 0; i++)
                if (inodes[i] == 0 && want_port[i] == port && nwant[i] == nwords &&
                    memcmp(want[i], words, (size_t)nwords * 4) == 0)
                    inodes[i] = inode;
        }
        free(text);
    }
}

/* who[i]: the index of the running worker holding waits[i]'s client socket, or -1. */
static void identify(const ddp_group_t *g, const ddp_store_long_wait_t *waits, size_t n, int *who)
{
    unsigned long inodes[WAITS_SEEN] = {0};
    for (size_t i = 0; i < n; i++)
        who[i] = -1;
    client_inodes(waits, n, inodes);
    for (int k = 0; k < g->nworkers; k++) {
        const ddp_worker_t *w = &g->workers[k];
        char dir[64], path[PATH_MAX], link[64];
        if (!w->running)
            continue;
        snprintf(dir, sizeof dir, "/proc/%d/fd", (int)w->pid);
        DIR *fds = opendir(dir);
        struct dirent *e;
        while (fds != NULL && (e = readdir(fds)) != NULL) {
            unsigned long inode;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            ssize_t len = readlink(path, link, sizeof link - 1);
            if (len <= 0)
                continue;
            link[len] = '\0';
            if (sscanf(link, "socket:[%lu]", &inode) != 1)
                continue;
            for (size_t i = 0; i < n; i++)
                if (inodes[i] == inode)
                    who[i] = k;
        }
        if (fds != NULL)
            closedir(fds);
    }
}

/* The peer's address into from[*n] where it is not there yet: up to HOSTS_SHOWN, then
 * *more. */
static void note_host(const struct sockaddr_storage *peer, char from[][INET6_ADDRSTRLEN], int *n,
                      bool *more)
{
    char host[INET6_ADDRSTRLEN] = "?";
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
    if (peer->ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
        inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], host, sizeof host); /* as IPv4 */
    else if (peer->ss_family == AF_INET6)
        uv_ip6_name(in6, host, sizeof host);
    else
        uv_ip4_name((const struct sockaddr_in *)peer, host, sizeof host);
    for (int i = 0; i < *n; i++)
        if (strcmp(from[i], host) == 0)
            return;
    if (*n < HOSTS_SHOWN)
        memcpy(from[(*n)++], host, sizeof host);
    else
        *more = true;
}

/* ", rank 3 (pid 77)" for worker k, within the first RANKS_SHOWN of a list. */
static void add_rank(const ddp_group_t *g, int k, int *listed, ddp_buf_t *out)
{
    if ((*listed)++ < RANKS_SHOWN)
        ddp_buf_printf(out, "%srank %d (pid %d)", *listed > 1 ? ", " : "", g->workers[k].rank,
                       (int)g->workers[k].pid);
}

static void say(const ddp_group_t *g, const ddp_store_long_wait_t *waits, size_t n, size_t all)
{
    int who[WAITS_SEEN];
    bool said[WAITS_SEEN] = {false};
    bool *waiting = calloc((size_t)(g->nworkers > 0 ? g->nworkers : 1), sizeof *waiting);
    identify(g, waits, n, who);
    ddp_buf_t line = DDP_BUF_INIT;
    for (size_t i = 0, keys = 0; i < n && keys < KEYS_SHOWN; i++) {
        if (said[i])
            continue;
        keys++;
        int listed = 0, others = 0, hosts = 0;
        bool more_hosts = false;
        char from[HOSTS_SHOWN][INET6_ADDRSTRLEN];
        ddp_buf_clear(&line);
        for (size_t j = i; j < n; j++) {
            if (said[j] || strcmp(waits[j].key, waits[i].key) != 0)
                continue;
            said[j] = true;
            if (who[j] < 0) {
                others++;
                note_host(&waits[j].peer, from, &hosts, &more_hosts);
                continue;
            }
            if (waiting != NULL)
                waiting[who[j]] = true;
            add_rank(g, who[j], &listed, &line);
        }
        if (listed > RANKS_SHOWN)
            ddp_buf_printf(&line, " and %d more", listed - RANKS_SHOWN);
        if (others > 0) {
            ddp_buf_printf(&line, "%s%d client(s) at ", listed ? ", " : "", others);
            for (int h = 0; h < hosts; h++)
                ddp_buf_printf(&line, "%s%s", h ? ", " : "", from[h]);
            if (more_hosts)
                ddp_buf_puts(&line, ", ...");
        }
        ddp_log_warn(g->log, "%s %s waited %.*f s in the store for '%s', which nobody has set yet",
                     ddp_buf_str(&line), listed + others > 1 ? "have" : "has",
                     waits[i].waited < 10 ? 1 : 0, waits[i].waited, waits[i].key);
    }
    /* The ranks of this node not waiting, where every long wait was looked at. */
    int listed = 0;
    ddp_buf_clear(&line);
    for (int k = 0; k < g->nworkers && waiting != NULL && all <= n; k++)
        if (g->workers[k].running && !waiting[k])
            add_rank(g, k, &listed, &line);
    if (listed > RANKS_SHOWN)
        ddp_buf_printf(&line, " and %d more", listed - RANKS_SHOWN);
    if (listed > 0)
        ddp_log_warn(g->log,
                     "not waiting in the store: %s: %s not have reached the call that sets "
                     "the key (init_process_group, say)",
                     ddp_buf_str(&line), listed > 1 ? "they may" : "it may");
    ddp_buf_free(&line);
    free(waiting);
}

static void on_look(uv_timer_t *timer)
{
    ddp_store_waits_t *w = timer->data;
    const ddp_group_t *g = w->g;
    ddp_store_long_wait_t waits[WAITS_SEEN];
    if (g->store == NULL)
        return;
    size_t all =
        ddp_store_server_long_waits(g->store, g->cfg->store_wait_notice, waits, WAITS_SEEN);
    size_t n = all < WAITS_SEEN ? all : WAITS_SEEN;
    if (n == 0) {
        w->noted = 0;
        return;
    }
    double oldest = waits[0].waited;
    if (w->noted > 0 && oldest >= w->noted && oldest < w->noted * NOTICE_GROWTH)
        return;
    w->noted = oldest;
    say(g, waits, n, all);
}

void ddp_store_waits_attempt(ddp_store_waits_t *w)
{
    const ddp_group_t *g = w->g;
    double notice = g->cfg->store_wait_notice;
    w->noted = 0;
    if (g->store == NULL || notice <= 0)
        return;
    double every = notice / 4 < LOOK_MAX_S ? notice / 4 : LOOK_MAX_S;
    uint64_t ms = every * 1000 < 10 ? 10 : (uint64_t)(every * 1000);
    uv_timer_start(&w->timer, on_look, ms, ms);
}
