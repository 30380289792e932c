/* A Python script's text, scanned (see pyscan.h). */
#include "config/pyscan.h"

#include <stdbool.h>
#include <string.h>

typedef enum { TOK_END, TOK_NAME, TOK_STRING, TOK_OPEN, TOK_CLOSE, TOK_OTHER } tok_kind_t;

typedef struct {
    const char *p, *end;
    tok_kind_t kind;
    const char *start; /* a name's first byte, or a string literal's contents */
    size_t len;
} scanner_t;

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           (unsigned char)c >= 0x80;
}

/* A string literal from its opening quote at s->p: its contents, escapes left as they
 * are (the options looked for hold none). An unterminated one ends the text. */
static void scan_string(scanner_t *s)
{
    char q = *s->p;
    bool triple = s->end - s->p >= 3 && s->p[1] == q && s->p[2] == q;
    size_t open = triple ? 3 : 1;
    const char *body = s->p + open;
    for (const char *c = body; c < s->end; c++) {
        if (*c == '\\') {
            c++;
            continue;
        }
        if (!triple && *c == '\n')
            break; /* not a string after all: stop at the line's end */
        if (*c == q && (!triple || (s->end - c >= 3 && c[1] == q && c[2] == q))) {
            s->kind = TOK_STRING;
            s->start = body;
            s->len = (size_t)(c - body);
            s->p = c + open;
            return;
        }
    }
    s->kind = TOK_OTHER;
    s->p = s->end;
}

/* The next token: comments and white space skipped. */
static void next(scanner_t *s)
{
    for (;;) {
        while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r' ||
                                 *s->p == '\\' || *s->p == '\f'))
            s->p++;
        if (s->p < s->end && *s->p == '#') {
            while (s->p < s->end && *s->p != '\n')
                s->p++;
            continue;
        }
        break;
    }
    if (s->p >= s->end) {
        s->kind = TOK_END;
        return;
    }
    char c = *s->p;
    if (c == '"' || c == '\'') {
        scan_string(s);
        return;
    }
    if (name_char(c) && !(c >= '0' && c <= '9')) {
        const char *start = s->p;
        while (s->p < s->end && name_char(*s->p))
            s->p++;
        /* A string prefix (r, b, f, u, rb, ...) directly before a quote. */
        if (s->p < s->end && (*s->p == '"' || *s->p == '\'') && s->p - start <= 2 &&
            strspn(start, "rRbBfFuU") >= (size_t)(s->p - start)) {
            scan_string(s);
            return;
        }
        s->kind = TOK_NAME;
        s->start = start;
        s->len = (size_t)(s->p - start);
        return;
    }
    s->p++;
    s->kind = c == '(' ? TOK_OPEN : c == ')' ? TOK_CLOSE : TOK_OTHER;
}

/* The option among one call's arguments (the scanner is after its '('). */
static ddp_local_rank_arg_t option_in_call(scanner_t *s)
{
    int depth = 1;
    ddp_local_rank_arg_t found = DDP_LOCAL_RANK_ARG_NONE;
    for (next(s); s->kind != TOK_END; next(s)) {
        if (s->kind == TOK_OPEN)
            depth++;
        else if (s->kind == TOK_CLOSE && --depth == 0)
            break;
        else if (s->kind == TOK_STRING && depth == 1 && found == DDP_LOCAL_RANK_ARG_NONE &&
                 s->len == 12 && memcmp(s->start, "--local", 7) == 0 &&
                 (s->start[7] == '_' || s->start[7] == '-') && memcmp(s->start + 8, "rank", 4) == 0)
            found = s->start[7] == '_' ? DDP_LOCAL_RANK_ARG_UNDERSCORE : DDP_LOCAL_RANK_ARG_DASH;
    }
    return found;
}

ddp_local_rank_arg_t ddp_pyscan_local_rank_option(const char *text, size_t len)
{
    scanner_t s = {.p = text, .end = text + len};
    bool after_name = false;
    for (next(&s); s.kind != TOK_END; next(&s)) {
        if (s.kind == TOK_OPEN && after_name) {
            ddp_local_rank_arg_t found = option_in_call(&s);
            if (found != DDP_LOCAL_RANK_ARG_NONE)
                return found;
            after_name = false;
            continue;
        }
        after_name = s.kind == TOK_NAME && s.len == 12 && memcmp(s.start, "add_argument", 12) == 0;
    }
    return DDP_LOCAL_RANK_ARG_NONE;
}

bool ddp_pyscan_imports(const char *text, size_t len, const char *module)
{
    scanner_t s = {.p = text, .end = text + len};
    size_t want = strlen(module);
    bool after_keyword = false;
    for (next(&s); s.kind != TOK_END; next(&s)) {
        bool name = s.kind == TOK_NAME;
        if (name && after_keyword && s.len == want && memcmp(s.start, module, want) == 0)
            return true;
        after_keyword = name && ((s.len == 6 && memcmp(s.start, "import", 6) == 0) ||
                                 (s.len == 4 && memcmp(s.start, "from", 4) == 0));
    }
    return false;
}
