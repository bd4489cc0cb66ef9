# AVX-512 F/BW/DQ/VL, and the VNNI, BF16 and AMX extensions for the
# intrinsics kernels that use them; set.cpp detects and composes (no ISA flags).
if(MMGPT_ARCH STREQUAL "x86_64")
  set(avx512 "-mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma")
  mmgpt_kernel_sources(x86/avx512 set.cpp none
    kernels.cpp "${avx512}"
    gemm_f32.cpp "${avx512}"
    gemm_bf16.cpp "${avx512}"
    gemm_f16.cpp "${avx512}"
    quant_vnni.cpp "${avx512} -mavx512vnni -mf16c"
    bf16dot.cpp "${avx512} -mavx512bf16 -mf16c"
    amx.cpp "${avx512} -mavx512vnni -mf16c -mamx-tile -mamx-int8 -mamx-bf16")
endif()
