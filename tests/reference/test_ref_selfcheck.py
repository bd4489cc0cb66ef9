#!/usr/bin/python3
"""Checks of the reference side itself (no mmgpt involved).

The three re-implemented model families must agree with each other when
given the same weights (HF Conv1D [in, out] vs nn.Linear [out, in], fused vs
separate Q/K/V, LayerNorm vs scale/shift), the hand-written safetensors
writer must round-trip through the hand-written reader and match the real
tiny-gpt2-hf file's conventions, and the checkpoint writers must produce what
torch.load reads back (shared storage for tied weights, optimizer state).
A wrong reference would make every parity test meaningless, so it is tested.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402


def hf_to_llms(hf, cfg):
    """Maps HF weights onto an LLMs GPTModel (both use the tanh GELU)."""
    m = R.LLMsGPTModel(dict(vocab_size=cfg['vocab_size'], context_length=cfg['n_positions'],
                            emb_dim=cfg['n_embd'], n_heads=cfg['n_head'], n_layers=cfg['n_layer'],
                            drop_rate=0.0, qkv_bias=True)).double()
    sd, d = hf.state_dict(), cfg['n_embd']
    new = {'tok_emb.weight': sd['transformer.wte.weight'], 'pos_emb.weight': sd['transformer.wpe.weight'],
           'final_norm.scale': sd['transformer.ln_f.weight'], 'final_norm.shift': sd['transformer.ln_f.bias'],
           'out_head.weight': sd['lm_head.weight']}
    for i in range(cfg['n_layer']):
        p, q = f'transformer.h.{i}.', f'trf_blocks.{i}.'
        w, b = sd[p + 'attn.c_attn.weight'].t(), sd[p + 'attn.c_attn.bias']
        for j, nm in enumerate(('W_query', 'W_key', 'W_value')):
            new[q + f'att.{nm}.weight'] = w[j * d:(j + 1) * d]
            new[q + f'att.{nm}.bias'] = b[j * d:(j + 1) * d]
        new[q + 'att.out_proj.weight'] = sd[p + 'attn.c_proj.weight'].t()
        new[q + 'att.out_proj.bias'] = sd[p + 'attn.c_proj.bias']
        new[q + 'ff.layers.0.weight'] = sd[p + 'mlp.c_fc.weight'].t()
        new[q + 'ff.layers.0.bias'] = sd[p + 'mlp.c_fc.bias']
        new[q + 'ff.layers.2.weight'] = sd[p + 'mlp.c_proj.weight'].t()
        new[q + 'ff.layers.2.bias'] = sd[p + 'mlp.c_proj.bias']
        for a, bb in (('ln_1', 'norm1'), ('ln_2', 'norm2')):
            new[q + bb + '.scale'] = sd[p + a + '.weight']
            new[q + bb + '.shift'] = sd[p + a + '.bias']
    new.update({k: v for k, v in m.state_dict().items() if k.endswith('att.mask')})
    m.load_state_dict(new, strict=True)
    return m


def hf_to_nano(hf, cfg):
    """Maps HF weights onto nanoGPT, whose MLP GELU is swapped to the tanh form for the comparison."""
    m = R.NanoGPT(dict(n_layer=cfg['n_layer'], n_head=cfg['n_head'], n_embd=cfg['n_embd'],
                       block_size=cfg['n_positions'], bias=True, vocab_size=cfg['vocab_size'])).double()
    for blk in m.transformer.h:
        blk.mlp.gelu = torch.nn.GELU(approximate='tanh')
    new = {}
    for k, v in R.hf_state_dict(hf, with_buffers=False).items():
        new[k] = v.t() if k.endswith('.weight') and v.dim() == 2 and '.h.' in k else v
    m.load_state_dict(new, strict=True)
    return m


def cross_models():
    cfg = dict(n_layer=2, n_head=3, n_embd=45, n_positions=24, vocab_size=77, layer_norm_epsilon=1e-5)
    hf = R.randomize_(R.HFGPT2LMHeadModel(cfg), 5).double()
    ids = R.prompt_ids(6, 20, 77)
    a = R.ref_logits(hf, ids)
    assert a.abs().max() > 1.0, f"logits too small to be a meaningful test: {a.abs().max():.3g}"
    b = R.ref_logits(hf_to_llms(hf, cfg), ids)
    c = R.ref_logits(hf_to_nano(hf, cfg), ids)
    e1, e2 = float((a - b).abs().max()), float((a - c).abs().max())
    assert e1 < 1e-10 and e2 < 1e-10, f"HF vs LLMs {e1:.3g}, HF vs nanoGPT {e2:.3g}"
    # Causality: changing a later token leaves earlier rows unchanged.
    ids2 = ids[:10] + [(ids[10] + 1) % 77] + ids[11:]
    d = R.ref_logits(hf, ids2)
    assert float((a[:10] - d[:10]).abs().max()) == 0.0 and float((a[10] - d[10]).abs().max()) > 0
    # The erf GELU differs from the tanh one: the nanoGPT reference really uses erf.
    n2 = hf_to_nano(hf, cfg)
    for blk in n2.transformer.h:
        blk.mlp.gelu = torch.nn.GELU()
    e3 = float((R.ref_logits(n2, ids) - a).abs().max()) / max(1.0, float(a.abs().max()))
    assert e3 > R.LOGIT_TOL, f"erf vs tanh GELU differ by only {e3:.3g} (relative): a mix-up would pass"
    return [f"HF==LLMs {e1:.2g}, HF==nanoGPT(tanh) {e2:.2g}, erf vs tanh GELU differ by {e3:.2g} (rel), max|logit| "
            f"{float(a.abs().max()):.3g}"]


def safetensors_roundtrip(suite):
    ts = {'a': torch.randn(3, 5), 'b.h': torch.randn(7).half(), 'c': torch.randn(2, 2, 3).bfloat16(),
          'z': torch.arange(5)}
    p = suite.path('rt.safetensors')
    R.write_safetensors(ts, p, {'format': 'pt'})
    back = R.read_safetensors(p)
    assert sorted(back) == sorted(ts)
    for k in ts:
        assert back[k].dtype == ts[k].dtype and torch.equal(back[k], ts[k]), k
    import json
    import struct
    with open(p, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        hdr = json.loads(f.read(n))
    assert n % 8 == 0 and hdr['__metadata__'] == {'format': 'pt'} and hdr['c']['dtype'] == 'BF16'
    # Real file: the reader agrees with its declared sizes.
    real = os.path.join(R.DATA, 'models', 'tiny-gpt2-hf', 'model.safetensors')
    t = R.read_safetensors(real)
    assert t['transformer.wte.weight'].shape == (50257, 2) and 'lm_head.weight' not in t
    return ['writer/reader round trip exact (F32, F16, BF16, I64); tiny-gpt2-hf readable']


def writers(suite):
    cfg = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, bias=True, vocab_size=65, dropout=0.0)
    m = R.randomize_(R.NanoGPT(cfg), 1)
    ck = R.nanogpt_checkpoint(m, compiled=True, with_optimizer=True, dtype=torch.float16)
    p = suite.path('n.pt')
    R.torch_save(ck, p, legacy=True)
    back = torch.load(p)
    sd = back['model']
    assert all(k.startswith('_orig_mod.') for k in sd)
    assert sd['_orig_mod.lm_head.weight'].dtype == torch.float16
    assert sd['_orig_mod.lm_head.weight'].data_ptr() == sd['_orig_mod.transformer.wte.weight'].data_ptr(), \
        'tied weights lost their shared storage'
    assert len(back['optimizer']['state']) > 0 and 'exp_avg' in back['optimizer']['state'][0]
    hf = R.randomize_(R.HFGPT2LMHeadModel(dict(n_layer=1, n_head=2, n_embd=16, n_positions=8,
                                                vocab_size=50257, layer_norm_epsilon=1e-5)), 2)
    d = R.write_hf_dir(hf, suite.path('hfdir'), 'legacy', with_buffers=True, prefix=False)
    sd = torch.load(os.path.join(d, 'pytorch_model.bin'))
    assert 'wte.weight' in sd and 'h.0.attn.bias' in sd and 'h.0.attn.masked_bias' in sd
    assert sd['h.0.attn.c_attn.weight'].shape == (16, 48), 'Conv1D weight must be [in, out]'
    for f in ('config.json', 'vocab.json', 'merges.txt'):
        assert os.path.isfile(os.path.join(d, f)), f
    return ['nanoGPT ckpt (legacy, f16, _orig_mod., AdamW state, tied storage) and HF legacy dir read back']


def main():
    suite = R.Suite(__doc__.split('\n')[1], need_mmgpt=False)
    suite.case('cross_model_equivalence', cross_models)
    suite.case('safetensors_roundtrip', lambda: safetensors_roundtrip(suite))
    suite.case('checkpoint_writers', lambda: writers(suite))
    suite.finish()


if __name__ == '__main__':
    main()
