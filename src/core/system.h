// Facts about the process the trainer acts on: which BLAS is loaded, peak memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace normlab {

// Resolved path of the libblas/libopenblas library mapped into this process ("" if none).
std::string loaded_blas_library();
// True when the loaded BLAS is Debian's slow reference implementation.
bool reference_blas_loaded();
// How the loaded OpenBLAS runs its GEMMs: "openmp" (on libgomp's workers, the pool LibTorch uses),
// "pthreads" (a pool of its own), "sequential", or "" when no OpenBLAS is loaded.
std::string blas_threading();
// Whether this CPU computes bf16 dot products natively (AVX-512 with AVX512-BF16; AMX CPUs have it
// too): where it does not, LibTorch's CPU bf16 GEMMs (oneDNN) convert and multiply in float32 and
// run slower than its float32 GEMMs. False off x86-64.
bool cpu_has_avx512_bf16();
// Physical memory of this machine in bytes.
double physical_memory_bytes();
// Peak resident set size in MiB.
double peak_rss_mib();

// Where a run ran (its run directory's machine.json): this machine's host name ("localhost" when
// it has none), its CPU as /proc/cpuinfo describes it ("unknown" where it does not), and the
// NormLab commit this binary was built from (git's short hash, "+dirty" with uncommitted changes to
// tracked files at build time; "unknown" outside a git checkout).
std::string host_name();
std::string cpu_description();
// The CPU as a /proc/cpuinfo text describes its first processor: the model name, and on x86 its
// family and model numbers, "AMD EPYC (family 26, model 2)": a VM may give two CPU generations one
// name ("AMD EPYC"), and the generation picks the BLAS kernels, so the numbers are what tell two
// kinds of machine apart. "unknown" without a name.
std::string cpu_description(std::istream& cpuinfo);
const char* normlab_commit();

// Starts `exe` with argv (argv[0] included) and exactly the environment `env` ("NAME=value") as a
// child of this process that follows it: in a process group of its own (the terminal's Ctrl-C
// reaches only this process, which forwards it once, so a second SIGINT never kills a child
// before its checkpoint), sent SIGINT if this process dies (it checkpoints and stops). With a
// log_path, stdin is /dev/null and stdout and stderr append to that file; else they are
// inherited. Everything is prepared before the fork (the child calls only async-signal-safe
// code); an exec failure exits the child with 127 after a line on its stderr naming `what`.
// Throws RuntimeFailure when the log cannot be opened or the fork fails.
pid_t spawn_child(const std::string& exe, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, const std::string& log_path, const std::string& what);
// Children spawn_child started in this process (the unit test tier's guard reads it).
int64_t children_spawned();

}  // namespace normlab
