/* The workers' progress as the launcher looks at it while an attempt runs (see
 * agent_internal.h): straggler reports (--straggler-report; straggler.h) and
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
#include "agent_internal.h"

#include "hang.h"
#include "io.h"
#include "json.h"

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
static uint64_t next_tick_ms(const ddp_agent_t *a, bool rings, uint64_t ms)
{
    if (rings)
        return tick_ms(a->cfg, a->tick_limit);
    return ms >= IDLE_TICK_MS / 2 ? IDLE_TICK_MS : 2 * ms;
}

static double auto_limit(const ddp_agent_t *a, double longest)
{
    double limit = AUTO_FACTOR * longest;
    return limit < a->cfg->hang_floor ? a->cfg->hang_floor : limit;
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
    double limit[2];     /* theirs */
    char why[2][200];
    bool busy;
} auto_look_t;

/* Whether `quiet` seconds without progress are past a rank's `limit`; the ticks come at
 * least as often as the shortest limit judged. */
static bool past_limit(ddp_agent_t *a, double quiet, double limit)
{
    double since_resumed = ddp_clock_mono() - a->resumed_at;
    if (a->resumed_at > 0 && quiet > since_resumed)
        quiet = since_resumed; /* the time stopped by a Ctrl-Z is no rank's */
    if (limit < a->tick_limit)
        a->tick_limit = limit;
    return quiet > limit;
}

/* Local rank `i`, past `limit` (`why` says how), into the look: the hang's, or waiting. */
static void judged(auto_look_t *look, int i, bool waits, double limit, const char *why)
{
    int k = waits ? 1 : 0, *who = waits ? &look->waiter : &look->culprit;
    if (*who >= 0)
        return;
    *who = i;
    look->limit[k] = limit;
    snprintf(look->why[k], sizeof look->why[k], "%s", why);
}

/* What a timeout of `limit` s learnt from `longest` (0: nothing: `cold` says why), 5x
 * `what`, is: the floor where that is less. */
static void say_limit(const ddp_agent_t *a, double limit, double longest, const char *what,
                      const char *cold, char *out, size_t cap)
{
    if (longest <= 0)
        snprintf(out, cap, "%.1f s, %s", limit, cold);
    else if (AUTO_FACTOR * longest < a->cfg->hang_floor)
        snprintf(out, cap, "%.1f s, --hang-timeout-floor; 5x %s would be %.2g s", limit, what,
                 AUTO_FACTOR * longest);
    else
        snprintf(out, cap, "%.1f s, 5x %s", limit, what);
}

/* A rank with a progress ring (local rank i): over its limit? */
static void judge_steps(ddp_agent_t *a, int i, const ddp_progress_ring_t *ring, double now,
                        auto_look_t *look)
{
    ddp_learnt_t *l = &a->learnt;
    const ddp_worker_t *w = &a->workers[i];
    double limit, since, longest = 0;
    const char *name = NULL;
    char basis[120], why[200];
    if (ring->section > 0 && ring->section <= DDP_PROGRESS_SECTIONS) {
        name = ring->sections[ring->section - 1].name;
        double *learnt = learnt_section(l, name);
        longest = learnt != NULL ? *learnt : 0;
        limit = longest > 0 ? auto_limit(a, longest) : AUTO_COLD_S;
        since = (double)ring->section_ns / 1e9;
    } else {
        bool warm = l->steps >= AUTO_WARMUP && l->step_s > 0 && ring->last_step_ns > 0;
        longest = warm ? l->step_s : 0;
        limit = warm ? auto_limit(a, l->step_s) : AUTO_COLD_S;
        int64_t last =
            ring->last_step_ns > ring->section_exit_ns ? ring->last_step_ns : ring->section_exit_ns;
        since = last > 0 ? (double)last / 1e9 : a->window_start;
    }
    bool waits = w->waits_since_ns > 0;
    if (!past_limit(a, now - since, limit)) {
        look->busy = look->busy || !waits;
        return;
    }
    if (name != NULL) {
        say_limit(a, limit, longest, "its longest", "never ended before", basis, sizeof basis);
        snprintf(why, sizeof why,
                 "rank %d has been in section '%s' for %.1f s (--hang-timeout=auto: %s)", w->rank,
                 name, now - since, basis);
    } else {
        say_limit(a, limit, longest, "the longest step", "nothing learnt yet", basis, sizeof basis);
        snprintf(why, sizeof why, "rank %d has made no step for %.1f s (--hang-timeout=auto: %s)",
                 w->rank, now - since, basis);
    }
    judged(look, i, waits, limit, why);
}

/* A libddp rank (flight ring, local rank i): its collectives' progress, judged by the
 * longest gap. */
