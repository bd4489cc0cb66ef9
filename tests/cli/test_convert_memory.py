"""`mmgpt convert` streams: its peak memory is at most the checkpoint's largest
tensor plus 256 MB, whatever the checkpoint's size (issue: conversion that
scales). Checked two ways at once on each checkpoint: the conversion runs
under RLIMIT_DATA set to that bound (an allocation beyond it fails the
conversion), and its peak resident set (VmHWM, which counts the mapped
checkpoint's pages too) must stay under it.

- a GPT-2 XL-shaped (1558M) Hugging Face safetensors checkpoint, 6.2 GB of
  float32, written as a sparse file of zeros (bench/gpt2_shaped.py --zeros),
  converted to q4_0: Conv1D matrices transposed on the way;
- a GPT-2 124M-shaped nanoGPT torch.save (zip) checkpoint written by torch.

Run by ctest as: /usr/bin/python3 test_convert_memory.py --mmgpt PATH --workdir DIR
"""
import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import MM, W, check, finish, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'bench'))
from convert_scaling import run_measured  # noqa: E402  (peak memory of the process itself, polled from /proc)
MB = 1 << 20


def convert_bounded(ck, out, limit, *extra):
    """Runs mmgpt convert under RLIMIT_DATA = limit; returns (rc, stderr, seconds, peak resident bytes)."""
    def cap():
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return run_measured([MM, 'convert', ck, '-o', out, *extra], preexec_fn=cap)


# A sanitized build (scripts/test-sanitizers.sh) reserves terabytes of shadow
# memory and keeps freed blocks in quarantine: it runs the same conversions,
# for the sanitizer's sake, but the bound is a release build's and is checked
# by the plain build's run of this test.
SANITIZER = next((line.split('instrumented with ', 1)[1].strip() for line in run('--version')[1].splitlines()
                  if 'instrumented with ' in line), '')


def check_bound(name, ck, out, largest, *extra):
    limit = largest + 256 * MB
    if SANITIZER:
        rc, err, secs, peak = run_measured([MM, 'convert', ck, '-o', out, *extra])
        print(f'{name}: {SANITIZER} build: converted in {secs:.1f} s; the memory bound is checked by the plain build')
        check(f'{name}: converts', rc == 0, err)
        return rc == 0
    rc, err, secs, peak = convert_bounded(ck, out, limit, *extra)
    print(f'{name}: largest tensor {largest / MB:.0f} MB, bound {limit / MB:.0f} MB, '
          f'peak RSS {peak / MB:.0f} MB, {secs:.1f} s')
    check(f'{name}: converts under RLIMIT_DATA {limit / MB:.0f} MB', rc == 0, err)
    check(f'{name}: peak resident memory {peak / MB:.0f} MB <= {limit / MB:.0f} MB', peak <= limit)
    return rc == 0


# --- GPT-2 XL-shaped safetensors: 6.2 GB, a sparse file (124M-shaped in a sanitized build, which is slow)
shape, layers, width = ('124M', 12, 768) if SANITIZER else ('1558M', 48, 1600)
xl = os.path.join(W, 'xl')
r = subprocess.run([sys.executable, os.path.join(ROOT, 'bench', 'gpt2_shaped.py'), shape, xl, '--zeros'],
                   capture_output=True, text=True)
check(f'gpt2_shaped.py --zeros writes the {shape}-shaped checkpoint', r.returncode == 0, r.stderr)
st = os.path.join(xl, 'model.safetensors')
if not SANITIZER:
    check('the XL-shaped checkpoint holds 6.2 GB of float32', os.path.getsize(st) > 6_000_000_000)
out = os.path.join(W, 'xl.mmgpt')
if check_bound(f'{shape} safetensors -> q4_0', xl, out, 50257 * width * 4, '--dtype', 'q4_0'):
    rc, info, err = run('inspect', out)
    check(f'the converted {shape} model is whole', rc == 0 and f'{layers} layers' in info and
          f'width {width}' in info, err)
for f in (out, st):
    if os.path.exists(f):
        os.unlink(f)

# --- GPT-2 124M-shaped nanoGPT torch.save (zip): storages read in place from the zip
nano = os.path.join(W, 'nano')
os.makedirs(nano, exist_ok=True)
ck = os.path.join(nano, 'ckpt.pt')
script = r'''
import sys, torch
L, d, V, T = 12, 768, 50257, 1024
sd = {'transformer.wte.weight': torch.zeros(V, d), 'transformer.wpe.weight': torch.zeros(T, d),
      'transformer.ln_f.weight': torch.ones(d), 'transformer.ln_f.bias': torch.zeros(d)}
for i in range(L):
    p = 'transformer.h.%d.' % i
    for n, shape in (('ln_1.weight', [d]), ('ln_1.bias', [d]), ('attn.c_attn.weight', [3 * d, d]),
                     ('attn.c_attn.bias', [3 * d]), ('attn.c_proj.weight', [d, d]), ('attn.c_proj.bias', [d]),
                     ('ln_2.weight', [d]), ('ln_2.bias', [d]), ('mlp.c_fc.weight', [4 * d, d]),
                     ('mlp.c_fc.bias', [4 * d]), ('mlp.c_proj.weight', [d, 4 * d]), ('mlp.c_proj.bias', [d])):
        sd[p + n] = torch.full(shape, 0.01)
sd['lm_head.weight'] = sd['transformer.wte.weight']  # tied: one storage under both names, as nanoGPT saves it
args = dict(n_layer=L, n_head=12, n_embd=d, block_size=T, bias=True, vocab_size=V, dropout=0.0)
torch.save({'model': sd, 'model_args': args, 'iter_num': 0}, sys.argv[1])
'''
r = subprocess.run(['/usr/bin/python3', '-c', script, ck], capture_output=True, text=True)
check('torch writes the 124M-shaped nanoGPT checkpoint', r.returncode == 0, r.stderr[-2000:])
if r.returncode == 0:
    out = os.path.join(W, 'nano.mmgpt')
    if check_bound('124M nanoGPT zip -> f32', ck, out, 50257 * 768 * 4):
        rc, info, err = run('inspect', out)
        check('the converted nanoGPT model is whole, its head tied', rc == 0 and '12 layers' in info and
              'LM head tied' in info, err)
    for f in (out, ck):
        if os.path.exists(f):
            os.unlink(f)

finish()
