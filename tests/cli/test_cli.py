"""The mmgpt command line's contract: exit status, one-line errors, outputs.

Run by ctest as: /usr/bin/python3 test_cli.py --mmgpt PATH --workdir DIR
Builds a tiny character-level nanoGPT checkpoint with torch, converts it, and
checks every subcommand's success and failure behaviour: a non-zero exit and
exactly one line on stderr for every misuse, never a crash or a hang, and no
file lost or left half-written.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import MM, W, check, expect_error, finish, run, write_char_model  # noqa: E402

# --- a tiny nanoGPT-style char model: 2 layers, width 32, context 16
alphabet = sorted(set('\n !,.:;?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\'-'))
V, D, L, H, CTX = len(alphabet), 32, 2, 4, 16
ckdir = os.path.join(W, 'ck')
ckpt, sd = write_char_model(ckdir, alphabet, n_embd=D, n_layer=L, n_head=H, ctx=CTX)
model = os.path.join(W, 'model.mmgpt')

# --- convert
rc, out, err = run('convert', ckpt, '-o', model)
check('convert succeeds and reports the layout and tokenizer on stderr',
      rc == 0 and out == '' and 'nanogpt' in err and 'character-level' in err, f'exit {rc}, {err!r}')
expect_error('convert: missing input', 'convert', os.path.join(W, 'nope.pt'), '-o', os.path.join(W, 'x.mmgpt'),
             mentions=('nope.pt',))
expect_error('convert: output directory missing', 'convert', ckpt, '-o', os.path.join(W, 'no', 'dir', 'x.mmgpt'))
expect_error('convert: unknown layout', 'convert', ckpt, '-o', os.path.join(W, 'x.mmgpt'), '--layout', 'llama')
expect_error('convert: --n-head 0', 'convert', ckpt, '-o', os.path.join(W, 'x.mmgpt'), '--n-head', '0')
expect_error('convert: no -o', 'convert', ckpt)

# A failed convert never clobbers an existing output nor leaves temporaries.
bad = os.path.join(W, 'bad.pt')
with open(ckpt, 'rb') as f:
    blob = f.read()
with open(bad, 'wb') as f:
    f.write(blob[:len(blob) // 2])
keep = os.path.join(W, 'keep.mmgpt')
shutil.copy(model, keep)
before = open(keep, 'rb').read()
expect_error('convert: truncated checkpoint', 'convert', bad, '-o', keep, mentions=('bad.pt',))
check('failed convert leaves the existing output untouched', open(keep, 'rb').read() == before)
check('failed convert leaves no temporary file', sorted(os.listdir(W)) == sorted(
    ['ck', 'model.mmgpt', 'bad.pt', 'keep.mmgpt']), str(os.listdir(W)))

# --- inspect
rc, out, err = run('inspect', model, '--json')
try:
    j = json.loads(out)
    ok = rc == 0 and j['config']['n_layer'] == L and j['config']['vocab_size'] == V and \
        j['tokenizer']['kind'] == 'char' and len(j['tensors']) == 4 + 12 * L and j['config']['gelu'] == 'erf'
except Exception as e:  # noqa: BLE001
    ok, out = False, f'{e}: {out[:200]}'
check('inspect --json describes config, tokenizer and tensors', ok, out[:300])
rc, out, err = run('inspect', model)
check('inspect text lists every tensor', rc == 0 and 'h.1.mlp.proj.weight' in out and 'char' in out, out[:300])
# MMGPT_BF16DOT: 0 widens bf16 weights on every CPU and says so; 1 takes the
# dot product where the CPU has one; another value warns and keeps the default.
rc, out, err = run('inspect', model, env={'MMGPT_BF16DOT': '0'})
check('MMGPT_BF16DOT=0: bf16 widened, and the line says why', rc == 0 and 'bf16 f32 (MMGPT_BF16DOT=0)' in out, out[:400])
rc, out, err = run('inspect', model, env={'MMGPT_BF16DOT': '1'})
check('MMGPT_BF16DOT=1: the line says it is forced', rc == 0 and '(MMGPT_BF16DOT=1)' in out, out[:400])
rc, out, err = run('inspect', model, env={'MMGPT_BF16DOT': 'yes'})
check('MMGPT_BF16DOT=yes: one warning, the default kept',
      rc == 0 and err.count('MMGPT_BF16DOT=yes is not a setting') == 1 and '(MMGPT_BF16DOT=' not in out, err + out[:400])
expect_error('inspect: missing file', 'inspect', os.path.join(W, 'missing.mmgpt'), mentions=('missing.mmgpt',))
expect_error('inspect: a checkpoint is not a model file', 'inspect', ckpt, mentions=('ckpt.pt',))
expect_error('inspect: a directory', 'inspect', W)
trunc = os.path.join(W, 'trunc.mmgpt')
mbytes = open(model, 'rb').read()
for cut in (0, 7, 64, 100, len(mbytes) // 2, len(mbytes) - 1):
    with open(trunc, 'wb') as f:
        f.write(mbytes[:cut])
    expect_error(f'inspect: model truncated to {cut} bytes', 'inspect', trunc, mentions=('trunc.mmgpt',))

# --- generate
rc, out, err = run('generate', '-m', model, '-p', 'ROMEO:', '-n', '30', '--seed', '7')
check('generate -p echoes the prompt then the continuation', rc == 0 and out.startswith('ROMEO:') and
      len(out.rstrip('\n')) >= 6, f'{rc} {out!r} {err!r}')
rc2, out2, _ = run('generate', '-m', model, '-p', 'ROMEO:', '-n', '30', '--seed', '7', '--threads', '1')
check('same seed, same text, whatever --threads', rc2 == 0 and out2 == out, f'{out!r} vs {out2!r}')
rc, out, err = run('generate', '-m', model, '--ids', '1 2 3', '-n', '25', '--greedy', '--print-ids', '--ignore-eos')
ids = out.split()
check('--print-ids prints exactly the generated ids on one line',
      rc == 0 and out.count('\n') == 1 and len(ids) == 25 and all(0 <= int(i) < V for i in ids), repr(out))
rc, out2, err = run('generate', '-m', model, '--ids', '1 2 3', '-n', '25', '--top-k', '1', '--temperature', '1',
                    '--print-ids', '--seed', '3')
check('top-k 1 is greedy', rc == 0 and out2 == out, f'{out2!r} vs {out!r}')
long_prompt = ' '.join(str(i % V) for i in range(3 * CTX))
rc, out, err = run('generate', '-m', model, '--ids', long_prompt, '-n', '5', '--greedy', '--print-ids')
check('a prompt longer than the context is cropped, with a note', rc == 0 and len(out.split()) == 5 and
      'context' in err, f'{rc} {out!r} {err!r}')
rc, out, err = run('generate', '-m', model, '-p', 'a', '-n', '0')
check('-n 0 prints just the prompt', rc == 0 and out == 'a\n', repr(out))
expect_error('generate: no prompt', 'generate', '-m', model)
expect_error('generate: both -p and --ids', 'generate', '-m', model, '-p', 'a', '--ids', '1')
expect_error('generate: id outside vocabulary', 'generate', '-m', model, '--ids', f'1 {V}', mentions=(str(V),))
expect_error('generate: negative id', 'generate', '-m', model, '--ids', '-1')
expect_error('generate: id not a number', 'generate', '-m', model, '--ids', '1 x 2', mentions=("'x'",))
expect_error('generate: empty --ids', 'generate', '-m', model, '--ids', ' ')
expect_error('generate: character not in vocabulary', 'generate', '-m', model, '-p', 'héllo', mentions=('U+00E9',))
expect_error('generate: --greedy with --temperature', 'generate', '-m', model, '-p', 'a', '--greedy',
             '--temperature', '1')
for t in ('0', '-1', 'nan', 'inf', 'x'):
    expect_error(f'generate: --temperature {t}', 'generate', '-m', model, '-p', 'a', '--temperature', t)
expect_error('generate: --top-k -1', 'generate', '-m', model, '-p', 'a', '--top-k', '-1')
expect_error('generate: -n -1', 'generate', '-m', model, '-p', 'a', '-n', '-1')
expect_error('generate: --threads 0', 'generate', '-m', model, '-p', 'a', '--threads', '0')
expect_error('generate: --seed x', 'generate', '-m', model, '-p', 'a', '--seed', 'x')
expect_error('generate: unknown flag', 'generate', '-m', model, '-p', 'a', '--frobnicate')
expect_error('generate: missing model', 'generate', '-m', os.path.join(W, 'none.mmgpt'), '-p', 'a',
             mentions=('none.mmgpt',))
expect_error('no subcommand', )
expect_error('unknown subcommand', 'frobnicate')

# --- logits
out_f32 = os.path.join(W, 'logits.f32')
rc, out, err = run('logits', '-m', model, '--ids', '0 1 2 3 4', '-o', out_f32)
size = os.path.getsize(out_f32) if os.path.exists(out_f32) else -1
check('logits writes [T, vocab] float32', rc == 0 and size == 5 * V * 4, f'{rc} {size} {err!r}')
vals = struct.unpack(f'<{5 * V}f', open(out_f32, 'rb').read())
rc, out, err = run('generate', '-m', model, '--ids', '0 1 2 3 4', '-n', '1', '--greedy', '--print-ids')
row = vals[4 * V:5 * V]
check('greedy token is the argmax of the last logits row', rc == 0 and int(out) == max(range(V), key=row.__getitem__),
      out)
expect_error('logits: more ids than the context', 'logits', '-m', model, '--ids', ' '.join(['1'] * (CTX + 1)), '-o',
             out_f32, mentions=('context',))
expect_error('logits: output directory missing', 'logits', '-m', model, '--ids', '1', '-o',
             os.path.join(W, 'no', 'l.f32'))
check('failed logits leave the previous output', os.path.getsize(out_f32) == 5 * V * 4)

# --- sampling options, stops, batches, stats
for opt, bad in (('--top-p', '0'), ('--top-p', '1.5'), ('--top-p', 'nan'), ('--min-p', '1'), ('--min-p', '-0.1'),
                 ('--repetition-penalty', '0'), ('--repetition-penalty', 'inf')):
    expect_error(f'generate: {opt} {bad}', 'generate', '-m', model, '-p', 'a', opt, bad)
expect_error('generate: --greedy with --top-p', 'generate', '-m', model, '-p', 'a', '--greedy', '--top-p', '0.5')
rc, free, err = run('generate', '-m', model, '-p', 'ab', '-n', '40', '--greedy', '--ignore-eos')
cont = free[2:-1]
stop = cont[10:12]
rc, out, err = run('generate', '-m', model, '-p', 'ab', '-n', '40', '--greedy', '--ignore-eos', '--stop', stop,
                   '--stop', 'QQQ')
check('--stop cuts the text before the stop string, matched across tokens',
      rc == 0 and out == 'ab' + cont[:cont.find(stop)] + '\n', f'{out!r} vs {cont!r} stop {stop!r}')
rc, out, err = run('generate', '-m', model, '-p', 'ab', '-n', '20', '--seed', '5', '--top-p', '0.9', '--min-p', '0.05',
                   '--repetition-penalty', '1.3')
rc2, out2, _ = run('generate', '-m', model, '-p', 'ab', '-n', '20', '--seed', '5', '--top-p', '0.9', '--min-p', '0.05',
                   '--repetition-penalty', '1.3', '--threads', '1')
check('top-p, min-p and repetition penalty run and repeat with a seed', rc == 0 and out == out2 and len(out) > 3,
      f'{out!r} {out2!r} {err!r}')

batch_prompts = ['ROMEO:', 'a', 'To be, or not to be', 'JULIET: oh']
batch_file = os.path.join(W, 'batch.txt')
with open(batch_file, 'w') as f:
    f.write('\n'.join(batch_prompts[:2]) + '\n\n' + '\r\n'.join(batch_prompts[2:]) + '\n')
rc, out, err = run('generate', '-m', model, '--batch-file', batch_file, '-n', '30', '--greedy', '--print-ids',
                   '--ignore-eos')
alone = []
for prompt in batch_prompts:
    alone.append(run('generate', '-m', model, '-p', prompt, '-n', '30', '--greedy', '--print-ids', '--ignore-eos')[1])
check('--batch-file: each prompt gets what it gets alone (greedy, ids)', rc == 0 and out == ''.join(alone),
      f'{out!r} vs {alone!r} {err!r}')
rc, out, err = run('generate', '-m', model, '--batch-file', batch_file, '-n', '30', '--seed', '9', '--ignore-eos')
alone = [run('generate', '-m', model, '-p', p, '-n', '30', '--seed', '9', '--ignore-eos')[1] for p in batch_prompts]
check('--batch-file: sampled text identical to single runs with the same seed', rc == 0 and
      out == ''.join(a + '\n' for a in alone), f'{out!r} vs {alone!r}')
expect_error('generate: missing batch file', 'generate', '-m', model, '--batch-file', os.path.join(W, 'nobatch.txt'),
             mentions=('nobatch.txt',))
empty_batch = os.path.join(W, 'empty.txt')
open(empty_batch, 'w').write('\n\n')
expect_error('generate: empty batch file', 'generate', '-m', model, '--batch-file', empty_batch, mentions=('empty.txt',))
expect_error('generate: --batch-file with -p', 'generate', '-m', model, '--batch-file', batch_file, '-p', 'a')

rc, out, err = run('generate', '-m', model, '-p', 'ab', '-n', '10', '--stats', '--seed', '1')
check('--stats reports load, prefill, decode, first token, RSS and resident weights on stderr',
      rc == 0 and all(k in err for k in ('load', 'prefill', 'decode', 'first token', 'peak RSS', 'resident',
                                        'kernels:', 'prefetch')), err)
load_line = re.search(r'^load +([0-9.]+) ms +\(map ([0-9.]+), validate ([0-9.]+), tokenizer ([0-9.]+)\)$', err, re.M)
check('--stats splits the load into map, validate and tokenizer, within its total',
      load_line is not None and sum(float(x) for x in load_line.groups()[1:]) <= float(load_line.group(1)) + 0.02, err)

# --- --version: the release first (as before), then commit, compiler and kernels
src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
release = re.search(r'project\(mmgpt[^)]*VERSION ([0-9.]+)\)', open(os.path.join(src, 'CMakeLists.txt')).read())
rc, out, err = run('--version')
lines = out.splitlines()
check('--version: first line is "mmgpt" and the project version', rc == 0 and err == '' and release and
      lines[:1] == [f'mmgpt {release.group(1)}'], f'exit {rc}, {out!r}, {err!r}')
head = subprocess.run(['git', '-C', src, 'rev-parse', 'HEAD'], capture_output=True, text=True) \
    if shutil.which('git') else None
commit = re.search(r'^commit +(\S+)$', out, re.M)
if head is not None and head.returncode == 0:
    check('--version: the commit is the checkout\'s HEAD (as of the build)',
          commit is not None and commit.group(1).removesuffix('-dirty') == head.stdout.strip(), out)
else:
    check('--version: the commit is "unknown" outside a git checkout', commit and commit.group(1) == 'unknown', out)
check('--version: names the compiler and the kernels built in and chosen',
      re.search(r'^compiler +(GCC|Clang) [0-9]', out, re.M) and
      re.search(r'^kernels +built in: .*scalar$', out, re.M) and 'in use: ' in out, out)
check('--version: names the operating system calls in use (core/platform.hpp)',
      re.search(r'^system +(linux|macos|posix \(POSIX calls only\))$', out, re.M), out)
rc, out, err = run('--version', env={'MMGPT_ISA': 'scalar'})
check('--version: the chosen kernels follow MMGPT_ISA', rc == 0 and 'in use: scalar, quantized scalar' in out,
      out)
rc, out, err = run('--version')
amx = re.search(r'^ +AMX tiles: (.+)$', out, re.M)
check('--version: says whether the AMX tiles are in use', rc == 0 and amx is not None, out)
on_cpu = amx is not None and not amx.group(1).startswith('not available')
check('--version: AMX tiles in use exactly where the kernels named are the tile ones',
      amx is not None and (('quantized amx-int8' in out or 'bf16 amx-bf16' in out) ==
                           amx.group(1).startswith('in use')), out)
rc, out, err = run('--version', env={'MMGPT_AMX': '0'})
check('--version: MMGPT_AMX=0 keeps the tiles unused (said so where the CPU has them)',
      rc == 0 and 'amx-int8' not in out and 'amx-bf16' not in out and
      ('AMX tiles: off (MMGPT_AMX=0)' in out if on_cpu else 'AMX tiles: not available' in out), out)
rc, out, err = run('--version', env={'MMGPT_AMX': 'sometimes'})
check('MMGPT_AMX: an unknown value is refused with a warning and auto used',
      rc == 0 and 'MMGPT_AMX=sometimes is not a setting' in err and amx is not None, f'{out!r} {err!r}')

# --- the embedding example program, built beside mmgpt
example = os.path.join(os.path.dirname(MM), 'mmgpt_embed_example')
p = subprocess.run([example, model, 'ab', '5'], capture_output=True, timeout=60)
text = p.stdout.decode('utf-8', 'replace')
rc, greedy_out, _ = run('generate', '-m', model, '-p', 'ab', '-n', '100', '--greedy')
check('example program streams greedy text and stops early from its callback',
      p.returncode == 0 and text.startswith(greedy_out[:7]) and 'stopped by the callback' in text,
      f'{text!r} vs {greedy_out[:7]!r}')

finish()
