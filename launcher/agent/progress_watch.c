/* The workers' progress as the launcher looks at it while an attempt runs (see
 * agent/progress_watch.h): straggler reports (--straggler-report; straggler.h) and
 * --hang-timeout=auto, both from the workers' progress rings (ddp_launch.step(),
 * progress.h) or libddp's flight rings, read every tick (a pread of a few KiB a worker).
 *
 * --hang-timeout=auto judges each rank with a ring on its own: outside sections, against
 * AUTO_FACTOR x the longest time between two steps seen so far in the job (after
 * AUTO_WARMUP steps), in a section against AUTO_FACTOR x that section's longest (after it
 * has ended once), a libddp rank against AUTO_FACTOR x the longest gap between two of its
 * collectives; never below --hang-timeout-floor; a phase with nothing learnt yet against
 * AUTO_COLD_S. What is learnt stays for the next attempts, and is written to
 * <run dir>/hang_timeouts.json. */
#include "agent/progress_watch.h"

#include "diagnose/hang.h"
#include "diagnose/straggler.h"
#include "io.h"
#include "json.h"
#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AUTO_FACTOR  5.0
#define AUTO_WARMUP  10
#define AUTO_COLD_S  600.0
#define AUTO_TICK_MS 100
#define IDLE_TICK_MS 30000

/* What --hang-timeout=auto has learnt (kept across attempts). */
typedef struct {
    double step_s; /* the longest time between two steps outside sections */
    int64_t steps; /* the most steps one rank has taken: judged from AUTO_WARMUP on */
    double gap_s;  /* libddp: the longest time between two collectives */
    uint64_t collectives;
    char names[DDP_PROGRESS_SECTIONS][DDP_PROGRESS_NAME];
    double section_s[DDP_PROGRESS_SECTIONS];
    int nsections;
    bool dirty; /* changed since written to <run dir>/hang_timeouts.json */
} ddp_learnt_t;

/* --hang-timeout=auto's view of a worker at the last look. */
typedef struct {
    uint64_t collectives;   /* its flight ring's completed collectives */
    double moved_at;        /* when those last changed (monotonic); 0: not yet */
    int64_t waits_since_ns; /* its progress ring: waiting in a collective since; 0: not */
} watched_t;

struct ddp_progress_watch_s {
    ddp_group_t *g;
    ddp_hang_watch_t *hang;
    const ddp_pause_t *pause;
    uv_timer_t timer;
    watched_t *workers;        /* by local rank */
    ddp_straggler_acc_t *accs; /* each worker's sums over the straggler window */
    ddp_flight_ring_t *rings;  /* a copy of each worker's busiest flight ring, this look */
    bool *has_flight;
    uint64_t common_seq;                                 /* collectives compared for arrivals */
    ddp_straggler_entry_t latest[DDP_STRAGGLER_ENTRIES]; /* the node's last entry a collective */
    double window_start, report_at;
    double learnt_written_at;
    bool straggler_named; /* (store host) one of this node's ranks: it leaves at a restart */
    ddp_learnt_t learnt;
    double tick_limit; /* --hang-timeout=auto: the shortest timeout at the last look (s) */
};

int ddp_progress_watch_new(ddp_group_t *g, ddp_hang_watch_t *hang, const ddp_pause_t *pause,
                           ddp_progress_watch_t **out)
{
    ddp_progress_watch_t *p = calloc(1, sizeof *p);
    if (p == NULL || (p->workers = calloc((size_t)g->nworkers + 1, sizeof *p->workers)) == NULL) {
        free(p);
        return -ENOMEM;
    }
    p->g = g;
    p->hang = hang;
    p->pause = pause;
    uv_timer_init(g->loop, &p->timer);
    p->timer.data = p;
    *out = p;
    return 0;
}

void ddp_progress_watch_close(ddp_progress_watch_t *p)
{
    uv_close((uv_handle_t *)&p->timer, NULL);
}

