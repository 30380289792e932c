/* Unit tests of launcher/host/topology.c and host/numa.c: the topology reader and torchrun's four
 * binding modes against trees made from the machines in tests/data/topology (a 2-socket 8-GPU
 * server, a 1-socket workstation, this project's CPU-only VM and the lent H200 VM as recorded),
 * some with a file changed to make the case at hand (a launcher confined to a few CPUs, a node
 * without memory, a malformed list). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "host/numa.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DDP_TOPOLOGY_DIR
#error "the build passes DDP_TOPOLOGY_DIR, the recorded machines' directory"
#endif

typedef struct {
    char root[64];
} tree_t;

/* Writes `text` at root/path, making its directories (only when they differ from the last
 * file's: a recorded machine is thousands of files in a few hundred directories). */
static void put(const tree_t *t, const char *path, const char *text)
{
    static char made[PATH_MAX];
    char full[PATH_MAX];
    snprintf(full, sizeof full, "%s/%s", t->root, path);
    char *slash = strrchr(full, '/');
    *slash = '\0';
    if (strcmp(made, full) != 0) {
        for (char *p = full + strlen(t->root) + 1; (p = strchr(p, '/')) != NULL; p++) {
            *p = '\0';
            (void)mkdir(full, 0755);
            *p = '/';
        }
        (void)mkdir(full, 0755);
        snprintf(made, sizeof made, "%s", full);
    }
    *slash = '/';
    int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(write(fd, "\n", 1), 1);
    close(fd);
}

/* The tree of machine `name` (tests/data/topology/<name>.txt: "PATH<TAB>LINE" lines), then
 * each of `changes` ("PATH<TAB>LINE") written over it. */
static tree_t *tree(const char *name, const char *const *changes)
{
    tree_t *t = calloc(1, sizeof *t);
    char path[PATH_MAX], line[8192];
    /* In memory where there is a tmpfs: a file on this machine's disk costs 150 us to make. */
    snprintf(t->root, sizeof t->root, "%s/ddp-topology-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    assert_non_null(mkdtemp(t->root));
    snprintf(path, sizeof path, "%s/%s.txt", DDP_TOPOLOGY_DIR, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *tab = strchr(line, '\t');
        if (line[0] == '#' || tab == NULL)
            continue;
        *tab = '\0';
        put(t, line, tab + 1);
    }
    fclose(f);
    for (const char *const *c = changes; c != NULL && *c != NULL; c++) {
        snprintf(line, sizeof line, "%s", *c);
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = '\0';
        put(t, line, tab + 1);
    }
    return t;
}

static void tree_free(tree_t *t)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->root);
    assert_int_equal(system(cmd), 0);
    free(t);
}

static void read_tree(const tree_t *t, const char *visible, ddp_topology_t *topo)
{
    char env_item[256];
    char *envp[] = {env_item, NULL};
    snprintf(env_item, sizeof env_item, "CUDA_VISIBLE_DEVICES=%s", visible ? visible : "");
    ddp_buf_t why = DDP_BUF_INIT;
    int rc = ddp_topology_read(topo, t->root, visible ? envp : envp + 1, &why);
    if (rc != 0)
        fail_msg("ddp_topology_read: %d: %s", rc, ddp_buf_str(&why));
    ddp_buf_free(&why);
}

/* Asserts the binding of `local_rank` under `mode`: its CPU list and memory node. */
static void expect_bind(const ddp_topology_t *topo, ddp_numa_mode_t mode, int local_rank,
                        const char *cpus, int mem_node)
{
    ddp_numa_bind_t b;
    ddp_buf_t why = DDP_BUF_INIT, got = DDP_BUF_INIT;
    int rc = ddp_numa_bind_for(topo, mode, local_rank, &b, &why);
    if (rc != 0)
        fail_msg("%s, local rank %d: %s", ddp_numa_mode_name(mode), local_rank, ddp_buf_str(&why));
    ddp_cpus_format(&b.cpus, &got);
    if (strcmp(ddp_buf_str(&got), cpus) != 0 || b.mem_node != mem_node)
        fail_msg("%s, local rank %d: CPUs %s, memory node %d; expected %s, %d",
                 ddp_numa_mode_name(mode), local_rank, ddp_buf_str(&got), b.mem_node, cpus,
                 mem_node);
    assert_int_equal(b.gpu, local_rank);
    assert_non_null(strstr(b.text, cpus));
    ddp_cpus_free(&b.cpus);
    free(b.text);
    ddp_buf_free(&got);
    ddp_buf_free(&why);
}

