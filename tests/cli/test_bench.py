"""`mmgpt bench`'s contract: it runs, its table and JSON are complete and sane,
and bad arguments give one-line errors. Speed itself is never asserted here
(figures depend on the machine and its load).

Run by ctest as: /usr/bin/python3 test_bench.py --mmgpt PATH --shared DIR --workdir DIR
Builds a tiny character-level nanoGPT checkpoint with torch and converts it.
"""
import argparse
import json
import math
import os
import pickle
import shutil
import subprocess
import sys

import torch

parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--shared')
parser.add_argument('--workdir', required=True)
args = parser.parse_args()
MM = args.mmgpt
W = args.workdir
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)

passed, failed = 0, 0


def check(name, ok, detail=''):
    global passed, failed
    if ok:
        passed += 1
        print(f'[PASS] {name}')
    else:
        failed += 1
        print(f'[FAIL] {name}: {detail}')


def run(*argv, timeout=300):
    p = subprocess.run([MM, *argv], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace')


def expect_error(name, *argv, mentions=()):
    rc, out, err = run(*argv)
    lines = err.splitlines()
    ok = rc != 0 and rc < 128 and len(lines) == 1 and lines[0].startswith('mmgpt: error: ')
    ok = ok and all(m in err for m in mentions)
    check(name, ok, f'exit {rc}, stderr {err!r}')


# --- a tiny nanoGPT-style char model: 2 layers, width 32, context 16
alphabet = sorted(set('\n !,.:;?abcdefghijklmnopqrstuvwxyz'))
V, D, L, H, CTX = len(alphabet), 32, 2, 4, 16
g = torch.Generator().manual_seed(0)
sd = {'transformer.wte.weight': torch.randn(V, D, generator=g) * 0.3,
      'transformer.wpe.weight': torch.randn(CTX, D, generator=g) * 0.3}
for i in range(L):
    p = f'transformer.h.{i}.'
    for name, shape in [('ln_1.weight', (D,)), ('ln_1.bias', (D,)), ('attn.c_attn.weight', (3 * D, D)),
                        ('attn.c_attn.bias', (3 * D,)), ('attn.c_proj.weight', (D, D)), ('attn.c_proj.bias', (D,)),
                        ('ln_2.weight', (D,)), ('ln_2.bias', (D,)), ('mlp.c_fc.weight', (4 * D, D)),
                        ('mlp.c_fc.bias', (4 * D,)), ('mlp.c_proj.weight', (D, 4 * D)), ('mlp.c_proj.bias', (D,))]:
        sd[p + name] = torch.randn(*shape, generator=g) * 0.3
sd['transformer.ln_f.weight'] = torch.ones(D)
sd['transformer.ln_f.bias'] = torch.zeros(D)
sd['lm_head.weight'] = sd['transformer.wte.weight']
ckdir = os.path.join(W, 'ck')
os.makedirs(ckdir)
ckpt = os.path.join(ckdir, 'ckpt.pt')
torch.save({'model': sd, 'model_args': dict(n_layer=L, n_head=H, n_embd=D, block_size=CTX, bias=True,
                                            vocab_size=V, dropout=0.0), 'iter_num': 0}, ckpt)
with open(os.path.join(ckdir, 'meta.pkl'), 'wb') as f:
    pickle.dump({'vocab_size': V, 'itos': dict(enumerate(alphabet)), 'stoi': {c: i for i, c in enumerate(alphabet)}}, f)
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
    want_bytes = 4 * (sum(t.numel() for k, t in sd.items() if k != 'lm_head.weight') - CTX * D + D)
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
                                  and 0 < r['decode_frac_of_bw'] < 2 and r['decode_weight_gbps'] > 0
                                  and r['read_bw_gbps'] > 0 and r['peak_rss_mib'] > 0)]
    check('throughputs positive, spreads ordered, fraction of bandwidth in (0, 2)', not bad, json.dumps(bad)[:600])
    r0 = res[0] if res else {}
    check('decode fraction is weight bytes x steps/s / probe bandwidth',
          bool(r0) and abs(r0['decode_frac_of_bw'] - j['weight_bytes_per_decode_step'] * 1e-9 *
                           r0['decode_tok_s']['median'] / r0['batch'] / r0['read_bw_gbps']) < 1e-6 * max(1, r0['decode_frac_of_bw']),
          str(r0)[:300])

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
      rc == 0 and len(table) == 3 and 'frac of bw' in table[0] and 'pp8+tg4' in table[2]
      and 'kernels:' in out and 'GB/s' in out, f'exit {rc}, {out!r}, {err!r}')

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
        ('--bw-mib too small', ['bench', '-m', model, '--bw-mib', '1'], '--bw-mib')]:
    expect_error('bench: ' + name, *argv, mentions=(mention,))

print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