void ddp_progress_watch_free(ddp_progress_watch_t *p)
{
    if (p == NULL)
        return;
    free(p->accs);
    free(p->rings);
    free(p->has_flight);
    free(p->workers);
    free(p);
}

void ddp_progress_watch_stop(ddp_progress_watch_t *p)
{
    uv_timer_stop(&p->timer);
}

bool ddp_progress_watch_take_straggler(ddp_progress_watch_t *p)
{
    bool named = p->straggler_named;
    p->straggler_named = false;
    return named;
}

/* How often to look: a twentieth of the straggler window, and with --hang-timeout=auto a
 * fifth of the shortest timeout it judged by at the last look (`limit`, s), within
 * 50 ms..1 s: a job of long steps (or of none reported) is looked at once a second. */
static uint64_t tick_ms(const ddp_launch_config_t *cfg, double limit)
{
    double ms = cfg->straggler_report > 0 ? cfg->straggler_report * 1000 / 20 : 1000;
    if (cfg->hang_auto && limit * 1000 / 5 < ms)
        ms = limit * 1000 / 5;
    return ms < 50 ? 50 : ms > 1000 ? 1000 : (uint64_t)ms;
}

/* The next look's delay after one at `ms`: while no worker has a ring (it may never have
 * one: a program that reports nothing), twice as late each time up to IDLE_TICK_MS, so
 * that such a job costs next to nothing (a look is a wakeup and a few system calls a
 * worker: at 1024 simulated nodes, as much CPU again as their heartbeats); with one, as
 * often as tick_ms says. */
static uint64_t next_tick_ms(const ddp_progress_watch_t *p, bool rings, uint64_t ms)
{
    if (rings)
        return tick_ms(p->g->cfg, p->tick_limit);
    return ms >= IDLE_TICK_MS / 2 ? IDLE_TICK_MS : 2 * ms;
}

static double auto_limit(const ddp_progress_watch_t *p, double longest)
{
    double limit = AUTO_FACTOR * longest;
    return limit < p->g->cfg->hang_floor ? p->g->cfg->hang_floor : limit;
}

/* The learnt section called `name`, added when new; NULL when the table is full. */
static double *learnt_section(ddp_learnt_t *l, const char *name)
{
    for (int i = 0; i < l->nsections; i++)
        if (strcmp(l->names[i], name) == 0)
            return &l->section_s[i];
    if (l->nsections == DDP_PROGRESS_SECTIONS || name[0] == '\0')
        return NULL;
    snprintf(l->names[l->nsections], DDP_PROGRESS_NAME, "%s", name);
    l->section_s[l->nsections] = 0;
    return &l->section_s[l->nsections++];
}

static void learn_steps(ddp_learnt_t *l, const ddp_progress_ring_t *ring)
{
    double step = (double)ring->longest_step_ns / 1e9;
    if (step > l->step_s) {
        l->step_s = step;
        l->dirty = true;
    }
    if (ring->steps > l->steps)
        l->steps = ring->steps;
    for (int i = 0; i < DDP_PROGRESS_SECTIONS; i++) {
        const ddp_progress_section_t *s = &ring->sections[i];
        double *longest = s->count > 0 ? learnt_section(l, s->name) : NULL;
        if (longest != NULL && (double)s->max_ns / 1e9 > *longest) {
            *longest = (double)s->max_ns / 1e9;
            l->dirty = true;
        }
    }
}

/* What one look makes of the ranks under --hang-timeout=auto: the first rank past its
 * limit outside a collective (the hang's), else the first past its limit waiting in one;
 * whether some rank outside a collective is within its limit (a rank waiting in a
 * collective waits for such a one: it is not judged by its own limit then). */
typedef struct {
    int culprit, waiter; /* local ranks; -1: none */
    double quiet[2];     /* how long they made no progress (s) */
    double limit[2];     /* ... against which timeout (s) */
    char why[2][200];
    bool busy;
} auto_look_t;