/* Asserts that `local_rank` cannot be bound, for a reason holding `needle`. */
static void expect_refused(const ddp_topology_t *topo, ddp_numa_mode_t mode, int local_rank,
                           const char *needle)
{
    ddp_numa_bind_t b;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_numa_bind_for(topo, mode, local_rank, &b, &why), -EINVAL);
    if (strstr(ddp_buf_str(&why), needle) == NULL)
        fail_msg("local rank %d refused with '%s', expected '%s'", local_rank, ddp_buf_str(&why),
                 needle);
    ddp_buf_free(&why);
}

static void expect_no_op(const ddp_topology_t *topo, int nworkers, const char *needle)
{
    ddp_buf_t why = DDP_BUF_INIT;
    assert_false(ddp_numa_applies(topo, nworkers, &why));
    if (strstr(ddp_buf_str(&why), needle) == NULL)
        fail_msg("no-op for '%s', expected '%s'", ddp_buf_str(&why), needle);
    ddp_buf_free(&why);
}

static void test_cpu_lists(void **state)
{
    static const struct {
        const char *text;
        int rc;
        const char *formatted;
    } cases[] = {
        {"0-3,8-11\n", 0, "0-3,8-11"},
        {"5", 0, "5"},
        {"", 0, ""},
        {"\n", 0, ""},
        {"0,2,4-5,3", 0, "0,2-5"},
        {"3-1", -EINVAL, NULL},
        {"1,,2", -EINVAL, NULL},
        {"1,", -EINVAL, NULL},
        {"-1", -EINVAL, NULL},
        {"0-2 x", -EINVAL, NULL},
        {"a", -EINVAL, NULL},
        {"1-", -EINVAL, NULL},
        {"128", -ERANGE, NULL},
        {"99999999999999999999", -ERANGE, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ddp_cpus_t set;
        int rc = ddp_cpus_parse(cases[i].text, 2, &set); /* 128 CPUs */
        if (rc != cases[i].rc)
            fail_msg("'%s': %d, expected %d", cases[i].text, rc, cases[i].rc);
        if (rc != 0)
            continue;
        ddp_buf_t out = DDP_BUF_INIT;
        ddp_cpus_format(&set, &out);
        assert_string_equal(ddp_buf_str(&out), cases[i].formatted);
        ddp_buf_free(&out);
        ddp_cpus_free(&set);
    }
}

static void test_server_topology(void **state)
{
    tree_t *t = tree("dgx-a100", NULL);
    ddp_topology_t topo;
    read_tree(t, NULL, &topo);
    assert_int_equal(topo.ncpus, 256);
    assert_int_equal(topo.nonline, 8);
    /* Eight GPUs in PCI order: the NVSwitches and the audio function are not GPUs. */
    assert_int_equal(topo.ngpus, 8);
    static const int nodes[] = {3, 3, 1, 1, 7, 7, 5, 5};
    for (int g = 0; g < 8; g++)
        assert_int_equal(topo.gpu_node[g], nodes[g]);
    assert_string_equal(topo.gpu_pci[0], "0000:07:00.0");
    assert_string_equal(topo.gpu_pci[7], "0000:bd:00.0");
    assert_int_equal(topo.package[48], 0);  /* the first CPU of node 3 */
    assert_int_equal(topo.package[112], 1); /* of node 7 */
    assert_int_equal(topo.core[178], 50);
    assert_int_equal(topo.cache[178], 48); /* the L3, not the L1 or L2 */
    ddp_buf_t why = DDP_BUF_INIT;
    assert_true(ddp_numa_applies(&topo, 8, &why));
    ddp_buf_free(&why);
    ddp_topology_free(&topo);
    tree_free(t);
}

/* Every mode on the server, as torch/numa/binding.py defines them. */
static void test_server_modes(void **state)
{
    tree_t *t = tree("dgx-a100", NULL);
    ddp_topology_t topo;
    read_tree(t, NULL, &topo);
    expect_bind(&topo, DDP_NUMA_NODE, 0, "48-63,176-191", 3);
    expect_bind(&topo, DDP_NUMA_NODE, 1, "48-63,176-191", 3);
    expect_bind(&topo, DDP_NUMA_NODE, 2, "16-31,144-159", 1);
    expect_bind(&topo, DDP_NUMA_NODE, 4, "112-127,240-255", 7);
    /* socket: the NUMA nodes of the GPU's socket (0-3 or 4-7); memory stays on the GPU's. */
    expect_bind(&topo, DDP_NUMA_SOCKET, 0, "0-63,128-191", 3);
    expect_bind(&topo, DDP_NUMA_SOCKET, 3, "0-63,128-191", 1);
    expect_bind(&topo, DDP_NUMA_SOCKET, 6, "64-127,192-255", 5);
    /* exclusive: node 3's 16 cores split between GPUs 0 and 1, with their SMT siblings. */
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 0, "48-55,176-183", 3);
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 1, "56-63,184-191", 3);
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 6, "80-87,208-215", 5);
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 7, "88-95,216-223", 5);
    /* core-complex: one of the node's four L3 complexes each, in order. */
    expect_bind(&topo, DDP_NUMA_CORE_COMPLEX, 0, "48-51,176-179", 3);
    expect_bind(&topo, DDP_NUMA_CORE_COMPLEX, 1, "52-55,180-183", 3);
    expect_bind(&topo, DDP_NUMA_CORE_COMPLEX, 7, "84-87,212-215", 5);
    /* A ninth worker has no GPU. */
    expect_refused(&topo, DDP_NUMA_NODE, 8, "no GPU 8 to bind it near: 8 GPU(s) visible");
    ddp_topology_free(&topo);
    tree_free(t);
}

