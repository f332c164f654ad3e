// For argv[1] seconds: the parent allocates and frees in a loop; after argv[2] seconds it forks a
// child that keeps 100 blocks of 777 bytes and exits 0. Prints "READY" first.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

void *kept[100]; /* global: the allocations cannot be dropped */

__attribute__((noinline)) void child_allocation_site(int i) { kept[i] = malloc(777); }

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 4, fork_at = argc > 2 ? atof(argv[2]) : 2;
    double t0 = now();
    int forked = 0;
    printf("READY\n");
    fflush(stdout);
    while (now() - t0 < secs) {
        free(malloc(64));
        usleep(1000);
        if (!forked && now() - t0 >= fork_at) {
            forked = 1;
            pid_t c = fork();
            if (c == 0) {
                for (int i = 0; i < 100; i++) child_allocation_site(i);
                usleep(200000);
                exit(0); /* not _exit: the shim sends what it kept back at exit */
            }
            int st;
            waitpid(c, &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
        }
    }
    return 0;
}
