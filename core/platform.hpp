#pragma once
// The operating system calls beyond plain POSIX, each with a fallback that
// needs only POSIX: the rest of mmgpt makes no Linux- or macOS-specific call.
// A build with -DMMGPT_POSIX_FALLBACKS=ON takes the fallbacks on Linux too,
// so CI runs the test suite the way a system without them would.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace mmgpt::platform {

// "linux", "macos", or "posix" (another system, or the fallbacks forced).
const char* name();

size_t page_size();
// The machine's memory in bytes (sysconf _SC_PHYS_PAGES); 0 where the system cannot say.
uint64_t physical_memory_bytes();

// Asks for [p, p + n) to be backed by 2 MiB pages: anonymous memory, and the
// page cache's folios for file pages read from now on (Linux MADV_HUGEPAGE).
// Advisory; nothing where the system has no such advice.
void advise_huge_pages(void* p, size_t n);

// Drops this process's pages of the whole pages inside [p, p + n), a range of
// `map`, a read-only private mapping of the file `fd` from offset 0. They stop
// counting toward the resident set; a later read faults them in again from
// the file. Linux: MADV_DONTNEED; elsewhere the range is mapped afresh.
// False, with errno set, where mapping afresh failed: the range may then be
// unmapped, and must not be read again.
bool drop_file_pages(const void* map, int fd, const void* p, size_t n);

// Bytes of [p, p + n) (page-aligned) in memory now (mincore); empty where the
// system cannot say.
std::optional<uint64_t> resident_bytes(const void* p, size_t n);

// The share of the file mapping containing `address` mapped with 2 MB pages
// (Linux /proc/self/smaps, FilePmdMapped / Size); empty where unknown.
std::optional<double> huge_mapped_share(const void* address);

// Restarts the peak resident set from the current one (Linux clear_refs "5");
// false where it cannot, and peak_rss_bytes() is then the lifetime peak.
bool reset_peak_rss();
uint64_t peak_rss_bytes();

// The running program's file: /proc/self/exe, _NSGetExecutablePath, or the
// argv[0] given to remember_argv0 resolved against the working directory and
// PATH; empty where none of them says.
std::filesystem::path executable_path();
void remember_argv0(const char* argv0);

// An unnamed temporary file in `dir` (Linux O_TMPFILE, named later through
// /proc/self/fd), open for reading and writing, close-on-exec; -1 where the
// system or the file system has none.
int open_unnamed_temp(const std::string& dir);
// Gives the unnamed temporary `fd` the name `path`; false with errno set.
bool link_unnamed_temp(int fd, const std::string& path);
// mkstemp, close-on-exec from the start where the system can.
int make_temp(std::string& path_template);

// Writes to `fd` bypass the page cache from now on (`on`) or go through it
// again: Linux O_DIRECT, macOS F_NOCACHE. Returns whether they bypass it now;
// false where the system or the file system (tmpfs, some FUSE) has no such
// mode. While bypassing, every write must start at a kDirectAlign-aligned
// address and file offset and be a multiple of kDirectAlign bytes; a write
// that is not fails with EINVAL.
bool write_uncached(int fd, bool on);
constexpr size_t kDirectAlign = 4096;

// Aarch64 features the kernel reports (Linux hwcaps, macOS sysctl); false
// where the system does not say.
bool arm_has_dotprod();
bool arm_has_bf16();
// x86: whether the system saves AVX-512 state, where CPUID cannot tell (macOS
// enables it on first use, so XCR0 says no until then); empty: ask CPUID.
std::optional<bool> x86_avx512_enabled();
// x86-64 Linux: asks the kernel for the AMX tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), which Linux grants
// per process, for every thread, and requires before the first tile
// instruction (else SIGILL). True if granted (or already granted); false
// where refused or on other systems. Idempotent.
bool x86_request_amx_tiles();

}  // namespace mmgpt::platform
