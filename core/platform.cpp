#include "core/platform.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#if !defined(MMGPT_POSIX_FALLBACKS) && defined(__linux__)
#define MMGPT_OS_LINUX 1
#include <sys/auxv.h>
#include <sys/syscall.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#endif
#elif !defined(MMGPT_POSIX_FALLBACKS) && defined(__APPLE__)
#define MMGPT_OS_MACOS 1
#include <mach-o/dyld.h>
#include <sys/sysctl.h>
#endif

namespace mmgpt::platform {
namespace {

#if MMGPT_OS_MACOS
// A sysctl integer flag (hw.optional.*); false where absent.
bool sysctl_flag(const char* name) {
  int value = 0;
  size_t size = sizeof value;
  return ::sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value != 0;
}
#endif

std::mutex g_argv0_mutex;
std::string g_argv0;
std::filesystem::path g_argv0_cwd;

bool is_executable_file(const std::filesystem::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// argv[0] as a shell resolves it: a path (with a slash) against the working
// directory at start-up, else the first executable of that name on PATH.
std::filesystem::path resolve_argv0() {
  std::lock_guard<std::mutex> lock(g_argv0_mutex);
  if (g_argv0.empty()) return {};
  std::error_code ec;
  if (g_argv0.find('/') != std::string::npos) {
    const std::filesystem::path p = std::filesystem::weakly_canonical(g_argv0_cwd / g_argv0, ec);
    return !ec && is_executable_file(p) ? p : std::filesystem::path();
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    const std::filesystem::path candidate = (dir.empty() ? g_argv0_cwd : g_argv0_cwd / dir) / g_argv0;
    if (is_executable_file(candidate)) {
      const std::filesystem::path p = std::filesystem::weakly_canonical(candidate, ec);
      if (!ec) return p;
    }
  }
  return {};
}

}  // namespace

const char* name() {
#if MMGPT_OS_LINUX
  return "linux";
#elif MMGPT_OS_MACOS
  return "macos";
#else
  return "posix";
#endif
}

size_t page_size() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t physical_memory_bytes() {
#if defined(_SC_PHYS_PAGES)
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  if (pages > 0) return static_cast<uint64_t>(pages) * page_size();
#endif
  return 0;
}

void advise_huge_pages(void* p, size_t n) {
#if MMGPT_OS_LINUX && defined(MADV_HUGEPAGE)
  ::madvise(p, n, MADV_HUGEPAGE);
#else
  (void)p, (void)n;
#endif
}

bool drop_file_pages(const void* map, int fd, const void* p, size_t n) {
  const uintptr_t page = page_size();
  const uintptr_t begin = (uintptr_t(p) + page - 1) / page * page, end = (uintptr_t(p) + n) / page * page;
  if (end <= begin || uintptr_t(map) % page != 0 || begin < uintptr_t(map)) return true;
#if MMGPT_OS_LINUX
  // On a read-only private mapping this only drops this process's references.
  (void)fd;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  return true;
#else
  // posix_madvise(POSIX_MADV_DONTNEED) may do nothing; mapping the same bytes
  // over the range replaces its pages, which still read the same.
  if (fd < 0) return true;
  return ::mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd,
                static_cast<off_t>(begin - uintptr_t(map))) != MAP_FAILED;
#endif
}

std::optional<uint64_t> resident_bytes(const void* p, size_t n) {
#if MMGPT_OS_LINUX || MMGPT_OS_MACOS
  if (n == 0) return 0;
  const size_t page = page_size();
  const size_t pages = (n + page - 1) / page;
#if MMGPT_OS_MACOS
  std::vector<char> in_core(pages);
#else
  std::vector<unsigned char> in_core(pages);
#endif
  if (::mincore(const_cast<void*>(p), n, in_core.data()) != 0) return std::nullopt;
  uint64_t resident = 0;
  for (size_t i = 0; i < pages; ++i)
    if (in_core[i] & 1) resident += (i + 1 == pages) ? n - i * page : page;
  return resident;
#else
  (void)p, (void)n;
  return std::nullopt;
#endif
}

std::optional<double> huge_mapped_share(const void* address) {
#if MMGPT_OS_LINUX
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (!f) return std::nullopt;
  const auto at = reinterpret_cast<uintptr_t>(address);
  char line[512];
  bool inside = false;
  uint64_t size_kb = 0;
  std::optional<double> share;
  while (std::fgets(line, sizeof line, f)) {
    uintptr_t lo = 0, hi = 0;
    // A mapping's header is "lo-hi perms offset dev inode path"; its fields
    // ("Size:   12 kB") never start with hex digits and a dash.
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {
      if (inside) break;  // the mapping ended without the field
      inside = lo <= at && at < hi;
      continue;
    }
    if (!inside) continue;
    uint64_t kb = 0;
    if (std::sscanf(line, "Size: %" SCNu64 " kB", &kb) == 1) size_kb = kb;
    if (std::sscanf(line, "FilePmdMapped: %" SCNu64 " kB", &kb) == 1) {
      if (size_kb > 0) share = double(kb) / double(size_kb);
      break;
    }
  }
  std::fclose(f);
  return share;
#else
  (void)address;
  return std::nullopt;
#endif
}

bool reset_peak_rss() {
#if MMGPT_OS_LINUX
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
#else
  return false;
#endif
}

uint64_t peak_rss_bytes() {
#if MMGPT_OS_LINUX
  if (std::FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    uint64_t kb = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "VmHWM: %" SCNu64 " kB", &kb) == 1;
    std::fclose(f);
    if (found) return kb << 10;
  }
#endif
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
#if defined(__APPLE__)
  return static_cast<uint64_t>(usage.ru_maxrss);  // bytes on macOS
#else
  return static_cast<uint64_t>(usage.ru_maxrss) << 10;  // kilobytes on Linux and the BSDs
#endif
}

