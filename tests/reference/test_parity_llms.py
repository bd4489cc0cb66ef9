#!/usr/bin/python3
"""Parity of mmgpt with PyTorch on "LLMs from scratch" GPTModel state_dicts.

Covers plain torch.save(model.state_dict()) files (zip and legacy), qkv_bias
True and False, f32/f16/bf16 storage, odd shapes, a GPT-2 124M-shaped model
(the book's GPT_CONFIG_124M), greedy generation past the context, and the
command-line contract that this layout needs --n-head (omitting it, or giving
one that does not divide the width, fails with one line on stderr).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402


def write_llms(suite, name, shape, vocab, seed, qkv_bias, dtype, legacy):
    L, H, D, ctx = shape
    cfg = dict(vocab_size=vocab, context_length=ctx, emb_dim=D, n_heads=H, n_layers=L, drop_rate=0.0,
               qkv_bias=qkv_bias)
    model = R.randomize_(R.LLMsGPTModel(cfg), seed)
    R.stored_roundtrip_(model, dtype)
    src = suite.path(name + '.pth')
    R.torch_save(R.cast_state_dict(model.state_dict(), dtype), src, legacy=legacy)
    # The engine's config speaks nanoGPT/HF names; check_model reads these.
    model.cfg = dict(cfg, vocab_size=vocab)
    return model, src


def llms_case(suite, name, shape, vocab, seed, qkv_bias=False, dtype=torch.float32, legacy=False,
              prompt_len=12, n_gen=20, layout_flag=True, long_prompt=False, heavy=False):
    def run():
        model, src = write_llms(suite, name, shape, vocab, seed, qkv_bias, dtype, legacy)
        out = suite.path(name + '.mmgpt')
        extra = ['--n-head', shape[1]] + (['--layout', 'llms-from-scratch'] if layout_flag else [])
        R.convert(suite, src, out, extra)
        model.double()
        prompt = R.prompt_ids(seed + 1, prompt_len, vocab)
        return R.check_model(suite, model, out, prompt, n_gen=n_gen, long_prompt=long_prompt)
    suite.case(name, run, heavy=heavy)


def expect_one_line_error(suite, args, what):
    rc, out, err = R.run_cli(suite.mmgpt, args, expect_ok=False)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc != 0, f"{what}: expected a non-zero exit, got 0 (stdout {out.strip()[:200]!r})"
    assert len(lines) == 1, f"{what}: expected one line on stderr, got {len(lines)}: {err.strip()[:500]!r}"
    return f"{what}: exit {rc}, stderr {lines[0].strip()[:160]!r}"


def n_head_errors(suite):
    _, src = write_llms(suite, 'llms_nhead', (1, 4, 64, 16), 101, seed=39, qkv_bias=False,
                        dtype=torch.float32, legacy=False)
    out = suite.path('llms_nhead.mmgpt')
    return [expect_one_line_error(suite, ['convert', src, '-o', out, '--layout', 'llms-from-scratch'],
                                  'no --n-head'),
            expect_one_line_error(suite, ['convert', src, '-o', out], 'no --n-head, auto layout'),
            expect_one_line_error(suite, ['convert', src, '-o', out, '--n-head', '3'],
                                  '--n-head 3 for width 64')]


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    llms_case(suite, 'llms_zip_f32_noqkvbias_L2_H4_d64_v101', (2, 4, 64, 64), 101, seed=31)
    llms_case(suite, 'llms_legacy_f16_qkvbias_L1_H4_d60_hs15_v65', (1, 4, 60, 32), 65, seed=32,
              qkv_bias=True, dtype=torch.float16, legacy=True, prompt_len=9)
    llms_case(suite, 'llms_zip_bf16_qkvbias_L3_H6_d96', (3, 6, 96, 48), 1000, seed=33, qkv_bias=True,
              dtype=torch.bfloat16)
    llms_case(suite, 'llms_ctx16_past_context', (2, 2, 32, 16), 101, seed=34, prompt_len=8, n_gen=40,
              layout_flag=False, long_prompt=True)
    suite.case('llms_n_head_required', lambda: n_head_errors(suite))
    llms_case(suite, 'llms_zip_bf16_gpt2_124M', (12, 12, 768, 1024), 50257, seed=35, dtype=torch.bfloat16,
              prompt_len=10, heavy=True)
    suite.finish()


if __name__ == '__main__':
    main()
