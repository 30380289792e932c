/* NULL-terminated arrays of strings (argv, an environment) that own their strings. Pure. */
#ifndef DDP_COMMON_STRV_H
#define DDP_COMMON_STRV_H

/* Frees each string, then the array; NULL is harmless. */
void ddp_strv_free(char **strv);

/* A deep copy of `strv` (NULL: an empty list), or NULL when out of memory. */
char **ddp_strv_copy(char *const *strv);

#endif