static void judge_collectives(ddp_agent_t *a, int i, const ddp_flight_ring_t *ring, double now,
                              auto_look_t *look)
{
    ddp_learnt_t *l = &a->learnt;
    ddp_worker_t *w = &a->workers[i];
    if (ring->completed != w->collectives) {
        if (w->moved_at > 0 && now - w->moved_at > l->gap_s) {
            l->gap_s = now - w->moved_at;
            l->dirty = true;
        }
        w->collectives = ring->completed;
        w->moved_at = now;
        if (ring->completed > l->collectives)
            l->collectives = ring->completed;
    }
    bool warm = l->collectives >= AUTO_WARMUP && l->gap_s > 0 && w->moved_at > 0;
    double limit = warm ? auto_limit(a, l->gap_s) : AUTO_COLD_S;
    double since = w->moved_at > 0 ? w->moved_at : a->window_start;
    char basis[120], why[200];
    if (!past_limit(a, now - since, limit)) {
        look->busy = true;
        return;
    }
    say_limit(a, limit, warm ? l->gap_s : 0, "the longest gap between collectives",
              "nothing learnt yet", basis, sizeof basis);
    snprintf(why, sizeof why,
             "rank %d has finished no collective for %.1f s (--hang-timeout=auto: %s)", w->rank,
             now - since, basis);
    judged(look, i, false, limit, why);
}

/* The look's verdict into why[cap], false when there is none: the rank past its limit
 * outside a collective, with the ranks that wait in one; or, when every rank still judged
 * waits in one, those. The ranks it names are the hang's (their ends are its failures). */
static bool auto_verdict(ddp_agent_t *a, const auto_look_t *look, char *why, size_t cap)
{
    bool own = look->culprit >= 0;
    if (!own && (look->waiter < 0 || look->busy))
        return false;
    bool *other = calloc((size_t)a->nworkers, sizeof *other); /* format_ranks names the false */
    ddp_buf_t text = DDP_BUF_INIT;
    int waiting = 0;
    for (int i = 0; other != NULL && i < a->nworkers; i++) {
        ddp_worker_t *w = &a->workers[i];
        other[i] = !w->running || w->waits_since_ns == 0;
        waiting += !other[i];
        w->hung = own ? i == look->culprit : !other[i];
    }
    ddp_buf_puts(&text, look->why[own ? 0 : 1]);
    if (waiting > 0) {
        ddp_buf_printf(
            &text, own ? "; rank%s " : "; every rank judged here waits in a collective (rank%s ",
            waiting > 1 ? "s" : "");
        ddp_rdzv_format_ranks_from(&text, other, a->nworkers, 8, a->rank_offset);
        ddp_buf_puts(&text, own ? (waiting > 1 ? " wait in a collective" : " waits in a collective")
                                : "): for a rank of another node, or in a collective that hangs");
    }
    snprintf(why, cap, "%s", ddp_buf_str(&text));
    a->hang_limit = look->limit[own ? 0 : 1];
    ddp_buf_free(&text);
    free(other);
    return true;
}

/* <run dir>/hang_timeouts.json: what auto has learnt and the timeouts it makes. */
static void write_learnt(ddp_agent_t *a, double now)
{
    ddp_learnt_t *l = &a->learnt;
    if (!l->dirty || now - a->learnt_written_at < 1 || a->run_dir == NULL)
        return;
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_buf_printf(&out, "{\"factor\": %g, \"floor_s\": %g, \"cold_s\": %g", AUTO_FACTOR,
                   a->cfg->hang_floor, AUTO_COLD_S);
    if (l->step_s > 0)
        ddp_buf_printf(&out, ", \"step\": {\"longest_s\": %.3f, \"timeout_s\": %.3f}", l->step_s,
                       auto_limit(a, l->step_s));
    if (l->gap_s > 0)
        ddp_buf_printf(&out, ", \"collective_gap\": {\"longest_s\": %.3f, \"timeout_s\": %.3f}",
                       l->gap_s, auto_limit(a, l->gap_s));
    ddp_buf_puts(&out, ", \"sections\": {");
    for (int i = 0, n = 0; i < l->nsections; i++) {
        if (l->section_s[i] <= 0)
            continue;
        ddp_buf_printf(&out, "%s", n++ ? ", " : "");
        ddp_json_append_string(&out, l->names[i], strlen(l->names[i]));
        ddp_buf_printf(&out, ": {\"longest_s\": %.3f, \"timeout_s\": %.3f}", l->section_s[i],
                       auto_limit(a, l->section_s[i]));
    }
    ddp_buf_puts(&out, "}}\n");
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/hang_timeouts.json", a->run_dir);
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
    a->learnt_written_at = now;
}

