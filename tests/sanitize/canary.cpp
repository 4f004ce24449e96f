// The sanitizer build's own check (scripts/test.sh --sanitize): each mode commits one error that
// AddressSanitizer, UndefinedBehaviorSanitizer or LeakSanitizer must report. The CTest cases in
// tests/CMakeLists.txt pass only when the report names it, so a build whose sanitizers are
// silently off (flags lost, runtime not linked, options overridden) fails them.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  volatile int index = 8;
  if (std::strcmp(mode, "heap") == 0) {
    int* p = new int[8];
    const int v = p[index];  // one past the end
    delete[] p;
    return v;
  }
  if (std::strcmp(mode, "overflow") == 0) {
    volatile int big = std::numeric_limits<int>::max();
    const int v = big + index;  // signed overflow
    return v == 0;
  }
  if (std::strcmp(mode, "leak") == 0) {
    void* volatile p = std::malloc(4096);
    p = nullptr;  // lost
    return p != nullptr;
  }
  std::fprintf(stderr, "usage: sanitize_canary heap|overflow|leak\n");
  return 2;
}
