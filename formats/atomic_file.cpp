#include "formats/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "formats/error.hpp"

namespace mmgpt {

AtomicFile::AtomicFile(const std::string& target) : target_(target) {
  const size_t slash = target.rfind('/');
  dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : target.substr(0, slash);
  const std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
  if (base.empty()) throw Error(target + ": output path names a directory, not a file");
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0)
    throw Error(target + ": output directory '" + dir_ + "' does not exist (" + std::strerror(errno) + ")");
  if (!S_ISDIR(st.st_mode)) throw Error(target + ": output directory '" + dir_ + "' is not a directory");
  if (::stat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw Error(target + ": output path is a directory");
  std::string tmpl = dir_ + "/." + base + ".tmp.XXXXXX";
  fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd_ < 0)
    throw Error(target + ": cannot create a temporary file in '" + dir_ + "' (" + std::strerror(errno) + ")");
  tmp_ = tmpl;
  // mkstemp creates 0600; a model file is ordinary data others may read.
  ::fchmod(fd_, 0644);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, uint64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = n > (1u << 30) ? (1u << 30) : static_cast<size_t>(n);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write", w < 0 ? errno : ENOSPC);
    p += w;
    n -= static_cast<uint64_t>(w);
  }
}

void AtomicFile::zeros(uint64_t n) {
  static const unsigned char kZeros[4096] = {};
  while (n > 0) {
    const uint64_t chunk = n < sizeof(kZeros) ? n : sizeof(kZeros);
    write(kZeros, chunk);
    n -= chunk;
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("cannot flush", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail("cannot rename into place", errno);
  committed_ = true;
  // Make the rename itself durable; failure here cannot undo a complete file, so it is not fatal.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void AtomicFile::fail(const char* what, int err) {
  throw Error(target_ + ": " + what + " temporary file '" + tmp_ + "' (" + std::strerror(err) +
              "); the target was left untouched");
}

}  // namespace mmgpt
