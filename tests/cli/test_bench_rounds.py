"""The speed-table tools in bench/: gpt2_shaped.py writes a Hugging Face GPT-2
directory that the reference model loads and `mmgpt convert` reads,
dtype_rounds.sh benches every file of every round, and dtype_table.py
tabulates the JSON. Speed itself is never asserted (bench/ reports it).

Run by ctest as: /usr/bin/python3 test_bench_rounds.py --mmgpt PATH --workdir DIR
"""
import glob
import importlib.util
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import MM, W, check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'reference'))
import mmgpt_ref as ref  # noqa: E402

BENCH = os.path.join(ROOT, 'bench')
PY = sys.executable


def sh(*argv, timeout=600):
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# --- gpt2_shaped.py: a directory the reference GPT-2 loads, strictly
L, H, E = 2, 3, 48
hf = os.path.join(W, 'hf')
rc, out, err = sh(PY, os.path.join(BENCH, 'gpt2_shaped.py'), '%dx%dx%d' % (L, H, E), hf)
check('gpt2_shaped.py writes the directory', rc == 0 and 'model.safetensors' in os.listdir(hf)
      and not glob.glob(os.path.join(hf, '*.partial')), err)
cfg = json.load(open(os.path.join(hf, 'config.json')))
check('config.json has the shape', (cfg['n_layer'], cfg['n_head'], cfg['n_embd'], cfg['vocab_size'])
      == (L, H, E, 50257), str(cfg))
# The fields of a real save_pretrained (data/models/tiny-gpt2-hf), the shape apart.
want_cfg = json.load(open(os.path.join(ROOT, 'data', 'models', 'tiny-gpt2-hf', 'config.json')))
want_cfg.update(n_layer=L, n_head=H, n_embd=E)
check("config.json: a real save_pretrained's fields and values, the shape apart", cfg == want_cfg,
      str({k: (cfg.get(k), want_cfg.get(k)) for k in set(cfg) | set(want_cfg) if cfg.get(k) != want_cfg.get(k)}))
for name, data in (('vocab.json', 'encoder.json'), ('merges.txt', 'vocab.bpe')):
    with open(os.path.join(hf, name), 'rb') as a, open(os.path.join(ROOT, 'data', 'gpt2', data), 'rb') as b:
        check(f'{name} is data/gpt2/{data}', a.read() == b.read())
sd = ref.read_safetensors(os.path.join(hf, 'model.safetensors'))
model = ref.HFGPT2LMHeadModel({'vocab_size': 50257, 'n_positions': 1024, 'n_embd': E, 'n_layer': L, 'n_head': H,
                               'layer_norm_epsilon': 1e-5})
want = ref.hf_state_dict(model, with_buffers=False)
want = {k: v for k, v in want.items() if k != 'lm_head.weight'}  # tied: Hugging Face leaves it out
check('the same tensor names as save_pretrained', sorted(sd) == sorted(want),
      str(sorted(set(sd) ^ set(want))))
check('the same shapes', all(sd[k].shape == want[k].shape for k in want if k in sd))
check('float32 throughout', all(t.dtype == torch.float32 for t in sd.values()))
ln_w = [t for k, t in sd.items() if ('ln_' in k) and k.endswith('weight')]
biases = [t for k, t in sd.items() if k.endswith('bias')]
check('LayerNorm weights 1, biases 0', all(bool((t == 1).all()) for t in ln_w) and all(bool((t == 0).all()) for t in biases))
mats = [t for k, t in sd.items() if t.dim() == 2]
allw = torch.cat([t.flatten() for t in mats])
check('matrices and embeddings N(0, 0.02)', abs(allw.mean().item()) < 1e-3 and abs(allw.std().item() - 0.02) < 1e-3,
      f'mean {allw.mean().item()} std {allw.std().item()}')
check('tensors start at different offsets of the block of normals',
      len({tuple(t.flatten()[:4].tolist()) for t in mats}) == len(mats))
missing = model.load_state_dict({**sd, 'lm_head.weight': sd['transformer.wte.weight']}, strict=False)
check('the reference model loads it', not missing.unexpected_keys
      and all(k.endswith('attn.bias') or k.endswith('masked_bias') for k in missing.missing_keys), str(missing))