/* This node's rows, as text. */
static void local_rows(const ddp_agent_t *a, ddp_buf_t *out)
{
    ddp_straggler_row_t *rows = calloc((size_t)a->nworkers, sizeof *rows);
    if (rows == NULL)
        return;
    for (int i = 0; i < a->nworkers; i++) {
        const ddp_straggler_acc_t *acc = &a->accs[i];
        ddp_straggler_row_t *r = &rows[i];
        r->rank = a->workers[i].rank;
        r->node = a->group_rank;
        r->local_rank = i;
        r->steps = acc->steps;
        r->units = acc->units;
        r->work_s = acc->work_s;
        r->wait_s = acc->wait_s;
        r->arrivals = acc->arrivals;
        r->collectives = acc->collectives;
        snprintf(r->host, sizeof r->host, "%.*s", (int)sizeof r->host - 1, a->host);
    }
    (void)ddp_straggler_rows_format(rows, (size_t)a->nworkers, out);
    free(rows);
    /* Multi-node: the node's last entry into each recent collective, by global rank. */
    ddp_straggler_entry_t entries[DDP_STRAGGLER_ENTRIES];
    size_t k = 0;
    for (int s = 0; a->rdzv != NULL && s < DDP_STRAGGLER_ENTRIES; s++) {
        if (a->latest[s].seq == 0 || a->latest[s].rank < 0 || a->latest[s].rank >= a->nworkers)
            continue;
        entries[k] = a->latest[s];
        entries[k++].rank = a->workers[a->latest[s].rank].rank;
    }
    (void)ddp_straggler_entries_format(entries, k, out);
}

/* --straggler-action=exclude: what becomes of the straggler's node (the node serving the
 * store stays: its leaving would end the job). */
static const char *exclusion(const ddp_agent_t *a, const ddp_straggler_row_t *r)
{
    if (!a->cfg->straggler_exclude || a->rdzv == NULL)
        return "";
    if (a->coord != NULL && r->node == a->group_rank)
        return "; its node serves the job's store: it stays (--straggler-action=exclude)";
    return "; its node leaves the job at the next restart (--straggler-action)";
}

/* The report over every node's rows (this node's, and on the store's host the others'). */
static void report(ddp_agent_t *a, const char *text, double window)
{
    ddp_straggler_row_t *rows = NULL;
    ddp_straggler_entry_t *entries = NULL;
    size_t n = 0, nentries = 0;
    if (ddp_straggler_rows_parse(text, &rows, &n, &entries, &nentries) != 0)
        ddp_log_warn(a->log, "a node's straggler rows were malformed: the report holds those "
                             "before");
    /* Several nodes: who each collective waited for, across them. */
    ddp_straggler_global_arrivals(rows, n, entries, nentries);
    free(entries);
    size_t *found = calloc(n ? n : 1, sizeof *found);
    double *ratio = calloc(n ? n : 1, sizeof *ratio), median = 0;
    size_t k = found != NULL && ratio != NULL
                   ? ddp_straggler_find(rows, n, a->cfg->straggler_threshold, found, ratio, &median)
                   : 0;
    for (size_t j = 0; j < k; j++) {
        const ddp_straggler_row_t *r = &rows[found[j]];
        ddp_buf_t line = DDP_BUF_INIT, fields = DDP_BUF_INIT;
        ddp_straggler_describe(r, ratio[j], median, window, &line);
        ddp_log_warn(a->log, "%s%s", ddp_buf_str(&line), exclusion(a, r));
        if (a->cfg->straggler_exclude && r->node == a->group_rank)
            a->straggler_named = true;
        else if (a->cfg->straggler_exclude && a->coord != NULL)
            ddp_rdzv_coord_name_straggler(a->coord, r->node, ddp_buf_str(&line));
        ddp_events_int(&fields, "rank", r->rank);
        ddp_events_int(&fields, "rank_node", r->node); /* node and host: the reporter's */
        ddp_events_str(&fields, "rank_host", r->host);
        ddp_events_double(&fields, "work_ms", r->work_s / r->units * 1e3);
        ddp_events_double(&fields, "median_ms", median * 1e3);
        ddp_events_double(&fields, "ratio", ratio[j]);
        ddp_events_double(&fields, "window_s", window);
        ddp_events_emit(&a->events, "straggler", &fields);
        ddp_buf_free(&fields);
        ddp_buf_free(&line);
    }
    if (k == 0)
        ddp_log_debug(a->log,
                      "no straggler over the last %.0f s (%zu ranks; the median works "
                      "%.1f ms a unit)",
                      window, n, median * 1e3);
    free(found);
    free(ratio);
    free(rows);
}

/* The end of a window: this node's rows to the report (the store's host: with the others'
 * latest), then the sums start again. */