/* Checks *quiet seconds without progress against a rank's `limit` (*quiet then without a
 * Ctrl-Z's stop: that time is no rank's), and keeps the shortest limit judged (the ticks
 * come at least as often): whether it is past. */
static bool check_limit(ddp_progress_watch_t *p, double *quiet, double limit)
{
    double resumed_at = ddp_pause_resumed_at(p->pause);
    double since_resumed = ddp_clock_mono() - resumed_at;
    if (resumed_at > 0 && *quiet > since_resumed)
        *quiet = since_resumed;
    if (limit < p->tick_limit)
        p->tick_limit = limit;
    return *quiet > limit;
}

/* Local rank `i`, past its `limit` after `quiet` s without progress (`why` says how), into
 * the look: the hang's, or waiting. */
static void judged(auto_look_t *look, int i, bool waits, double quiet, double limit,
                   const char *why)
{
    int k = waits ? 1 : 0, *who = waits ? &look->waiter : &look->culprit;
    if (*who >= 0)
        return;
    *who = i;
    look->quiet[k] = quiet;
    look->limit[k] = limit;
    snprintf(look->why[k], sizeof look->why[k], "%s", why);
}

/* What a timeout of `limit` s learnt from `longest` (0: nothing: `cold` says why), 5x
 * `what`, is: the floor where that is less. */
static void say_limit(const ddp_progress_watch_t *p, double limit, double longest, const char *what,
                      const char *cold, char *out, size_t cap)
{
    if (longest <= 0)
        snprintf(out, cap, "%.1f s, %s", limit, cold);
    else if (AUTO_FACTOR * longest < p->g->cfg->hang_floor)
        snprintf(out, cap, "%.1f s, --hang-timeout-floor; 5x %s would be %.2g s", limit, what,
                 AUTO_FACTOR * longest);
    else
        snprintf(out, cap, "%.1f s, 5x %s", limit, what);
}

/* A rank with a progress ring (local rank i): over its limit? */
static void judge_steps(ddp_progress_watch_t *p, int i, const ddp_progress_ring_t *ring, double now,
                        auto_look_t *look)
{
    ddp_learnt_t *l = &p->learnt;
    const ddp_worker_t *w = &p->g->workers[i];
    double limit, since, longest = 0;
    const char *name = NULL;
    char basis[120], why[200];
    if (ring->section > 0 && ring->section <= DDP_PROGRESS_SECTIONS) {
        name = ring->sections[ring->section - 1].name;
        double *learnt = learnt_section(l, name);
        longest = learnt != NULL ? *learnt : 0;
        limit = longest > 0 ? auto_limit(p, longest) : AUTO_COLD_S;
        since = (double)ring->section_ns / 1e9;
    } else {
        bool warm = l->steps >= AUTO_WARMUP && l->step_s > 0 && ring->last_step_ns > 0;
        longest = warm ? l->step_s : 0;
        limit = warm ? auto_limit(p, l->step_s) : AUTO_COLD_S;
        int64_t last =
            ring->last_step_ns > ring->section_exit_ns ? ring->last_step_ns : ring->section_exit_ns;
        since = last > 0 ? (double)last / 1e9 : p->window_start;
    }
    bool waits = p->workers[i].waits_since_ns > 0;
    double quiet = now - since;
    if (!check_limit(p, &quiet, limit)) {
        look->busy = look->busy || !waits;
        return;
    }
    if (name != NULL) {
        say_limit(p, limit, longest, "its longest", "never ended before", basis, sizeof basis);
        snprintf(why, sizeof why,
                 "rank %d has been in section '%s' for %.1f s (--hang-timeout=auto: %s)", w->rank,
                 name, quiet, basis);
    } else {
        say_limit(p, limit, longest, "the longest step", "nothing learnt yet", basis, sizeof basis);
        snprintf(why, sizeof why, "rank %d has made no step for %.1f s (--hang-timeout=auto: %s)",
                 w->rank, quiet, basis);
    }
    judged(look, i, waits, quiet, limit, why);
}

