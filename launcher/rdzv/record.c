/* The rendezvous records' texts (see rdzv/record.h). Pure: no store, no loop. */
#include "rdzv/record.h"

#include "error.h"
#include "parse.h"
#include "store/store.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define TEXT_MAX 2048 /* the longest record parsed; longer ones are refused */

void ddp_rdzv_own_host(const ddp_launch_config_t *cfg, char *host, size_t cap)
{
    if (cfg->local_addr != NULL && *cfg->local_addr != '\0')
        snprintf(host, cap, "%s", cfg->local_addr);
    else if (gethostname(host, cap - 1) != 0)
        snprintf(host, cap, "localhost");
    else
        host[cap - 1] = '\0';
}

/* This process's random part of its id, drawn once (getrandom; where it cannot answer at
 * once, the clock and pid). */
static uint64_t id_nonce;

static void draw_id_nonce(void)
{
    if (getrandom(&id_nonce, sizeof id_nonce, GRND_NONBLOCK) == (ssize_t)sizeof id_nonce)
        return;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    id_nonce = ((uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec) ^
               ((uint64_t)getpid() * 0x9e3779b97f4a7c15ull);
}

void ddp_rdzv_launcher_id(char id[DDP_RDZV_ID_MAX], const char *host)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, draw_id_nonce);
    snprintf(id, DDP_RDZV_ID_MAX, "%.64s-%d-%016llx", host, (int)getpid(),
             (unsigned long long)id_nonce);
}

void ddp_rdzv_key(char *key, size_t cap, const char *run_id, const char *fmt, ...)
{
    va_list ap;
    size_t n = (size_t)snprintf(key, cap, DDP_STORE_KEEP "rdzv/%s/", run_id);
    va_start(ap, fmt);
    vsnprintf(key + (n < cap ? n : cap), n < cap ? cap - n : 0, fmt, ap);
    va_end(ap);
}

void ddp_rdzv_news_key(char *key, size_t cap, const char *run_id, int round, int pauses)
{
    if (pauses == 0)
        ddp_rdzv_key(key, cap, run_id, "%d/news", round);
    else
        ddp_rdzv_key(key, cap, run_id, "%d/news.%d", round, pauses);
}

void ddp_rdzv_assign_key(char *key, size_t cap, const char *run_id, const char *id, int seq,
                         int pauses)
{
    if (pauses == 0)
        ddp_rdzv_key(key, cap, run_id, "assign/%s/%d", id, seq);
    else
        ddp_rdzv_key(key, cap, run_id, "assign/%s/%d.%d", id, seq, pauses);
}

/* The text as a C string in buf[TEXT_MAX], or false when it is too long or holds a NUL. */
static bool as_string(const void *text, size_t len, char buf[TEXT_MAX])
{
    if (text == NULL || len >= TEXT_MAX || memchr(text, '\0', len) != NULL)
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return true;
}

int ddp_rdzv_join_format(const ddp_rdzv_join_t *join, ddp_buf_t *out)
{
    return ddp_buf_printf(out, "%d %d %d %d %d %d %s", join->seq, join->nnodes_min,
                          join->nnodes_max, join->node_rank, join->nproc, join->max_restarts,
                          join->host);
}

bool ddp_rdzv_join_parse(const void *text, size_t len, ddp_rdzv_join_t *out)
{
    char buf[TEXT_MAX];
    ddp_rdzv_join_t j;
    int end = 0;
    if (!as_string(text, len, buf) ||
        sscanf(buf, "%d %d %d %d %d %d %255s%n", &j.seq, &j.nnodes_min, &j.nnodes_max, &j.node_rank,
               &j.nproc, &j.max_restarts, j.host, &end) != 7 ||
        buf[end] != '\0')
        return false;
    if (j.seq < 0 || j.nnodes_min < 1 || j.nnodes_max < j.nnodes_min || j.node_rank < -1 ||
        j.node_rank >= j.nnodes_max || j.nproc < 1 || j.max_restarts < 0)
        return false;
    *out = j;
    return true;
}

static const char *const verdict_words[] = {
    [DDP_RDZV_VERDICT_WORLD] = "world",
    [DDP_RDZV_VERDICT_STOP_FAILED] = "stop-failed",
    [DDP_RDZV_VERDICT_STOP_REFORM] = "stop-reform",
    [DDP_RDZV_VERDICT_DONE] = "done",
    [DDP_RDZV_VERDICT_END] = "end",
};

int ddp_rdzv_verdict_format(const ddp_rdzv_verdict_t *v, ddp_buf_t *out)
{
    const ddp_rdzv_world_t *w = &v->world;
    switch (v->kind) {
    case DDP_RDZV_VERDICT_WORLD:
        return ddp_buf_printf(out, "world %d %d %d %d %d %d %d%s%s", w->round, w->restarts,
                              w->node_rank, w->nnodes, w->rank_offset, w->world_size, w->nenv,
                              v->message[0] != '\0' ? " " : "", v->message);
    case DDP_RDZV_VERDICT_END:
        return ddp_buf_printf(out, "end %d %s", v->exit_code, v->message);
    case DDP_RDZV_VERDICT_DONE:
        return ddp_buf_puts(out, "done");
    case DDP_RDZV_VERDICT_STOP_FAILED:
    case DDP_RDZV_VERDICT_STOP_REFORM:
        break;
    }
    return ddp_buf_printf(out, "%s %s", verdict_words[v->kind], v->message);
}

