#include "formats/file_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/platform.hpp"
#include "formats/error.hpp"

namespace mmgpt {

FileBytes::FileBytes(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {  // mmap of length 0 is an error; an empty file is just empty
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(path + ": cannot map file: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  fd_ = fd;
}

void FileBytes::release(const uint8_t* p, size_t n) const {
  if (!data_ || p < data_ || n == 0 || n > size_ || size_t(p - data_) > size_ - n) return;
  if (!platform::drop_file_pages(data_, fd_, p, n))
    throw Error(path_ + ": cannot map the file's pages afresh after reading them: " + std::strerror(errno));
}

FileBytes::~FileBytes() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace mmgpt
