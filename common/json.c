/* JSON reader and string escaper (see json.h). Recursive descent with a depth bound. */
#include "json.h"

#include "error.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ddp_json_s {
    ddp_json_type_t type;
    char *key;                /* member name when inside an object */
    struct ddp_json_s *next;  /* next sibling in the parent array or object */
    struct ddp_json_s *child; /* first element or member */
    char *text;               /* string contents */
    size_t text_len;
    double number;
    bool boolean;
};

typedef struct {
    const char *p;
    const char *end;
    int depth;
} parser_t;

static void skip_space(parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static bool take(parser_t *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static int hex4(parser_t *ps, uint32_t *out)
{
    uint32_t v = 0;
    if (ps->end - ps->p < 4)
        return DDP_EPARSE;
    for (int i = 0; i < 4; i++) {
        char c = *ps->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return DDP_EPARSE;
    }
    *out = v;
    return 0;
}

static int append_utf8(ddp_buf_t *b, uint32_t cp)
{
    char s[4];
    size_t n;
    if (cp < 0x80) {
        s[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = (char)(0xE0 | (cp >> 12));
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        s[0] = (char)(0xF0 | (cp >> 18));
        s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return ddp_buf_append(b, s, n);
}

/* Parses a string literal at ps->p (which is at the opening quote). */
/* One escape, after its backslash: appended to b decoded; 0 or an error. */
static int parse_escape(parser_t *ps, ddp_buf_t *b)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (ps->p >= ps->end)
        return DDP_EPARSE;
    char c = *ps->p++;
    const char *simple = c != '\0' ? strchr(from, c) : NULL;
    if (simple != NULL)
        return ddp_buf_append(b, &to[simple - from], 1);
    if (c != 'u')
        return DDP_EPARSE;
    uint32_t cp, low;
    int err = hex4(ps, &cp);
    if (err != 0)
        return err;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        /* A surrogate pair; a lone high surrogate becomes U+FFFD. */
        if (take(ps, "\\u") && hex4(ps, &low) == 0 && low >= 0xDC00 && low <= 0xDFFF)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        else
            cp = 0xFFFD;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        cp = 0xFFFD;
    }
    return append_utf8(b, cp);
}

static int parse_string(parser_t *ps, char **out, size_t *out_len)
{
    ddp_buf_t b = DDP_BUF_INIT;
    int err = 0;
    ps->p++;
    for (;;) {
        const char *run = ps->p;
        while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\\' && (unsigned char)*ps->p >= 0x20)
            ps->p++;
        if ((err = ddp_buf_append(&b, run, (size_t)(ps->p - run))) != 0)
            goto fail;
        if (ps->p >= ps->end || (unsigned char)*ps->p < 0x20) {
            err = DDP_EPARSE;
            goto fail;
        }
        if (*ps->p++ == '"')
            break;
        if ((err = parse_escape(ps, &b)) != 0) /* after a backslash */
            goto fail;
    }
    *out_len = b.len;
    *out = ddp_buf_steal(&b);
    if (*out == NULL)
        return -ENOMEM;
    return 0;
fail:
    ddp_buf_free(&b);
    return err;
}

static int parse_number(parser_t *ps, double *out)
{
    const char *start = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    size_t digits = 0;
    while (ps->p < ps->end && ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '.' || *ps->p == 'e' ||
                               *ps->p == 'E' || *ps->p == '+' || *ps->p == '-')) {
        ps->p++;
        digits++;
    }
    if (digits == 0 || ps->p - start > 64)
        return DDP_EPARSE;
    char tmp[72];
    memcpy(tmp, start, (size_t)(ps->p - start));
    tmp[ps->p - start] = '\0';
    char *end;
    *out = strtod(tmp, &end);
    return *end == '\0' ? 0 : DDP_EPARSE;
}

static int parse_value(parser_t *ps, ddp_json_t **out);

/* Parses the elements of an array or the members of an object into v->child. */
static int parse_container(parser_t *ps, ddp_json_t *v, char close)
{
    ddp_json_t **tail = &v->child;
    ps->p++;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        size_t key_len;
        int err;
        skip_space(ps);
        if (close == '}') {
            if (ps->p >= ps->end || *ps->p != '"')
                return DDP_EPARSE;
            if ((err = parse_string(ps, &key, &key_len)) != 0)
                return err;
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                return DDP_EPARSE;
            }
            ps->p++;
        }
        ddp_json_t *item;
        if ((err = parse_value(ps, &item)) != 0) {
            free(key);
            return err;
        }
        item->key = key;
        *tail = item;
        tail = &item->next;
        skip_space(ps);
        if (ps->p >= ps->end)
            return DDP_EPARSE;
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return 0;
        }
        return DDP_EPARSE;
    }
}