/* A libddp rank (flight ring, local rank i): its collectives' progress, judged by the
 * longest gap. */
static void judge_collectives(ddp_progress_watch_t *p, int i, const ddp_flight_ring_t *ring,
                              double now, auto_look_t *look)
{
    ddp_learnt_t *l = &p->learnt;
    const ddp_worker_t *w = &p->g->workers[i];
    watched_t *v = &p->workers[i];
    if (ring->completed != v->collectives) {
        if (v->moved_at > 0 && now - v->moved_at > l->gap_s) {
            l->gap_s = now - v->moved_at;
            l->dirty = true;
        }
        v->collectives = ring->completed;
        v->moved_at = now;
        if (ring->completed > l->collectives)
            l->collectives = ring->completed;
    }
    bool warm = l->collectives >= AUTO_WARMUP && l->gap_s > 0 && v->moved_at > 0;
    double limit = warm ? auto_limit(p, l->gap_s) : AUTO_COLD_S;
    double since = v->moved_at > 0 ? v->moved_at : p->window_start;
    char basis[120], why[200];
    double quiet = now - since;
    if (!check_limit(p, &quiet, limit)) {
        look->busy = true;
        return;
    }
    say_limit(p, limit, warm ? l->gap_s : 0, "the longest gap between collectives",
              "nothing learnt yet", basis, sizeof basis);
    snprintf(why, sizeof why,
             "rank %d has finished no collective for %.1f s (--hang-timeout=auto: %s)", w->rank,
             quiet, basis);
    judged(look, i, false, quiet, limit, why);
}

/* The look's verdict, where there is one, begins the hang report: the rank past its limit
 * outside a collective, with the ranks that wait in one; or, when every rank still judged
 * waits in one, those. The ranks it names are the hang's (their ends are its failures). */
static void auto_verdict(ddp_progress_watch_t *p, const auto_look_t *look)
{
    const ddp_group_t *g = p->g;
    bool own = look->culprit >= 0;
    if (!own && (look->waiter < 0 || look->busy))
        return;
    bool *other = calloc((size_t)g->nworkers, sizeof *other); /* format_ranks names the false */
    bool *named = calloc((size_t)g->nworkers, sizeof *named);
    ddp_buf_t text = DDP_BUF_INIT;
    int waiting = 0;
    for (int i = 0; other != NULL && named != NULL && i < g->nworkers; i++) {
        other[i] = !g->workers[i].running || p->workers[i].waits_since_ns == 0;
        waiting += !other[i];
        named[i] = own ? i == look->culprit : !other[i];
    }
    ddp_buf_puts(&text, look->why[own ? 0 : 1]);
    if (waiting > 0) {
        ddp_buf_printf(
            &text, own ? "; rank%s " : "; every rank judged here waits in a collective (rank%s ",
            waiting > 1 ? "s" : "");
        ddp_buf_runs(&text, other, g->nworkers, 8, g->rank_offset);
        ddp_buf_puts(&text, own ? (waiting > 1 ? " wait in a collective" : " waits in a collective")
                                : "): for a rank of another node, or in a collective that hangs");
    }
    char why[240];
    snprintf(why, sizeof why, "%s", ddp_buf_str(&text));
    ddp_hang_watch_begin(p->hang, DDP_HANG_STALLED, why, look->quiet[own ? 0 : 1],
                         look->limit[own ? 0 : 1], other != NULL ? named : NULL);
    ddp_buf_free(&text);
    free(other);
    free(named);
}

