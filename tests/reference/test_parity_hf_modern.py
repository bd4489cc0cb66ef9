#!/usr/bin/python3
"""Parity of mmgpt with PyTorch on Hugging Face Llama, Mistral, Qwen2, Qwen3 and GPT-NeoX directories.

The reference is ref_hf_modern.py, our PyTorch module that follows transformers'
modeling code line for line (float64, with HF's float32 rotary angles). Cases cover
grouped-query and multi-query attention, an explicit head_dim wider than
hidden_size / heads, Qwen2's q/k/v biases, Llama's attention_bias and mlp_bias,
Qwen3's QK-norm, llama3 rope scaling, GeGLU, GPT-NeoX's per-head fused QKV, partial
rotary, parallel and sequential residual and the buffers Pythia's checkpoints carry,
tied and untied heads, model.safetensors
and pytorch_model.bin (a tied head stored twice), sharded with their index files (and
an index that points outside its directory refused), f32 / bf16 / f16 storage, greedy
generation past the context, and the clear errors for what is not supported.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402
import ref_hf_modern as M  # noqa: E402


def modern_case(suite, name, family, seed, fmt='safetensors', dtype=torch.float32, prompt_len=12, n_gen=16,
                long_prompt=False, heavy=False, std=0.08, build_kw=None, shards=1, **cfg_kw):
    def run():
        cfg = M.config_json(family, **cfg_kw)
        model = M.randomize_(M.build(cfg, rope_fp32=True, **(build_kw or {})), seed, std=std)
        R.stored_roundtrip_(model, dtype)
        d = suite.path(name)
        M.write_hf_modern_dir(model, d, fmt=fmt, dtype=dtype, shards=shards)
        out = suite.path(name + '.mmgpt')
        R.convert(suite, d, out)  # --layout auto: found from the tensor names, the family from config.json
        model.double()
        prompt = R.prompt_ids(seed + 1, prompt_len, cfg['vocab_size'])
        lines = R.check_model(suite, model, out, prompt, n_gen=n_gen, long_prompt=long_prompt)
        info = json.loads(R.run_cli(suite.mmgpt, ['inspect', out, '--json'])[1])
        return lines + [f"kv heads {info['config'].get('n_kv_head')}, head_dim {info['config'].get('head_dim')}"]
    suite.case(name, run, heavy=heavy)


def refused(suite, name, family, needle, **cfg_kw):
    """A directory convert must refuse, naming what is unsupported in one line."""
    def run():
        model = M.randomize_(M.build(M.config_json(family)), 5)
        d = suite.path(name)
        M.write_hf_modern_dir(model, d)
        with open(os.path.join(d, 'config.json'), 'w') as f:  # what the reference itself cannot build
            json.dump(M.config_json(family, **cfg_kw), f)
        return R.convert_refused(suite, d, suite.path(name + '.mmgpt'), needle)
    suite.case(name, run)


def bad_index(suite):
    """A shard index naming a file outside its directory is refused, and nothing is written."""
    model = M.randomize_(M.build(M.config_json('llama')), 7)
    d = suite.path('bad_index')
    M.write_hf_modern_dir(model, d, shards=2)
    index = os.path.join(d, 'model.safetensors.index.json')
    with open(index) as f:
        j = json.load(f)
    name = sorted(j['weight_map'])[0]
    j['weight_map'][name] = '../' + j['weight_map'][name]
    with open(index, 'w') as f:
        json.dump(j, f)
    out = suite.path('bad_index.mmgpt')
    rc, _, err = R.run_cli(suite.mmgpt, ['convert', d, '-o', out], expect_ok=False)
    assert rc != 0 and "not a file in the index's own directory" in err, err
    assert not os.path.exists(out), "a partial output was left behind"
    return [err.strip()[:160]]


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    modern_case(suite, 'llama_st_f32_gqa_untied', 'llama', seed=41, hidden_size=64, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=96, max_position_embeddings=64, vocab_size=211)
    modern_case(suite, 'llama3_scaling_bf16_tied_past_context', 'llama', seed=42, dtype=torch.bfloat16,
                hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=80,
                max_position_embeddings=24, vocab_size=150, tie_word_embeddings=True, rope_theta=500000.0,
                rope_scaling=M.llama3_scaling(factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                              original_max_position_embeddings=8),
                prompt_len=10, n_gen=30, long_prompt=True)
    modern_case(suite, 'llama_biases_geglu_bin', 'llama', seed=43, fmt='bin', hidden_size=32,
                num_attention_heads=4, attention_bias=True, mlp_bias=True, hidden_act='gelu_pytorch_tanh',
                vocab_size=97)
    modern_case(suite, 'mistral_mqa_f16', 'mistral', seed=44, dtype=torch.float16, hidden_size=64,
                num_attention_heads=8, num_key_value_heads=1, max_position_embeddings=48, vocab_size=120)
    modern_case(suite, 'qwen2_qkv_bias_tied_bin', 'qwen2', seed=45, fmt='bin', hidden_size=48,
                num_attention_heads=4, num_key_value_heads=2, intermediate_size=72, vocab_size=130)
    modern_case(suite, 'qwen3_qk_norm_head_dim_untied', 'qwen3', seed=46, hidden_size=48, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=64, vocab_size=140,
                tie_word_embeddings=False)
    modern_case(suite, 'qwen3_tied_bf16_hd24', 'qwen3', seed=47, dtype=torch.bfloat16, hidden_size=40,
                num_attention_heads=2, num_key_value_heads=1, head_dim=24, intermediate_size=56, vocab_size=101)
    modern_case(suite, 'neox_parallel_st_f32_rot4', 'gpt_neox', seed=49, hidden_size=64, num_attention_heads=4,
                vocab_size=150)
    modern_case(suite, 'neox_sequential_pythia_buffers_bin_f16', 'gpt_neox', seed=50, fmt='bin', dtype=torch.float16,
                legacy=True, build_kw={'legacy_buffers': True}, hidden_size=48, num_attention_heads=3,
                rotary_pct=0.5, use_parallel_residual=False, max_position_embeddings=20, vocab_size=90,
                prompt_len=8, n_gen=24, long_prompt=True)
    modern_case(suite, 'neox_full_rotary_gelu_new_tied', 'gpt_neox', seed=51, hidden_size=32, num_attention_heads=2,
                rotary_pct=1.0, hidden_act='gelu_new', tie_word_embeddings=True, vocab_size=70)
    modern_case(suite, 'qwen2_sharded3_safetensors_bf16', 'qwen2', seed=52, dtype=torch.bfloat16, shards=3,
                hidden_size=32, num_attention_heads=4, num_key_value_heads=2, vocab_size=120)
    modern_case(suite, 'llama_sharded2_bin_untied', 'llama', seed=53, fmt='bin', shards=2, hidden_size=32,
                num_attention_heads=2, vocab_size=80)
    # Sliding windows (transformers: query i sees keys j > i - sliding_window), prompts past them.
    modern_case(suite, 'mistral_sliding_window_16', 'mistral', seed=54, hidden_size=32, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, sliding_window=16, vocab_size=90, prompt_len=40,
                n_gen=20)
    modern_case(suite, 'qwen2_sliding_from_layer_1_of_3', 'qwen2', seed=55, hidden_size=32, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=48, use_sliding_window=True,
                sliding_window=7, max_window_layers=1, vocab_size=80, prompt_len=30, n_gen=12)
    suite.case('refuse_index_outside_directory', lambda: bad_index(suite))
    # 30 layers: initialised at std 0.02 (as trained models start), which keeps f32
    # rounding well inside the tolerance (torch's own f32 forward is at 5e-6).
    modern_case(suite, 'llama_smollm2_135M_shaped', 'llama', seed=48, heavy=True, std=0.02, hidden_size=576,
                num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536,
                max_position_embeddings=256, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                rms_norm_eps=1e-5, prompt_len=20, n_gen=8)
    refused(suite, 'refuse_rope_yarn', 'llama', 'rope_scaling type "yarn" is not supported',
            rope_scaling={'rope_type': 'yarn', 'factor': 4.0})
    refused(suite, 'refuse_qwen2_unknown_layer_type', 'qwen2', 'layer_types[1] is "chunked_attention"',
            use_sliding_window=True, sliding_window=8, layer_types=['full_attention', 'chunked_attention'])
    refused(suite, 'refuse_unknown_act', 'llama', 'hidden_act "relu" is not supported', hidden_act='relu')
    suite.finish()


if __name__ == '__main__':
    main()
