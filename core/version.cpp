#include "core/version.hpp"

#include "mmgpt_git_commit.h"  // generated at build time by cmake/git_commit.cmake

#ifndef MMGPT_VERSION
#error "MMGPT_VERSION must be defined by the build (CMakeLists.txt)"
#endif

namespace mmgpt {

std::string_view version() { return MMGPT_VERSION; }

std::string_view git_commit() { return MMGPT_GIT_COMMIT; }

std::string_view compiler() {
#define MMGPT_STR2(x) #x
#define MMGPT_STR(x) MMGPT_STR2(x)
#if defined(__clang__)
  return "Clang " MMGPT_STR(__clang_major__) "." MMGPT_STR(__clang_minor__) "." MMGPT_STR(__clang_patchlevel__);
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown compiler";
#endif
}

std::string_view sanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return "AddressSanitizer";
#elif defined(__SANITIZE_THREAD__)
  return "ThreadSanitizer";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return "AddressSanitizer";
#elif __has_feature(thread_sanitizer)
  return "ThreadSanitizer";
#else
  return "";
#endif
#else
  return "";
#endif
}

}  // namespace mmgpt
