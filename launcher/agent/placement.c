/* Where the job's store is (see agent/placement.h): etcd's election, this launcher's
 * coordinator where it is elected, the rejoin after the job's store is lost. Runs on the
 * loop thread. */
#include "agent/placement.h"

#include "error.h"
#include "parse.h"
#include "rdzv/coord.h"
#include "rdzv/etcd_client.h"
#include "rdzv/etcd_place.h"
#include "rdzv/rdzv.h"
#include "store/server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

struct ddp_placement_s {
    ddp_group_t *g;
    const ddp_launch_config_t *given; /* the caller's */
    ddp_launch_config_t placed;       /* etcd: the copy the agent runs with */
    ddp_etcd_place_t *place;
    ddp_store_server_t *idle_store; /* our own store, kept listening while another serves */
    char own_addr[DDP_HOST_MAX];    /* where it listens */
    /* The job's store was lost: this node's workers stop, and a new rendezvous thread
     * joins the next elected launcher's store once both are done (ddp_placement_rejoin). */
    bool relocating, relocated;
    ddp_rdzv_t **retired; /* the threads of the stores lost, freed at the end */
    size_t nretired;
    ddp_store_server_t *left_store; /* the job's, left: closed once etcd's side is */
    ddp_etcd_place_t *closing;      /* etcd's side, closing */
    void (*closed)(void *ctx);      /* told once it has */
    void *closed_ctx;
};

int ddp_placement_new(ddp_group_t *g, const ddp_launch_config_t *cfg, ddp_placement_t **out)
{
    ddp_placement_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -ENOMEM;
    p->g = g;
    p->given = cfg;
    if (cfg->rdzv_backend == DDP_RDZV_ETCD)
        p->placed = *cfg; /* (a copy: its pointers stay the caller's) */
    *out = p;
    return 0;
}

const ddp_launch_config_t *ddp_placement_cfg(const ddp_placement_t *p)
{
    return p->given->rdzv_backend == DDP_RDZV_ETCD ? &p->placed : p->given;
}

void ddp_placement_rejoin(ddp_placement_t *p)
{
    ddp_group_t *g = p->g;
    if (!p->relocating || !p->relocated || g->state != DDP_AGENT_WAITING)
        return;
    ddp_rdzv_t **grown = realloc(p->retired, (p->nretired + 1) * sizeof *grown);
    if (grown == NULL) {
        ddp_log_error(g->log, "out of memory");
        g->ops->end_job(g, DDP_EXIT_RDZV_FAILED);
        return;
    }
    p->retired = grown;
    ddp_rdzv_close(g->rdzv);
    p->retired[p->nretired++] = g->rdzv;
    g->rdzv = NULL;
    p->relocating = p->relocated = false;
    g->ops->start_rendezvous(g);
}

/* The event log's line on where the job's store is: store_placed (`own`: this launcher
 * serves it; after_loss: a lost store's successor) or store_lost (`why`). */
static void store_event(ddp_placement_t *p, const char *name, bool own, const char *why)
{
    ddp_buf_t fields = DDP_BUF_INIT;
    char store[DDP_HOST_MAX + 16];
    ddp_host_port_text(store, sizeof store, p->placed.master_addr, p->placed.master_port);
    ddp_events_str(&fields, "store", store);
    if (why == NULL)
        ddp_buf_printf(&fields, ", \"elected\": %s, \"after_loss\": %s", own ? "true" : "false",
                       p->relocating ? "true" : "false");
    else
        ddp_events_str(&fields, "reason", why);
    ddp_events_emit(&p->g->events, name, &fields);
    ddp_buf_free(&fields);
}

void ddp_placement_store_lost(ddp_placement_t *p, const char *message, bool unanswered)
{
    ddp_group_t *g = p->g;
    ddp_log_warn(g->log, "%s: the job goes on at the store of the launcher etcd elects next",
                 message);
    store_event(p, "store_lost", false, message);
    p->relocating = true;
    p->relocated = false;
    ddp_etcd_place_lost(p->place, unanswered);
    if (g->state == DDP_AGENT_RUNNING && g->nrunning > 0)
        g->ops->stop(g, SIGTERM, DDP_STOP_REMOTE);
    else
        ddp_placement_rejoin(p);
}

static void on_place_failed(void *ctx, const char *why)
{
    ddp_placement_t *p = ctx;
    ddp_group_t *g = p->g;
    ddp_log_error(g->log, "rendezvous: %s", why);
    if (g->rdzv != NULL) /* the job runs: the others are told, where the store can */
        ddp_rdzv_post_end(g->rdzv, DDP_EXIT_RDZV_FAILED, why);
    g->ops->end_job(g, DDP_EXIT_RDZV_FAILED);
}

static void on_place_deposed(void *ctx, const char *why)
{
    ddp_placement_t *p = ctx;
    ddp_log_error(p->g->log, "rendezvous: %s", why);
    p->g->ops->leave_job(p->g, DDP_EXIT_RDZV_FAILED);
}

