// malloc/free storm: runs for argv[1] seconds (or argv[1] iterations if argv[2] == "n"), prints
// iterations (one malloc + one free) per wall-clock second, then per CPU second of this process
// (the second is what tracing costs the process itself, whatever else shares the CPUs).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clk(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static double now(void) { return clk(CLOCK_MONOTONIC); }

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    int by_count = argc > 2 && strcmp(argv[2], "n") == 0;
    long target = by_count ? atol(argv[1]) : 0;
    void *volatile sink;
    long n = 0;
    double t0 = now(), t = t0, c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
    for (;;) {
        for (int i = 0; i < 1024; i++) {
            sink = malloc(16 + (i & 255));
            free(sink);
        }
        n += 1024;
        if (by_count) {
            if (n >= target) break;
        } else if ((t = now()) - t0 >= secs) {
            break;
        }
    }
    t = now();
    printf("%.0f %.0f\n", n / (t - t0), n / (clk(CLOCK_PROCESS_CPUTIME_ID) - c0));
    return 0;
}
