/* Node health checks (see health.h). */
#include "health.h"

#include "devices.h"
#include "io.h"
#include "nvml.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define STDERR_KEEP 4096 /* the command's last stderr bytes kept for its reason */

bool ddp_health_checks_apply(const ddp_launch_config_t *cfg)
{
    return cfg->health_command != NULL || cfg->health_paths != NULL ||
           cfg->nproc_kind == DDP_NPROC_GPU;
}

/* --health-check-path: each of the comma-separated paths can be read (a directory listed). */
static int check_paths(const char *paths, ddp_buf_t *why)
{
    char *copy = strdup(paths), *save = NULL;
    int rc = copy == NULL ? -ENOMEM : 0;
    for (char *p = copy ? strtok_r(copy, ",", &save) : NULL; p != NULL && rc == 0;
         p = strtok_r(NULL, ",", &save)) {
        int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            ddp_buf_printf(why, "--health-check-path: %s: %s", p, strerror(errno));
            rc = 1;
        } else {
            close(fd);
        }
    }
    free(copy);
    return rc;
}

/* With --nproc-per-node=gpu the node was sized by its GPUs: a GPU gone since (fallen off the
 * bus, the driver wedged) is a node that would start fewer workers than the job expects. */
static int check_gpu_count(const ddp_launch_config_t *cfg, ddp_buf_t *why, int *visible)
{
    int count = 0;
    ddp_buf_t reason = DDP_BUF_INIT;
    int err = ddp_devices_cuda_count(&count, &reason);
    int rc = 0;
    if (err != 0) {
        ddp_buf_printf(why, "GPUs: %s", ddp_buf_str(&reason));
        rc = 1;
    } else if (cfg->nproc_per_node > 0 && count < cfg->nproc_per_node) {
        ddp_buf_printf(why, "GPUs: %d visible, %d expected (--nproc-per-node=gpu)", count,
                       cfg->nproc_per_node);
        rc = 1;
    }
    *visible = count;
    ddp_buf_free(&reason);
    return rc;
}

enum { NVML_UNCORRECTED = 1, NVML_VOLATILE = 0 };

/* Through NVML, where the driver is: a page retirement pending, a failed row remap, or
 * uncorrectable ECC errors since the driver loaded, on any GPU. A missing driver or a
 * query a GPU does not support is no finding. `looked` gets the GPUs NVML answered for
 * (-1: no NVML). */
static int check_nvml(ddp_buf_t *why, int *looked)
{
    *looked = -1;
    ddp_nvml_t nvml;
    ddp_buf_t ignored = DDP_BUF_INIT;
    int opened = ddp_nvml_open(&nvml, &ignored);
    ddp_buf_free(&ignored);
    if (opened != 0)
        return 0;
    unsigned int n = 0;
    int rc = 0;
    if (nvml.count(&n) != DDP_NVML_SUCCESS)
        n = 0;
    *looked = 0;
    for (unsigned int i = 0; i < n && rc == 0; i++) {
        void *device;
        int state = 0;
        unsigned int corrected = 0, uncorrected = 0, remap_pending = 0, failed = 0;
        unsigned long long errors = 0;
        if (nvml.handle(i, &device) != DDP_NVML_SUCCESS)
            continue;
        ++*looked;
        if (nvml.pending != NULL && nvml.pending(device, &state) == DDP_NVML_SUCCESS &&
            state == DDP_NVML_FEATURE_ENABLED) {
            ddp_buf_printf(why, "GPU %u (NVML): a page retirement is pending (reset the GPU)", i);
            rc = 1;
        } else if (nvml.remap != NULL &&
                   nvml.remap(device, &corrected, &uncorrected, &remap_pending, &failed) ==
                       DDP_NVML_SUCCESS &&
                   failed != 0) {
            ddp_buf_printf(why, "GPU %u (NVML): a row remapping failed", i);
            rc = 1;
        } else if (nvml.ecc != NULL &&
                   nvml.ecc(device, NVML_UNCORRECTED, NVML_VOLATILE, &errors) == DDP_NVML_SUCCESS &&
                   errors > 0) {
            ddp_buf_printf(why,
                           "GPU %u (NVML): %llu uncorrectable ECC error(s) since the driver "
                           "loaded",
                           i, errors);
            rc = 1;
        }
    }
    ddp_nvml_close(&nvml);
    return rc;
}

/* --health-check=CMD with /bin/sh, in its own process group, for at most `timeout` s: exit 0
 * is healthy; otherwise its last line of stderr is the reason. */
