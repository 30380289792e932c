/* Unit tests: the progress ring's reader (common/progress.h) takes what a worker wrote as
 * untrusted: values out of range, names that are no clean UTF-8, links. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ddp_errors.h"
#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char dir[64], path[128];

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/ddp-test-progress-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, sizeof path, "%s/%s", dir, DDP_PROGRESS_FILE);
    return 0;
}

static int teardown(void **state)
{
    char other[160];
    snprintf(other, sizeof other, "%s/other.ring", dir);
    unlink(path);
    unlink(other);
    return rmdir(dir);
}

static void write_ring(const char *to, const ddp_progress_ring_t *ring)
{
    unlink(to);
    int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, ring, sizeof *ring), (ssize_t)sizeof *ring);
    close(fd);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A ring as a worker writes it: 3 steps, in no section. */
static void good_ring(ddp_progress_ring_t *ring)
{
    int64_t now = now_ns();
    memset(ring, 0, sizeof *ring);
    ring->magic = DDP_PROGRESS_MAGIC;
    ring->version = DDP_PROGRESS_VERSION;
    ring->steps = 3;
    ring->last_step_ns = now - 1000;
    ring->longest_step_ns = 500;
    for (int s = 1; s <= 3; s++)
        ring->slots[s - 1] = (ddp_progress_slot_t){s, now - 4000 + s * 1000, s > 1 ? 1000 : 0, 0};
}

/* Each value the launcher uses out of its range: no ring (a step counter of INT64_MAX
 * made the launcher loop forever). */
static void test_values_out_of_range(void **state)
{
    static ddp_progress_ring_t ring, back;
    good_ring(&ring);
    write_ring(path, &ring);
    assert_int_equal(ddp_progress_read(path, &back), 0);
    assert_int_equal(back.steps, 3);
    static const struct {
        size_t at; /* a word's offset in the ring */
        int64_t value;
    } forged[] = {
        {offsetof(ddp_progress_ring_t, steps), INT64_MAX},
        {offsetof(ddp_progress_ring_t, steps), -1},
        {offsetof(ddp_progress_ring_t, steps), DDP_PROGRESS_MAX_STEPS + 1},
        {offsetof(ddp_progress_ring_t, section), DDP_PROGRESS_SECTIONS + 1},
        {offsetof(ddp_progress_ring_t, last_step_ns), INT64_MAX}, /* ahead of the clock */
        {offsetof(ddp_progress_ring_t, longest_step_ns), -5},
        {offsetof(ddp_progress_ring_t, slots[1].dur_ns), INT64_MAX},
        {offsetof(ddp_progress_ring_t, slots[1].step), INT64_MIN},
        {offsetof(ddp_progress_ring_t, sections[0].max_ns), INT64_MAX},
    };
    for (size_t k = 0; k < sizeof forged / sizeof forged[0]; k++) {
        good_ring(&ring);
        memcpy((char *)&ring + forged[k].at, &forged[k].value, sizeof forged[k].value);
        write_ring(path, &ring);
        assert_int_equal(ddp_progress_read(path, &back), DDP_EPARSE);
    }
}

/* Section names come back valid UTF-8 without control characters. */
static void test_names_clean(void **state)
{
    static const struct {
        const char *written, *read;
    } names[] = {
        {"checkpoint", "checkpoint"},
        {"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
         "\xc3",
         "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3"
         "\xa9"},
        {"\x1b[31mred", "?[31mred"},
        {"a\xc2\x9b"
         "b\x7f",
         "a?b?"},                  /* C1 (CSI) and DEL */
        {"x\xff\xfey", "x??y"},    /* no UTF-8 */
        {"\xed\xa0\x80z", "???z"}, /* a surrogate */
        {"\xc0\xafz", "??z"},      /* overlong */
        {"\xe2\x82\xac \xf0\x9f\x9a\x80", "\xe2\x82\xac \xf0\x9f\x9a\x80"},
    };
    static ddp_progress_ring_t ring, back;
    good_ring(&ring);
    ring.section = 1;
    ring.section_ns = ring.last_step_ns;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        memset(ring.sections[i].name, 0, DDP_PROGRESS_NAME);
        memcpy(ring.sections[i].name, names[i].written, strlen(names[i].written));
        ring.sections[i].count = 1;
    }
    write_ring(path, &ring);
    assert_int_equal(ddp_progress_read(path, &back), 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        assert_string_equal(back.sections[i].name, names[i].read);
}

/* A ring that is a symbolic link is none (it could point into a hung file system). */
static void test_link_not_followed(void **state)
{
    static ddp_progress_ring_t ring, back;
    char other[160];
    snprintf(other, sizeof other, "%s/other.ring", dir);
    good_ring(&ring);
    write_ring(other, &ring);
    assert_int_equal(symlink(other, path), 0);
    assert_int_equal(ddp_progress_read(path, &back), -ELOOP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_values_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_link_not_followed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
