#!/usr/bin/env python3
"""Writes a Hugging Face Llama directory of a given shape, for speed runs.

    python3 bench/llama_shaped.py smollm2-135m OUT_DIR        # f32
    python3 bench/llama_shaped.py llama3.2-1b OUT_DIR          # bf16, as Meta publishes it
    python3 bench/llama_shaped.py 2x4x2x64x160 OUT_DIR         # LAYERSxHEADSxKV_HEADSxWIDTHxMLP
    python3 bench/llama_shaped.py smollm2-135m OUT_DIR --dtype bf16

OUT_DIR gets what `save_pretrained` of a LlamaForCausalLM writes and `mmgpt
convert` reads: config.json (the published model's, with its grouped-query
heads, rope theta and llama3 rope scaling) and model.safetensors (the tied
lm_head left out, as Hugging Face does). Decode speed depends on the bytes,
not the values: matrices and embeddings are N(0, 0.02) from one seeded block
of normals (bench/gpt2_shaped.py's writer), norm weights 1. Plain Python: no
numpy or torch needed.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_shaped import write_safetensors  # noqa: E402

# name: layers, heads, kv heads, width, MLP width, vocabulary, context, theta, rope scaling, eps, dtype
SHAPES = {
    'smollm2-135m': (30, 9, 3, 576, 1536, 49152, 8192, 100000.0, None, 1e-5, 'float32'),
    'llama3.2-1b': (16, 32, 8, 2048, 8192, 128256, 131072, 500000.0,
                    {'factor': 32.0, 'high_freq_factor': 4.0, 'low_freq_factor': 1.0,
                     'original_max_position_embeddings': 8192, 'rope_type': 'llama3'}, 1e-5, 'bfloat16'),
}


def config(layers, heads, kv, width, ff, vocab, ctx, theta, scaling, eps, dtype):
    """config.json as LlamaConfig.save_pretrained writes it (transformers 4.46)."""
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": width // heads, "hidden_act": "silu",
        "hidden_size": width, "initializer_range": 0.02, "intermediate_size": ff,
        "max_position_embeddings": ctx, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": kv,
        "pretraining_tp": 1, "rms_norm_eps": eps, "rope_scaling": scaling, "rope_theta": theta,
        "tie_word_embeddings": True, "torch_dtype": dtype, "transformers_version": "4.46.3",
        "use_cache": True, "vocab_size": vocab,
    }


def tensors(layers, heads, kv, width, ff, vocab):
    """(name, shape, fill) of every tensor, as LlamaForCausalLM names them (tied head left out)."""
    hd = width // heads
    out = [('model.embed_tokens.weight', [vocab, width], 'normal'), ('model.norm.weight', [width], 'ones')]
    for i in range(layers):
        p = 'model.layers.%d.' % i
        out += [(p + 'input_layernorm.weight', [width], 'ones'),
                (p + 'post_attention_layernorm.weight', [width], 'ones'),
                (p + 'self_attn.q_proj.weight', [heads * hd, width], 'normal'),
                (p + 'self_attn.k_proj.weight', [kv * hd, width], 'normal'),
                (p + 'self_attn.v_proj.weight', [kv * hd, width], 'normal'),
                (p + 'self_attn.o_proj.weight', [width, heads * hd], 'normal'),
                (p + 'mlp.gate_proj.weight', [ff, width], 'normal'),
                (p + 'mlp.up_proj.weight', [ff, width], 'normal'),
                (p + 'mlp.down_proj.weight', [width, ff], 'normal')]
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('shape', help='%s or LAYERSxHEADSxKV_HEADSxWIDTHxMLP' % ', '.join(SHAPES))
    ap.add_argument('out', help='directory to write (must not exist, or be empty)')
    ap.add_argument('--dtype', choices=('f32', 'bf16'), help="storage (default: the shape's own)")
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args()
    if a.shape in SHAPES:
        shape = list(SHAPES[a.shape])
    else:
        m = re.fullmatch(r'(\d+)x(\d+)x(\d+)x(\d+)x(\d+)', a.shape)
        if not m:
            ap.error('shape %r: not one of %s nor LAYERSxHEADSxKV_HEADSxWIDTHxMLP' % (a.shape, ', '.join(SHAPES)))
        layers, heads, kv, width, ff = map(int, m.groups())
        shape = [layers, heads, kv, width, ff, 49152, 2048, 10000.0, None, 1e-5, 'float32']
    layers, heads, kv, width, ff = shape[:5]
    if min(layers, heads, kv, width, ff) < 1 or width % heads or heads % kv or (width // heads) % 2:
        ap.error('shape %s: need sizes >= 1, width a multiple of heads, heads of kv heads, an even head size'
                 % a.shape)
    if a.dtype:
        shape[10] = 'bfloat16' if a.dtype == 'bf16' else 'float32'
    if os.path.exists(a.out) and os.listdir(a.out):
        sys.exit('llama_shaped.py: %s: exists and is not empty' % a.out)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, 'config.json'), 'w') as f:
        json.dump(config(*shape), f, indent=2, sort_keys=True)
    # Written under a temporary name, so an interrupted run leaves no model.safetensors.
    tmp = os.path.join(a.out, 'model.safetensors.partial')
    write_safetensors(tmp, tensors(*shape[:6]), a.seed, dtype='BF16' if shape[10] == 'bfloat16' else 'F32')
    os.replace(tmp, os.path.join(a.out, 'model.safetensors'))
    print('%s: Llama %d layers, %d heads (%d key/value), width %d, MLP %d, vocabulary %d, %s'
          % (a.out, layers, heads, kv, width, ff, shape[5], shape[10]))


if __name__ == '__main__':
    main()
