/* Python's string.Template.safe_substitute, which torchrun applies to script arguments
 * (${local_rank}) and to TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
 *
 * ${name} and $name are replaced when `name` is one of the given variables, "$$"
 * becomes "$", and anything else (unknown names, a lone "$") is left as it is. Pure. */
#ifndef DDP_COMMON_TEMPLATE_H
#define DDP_COMMON_TEMPLATE_H

#include <stddef.h>

typedef struct ddp_template_var_s {
    const char *name;
    const char *value;
} ddp_template_var_t;

/* *out is a new string (caller frees). Returns 0 or -ENOMEM. */
int ddp_template_substitute(const char *text, const ddp_template_var_t *vars, size_t nvars,
                            char **out);

#endif
