// Asks pthread_getattr_np about its own thread before allocating, on the main thread and on 3
// threads it starts, as Rust's runtime does for every thread: glibc allocates inside that call
// (for the main thread it opens /proc/self/maps with fopen, for the others it sizes a CPU set with
// realloc) while it holds the thread's lock. The main thread then leaks 4 blocks of 3000 bytes
// from kept_after_getattr, each thread one block of 500 bytes from kept_in_thread.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int ask_own_stack(void) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return -1;
    pthread_attr_destroy(&attr);
    return 0;
}

__attribute__((noinline)) void *kept_after_getattr(int i) {
    char *p = malloc(3000);
    p[0] = (char)i;
    return p;
}

__attribute__((noinline)) void *kept_in_thread(void) {
    char *p = malloc(500);
    p[0] = 1;
    return p;
}

static void *thread_main(void *arg) {
    (void)arg;
    if (ask_own_stack() != 0) return NULL;
    return kept_in_thread();
}

int main(void) {
    if (ask_own_stack() != 0) return 2;
    void *volatile keep[4];
    for (int i = 0; i < 4; i++) keep[i] = kept_after_getattr(i);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, thread_main, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    return 0;
}