rc, _, err = sh(PY, os.path.join(BENCH, 'gpt2_shaped.py'), '2x2x64', hf)
check('gpt2_shaped.py refuses a directory that is not empty', rc != 0 and 'not empty' in err, err)
rc, _, err = sh(PY, os.path.join(BENCH, 'gpt2_shaped.py'), '2x3x64', os.path.join(W, 'bad'))
check('gpt2_shaped.py refuses a width that heads do not divide', rc != 0 and 'multiple of heads' in err, err)
rc, _, err = sh(PY, os.path.join(BENCH, 'gpt2_shaped.py'), '7B', os.path.join(W, 'bad'))
check('gpt2_shaped.py refuses an unknown shape', rc != 0 and "'7B'" in err, err)

# The converted file computes what the reference computes from the same directory.
mfile = os.path.join(W, 'direct.mmgpt')
rc, _, err = sh(MM, 'convert', hf, '-o', mfile)
ids = [464, 2068, 7586, 21831, 18045, 625, 262]
ok = rc == 0
if ok:
    got = ref.mmgpt_logits(MM, mfile, ids, os.path.join(W, 'logits.f32'), 50257)
    with torch.no_grad():
        wantl = ref.ref_logits(model.eval(), ids)
    err = (torch.as_tensor(got) - wantl).abs().max().item()
    ok = err < 1e-4
check('mmgpt convert of it: logits as the reference model', ok, f'max error {err}')

# --- dtype_rounds.sh: every file of every round, models reused by a second call
out = os.path.join(W, 'rounds')
FAST = ['--', '-p', '1,4', '-n', '2', '-t', '1', '-r', '2', '--bw-mib', '16']
args = ['bash', os.path.join(BENCH, 'dtype_rounds.sh'), '-m', MM, '-s', '2x2x32', '-d', 'f32 q4_0', '-r', '2', out]
rc, _, err = sh(*args, *FAST)
files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, '*')))
check('dtype_rounds.sh benches each dtype in each round',
      rc == 0 and files == ['2x2x32-f32-1.json', '2x2x32-f32-2.json', '2x2x32-q4_0-1.json', '2x2x32-q4_0-2.json',
                            'models'], f'rc {rc} files {files} {err[-500:]}')
models = sorted(os.listdir(os.path.join(out, 'models')))
check('its models: one file per dtype, the Hugging Face directory gone',
      models == ['2x2x32-f32.mmgpt', '2x2x32-q4_0.mmgpt'], str(models))
j = json.load(open(os.path.join(out, '2x2x32-q4_0-1.json')))
check('the bench arguments reach mmgpt bench', j['repetitions'] == 2
      and sorted(r['prompt_tokens'] for r in j['results']) == [1, 4]
      and all(r['decode_tokens'] == 2 and r['threads'] == 1 for r in j['results']), json.dumps(j)[:300])
mtimes = {m: os.stat(os.path.join(out, 'models', m)).st_mtime_ns for m in models}
rc, _, err = sh(*args[:-1], '-w', os.path.join(out, 'models'), os.path.join(W, 'rounds2'), *FAST)
check('a second call with -w benches the same files', rc == 0 and mtimes == {
    m: os.stat(os.path.join(out, 'models', m)).st_mtime_ns for m in models}
    and len(glob.glob(os.path.join(W, 'rounds2', '*.json'))) == 4, err[-500:])
rc, _, err = sh('bash', os.path.join(BENCH, 'dtype_rounds.sh'))
check('dtype_rounds.sh without OUT_DIR prints its usage', rc == 2 and 'OUT_DIR' in err, err)
rc, _, err = sh('bash', os.path.join(BENCH, 'dtype_rounds.sh'), '-r', 'x', os.path.join(W, 'r3'))
check('dtype_rounds.sh refuses a bad round count', rc == 2 and '-r x' in err, err)
rc, _, err = sh('bash', os.path.join(BENCH, 'dtype_rounds.sh'), '-m', os.path.join(W, 'none'), os.path.join(W, 'r4'))
check('dtype_rounds.sh names a missing binary', rc == 1 and 'no mmgpt binary' in err, err)
rc, _, err = sh('bash', os.path.join(BENCH, 'dtype_rounds.sh'), '-m', MM, '-s', '2x2x32', '-d', 'f8', '-w',
                os.path.join(W, 'm5'), os.path.join(W, 'r5'), *FAST)
check('dtype_rounds.sh stops on a convert error and shows it', rc != 0 and 'f8' in err
      and not glob.glob(os.path.join(W, 'm5', '*.mmgpt')), err[-300:])

