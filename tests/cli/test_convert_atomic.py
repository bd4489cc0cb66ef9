"""`mmgpt convert` loses nothing: killed at any moment of its write (SIGKILL)
it leaves the previous output byte for byte and no temporary, and a rerun
completes; a full disk (ulimit -f, and a tiny tmpfs when it can be mounted)
gives one line on stderr naming the output, a non-zero exit, the previous
output intact and no temporary.

Run by ctest as: /usr/bin/python3 test_convert_atomic.py --mmgpt PATH --workdir DIR
"""
import ctypes
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import MM, W, check, finish, run, system_calls, write_char_model  # noqa: E402

start = time.monotonic()
alphabet = sorted(set('\n !,.:;?abcdefghijklmnopqrstuvwxyz'))
# A 4-layer, width-384 model: about 28 MB to write, so the write takes a moment.
big_ckpt, _ = write_char_model(os.path.join(W, 'big'), alphabet, n_embd=384, n_layer=4, n_head=6, ctx=64)
small_ckpt, _ = write_char_model(os.path.join(W, 'small'), alphabet, n_embd=32, n_layer=1, n_head=4, ctx=16)

out_dir = os.path.join(W, 'out')
os.makedirs(out_dir)
out = os.path.join(out_dir, 'model.mmgpt')
old_file = os.path.join(W, 'old.mmgpt')  # the "previous output": the small model
ref_file = os.path.join(W, 'ref.mmgpt')  # what a complete convert of the big model writes
for ck, dest in ((small_ckpt, old_file), (big_ckpt, ref_file)):
    rc, _, err = run('convert', ck, '-o', dest)
    if rc != 0:
        print(f'[FAIL] convert {ck}: {err}')
        sys.exit(1)
old = open(old_file, 'rb').read()
ref = open(ref_file, 'rb').read()


def tmpfile_supported(d):
    try:
        os.close(os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o600))
        return True
    except (OSError, AttributeError):
        return False


# mmgpt uses O_TMPFILE where the file system has it, unless built with the POSIX fallbacks only.
UNNAMED = tmpfile_supported(out_dir) and system_calls() == 'linux'
print(f'O_TMPFILE in {out_dir}, used: {"yes" if UNNAMED else "no (named temporaries: a rerun sweeps them)"}')


def temporaries(d):
    return sorted(n for n in os.listdir(d) if n != 'model.mmgpt')


def temp_size(pid, d, stale=()):
    """Bytes written so far to the convert's temporary, or None while it has none (read from /proc).
    stale: names of earlier runs' temporaries, which the convert opens to sweep them, not to write them."""
    try:
        fds = os.listdir(f'/proc/{pid}/fd')
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f'/proc/{pid}/fd/{fd}')
            # An O_TMPFILE shows as "DIR/#INODE (deleted)"; a named temporary as DIR/.model.mmgpt.tmp.XXXXXX.
            if target.startswith(d + '/') and ('/#' in target or '/.model.mmgpt.tmp.' in target) \
                    and os.path.basename(target).removesuffix(' (deleted)') not in stale:
                return os.stat(f'/proc/{pid}/fd/{fd}').st_size
        except OSError:
            continue
    return None


def reset_output():
    # Temporaries are not cleared: without O_TMPFILE the final rerun must sweep them all.
    shutil.copyfile(old_file, out)


