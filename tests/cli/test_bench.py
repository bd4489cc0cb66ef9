"""`mmgpt bench`'s contract: it runs, its table and JSON are complete and sane,
and bad arguments give one-line errors. Speed itself is never asserted here
(figures depend on the machine and its load).

Run by ctest as: /usr/bin/python3 test_bench.py --mmgpt PATH --workdir DIR
Builds a tiny character-level nanoGPT checkpoint with torch and converts it.
"""
import json
import math
import platform
import os
import re
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import MM, W, check, expect_error, finish, run, system_calls, write_char_model  # noqa: E402

# --- a tiny nanoGPT-style char model: 2 layers, width 32, context 16
alphabet = sorted(set('\n !,.:;?abcdefghijklmnopqrstuvwxyz'))
V, D, L, H, CTX = len(alphabet), 32, 2, 4, 16
ckdir = os.path.join(W, 'ck')
ckpt, sd = write_char_model(ckdir, alphabet, n_embd=D, n_layer=L, n_head=H, ctx=CTX)
model = os.path.join(W, 'model.mmgpt')
rc, _, err = run('convert', ckpt, '-o', model)
if rc != 0:
    print(f'[FAIL] convert the tiny model: {err}')
    sys.exit(1)

# Small probe buffer and few runs: this checks the plumbing, not the speed.
FAST = ('--bw-mib', '32', '-r', '2')

# --- JSON: every combination, the expected fields, sane values
rc, out, err = run('bench', '-m', model, '-p', '4,8', '-n', '4', '-t', '1,2', '-b', '1,3', *FAST, '--json')
try:
    j = json.loads(out)
except ValueError as e:
    j = None
    check('--json prints one JSON document', False, f'exit {rc}, {e}, stdout {out[:300]!r}, stderr {err!r}')