# --- dtype_table.py: the table of those rounds
spec = importlib.util.spec_from_file_location('dtype_table', os.path.join(BENCH, 'dtype_table.py'))
dt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dt)
check('below 0.90 in bold, never printed as 0.90', [dt.frac_cell(x) for x in (0.8991, 0.9, 0.5, 1.07)]
      == ['**0.899**', '0.90', '**0.50**', '1.07'], str([dt.frac_cell(x) for x in (0.8991, 0.9, 0.5, 1.07)]))

rc, table, err = sh(PY, os.path.join(BENCH, 'dtype_table.py'), out)
rows = [l for l in table.splitlines() if l.startswith('| f32 ') or l.startswith('| q4_0 ')]
check('dtype_table.py prints a row per dtype', rc == 0 and len(rows) == 2, table + err)
check('its header names the shape and the columns',
      '| 2x2x32: dtype | file MB | pp4 tok/s | tg2 tok/s | after pp4 | frac of bw +KV, 1 thread |' in table, table)


def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, '2x2x32-q4_0-*.json')))]
q4 = [c.strip() for c in rows[-1].split('|')[1:-1]] if rows else []
want = ['q4_0', '%.1f' % (os.path.getsize(os.path.join(out, 'models', '2x2x32-q4_0.mmgpt')) / 1e6)]
want.append('%.0f' % median([v for d in runs for r in d['results'] if r['prompt_tokens'] == 4
                             for v in r['prefill_tok_s']['samples']]))
for p in (1, 4):
    want.append('%.0f' % median([v for d in runs for r in d['results'] if r['prompt_tokens'] == p
                                 for v in r['decode_tok_s']['samples']]))
want.append(' / '.join(dt.frac_cell(median([r['decode_frac_of_bw_with_kv'] for d in runs for r in d['results']
                                            if r['prompt_tokens'] == p])) for p in (1, 4)))
check('a row: size, and medians over both rounds', q4 == want, f'{q4} != {want}')
check('it counts the cells at the bar and gives the limits',
      'Cells at 0.90 or more:' in table and 'of 4 at 1 thread' in table and 'fp32 FMA peak' in table
      and 'file probe' in table and 'Runs: 2 round(s) of 2 timed run(s) per cell.' in table, table)
rc, _, err = sh(PY, os.path.join(BENCH, 'dtype_table.py'), os.path.join(W, 'empty'))
check('dtype_table.py on a folder without results says so', rc != 0 and 'no SHAPE-DTYPE-ROUND.json' in err, err)

# --- ab.py: alternated pairs of whole bench runs, B's medians over A's
q4_model = os.path.join(out, 'models', '2x2x32-q4_0.mmgpt')
ab_json = os.path.join(W, 'ab.json')
rc, table, err = sh(PY, os.path.join(BENCH, 'ab.py'), '--a', MM, '--b', MM, '--b-env', 'MMGPT_DECODE_PREFETCH=none',
                    '-m', q4_model, '--pairs', '2', '--json', ab_json, '--', '-p', '1,4', '-n', '2', '-t', '1', '-r', '1',
                    '--bw-mib', '16')
rows = [l for l in table.splitlines() if l.startswith('| 2x2x32-q4_0.mmgpt ')]
check('ab.py: a row per measure (pp4, tg2, tg2 after pp4), each with its ratio and range',
      rc == 0 and sorted(l.split(' | ')[3] for l in rows) == ['pp4', 'tg2', 'tg2 after pp4']
      and all(len(l.split(' | ')) == 8 and '-' in l.split(' | ')[7] for l in rows), table + err)
check("ab.py names each side and B's environment", 'B: ' + MM + ' MMGPT_DECODE_PREFETCH=none' in table, table)
log = json.load(open(ab_json))
check('ab.py alternates the order from pair to pair',
      [(e['pair'], e['side']) for e in log] == [(0, 'a'), (0, 'b'), (1, 'b'), (1, 'a')], str(log)[:300])
check("ab.py's B runs see B's environment", all((e['result']['decode_prefetch'] == 'none') == (e['side'] == 'b') for e in log),
      str([(e['side'], e['result'].get('decode_prefetch')) for e in log]))
rc, _, err = sh(PY, os.path.join(BENCH, 'ab.py'), '--a', os.path.join(W, 'none'), '--b', MM, '-m', q4_model,
                '--pairs', '1', '--', '-p', '4', '-n', '1', '-t', '1', '-r', '1', '--bw-mib', '16')
check('ab.py names the run that failed', rc != 0 and 'ab.py:' in err and 'none' in err, err)

finish()
