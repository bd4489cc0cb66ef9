#pragma once
// What this build of mmgpt is: the release, the commit and the compiler.
#include <string_view>

namespace mmgpt {

// The release, CMakeLists.txt's project version, e.g. "0.1.0".
std::string_view version();
// The git commit the library was built from: 40 hex digits, with "-dirty" when
// tracked files differed from it, or "unknown" (no git, or not a checkout).
std::string_view git_commit();
// The compiler and its version, e.g. "GCC 12.2.0" or "Clang 14.0.6".
std::string_view compiler();
// The sanitizer the build was instrumented with ("AddressSanitizer",
// "ThreadSanitizer"), or "" for a plain build. Such a build reserves shadow
// memory, so its memory figures are not a release build's.
std::string_view sanitizer();

}  // namespace mmgpt
