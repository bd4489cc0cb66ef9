#!/usr/bin/env python3
"""mmgpt beside llama.cpp on the same models: alternated rounds of `llama-bench` and `mmgpt bench`.

    python3 bench/vs_llamacpp.py --mmgpt build/mmgpt --llama-bench LLAMA_CPP_DIR/build/bin/llama-bench \\
        --pair 135m-f32.mmgpt 135m-F32.gguf f32 --pair 135m-q8_0.mmgpt 135m-Q8_0.gguf q8_0 \\
        --rounds 2 --threads 1,2 [--json runs.json]

Each pair is an mmgpt file and its GGUF twin (bench/gguf_twin.py, then
`llama-quantize --pure` for Q8_0 / Q4_0) with a label. In every round, for
every pair and thread count T, it runs

    llama-bench -m GGUF -p 512 -n 128 -t T -r 3 -ctk f16 -ctv f16 -o json
    mmgpt bench -m FILE -p 1,512 -n 128 -t T -r 3 --kv-dtype f16 --json

one after the other, llama.cpp first in even rounds and mmgpt first in odd
ones, so a host that speeds up or slows down favours neither. Both keep the
KV cache in f16 (llama.cpp's default; --kv f32 sets both to f32). llama-bench's
pp512 is a 512-token prefill and its tg128 128 decode steps from an empty
context; mmgpt's pp512 is the prefill of its `-p 512` runs and its tg128 the
decode of its `-p 1` runs (from an almost empty context, as llama-bench's).
Before each process the model file is dropped from the page cache (`dd
iflag=nocache count=0`), as docs/benchmarks.md asks for mmgpt; the same is
done for llama.cpp's file, so both map a file read back from disk.

Per cell: the median over rounds of each run's median tok/s (llama-bench's
median of its samples), with min-max over rounds, and the ratio mmgpt /
llama.cpp of the medians (> 1: mmgpt faster) with the range of the
per-round ratios. The load average is printed at start and end: run it on
a quiet host. With a compiler on one of two vCPUs, llama.cpp's 2-thread
figures collapse (its threads spin at every op's barrier; tg128 samples of
0.4-15 tok/s were seen) while mmgpt's drop less, so such ratios say little.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def drop_cache(path):
    subprocess.run(['dd', 'if=' + path, 'iflag=nocache', 'count=0'], capture_output=True)


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit('vs_llamacpp.py: %s failed (%d): %s' % (' '.join(cmd), p.returncode, p.stderr.strip()[-2000:]))
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        sys.exit('vs_llamacpp.py: %s: output is not JSON (%s): %s' % (' '.join(cmd), e, p.stdout[:500]))


def llama_cmd(a, gguf, t):
    return [a.llama_bench, '-m', gguf, '-p', str(a.p), '-n', str(a.n), '-t', str(t), '-r', str(a.r),
            '-ctk', a.kv, '-ctv', a.kv, '-o', 'json'] + a.llama_args.split()


def mmgpt_cmd(a, model, t):
    return [a.mmgpt, 'bench', '-m', model, '-p', '1,%d' % a.p, '-n', str(a.n), '-t', str(t), '-r', str(a.r),
            '--kv-dtype', a.kv, '--json'] + a.mmgpt_args.split()


def llama_measures(res):
    out = {}
    for r in res:
        v = statistics.median(r['samples_ts'])
        if r['n_prompt'] > 0 and r['n_gen'] == 0:
            out['pp'] = v
        elif r['n_gen'] > 0 and r['n_prompt'] == 0:
            out['tg'] = v
    return out


def mmgpt_measures(res, p):
    out = {}
    for r in res['results']:
        if r['prompt_tokens'] == p and r.get('prefill_tok_s'):
            out['pp'] = r['prefill_tok_s']['median']
        if r['prompt_tokens'] == 1 and r.get('decode_tok_s'):
            out['tg'] = r['decode_tok_s']['median']
    return out


def loadavg():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--mmgpt', required=True, help='mmgpt binary')
    ap.add_argument('--llama-bench', required=True, help='llama-bench binary')
    ap.add_argument('--pair', nargs=3, action='append', required=True, metavar=('MMGPT_FILE', 'GGUF_FILE', 'LABEL'))
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--threads', default='1,2', help='comma-separated thread counts (default 1,2)')
    ap.add_argument('-p', type=int, default=512, help='prompt length (default 512)')
    ap.add_argument('-n', type=int, default=128, help='decode steps (default 128)')
    ap.add_argument('-r', type=int, default=3, help='timed runs per process (default 3)')
    ap.add_argument('--kv', choices=('f16', 'f32'), default='f16', help='KV cache type for both (default f16)')
    ap.add_argument('--llama-args', default='', metavar='ARGS', help="more llama-bench arguments, e.g. '-mmp 0'")
    ap.add_argument('--mmgpt-args', default='', metavar='ARGS', help='more mmgpt bench arguments')
    ap.add_argument('--no-drop-cache', action='store_true', help='leave the model files in the page cache')
    ap.add_argument('--json', help='write every run here')
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(',')]
    if a.rounds < 1:
        sys.exit('vs_llamacpp.py: --rounds must be at least 1')
    for m, g, _ in a.pair:
        for f in (m, g):
            if not os.path.isfile(f):
                sys.exit('vs_llamacpp.py: %s: no such file' % f)

    load_start = loadavg()
    t0 = time.time()
    vals = {}   # (label, threads, measure, side) -> [per round]
    ratios = {}  # (label, threads, measure) -> [per round]
    log = []
    for rnd in range(a.rounds):
        for mfile, gfile, label in a.pair:
            for t in threads:
                order = ('llama', 'mmgpt') if rnd % 2 == 0 else ('mmgpt', 'llama')
                got = {}
                for side in order:
                    if side == 'llama':
                        cmd = llama_cmd(a, gfile, t)
                        path = gfile
                    else:
                        cmd = mmgpt_cmd(a, mfile, t)
                        path = mfile
                    if not a.no_drop_cache:
                        drop_cache(path)
                    res = run_json(cmd)
                    got[side] = llama_measures(res) if side == 'llama' else mmgpt_measures(res, a.p)
                    log.append({'round': rnd, 'label': label, 'threads': t, 'side': side, 'cmd': cmd,
                                'loadavg': loadavg(), 'result': res})
                for m in ('pp', 'tg'):
                    for side in ('mmgpt', 'llama'):
                        vals.setdefault((label, t, m, side), []).append(got[side].get(m, float('nan')))
                    if got['llama'].get(m):
                        ratios.setdefault((label, t, m), []).append(got['mmgpt'].get(m, float('nan')) / got['llama'][m])
                print('round %d/%d: %s, %d thread(s) done (%.0f s, load %s)'
                      % (rnd + 1, a.rounds, label, t, time.time() - t0, loadavg()), file=sys.stderr)
    load_end = loadavg()

    def cell(v):
        med = statistics.median(v)
        return '%.1f (%.1f-%.1f)' % (med, min(v), max(v)) if len(v) > 1 else '%.1f' % med

    def rcell(key):
        r = ratios.get(key, [])
        if not r:
            return '-'
        med = statistics.median(r)
        return '%.2f (%.2f-%.2f)' % (med, min(r), max(r)) if len(r) > 1 else '%.2f' % med

    print('mmgpt: %s bench -m FILE -p 1,%d -n %d -t T -r %d --kv-dtype %s --json %s'
          % (a.mmgpt, a.p, a.n, a.r, a.kv, a.mmgpt_args))
    print('llama.cpp: %s -m GGUF -p %d -n %d -t T -r %d -ctk %s -ctv %s -o json %s'
          % (a.llama_bench, a.p, a.n, a.r, a.kv, a.kv, a.llama_args))
    print('%d round(s), alternated; load average at start %s, at end %s; %.0f s'
          % (a.rounds, load_start, load_end, time.time() - t0))
    print()
    print('| model | threads | pp%d mmgpt | pp%d llama.cpp | pp ratio | tg%d mmgpt | tg%d llama.cpp | tg ratio |'
          % (a.p, a.p, a.n, a.n))
    print('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for _, _, label in a.pair:
        for t in threads:
            row = [label, str(t)]
            for m in ('pp', 'tg'):
                row += [cell(vals[(label, t, m, 'mmgpt')]), cell(vals[(label, t, m, 'llama')]), rcell((label, t, m))]
            print('| ' + ' | '.join(row) + ' |')
    print()
    print('tok/s: median over rounds (min-max); ratio = mmgpt / llama.cpp (> 1: mmgpt faster), median and range '
          'of the per-round ratios.')
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'load_start': load_start, 'load_end': load_end, 'runs': log}, f)


if __name__ == '__main__':
    main()