/* <run dir>/hang_timeouts.json: what auto has learnt and the timeouts it makes. */
static void write_learnt(ddp_progress_watch_t *p, double now)
{
    ddp_learnt_t *l = &p->learnt;
    const ddp_group_t *g = p->g;
    if (!l->dirty || now - p->learnt_written_at < 1 || g->run_dir == NULL)
        return;
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_buf_printf(&out, "{\"factor\": %g, \"floor_s\": %g, \"cold_s\": %g", AUTO_FACTOR,
                   g->cfg->hang_floor, AUTO_COLD_S);
    if (l->step_s > 0)
        ddp_buf_printf(&out, ", \"step\": {\"longest_s\": %.3f, \"timeout_s\": %.3f}", l->step_s,
                       auto_limit(p, l->step_s));
    if (l->gap_s > 0)
        ddp_buf_printf(&out, ", \"collective_gap\": {\"longest_s\": %.3f, \"timeout_s\": %.3f}",
                       l->gap_s, auto_limit(p, l->gap_s));
    ddp_buf_puts(&out, ", \"sections\": {");
    for (int i = 0, n = 0; i < l->nsections; i++) {
        if (l->section_s[i] <= 0)
            continue;
        ddp_buf_printf(&out, "%s", n++ ? ", " : "");
        ddp_json_append_string(&out, l->names[i], strlen(l->names[i]));
        ddp_buf_printf(&out, ": {\"longest_s\": %.3f, \"timeout_s\": %.3f}", l->section_s[i],
                       auto_limit(p, l->section_s[i]));
    }
    ddp_buf_puts(&out, "}}\n");
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/hang_timeouts.json", g->run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && ddp_write_all(fd, out.data, out.len) == 0 && close(fd) == 0) {
        fd = -1;
        (void)rename(tmp, path);
    }
    if (fd >= 0)
        close(fd);
    ddp_buf_free(&out);
    l->dirty = false;
    p->learnt_written_at = now;
}

/* This node's rows, as text. */
static void local_rows(const ddp_progress_watch_t *p, ddp_buf_t *out)
{
    const ddp_group_t *g = p->g;
    ddp_straggler_row_t *rows = calloc((size_t)g->nworkers, sizeof *rows);
    if (rows == NULL)
        return;
    for (int i = 0; i < g->nworkers; i++) {
        const ddp_straggler_acc_t *acc = &p->accs[i];
        ddp_straggler_row_t *r = &rows[i];
        r->rank = g->workers[i].rank;
        r->node = g->group_rank;
        r->local_rank = i;
        r->steps = acc->steps;
        r->units = acc->units;
        r->work_s = acc->work_s;
        r->wait_s = acc->wait_s;
        r->arrivals = acc->arrivals;
        r->collectives = acc->collectives;
        snprintf(r->host, sizeof r->host, "%.*s", (int)sizeof r->host - 1, g->host);
    }
    (void)ddp_straggler_rows_format(rows, (size_t)g->nworkers, out);
    free(rows);
    /* Multi-node: the node's last entry into each recent collective, by global rank. */
    ddp_straggler_entry_t entries[DDP_STRAGGLER_ENTRIES];
    size_t k = 0;
    for (int s = 0; g->rdzv != NULL && s < DDP_STRAGGLER_ENTRIES; s++) {
        if (p->latest[s].seq == 0 || p->latest[s].rank < 0 || p->latest[s].rank >= g->nworkers)
            continue;
        entries[k] = p->latest[s];
        entries[k++].rank = g->workers[p->latest[s].rank].rank;
    }
    (void)ddp_straggler_entries_format(entries, k, out);
}

/* --straggler-action=exclude: what becomes of the straggler's node (the node serving the
 * store stays where its leaving would end the job: but for etcd's, whose job goes on at the
 * next elected launcher's store). */
static const char *exclusion(const ddp_group_t *g, const ddp_straggler_row_t *r)
{
    if (!g->cfg->straggler_exclude || g->rdzv == NULL)
        return "";
    if (g->coord != NULL && r->node == g->group_rank && g->cfg->rdzv_backend != DDP_RDZV_ETCD)
        return "; its node serves the job's store: it stays (--straggler-action=exclude)";
    return "; its node leaves the job at the next restart (--straggler-action)";
}

