#!/usr/bin/env python3
"""Tables of `mmgpt bench --json` results, one per model shape, a row per dtype.

    python3 bench/dtype_table.py RESULTS_DIR

RESULTS_DIR holds SHAPE-DTYPE-ROUND.json files (bench/dtype_rounds.sh writes
them). Tokens per second are medians over every timed run of every round;
`frac of bw +KV` (decode bytes per second, weights and KV cache, over the
model file's read bandwidth measured before each run) is the median over the
rounds of each round's median, in bold below 0.90. The lines under the tables
give the limits measured in the same runs (FMA peak, file probe), so the
figures can be read without knowing the machine (docs/benchmarks.md, "What
the fractions mean"; the tables are as under "Reference figures").
"""
import collections
import glob
import json
import os
import re
import statistics
import sys

DTYPES = ['f32', 'bf16', 'f16', 'q8_0', 'q4_0']
BAR = 0.90


def frac_cell(x):
    s = '%.2f' % x
    if x < BAR and s == '%.2f' % BAR:
        s = '%.3f' % x  # 0.899 is below the bar: do not print it as 0.90
    return '**%s**' % s if x < BAR else s


def load(results_dir):
    runs = collections.defaultdict(list)  # (shape, dtype) -> [json of each round]
    for path in sorted(glob.glob(os.path.join(results_dir, '*.json'))):
        m = re.fullmatch(r'(.+)-([a-z0-9_]+)-(\d+)\.json', os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            try:
                runs[(m.group(1), m.group(2))].append(json.load(f))
            except json.JSONDecodeError as e:
                sys.exit('dtype_table.py: %s: not bench JSON (%s)' % (path, e))
    return runs


def table(shape, runs):
    rows = [(dt, runs[(shape, dt)]) for dt in DTYPES if (shape, dt) in runs]
    rows += [(dt, r) for (s, dt), r in sorted(runs.items()) if s == shape and dt not in DTYPES]
    results = [res for _, rounds in rows for d in rounds for res in d['results']]
    threads = sorted({r['threads'] for r in results})
    prompts = sorted({r['prompt_tokens'] for r in results})
    n_gen = max(r['decode_tokens'] for r in results)

    def cell(rounds, t, p, key):
        got = [r for d in rounds for r in d['results'] if r['threads'] == t and r['prompt_tokens'] == p]
        if not got:
            return None
        if key == 'frac':
            vals = [r['decode_frac_of_bw_with_kv'] for r in got if r.get('decode_frac_of_bw_with_kv') is not None]
            return statistics.median(vals) if vals else None
        vals = [v for r in got for v in r[key]['samples']]
        return statistics.median(vals) if vals else None

    def joined(vals, fmt):
        return ' / '.join('-' if v is None else fmt(v) for v in vals)

    # Decode from an empty context (-p 1) is tgN; after a prompt of P tokens, "after ppP".
    decode_labels = ['tg%d' % n_gen if p == 1 else 'after pp%d' % p for p in prompts]
    head = ['%s: dtype' % shape, 'file MB'] + ['pp%d tok/s' % p for p in prompts if p > 1]
    say = 'Threads in each cell: %s' % ' / '.join(str(t) for t in threads)
    if n_gen:
        head += [label if label.startswith('after') else label + ' tok/s' for label in decode_labels]
        head += ['frac of bw +KV, %d thread%s' % (t, '' if t == 1 else 's') for t in threads]
        say += '; the fraction columns: ' + ' / '.join(decode_labels)
    out = [say + '.', '', '| ' + ' | '.join(head) + ' |', '| --- |' + ' ---: |' * (len(head) - 1)]
    below = collections.Counter()
    total = collections.Counter()
    for dt, rounds in rows:
        size = os.path.getsize(rounds[0]['model']) / 1e6 if os.path.exists(rounds[0]['model']) else None
        line = [dt, '-' if size is None else '%.1f' % size]
        for p in prompts:
            if p > 1:
                line.append(joined([cell(rounds, t, p, 'prefill_tok_s') for t in threads], lambda v: '%.0f' % v))
        if n_gen:
            for p in prompts:
                line.append(joined([cell(rounds, t, p, 'decode_tok_s') for t in threads], lambda v: '%.0f' % v))
            for t in threads:
                fr = [cell(rounds, t, p, 'frac') for p in prompts]
                for v in fr:
                    if v is not None:
                        total[t] += 1
                        below[t] += v < BAR
                line.append(joined(fr, frac_cell))
        out.append('| ' + ' | '.join(line) + ' |')
    if n_gen:
        out.append('')
        out.append('Cells at %.2f or more: ' % BAR + ', '.join(
            '%d of %d at %d thread%s' % (total[t] - below[t], total[t], t, '' if t == 1 else 's') for t in threads) + '.')
    return out


def limits(runs):
    fma = collections.defaultdict(list)
    probe = collections.defaultdict(list)
    share, n_rounds, reps, hints = [], set(), set(), set()
    for rounds in runs.values():
        n_rounds.add(len(rounds))
        for d in rounds:
            reps.add(d['repetitions'])
            hints.add(d.get('decode_prefetch') or '?')
            if d.get('model_share_on_2mb_pages') is not None:  # null where the system does not say
                share.append(d['model_share_on_2mb_pages'])
            for t, v in d['fma_peak_gflops_by_threads'].items():
                fma[int(t)].append(v)
            for r in d['results']:
                probe[r['threads']] += r['model_read_bw_gbps']['samples']
    lines = ['Runs: %s round(s) of %s timed run(s) per cell.' % (
        '/'.join(map(str, sorted(n_rounds))), '/'.join(map(str, sorted(reps))))]
    for t in sorted(fma):
        lines.append('%d thread%s: fp32 FMA peak %.0f-%.0f GFLOP/s; file probe %.1f-%.1f GB/s (median %.1f).' % (
            t, '' if t == 1 else 's', min(fma[t]), max(fma[t]), min(probe[t]), max(probe[t]),
            statistics.median(probe[t])))
    if share:
        lines.append('Model files on 2 MB pages: %.0f-%.0f%%.' % (100 * min(share), 100 * max(share)))
    else:
        lines.append('Model files on 2 MB pages: not reported by this system.')
    lines.append('Decode prefetch: %s.' % ', '.join(sorted(hints)))
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: dtype_table.py RESULTS_DIR')
    runs = load(sys.argv[1])
    if not runs:
        sys.exit('dtype_table.py: %s: no SHAPE-DTYPE-ROUND.json files' % sys.argv[1])
    shapes = sorted({s for s, _ in runs}, key=lambda s: (len(s), s))
    for s in shapes:
        print('\n'.join(table(s, runs)))
        print()
    print('\n'.join(limits(runs)))


if __name__ == '__main__':
    main()