static void end_window(ddp_agent_t *a, double now)
{
    ddp_buf_t text = DDP_BUF_INIT;
    double window = now - a->window_start;
    local_rows(a, &text);
    if (a->rdzv != NULL && a->coord == NULL) {
        ddp_rdzv_post_stragglers(a->rdzv, ddp_buf_str(&text));
    } else {
        if (a->coord != NULL)
            ddp_rdzv_coord_stragglers(a->coord, &text);
        report(a, ddp_buf_str(&text), window);
    }
    ddp_buf_free(&text);
    for (int i = 0; i < a->nworkers; i++)
        ddp_straggler_window_reset(&a->accs[i]);
    a->window_start = now;
    a->report_at = now + a->cfg->straggler_report;
}

static void on_progress(uv_timer_t *timer)
{
    ddp_agent_t *a = timer->data;
    const ddp_launch_config_t *cfg = a->cfg;
    double now = ddp_clock_mono();
    char why[240];
    bool rings = false;
    auto_look_t look = {.culprit = -1, .waiter = -1};
    if (a->state != AGENT_RUNNING || a->nrunning == 0 || a->paused)
        return;
    a->tick_limit = AUTO_COLD_S;
    for (int i = 0; i < a->nworkers; i++) {
        ddp_worker_t *w = &a->workers[i];
        char dir[PATH_MAX], path[PATH_MAX + 32];
        ddp_progress_ring_t ring;
        a->has_flight[i] = false;
        if (!w->running)
            continue;
        ddp_agent_worker_dir(a, w, dir, sizeof dir);
        snprintf(path, sizeof path, "%s/%s", dir, DDP_PROGRESS_FILE);
        /* Steps where the worker reports them (ddp_launch.step(), a libddp reducer), else
         * libddp's collectives; the flight ring says who arrived last either way. */
        bool steps = ddp_progress_read(path, &ring) == 0;
        a->has_flight[i] = ddp_hang_busiest_ring(dir, &a->rings[i]) == 0;
        rings = rings || steps || a->has_flight[i];
        w->waits_since_ns = steps && ring.collective_ns > 0 && ring.collective_ns <= now * 1e9
                                ? ring.collective_ns
                                : 0;
        if (steps) {
            ddp_straggler_take_progress(&a->accs[i], &ring);
            learn_steps(&a->learnt, &ring);
            if (cfg->hang_auto)
                judge_steps(a, i, &ring, now, &look);
        } else if (a->has_flight[i]) {
            ddp_straggler_take_flight(&a->accs[i], &a->rings[i]);
            if (cfg->hang_auto)
                judge_collectives(a, i, &a->rings[i], now, &look);
        }
    }
    ddp_straggler_take_arrivals(a->accs, a->rings, a->has_flight, a->nworkers, &a->common_seq,
                                a->latest);
    uint64_t ms = next_tick_ms(a, rings, uv_timer_get_repeat(timer));
    if (ms != uv_timer_get_repeat(timer))
        uv_timer_start(timer, on_progress, ms, ms);
    if (cfg->hang_auto)
        write_learnt(a, now);
    if (a->hang == HANG_IDLE && !a->hang_done && auto_verdict(a, &look, why, sizeof why)) {
        ddp_agent_hang_begin(a, true, true, why);
        return;
    }
    if (cfg->straggler_report > 0 && now >= a->report_at)
        end_window(a, now);
}

void ddp_agent_progress_start(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->cfg;
    if (!cfg->hang_auto && cfg->straggler_report <= 0)
        return;
    if (a->accs == NULL) {
        a->accs = calloc((size_t)a->nworkers, sizeof *a->accs);
        a->rings = calloc((size_t)a->nworkers, sizeof *a->rings);
        a->has_flight = calloc((size_t)a->nworkers, sizeof *a->has_flight);
    }
    if (a->accs == NULL || a->rings == NULL || a->has_flight == NULL) {
        ddp_log_warn(a->log, "out of memory: no straggler reports, no --hang-timeout=auto");
        return;
    }
    memset(a->accs, 0, (size_t)a->nworkers * sizeof *a->accs);
    for (int i = 0; i < a->nworkers; i++) {
        a->workers[i].collectives = 0;
        a->workers[i].moved_at = 0;
        a->workers[i].waits_since_ns = 0;
    }
    a->common_seq = 0;
    memset(a->latest, 0, sizeof a->latest);
    a->window_start = ddp_clock_mono();
    a->report_at = a->window_start + cfg->straggler_report;
    uint64_t ms = tick_ms(cfg, cfg->hang_auto ? AUTO_TICK_MS * 5 / 1000.0 : AUTO_COLD_S);
    uv_timer_start(&a->progress_timer, on_progress, ms, ms);
}

void ddp_agent_progress_free(ddp_agent_t *a)
{
    free(a->accs);
    free(a->rings);
    free(a->has_flight);
    a->accs = NULL;
    a->rings = NULL;
    a->has_flight = NULL;
}
