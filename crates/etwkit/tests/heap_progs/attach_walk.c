// Attach-mode test program: one thread that lives in the allocator. For argv[1] seconds it keeps a
// stack of up to 64 blocks of 1,100-9,100 bytes (above glibc's per-thread cache, so every malloc
// splits the heap's top chunk and every free merges back into it, trimming the heap now and then),
// marks both ends of each block and checks the marks when it frees the block (all of them at the end,
// which SIGTERM brings forward). A thread borrowed
// to load the shim while it is inside malloc or free corrupts this heap: glibc aborts, hangs, or
// the marks are overwritten. Prints "READY", then "DONE <iterations> BAD <blocks found damaged>",
// and exits 1 when a block was damaged.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static unsigned char mark(unsigned long i) { return (unsigned char)(i * 131 + 7); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5, t0 = now();
    struct {
        unsigned char *p;
        size_t n;
        unsigned long i;
    } stack[64];
    unsigned long i = 0, bad = 0;
    int depth = 0;
    signal(SIGTERM, on_term);
    printf("READY\n");
    fflush(stdout);
    for (;; i++) {
        if (depth < 64 && ((i * 2654435761u) >> 28) & 1) {
            size_t n = 1100 + (i * 7919) % 8000;
            unsigned char *p = malloc(n);
            if (!p) { bad++; continue; }
            p[0] = p[n - 1] = mark(i);
            stack[depth].p = p;
            stack[depth].n = n;
            stack[depth].i = i;
            depth++;
        } else if (depth) {
            depth--;
            unsigned char m = mark(stack[depth].i);
            if (stack[depth].p[0] != m || stack[depth].p[stack[depth].n - 1] != m) bad++;
            free(stack[depth].p);
        }
        if (!(i & 4095) && (stop || now() - t0 > secs)) break;
    }
    while (depth) {
        depth--;
        unsigned char m = mark(stack[depth].i);
        if (stack[depth].p[0] != m || stack[depth].p[stack[depth].n - 1] != m) bad++;
        free(stack[depth].p);
    }
    printf("DONE %lu BAD %lu\n", i, bad);
    return bad != 0;
}
