#!/usr/bin/env python3
"""Writes a Hugging Face GPT-2 directory of a given shape, for speed runs.

    python3 bench/gpt2_shaped.py 124M OUT_DIR      # or 355M, 774M, 1558M
    python3 bench/gpt2_shaped.py 2x2x64 OUT_DIR    # LAYERSxHEADSxWIDTH
    python3 bench/gpt2_shaped.py 1558M OUT_DIR --zeros   # every value 0, a sparse file

OUT_DIR gets what `save_pretrained` of a GPT2LMHeadModel writes and `mmgpt
convert` reads: config.json, model.safetensors (float32, the tied lm_head
left out, as Hugging Face does) and the GPT-2 tokenizer (vocab.json and
merges.txt, copied from data/gpt2). No trained GPT-2 can be fetched offline,
and decode speed does not depend on the values, only on the bytes: matrices
and embeddings are N(0, 0.02) (GPT-2's initialisation), LayerNorm weights 1,
biases 0. The values come from one seeded block of 2^20 normals, each tensor
starting at its own offset in it, so a 355M model is written in seconds with
plain Python (no numpy or torch needed: the bench machine may have neither).
With --zeros every value is 0 and the data is a hole in a sparse file: a
1558M-shaped checkpoint (6.2 GB) in no time and no disk, for conversion's
memory bound (tests/cli/test_convert_memory.py).
"""
import argparse
import array
import json
import os
import random
import re
import shutil
import struct
import sys

SHAPES = {  # name: (layers, heads, width), the GPT-2 family
    '124M': (12, 12, 768),
    '355M': (24, 16, 1024),
    '774M': (36, 20, 1280),
    '1558M': (48, 25, 1600),
}
VOCAB = 50257
CONTEXT = 1024
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data', 'gpt2')


def config(layers, heads, width, context=CONTEXT, vocab=VOCAB, eps=1e-5, dtype='float32'):
    """config.json as GPT2Config.save_pretrained writes it (fields as in
    tiny-gpt2-hf). Also the parity tests' (tests/reference/mmgpt_ref.py)."""
    return {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
        "initializer_range": 0.02, "layer_norm_epsilon": eps, "model_type": "gpt2",
        "n_ctx": context, "n_embd": width, "n_head": heads, "n_inner": None, "n_layer": layers,
        "n_positions": context, "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
        "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
        "summary_type": "cls_index", "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "torch_dtype": dtype, "transformers_version": "4.52.1", "use_cache": True,
        "vocab_size": vocab,
    }


def tensors(layers, width):
    """(name, shape, fill) of every tensor, as GPT2LMHeadModel names them.
    Conv1D weights are [in, out]; fill is 'normal', 'ones' or 'zeros'."""
    out = [('transformer.wte.weight', [VOCAB, width], 'normal'),
           ('transformer.wpe.weight', [CONTEXT, width], 'normal'),
           ('transformer.ln_f.weight', [width], 'ones'),
           ('transformer.ln_f.bias', [width], 'zeros')]
    for i in range(layers):
        p = 'transformer.h.%d.' % i
        out += [(p + 'ln_1.weight', [width], 'ones'), (p + 'ln_1.bias', [width], 'zeros'),
                (p + 'attn.c_attn.weight', [width, 3 * width], 'normal'),
                (p + 'attn.c_attn.bias', [3 * width], 'zeros'),
                (p + 'attn.c_proj.weight', [width, width], 'normal'),
                (p + 'attn.c_proj.bias', [width], 'zeros'),
                (p + 'ln_2.weight', [width], 'ones'), (p + 'ln_2.bias', [width], 'zeros'),
                (p + 'mlp.c_fc.weight', [width, 4 * width], 'normal'),
                (p + 'mlp.c_fc.bias', [4 * width], 'zeros'),
                (p + 'mlp.c_proj.weight', [4 * width, width], 'normal'),
                (p + 'mlp.c_proj.bias', [width], 'zeros')]
    return sorted(out)


def bf16_bytes(f32_bytes):
    """float32 values (bytes) rounded to bfloat16, nearest even (no NaNs here)."""
    words = array.array('I', f32_bytes)
    return array.array('H', (((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF for w in words)).tobytes()


def write_safetensors(path, items, seed, zeros_only=False, dtype='F32'):
    """items: (name, shape, fill); every tensor stored as dtype, F32 or BF16."""
    block_floats = 1 << 20
    rng = random.Random(seed)
    # One block of normals plus room for any start offset below block_floats.
    normal = array.array('f', (rng.gauss(0.0, 0.02) for _ in range(2 * block_floats))).tobytes()
    ones = array.array('f', [1.0]).tobytes()
    size = 4
    if dtype == 'BF16':
        normal, ones, size = bf16_bytes(normal), bf16_bytes(ones), 2
    zeros = bytes(size)
    header, offset = {'__metadata__': {'format': 'pt'}}, 0
    for name, shape, _ in items:
        n = size
        for s in shape:
            n *= s
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(',', ':')).encode()
    hb += b' ' * (-len(hb) % 8)  # the data starts 8-aligned, as the safetensors library writes it
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(hb)))
        f.write(hb)
        if zeros_only:
            f.truncate(8 + len(hb) + offset)  # the data: a hole, read as zeros
            return
        for name, shape, fill in items:
            left = header[name]['data_offsets'][1] - header[name]['data_offsets'][0]
            if fill != 'normal':
                f.write((ones if fill == 'ones' else zeros) * (left // size))
                continue
            start = size * rng.randrange(block_floats)
            while left:
                chunk = min(left, size * block_floats)
                f.write(normal[start:start + chunk])
                left -= chunk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('shape', help='a GPT-2 size (%s) or LAYERSxHEADSxWIDTH' % ', '.join(SHAPES))
    ap.add_argument('out', help='directory to write (must not exist, or be empty)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--zeros', action='store_true', help='every value 0, stored as a hole (a sparse file)')
    a = ap.parse_args()
    if a.shape in SHAPES:
        layers, heads, width = SHAPES[a.shape]
    else:
        m = re.fullmatch(r'(\d+)x(\d+)x(\d+)', a.shape)
        if not m:
            ap.error('shape %r: not one of %s nor LAYERSxHEADSxWIDTH' % (a.shape, ', '.join(SHAPES)))
        layers, heads, width = map(int, m.groups())
    if layers < 1 or heads < 1 or width < 1 or width % heads:
        ap.error('shape %s: need layers, heads, width >= 1 and width a multiple of heads' % a.shape)
    if os.path.exists(a.out) and os.listdir(a.out):
        sys.exit('gpt2_shaped.py: %s: exists and is not empty' % a.out)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, 'config.json'), 'w') as f:
        json.dump(config(layers, heads, width), f, indent=2, sort_keys=True)
    shutil.copyfile(os.path.join(DATA, 'encoder.json'), os.path.join(a.out, 'vocab.json'))
    shutil.copyfile(os.path.join(DATA, 'vocab.bpe'), os.path.join(a.out, 'merges.txt'))
    # Written under a temporary name, so an interrupted run leaves no model.safetensors.
    tmp = os.path.join(a.out, 'model.safetensors.partial')
    write_safetensors(tmp, tensors(layers, width), a.seed, zeros_only=a.zeros)
    os.replace(tmp, os.path.join(a.out, 'model.safetensors'))
    print('%s: GPT-2 %d layers, %d heads, width %d' % (a.out, layers, heads, width))


if __name__ == '__main__':
    main()
