// Grows one block by realloc 2000 times (the first call, realloc(NULL), allocates), keeps it.
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) char *grow(char *p, int i) {
    p = realloc(p, (size_t)i * 16);
    memset(p, 1, 1);
    return p;
}

int main(void) {
    char *volatile p = NULL;
    for (int i = 1; i <= 2000; i++) p = grow(p, i);
    return 0;
}