/* CUDA_VISIBLE_DEVICES: local rank i is the i-th GPU listed. */
static void test_visible_devices(void **state)
{
    tree_t *t = tree("dgx-a100", NULL);
    ddp_topology_t topo;
    read_tree(t, "4,5", &topo);
    assert_int_equal(topo.ngpus, 2);
    expect_bind(&topo, DDP_NUMA_NODE, 0, "112-127,240-255", 7);
    /* The two visible GPUs share node 7: exclusive splits it between them. */
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 1, "120-127,248-255", 7);
    ddp_topology_free(&topo);

    read_tree(t, "6, 2,9,0", &topo); /* CUDA stops at the first index that names no GPU */
    assert_int_equal(topo.ngpus, 2);
    expect_bind(&topo, DDP_NUMA_NODE, 1, "16-31,144-159", 1);
    /* Alone on node 5 and node 1: exclusive gives each its whole node. */
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 0, "80-95,208-223", 5);
    ddp_topology_free(&topo);

    read_tree(t, "", &topo);
    assert_int_equal(topo.ngpus, 0);
    expect_no_op(&topo, 2, "no GPU is visible (CUDA_VISIBLE_DEVICES= names none");
    ddp_topology_free(&topo);

    /* A MIG instance: where it sits cannot be read from sysfs. */
    read_tree(t, "MIG-4f0c2a1e-0000-0000-0000-000000000000", &topo);
    assert_int_equal(topo.ngpus, 1);
    expect_no_op(&topo, 1, "GPU 0's PCI address is unknown");
    ddp_topology_free(&topo);
    tree_free(t);
}

/* A launcher confined to a few CPUs (Slurm's --cpus-per-task, taskset) binds within them. */
static void test_confined_launcher(void **state)
{
    const char *const five_cores[] = {"proc/self/status\tCpus_allowed_list:\t48-52,176-180", NULL};
    tree_t *t = tree("dgx-a100", five_cores);
    ddp_topology_t topo;
    read_tree(t, NULL, &topo);
    expect_bind(&topo, DDP_NUMA_NODE, 0, "48-52,176-180", 3);
    /* Five cores for two GPUs: the first gets the extra one. */
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 0, "48-50,176-178", 3);
    expect_bind(&topo, DDP_NUMA_EXCLUSIVE, 1, "51-52,179-180", 3);
    /* The largest complex first: 48-51 holds four of the allowed cores, 52-55 one. */
    expect_bind(&topo, DDP_NUMA_CORE_COMPLEX, 0, "48-51,176-179", 3);
    expect_bind(&topo, DDP_NUMA_CORE_COMPLEX, 1, "52,180", 3);
    expect_refused(&topo, DDP_NUMA_NODE, 2,
                   "NUMA node 1 of GPU 2 (0000:47:00.0) has no CPU ddp-launch may use (it may use "
                   "48-52,176-180)");
    ddp_topology_free(&topo);
    tree_free(t);

    const char *const one_core[] = {"proc/self/status\tCpus_allowed_list:\t48,176", NULL};
    t = tree("dgx-a100", one_core);
    read_tree(t, NULL, &topo);
    expect_refused(&topo, DDP_NUMA_EXCLUSIVE, 1,
                   "NUMA node 3 has 1 physical core(s) ddp-launch may use for its 2 GPUs");
    expect_bind(&topo, DDP_NUMA_CORE_COMPLEX, 1, "48,176", 3); /* complexes are shared round */
    ddp_topology_free(&topo);
    tree_free(t);
}

