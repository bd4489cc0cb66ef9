#!/usr/bin/python3
"""Parity of mmgpt with PyTorch on Hugging Face GPT-2 checkpoints.

Covers save_pretrained directories in every container the HF ecosystem
produces (model.safetensors, pytorch_model.bin as torch zip, the legacy
pre-1.6 pickle format with GPT2Model-style keys of the original OpenAI
conversion), f32/f16/bf16 storage, the attn.bias/attn.masked_bias buffers of
older transformers versions, a non-default layer_norm_epsilon, odd shapes, a
GPT-2 124M-shaped model, greedy generation past the context, and the real
tiny-gpt2-hf save_pretrained output in data/models.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402


def hf_case(suite, name, shape, seed, fmt, dtype=torch.float32, with_buffers=False, prefix=True,
            eps=1e-5, prompt_len=12, n_gen=20, layout_flag=True, long_prompt=False, heavy=False):
    L, H, D, ctx = shape

    def run():
        cfg = dict(n_layer=L, n_head=H, n_embd=D, n_positions=ctx, vocab_size=50257, layer_norm_epsilon=eps)
        model = R.randomize_(R.HFGPT2LMHeadModel(cfg), seed)
        R.stored_roundtrip_(model, dtype)
        d = suite.path(name)
        R.write_hf_dir(model, d, fmt, dtype=dtype, with_buffers=with_buffers, prefix=prefix, eps=eps)
        out = suite.path(name + '.mmgpt')
        extra = ['--layout', 'hf-gpt2'] if layout_flag else []
        R.convert(suite, d, out, extra)
        model.double()
        prompt = R.prompt_ids(seed + 1, prompt_len, 50257)
        return R.check_model(suite, model, out, prompt, n_gen=n_gen, long_prompt=long_prompt)
    suite.case(name, run, heavy=heavy)


def real_tiny_gpt2(suite):
    """The real save_pretrained output: weights read with our own safetensors
    reader into the reference model (lm_head absent from the file: tied)."""
    src = os.path.join(R.DATA, 'models', 'tiny-gpt2-hf')
    assert os.path.isdir(src), f"missing {src}"
    import json
    with open(os.path.join(src, 'config.json')) as f:
        c = json.load(f)
    cfg = dict(n_layer=c['n_layer'], n_head=c['n_head'], n_embd=c['n_embd'], n_positions=c['n_positions'],
               vocab_size=c['vocab_size'], layer_norm_epsilon=c['layer_norm_epsilon'])
    model = R.HFGPT2LMHeadModel(cfg)
    tensors = R.read_safetensors(os.path.join(src, 'model.safetensors'))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if not k.endswith(('.attn.bias', '.attn.masked_bias', 'lm_head.weight'))]
    assert not missing and not unexpected, f"tiny-gpt2-hf keys: missing {missing}, unexpected {unexpected}"
    model.double()
    out = suite.path('tiny-gpt2-hf.mmgpt')
    R.convert(suite, src, out)  # --layout auto
    prompt = [15496, 11, 616, 1438, 318, 50256, 464, 3290, 286, 262]
    return R.check_model(suite, model, out, prompt, n_gen=20)


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    hf_case(suite, 'hf_st_f32_L2_H4_d64', (2, 4, 64, 128), seed=11, fmt='safetensors')
    hf_case(suite, 'hf_zip_f16_buffers_eps1e-2_L3_H3_d48', (3, 3, 48, 64), seed=12, fmt='zip',
            dtype=torch.float16, with_buffers=True, eps=1e-2)
    hf_case(suite, 'hf_legacy_noprefix_buffers_L1_H4_d60_hs15', (1, 4, 60, 32), seed=13, fmt='legacy',
            with_buffers=True, prefix=False, prompt_len=9)
    hf_case(suite, 'hf_st_bf16_ctx16_past_context', (2, 2, 32, 16), seed=14, fmt='safetensors',
            dtype=torch.bfloat16, prompt_len=8, n_gen=40, layout_flag=False, long_prompt=True)
    suite.case('hf_real_tiny_gpt2_hf', lambda: real_tiny_gpt2(suite))
    hf_case(suite, 'hf_st_f16_gpt2_124M', (12, 12, 768, 1024), seed=15, fmt='safetensors',
            dtype=torch.float16, prompt_len=10, heavy=True)
    suite.finish()


if __name__ == '__main__':
    main()
