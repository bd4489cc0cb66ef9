# x86-64: CPU feature detection shared by the x86 instruction sets.
if(MMGPT_ARCH STREQUAL "x86_64")
  mmgpt_kernel_sources(x86 cpu.cpp none)
endif()
