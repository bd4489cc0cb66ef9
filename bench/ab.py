#!/usr/bin/env python3
"""Alternated A/B runs of whole `mmgpt bench` runs: two binaries, or one
binary under two environments (a mechanism switched off by its variable).

    python3 bench/ab.py --a OLD/mmgpt --b NEW/mmgpt -m 124M-f32.mmgpt -m 124M-q4_0.mmgpt \\
        --pairs 3 -- -p 512 -n 128 -t 1,2 -r 3
    python3 bench/ab.py --a build/mmgpt --b build/mmgpt --b-env MMGPT_DECODE_PREFETCH=none -m M.mmgpt -- ...

Each pair runs A and B back to back on every model, the order alternating
from pair to pair, so a host that speeds up or slows down favours neither.
For every model, thread count and measure (prefill pp tok/s, decode tg
tok/s), a pair's ratio is B's median over A's median; the table gives the
median of the pairs' ratios with their range. A mechanism is worth keeping
when its ratio's whole range is clear of 1 by more than the spread.
--json FILE keeps every run's results.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(binary, env_pairs, model, bench_args):
    env = dict(os.environ)
    for kv in env_pairs:
        k, _, v = kv.partition('=')
        env[k] = v
    cmd = [binary, 'bench', '-m', model, '--json'] + bench_args
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f'ab.py: {" ".join(cmd)} failed: {e}')
    if p.returncode != 0:
        sys.exit(f'ab.py: {" ".join(cmd)} failed: {p.stderr.strip()}')
    return json.loads(p.stdout)


def measures(result):
    """(key, tok/s) of one bench run's results: key = (threads, batch, measure)."""
    out = {}
    for r in result['results']:
        tag = (r['threads'], r.get('batch', 1))
        p = r['prompt_tokens']
        if r.get('prefill_tok_s') and p > 1:  # a prompt of one token is the start of a decode run
            out[tag + (f"pp{p}",)] = r['prefill_tok_s']['median']
        if r.get('decode_tok_s') and r.get('decode_tokens'):
            name = f"tg{r['decode_tokens']}" + (f" after pp{p}" if p > 1 else '')
            out[tag + (name,)] = r['decode_tok_s']['median']
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--a', required=True, help='binary A (the baseline)')
    ap.add_argument('--b', required=True, help='binary B')
    ap.add_argument('--a-env', action='append', default=[], metavar='K=V', help="environment for A's runs")
    ap.add_argument('--b-env', action='append', default=[], metavar='K=V', help="environment for B's runs")
    ap.add_argument('-m', '--model', action='append', required=True, help='model file (repeat for several)')
    ap.add_argument('--pairs', type=int, default=3, help='alternated pairs of runs (default 3)')
    ap.add_argument('--json', help='write every run here')
    ap.add_argument('bench_args', nargs='*', help='after --: arguments for mmgpt bench')
    args = ap.parse_args()
    if args.pairs < 1:
        sys.exit('ab.py: --pairs must be at least 1')

    ratios = {}   # (model, key) -> [B/A per pair]
    values = {}   # (model, key) -> {'a': [...], 'b': [...]}
    log = []
    for i in range(args.pairs):
        for model in args.model:
            order = ('a', 'b') if i % 2 == 0 else ('b', 'a')
            got = {}
            for side in order:
                binary, env = (args.a, args.a_env) if side == 'a' else (args.b, args.b_env)
                res = run(binary, env, model, args.bench_args)
                log.append({'pair': i, 'side': side, 'model': model, 'result': res})
                got[side] = measures(res)
            for key in got['a']:
                if key in got['b'] and got['a'][key] > 0:
                    ratios.setdefault((model, key), []).append(got['b'][key] / got['a'][key])
                    v = values.setdefault((model, key), {'a': [], 'b': []})
                    v['a'].append(got['a'][key])
                    v['b'].append(got['b'][key])
            print(f'pair {i + 1}/{args.pairs}: {os.path.basename(model)} done', file=sys.stderr)

    print(f'A: {args.a} {" ".join(args.a_env)}'.rstrip())
    print(f'B: {args.b} {" ".join(args.b_env)}'.rstrip())
    print(f'{args.pairs} alternated pairs; bench {" ".join(args.bench_args)}')
    print()
    print('| model | threads | batch | measure | A tok/s | B tok/s | B/A median | B/A range |')
    print('| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |')
    for (model, key), rs in ratios.items():
        threads, batch, measure = key
        v = values[(model, key)]
        print(f'| {os.path.basename(model)} | {threads} | {batch} | {measure} | {statistics.median(v["a"]):.1f} | '
              f'{statistics.median(v["b"]):.1f} | {statistics.median(rs):.3f} | {min(rs):.3f}-{max(rs):.3f} |')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(log, f)


if __name__ == '__main__':
    main()