static void test_node_without_memory(void **state)
{
    const char *const changes[] = {"sys/devices/system/node/has_memory\t0-2,4-7", NULL};
    tree_t *t = tree("dgx-a100", changes);
    ddp_topology_t topo;
    read_tree(t, NULL, &topo);
    expect_bind(&topo, DDP_NUMA_NODE, 0, "48-63,176-191", -1);
    ddp_numa_bind_t b;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_numa_bind_for(&topo, DDP_NUMA_NODE, 0, &b, &why), 0);
    assert_string_equal(b.text, "CPUs 48-63,176-191, memory anywhere (node 3 has none)");
    ddp_cpus_free(&b.cpus);
    free(b.text);
    ddp_buf_free(&why);
    ddp_topology_free(&topo);
    tree_free(t);
}

/* One NUMA node, or none known: binding is a no-op, said once. */
static void test_one_node_machines(void **state)
{
    tree_t *t = tree("workstation-1socket", NULL);
    ddp_topology_t topo;
    read_tree(t, NULL, &topo);
    assert_int_equal(topo.nonline, 1);
    assert_int_equal(topo.ngpus, 0); /* one node: the GPUs are not even looked for */
    expect_no_op(&topo, 2, "this machine has one NUMA node");
    ddp_topology_free(&topo);
    tree_free(t);

    /* The VMs as recorded: this project's (no GPU), the lent GPU machine (its H200 reports
     * numa_node -1). */
    static const struct {
        const char *name;
        int ncpus;
    } vms[] = {{"cpu-only-vm", 2}, {"h200-vm", 16}};
    for (size_t i = 0; i < sizeof vms / sizeof *vms; i++) {
        t = tree(vms[i].name, NULL);
        read_tree(t, NULL, &topo);
        assert_int_equal(topo.ncpus, vms[i].ncpus);
        assert_int_equal(topo.nonline, 1);
        assert_int_equal(topo.ngpus, 0);
        expect_no_op(&topo, 2, "this machine has one NUMA node");
        ddp_topology_free(&topo);
        tree_free(t);
    }

    /* Two nodes, but a GPU that reports numa_node -1: where it sits is unknown. */
    const char *const unknown[] = {"sys/bus/pci/devices/0000:47:00.0/numa_node\t-1", NULL};
    t = tree("dgx-a100", unknown);
    read_tree(t, NULL, &topo);
    expect_no_op(&topo, 4, "GPU 2 (0000:47:00.0) reports NUMA node -1");
    ddp_buf_t why = DDP_BUF_INIT;
    assert_true(ddp_numa_applies(&topo, 2, &why)); /* two workers use GPUs 0 and 1 only */
    ddp_buf_free(&why);
    ddp_topology_free(&topo);
    tree_free(t);
}

static void test_malformed_tree(void **state)
{
    const char *const changes[] = {"sys/devices/system/node/node3/cpulist\t48-x", NULL};
    tree_t *t = tree("dgx-a100", changes);
    ddp_topology_t topo;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_topology_read(&topo, t->root, NULL, &why), -EINVAL);
    assert_non_null(strstr(ddp_buf_str(&why), "/sys/devices/system/node/node3/cpulist: '48-x' is "
                                              "not a CPU list"));
    ddp_buf_free(&why);
    tree_free(t);

    /* A node list beyond the machine's CPUs. */
    const char *const beyond[] = {"sys/devices/system/node/node0/cpulist\t0-300", NULL};
    t = tree("dgx-a100", beyond);
    assert_int_equal(ddp_topology_read(&topo, t->root, NULL, &why), -EINVAL);
    assert_non_null(strstr(ddp_buf_str(&why), "within the machine's CPUs"));
    ddp_buf_free(&why);
    tree_free(t);
}

/* The job's plan: every worker, an error that names the one that cannot be bound, or with the
 * fallback that worker unbound and the others bound. */
