// Attach-mode test program: both threads wait forever on a lock (the main thread locks a mutex,
// starts a thread that locks it too, then locks it again itself). A thread asleep on a lock may be
// asleep on the allocator's, so the shim is never loaded from either; etwkit traces with uprobes
// instead and leaves both waiting. Prints "READY" once both wait.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_mutex_lock(&lock);
    pthread_create(&t, NULL, waiter, NULL);
    usleep(100000);
    printf("READY\n");
    fflush(stdout);
    pthread_mutex_lock(&lock);
    return 0;
}
