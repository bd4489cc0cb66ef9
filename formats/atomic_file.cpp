#include "formats/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/platform.hpp"
#include "formats/error.hpp"

namespace mmgpt {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

void split_path(const std::string& path, std::string& dir, std::string& base) {
  const size_t slash = path.rfind('/');
  dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  base = slash == std::string::npos ? path : path.substr(slash + 1);
}

// `.<base>.tmp.` followed by exactly six letters or digits: the shape
// mkostemp() and link_unnamed() give, so nothing else is ever deleted.
bool is_temp_name(const char* name, const std::string& prefix) {
  if (std::strncmp(name, prefix.c_str(), prefix.size()) != 0) return false;
  const char* tail = name + prefix.size();
  if (std::strlen(tail) != 6) return false;
  for (const char* c = tail; *c; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) return false;
  return true;
}

std::string random_suffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::string s(6, 'x');
  for (char& c : s) c = kChars[rd() % (sizeof(kChars) - 1)];
  return s;
}

}  // namespace

// Writes the runs handed to it, in order, on a thread of its own; hands the
// buffers back for filling. The first failure stops it and is reported by the
// next hand-off or by finish(); runs queued after it are dropped.
struct AtomicFile::Background {
  static constexpr size_t kInFlight = 4;  // runs queued or being written, at most

  explicit Background(AtomicFile& file) : file_(file), thread_([this] { loop(); }) {}
  ~Background() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Queues `run` (a whole one) and returns a buffer to fill next, waiting
  // while kInFlight are out. Returns errno of a failed write instead, if any.
  int hand(Run& run) {
    std::unique_lock<std::mutex> lock(m_);
    queued_.push_back(std::move(run));
    cv_.notify_all();
    cv_.wait(lock, [&] { return error_ != 0 || !spare_.empty() || queued_.size() + writing_ < kInFlight; });
    if (error_ != 0) return error_;
    if (!spare_.empty()) {
      run = std::move(spare_.back());
      spare_.pop_back();
    }
    return 0;  // run is empty when no spare was free: the caller allocates one
  }

  // Waits until every queued run is written; 0 or errno of the failure.
  int finish() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return error_ != 0 || (queued_.empty() && writing_ == 0); });
    return error_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (!queued_.empty() && error_ == 0); });
      if (stop_) return;
      Run run = std::move(queued_.front());
      queued_.pop_front();
      writing_ = 1;
      lock.unlock();
      const int err = file_.write_all(run.get(), kRunBytes);
      lock.lock();
      writing_ = 0;
      if (err != 0) {
        error_ = err;
        queued_.clear();
      }
      spare_.push_back(std::move(run));
      cv_.notify_all();
    }
  }

  AtomicFile& file_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Run> queued_;
  std::vector<Run> spare_;
  size_t writing_ = 0;
  int error_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

AtomicFile::AtomicFile(const std::string& target, Temp temp, Cache cache) : target_(target) {
  split_path(target, dir_, base_);
  if (base_.empty()) throw Error(target + ": output path names a directory, not a file");
  struct stat st {};
  if (::lstat(target.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // Write through the link: replacing the link itself would silently detach it from its file.
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::weakly_canonical(target, ec);
    if (ec) throw Error(target + ": cannot resolve the symbolic link (" + ec.message() + ")");
    target_ = real.string();
    split_path(target_, dir_, base_);
  }
  if (::stat(dir_.c_str(), &st) != 0)
    throw Error(target + ": output directory '" + dir_ + "' does not exist (" + errno_text(errno) + ")");
  if (!S_ISDIR(st.st_mode)) throw Error(target + ": output directory '" + dir_ + "' is not a directory");
  if (::stat(target_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(target + ": output path is a directory");
    if (!S_ISREG(st.st_mode))
      throw Error(target +
                  ": output path exists and is not a regular file (a device, FIFO or socket); "
                  "refusing to replace it");
    existed_ = true;
  }
  remove_stale_temporaries(target_);

  if (temp == Temp::Auto) {
    fd_ = platform::open_unnamed_temp(dir_);
    if (fd_ >= 0) {
      unnamed_ = true;
      ::flock(fd_, LOCK_EX);  // guards its hidden name between link and rename in commit()
    }
  }
  if (fd_ < 0) open_named();
  if (cache == Cache::Bypass) uncached_ = platform::write_uncached(fd_, true);
  // A model file is ordinary data others may read (mkostemp creates 0600).
  ::fchmod(fd_, 0644);
}

void AtomicFile::open_named() {
  int err = 0;
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string tmpl = dir_ + "/." + base_ + ".tmp.XXXXXX";
    const int fd = platform::make_temp(tmpl);
    if (fd < 0) {
      err = errno;
      break;
    }
    // Another process's stale-temporary sweep may catch it between mkstemp and
    // flock and unlink it; a temporary that lost its name is dropped and redone.
    struct stat st {};
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0) {
      fd_ = fd;
      tmp_ = tmpl;
      return;
    }
    ::close(fd);
    err = EAGAIN;
  }
  throw Error(target_ + ": cannot create a temporary file in '" + dir_ + "' (" + errno_text(err) + ")");
}

