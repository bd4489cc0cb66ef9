// AtomicFile: a file appears complete or not at all. Commit, abort by
// exception, a writer SIGKILLed mid-write (unnamed and named temporaries), the
// sweep of stale temporaries (and only those), a write past RLIMIT_FSIZE, and
// targets that must be refused.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/platform.hpp"
#include "formats/atomic_file.hpp"
#include "formats/error.hpp"

namespace fs = std::filesystem;
using mmgpt::AtomicFile;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(MMGPT_TEST_TMP) / "formats_atomic_file" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Whether AtomicFile can use an unnamed temporary here (O_TMPFILE on Linux's
// ext4, xfs, tmpfs, btrfs; never with the POSIX fallbacks).
bool tmpfile_supported(const fs::path& dir) {
  const int fd = mmgpt::platform::open_unnamed_temp(dir.string());
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Runs `body` in a child process and returns what it wrote to the pipe and how it ended.
struct ChildResult {
  std::string message;
  int status = 0;
};
template <class Fn>
ChildResult in_child(Fn body) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    const std::string msg = body();
    (void)!::write(p[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(p[1]);
  ChildResult r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) r.message.append(buf, size_t(n));
  ::close(p[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

const std::string kOld = "the previous file\n";

}  // namespace

TEST_CASE("AtomicFile: commit replaces the target and leaves nothing else") {
  for (AtomicFile::Temp mode : {AtomicFile::Temp::Auto, AtomicFile::Temp::Named}) {
    const fs::path dir = fresh_dir("commit");
    const fs::path target = dir / "out.bin";
    spit(target, kOld);
    {
      AtomicFile f(target.string(), mode);
      if (mode == AtomicFile::Temp::Named) {
        CHECK_FALSE(f.unnamed());
        CHECK(fs::exists(f.temp_path()));
        CHECK(fs::path(f.temp_path()).filename().string().rfind(".out.bin.tmp.", 0) == 0);
      } else {
        CHECK(f.unnamed() == tmpfile_supported(dir));
        if (f.unnamed()) CHECK(names_in(dir) == std::set<std::string>{"out.bin"});  // nothing named while writing
      }
      f.write("new ", 4);
      f.zeros(3);
      f.write("bytes", 5);
      CHECK(slurp(target) == kOld);  // untouched until commit
      f.commit();
    }
    CHECK(slurp(target) == std::string("new \0\0\0bytes", 12));
    CHECK(names_in(dir) == std::set<std::string>{"out.bin"});
    struct stat st {};
    REQUIRE(::stat(target.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
  }
}

TEST_CASE(
    "AtomicFile: the file is written in whole aligned 2 MiB runs, the tail at commit; the bytes are the caller's") {
  // Pieces of every kind: small and unaligned, one that fills the stage
  // exactly, several runs at once (straight from the caller) from an aligned
  // address and not, starting at a run boundary and not, zeros across a run
  // boundary. Both with the page cache bypassed (where the file system
  // allows) and kept.
  const size_t run = AtomicFile::kRunBytes;
  for (AtomicFile::Cache cache : {AtomicFile::Cache::Bypass, AtomicFile::Cache::Keep}) {
    const fs::path dir = fresh_dir("runs");
    const fs::path target = dir / "out.bin";
    AtomicFile f(target.string(), AtomicFile::Temp::Named, cache);
    if (cache == AtomicFile::Cache::Keep) CHECK_FALSE(f.uncached());
    std::string expected;
    std::mt19937 gen(5);
    auto piece = [&](size_t n) {
      std::string s(n, '\0');
      for (char& c : s) c = static_cast<char>(gen());
      f.write(s.data(), s.size());
      expected += s;
    };
    // Uncached runs are written by a thread of the writer's own, a few behind: the
    // file's length at each step is checked where writes are immediate.
    const bool immediate = !f.uncached();
    auto on_disk = [&] { return static_cast<size_t>(fs::file_size(f.temp_path())); };
    auto check_disk = [&](size_t expected_size) {
      if (immediate) CHECK(on_disk() == expected_size);
    };
    piece(7);
    check_disk(0);   // staged
    piece(run - 7);  // fills the stage: one run
    check_disk(run);
    {
      const std::unique_ptr<char[], void (*)(char*)> aligned(
          new (std::align_val_t{4096}) char[2 * run], [](char* p) { ::operator delete[](p, std::align_val_t{4096}); });
      for (size_t i = 0; i < 2 * run; ++i) aligned[i] = static_cast<char>(gen());
      f.write(aligned.get(), 2 * run);
      expected.append(aligned.get(), 2 * run);
    }
    check_disk(3 * run);
    piece(2 * run + 13);  // a run boundary, an address of any alignment: two runs, 13 bytes staged
    check_disk(5 * run);
    piece(3 * run + 1);  // unaligned start: through the stage
    check_disk(8 * run);
    f.zeros(run - 20);  // the stage filled by zeros (14 + run - 20 bytes: not yet a run)
    expected += std::string(run - 20, '\0');
    check_disk(8 * run);
    piece(100);
    check_disk(9 * run);
    if (immediate) CHECK(on_disk() % run == 0);
    const bool uncached = f.uncached();
    f.commit();
    if (uncached) {
      // The whole runs went around the page cache: none of their pages are in it.
      const int fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC);
      REQUIRE(fd >= 0);
      void* map = ::mmap(nullptr, 9 * run, PROT_READ, MAP_SHARED, fd, 0);
      REQUIRE(map != MAP_FAILED);
      const std::optional<uint64_t> resident = mmgpt::platform::resident_bytes(map, 9 * run);
      ::munmap(map, 9 * run);
      ::close(fd);
      if (resident) CHECK(*resident == 0);
    }
    CHECK(slurp(target) == expected);
    CHECK(names_in(dir) == std::set<std::string>{"out.bin"});
  }
}

TEST_CASE("AtomicFile: an exception before commit leaves the target as it was, and no temporary") {
  for (AtomicFile::Temp mode : {AtomicFile::Temp::Auto, AtomicFile::Temp::Named}) {
    const fs::path dir = fresh_dir("abort");
    const fs::path target = dir / "out.bin";
    spit(target, kOld);
    try {
      AtomicFile f(target.string(), mode);
      f.write("partial", 7);
      throw std::runtime_error("converter failed");
    } catch (const std::runtime_error&) {
    }
    CHECK(slurp(target) == kOld);
    CHECK(names_in(dir) == std::set<std::string>{"out.bin"});
    // And with no previous file: still nothing.
    fs::remove(target);
    {
      AtomicFile f(target.string(), mode);
      f.write("partial", 7);
    }
    CHECK(names_in(dir).empty());
  }
}

TEST_CASE("AtomicFile: a writer SIGKILLed mid-write leaves the target intact; a rerun sweeps its temporary") {
  for (AtomicFile::Temp mode : {AtomicFile::Temp::Auto, AtomicFile::Temp::Named}) {
    const fs::path dir = fresh_dir("sigkill");
    const fs::path target = dir / "out.bin";
    spit(target, kOld);
    const ChildResult r = in_child([&]() -> std::string {
      AtomicFile f(target.string(), mode);
      f.write("half of it", 10);
      ::raise(SIGKILL);
      return "not killed";
    });
    REQUIRE(WIFSIGNALED(r.status));
    CHECK(slurp(target) == kOld);
    const std::set<std::string> left = names_in(dir);
    if (mode == AtomicFile::Temp::Auto && tmpfile_supported(dir))
      CHECK(left == std::set<std::string>{"out.bin"});  // an unnamed temporary dies with its writer
    else
      CHECK(left.size() == 2);  // the named temporary stays, until the next writer of this target
    AtomicFile again(target.string(), mode);
    again.write("complete", 8);
    again.commit();
    CHECK(slurp(target) == "complete");
    CHECK(names_in(dir) == std::set<std::string>{"out.bin"});
  }
}

TEST_CASE("AtomicFile: the sweep removes only unlocked temporaries of the same target") {
  const fs::path dir = fresh_dir("sweep");
  const fs::path target = dir / "out.bin";
  spit(dir / ".out.bin.tmp.Abc123", "stale");                 // a dead writer's (no lock held)
  spit(dir / ".out.bin.tmp.notes", "not a temporary");        // wrong shape: kept
  spit(dir / ".other.bin.tmp.Abc123", "another target");      // another target's: kept
  ::mkdir((dir / ".out.bin.tmp.dir123").c_str(), 0755);       // not a regular file: kept
  AtomicFile live(target.string(), AtomicFile::Temp::Named);  // a live writer, holding its lock
  const std::string live_name = fs::path(live.temp_path()).filename().string();
  CHECK(names_in(dir) == std::set<std::string>{".out.bin.tmp.notes", ".other.bin.tmp.Abc123", ".out.bin.tmp.dir123",
                                               live_name});  // the live writer's own sweep took the stale one
  spit(dir / ".out.bin.tmp.Zzz999", "stale too");
  CHECK(AtomicFile::remove_stale_temporaries(target.string()) == 1);
  CHECK(fs::exists(live.temp_path()));
  live.write("ok", 2);
  live.commit();
  CHECK(slurp(target) == "ok");
  CHECK(names_in(dir) ==
        std::set<std::string>{"out.bin", ".out.bin.tmp.notes", ".other.bin.tmp.Abc123", ".out.bin.tmp.dir123"});
}

TEST_CASE("AtomicFile: a write past RLIMIT_FSIZE fails with one line naming the target; nothing is left") {
  // A limit off the 4 KB alignment cuts an uncached write to a length the
  // file system refuses (EINVAL): the writer must go on buffered and still
  // report the limit.
  for (const rlim_t limit : {rlim_t{64} << 10, (rlim_t{64} << 10) + 100})
    for (AtomicFile::Temp mode : {AtomicFile::Temp::Auto, AtomicFile::Temp::Named}) {
      const fs::path dir = fresh_dir("fsize");
      const fs::path target = dir / "out.bin";
      spit(target, kOld);
      const ChildResult r = in_child([&]() -> std::string {
        std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the writer instead of returning EFBIG
        const rlimit lim{limit, limit};
        if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return "setrlimit failed";
        try {
          AtomicFile f(target.string(), mode);
          const std::vector<char> block(3 << 20, 'x');  // a whole run written before commit, and a tail
          f.write(block.data(), block.size());
          f.commit();
          return "no error";
        } catch (const mmgpt::Error& e) {
          return e.what();
        }
      });
      REQUIRE(WIFEXITED(r.status));
      INFO(r.message);
      CHECK(r.message.find(target.string()) == 0);
      CHECK(r.message.find(std::strerror(EFBIG)) != std::string::npos);
      CHECK(r.message.find("the previous file is left as it was") != std::string::npos);
      CHECK(r.message.find('\n') == std::string::npos);
      CHECK(slurp(target) == kOld);
      CHECK(names_in(dir) == std::set<std::string>{"out.bin"});
    }
}

TEST_CASE("AtomicFile: targets that must be refused") {
  const fs::path dir = fresh_dir("refused");
  auto refused = [](const std::string& target, const std::string& says) {
    try {
      AtomicFile f(target);
      FAIL("accepted " << target);
    } catch (const mmgpt::Error& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find(target) != std::string::npos, what);
      CHECK_MESSAGE(what.find(says) != std::string::npos, what);
    }
  };
  refused((dir / "missing" / "out.bin").string(), "does not exist");
  refused(dir.string(), "is a directory");
  refused(dir.string() + "/", "names a directory");
  spit(dir / "file", "x");
  refused((dir / "file" / "out.bin").string(), "is not a directory");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0644) == 0);
  refused((dir / "fifo").string(), "not a regular file");
  CHECK(fs::is_fifo(dir / "fifo"));
  CHECK(names_in(dir) == std::set<std::string>{"file", "fifo"});
}

TEST_CASE("AtomicFile: a symbolic link is written through, and kept") {
  const fs::path dir = fresh_dir("symlink");
  spit(dir / "real.bin", kOld);
  fs::create_symlink("real.bin", dir / "link.bin");
  {
    AtomicFile f((dir / "link.bin").string());
    f.write("via link", 8);
    f.commit();
  }
  CHECK(fs::is_symlink(dir / "link.bin"));
  CHECK(slurp(dir / "real.bin") == "via link");
  CHECK(names_in(dir) == std::set<std::string>{"real.bin", "link.bin"});
}
