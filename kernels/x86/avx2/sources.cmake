# AVX2 + FMA + F16C; set.cpp detects and composes (no ISA flags).
if(MMGPT_ARCH STREQUAL "x86_64")
  mmgpt_kernel_sources(x86/avx2 set.cpp none
    kernels.cpp "-mavx2 -mfma -mf16c"
    gemm_f32.cpp "-mavx2 -mfma -mf16c"
    gemm_bf16.cpp "-mavx2 -mfma -mf16c"
    gemm_f16.cpp "-mavx2 -mfma -mf16c"
    quant.cpp "-mavx2 -mfma -mf16c")
endif()
