#!/usr/bin/env python3
"""Memory of several `mmgpt serve` replicas of one model file on one host.

Starts replica A, sends it a completion (so every weight has been read) and
reads /proc/PID/smaps_rollup; then starts replica B on the same file, does the
same, and reads both again. The model file is mapped read-only, so the
replicas share its page-cache pages: B's own memory (Private_Dirty,
Anonymous: heap, KV caches, buffers) stays small next to the file, and Pss
splits the file's pages between the two. The rows "model mapping" sum the
mappings of the file alone (/proc/PID/smaps).

    python3 bench/replica_memory.py --mmgpt build/mmgpt --model gpt2-124M.mmgpt
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile

FIELDS = ['Rss', 'Pss', 'Shared_Clean', 'Private_Clean', 'Private_Dirty', 'Anonymous']


def rollup(pid):
    """The kB fields of /proc/PID/smaps_rollup (the whole process)."""
    out = {}
    with open(f'/proc/{pid}/smaps_rollup') as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == 'kB':
                out[parts[0].rstrip(':')] = int(parts[1])
    return out


def mapping(pid, path):
    """The kB fields of the mappings of path in /proc/PID/smaps, summed."""
    out, inside = {}, False
    target = os.path.realpath(path)
    with open(f'/proc/{pid}/smaps') as f:
        for line in f:
            parts = line.split()
            if parts and '-' in parts[0] and len(parts) >= 5 and not parts[0].endswith(':'):
                inside = len(parts) >= 6 and parts[5] == target
            elif inside and len(parts) == 3 and parts[2] == 'kB':
                key = parts[0].rstrip(':')
                out[key] = out.get(key, 0) + int(parts[1])
    return out


def others_mapping(path, ours):
    """Other processes that map path: they share its pages too, and take their part of Pss."""
    target, pids = os.path.realpath(path), []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        if int(pid) in ours:
            continue
        try:
            with open(f'/proc/{pid}/maps') as f:
                if any(line.rstrip('\n').endswith(' ' + target) for line in f):
                    pids.append(int(pid))
        except OSError:  # gone, or not ours to read
            pass
    return pids


class Replica:
    def __init__(self, args, name):
        self.name = name
        argv = [args.mmgpt, 'serve', '-m', args.model, '--port', '0', '--threads', str(args.threads)]
        if args.parallel:
            argv += ['--parallel', str(args.parallel)]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        self.ready = self.proc.stdout.readline().decode().strip()
        if 'listening on http://' not in self.ready:
            self.proc.kill()
            sys.exit(f'mmgpt serve did not start: {self.ready!r}')
        self.port = int(self.ready.split('http://')[1].split()[0].rsplit(':', 1)[1])

    def post(self, body):
        c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=600)
        c.request('POST', '/v1/completions', json.dumps(body))
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def complete(self, tokens):
        body = {'prompt': 'The quick brown fox jumps over the lazy dog', 'max_tokens': tokens, 'temperature': 0}
        status, data = self.post(body)
        if status == 400 and b'no tokenizer' in data:  # a model without one: token ids
            status, data = self.post({**body, 'prompt': list(range(1, 17))})
        if status != 200:
            sys.exit(f'replica {self.name}: completion failed: {status} {data[:200]!r}')

    def check_alive(self):
        if self.proc.poll() is not None:
            self.log.seek(0)
            tail = self.log.read().decode('utf-8', 'replace').splitlines()[-5:]
            sys.exit(f'replica {self.name} ended with status {self.proc.returncode}: ' + ' | '.join(tail))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--mmgpt', required=True, help='the mmgpt binary')
    ap.add_argument('--model', required=True, help='the .mmgpt file both replicas serve')
    ap.add_argument('--threads', type=int, default=1, help='--threads of each replica (default 1)')
    ap.add_argument('--parallel', type=int, default=0, help="--parallel of each replica (default: the server's)")
    ap.add_argument('--tokens', type=int, default=16, help='max_tokens of the completion each replica runs')
    args = ap.parse_args()
    if not os.path.exists('/proc/self/smaps_rollup'):
        sys.exit('this needs Linux 4.14 or later (/proc/PID/smaps_rollup)')

    rows, ours, others = [], set(), []

    def measure(label, r):
        r.check_alive()
        rows.append((label, rollup(r.proc.pid), mapping(r.proc.pid, args.model)))
        others.extend(p for p in others_mapping(args.model, ours) if p not in others)

    a = Replica(args, 'A')
    ours.add(a.proc.pid)
    try:
        a.complete(args.tokens)
        measure('A alone', a)
        b = Replica(args, 'B')
        ours.add(b.proc.pid)
        try:
            b.complete(args.tokens)
            a.complete(args.tokens)
            measure('A, B running', a)
            measure('B', b)
        finally:
            rc_b = b.stop()
    finally:
        rc_a = a.stop()

    mib = lambda kb: f'{kb / 1024:.1f}'
    print(f'model {args.model}: {os.path.getsize(args.model) / 2**20:.1f} MiB; replicas: {a.ready.split("(")[1][:-1]}, '
          f'--threads {args.threads}; MiB')
    head = ['process', 'what'] + FIELDS
    table = [head, ['---'] * len(head)]
    for label, whole, model in rows:
        table.append([label, 'whole process'] + [mib(whole.get(f, 0)) for f in FIELDS])
        table.append(['', 'model mapping'] + [mib(model.get(f, 0)) for f in FIELDS])
    for row in table:
        print('| ' + ' | '.join(row) + ' |')
    b_whole, b_model = rows[2][1], rows[2][2]
    print(f"B's own memory: Private_Dirty {mib(b_whole.get('Private_Dirty', 0))} MiB, "
          f"Anonymous {mib(b_whole.get('Anonymous', 0))} MiB (largely the same pages); "
          f"of the model file B maps {mib(b_model.get('Rss', 0))} MiB, "
          f"{mib(b_model.get('Shared_Clean', 0))} MiB of it shared, its Pss {mib(b_model.get('Pss', 0))} MiB")
    if others:
        print(f'note: other processes ({", ".join(map(str, others))}) mapped the file too: '
              'the Pss figures are shared with them')
    if rc_a != 0 or rc_b != 0:
        sys.exit(f'the replicas exited with {rc_a} and {rc_b}, not 0')


if __name__ == '__main__':
    main()
