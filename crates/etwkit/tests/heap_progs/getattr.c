// Asks pthread_getattr_np about its own main thread before allocating anything itself, as Rust's
// runtime does before main: glibc answers by reading /proc/self/maps with fopen (an allocation)
// while it holds the thread's lock. Then leaks 4 blocks of 3000 bytes from one function.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void *kept_after_getattr(int i) {
    char *p = malloc(3000);
    p[0] = (char)i;
    return p;
}

int main(void) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return 2;
    pthread_attr_destroy(&attr);
    void *volatile keep[4];
    for (int i = 0; i < 4; i++) keep[i] = kept_after_getattr(i);
    return 0;
}