/* No worker of this launcher runs a round: the job forms (or re-forms) here. */
static bool on_forming(void *ctx)
{
    const ddp_placement_t *p = ctx;
    return p->g->state == DDP_AGENT_WAITING || p->g->state == DDP_AGENT_CHECKING;
}

static void on_round_formed(void *ctx, const char *record)
{
    ddp_placement_t *p = ctx;
    ddp_etcd_place_record(p->place, record);
}

/* Elected: the coordinator at once (after a loss, the others may come before this node's
 * workers have stopped), resuming the job's last round where etcd has one; each round's
 * record goes to etcd. 0, or the failure said. */
static int coordinate(ddp_placement_t *p, const char *last_round)
{
    ddp_group_t *g = p->g;
    char id[DDP_RDZV_ID_MAX];
    ddp_rdzv_launcher_id(id, g->host);
    if (g->store == NULL) {
        g->store = p->idle_store;
        p->idle_store = NULL;
    }
    snprintf(p->placed.master_addr, sizeof p->placed.master_addr, "%s", p->own_addr);
    p->placed.master_port = g->store_port;
    int err = ddp_rdzv_coord_start(g->loop, g->store, g->cfg, g->log, id, &g->coord);
    if (err == 0 && last_round != NULL &&
        (err = ddp_rdzv_coord_resume_from(g->coord, last_round)) != 0)
        ddp_log_warn(g->log,
                     "etcd: the job's round record '%.200s' is not ddp-launch's: the "
                     "job starts over from round 0",
                     last_round);
    if (err == -ENOMEM || (err != 0 && g->coord == NULL)) {
        char why[200];
        snprintf(why, sizeof why, "unable to start the rendezvous coordinator: %s",
                 ddp_strerror(err));
        on_place_failed(p, why);
        return err;
    }
    ddp_rdzv_coord_on_formed(g->coord, on_round_formed, p);
    return 0;
}

/* etcd has elected a launcher: where it is not this one, our store stands aside (still
 * listening, for the next election), and the job's is the elected one's. */
static void on_placed(void *ctx, bool own, const char *host, int port, const char *last_round)
{
    ddp_placement_t *p = ctx;
    ddp_group_t *g = p->g;
    if (own && coordinate(p, last_round) != 0)
        return;
    if (!own) {
        if (g->store != NULL) {
            p->idle_store = g->store;
            g->store = NULL;
        }
        snprintf(p->placed.master_addr, sizeof p->placed.master_addr, "%s", host);
        p->placed.master_port = port;
    }
    store_event(p, "store_placed", own, NULL);
    if (!p->relocating) {
        g->ops->start_rendezvous(g);
        return;
    }
    p->relocated = true; /* this node's own thread joins once its workers have stopped */
    ddp_placement_rejoin(p);
}

void ddp_placement_start(ddp_placement_t *p)
{
    static const ddp_etcd_place_cbs_t cbs = {on_placed, on_place_failed, on_place_deposed,
                                             on_forming};
    ddp_group_t *g = p->g;
    char id[DDP_RDZV_ID_MAX];
    ddp_buf_t why = DDP_BUF_INIT;
    ddp_rdzv_launcher_id(id, g->host);
    snprintf(p->own_addr, sizeof p->own_addr, "%s", g->cfg->master_addr);
    int err = ddp_etcd_place_start(g->loop, g->cfg, g->log, id, g->cfg->master_addr, g->store_port,
                                   &cbs, p, &p->place, &why);
    if (err != 0) {
        ddp_buf_t at = DDP_BUF_INIT;
        (void)ddp_etcd_endpoints_text(&at, (const char *const *)g->cfg->etcd.endpoints,
                                      g->cfg->etcd.nendpoints);
        ddp_log_error(g->log, "rendezvous: unable to use etcd at %s: %s", ddp_buf_str(&at),
                      err == -ENOMEM ? "out of memory" : ddp_buf_str(&why));
        ddp_buf_free(&at);
        g->ops->end_job(g, DDP_EXIT_RDZV_FAILED);
    }
    ddp_buf_free(&why);
}

static void on_etcd_closed(void *ctx)
{
    ddp_placement_t *p = ctx;
    p->closing = NULL;
    ddp_store_server_close(p->left_store);
    p->left_store = NULL;
    if (p->closed != NULL)
        p->closed(p->closed_ctx);
}

void ddp_placement_close(ddp_placement_t *p, bool leaving, void (*closed)(void *ctx), void *ctx)
{
    if (p == NULL)
        return;
    if (leaving) {
        p->left_store = p->g->store;
        p->g->store = NULL;
    }
    p->closed = closed;
    p->closed_ctx = ctx;
    p->closing = p->place;
    p->place = NULL;
    ddp_store_server_close(p->idle_store);
    p->idle_store = NULL;
    ddp_etcd_place_close(p->closing, leaving, on_etcd_closed, p);
}

void ddp_placement_abandon(ddp_placement_t *p)
{
    if (p != NULL)
        ddp_etcd_place_abandon(p->closing);
}

void ddp_placement_free(ddp_placement_t *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->nretired; i++)
        ddp_rdzv_free(p->retired[i]);
    free(p->retired);
    free(p);
}
