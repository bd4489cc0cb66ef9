#!/usr/bin/python3
"""Parity of mmgpt with PyTorch on the LLMs-from-scratch Llama3Model and Qwen3Model state dicts.

The reference is ref_llms_modern.py, our PyTorch module that follows the book's
llama3.py and qwen3.py line for line (float64, with the book's float32 rotary
tables). Cases: Llama 3.2-style with rope_freq's llama3 scaling, bf16, a tied
out_head stored once (shared) or as a copy; Llama 3 without scaling in the legacy
torch.save format with the per-block mask/cos/sin buffers of older chapters;
Qwen3 with QK-norm, an explicit head_dim and its float32 `.scale` norms; Qwen3
without QK-norm; greedy generation past the context; and the clear errors for a
missing config.json and a key the book's configs do not have.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402
import ref_llms_modern as L  # noqa: E402


def book_case(suite, name, cfg, seed, dtype, tie='none', legacy=False, extra_buffers=None, prompt_len=12,
              n_gen=16, long_prompt=False):
    def run():
        model = L.randomize_modern_(L.build_model(cfg), seed, tie=tie)
        L.stored_roundtrip_modern_(model, dtype)
        pth, cpath = L.write_llms_modern(model, cfg, suite.path(name), 'model', dtype, legacy=legacy,
                                         extra_buffers=extra_buffers)
        out = suite.path(name + '.mmgpt')
        R.convert(suite, pth, out)
        ref, _ = L.load_llms_modern(pth, cpath, rope_dtype=torch.float32)
        prompt = R.prompt_ids(seed + 1, prompt_len, cfg['vocab_size'])
        lines = R.check_model(suite, ref, out, prompt, n_gen=n_gen, long_prompt=long_prompt)
        info = json.loads(R.run_cli(suite.mmgpt, ['inspect', out, '--json'])[1])['config']
        return lines + [f"kv heads {info['n_kv_head']}, head_dim {info['head_dim']}, qk_norm {info['qk_norm']}, "
                        f"tied {info['tied_lm_head']}"]
    suite.case(name, run)


def refused(suite, name, needle, edit):
    def run():
        cfg = L.llama3_config()
        model = L.randomize_modern_(L.build_model(cfg), 3)
        pth, cpath = L.write_llms_modern(model, cfg, suite.path(name), 'model', torch.float32)
        edit(cpath)
        return R.convert_refused(suite, pth, suite.path(name + '.mmgpt'), needle)
    suite.case(name, run)


def add_key(path):
    with open(path) as f:
        c = json.load(f)
    c['sliding_window'] = 32
    with open(path, 'w') as f:
        json.dump(c, f)


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    book_case(suite, 'llama32_bf16_rope_freq_tied_shared', L.llama3_config(), seed=61, dtype=torch.bfloat16,
              tie='shared')
    book_case(suite, 'llama3_f32_legacy_block_buffers_untied',
              L.llama3_config(rope_freq=None, emb_dim=48, n_heads=6, n_kv_groups=3, hidden_dim=96,
                              context_length=24), seed=62, dtype=torch.float32, legacy=True,
              extra_buffers='block', prompt_len=10, n_gen=30, long_prompt=True)
    book_case(suite, 'qwen3_bf16_qk_norm_head_dim24_tied_copy', L.qwen3_config(), seed=63, dtype=torch.bfloat16,
              tie='copy')
    book_case(suite, 'qwen3_f16_no_qk_norm', L.qwen3_config(qk_norm=False, head_dim=None, n_kv_groups=1),
              seed=64, dtype=torch.float16)
    refused(suite, 'refuse_missing_config', 'needs its config dict beside it as config.json', os.remove)
    refused(suite, 'refuse_unknown_config_key', "key 'sliding_window' is not one of the book's", add_key)
    suite.finish()


if __name__ == '__main__':
    main()