if j is not None:
    check('--json exits 0 and prints JSON', rc == 0)
    check('header fields', j.get('kernel_isa') in ('avx512', 'avx2', 'neon', 'scalar') and j.get('params', 0) > 0
          and j.get('repetitions') == 2, str({k: j.get(k) for k in ('kernel_isa', 'params', 'repetitions')}))
    # Every weight once per decode step: all tensors, but one row of wpe (tied LM head: wte counted whole).
    # Matrices are stored in panels of 16 rows (the last one zero-padded), and the padding is streamed too.
    def stored(k, t):
        return -(-t.shape[0] // 16) * 16 * t.shape[1] if t.dim() == 2 and 'wpe' not in k else t.numel()
    want_bytes = 4 * (sum(stored(k, t) for k, t in sd.items() if k != 'lm_head.weight') - CTX * D + D)
    check('weight bytes per decode step count every weight once, one wpe row',
          j.get('weight_bytes_per_decode_step') == want_bytes, f"{j.get('weight_bytes_per_decode_step')} != {want_bytes}")
    bw = j.get('read_bandwidth_probe', {})
    check('bandwidth probe per thread count, positive',
          sorted(bw.get('gbps_by_threads', {})) == ['1', '2'] and all(v > 0 for v in bw['gbps_by_threads'].values())
          and bw.get('mib') == 32, str(bw))
    res = j.get('results', [])
    combos = sorted((r['threads'], r['batch'], r['prompt_tokens']) for r in res)
    check('one result per (threads, batch, prompt) combination',
          combos == sorted((t, b, p) for t in (1, 2) for b in (1, 3) for p in (4, 8)), str(combos))

    def sane_spread(s, n):
        return (isinstance(s, dict) and len(s.get('samples', [])) == n and 0 < s['min'] <= s['median'] <= s['max']
                and all(math.isfinite(x) and x > 0 for x in s['samples']))

    bad = [r for r in res if not (sane_spread(r['prefill_tok_s'], 2) and sane_spread(r['decode_tok_s'], 2)
                                  and sane_spread(r['ttft_ms'], 2) and r['decode_tokens'] == 4
                                  and 0 < r['decode_frac_of_bw'] and math.isfinite(r['decode_frac_of_bw'])
                                  and r['decode_weight_gbps'] > 0
                                  and r['read_bw_gbps'] > 0 and r['peak_rss_mib'] > 0)]
    check('throughputs positive, spreads ordered, fraction of bandwidth positive and finite', not bad, json.dumps(bad)[:600])
    # The file probe reads from memory where the CPU caches can be evicted (x86), and says so.
    evict = platform.machine() in ('x86_64', 'AMD64', 'i686')
    check('file probe from memory on x86 (caches evicted), stated per result',
          bool(res) and all(r.get('model_read_bw_from_memory') is evict for r in res),
          str([r.get('model_read_bw_from_memory') for r in res]))
    r0 = res[0] if res else {}
    # Each run's decode rate over the bandwidth probed (on the model's own mapped file) just before it; the median.
    def run_fracs(r):
        return sorted(j['weight_bytes_per_decode_step'] * 1e-9 * d / r['batch'] / bw
                      for d, bw in zip(r['decode_tok_s']['samples'], r['model_read_bw_gbps']['samples']))
    fr = run_fracs(r0) if r0 else []
    want_frac = (fr[len(fr) // 2] if len(fr) % 2 else 0.5 * (fr[len(fr) // 2 - 1] + fr[len(fr) // 2])) if fr else -1
    check('decode fraction is the median over runs of weight bytes x steps/s / that run\'s probe bandwidth',
          bool(r0) and abs(r0['decode_frac_of_bw'] - want_frac) < 1e-6 * max(1, want_frac), str(r0)[:300])
    # The KV cache a step reads: keys and values of every layer, for each position so far (the new one too).
    kv_pos = L * 2 * D * 4  # f32 cache
    check('KV bytes per position: layers x (keys, values) x width x 4 bytes',
          j.get('kv_bytes_per_position') == kv_pos, f"{j.get('kv_bytes_per_position')} != {kv_pos}")
    # Step s (0-based) of n attends over p + s + 1 positions in each of the batch's sequences.
    bad_kv = [r for r in res if abs(r['decode_kv_bytes_per_step']
                                    - r['batch'] * kv_pos * (r['prompt_tokens'] + (r['decode_tokens'] + 1) / 2)) > 1e-6]
    check('KV bytes per decode step: the mean over the steps of batch x positions attended x bytes per position',
          not bad_kv, json.dumps(bad_kv)[:600])
    def run_fracs_kv(r):
        per_run = j['weight_bytes_per_decode_step'] + r['decode_kv_bytes_per_step']
        return sorted(per_run * 1e-9 * d / r['batch'] / bw
                      for d, bw in zip(r['decode_tok_s']['samples'], r['model_read_bw_gbps']['samples']))
    fk = run_fracs_kv(r0) if r0 else []
    want_kv = (fk[len(fk) // 2] if len(fk) % 2 else 0.5 * (fk[len(fk) // 2 - 1] + fk[len(fk) // 2])) if fk else -1
    check('decode fraction with the KV cache: the same median with the KV bytes added, above the weights-only one',
          bool(r0) and abs(r0['decode_frac_of_bw_with_kv'] - want_kv) < 1e-6 * max(1, want_kv)
          and all(r['decode_frac_of_bw_with_kv'] > r['decode_frac_of_bw'] for r in res), str(r0)[:300])
    share = j.get('model_share_on_2mb_pages', 'absent')
    check('the share of the model on 2 MB pages: a fraction (Linux), or null where the kernel does not say',
          (share is None and system_calls() != 'linux') or (isinstance(share, (int, float)) and 0 <= share <= 1),
          str(share))
    check('no 2 MB page note for a model too small to fill one', '2 MB pages' not in err, err)
    check('prefill GFLOP/s and fraction of the FMA peak reported',
          all(r['prefill_gflops'] > 0 and 0 < r['prefill_frac_of_fma_peak'] < 2 for r in res)
          and all(j['fma_peak_gflops_by_threads'][str(t)] > 0 for t in (1, 2)), str(res[:1])[:300])

# --- prompt past the context: clamped with a note; decode clamped to what is left
rc, out, err = run('bench', '-m', model, '-p', '100', '-n', '8', '-t', '1', *FAST, '--json')
ok = rc == 0
if ok:
    r = json.loads(out)['results'][0]
    ok = r['prompt_tokens'] == CTX and r['decode_tokens'] == 0 and r['decode_tok_s'] is None and 'note' in err
check('-p past the context is clamped to n_ctx with a note', ok, f'exit {rc}, {out[:300]!r}, {err!r}')
rc, out, err = run('bench', '-m', model, '-p', '12', '-n', '8', '-t', '1', *FAST, '--json')
ok = rc == 0 and json.loads(out)['results'][0]['decode_tokens'] == CTX - 12 and 'note' in err
check('-n past the context after the prompt is clamped with a note', ok, f'exit {rc}, {err!r}')

# --- the markdown table
rc, out, err = run('bench', '-m', model, '-p', '8', '-n', '4', '-t', '1', *FAST)
lines = out.splitlines()
table = [ln for ln in lines if ln.startswith('|')]
check('table: header, rule, one row; names the kernels and the bandwidth',
      rc == 0 and len(table) == 3 and 'frac of bw' in table[0] and 'frac of bw +KV' in table[0] and 'pp8+tg4' in table[2]
      and 'kernels:' in out and 'GB/s' in out, f'exit {rc}, {out!r}, {err!r}')

# --- --profile: a table per op kind for the prefill and for a decode step
rc, out, err = run('bench', '-m', model, '-p', '8', '-n', '4', '-t', '2', '-b', '2', *FAST, '--profile',
                   '--trace', os.path.join(W, 'trace.json'))
prof, ops_part = {}, {}
for title in ('profile: prefill of 8 tokens, 2 threads, batch 2', 'profile: decode step, 2 threads, batch 2'):
    at = out.find(title)
    rows = []
    if at >= 0:
        head = re.search(r'ops ([0-9.]+)% of it', out[at:].splitlines()[0])
        ops_part[title] = float(head.group(1)) if head else None
        for ln in out[at:].splitlines()[3:]:
            if not ln.startswith('|'):
                break
            rows.append([c.strip() for c in ln.strip('|').split('|')])
    prof[title] = rows
KINDS = {'step set-up', 'embed', 'layernorm', 'matmul f32', 'attention', 'select_rows'}
check('--profile: a prefill and a decode-step table with every op kind of the graph and the set-up',
      rc == 0 and all({r[0] for r in rows} == KINDS for rows in prof.values()), f'exit {rc}, {out!r}, {err!r}')
# The ops' part of a step is timing (a tiny model's step is mostly fixed costs on a
# loaded host), so the check is that the rows add up to the part the title states.
shares = {t: sum(float(r[3].rstrip('%')) for r in rows) for t, rows in prof.items()}
rated = [r for rows in prof.values() for r in rows if r[0] != 'step set-up']
check('--profile: shares add up to the ops\' part of the step; each op kind read against its limit',
      all(ops_part.get(t) is not None and 0 < x <= 100.5 and abs(x - ops_part[t]) <= 0.05 * len(prof[t]) + 0.05
          for t, x in shares.items())
      and all(float(r[7]) >= 0 and r[6] in ('fp32 FMA peak', 'read bandwidth') for r in rated)
      and all(float(r[7]) > 0 for r in rated if r[0] == 'matmul f32'), f'{shares}, {prof}')

# --- --trace: Chrome trace-event JSON of the first combination's prefill and decode steps
try:
    with open(os.path.join(W, 'trace.json')) as f:
        trace = json.load(f)
except (OSError, ValueError) as e:
    trace = None
    check('--trace writes a JSON file', False, str(e))
if trace is not None:
    ev = trace.get('traceEvents', [])
    spans = [e for e in ev if e.get('ph') == 'X']
    check('--trace: complete events with name, pid, tid, ts and dur',
          spans and all(isinstance(e.get('name'), str) and e.get('pid') == 1 and isinstance(e.get('tid'), int)
                        and e['ts'] >= 0 and e['dur'] >= 0 for e in spans), str(spans[:3]))
    steps = [e for e in spans if e.get('cat') == 'step']
    # Each step: its set-up (checks, buffer plan), then the ops, on track 0.
    check('--trace: the prefill and the 4 decode steps on track 0, each with its set-up',
          [e['name'] for e in steps] == ['prefill 8 tokens x 2'] + [f'decode step {i}' for i in range(1, 5)]
          and all(e['tid'] == 0 for e in steps)
          and len([e for e in spans if e.get('cat') == 'set-up' and e['tid'] == 0]) == len(steps), str(steps))
    # The ops of each step lie within it and cover its wall time (the gaps are the loop between them). A
    # step of a tiny model takes tens of microseconds, so a preemption between two ops (the machine is busy
    # with other tests) could open a gap: the trace gets three tries.
    def coverage(spans):
        out = []
        for st in [e for e in spans if e.get('cat') == 'step']:
            ops = [e for e in spans
                   if e['tid'] == 0 and e.get('cat') != 'step' and st['ts'] <= e['ts'] <= st['ts'] + st['dur']]
            inside = all(e['ts'] + e['dur'] <= st['ts'] + st['dur'] + 1e-3 for e in ops)
            out.append((st['name'], len(ops), inside, sum(e['dur'] for e in ops), st['dur']))
        return out
    def covered(cov):
        return bool(cov) and all(n > 10 and inside and c >= 0.8 * d for _, n, inside, c, d in cov)
    cov = coverage(spans)
    for _ in range(2):
        if covered(cov):
            break
        run('bench', '-m', model, '-p', '8', '-n', '4', '-t', '2', '-b', '2', *FAST,
            '--trace', os.path.join(W, 't2.json'))
        with open(os.path.join(W, 't2.json')) as f:
            cov = coverage([e for e in json.load(f)['traceEvents'] if e.get('ph') == 'X'])
    check('--trace: every step\'s set-up and ops lie within it and cover its wall time', covered(cov), str(cov))
    names = {e['tid']: e['args']['name'] for e in ev if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
    tasks = [e for e in spans if e.get('cat') == 'task']
    end = max(e['ts'] + e['dur'] for e in steps) if steps else 0
    check('--trace: a named track per thread; tasks on the thread tracks, within the steps',
          names.get(0) == 'steps and ops' and len(names) >= 2 and tasks
          and all(e['tid'] in names and e['tid'] > 0 and e['ts'] + e['dur'] <= end + 1e-3 for e in tasks),
          f'{names}, {len(tasks)} tasks')

# --- --profile with --json: the JSON stays the whole of stdout, the tables go to stderr
rc, out, err = run('bench', '-m', model, '-p', '8', '-n', '2', '-t', '1', *FAST, '--json', '--profile')
try:
    ok = rc == 0 and json.loads(out)['results'] and 'profile: decode step' in err
except ValueError:
    ok = False
check('--profile --json: JSON on stdout, the profile on stderr', ok, f'exit {rc}, {out[:200]!r}, {err[:300]!r}')

# --- bad arguments: one line each, before any work
for name, argv, mention in [
        ('no model', ['bench', '-p', '8'], '--model'),
        ('missing model file', ['bench', '-m', os.path.join(W, 'nope.mmgpt'), *FAST], 'nope.mmgpt'),
        ('-p 0', ['bench', '-m', model, '-p', '0'], '-p'),
        ('-p not a number', ['bench', '-m', model, '-p', '8,x'], '-p'),
        ('-t 0', ['bench', '-m', model, '-t', '0'], '-t'),
        ('-b 0', ['bench', '-m', model, '-b', '0'], '-b'),
        ('-r 0', ['bench', '-m', model, '-r', '0'], '-r'),
        ('-n negative', ['bench', '-m', model, '-n', '-1'], '-n'),
        ('--bw-mib too small', ['bench', '-m', model, '--bw-mib', '1'], '--bw-mib'),
        ('--trace into a missing directory', ['bench', '-m', model, *FAST, '--trace',
                                              os.path.join(W, 'no', 'such', 't.json')], '--trace'),
        ('--trace a directory', ['bench', '-m', model, *FAST, '--trace', W], '--trace')]:
    expect_error('bench: ' + name, *argv, mentions=(mention,))

finish()
