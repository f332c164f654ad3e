// C++ allocations: 100 `new char[n]` from cxx_allocation_site(), all but 5 deleted.
#include <vector>

__attribute__((noinline)) char *cxx_allocation_site(int i) { return new char[2000 + i]; }

int main() {
    std::vector<char *> v;
    v.reserve(100);
    for (int i = 0; i < 100; i++) v.push_back(cxx_allocation_site(i));
    for (int i = 5; i < 100; i++) delete[] v[i];
    return v[0][0] == 42;
}
