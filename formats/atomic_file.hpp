#pragma once
// Writing a file so that it appears complete or not at all, whatever happens
// to the writer. The bytes go to an unnamed temporary file (O_TMPFILE) in the
// target's directory; commit() flushes it, links it under a unique hidden name
// and renames that over the target (same directory, so the rename is atomic).
// Until that instant nothing of it has a name: an exception, a full disk or a
// SIGKILL leaves the target -- absent or an older file -- exactly as it was,
// and no debris.
//
// Where O_TMPFILE is unsupported (not Linux, some file systems, no /proc), the temporary
// is a named `.<base>.tmp.XXXXXX` beside the target instead. A writer holds an
// flock on its temporary for its whole life, so a temporary nobody holds
// belongs to a dead writer: constructing an AtomicFile for a target removes
// such stale temporaries of that target (left by a SIGKILL or a power cut).
//
// Bytes reach the file in whole 2 MiB runs at 2 MiB-aligned offsets (the tail
// at commit), staged here when the caller's pieces are smaller or unaligned:
// the page cache keeps a file in folios the size of the writes that made it,
// and only a 2 MiB folio can be mapped with one 2 MB page. A model file
// written tensor by tensor would end up mostly in small folios, and the
// engine that maps it next would take a TLB miss every 4 KB of weights
// (docs/kernels.md, "2 MB pages for the weights").
//
// The runs bypass the page cache where the file system allows (O_DIRECT,
// F_NOCACHE): a model is written once and mapped later, and copying every
// byte into the cache first costs more than the conversion's own work. Such
// writes wait for the device, so a thread of the writer's own does them while
// the caller goes on filling the next runs (a few runs in flight at most).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

namespace mmgpt {

class AtomicFile {
 public:
  enum class Temp {
    Auto,   // O_TMPFILE where the file system supports it, else a named temporary
    Named,  // always a named temporary (the fallback; tests use it)
  };
  enum class Cache {
    Bypass,  // writes skip the page cache where the file system allows it
    Keep,    // ordinary buffered writes (the fallback; tests use it)
  };

  // Throws mmgpt::Error naming `target` when its directory is missing, the
  // target is a directory or another non-regular file (a device, a FIFO), or
  // the temporary cannot be created. A symbolic link is written through: the
  // file it points to is replaced, the link is kept.
  explicit AtomicFile(const std::string& target, Temp temp = Temp::Auto, Cache cache = Cache::Bypass);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throw mmgpt::Error naming the target on any short write (a full disk,
  // EFBIG past RLIMIT_FSIZE: the caller must ignore SIGXFSZ to get it), here
  // or, for bytes still staged, in commit().
  void write(const void* data, uint64_t n);
  void zeros(uint64_t n);
  void commit();  // writes what is staged, fsync, name, rename into place; throws on failure

  static constexpr size_t kRunBytes = size_t{2} << 20;  // the unit of the file's writes

  bool unnamed() const { return unnamed_; }              // the temporary is an O_TMPFILE
  const std::string& temp_path() const { return tmp_; }  // the named temporary; "" while unnamed
  bool uncached() const { return uncached_; }            // writes bypass the page cache now

  // Removes the temporaries of `target` whose writer is dead (no flock held);
  // returns how many. Never throws: a temporary it cannot examine is kept.
  static size_t remove_stale_temporaries(const std::string& target);

 private:
  [[noreturn]] void fail(const char* what, int err);
  void open_named();
  void link_unnamed();
  void write_through(const char* p, uint64_t n);  // to the file now, all of it
  int write_all(const char* p, uint64_t n);       // the same, returning 0 or the errno of the failure
  void hand_off_stage();                          // the full stage to the background writer

  std::string target_, dir_, base_, tmp_;
  int fd_ = -1;
  struct FreeAligned {
    void operator()(char* p) const { ::operator delete[](p, std::align_val_t{kRunBytes}); }
  };
  using Run = std::unique_ptr<char[], FreeAligned>;
  struct Background;

  Run stage_;                               // kRunBytes, allocated by the first write that needs it
  size_t staged_ = 0;                       // bytes in stage_: the file's next bytes, after a whole number of runs
  std::unique_ptr<Background> background_;  // started by the first whole run written uncached
  std::atomic<bool> uncached_ = false;      // cleared by whichever thread finds the file system refusing
  bool unnamed_ = false, existed_ = false, committed_ = false;
};

}  // namespace mmgpt
