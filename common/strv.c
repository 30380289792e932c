/* NULL-terminated arrays of owned strings (see strv.h). */
#include "strv.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

char **ddp_strv_copy(char *const *strv)
{
    size_t n = 0;
    while (strv != NULL && strv[n] != NULL)
        n++;
    char **copy = calloc(n + 1, sizeof *copy);
    for (size_t i = 0; copy != NULL && i < n; i++) {
        if ((copy[i] = strdup(strv[i])) == NULL) {
            ddp_strv_free(copy);
            return NULL;
        }
    }
    return copy;
}

void ddp_strv_free(char **strv)
{
    if (strv == NULL)
        return;
    for (char **p = strv; *p != NULL; p++)
        free(*p);
    free(strv);
}
