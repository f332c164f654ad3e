// Attach-mode C++ program: for argv[1] seconds, `new`/`delete` in a loop from cxx_attach_site(),
// keeping one block in 100 (a slow leak). Prints "READY" once running.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

__attribute__((noinline)) std::vector<int> *cxx_attach_site(int i) {
    return new std::vector<int>(100 + i % 50);
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? std::atof(argv[1]) : 5;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<int> *> kept;
    std::printf("READY\n");
    std::fflush(stdout);
    for (int i = 0;; i++) {
        auto *v = cxx_attach_site(i);
        if (i % 100 == 0) kept.push_back(v); else delete v;
        if (i % 1000 == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            std::chrono::duration<double> d = std::chrono::steady_clock::now() - t0;
            if (d.count() > secs) break;
        }
    }
    std::printf("KEPT %zu\n", kept.size());
    return 0;
}