static void test_plan(void **state)
{
    const char *const confined[] = {"proc/self/status\tCpus_allowed_list:\t48-63,176-191", NULL};
    tree_t *t = tree("dgx-a100", confined);
    ddp_log_t log;
    ddp_log_init(&log, "test_numa", DDP_LOG_ERROR);
    ddp_numa_bind_t *binds = NULL;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_numa_plan(DDP_NUMA_NODE, false, 2, t->root, NULL, &log, &binds, &why), 0);
    assert_non_null(binds);
    assert_int_equal(binds[1].mem_node, 3);
    ddp_numa_binds_free(binds, 2);
    binds = NULL;

    assert_int_equal(ddp_numa_plan(DDP_NUMA_NODE, false, 4, t->root, NULL, &log, &binds, &why),
                     -EINVAL);
    assert_null(binds);
    assert_non_null(strstr(ddp_buf_str(&why), "unable to bind worker local rank 2 "
                                              "(--numa-binding=node): NUMA node 1 of GPU 2"));
    ddp_buf_clear(&why);

    assert_int_equal(ddp_numa_plan(DDP_NUMA_NODE, true, 4, t->root, NULL, &log, &binds, &why), 0);
    assert_non_null(binds);
    assert_int_not_equal(binds[0].cpus.nwords, 0);
    assert_int_equal(binds[2].cpus.nwords, 0); /* runs unbound */
    assert_null(binds[2].text);
    assert_int_equal(binds[3].cpus.nwords, 0);
    ddp_numa_binds_free(binds, 4);
    tree_free(t);

    /* A machine where it means nothing: no plan, and why. */
    t = tree("cpu-only-vm", NULL);
    binds = NULL;
    assert_int_equal(ddp_numa_plan(DDP_NUMA_SOCKET, false, 2, t->root, NULL, &log, &binds, &why),
                     0);
    assert_null(binds);
    assert_non_null(strstr(ddp_buf_str(&why), "one NUMA node"));
    ddp_buf_free(&why);
    tree_free(t);
}

/* The GPUs through NVML (the tests' stand-in libnvidia-ml.so.1, on LD_LIBRARY_PATH): in
 * NVML's order, CUDA_VISIBLE_DEVICES by index or GPU-<uuid> prefix, a failing driver said. */
static void test_gpus_from_nvml(void **state)
{
    tree_t *t = tree("dgx-a100", NULL);
    ddp_topology_t topo;
    ddp_buf_t why = DDP_BUF_INIT;
    setenv("FAKE_NVML_GPUS", "0000:47:00.0,0000:07:00.0,0000:bd:00.0", 1);
    char *none[] = {NULL};
    assert_int_equal(ddp_topology_read_gpus_from(&topo, t->root, none, true, &why), 0);
    assert_int_equal(topo.ngpus, 3);
    assert_string_equal(topo.gpu_pci[0], "0000:47:00.0");
    assert_int_equal(topo.gpu_node[0], 1);
    assert_int_equal(topo.gpu_node[1], 3);
    assert_int_equal(topo.gpu_node[2], 5);
    expect_bind(&topo, DDP_NUMA_NODE, 0, "16-31,144-159", 1);
    ddp_topology_free(&topo);

    char *by_uuid[] = {"CUDA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000002,1", NULL};
    assert_int_equal(ddp_topology_read_gpus_from(&topo, t->root, by_uuid, true, &why), 0);
    assert_int_equal(topo.ngpus, 2);
    assert_string_equal(topo.gpu_pci[0], "0000:bd:00.0");
    assert_string_equal(topo.gpu_pci[1], "0000:07:00.0");
    ddp_topology_free(&topo);

    char *unknown_uuid[] = {"CUDA_VISIBLE_DEVICES=1,GPU-ffffffff", NULL};
    assert_int_equal(ddp_topology_read_gpus_from(&topo, t->root, unknown_uuid, true, &why), 0);
    assert_int_equal(topo.ngpus, 1); /* CUDA stops at the UUID that names no GPU */
    ddp_topology_free(&topo);

    setenv("FAKE_NVML_INIT_FAILS", "1", 1);
    assert_int_equal(ddp_topology_read_gpus_from(&topo, t->root, none, true, &why), 0);
    assert_int_equal(topo.ngpus, 0);
    expect_no_op(&topo, 1, "no GPU is visible (NVML failed: Unknown Error (fake)");
    ddp_topology_free(&topo);
    unsetenv("FAKE_NVML_INIT_FAILS");
    unsetenv("FAKE_NVML_GPUS");
    ddp_buf_free(&why);
    tree_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_lists),
        cmocka_unit_test(test_server_topology),
        cmocka_unit_test(test_server_modes),
        cmocka_unit_test(test_visible_devices),
        cmocka_unit_test(test_confined_launcher),
        cmocka_unit_test(test_node_without_memory),
        cmocka_unit_test(test_one_node_machines),
        cmocka_unit_test(test_malformed_tree),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_gpus_from_nvml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