/* The report over every node's rows (this node's, and on the store's host the others'). */
static void report(ddp_progress_watch_t *p, const char *text, double window)
{
    const ddp_group_t *g = p->g;
    ddp_straggler_row_t *rows = NULL;
    ddp_straggler_entry_t *entries = NULL;
    size_t n = 0, nentries = 0;
    if (ddp_straggler_rows_parse(text, &rows, &n, &entries, &nentries) != 0)
        ddp_log_warn(g->log, "a node's straggler rows were malformed: the report holds those "
                             "before");
    /* Several nodes: who each collective waited for, across them. */
    ddp_straggler_global_arrivals(rows, n, entries, nentries);
    free(entries);
    size_t *found = calloc(n ? n : 1, sizeof *found);
    double *ratio = calloc(n ? n : 1, sizeof *ratio), median = 0;
    size_t k = found != NULL && ratio != NULL
                   ? ddp_straggler_find(rows, n, g->cfg->straggler_threshold, found, ratio, &median)
                   : 0;
    for (size_t j = 0; j < k; j++) {
        const ddp_straggler_row_t *r = &rows[found[j]];
        ddp_buf_t line = DDP_BUF_INIT, fields = DDP_BUF_INIT;
        ddp_straggler_describe(r, ratio[j], median, window, &line);
        ddp_log_warn(g->log, "%s%s", ddp_buf_str(&line), exclusion(g, r));
        if (g->cfg->straggler_exclude && r->node == g->group_rank)
            p->straggler_named = true;
        else if (g->cfg->straggler_exclude && g->coord != NULL)
            ddp_rdzv_coord_name_straggler(g->coord, r->node, ddp_buf_str(&line));
        ddp_events_int(&fields, "rank", r->rank);
        ddp_events_int(&fields, "rank_node", r->node); /* node and host: the reporter's */
        ddp_events_str(&fields, "rank_host", r->host);
        ddp_events_double(&fields, "work_ms", r->work_s / r->units * 1e3);
        ddp_events_double(&fields, "median_ms", median * 1e3);
        ddp_events_double(&fields, "ratio", ratio[j]);
        ddp_events_double(&fields, "window_s", window);
        ddp_events_emit(&g->events, "straggler", &fields);
        ddp_buf_free(&fields);
        ddp_buf_free(&line);
    }
    if (k == 0)
        ddp_log_debug(g->log,
                      "no straggler over the last %.0f s (%zu ranks; the median works "
                      "%.1f ms a unit)",
                      window, n, median * 1e3);
    free(found);
    free(ratio);
    free(rows);
}

/* The end of a window: this node's rows to the report (the store's host: with the others'
 * latest), then the sums start again. */
static void end_window(ddp_progress_watch_t *p, double now)
{
    const ddp_group_t *g = p->g;
    ddp_buf_t text = DDP_BUF_INIT;
    double window = now - p->window_start;
    local_rows(p, &text);
    if (g->rdzv != NULL && g->coord == NULL) {
        ddp_rdzv_post_stragglers(g->rdzv, ddp_buf_str(&text));
    } else {
        if (g->coord != NULL)
            ddp_rdzv_coord_stragglers(g->coord, &text);
        report(p, ddp_buf_str(&text), window);
    }
    ddp_buf_free(&text);
    for (int i = 0; i < g->nworkers; i++)
        ddp_straggler_window_reset(&p->accs[i]);
    p->window_start = now;
    p->report_at = now + g->cfg->straggler_report;
}

