/* string.Template.safe_substitute (see template.h). */
#include "template.h"

#include "buf.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

static bool ident_start(char c)
{
    return c == '_' || isalpha((unsigned char)c);
}

static bool ident_char(char c)
{
    return c == '_' || isalnum((unsigned char)c);
}

static const char *lookup(const ddp_template_var_t *vars, size_t nvars, const char *id, size_t len)
{
    for (size_t i = 0; i < nvars; i++) {
        if (strlen(vars[i].name) == len && memcmp(vars[i].name, id, len) == 0)
            return vars[i].value;
    }
    return NULL;
}

int ddp_template_substitute(const char *text, const ddp_template_var_t *vars, size_t nvars,
                            char **out)
{
    ddp_buf_t b = DDP_BUF_INIT;
    int err = 0;
    const char *p = text;
    while (*p && err == 0) {
        if (p[0] != '$') {
            const char *next = strchr(p, '$');
            size_t n = next ? (size_t)(next - p) : strlen(p);
            err = ddp_buf_append(&b, p, n);
            p += n;
            continue;
        }
        if (p[1] == '$') {
            err = ddp_buf_append(&b, "$", 1);
            p += 2;
            continue;
        }
        bool braced = p[1] == '{';
        const char *id = p + 1 + braced;
        size_t len = 0;
        if (ident_start(id[0])) {
            while (ident_char(id[len]))
                len++;
        }
        const char *value = NULL;
        if (len > 0 && (!braced || id[len] == '}'))
            value = lookup(vars, nvars, id, len);
        if (value != NULL) {
            err = ddp_buf_puts(&b, value);
            p = id + len + braced;
        } else {
            err = ddp_buf_append(&b, "$", 1);
            p++;
        }
    }
    if (err == 0 && (*out = ddp_buf_steal(&b)) == NULL)
        err = -ENOMEM;
    if (err)
        ddp_buf_free(&b);
    return err;
}
