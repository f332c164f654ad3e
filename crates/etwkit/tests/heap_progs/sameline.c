// Two allocation calls on one source line (malloc and calloc: different call sites, different
// return addresses) whose stacks read the same in a report: function, file and line. Prints to
// stdout, which must never reach etwkit's own stdout. Exits with the status given as argv[1].
#include <stdio.h>
#include <stdlib.h>

void *keep[20]; /* global: the compiler cannot drop the allocations */

__attribute__((noinline)) void sameline_site(int i) {
    keep[i] = (i % 2) ? malloc(100 + i) : calloc(1, 100 + i);
}

int main(int argc, char **argv) {
    for (int i = 0; i < 20; i++) sameline_site(i);
    printf("sameline: 20 blocks kept\nnot JSON {\n");
    fflush(stdout);
    return argc > 1 ? atoi(argv[1]) : 0;
}
