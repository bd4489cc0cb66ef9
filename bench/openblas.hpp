#pragma once
// OpenBLAS, loaded at run time for side-by-side figures in bench/: a
// bench-only comparison, never linked into mmgpt. Debian's
// libopenblas0-pthread provides libopenblas.so.0 (scripts/setup.sh installs
// it); where it is missing the OpenBLAS rows are skipped with a message.
//
// OpenBLAS picks its kernels when the library loads. 0.3.21 (Debian 12) does
// not know recent CPUs (Emerald Rapids, for one) and falls back to a generic
// kernel at a fraction of the speed, so before loading it this sets
// OPENBLAS_CORETYPE from the CPU's features, unless the caller already set it:
// SkylakeX where AVX-512 F/BW/DQ/VL are present, Haswell where AVX2 and FMA
// are. On CPUs it knows, its own choice runs the same sgemm kernels.
#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace mmgpt::bench {

class OpenBlas {
 public:
  enum Order { RowMajor = 101 };
  enum Transpose { NoTrans = 111, Trans = 112 };
  using Sgemm = void (*)(int order, int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda,
                         const float* B, int ldb, float beta, float* C, int ldc);

  // Loads the library once; ok() says whether it did, describe() what it is.
  static const OpenBlas& get() {
    static const OpenBlas instance;
    return instance;
  }

  bool ok() const { return sgemm_ != nullptr; }
  // One line: library, version/config, the core it runs, where the core type came from.
  const std::string& describe() const { return describe_; }
  void set_threads(int n) const {
    if (set_threads_) set_threads_(n);
  }
  // C[M x N] = A[M x K] * B[N x K]^T, all row-major: y = x W^T, mmgpt's matmul without the bias.
  void x_wt(const float* x, const float* w, float* y, int M, int K, int N) const {
    sgemm_(RowMajor, NoTrans, Trans, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
  }

 private:
  OpenBlas() {
    std::string core_from = "set by the caller";
    if (!std::getenv("OPENBLAS_CORETYPE")) {
      const char* core = features_core();
      if (core) {
        ::setenv("OPENBLAS_CORETYPE", core, 0);
        core_from = std::string("set to ") + core + " by bench/openblas.hpp from the CPU's features";
      } else {
        core_from = "chosen by OpenBLAS";
      }
    }
    // Idle OpenBLAS threads spin before they sleep; keep that short, so they
    // do not take cores from the mmgpt rows that run next in the same process.
    ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    handle_ = ::dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      describe_ = "OpenBLAS: not found (libopenblas.so.0; Debian's libopenblas0-pthread provides it): rows skipped";
      return;
    }
    sgemm_ = reinterpret_cast<Sgemm>(::dlsym(handle_, "cblas_sgemm"));
    set_threads_ = reinterpret_cast<void (*)(int)>(::dlsym(handle_, "openblas_set_num_threads"));
    auto corename = reinterpret_cast<char* (*)()>(::dlsym(handle_, "openblas_get_corename"));
    auto config = reinterpret_cast<char* (*)()>(::dlsym(handle_, "openblas_get_config"));
    if (!sgemm_) {
      describe_ = "OpenBLAS: libopenblas.so.0 has no cblas_sgemm: rows skipped";
      return;
    }
    describe_ = std::string(config ? config() : "OpenBLAS (no config string)") + "; core " +
                (corename ? corename() : "unknown") + " (OPENBLAS_CORETYPE " + core_from + ")";
  }
  ~OpenBlas() = default;  // never dlclose: OpenBLAS's threads outlive the last call

  static const char* features_core() {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
      return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return nullptr;
  }

  void* handle_ = nullptr;
  Sgemm sgemm_ = nullptr;
  void (*set_threads_)(int) = nullptr;
  std::string describe_;
};

}  // namespace mmgpt::bench
