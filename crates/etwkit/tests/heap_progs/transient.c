// Short-lived blocks from 300 different stacks (the depth of a recursion), taken in turn for 40
// rounds: block sizes 1..300 bytes, each freed at once on the same thread, so the shim counts the
// pairs in process per stack, and 300 stacks in turn keep evicting one another from its table.
// Every block is freed: 40 x (1 + ... + 300) = 1,806,000 bytes allocated and freed.
#include <stdlib.h>

__attribute__((noinline)) void transient_site(int depth) {
    char *volatile p = malloc((size_t)depth + 1);
    p[0] = 1;
    free(p);
}

__attribute__((noinline)) void descend(int depth, int target) {
    if (depth == target) {
        transient_site(depth);
        return;
    }
    descend(depth + 1, target);
    __asm__ volatile("" ::: "memory");
}

int main(void) {
    for (int round = 0; round < 40; round++)
        for (int d = 0; d < 300; d++) descend(0, d);
    return 0;
}
