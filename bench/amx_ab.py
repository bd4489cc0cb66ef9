#!/usr/bin/env python3
"""AMX tiles against the vector kernels: alternated `mmgpt bench` runs.

    python3 bench/amx_ab.py [--mmgpt build/mmgpt] [--models DIR] [--pairs 3] [--json OUT.json]
    python3 bench/amx_ab.py --dry-run          # print the commands, run nothing (any host)

GPT-2 124M and 355M shapes (random weights: bench/gpt2_shaped.py, then
`mmgpt convert --dtype`; files in --models are reused; `--shapes
smollm2-135m` and the other shapes of bench/llama_shaped.py give the modern
block) in f32, bf16, q8_0
and q4_0, at 1 and 2 threads, for a 512-token prefill (pp512, batch 1) and
a batch-16 decode (16 sequences, 1 prompt token each, tg32). Each model runs
under every variant of its dtype:

    f32   default                          the baseline of the bf16 goal
    bf16  MMGPT_AMX=1                      TDPBF16PS tiles
          MMGPT_AMX=0                      the vector bf16 kernels
          MMGPT_BF16DOT=0                  bf16 widened to the f32 kernels
    q8_0, q4_0  MMGPT_AMX=1 / MMGPT_AMX=0  TDPBSSD tiles / VNNI

A pair runs every variant of a shape once, in reverse order on every other
pair (bench/ab.py's alternation), so a host that speeds up or slows down
favours none. Reported: each variant's tok/s, the median [min, max] over the
pairs of each run's median, the kernels the run reports, and the ratios
(each pair's own) against the goals: bf16 pp512 on tiles >= 4x f32 pp512,
q8_0 pp512 on tiles >= 2.5x q8_0 on VNNI. `mmgpt --version` is recorded.
Without AMX tiles (no amx_tile in /proc/cpuinfo) it says so and exits 0.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab import measures, run  # noqa: E402
from gpt2_shaped import SHAPES  # noqa: E402
from llama_shaped import SHAPES as LLAMA_SHAPES  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = {  # dtype: [(variant, environment)]
    'f32': [('default', [])],
    'bf16': [('amx', ['MMGPT_AMX=1']), ('vector', ['MMGPT_AMX=0']), ('widened', ['MMGPT_BF16DOT=0'])],
    'q8_0': [('amx', ['MMGPT_AMX=1']), ('vnni', ['MMGPT_AMX=0'])],
    'q4_0': [('amx', ['MMGPT_AMX=1']), ('vnni', ['MMGPT_AMX=0'])],
}
# (name, numerator (dtype, variant), denominator, goal or None), per shape, threads and measure
RATIOS = [('bf16 amx / f32', ('bf16', 'amx'), ('f32', 'default'), 4.0),
          ('bf16 amx / bf16 vector', ('bf16', 'amx'), ('bf16', 'vector'), None),
          ('bf16 amx / bf16 widened', ('bf16', 'amx'), ('bf16', 'widened'), None),
          ('q8_0 amx / q8_0 vnni', ('q8_0', 'amx'), ('q8_0', 'vnni'), 2.5),
          ('q4_0 amx / q4_0 vnni', ('q4_0', 'amx'), ('q4_0', 'vnni'), None)]
GOAL_MEASURE = 'pp512'  # the goals are for the prefill


def cpu_amx_flags():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('flags'):
                    return {x for x in line.split(':', 1)[1].split() if x.startswith('amx')}
    except OSError:
        pass
    return set()


def spread(v):
    return f'{statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]'


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--mmgpt', default=os.path.join(HERE, '..', 'build', 'mmgpt'))
    ap.add_argument('--models', default='/tmp/mmgpt-amx-ab', help='where the models are written or found')
    ap.add_argument('--shapes', default='124M,355M',
                    help='GPT-2 sizes or LAYERSxHEADSxWIDTH, or a modern-block shape of bench/llama_shaped.py '
                         '(smollm2-135m, ...) (default 124M,355M)')
    ap.add_argument('--dtypes', default='f32,bf16,q8_0,q4_0')
    ap.add_argument('--threads', default='1,2')
    ap.add_argument('--pairs', type=int, default=3, help='alternated pairs (default 3)')
    ap.add_argument('-r', '--repetitions', type=int, default=3, help="mmgpt bench's -r (default 3)")
    ap.add_argument('--json', help='write the version, every run and the summary here')
    ap.add_argument('--dry-run', action='store_true', help='print the commands, run nothing')
    a = ap.parse_args()
    shapes, dtypes = a.shapes.split(','), a.dtypes.split(',')
    for s in shapes:
        if s not in SHAPES and s not in LLAMA_SHAPES and not re.fullmatch(r'\d+x\d+x\d+', s):
            ap.error(f'--shapes: {s} is not one of {", ".join(list(SHAPES) + list(LLAMA_SHAPES))} '
                     'nor LAYERSxHEADSxWIDTH')
    for d in dtypes:
        if d not in VARIANTS:
            ap.error(f'--dtypes: {d} is not one of {", ".join(VARIANTS)}')
    if a.pairs < 1 or a.repetitions < 1:
        ap.error('--pairs and -r must be at least 1')

    amx = cpu_amx_flags()
    if 'amx_tile' not in amx:
        msg = 'amx_ab.py: this CPU has no AMX tiles (grep amx_tile /proc/cpuinfo); nothing to measure'
        if not a.dry_run:
            print(msg)
            return
        print(f'# {msg} (--dry-run: the commands an AMX host would run)')
    benches = [['-p', '512', '-n', '0', '-b', '1'], ['-p', '1', '-n', '32', '-b', '16']]
    common = ['-t', a.threads, '-r', str(a.repetitions)]
    models = {(s, d): os.path.join(a.models, f'{s}-{d}.mmgpt') for s in shapes for d in dtypes}

    def show(cmd, env=()):
        print(' '.join(list(env) + [shlex.quote(c) for c in cmd]))

    # The models (an existing file is reused): a Hugging Face directory per shape, converted.
    for s in shapes:
        hf = os.path.join(a.models, f'hf-{s}')
        todo = [d for d in dtypes if not os.path.exists(models[(s, d)])]
        if not todo:
            continue
        writer = 'llama_shaped.py' if s in LLAMA_SHAPES else 'gpt2_shaped.py'
        steps = [[sys.executable, os.path.join(HERE, writer), s, hf]]
        steps += [[a.mmgpt, 'convert', hf, '-o', models[(s, d)], '--dtype', d] for d in todo]
        if a.dry_run:
            for cmd in steps:
                show(cmd)
            continue
        os.makedirs(a.models, exist_ok=True)
        shutil.rmtree(hf, ignore_errors=True)  # a directory left by an interrupted call
        for cmd in steps:
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f'amx_ab.py: {" ".join(cmd)} failed: {p.stderr.strip()}')
        shutil.rmtree(hf)

    if a.dry_run:
        show([a.mmgpt, '--version'])
    else:
        p = subprocess.run([a.mmgpt, '--version'], capture_output=True, text=True)
        version = (p.stdout + p.stderr).strip()
        print(f'{a.mmgpt} --version:\n{version}\nCPU flags: {" ".join(sorted(amx))}\n')

    runs = [(s, d, v, env) for s in shapes for d in dtypes for v, env in VARIANTS[d]]
    got = {}  # (shape, dtype, variant) -> [per pair: {(threads, batch, measure): tok/s}]
    kernels = {}  # (shape, dtype, variant) -> kernels the runs reported
    log = []
    for i in range(a.pairs):
        for s, d, v, env in (runs if i % 2 == 0 else runs[::-1]):
            m = {}
            for bench in benches:
                args = bench + common
                if a.dry_run:
                    show([a.mmgpt, 'bench', '-m', models[(s, d)], '--json'] + args, env)
                    continue
                res = run(a.mmgpt, env, models[(s, d)], args)
                log.append({'pair': i, 'shape': s, 'dtype': d, 'variant': v, 'env': env, 'result': res})
                kernels[(s, d, v)] = f"quantized {res.get('quant_kernel_isa')}, bf16 {res.get('bf16_kernel_isa')}"
                m.update(measures(res))
            got.setdefault((s, d, v), []).append(m)
        if not a.dry_run:
            print(f'pair {i + 1}/{a.pairs} done', file=sys.stderr)
    if a.dry_run:
        return

    print(f'{a.pairs} alternated pairs; mmgpt bench {" ".join(common)} with '
          + ' and '.join(' '.join(b) for b in benches) + '; tok/s: median [min, max] over the pairs\n')
    print('| shape | dtype | variant | kernels | threads | batch | measure | tok/s |')
    print('| --- | --- | --- | --- | ---: | ---: | --- | ---: |')
    for (s, d, v), pairs in got.items():
        for key in pairs[0]:
            t, b, meas = key
            vals = [p[key] for p in pairs if key in p]
            print(f'| {s} | {d} | {v} | {kernels[(s, d, v)]} | {t} | {b} | {meas} | {spread(vals)} |')
    for (s, d, v), k in kernels.items():
        if v == 'amx' and ('bf16 amx-bf16' if d == 'bf16' else 'quantized amx-int8') not in k:
            print(f'\nnote: {s} {d} with MMGPT_AMX=1 ran on "{k}", not on tiles: this mmgpt has no AMX kernels '
                  'for it (see `mmgpt --version`), so its ratios compare the vector kernels with themselves')
    print('\n| shape | threads | batch | measure | ratio | median [min, max] | goal |')
    print('| --- | ---: | ---: | --- | --- | ---: | --- |')
    summary = []
    for s in shapes:
        for name, num, den, goal in RATIOS:
            if (s,) + num not in got or (s,) + den not in got:
                continue
            a_runs, b_runs = got[(s,) + num], got[(s,) + den]
            for key in a_runs[0]:
                rs = [x[key] / y[key] for x, y in zip(a_runs, b_runs) if key in x and y.get(key)]
                if not rs:
                    continue
                g = goal if key[2] == GOAL_MEASURE else None
                verdict = '-' if g is None else f'>= {g}: ' + ('met' if statistics.median(rs) >= g else 'NOT met')
                print(f'| {s} | {key[0]} | {key[1]} | {key[2]} | {name} | {spread(rs)} | {verdict} |')
                summary.append({'shape': s, 'threads': key[0], 'batch': key[1], 'measure': key[2], 'ratio': name,
                                'per_pair': rs, 'goal': g})
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'version': version, 'cpu_amx_flags': sorted(amx), 'runs': log, 'ratios': summary}, f)


if __name__ == '__main__':
    main()
