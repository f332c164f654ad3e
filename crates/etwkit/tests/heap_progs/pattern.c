// Heap test pattern: each of THREADS threads makes N allocations of known sizes from
// leaky_allocation_site(), then frees all but the first K of them. With an argument "wait",
// threads first block until the file named by argv[2] exists (attach mode), then allocate.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 200
#define K 3
#define THREADS 4

static const char *gate;

__attribute__((noinline)) void *leaky_allocation_site(int thread, int i) {
    size_t size = 1000 + thread * 100 + i; /* known, distinct sizes */
    void *p = malloc(size);
    memset(p, 0xab, 1);
    return p;
}

__attribute__((noinline)) static void *worker(void *arg) {
    int t = (int)(long)arg;
    void *blocks[N];
    if (gate) {
        while (access(gate, F_OK) != 0) usleep(1000);
    }
    for (int i = 0; i < N; i++) blocks[i] = leaky_allocation_site(t, i);
    for (int i = K; i < N; i++) free(blocks[i]);
    /* blocks[0..K) stay allocated: the leak the report must find. */
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "wait") == 0) gate = argv[2];
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    if (gate) { printf("ready\n"); fflush(stdout); }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    if (gate) {
        /* Stay alive until told to go, so the tracer sees everything before exit. */
        char done[4096];
        snprintf(done, sizeof done, "%s.done", gate);
        while (access(done, F_OK) != 0) usleep(1000);
    }
    return 0;
}
