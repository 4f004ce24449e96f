/* GEMM throughput of a BLAS library on the medium workload's matmul shapes (scripts/bench_blas.sh).
 * Usage: bench_blas LIBRARY.so   (the library is dlopen'ed; its standard sgemm_ is timed)
 * Each shape is what LibTorch's linear layers hand the BLAS for configs/bench/medium.yaml
 * (2048 tokens, d 512, d_ff 2048, fused QKV 1536), forward and both backward products, best of 10
 * runs after 2 warm-ups; the threads are the library's own setting (OMP_NUM_THREADS). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*sgemm_fn)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBRARY.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  sgemm_fn gemm = (sgemm_fn)dlsym(lib, "sgemm_");
  if (!gemm) {
    fprintf(stderr, "%s has no sgemm_\n", argv[1]);
    return 1;
  }
  /* column-major m x n x k with LibTorch's transposition flags: y = x W^T is (T, N) */
  struct { const char* name; char ta, tb; int m, n, k; } shapes[] = {
      {"fwd qkv   x W^T", 'T', 'N', 1536, 2048, 512},  {"fwd proj  x W^T", 'T', 'N', 512, 2048, 512},
      {"fwd fc1   x W^T", 'T', 'N', 2048, 2048, 512},  {"fwd fc2   x W^T", 'T', 'N', 512, 2048, 2048},
      {"bwd fc1   dY W", 'N', 'N', 512, 2048, 2048},   {"bwd fc1   dY^T x", 'N', 'T', 512, 2048, 2048},
      {"bwd qkv   dY W", 'N', 'N', 512, 2048, 1536},   {"bwd qkv   dY^T x", 'N', 'T', 512, 1536, 2048},
  };
  const int count = sizeof shapes / sizeof shapes[0];
  const size_t elems = (size_t)2048 * 2048;
  float *a = malloc(elems * 4), *b = malloc(elems * 4), *c = malloc(elems * 4);
  for (size_t i = 0; i < elems; ++i) {
    a[i] = (float)(rand() % 100) / 100.0f;
    b[i] = (float)(rand() % 100) / 100.0f;
  }
  const float one = 1.0f, zero = 0.0f;
  double total_s = 0, total_flop = 0;
  for (int s = 0; s < count; ++s) {
    const int m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
    const int lda = shapes[s].ta == 'N' ? m : k, ldb = shapes[s].tb == 'N' ? k : n;
    double best = 1e30;
    for (int r = 0; r < 12; ++r) {
      const double t0 = now();
      gemm(&shapes[s].ta, &shapes[s].tb, &m, &n, &k, &one, a, &lda, b, &ldb, &zero, c, &m);
      const double t = now() - t0;
      if (r >= 2 && t < best) best = t;
    }
    const double flop = 2.0 * m * n * k;
    printf("%-18s %5d x %5d x %5d  %7.2f ms  %6.1f GFLOP/s\n", shapes[s].name, m, n, k, best * 1e3,
           flop / best / 1e9);
    total_s += best;
    total_flop += flop;
  }
  printf("all shapes: %.1f ms, %.1f GFLOP/s\n", total_s * 1e3, total_flop / total_s / 1e9);
  return 0;
}