void remember_argv0(const char* argv0) {
  std::lock_guard<std::mutex> lock(g_argv0_mutex);
  g_argv0 = argv0 ? argv0 : "";
  std::error_code ec;
  g_argv0_cwd = std::filesystem::current_path(ec);
}

std::filesystem::path executable_path() {
  std::error_code ec;
#if MMGPT_OS_LINUX
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) return exe;
#elif MMGPT_OS_MACOS
  uint32_t size = 0;
  ::_NSGetExecutablePath(nullptr, &size);
  std::string buffer(size, '\0');
  if (::_NSGetExecutablePath(buffer.data(), &size) == 0) {
    std::filesystem::path exe = std::filesystem::weakly_canonical(buffer.c_str(), ec);
    if (!ec) return exe;
  }
#endif
  return resolve_argv0();
}

int open_unnamed_temp(const std::string& dir) {
#if MMGPT_OS_LINUX && defined(O_TMPFILE)
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  // link_unnamed_temp names it through /proc/self/fd.
  if (::access(("/proc/self/fd/" + std::to_string(fd)).c_str(), F_OK) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
#else
  (void)dir;
  return -1;
#endif
}

bool link_unnamed_temp(int fd, const std::string& path) {
#if MMGPT_OS_LINUX && defined(O_TMPFILE)
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  return ::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0;
#else
  (void)fd, (void)path;
  errno = ENOTSUP;
  return false;
#endif
}

int make_temp(std::string& path_template) {
#if MMGPT_OS_LINUX || MMGPT_OS_MACOS
  return ::mkostemp(path_template.data(), O_CLOEXEC);
#else
  const int fd = ::mkstemp(path_template.data());
  if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
#endif
}

bool write_uncached(int fd, bool on) {
#if MMGPT_OS_LINUX && defined(O_DIRECT)
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  if (::fcntl(fd, F_SETFL, on ? flags | O_DIRECT : flags & ~O_DIRECT) != 0) return false;
  return on;
#elif MMGPT_OS_MACOS
  return ::fcntl(fd, F_NOCACHE, on ? 1 : 0) == 0 && on;
#else
  (void)fd, (void)on;
  return false;
#endif
}

bool arm_has_dotprod() {
#if MMGPT_OS_LINUX && defined(__aarch64__) && defined(HWCAP_ASIMDDP)
  return (::getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif MMGPT_OS_MACOS && defined(__aarch64__)
  return sysctl_flag("hw.optional.arm.FEAT_DotProd");
#else
  return false;
#endif
}

bool arm_has_bf16() {
#if MMGPT_OS_LINUX && defined(__aarch64__) && defined(HWCAP2_BF16)
  return (::getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#elif MMGPT_OS_MACOS && defined(__aarch64__)
  return sysctl_flag("hw.optional.arm.FEAT_BF16");
#else
  return false;
#endif
}

std::optional<bool> x86_avx512_enabled() {
#if MMGPT_OS_MACOS && defined(__x86_64__)
  return sysctl_flag("hw.optional.avx512f") && sysctl_flag("hw.optional.avx512bw") &&
         sysctl_flag("hw.optional.avx512dq") && sysctl_flag("hw.optional.avx512vl");
#else
  return std::nullopt;
#endif
}

bool x86_request_amx_tiles() {
#if MMGPT_OS_LINUX && defined(__x86_64__) && defined(SYS_arch_prctl)
  // uapi asm/prctl.h: ARCH_REQ_XCOMP_PERM 0x1023; asm/fpu/types.h: XFEATURE_XTILEDATA 18.
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return ::syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace mmgpt::platform