/* "R RESTARTS RANK NODES OFFSET WORLD NENV[ MESSAGE]": *used is where the message starts. */
static bool parse_world(const char *rest, ddp_rdzv_world_t *w, int *used)
{
    int end = 0;
    if (sscanf(rest, "%d %d %d %d %d %d %d%n", &w->round, &w->restarts, &w->node_rank, &w->nnodes,
               &w->rank_offset, &w->world_size, &w->nenv, &end) != 7 ||
        (rest[end] != '\0' && rest[end] != ' '))
        return false;
    *used = end + (rest[end] == ' ');
    return w->round >= 0 && w->restarts >= 0 && w->nnodes >= 1 && w->node_rank >= 0 &&
           w->node_rank < w->nnodes && w->rank_offset >= 0 && w->world_size > w->rank_offset &&
           w->nenv >= 0;
}

bool ddp_rdzv_verdict_parse(const void *text, size_t len, ddp_rdzv_verdict_t *out)
{
    char buf[TEXT_MAX];
    if (!as_string(text, len, buf))
        return false;
    for (size_t k = 0; k < sizeof verdict_words / sizeof verdict_words[0]; k++) {
        size_t n = strlen(verdict_words[k]);
        if (strncmp(buf, verdict_words[k], n) != 0 || (buf[n] != ' ' && buf[n] != '\0'))
            continue;
        const char *rest = buf[n] == ' ' ? buf + n + 1 : buf + n;
        ddp_rdzv_verdict_t v = {.kind = (ddp_rdzv_verdict_kind_t)k};
        int used = 0;
        if (v.kind == DDP_RDZV_VERDICT_WORLD) {
            if (!parse_world(rest, &v.world, &used))
                return false;
            rest += used;
            used = 0;
        }
        if (v.kind == DDP_RDZV_VERDICT_DONE && *rest != '\0')
            return false;
        if (v.kind == DDP_RDZV_VERDICT_END) {
            if (sscanf(rest, "%d%n", &v.exit_code, &used) != 1 || v.exit_code < 0 ||
                v.exit_code > 255)
                return false;
            rest += used;
            rest += *rest == ' ';
        }
        if (v.kind != DDP_RDZV_VERDICT_DONE)
            snprintf(v.message, sizeof v.message, "%s", rest);
        *out = v;
        return true;
    }
    return false;
}

int ddp_rdzv_report_format(const ddp_rdzv_report_t *report, ddp_buf_t *out)
{
    return ddp_buf_printf(out, "%d %s %s", report->round, report->failed ? "failed" : "succeeded",
                          report->message);
}

bool ddp_rdzv_report_parse(const void *text, size_t len, ddp_rdzv_report_t *out)
{
    char buf[TEXT_MAX], word[16];
    ddp_rdzv_report_t r = {0};
    int used = 0;
    if (!as_string(text, len, buf) || sscanf(buf, "%d %15s%n", &r.round, word, &used) != 2 ||
        r.round < 0)
        return false;
    if (strcmp(word, "failed") == 0)
        r.failed = true;
    else if (strcmp(word, "succeeded") != 0)
        return false;
    const char *rest = buf + used;
    snprintf(r.message, sizeof r.message, "%s", *rest == ' ' ? rest + 1 : rest);
    *out = r;
    return true;
}

int ddp_rdzv_round_record_format(ddp_buf_t *out, int round, int restarts,
                                 ddp_rdzv_member_id_fn id_of, void *ctx, int n)
{
    int err = ddp_buf_printf(out, "round %d restarts %d ranks", round, restarts);
    for (int i = 0; i < n && err == 0; i++)
        err = ddp_buf_printf(out, " %s", id_of(ctx, i));
    return err;
}

/* "WORD N" at *p: the word, one space, 1 to 10 digits (no sign; at most max), and *p moved
 * past them; false where not. */
static bool take_count(const char **p, const char *word, int max, int *out)
{
    size_t len = strlen(word);
    const char *at = *p;
    if (strncmp(at, word, len) != 0 || at[len] != ' ')
        return false;
    at += len + 1;
    char digits[11];
    size_t n = strspn(at, "0123456789");
    long value;
    if (n == 0 || n >= sizeof digits)
        return false;
    memcpy(digits, at, n);
    digits[n] = '\0';
    if (ddp_parse_long(digits, 0, max, &value) != 0)
        return false;
    *out = (int)value;
    *p = at + n;
    return true;
}

int ddp_rdzv_round_record_parse(const char *text, int *round, int *restarts, const char **ranks)
{
    const char *at = text;
    if (!take_count(&at, "round", DDP_RDZV_RECORD_COUNT_MAX, round) || *at++ != ' ' ||
        !take_count(&at, "restarts", DDP_RDZV_RECORD_COUNT_MAX, restarts) ||
        strncmp(at, " ranks", 6) != 0 || (at[6] != '\0' && at[6] != ' '))
        return DDP_EPARSE;
    *ranks = at + 6 + (at[6] == ' ');
    return 0;
}
