/* The flag table and what reads a flag's value (config/flags.c), for the parser (cli.c) and
 * Slurm's defaults (slurm.c): config/'s own, included by no other folder. One row a flag:
 * the parser, --help and the man-page lint all read it. Main thread, before the loop. */
#ifndef DDP_LAUNCHER_CONFIG_FLAGS_H
#define DDP_LAUNCHER_CONFIG_FLAGS_H

#include "buf.h"
#include "config/config.h"
#include "log.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DDP_FLAGS_MAX 128 /* rows the table may have (ddp_nflags is how many it has) */

/* A flag's own conversion of `value` (given by `origin`: the flag as typed, or its
 * variable) into `cfg`: 0, or DDP_EUSAGE with the message in `err`. */
typedef int (*ddp_flag_apply_fn)(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                 const ddp_log_t *log, ddp_buf_t *err);

/* How a flag's value is read: most by kind into a field of the config; the rest by a
 * function of their own. */
typedef enum {
    DDP_FLAG_SWITCH,  /* bool: no value on the command line (true), 0 or 1 from PET_ */
    DDP_FLAG_INT,     /* int within [min, max] */
    DDP_FLAG_SECONDS, /* double within [min, max] */
    DDP_FLAG_SIZE,    /* uint64_t: digits with an optional K, M or G */
    DDP_FLAG_TEXT,    /* const char * into argv or the environment: not empty, at most max bytes */
    DDP_FLAG_CHOICE,  /* int (an enum): the index of the value among `choices`; no field: checked */
    DDP_FLAG_STD,     /* ddp_std_spec_t: torchrun's 0..3 or LOCAL_RANK:STD,... */
    DDP_FLAG_CODE,    /* apply() */
} ddp_flag_kind_t;

#define DDP_FLAG_NO_FIELD SIZE_MAX /* a flag of its own apply(), or a switch checked only */

/* One row per flag: the parser, --help and the man-page lint all read this table. */
typedef struct {
    const char *name; /* the dash spelling without "--"; the underscore one is derived */
    char short_name;  /* 'm', 'r', 't', 'h' or 0 */
    ddp_flag_kind_t kind;
    size_t field;    /* offsetof(ddp_launch_config_t, ...), or DDP_FLAG_NO_FIELD */
    double min, max; /* DDP_FLAG_INT, DDP_FLAG_SECONDS: the range (a fraction for seconds);
                      * DDP_FLAG_SIZE: min, the least (0: 1 byte), max the most (0: 1T);
                      * DDP_FLAG_TEXT: max, the most bytes */
    const char *const *choices; /* DDP_FLAG_CHOICE: NULL-terminated */
    ddp_flag_apply_fn apply;    /* DDP_FLAG_CODE */
    bool pet;                   /* reads its default from PET_<NAME> */
    bool at_once;               /* acts as soon as it is seen (--help, --version) */
    int group;                  /* --help's heading: DDP_FLAG_GROUP_* */
    const char *arg;            /* --help: the value's name ("" for a switch) */
    const char *help;           /* --help: what it does ("\n" continues the line) */
} ddp_flag_t;

/* --help's headings, in its order. */
enum {
    DDP_FLAG_GROUP_WORKERS,
    DDP_FLAG_GROUP_RDZV,
    DDP_FLAG_GROUP_PROGRAM,
    DDP_FLAG_GROUP_SUPERVISION,
    DDP_FLAG_GROUP_OUTPUT,
    DDP_FLAG_GROUP_OTHER,
    DDP_FLAG_NGROUPS
};
extern const char *const ddp_flag_groups[DDP_FLAG_NGROUPS]; /* NULL: no heading */

extern const ddp_flag_t ddp_flags[];
extern const int ddp_nflags;

/* What one flag was given as, before it is applied. */
typedef struct ddp_flag_raw_s {
    const char *value; /* NULL for a switch given on the command line */
    char origin[64];   /* the flag or its PET_ variable, for messages */
    bool set;
} ddp_flag_raw_t;

/* Formats "<origin>: <message>" (or just the message when origin is NULL) into err and
 * returns DDP_EUSAGE. */
__attribute__((format(printf, 3, 4))) int ddp_flag_usage(ddp_buf_t *err, const char *origin,
                                                         const char *fmt, ...);

/* The row of the flag whose dash spelling is `name`, or -1. */
int ddp_flag_index(const char *name);

/* Converts and checks one flag's given value into `cfg`, as its row says. 0 or DDP_EUSAGE
 * (or -ENOMEM) with the message in `err`. */
int ddp_flag_apply(const ddp_flag_t *f, ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw,
                   const ddp_log_t *log, ddp_buf_t *err);

/* One --env entry (`origin`: --env or --env-list): NAME=VALUE as given, or NAME with the
 * value it has in `envp`. 0, DDP_EUSAGE or -ENOMEM. */
int ddp_flag_add_env(ddp_launch_config_t *cfg, const char *origin, const char *item, size_t len,
                     char *const *envp, ddp_buf_t *err);

/* After every flag is applied: the combinations that cannot be (DDP_EUSAGE with the message),
 * and what follows from the values (the store's request limit, the endpoint's port). */
int ddp_flags_check(ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw, ddp_buf_t *err);

/* Each flag given where it does nothing, said in one line (the job goes on: harmless). */
void ddp_flags_warn(const ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw,
                    const ddp_log_t *log);

#endif