static int check_command(const char *command, double timeout, ddp_buf_t *why)
{
    char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
    char tail[STDERR_KEEP];
    size_t kept = 0;
    int status = 0;
    int rc = ddp_proc_run_bounded(argv, false, timeout, tail, sizeof tail, &kept, &status);
    if (rc < 0) {
        ddp_buf_printf(why, "--health-check: unable to run /bin/sh: %s", strerror(-rc));
        return 1;
    }
    if (rc == 1) {
        ddp_buf_printf(why,
                       "--health-check: '%s' did not finish within %g s "
                       "(--health-check-timeout)",
                       command, timeout);
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    char line[512];
    ddp_proc_last_line(tail, kept, line, sizeof line);
    if (WIFEXITED(status))
        ddp_buf_printf(why, "--health-check: '%s' exited with %d%s%s", command, WEXITSTATUS(status),
                       line[0] ? ": " : "", line);
    else
        ddp_buf_printf(why, "--health-check: '%s' was killed by signal %d%s%s", command,
                       WTERMSIG(status), line[0] ? ": " : "", line);
    return 1;
}

int ddp_health_check(const ddp_launch_config_t *cfg, ddp_buf_t *why)
{
    ddp_buf_t passed = DDP_BUF_INIT;
    int rc = 0, visible = 0, looked = -1;
    if (cfg->health_paths != NULL && (rc = check_paths(cfg->health_paths, why)) == 0)
        ddp_buf_printf(&passed, "paths %s readable; ", cfg->health_paths);
    if (rc == 0 && cfg->nproc_kind == DDP_NPROC_GPU &&
        (rc = check_gpu_count(cfg, why, &visible)) == 0)
        ddp_buf_printf(&passed, "%d GPU(s) visible; ", visible);
    if (rc == 0 && ddp_health_checks_apply(cfg) && (rc = check_nvml(why, &looked)) == 0) {
        if (looked < 0)
            ddp_buf_puts(&passed, "no NVML; ");
        else
            ddp_buf_printf(&passed,
                           "NVML: %d GPU(s) without a pending page retirement, failed "
                           "row remap or uncorrectable ECC error; ",
                           looked);
    }
    if (rc == 0 && cfg->health_command != NULL &&
        (rc = check_command(cfg->health_command, cfg->health_timeout, why)) == 0)
        ddp_buf_puts(&passed, "--health-check exited 0; ");
    if (rc == 0 && passed.len >= 2) /* without the last "; " */
        ddp_buf_printf(why, "%.*s", (int)passed.len - 2, ddp_buf_str(&passed));
    ddp_buf_free(&passed);
    return rc;
}

struct ddp_gpu_memory_s {
    ddp_nvml_t nvml;
    void *devices[64];
    unsigned int n;
};

ddp_gpu_memory_t *ddp_gpu_memory_open(void)
{
    ddp_gpu_memory_t *m = calloc(1, sizeof *m);
    ddp_buf_t ignored = DDP_BUF_INIT;
    if (m == NULL)
        return NULL;
    int opened = ddp_nvml_open(&m->nvml, &ignored);
    ddp_buf_free(&ignored);
    unsigned int n = 0;
    if (opened != 0 || m->nvml.memory == NULL || m->nvml.count(&n) != DDP_NVML_SUCCESS)
        n = 0;
    for (unsigned int i = 0; i < n && m->n < 64; i++)
        if (m->nvml.handle(i, &m->devices[m->n]) == DDP_NVML_SUCCESS)
            m->n++;
    if (m->n == 0) {
        ddp_gpu_memory_close(m);
        return NULL;
    }
    return m;
}

/* What processes hold on `device`: _v2's `used`, without the driver's reservation, where
 * the driver has it; else the first version's, which counts the reservation. */
static int device_memory_used(ddp_nvml_t *nvml, void *device, unsigned long long *used)
{
    ddp_nvml_memory_v2_t v2 = {.version = DDP_NVML_MEMORY_V2};
    if (nvml->memory_v2 != NULL && nvml->memory_v2(device, &v2) == DDP_NVML_SUCCESS) {
        *used = v2.used;
        return 0;
    }
    ddp_nvml_memory_t v1;
    if (nvml->memory(device, &v1) != DDP_NVML_SUCCESS)
        return -EIO;
    *used = v1.used;
    return 0;
}

int ddp_gpu_memory_used(ddp_gpu_memory_t *m, unsigned long long *used, int *gpu)
{
    unsigned long long most = 0;
    int at = 0;
    for (unsigned int i = 0; i < m->n; i++) {
        unsigned long long held;
        if (device_memory_used(&m->nvml, m->devices[i], &held) != 0)
            return -EIO;
        if (held > most) {
            most = held;
            at = (int)i;
        }
    }
    *used = most;
    *gpu = at;
    return 0;
}

void ddp_gpu_memory_close(ddp_gpu_memory_t *m)
{
    if (m == NULL)
        return;
    ddp_nvml_close(&m->nvml);
    free(m);
}
