/* The route table's read lock alone: N threads taking and releasing it in a loop for
 * 2 s, lock pairs per second. Built against any revision's routetable.c, so that two
 * lock designs compare on one machine in one sitting (bench/README.md, "The read
 * lock's reader slots"):
 *
 *     cc -O2 -DNDEBUG -Isrc/_core -o /tmp/lockpairs bench/lockpairs.c \
 *         src/_core/routetable.c src/_core/hash.c src/_core/javatable.c -lpthread
 *     /tmp/lockpairs 1; /tmp/lockpairs 2
 *
 * bench/scaling.py --threads ... (its "lock" mode) measures the built core's lock the
 * same way from Python. */
#include "routetable.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
{
    int nthreads = argc > 1 ? atoi(argv[1]) : 1;
    if (nthreads < 1 || nthreads > MAX_THREADS) {
        fprintf(stderr, "usage: %s THREADS (1-%d)\n", argv[0], MAX_THREADS);
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