static int parse_value(parser_t *ps, ddp_json_t **out)
{
    skip_space(ps);
    if (ps->p >= ps->end)
        return DDP_EPARSE;
    ddp_json_t *v = calloc(1, sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    int err = 0;
    char c = *ps->p;
    if (c == '{' || c == '[') {
        if (++ps->depth > DDP_JSON_MAX_DEPTH) {
            err = DDP_EPARSE;
        } else {
            v->type = c == '{' ? DDP_JSON_OBJECT : DDP_JSON_ARRAY;
            err = parse_container(ps, v, c == '{' ? '}' : ']');
            ps->depth--;
        }
    } else if (c == '"') {
        v->type = DDP_JSON_STRING;
        err = parse_string(ps, &v->text, &v->text_len);
    } else if (take(ps, "true")) {
        v->type = DDP_JSON_BOOL;
        v->boolean = true;
    } else if (take(ps, "false")) {
        v->type = DDP_JSON_BOOL;
    } else if (take(ps, "null")) {
        v->type = DDP_JSON_NULL;
    } else {
        v->type = DDP_JSON_NUMBER;
        err = parse_number(ps, &v->number);
    }
    if (err) {
        ddp_json_free(v);
        return err;
    }
    *out = v;
    return 0;
}

int ddp_json_parse(const char *text, size_t len, ddp_json_t **out)
{
    parser_t ps = {.p = text, .end = text + len, .depth = 0};
    ddp_json_t *root;
    int err = parse_value(&ps, &root);
    if (err)
        return err;
    skip_space(&ps);
    if (ps.p != ps.end) {
        ddp_json_free(root);
        return DDP_EPARSE;
    }
    *out = root;
    return 0;
}

void ddp_json_free(ddp_json_t *value)
{
    /* Siblings are freed iteratively, children recursively (depth is bounded). */
    while (value != NULL) {
        ddp_json_t *next = value->next;
        ddp_json_free(value->child);
        free(value->key);
        free(value->text);
        free(value);
        value = next;
    }
}

ddp_json_type_t ddp_json_type(const ddp_json_t *value)
{
    return value->type;
}

const ddp_json_t *ddp_json_get(const ddp_json_t *value, const char *key)
{
    const ddp_json_t *found = NULL;
    if (value == NULL || value->type != DDP_JSON_OBJECT)
        return NULL;
    for (const ddp_json_t *m = value->child; m != NULL; m = m->next) {
        if (strcmp(m->key, key) == 0)
            found = m;
    }
    return found;
}

const ddp_json_t *ddp_json_first(const ddp_json_t *value)
{
    if (value == NULL || (value->type != DDP_JSON_ARRAY && value->type != DDP_JSON_OBJECT))
        return NULL;
    return value->child;
}

const ddp_json_t *ddp_json_next(const ddp_json_t *value)
{
    return value != NULL ? value->next : NULL;
}

const char *ddp_json_string(const ddp_json_t *value, size_t *len)
{
    if (value == NULL || value->type != DDP_JSON_STRING)
        return NULL;
    if (len != NULL)
        *len = value->text_len;
    return value->text;
}

bool ddp_json_number(const ddp_json_t *value, double *out)
{
    if (value == NULL || value->type != DDP_JSON_NUMBER)
        return false;
    *out = value->number;
    return true;
}

bool ddp_json_true(const ddp_json_t *value)
{
    return value != NULL && value->type == DDP_JSON_BOOL && value->boolean;
}

int ddp_json_append_string(ddp_buf_t *out, const char *text, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    int err = ddp_buf_append(out, "\"", 1);
    for (size_t i = 0; err == 0 && i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        char esc[7];
        size_t n = 2;
        esc[0] = '\\';
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            if (c < 0x20) {
                memcpy(esc + 1, "u00", 3);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                n = 6;
            } else {
                esc[0] = (char)c;
                n = 1;
            }
        }
        err = ddp_buf_append(out, esc, n);
    }
    if (err == 0)
        err = ddp_buf_append(out, "\"", 1);
    return err;
}