def stop(p):
    """SIGSTOP the convert and wait until it is stopped, so that what /proc shows cannot move on before the kill.
    Returns False when it had exited instead (its exit status is then in p.returncode)."""
    os.kill(p.pid, signal.SIGSTOP)
    _, status = os.waitpid(p.pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        return True
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return False


# The fixed kill points trace the convert (ptrace through libc) and stop it at every system call, so the
# temporary grows by one write() at most (a tensor, under a tenth of the file) between two looks at it:
# each point lands during the write however busy the machine is. Sleeping and polling missed them on a
# loaded CI host, where the convert wrote the whole file while the poller waited for a CPU.
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
libc.ptrace.restype = ctypes.c_long
PTRACE_TRACEME, PTRACE_SYSCALL, PTRACE_SETOPTIONS = 0, 24, 0x4200  # <linux/ptrace.h>, every architecture
PTRACE_O_TRACESYSGOOD, PTRACE_O_EXITKILL = 0x1, 0x100000
SYSCALL_STOP = signal.SIGTRAP | 0x80  # what PTRACE_O_TRACESYSGOOD makes a syscall stop report


def ptrace(request, pid, data=0):
    if libc.ptrace(request, pid, None, ctypes.c_void_p(data)) == -1:
        e = ctypes.get_errno()
        raise OSError(e, f'ptrace request {request:#x}: {os.strerror(e)}')


def trace_me():
    ptrace(PTRACE_TRACEME, 0)  # in the child, before exec: it stops with SIGTRAP at the exec


def step_until(p, at_bytes, stale):
    """Runs the traced convert one system call at a time until its temporary holds at least at_bytes.
    Returns that size with the convert stopped, or None when it exited first (p.returncode then set)."""
    _, status = os.waitpid(p.pid, 0)  # the stop at exec
    ptrace(PTRACE_SETOPTIONS, p.pid, PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL)
    deliver = 0
    while True:
        if not os.WIFSTOPPED(status):
            p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
            return None
        ptrace(PTRACE_SYSCALL, p.pid, deliver)
        _, status = os.waitpid(p.pid, 0)
        deliver = 0
        if os.WIFSTOPPED(status) and os.WSTOPSIG(status) == SYSCALL_STOP:
            size = temp_size(p.pid, out_dir, stale)
            if size is not None and size >= at_bytes:
                return size
        elif os.WIFSTOPPED(status) and os.WSTOPSIG(status) != signal.SIGTRAP:
            deliver = os.WSTOPSIG(status)  # a signal the convert got: it gets it when it goes on


# --- (a) SIGKILL during the write: at fixed and seeded random points of the temporary's growth, then at
# seeded random delays.
t0 = time.monotonic()
run('convert', big_ckpt, '-o', os.path.join(W, 'timing.mmgpt'))
convert_s = time.monotonic() - t0
os.remove(os.path.join(W, 'timing.mmgpt'))
rng = random.Random(20240607)
kill_points = [('as soon as the temporary exists', 0.0), ('at 30% written', 0.3), ('at 70% written', 0.7),
               ('when every byte is written (flush, name, rename pending)', 1.0)]
# Seeded random points: three fractions of the write (traced, they land in it), and two delays after the
# start, untraced: those kill it wherever it is then, system call or not, and most land before the write.
kill_points += [(f'at a random {f:.1%} written', f) for f in sorted(rng.uniform(0.01, 0.99) for _ in range(3))]
kill_points += [(f'at a random {d:.3f} s', -d) for d in sorted(rng.uniform(0, convert_s) for _ in range(2))]
landed_in_write = []  # the kill points that stopped the convert with its temporary incomplete
for what, at in kill_points:
    reset_output()
    stale = set(temporaries(out_dir))
    p = subprocess.Popen([MM, 'convert', big_ckpt, '-o', out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=trace_me if at >= 0 else None)
    killed_at = None
    if at < 0:
        time.sleep(-at)
        if stop(p):
            killed_at = temp_size(p.pid, out_dir, stale)
    else:
        killed_at = step_until(p, at * len(ref), stale)
    if p.returncode is None:
        p.kill()  # a stopped or traced process dies of SIGKILL too
    if p.returncode is None:
        p.wait(timeout=60)
    got = open(out, 'rb').read()
    if killed_at is not None and killed_at < len(ref):
        landed_in_write.append(at)
        intact = got == old  # killed before the last byte: the previous output, byte for byte
    else:
        intact = got in (old, ref)  # killed before or after the rename, or it finished first
    left = temporaries(out_dir)
    print(f'SIGKILL {what}: temporary at {killed_at} of {len(ref)} bytes when killed')
    check(f'SIGKILL {what}: the previous output is intact',
          intact, f'exit {p.returncode}, temporary at {killed_at} of {len(ref)} bytes, output {len(got)} bytes')
    if UNNAMED:
        check(f'SIGKILL {what}: no temporary left', left == [], str(left))
rc, _, err = run('convert', big_ckpt, '-o', out)
check('after the kills, a rerun completes and leaves no temporary (it sweeps any a dead writer left)',
      rc == 0 and open(out, 'rb').read() == ref and temporaries(out_dir) == [],
      f'exit {rc}, {err!r}, {temporaries(out_dir)}')
in_write = [at for _, at in kill_points if 0 <= at < 1]
check(f'the {len(in_write)} kills set at a fraction of the write all landed while the temporary was incomplete',
      all(at in landed_in_write for at in in_write),
      f'{len(landed_in_write)} of {len(kill_points)} kills landed during the write: {landed_in_write}')


# --- (b) a full disk
def expect_clean_failure(name, argv, dest, previous, why, **popen):
    p = subprocess.run([MM, *argv], capture_output=True, timeout=120, **popen)
    err = p.stderr.decode('utf-8', 'replace')
    lines = err.splitlines()
    check(f'{name}: one error line naming the output and the cause, non-zero exit',
          0 < p.returncode < 128 and len(lines) == 1 and lines[0].startswith('mmgpt: error: ') and dest in lines[0]
          and why in lines[0], f'exit {p.returncode}, stderr {err!r}')
    check(f'{name}: the previous output is intact', open(dest, 'rb').read() == previous)
    d = os.path.dirname(dest)
    left = sorted(n for n in os.listdir(d) if n != os.path.basename(dest))
    check(f'{name}: no temporary left', left == [], str(left))


def limit_file_size():
    # SIGXFSZ keeps its default action (subprocess restores it): mmgpt must ignore it itself.
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


reset_output()
expect_clean_failure('ulimit -f 1 MiB', ('convert', big_ckpt, '-o', out), out, old, os.strerror(27),  # EFBIG
                     preexec_fn=limit_file_size)

mnt = os.path.join(W, 'tmpfs')
os.makedirs(mnt)
if os.geteuid() != 0:
    print('[SKIP] full tmpfs: not running as root, cannot mount one')
else:
    m = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mnt], capture_output=True)
    if m.returncode != 0:
        print(f'[SKIP] full tmpfs: mount -t tmpfs failed here ({m.stderr.decode().strip()})')
    else:
        try:
            dest = os.path.join(mnt, 'model.mmgpt')
            shutil.copyfile(old_file, dest)
            free = os.statvfs(mnt).f_bfree
            expect_clean_failure('4 MiB tmpfs', ('convert', big_ckpt, '-o', dest), dest, old, os.strerror(28))  # ENOSPC
            check('4 MiB tmpfs: the space the failed write took is free again', os.statvfs(mnt).f_bfree == free,
                  f'{os.statvfs(mnt).f_bfree} free blocks, {free} before')
        finally:
            subprocess.run(['umount', mnt])
print(f'convert of the big model: {convert_s:.2f} s; whole test: {time.monotonic() - start:.1f} s')
finish()