static void on_progress(uv_timer_t *timer)
{
    ddp_progress_watch_t *p = timer->data;
    const ddp_group_t *g = p->g;
    const ddp_launch_config_t *cfg = g->cfg;
    double now = ddp_clock_mono();
    bool rings = false;
    auto_look_t look = {.culprit = -1, .waiter = -1};
    if (g->state != DDP_AGENT_RUNNING || g->nrunning == 0 || ddp_pause_stopped(p->pause))
        return;
    p->tick_limit = AUTO_COLD_S;
    for (int i = 0; i < g->nworkers; i++) {
        const ddp_worker_t *w = &g->workers[i];
        char dir[PATH_MAX], path[PATH_MAX + 32];
        ddp_progress_ring_t ring;
        p->has_flight[i] = false;
        if (!w->running)
            continue;
        ddp_group_worker_dir(g, w, dir, sizeof dir);
        snprintf(path, sizeof path, "%s/%s", dir, DDP_PROGRESS_FILE);
        /* Steps where the worker reports them (ddp_launch.step(), a libddp reducer), else
         * libddp's collectives; the flight ring says who arrived last either way. */
        bool steps = ddp_progress_read(path, &ring) == 0;
        p->has_flight[i] = ddp_hang_busiest_ring(dir, &p->rings[i]) == 0;
        rings = rings || steps || p->has_flight[i];
        p->workers[i].waits_since_ns =
            steps && ring.collective_ns > 0 && ring.collective_ns <= now * 1e9 ? ring.collective_ns
                                                                               : 0;
        if (steps) {
            ddp_straggler_take_progress(&p->accs[i], &ring);
            learn_steps(&p->learnt, &ring);
            if (cfg->hang_auto)
                judge_steps(p, i, &ring, now, &look);
        } else if (p->has_flight[i]) {
            ddp_straggler_take_flight(&p->accs[i], &p->rings[i]);
            if (cfg->hang_auto)
                judge_collectives(p, i, &p->rings[i], now, &look);
        }
    }
    ddp_straggler_take_arrivals(p->accs, p->rings, p->has_flight, g->nworkers, &p->common_seq,
                                p->latest);
    uint64_t ms = next_tick_ms(p, rings, uv_timer_get_repeat(timer));
    if (ms != uv_timer_get_repeat(timer))
        uv_timer_start(timer, on_progress, ms, ms);
    if (cfg->hang_auto)
        write_learnt(p, now);
    if (ddp_hang_watch_may_begin(p->hang)) {
        auto_verdict(p, &look);
        if (ddp_hang_watch_reporting(p->hang))
            return;
    }
    if (cfg->straggler_report > 0 && now >= p->report_at)
        end_window(p, now);
}

void ddp_progress_watch_attempt(ddp_progress_watch_t *p)
{
    const ddp_group_t *g = p->g;
    const ddp_launch_config_t *cfg = g->cfg;
    if (!cfg->hang_auto && cfg->straggler_report <= 0)
        return;
    if (p->accs == NULL) {
        p->accs = calloc((size_t)g->nworkers, sizeof *p->accs);
        p->rings = calloc((size_t)g->nworkers, sizeof *p->rings);
        p->has_flight = calloc((size_t)g->nworkers, sizeof *p->has_flight);
    }
    if (p->accs == NULL || p->rings == NULL || p->has_flight == NULL) {
        ddp_log_warn(g->log, "out of memory: no straggler reports, no --hang-timeout=auto");
        return;
    }
    memset(p->accs, 0, (size_t)g->nworkers * sizeof *p->accs);
    memset(p->workers, 0, (size_t)g->nworkers * sizeof *p->workers);
    p->common_seq = 0;
    memset(p->latest, 0, sizeof p->latest);
    p->window_start = ddp_clock_mono();
    p->report_at = p->window_start + cfg->straggler_report;
    uint64_t ms = tick_ms(cfg, cfg->hang_auto ? AUTO_TICK_MS * 5 / 1000.0 : AUTO_COLD_S);
    uv_timer_start(&p->timer, on_progress, ms, ms);
}