size_t AtomicFile::remove_stale_temporaries(const std::string& target) {
  std::string dir, base;
  split_path(target, dir, base);
  if (base.empty()) return 0;
  const std::string prefix = "." + base + ".tmp.";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return 0;
  DIR* d = ::fdopendir(dfd);
  if (!d) {
    ::close(dfd);
    return 0;
  }
  size_t removed = 0;
  while (const dirent* e = ::readdir(d)) {
    if (!is_temp_name(e->d_name, prefix)) continue;
    const int fd = ::openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat held {
    }, named{};
    // A live writer holds the lock; only a temporary no one holds is removed, and only
    // if the name still refers to the very file that was found unlocked.
    if (::fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::fstatat(dfd, e->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == held.st_dev &&
        named.st_ino == held.st_ino && ::unlinkat(dfd, e->d_name, 0) == 0)
      ++removed;
    ::close(fd);
  }
  ::closedir(d);  // closes dfd
  return removed;
}

AtomicFile::~AtomicFile() {
  background_.reset();                                       // before the descriptor it writes to is closed
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());  // while still locked: no sweep can race it
  if (fd_ >= 0) ::close(fd_);
}

void AtomicFile::write(const void* data, uint64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Whole runs straight from the caller's bytes, when written now. Once the background
    // writer has started, every run goes through it, in order (copied: the caller may reuse
    // its bytes once this returns), even after a refusal has turned the writes buffered.
    if (staged_ == 0 && n >= kRunBytes && !uncached_ && !background_) {
      const uint64_t runs = n - n % kRunBytes;
      write_through(p, runs);
      p += runs;
      n -= runs;
      continue;
    }
    if (!stage_) stage_.reset(new (std::align_val_t{kRunBytes}) char[kRunBytes]);
    const size_t take = static_cast<size_t>(n < kRunBytes - staged_ ? n : kRunBytes - staged_);
    std::memcpy(stage_.get() + staged_, p, take);
    staged_ += take;
    p += take;
    n -= take;
    if (staged_ == kRunBytes) {
      if (uncached_ || background_) {
        hand_off_stage();
      } else {
        write_through(stage_.get(), kRunBytes);
      }
      staged_ = 0;
    }
  }
}

void AtomicFile::hand_off_stage() {
  if (!background_) background_ = std::make_unique<Background>(*this);
  if (const int err = background_->hand(stage_)) fail("cannot write the new file", err);
}

void AtomicFile::write_through(const char* p, uint64_t n) {
  if (const int err = write_all(p, n)) fail("cannot write the new file", err);
}

int AtomicFile::write_all(const char* p, uint64_t n) {
  while (n > 0) {
    const size_t chunk = n > (1u << 30) ? (1u << 30) : static_cast<size_t>(n);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && uncached_) {  // refused unbuffered after all (or cut short by a limit)
      uncached_ = platform::write_uncached(fd_, false);
      continue;
    }
    if (w <= 0) return w < 0 ? errno : ENOSPC;
    p += w;
    n -= static_cast<uint64_t>(w);
  }
  return 0;
}

void AtomicFile::zeros(uint64_t n) {
  static const unsigned char kZeros[4096] = {};
  while (n > 0) {
    const uint64_t chunk = n < sizeof(kZeros) ? n : sizeof(kZeros);
    write(kZeros, chunk);
    n -= chunk;
  }
}

// An O_TMPFILE cannot be renamed, only linked, and linkat() never replaces:
// it gets a unique hidden name first, which rename() then moves over the target.
void AtomicFile::link_unnamed() {
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::string name = dir_ + "/." + base_ + ".tmp." + random_suffix();
    if (platform::link_unnamed_temp(fd_, name)) {
      tmp_ = name;
      return;
    }
    if (errno != EEXIST) fail("cannot name the new file", errno);
  }
  fail("cannot name the new file", EEXIST);
}

void AtomicFile::commit() {
  if (background_) {
    const int err = background_->finish();
    background_.reset();
    if (err != 0) fail("cannot write the new file", err);
  }
  if (uncached_ && staged_ % platform::kDirectAlign != 0) uncached_ = platform::write_uncached(fd_, false);
  if (staged_ > 0) write_through(stage_.get(), staged_);
  staged_ = 0;
  if (::fsync(fd_) != 0) fail("cannot flush the new file to disk", errno);
  if (unnamed_) link_unnamed();
  // Renamed while the lock is held (closing drops it), so no sweep can take the name first.
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail("cannot rename the new file into place", errno);
  committed_ = true;
  ::close(fd_);  // after fsync, close cannot lose data
  fd_ = -1;
  // Make the rename itself durable; failure here cannot undo a complete file, so it is not fatal.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void AtomicFile::fail(const char* what, int err) {
  throw Error(target_ + ": " + what + " (" + errno_text(err) + "); " +
              (existed_ ? "the previous file is left as it was" : "no file was written"));
}

}  // namespace mmgpt
