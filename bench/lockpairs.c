/* The route table's read lock alone: N threads taking and releasing it in a loop for
 * 2 s, lock pairs per second. Built against any revision's routetable.c, so that two
 * lock designs compare on one machine in one sitting (bench/README.md, "The read
 * lock's reader slots"):
 *
 *     cc -O2 -DNDEBUG -Isrc/_core -o /tmp/lockpairs bench/lockpairs.c \
 *         src/_core/routetable.c src/_core/hash.c src/_core/javatable.c -lpthread
 *     /tmp/lockpairs 1; /tmp/lockpairs 2
 *     /tmp/lockpairs wait     # a reader's wait behind a writer applying slices
 *
 * `wait`: one thread takes the write lock for 0.5 ms slices back to back (as a
 * registration applied in slices does), another takes the read lock every 0.1 ms,
 * for 3 s: the reader's mean and longest wait (the turn rule bounds it by one slice,
 * plus the time the system takes to wake the reader).
 *
 * bench/scaling.py --threads ... (its "lock" mode) measures the built core's lock the
 * same way from Python. */
#include "routetable.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 256

static rt_table *table;
static volatile int stop;
static unsigned long pairs[MAX_THREADS];

static void *reader(void *arg)
{
    long i = (long)arg;
    unsigned long n = 0;
    while (!stop) {
        for (int k = 0; k < 1000; k++) {
            rt_rdlock(table);
            rt_rdunlock(table);
        }
        n += 1000;
    }
    pairs[i] = n;
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void spin(double seconds)
{
    double end = now() + seconds;
    while (now() < end)
        ;
}

static void *slices(void *arg)
{
    (void)arg;
    while (!stop) {
        rt_wrlock(table);
        spin(0.0005);
        rt_wrunlock(table);
    }
    return NULL;
}

static int wait_behind_a_writer(void)
{
    pthread_t writer;
    if (pthread_create(&writer, NULL, slices, NULL) != 0)
        return 1;
    double longest = 0, sum = 0, end = now() + 3;
    unsigned long reads = 0;
    struct timespec gap = {0, 100000};
    while (now() < end) {
        double t = now();
        rt_rdlock(table);
        double waited = now() - t;
        rt_rdunlock(table);
        longest = waited > longest ? waited : longest;
        sum += waited;
        reads++;
        nanosleep(&gap, NULL);
    }
    stop = 1;
    pthread_join(writer, NULL);
    printf("%lu reads behind a writer: mean wait %.3f ms, max %.3f ms\n", reads,
           sum / (double)reads * 1e3, longest * 1e3);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "wait") == 0) {
        table = rt_new();
        int rc = table ? wait_behind_a_writer() : 1;
        rt_free(table);
        return rc;
    }
    int nthreads = argc > 1 ? atoi(argv[1]) : 1;
    if (nthreads < 1 || nthreads > MAX_THREADS) {
        fprintf(stderr, "usage: %s THREADS (1-%d) | wait\n", argv[0], MAX_THREADS);
        return 2;
    }
    table = rt_new();
    if (!table)
        return 1;
    pthread_t threads[MAX_THREADS];
    for (long i = 0; i < nthreads; i++)
        if (pthread_create(&threads[i], NULL, reader, (void *)i) != 0)
            return 1;
    struct timespec two = {2, 0};
    nanosleep(&two, NULL);
    stop = 1;
    unsigned long total = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(threads[i], NULL);
        total += pairs[i];
    }
    printf("%d threads: %.1f M lock pairs/s\n", nthreads, (double)total / 2.0 / 1e6);
    rt_free(table);
    return 0;
}
