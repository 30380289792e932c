/* The launcher's configuration: defaults and what it owns (see config.h). */
#include "config/config.h"

#include "env.h"
#include "strv.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

void ddp_config_defaults(ddp_launch_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->nnodes_min = cfg->nnodes_max = 1;
    cfg->nproc_kind = DDP_NPROC_INT;
    cfg->nproc_per_node = 1;
    strcpy(cfg->master_addr, "127.0.0.1");
    cfg->master_port = 29500;
    cfg->rdzv_backend = DDP_RDZV_STATIC;
    cfg->rdzv_conf = (ddp_rdzv_conf_t){600, 30, 30, 60, 900, -1, 1, 3};
    cfg->monitor_interval = 0.1;
    cfg->shutdown_timeout = 30;
    cfg->health_timeout = 60;
    cfg->gpu_reclaim_timeout = 50;
    cfg->max_no_progress = 3;
    cfg->hang_floor = 10;
    cfg->straggler_report = 300;
    cfg->store_wait_notice = 60;
    cfg->finished_wait_notice = 60;
    cfg->straggler_threshold = 1.2;
    cfg->checkpoint_replicas = -1;
    cfg->checkpoint_replica_rate = 1ull << 30;
    cfg->signals[0] = SIGTERM;
    cfg->signals[1] = SIGINT;
    cfg->signals[2] = SIGHUP;
    cfg->signals[3] = SIGQUIT;
    cfg->nsignals = 4;
    cfg->role = "default";
    cfg->python_exec = ddp_env_default(DDP_ENV_PYTHON_EXEC);
    cfg->store_limits = DDP_CODEC_LIMITS_DEFAULT;
    cfg->store_busy_poll_us = 200;
}

void ddp_config_free(ddp_launch_config_t *cfg)
{
    free(cfg->run_id);
    free(cfg->etcd.given);
    ddp_strv_free(cfg->etcd.endpoints);
    free(cfg->etcd.cacert);
    free(cfg->etcd.cert);
    free(cfg->etcd.key);
    cfg->etcd = (ddp_etcd_conf_t){0};
    free(cfg->script_path);
    cfg->script_path = NULL;
    free(cfg->python_found);
    cfg->python_found = NULL;
    ddp_numa_binds_free(cfg->numa_binds, cfg->nproc_per_node);
    cfg->numa_binds = NULL;
    free(cfg->numa_note);
    cfg->numa_note = NULL;
    for (int i = 0; cfg->virtual_devices != NULL && cfg->virtual_devices[i] != NULL; i++)
        free(cfg->virtual_devices[i]);
    free(cfg->virtual_devices);
    cfg->virtual_devices = NULL;
    free(cfg->redirects.map);
    free(cfg->tee.map);
    free(cfg->ranks_filter);
    for (int i = 0; i < cfg->nenv; i++)
        free(cfg->env_set[i]);
    free(cfg->env_set);
    cfg->env_set = NULL;
    cfg->nenv = 0;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < cfg->ndup_filters[s]; i++)
            free(cfg->dup_filters[s][i]);
        free(cfg->dup_filters[s]);
        cfg->dup_filters[s] = NULL;
        cfg->ndup_filters[s] = 0;
    }
    for (int i = 0; i < cfg->nenv_check; i++)
        free(cfg->env_check[i]);
    free(cfg->env_check);
    cfg->env_check = NULL;
    cfg->nenv_check = 0;
    cfg->run_id = NULL;
    cfg->redirects.map = cfg->tee.map = NULL;
    cfg->ranks_filter = NULL;
}

int ddp_std_for(const ddp_std_spec_t *spec, int local_rank)
{
    int std = spec->all;
    for (size_t i = 0; i < spec->nmap; i++) {
        if (spec->map[i].local_rank == local_rank)
            std = spec->map[i].std;
    }
    return std;
}

bool ddp_config_rank_shown(const ddp_launch_config_t *cfg, int local_rank)
{
    if (!cfg->ranks_filter_set)
        return true;
    for (size_t i = 0; i < cfg->nranks_filter; i++) {
        if (cfg->ranks_filter[i] == local_rank)
            return true;
    }
    return false;
}

bool ddp_config_dynamic(const ddp_launch_config_t *cfg)
{
    /* etcd: one node too forms its rounds through the coordinator etcd elects. */
    return cfg->rdzv_backend == DDP_RDZV_ETCD ||
           (cfg->nnodes_max > 1 &&
            (cfg->rdzv_backend == DDP_RDZV_C10D || cfg->nnodes_min != cfg->nnodes_max));
}

ddp_store_host_t ddp_config_store_host(const ddp_launch_config_t *cfg)
{
    if (cfg->rdzv_backend == DDP_RDZV_ETCD)
        return DDP_STORE_HOST_ELECTED;
    if (!ddp_config_dynamic(cfg))
        return cfg->node_rank == 0 ? DDP_STORE_HOST_SELF : DDP_STORE_HOST_NODE0;
    if (cfg->rdzv_conf.is_host == 1)
        return DDP_STORE_HOST_SELF;
    return cfg->rdzv_conf.is_host == 0 ? DDP_STORE_HOST_ELSEWHERE : DDP_STORE_HOST_IF_FREE;
}

bool ddp_config_events_valid(const char *spec)
{
    return strcmp(spec, "null") == 0 || strcmp(spec, "console") == 0 ||
           (strncmp(spec, "file:", 5) == 0 && spec[5] != '\0');
}

void ddp_config_health_spec(const ddp_launch_config_t *cfg, ddp_health_spec_t *out)
{
    *out = (ddp_health_spec_t){
        .command = cfg->health_command,
        .paths = cfg->health_paths,
        .gpus = cfg->nproc_kind == DDP_NPROC_GPU ? cfg->nproc_per_node : -1,
        .timeout = cfg->health_timeout,
    };
}
