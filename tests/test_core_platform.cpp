// core/platform: each call does what its header says, on whichever side this
// build takes (Linux or macOS calls, or the POSIX fallbacks with
// -DMMGPT_POSIX_FALLBACKS=ON, which scripts/test-posix.sh runs).
#include "core/platform.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace mmgpt;

namespace {

fs::path scratch_dir(const char* name) {
  const fs::path dir = fs::path(MMGPT_TEST_TMP) / "platform" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// This process's resident pages (Linux: /proc/self/statm, the harness's own
// view, independent of the calls under test); 0 where unknown.
uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * uint64_t(::sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("platform: the name says which side this build takes") {
  const std::string name = platform::name();
  CHECK((name == "linux" || name == "macos" || name == "posix"));
#if defined(MMGPT_EXPECT_POSIX_FALLBACKS)
  CHECK(name == "posix");
#endif
  const size_t page = platform::page_size();
  CHECK(page >= 4096);
  CHECK((page & (page - 1)) == 0);
}

TEST_CASE("platform: dropping a file mapping's pages keeps its bytes and frees its memory") {
  const fs::path dir = scratch_dir("drop");
  const fs::path path = dir / "data.bin";
  const size_t bytes = size_t{64} << 20, page = platform::page_size();
  {
    std::vector<unsigned char> v(bytes);
    for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), std::streamsize(bytes));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  REQUIRE(m != MAP_FAILED);
  const auto* p = static_cast<const unsigned char*>(m);
  const auto sum = [&](size_t from, size_t to) {
    uint64_t s = 0;
    for (size_t i = from; i < to; i += 1) s += p[i] * (i % 7 + 1);
    return s;
  };
  const uint64_t before = sum(0, bytes);
  const uint64_t touched = rss_bytes();

  // Not page-aligned at either end: only the whole pages inside are dropped,
  // and the bytes around them stay readable and unchanged.
  CHECK(platform::drop_file_pages(m, fd, p + 100, bytes - 200));
  const uint64_t dropped = rss_bytes();
  if (touched > 0) CHECK(dropped + bytes - 2 * page <= touched + (size_t{4} << 20));
  CHECK(sum(0, bytes) == before);

  // Where the system can say, the file's pages are in memory (the page cache).
  if (const std::optional<uint64_t> resident = platform::resident_bytes(m, bytes)) CHECK(*resident <= bytes);
  else CHECK(std::string(platform::name()) == "posix");

  // Ranges outside the mapping, empty or less than a page, do nothing.
  CHECK(platform::drop_file_pages(m, fd, p, 0));
  CHECK(platform::drop_file_pages(m, fd, p + 1, page - 2));
  CHECK(platform::drop_file_pages(m, fd, p - page, page));
  CHECK(sum(0, bytes) == before);

  // Mapping afresh from a descriptor the file cannot be mapped through fails
  // and says so (the fallback); Linux drops the pages in place and needs none.
  const int write_only = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(write_only >= 0);
  errno = 0;
  const bool dropped_anyway = platform::drop_file_pages(m, write_only, p, bytes);
  if (std::string(platform::name()) == "linux") {
    CHECK(dropped_anyway);
    CHECK(sum(0, bytes) == before);
  } else {
    CHECK_FALSE(dropped_anyway);
    CHECK(errno == EACCES);
  }
  ::close(write_only);
  ::munmap(m, bytes);
  ::close(fd);
}

TEST_CASE("platform: the peak resident set covers memory touched since the reset") {
  const bool scoped = platform::reset_peak_rss();
  const uint64_t start = platform::peak_rss_bytes();
  CHECK(start > 0);
  const size_t bytes = size_t{48} << 20;
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes; i += 4096) v[i] = static_cast<unsigned char>(i);
  const uint64_t peak = platform::peak_rss_bytes();
  CHECK(peak >= bytes);
  CHECK(peak >= start);
  if (std::string(platform::name()) == "linux") CHECK(scoped);
  else CHECK_FALSE(scoped);
}

TEST_CASE("platform: the executable's path, from the system or from argv[0]") {
  // The test binary, found from the working directory (ctest's: the tests'
  // build directory) by its relative path and by PATH.
  const fs::path self = fs::canonical(fs::current_path() / "test_core_platform");
  REQUIRE(fs::exists(self));
  platform::remember_argv0("./test_core_platform");
  CHECK(platform::executable_path() == self);
  const std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", ("/nonexistent:" + self.parent_path().string()).c_str(), 1);
  platform::remember_argv0("test_core_platform");
  CHECK(platform::executable_path() == self);
  ::setenv("PATH", saved.c_str(), 1);
  if (std::string(platform::name()) == "posix") {
    platform::remember_argv0("no-such-program-here");
    CHECK(platform::executable_path().empty());
  }
}

TEST_CASE("platform: temporary files, named and unnamed") {
  const fs::path dir = scratch_dir("temp");
  std::string tmpl = (dir / "x.XXXXXX").string();
  const int fd = platform::make_temp(tmpl);
  REQUIRE(fd >= 0);
  CHECK(fs::exists(tmpl));
  CHECK(tmpl.find("XXXXXX") == std::string::npos);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  ::close(fd);

  const int unnamed = platform::open_unnamed_temp(dir.string());
  if (std::string(platform::name()) != "linux") CHECK(unnamed == -1);
#ifdef O_TMPFILE
  // On Linux, where this file system takes O_TMPFILE (probed here directly),
  // the call must give one: otherwise every AtomicFile would quietly use a
  // named temporary and the tests would follow it.
  if (std::string(platform::name()) == "linux") {
    const int probe = ::open(dir.c_str(), O_TMPFILE | O_RDWR, 0600);
    if (probe >= 0) {
      ::close(probe);
      CHECK(unnamed >= 0);
    }
  }
#endif
  if (unnamed < 0) {
    CHECK_FALSE(platform::link_unnamed_temp(3, (dir / "never").string()));
    CHECK_FALSE(fs::exists(dir / "never"));
    return;
  }
  CHECK((::fcntl(unnamed, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(::write(unnamed, "hello", 5) == 5);
  const size_t entries = std::distance(fs::directory_iterator(dir), fs::directory_iterator());
  CHECK(entries == 1);  // only the named one: the unnamed file has no name yet
  REQUIRE(platform::link_unnamed_temp(unnamed, (dir / "named").string()));
  std::ifstream in(dir / "named");
  std::string text;
  in >> text;
  CHECK(text == "hello");
  errno = 0;
  CHECK_FALSE(platform::link_unnamed_temp(unnamed, (dir / "named").string()));  // never replaces
  CHECK(errno == EEXIST);
  ::close(unnamed);
}

TEST_CASE("platform: writes that bypass the page cache") {
  const fs::path dir = scratch_dir("uncached");
  const fs::path path = dir / "f";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  const bool on = platform::write_uncached(fd, true);
  if (std::string(platform::name()) == "posix") CHECK_FALSE(on);
#ifdef O_DIRECT
  // On Linux, where this file system takes O_DIRECT (probed here directly),
  // the call must turn it on: otherwise every conversion would quietly go
  // through the page cache and the tests would follow it.
  if (std::string(platform::name()) == "linux") {
    const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (probe >= 0) {
      ::close(probe);
      CHECK(on);
    }
  }
#endif
  const size_t a = platform::kDirectAlign;
  auto* aligned = static_cast<char*>(::operator new(2 * a, std::align_val_t{a}));
  std::memset(aligned, 'x', 2 * a);
  CHECK(::write(fd, aligned, 2 * a) == ssize_t(2 * a));  // aligned: written on either side
#ifdef O_DIRECT
  if (on && std::string(platform::name()) == "linux") {
    errno = 0;
    CHECK(::write(fd, aligned, 100) == -1);  // a length off the alignment is refused while bypassing
    CHECK(errno == EINVAL);
  }
#endif
  CHECK_FALSE(platform::write_uncached(fd, false));
  CHECK(::write(fd, aligned + 1, 100) == 100);  // buffered again: any length, any address
  ::operator delete(aligned, std::align_val_t{a});
  ::close(fd);
  CHECK(fs::file_size(path) == 2 * a + 100);
}

TEST_CASE("platform: CPU features the system reports") {
  // Off Arm these say no; on Arm they are what the kernel says (no check possible here beyond running).
#if !defined(__aarch64__)
  CHECK_FALSE(platform::arm_has_dotprod());
  CHECK_FALSE(platform::arm_has_bf16());
#else
  (void)platform::arm_has_dotprod(), (void)platform::arm_has_bf16();
#endif
#if !(defined(__APPLE__) && defined(__x86_64__))
  CHECK_FALSE(platform::x86_avx512_enabled().has_value());
#endif
}
