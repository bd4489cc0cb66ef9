#!/usr/bin/python3
"""Parity of mmgpt with PyTorch on nanochat checkpoints (model_<step>.pt + meta_<step>.json).

The reference is ref_nanochat.py, our PyTorch module that follows nanochat/gpt.py
(at the commit it names) line for line, run in float64 with float32's epsilon in
the RMS norms (what nanochat's fp32 / bf16 runs use). Every part of the block is
live: random smear, residual mixing, value-embedding gates and backout, logits
over the softcap's bend, louder padding rows in the head. Cases: sliding windows
(window_pattern SSSL, short window 128 + 1 < the 200-token prompt, so prefill
tiles and decode steps both cut keys off); a GPU run's checkpoint (fp32 weights,
bf16 embeddings, _orig_mod. prefixes, optimizer files, two steps of which the last
is loaded, the directory given); an old checkpoint (no window_pattern, no
resid_lambdas / x0_lambdas); MQA with generation past the context; and the clear
errors for a missing meta file and an unknown model_config key.
"""
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402
import ref_nanochat as N  # noqa: E402

N.NORM_EPS = torch.finfo(torch.float32).eps


class Reference:
    """The float64 reference as check_model drives it: mmgpt's context is
    nanochat's sequence_len (nanochat's rotary cache reaches 10x further)."""

    def __init__(self, model):
        self.model = model
        self.cfg = model.cfg
        self.block_size = model.cfg['sequence_len']

    def __call__(self, idx):
        return self.model(idx)


def nanochat_case(suite, name, cfg, seed, prompt_len, n_gen, dtype=torch.float32, embed_dtype=None,
                  compiled_prefix=False, omit_window_pattern=False, omit_keys=(), steps=(1000,), with_optimizer=False,
                  give_dir=False, long_prompt=False, heavy=False):
    def run():
        d = suite.path(name)
        shutil.rmtree(d, ignore_errors=True)
        for i, step in enumerate(steps):
            m = N.randomize_nanochat_(N.NanochatGPT(cfg), seed + i).double().eval()
            N.nanochat_roundtrip_(m, dtype, embed_dtype)
            if omit_keys:  # an old checkpoint: what nanochat's loader patches in
                with torch.no_grad():
                    m.resid_lambdas.fill_(1.0)
                    m.x0_lambdas.fill_(0.0)
            model_path, _ = N.write_nanochat_checkpoint(m, d, step, dtype=dtype, compiled_prefix=compiled_prefix,
                                                        embed_dtype=embed_dtype,
                                                        omit_window_pattern=omit_window_pattern,
                                                        omit_keys=omit_keys, with_optimizer=with_optimizer)
        ref, meta = N.load_nanochat_checkpoint(d, steps[-1])
        if omit_window_pattern:
            assert 'window_pattern' not in meta['model_config']
        out = suite.path(name + '.mmgpt')
        R.convert(suite, d if give_dir else model_path, out)
        prompt = R.prompt_ids(seed + 7, prompt_len, cfg['vocab_size'])
        lines = R.check_model(suite, Reference(ref), out, prompt, n_gen=n_gen, long_prompt=long_prompt)
        info = json.loads(R.run_cli(suite.mmgpt, ['inspect', out, '--json'])[1])['config']
        assert info['vocab_size'] == cfg['vocab_size'], info
        graph = R.run_cli(suite.mmgpt, ['inspect', out, '--graph'])[1]
        for part in ('rmsnorm ln_e', 'smear smear', 'copy x0', 'mix h.0.mix', 'value_embed h.', '+relu2',
                     'mix backout', 'softcap'):
            assert part in graph, f'inspect --graph does not show {part!r}:\n{graph}'
        windowed = [w for w in info['attn_window'] if w]
        assert not windowed or f'window={windowed[0]}' in graph, graph
        return lines + [f"windows {info.get('attn_window')}, value embeddings {info.get('value_embed')}"]
    suite.case(name, run, heavy=heavy)


def refused(suite, name, needle, edit):
    def run():
        cfg = N.nanochat_config(sequence_len=64, vocab_size=100, n_layer=2, n_head=2, n_kv_head=1, n_embd=32)
        m = N.randomize_nanochat_(N.NanochatGPT(cfg), 5)
        d = suite.path(name)
        shutil.rmtree(d, ignore_errors=True)
        model_path, meta_path = N.write_nanochat_checkpoint(m, d, 7)
        edit(meta_path)
        return R.convert_refused(suite, model_path, suite.path(name + '.mmgpt'), needle)
    suite.case(name, run)


def add_config_key(path):
    with open(path) as f:
        meta = json.load(f)
    meta['model_config']['rope_base'] = 10000
    with open(path, 'w') as f:
        json.dump(meta, f)


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    nanochat_case(suite, 'sssl_windows_gqa_prompt200',
                  N.nanochat_config(sequence_len=256, vocab_size=200, n_layer=4, n_head=4, n_kv_head=2, n_embd=64,
                                    window_pattern='SSSL'),
                  seed=71, prompt_len=200, n_gen=24)
    nanochat_case(suite, 'gpu_run_bf16_embeddings_orig_mod_last_step_dir',
                  N.nanochat_config(sequence_len=128, vocab_size=300, n_layer=3, n_head=3, n_kv_head=3, n_embd=72,
                                    window_pattern='L'),
                  seed=72, prompt_len=40, n_gen=16, embed_dtype=torch.bfloat16, compiled_prefix=True,
                  steps=(500, 1500), with_optimizer=True, give_dir=True)
    nanochat_case(suite, 'old_checkpoint_no_pattern_no_lambdas',
                  N.nanochat_config(sequence_len=96, vocab_size=128, n_layer=2, n_head=2, n_kv_head=1, n_embd=48),
                  seed=73, prompt_len=30, n_gen=12, omit_window_pattern=True, omit_keys=('resid_lambdas', 'x0_lambdas'))
    nanochat_case(suite, 'mqa_past_context',
                  N.nanochat_config(sequence_len=48, vocab_size=90, n_layer=3, n_head=4, n_kv_head=1, n_embd=32,
                                    window_pattern='SL'),
                  seed=74, prompt_len=20, n_gen=40, long_prompt=True)
    refused(suite, 'refuse_missing_meta', "meta_000007.json (its model_config) is missing", os.remove)
    refused(suite, 'refuse_unknown_config_key', "model_config key 'rope_base' is not one of nanochat's", add_config_key)
    suite.finish()


if __name__ == '__main__':
    main()
