#!/usr/bin/python3
"""Runs one model through PyTorch and through `mmgpt bench` on this machine and
prints the speed ratio mmgpt / PyTorch, so anyone can check mmgpt's figures
against the framework they trained in.

Usage (torch is needed: Debian's python3-torch is /usr/bin/python3):
  /usr/bin/python3 tools/bench_pytorch.py --checkpoint out/ckpt.pt --mmgpt-model model.mmgpt \\
      [--mmgpt build/mmgpt] [-p 128,512] [-n 128] [-t 1,2] [-r 5] [--json]

  --checkpoint   what the .mmgpt was converted from: a nanoGPT ckpt.pt (train.py's
                 dict with 'model' and 'model_args'), or a Hugging Face GPT-2 directory
                 (config.json + model.safetensors or pytorch_model.bin)
  --mmgpt-model  the converted .mmgpt file (same weights)
  -p/-n/-t/-r    prompt lengths, decode steps, thread counts, repetitions: as `mmgpt bench`

What is timed, on both sides, batch 1, fp32, after one warm-up: a prefill of p
random token ids (fixed seed) producing the last position's logits, then n greedy
decode steps. The PyTorch side is eager mode with a KV cache (keys and values
concatenated per step, torch.cat), torch.no_grad(), torch.set_num_threads(t);
the model classes are those of tests/reference/mmgpt_ref.py (same module names
and state_dict keys as nanoGPT's and Hugging Face's), run in float32.
Medians over r runs are compared; the min-max spread is shown for each side.
PyTorch's speed depends on its BLAS: Debian's torch 1.13 may use the reference
BLAS, which is far slower than OpenBLAS or MKL builds, so say which you ran.
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, 'tests', 'reference'))
import mmgpt_ref as ref  # noqa: E402  (the reference model classes)


def int_list(s):
    try:
        v = [int(x) for x in s.split(',')]
    except ValueError:
        raise argparse.ArgumentTypeError(f'{s!r}: expected comma-separated positive integers')
    if not v or any(x < 1 for x in v):
        raise argparse.ArgumentTypeError(f'{s!r}: expected comma-separated positive integers')
    return v


def strip_buffers(sd):
    """Drops the causal-mask buffers some checkpoints carry (not parameters)."""
    return {k: v for k, v in sd.items() if not (k.endswith('.attn.bias') and v.dim() == 4)
            and not k.endswith('.attn.masked_bias')}


def load_model(path):
    """A float32 eval-mode model from a nanoGPT ckpt.pt or a Hugging Face GPT-2 directory."""
    if os.path.isdir(path):
        with open(os.path.join(path, 'config.json')) as f:
            c = json.load(f)
        cfg = {k: c[k] for k in ('n_layer', 'n_head', 'n_embd', 'n_positions', 'vocab_size')}
        cfg['layer_norm_epsilon'] = c.get('layer_norm_epsilon', 1e-5)
        cfg['n_inner'] = c.get('n_inner')
        st = os.path.join(path, 'model.safetensors')
        sd = ref.read_safetensors(st) if os.path.exists(st) else \
            torch.load(os.path.join(path, 'pytorch_model.bin'), map_location='cpu')
        sd = {(k if k.startswith(('transformer.', 'lm_head.')) else 'transformer.' + k): v for k, v in sd.items()}
        model = ref.HFGPT2LMHeadModel(cfg)
        sd = {k: v.float() for k, v in strip_buffers(sd).items() if k != 'lm_head.weight'}
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [k for k in missing if not k.endswith(('.attn.bias', '.attn.masked_bias', 'lm_head.weight'))]
    else:
        ck = torch.load(path, map_location='cpu')
        cfg = dict(ck['model_args'])
        cfg.setdefault('bias', True)
        sd = {k[len('_orig_mod.'):] if k.startswith('_orig_mod.') else k: v for k, v in ck['model'].items()}
        model = ref.NanoGPT(cfg, mask_buffer=False)
        sd = {k: v.float() for k, v in strip_buffers(sd).items()}
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [k for k in missing if k != 'lm_head.weight' or 'transformer.wte.weight' not in sd]
    if missing or unexpected:
        sys.exit(f'bench_pytorch: {path}: tensors missing {missing[:3]} / unexpected {unexpected[:3]}')
    return model.float().eval()


@torch.no_grad()
def forward_cached(model, idx, past):
    """Logits of the last position of idx [1, T] after `past` (list of (k, v) per layer,
    or None); returns (logits, new past). Works for both reference model classes."""
    tr = model.transformer
    T = idx.size(1)
    T0 = past[0][0].size(2) if past else 0
    x = tr.wte(idx) + tr.wpe(torch.arange(T0, T0 + T))
    C = x.size(-1)
    new_past = []
    for i, blk in enumerate(tr.h):
        a = blk.attn
        H = getattr(a, 'n_head', None) or a.num_heads
        hd = C // H
        q, k, v = a.c_attn(blk.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(1, T, H, hd).transpose(1, 2) for t in (q, k, v))
        if past:
            k = torch.cat([past[i][0], k], dim=2)
            v = torch.cat([past[i][1], v], dim=2)
        new_past.append((k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        if T > 1:  # causal: query t sees keys up to T0 + t
            mask = torch.ones(T, T0 + T, dtype=torch.bool).tril(diagonal=T0)
            att = att.masked_fill(~mask, float('-inf'))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(1, T, C)
        x = x + a.c_proj(y)
        x = x + blk.mlp(blk.ln_2(x))
    return model.lm_head(tr.ln_f(x[:, -1:, :]))[0, -1], new_past


def run_once(model, ids, n):
    t0 = time.perf_counter()
    logits, past = forward_cached(model, torch.tensor([ids]), None)
    tok = int(torch.argmax(logits))
    t1 = time.perf_counter()
    for _ in range(n):
        logits, past = forward_cached(model, torch.tensor([[tok]]), past)
        tok = int(torch.argmax(logits))
    return t1 - t0, time.perf_counter() - t1


def torch_blas():
    """The BLAS torch was built with, from its build summary (BLAS_INFO=...)."""
    for part in torch.__config__.show().replace('\n', ',').split(','):
        if 'BLAS_INFO=' in part:
            return part.split('=', 1)[1].strip()
    return 'unknown'


def spread(v):
    return {'median': statistics.median(v), 'min': min(v), 'max': max(v)}


def main():
    ap = argparse.ArgumentParser(description='PyTorch vs mmgpt speed on this machine (see the top of this file)')
    ap.add_argument('--checkpoint', required=True, help='nanoGPT ckpt.pt or Hugging Face GPT-2 directory')
    ap.add_argument('--mmgpt-model', required=True, help='the same model converted to .mmgpt')
    ap.add_argument('--mmgpt', default=os.path.join(REPO, 'build', 'mmgpt'), help='mmgpt executable')
    ap.add_argument('-p', type=int_list, default=[512])
    ap.add_argument('-n', type=int, default=128)
    ap.add_argument('-t', type=int_list, default=[os.cpu_count() or 1])
    ap.add_argument('-r', type=int, default=5)
    ap.add_argument('--json', action='store_true', help='print the comparison as JSON')
    a = ap.parse_args()
    if a.n < 1 or a.r < 1:
        ap.error('-n and -r must be at least 1')

    # mmgpt first: its JSON also tells the context length used for clamping.
    cmd = [a.mmgpt, 'bench', '-m', a.mmgpt_model, '-p', ','.join(map(str, a.p)), '-n', str(a.n),
           '-t', ','.join(map(str, a.t)), '-b', '1', '-r', str(a.r), '--json']
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f'bench_pytorch: {" ".join(cmd)} failed: {proc.stderr.strip()}')
    mm = json.loads(proc.stdout)

    model = load_model(a.checkpoint)
    vocab = model.transformer.wte.weight.size(0)
    rows = []
    for r in mm['results']:
        t, p, n = r['threads'], r['prompt_tokens'], r['decode_tokens']
        torch.set_num_threads(t)
        rng = random.Random(1234)
        ids = [rng.randrange(vocab) for _ in range(p)]
        run_once(model, ids, n)  # warm-up
        pre, dec = [], []
        for _ in range(a.r):
            tp, td = run_once(model, ids, n)
            pre.append(p / tp)
            if n:
                dec.append(n / td)
        row = {'threads': t, 'prompt_tokens': p, 'decode_tokens': n,
               'torch_prefill_tok_s': spread(pre), 'mmgpt_prefill_tok_s': r['prefill_tok_s'],
               'prefill_ratio': r['prefill_tok_s']['median'] / spread(pre)['median']}
        if n:
            row.update({'torch_decode_tok_s': spread(dec), 'mmgpt_decode_tok_s': r['decode_tok_s'],
                        'decode_ratio': r['decode_tok_s']['median'] / spread(dec)['median']})
        rows.append(row)

    info = {'torch': torch.__version__, 'torch_blas': torch_blas(), 'mmgpt_kernels': mm['kernel_isa'], 'repetitions': a.r,
            'read_bandwidth_gbps_by_threads': mm['read_bandwidth_probe']['gbps_by_threads'], 'results': rows}
    if a.json:
        print(json.dumps(info, indent=2))
        return

    def f(s):
        return f"{s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f})"

    print(f"torch {info['torch']} (BLAS: {info['torch_blas']}), eager, KV cache by torch.cat; "
          f"mmgpt kernels: {info['mmgpt_kernels']}; median (min-max) of {a.r} runs after a warm-up, batch 1\n")
    print('| threads | test | PyTorch prefill tok/s | mmgpt prefill tok/s | ratio | '
          'PyTorch decode tok/s | mmgpt decode tok/s | ratio |')
    print('| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for r in rows:
        dec = (f"{f(r['torch_decode_tok_s'])} | {f(r['mmgpt_decode_tok_s'])} | {r['decode_ratio']:.2f}x"
               if r['decode_tokens'] else '- | - | -')
        print(f"| {r['threads']} | pp{r['prompt_tokens']}+tg{r['decode_tokens']} | {f(r['torch_prefill_tok_s'])} | "
              f"{f(r['mmgpt_prefill_tok_s'])} | {r['prefill_ratio']:.2f}x | {dec} |")


if __name__ == '__main__':
    main()
