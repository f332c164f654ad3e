// Blocks handed from thread to thread, their frees sent out of time order: the producer allocates
// 200,000 blocks of 48 bytes (it never frees, so the shim sends its allocations in batches as its
// table of kept-back blocks fills), and two consumers free them. The busy one frees 49 in 50 and
// fills its buffer again and again; the rare one frees every 50th, and its records wait in its
// buffer. The allocator hands the freed addresses to the producer again, so one address lives many
// times, its frees arriving from both consumers in any order. Then the producer leaks 5 blocks of
// 1,000..1,004 bytes from relay_leak(): the only blocks left.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N 200000
#define RING 4096

struct ring {
    void *slot[RING];
    unsigned head, tail;
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static struct ring busy = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static struct ring rare = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void put(struct ring *r, void *p) {
    pthread_mutex_lock(&r->mu);
    while (r->head - r->tail == RING) pthread_cond_wait(&r->cv, &r->mu);
    r->slot[r->head++ % RING] = p;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void finish(struct ring *r) {
    pthread_mutex_lock(&r->mu);
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void *consume(void *arg) {
    struct ring *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (r->head == r->tail && !r->done) pthread_cond_wait(&r->cv, &r->mu);
        if (r->head == r->tail) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        void *p = r->slot[r->tail++ % RING];
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        free(p);
    }
}

__attribute__((noinline)) void *relay_block(void) {
    char *p = malloc(48);
    memset(p, 7, 48);
    return p;
}

static void *leaked[5];

__attribute__((noinline)) void relay_leak(void) {
    for (int i = 0; i < 5; i++) {
        leaked[i] = malloc(1000 + (size_t)i);
        memset(leaked[i], 1, 1000 + (size_t)i);
    }
}

int main(void) {
    pthread_t b, c;
    pthread_create(&b, NULL, consume, &busy);
    pthread_create(&c, NULL, consume, &rare);
    for (int i = 0; i < N; i++) put(i % 50 == 49 ? &rare : &busy, relay_block());
    finish(&busy);
    finish(&rare);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    relay_leak();
    return 0;
}
