#!/usr/bin/env python3
"""Conversion time and peak memory beside `cp` of the same checkpoint.

    python3 bench/convert_scaling.py CHECKPOINT [CHECKPOINT ...] [--mmgpt build/mmgpt]
                                     [--dtype f32] [--rounds 3] [--out-dir DIR]

A CHECKPOINT is what `mmgpt convert` takes (a Hugging Face directory, a .pt
or .safetensors file). Each round runs `cp` of the checkpoint's weights file,
`cp` followed by `sync` of the copy (convert flushes its output to disk
before renaming it into place, cp does not), and the conversion, each into a
fresh file in --out-dir (default: beside the checkpoint) that is deleted
afterwards. One warm-up read puts the checkpoint in the page cache first.
Peak memory is the converter's high-water resident set (VmHWM), mapped file
pages included. Prints the median and the range of each figure.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def weights_file(path):
    if os.path.isfile(path):
        return path
    for name in ('model.safetensors', 'pytorch_model.bin'):
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    sys.exit(f'{path}: no model.safetensors or pytorch_model.bin inside')


def run_measured(cmd, preexec_fn=None):
    """Runs cmd; returns (exit code, stderr, wall seconds, peak resident set in bytes).

    The peak is the process's own high-water mark (VmHWM), polled from /proc
    until it exits, and read only once the process runs cmd[0]: wait4's
    ru_maxrss would also count the memory of this Python process, which the
    child holds between fork and exec."""
    comm = os.path.basename(cmd[0])[:15]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=preexec_fn)
        peak = 0
        while p.poll() is None:
            try:
                with open(f'/proc/{p.pid}/status') as f:
                    fields = dict(line.split(':', 1) for line in f if ':' in line)
                if fields.get('Name', '').strip() == comm and 'VmHWM' in fields:
                    peak = max(peak, int(fields['VmHWM'].split()[0]) * 1024)
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        dt = time.perf_counter() - t0
        err.seek(0)
        return p.returncode, err.read().decode(errors='replace'), dt, peak


def run(cmd):
    """Wall seconds and peak resident set of one command, which must succeed."""
    rc, err, dt, peak = run_measured(cmd)
    if rc != 0:
        sys.exit(f'{" ".join(cmd)} failed:\n{err}')
    return dt, peak


def spread(values, fmt):
    return f'{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('checkpoints', nargs='+')
    ap.add_argument('--mmgpt', default=os.path.join(os.path.dirname(__file__), '..', 'build', 'mmgpt'))
    ap.add_argument('--dtype', default='f32')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--out-dir', default=None)
    args = ap.parse_args()

    print(f'{"checkpoint":<12} {"size":>8} {"cp s":>18} {"cp+sync s":>18} {"convert s":>18} {"cp/convert":>18} '
          f'{"cp+sync/convert":>18} {"peak RSS MB":>16} {"largest MB":>10}')
    for ck in args.checkpoints:
        src = weights_file(ck)
        size = os.path.getsize(src)
        out_dir = args.out_dir or os.path.dirname(os.path.abspath(src))
        with open(src, 'rb') as f:  # warm the page cache
            while f.read(1 << 24):
                pass
        cp_t, sync_t, conv_t, rss = [], [], [], []
        for _ in range(args.rounds):
            tmp = os.path.join(out_dir, 'bench-cp.tmp')
            t, _ = run(['cp', src, tmp])
            os.unlink(tmp)
            cp_t.append(t)
            # cp, then its copy flushed to disk (sync FILE is fsync): what convert does before renaming
            t, _ = run(['sh', '-c', 'cp "$1" "$2" && sync "$2"', 'sh', src, tmp])
            os.unlink(tmp)
            sync_t.append(t)
            out = os.path.join(out_dir, 'bench-convert.mmgpt')
            t, peak = run([args.mmgpt, 'convert', ck, '-o', out, '--dtype', args.dtype])
            os.unlink(out)
            conv_t.append(t)
            rss.append(peak)
        largest = largest_tensor_mb(src)
        ratios = [c / v for c, v in zip(cp_t, conv_t)]
        sync_ratios = [c / v for c, v in zip(sync_t, conv_t)]
        name = os.path.basename(os.path.normpath(ck))
        sec = lambda v: f"{v:.2f}"  # noqa: E731
        print(f'{name:<12} {size / 1e9:>6.2f}GB {spread(cp_t, sec):>18} {spread(sync_t, sec):>18} '
              f'{spread(conv_t, sec):>18} {spread(ratios, sec):>18} {spread(sync_ratios, sec):>18} '
              f'{spread(rss, lambda v: f"{v / 1e6:.0f}"):>16} {largest:>10.0f}', flush=True)


def largest_tensor_mb(src):
    """The checkpoint's largest tensor in MB (the memory bound is that plus 256 MB); safetensors only."""
    with open(src, 'rb') as f:
        head = f.read(8)
        if len(head) < 8:
            return float('nan')
        n = struct.unpack('<Q', head)[0]
        try:
            header = json.loads(f.read(n))
        except ValueError:
            return float('nan')  # not safetensors (a torch.save file)
    sizes = [v['data_offsets'][1] - v['data_offsets'][0] for k, v in header.items() if k != '__metadata__']
    return max(sizes) / 1e6


if __name__ == '__main__':
    main()
