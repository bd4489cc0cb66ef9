#!/usr/bin/python3
"""Parity of mmgpt with PyTorch on nanoGPT checkpoints (ckpt.pt).

Covers train.py-style checkpoint dicts with '_orig_mod.'-prefixed keys (a
torch.compile'd model) and a real AdamW optimizer state, bias True and False,
the persistent causal-mask buffer 'attn.bias' that nanoGPT registers on
torch < 2.0, a vocabulary padded to a multiple of 64, zip and legacy
containers, f32/f16/bf16 storage, odd shapes, a GPT-2 124M-shaped model and
greedy generation past the context.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402


def nano_case(suite, name, shape, vocab, seed, bias=True, compiled=False, optimizer=False, mask_buffer=False,
              dtype=torch.float32, legacy=False, prompt_vocab=None, prompt_len=12, n_gen=20, layout_flag=True,
              long_prompt=False, heavy=False):
    L, H, D, ctx = shape

    def run():
        cfg = dict(n_layer=L, n_head=H, n_embd=D, block_size=ctx, bias=bias, vocab_size=vocab, dropout=0.0)
        model = R.randomize_(R.NanoGPT(cfg, mask_buffer=mask_buffer), seed)
        R.stored_roundtrip_(model, dtype)
        ckpt = R.nanogpt_checkpoint(model, compiled=compiled, with_optimizer=optimizer, dtype=dtype, seed=seed)
        src = suite.path(name + '.pt')
        R.torch_save(ckpt, src, legacy=legacy)
        del ckpt
        out = suite.path(name + '.mmgpt')
        R.convert(suite, src, out, ['--layout', 'nanogpt'] if layout_flag else [])
        model.double()
        # Prompts use the real (unpadded) vocabulary, as a tokenizer would.
        prompt = R.prompt_ids(seed + 1, prompt_len, prompt_vocab or vocab)
        return R.check_model(suite, model, out, prompt, n_gen=n_gen, long_prompt=long_prompt)
    suite.case(name, run, heavy=heavy)


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    nano_case(suite, 'nano_bias_compiled_optim_f32_L2_H4_d64_v65', (2, 4, 64, 64), 65, seed=21,
              compiled=True, optimizer=True)
    nano_case(suite, 'nano_nobias_maskbuf_bf16_pad128_L3_H6_d96', (3, 6, 96, 128), 128, seed=22,
              bias=False, mask_buffer=True, dtype=torch.bfloat16, prompt_vocab=101)
    nano_case(suite, 'nano_legacy_f16_optim_L1_H4_d60_hs15_v101', (1, 4, 60, 32), 101, seed=23,
              dtype=torch.float16, legacy=True, optimizer=True, prompt_len=9)
    nano_case(suite, 'nano_nobias_compiled_ctx16_past_context', (2, 2, 32, 16), 65, seed=24,
              bias=False, compiled=True, optimizer=True, prompt_len=8, n_gen=40, layout_flag=False,
              long_prompt=True)
    nano_case(suite, 'nano_f32_gpt2_124M_pad50304', (12, 12, 768, 1024), 50304, seed=25,
              prompt_vocab=50257, prompt_len=10, heavy=True)
    suite.finish()


if __name__ == '__main__':
    main()
