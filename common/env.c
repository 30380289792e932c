/* The environment variable table (see env.h). */
#include "env.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    const char *def;
    const char *help;
} table[DDP_ENV__COUNT] = {
#define DDP_ENV_ROW(name, def, help) {#name, def, help},
    DDP_ENV_MAP(DDP_ENV_ROW)
#undef DDP_ENV_ROW
};

const char *ddp_env_name(ddp_env_id_t id)
{
    return table[id].name;
}

const char *ddp_env_default(ddp_env_id_t id)
{
    return table[id].def;
}

const char *ddp_env_help(ddp_env_id_t id)
{
    return table[id].help;
}

const char *ddp_env_get(ddp_env_id_t id)
{
    const char *value = getenv(table[id].name);
    return value != NULL && *value != '\0' ? value : table[id].def;
}

const char *ddp_env_lookup(char *const *envp, const char *name)
{
    size_t len = strlen(name);
    for (; envp != NULL && *envp != NULL; envp++) {
        if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=')
            return *envp + len + 1;
    }
    return NULL;
}
