# Advanced SIMD (baseline on AArch64), and the dot product and BF16
# extensions for the intrinsics kernels that use them; set.cpp detects and
# composes.
if(MMGPT_ARCH STREQUAL "aarch64")
  mmgpt_kernel_sources(arm/neon set.cpp none kernels.cpp none quant.cpp none
    gemm_f32.cpp none gemm_bf16.cpp none gemm_f16.cpp none
    quant_dotprod.cpp "-march=armv8.2-a+dotprod"
    bf16dot.cpp "-march=armv8.2-a+bf16")
endif()
