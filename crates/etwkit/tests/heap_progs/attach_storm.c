// Attach-mode test program: argv[2] threads (default 3) run a malloc/free storm for argv[1] seconds. Built with
// -fno-plt, every call goes through the GOT entry it reads just before: a thread knows whether a
// call went to the heap shim (the entry no longer points where it did at start) and counts those
// calls itself. Every 200 ms the main thread prints "RATE <calls per second> <module malloc's GOT
// entry points into> <unix time>"; at the end "TRACED <mallocs> <frees> <failed>" (calls that went
// to the shim).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
static malloc_fn orig_malloc;
static free_fn orig_free;
static atomic_long calls, traced_mallocs, traced_frees, failed;
static atomic_int stop;

__attribute__((noinline)) static void *storm(void *arg) {
    (void)arg;
    long i = 0, n = 0, tm = 0, tf = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        /* volatile: one read of the GOT entry serves both the call and the count (the compiler
           would read the entry again for the comparison) */
        malloc_fn volatile m = malloc;
        void *p = m(16 + (i++ & 255));
        if (m != orig_malloc) tm++;
        if (!p) { atomic_fetch_add(&failed, 1); continue; }
        memset(p, 1, 8);
        free_fn volatile f = free;
        if (f != orig_free) tf++;
        f(p);
        /* counts published in batches: no locked instruction per call */
        if (++n == 256) {
            atomic_fetch_add_explicit(&calls, n, memory_order_relaxed);
            n = 0;
        }
    }
    atomic_fetch_add(&calls, n);
    atomic_fetch_add(&traced_mallocs, tm);
    atomic_fetch_add(&traced_frees, tf);
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5;
    int threads = argc > 2 ? atoi(argv[2]) : 3;
    if (threads < 1 || threads > MAX_THREADS) threads = 3;
    orig_malloc = malloc;
    orig_free = free;
    pthread_t th[MAX_THREADS];
    for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, storm, NULL);
    double t0 = now(), last = t0;
    long prev = 0;
    while (now() - t0 < secs) {
        usleep(200000);
        double t = now();
        long c = atomic_load(&calls);
        Dl_info info;
        malloc_fn m = malloc;
        const char *where = dladdr((void *)m, &info) && info.dli_fname ? info.dli_fname : "?";
        const char *base = strrchr(where, '/');
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        printf("RATE %.0f %s %.3f\n", (c - prev) / (t - last), base ? base + 1 : where,
               wall.tv_sec + wall.tv_nsec / 1e9);
        fflush(stdout);
        prev = c;
        last = t;
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    printf("TRACED %ld %ld %ld\n", atomic_load(&traced_mallocs), atomic_load(&traced_frees),
           atomic_load(&failed));
    return 0;
}
