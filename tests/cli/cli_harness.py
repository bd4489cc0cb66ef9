"""What the command-line tests share: arguments, checks, running mmgpt, and a
tiny character-level nanoGPT checkpoint made with torch.

Each test script is run by ctest as
    /usr/bin/python3 test_X.py --mmgpt PATH --workdir DIR
and ends with the line 'N passed, M failed' (exit status 1 on any failure).
"""
import argparse
import os
import pickle
import shutil
import subprocess
import sys

import torch

parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--workdir', required=True)
args = parser.parse_args()
MM = args.mmgpt
W = args.workdir
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)

counts = {'passed': 0, 'failed': 0}


def check(name, ok, detail=''):
    if ok:
        counts['passed'] += 1
        print(f'[PASS] {name}')
    else:
        counts['failed'] += 1
        print(f'[FAIL] {name}: {detail}')


def run(*argv, timeout=300, env=None):
    """mmgpt argv; env: variables to set on top of this process's environment."""
    p = subprocess.run([MM, *argv], capture_output=True, timeout=timeout,
                       env=None if env is None else {**os.environ, **env})
    return p.returncode, p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace')


def system_calls():
    """The operating system calls this mmgpt uses: 'linux', 'macos' or 'posix' (the fallbacks), from --version."""
    _, out, _ = run('--version')
    for line in out.splitlines():
        if line.startswith('system '):
            return line.split()[1]
    return 'unknown'


def expect_error(name, *argv, mentions=()):
    """mmgpt must fail cleanly: non-zero exit (not a signal) and exactly one 'mmgpt: error:' line."""
    rc, out, err = run(*argv)
    lines = err.splitlines()
    ok = rc != 0 and rc < 128 and len(lines) == 1 and lines[0].startswith('mmgpt: error: ')
    ok = ok and all(m in err for m in mentions)
    check(name, ok, f'exit {rc}, stderr {err!r}')


def write_char_model(ckdir, alphabet, n_embd=32, n_layer=2, n_head=4, ctx=16, seed=0):
    """A nanoGPT-style ckpt.pt (random weights) with its meta.pkl in `ckdir`; returns (ckpt path, state dict)."""
    V, D = len(alphabet), n_embd
    g = torch.Generator().manual_seed(seed)
    sd = {'transformer.wte.weight': torch.randn(V, D, generator=g) * 0.3,
          'transformer.wpe.weight': torch.randn(ctx, D, generator=g) * 0.3}
    for i in range(n_layer):
        p = f'transformer.h.{i}.'
        for name, shape in [('ln_1.weight', (D,)), ('ln_1.bias', (D,)), ('attn.c_attn.weight', (3 * D, D)),
                            ('attn.c_attn.bias', (3 * D,)), ('attn.c_proj.weight', (D, D)),
                            ('attn.c_proj.bias', (D,)), ('ln_2.weight', (D,)), ('ln_2.bias', (D,)),
                            ('mlp.c_fc.weight', (4 * D, D)), ('mlp.c_fc.bias', (4 * D,)),
                            ('mlp.c_proj.weight', (D, 4 * D)), ('mlp.c_proj.bias', (D,))]:
            norm_weight = name.startswith('ln') and name.endswith('weight')
            sd[p + name] = torch.randn(*shape, generator=g) * 0.3 + (1.0 if norm_weight else 0.0)
    sd['transformer.ln_f.weight'] = torch.ones(D)
    sd['transformer.ln_f.bias'] = torch.zeros(D)
    sd['lm_head.weight'] = sd['transformer.wte.weight']
    os.makedirs(ckdir, exist_ok=True)
    ckpt = os.path.join(ckdir, 'ckpt.pt')
    torch.save({'model': sd, 'model_args': dict(n_layer=n_layer, n_head=n_head, n_embd=D, block_size=ctx, bias=True,
                                                vocab_size=V, dropout=0.0), 'iter_num': 0}, ckpt)
    with open(os.path.join(ckdir, 'meta.pkl'), 'wb') as f:
        pickle.dump({'vocab_size': V, 'itos': dict(enumerate(alphabet)),
                     'stoi': {c: i for i, c in enumerate(alphabet)}}, f)
    return ckpt, sd


def finish():
    print(f"{counts['passed']} passed, {counts['failed']} failed")
    sys.exit(1 if counts['failed'] else 0)
