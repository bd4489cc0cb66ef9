#!/usr/bin/python3
"""Reduced-precision weights: the accuracy budget of `mmgpt convert --dtype bf16|f16` on the demo model.

The bundled demo (models/demo, character-level) is converted three times:
f32, bf16 and f16 (every weight matrix and the tied LM head; norms, biases
and wpe stay f32). `mmgpt perplexity` over the last 10% of tinyshakespeare
(the demo's validation split) must be within +0.5% of f32's for bf16 and f16
(issue 5's budget). The mean KL divergence KL(f32 || dtype) of the
next-token distributions over a few hundred positions (`mmgpt logits` on
consecutive context-length chunks of the same text) is reported, and bounded
loosely. Also checked: `inspect --json` shows the dtypes, the file shrinks
as expected, and convert refuses a 16-bit dtype with --weight-layout row-major.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402
from test_perplexity import val_text  # noqa: E402

PPL_BUDGET = {'bf16': 0.005, 'f16': 0.005}   # relative perplexity increase over f32 (issue 5)
KL_BOUND = {'bf16': 1e-3, 'f16': 1e-4}        # mean KL (nats): loose sanity bounds, the figures are reported
KL_CHUNKS = 6                                  # context-length chunks of logits for the KL (384 positions at ctx 64)


def logits(suite, model_path, ids, vocab):
    out = suite.path('logits.bin')
    R.run_cli(suite.mmgpt, ['logits', '-m', model_path, '--ids', ' '.join(map(str, ids)), '-o', out])
    with open(out, 'rb') as f:
        raw = f.read()
    assert len(raw) == 4 * len(ids) * vocab, f"logits file has {len(raw)} bytes, expected {4 * len(ids) * vocab}"
    return torch.tensor(struct.unpack(f'<{len(ids) * vocab}f', raw), dtype=torch.float64).view(len(ids), vocab)


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    state = {}

    def convert_all():
        _, meta, ckpt_path, _ = R.load_demo()
        state['stoi'] = meta['stoi']
        sizes = {}
        for dt in ('f32', 'bf16', 'f16'):
            out = suite.path(f'demo_{dt}.mmgpt')
            R.convert(suite, ckpt_path, out, ['--dtype', dt])
            state[dt] = out
            sizes[dt] = os.path.getsize(out)
            _, js, _ = R.run_cli(suite.mmgpt, ['inspect', out, '--json'])
            j = json.loads(js)
            for t in j['tensors']:
                want = dt if t['layout'] == 'panel16' else 'f32'
                assert t['dtype'] == want, f"{dt}: tensor {t['name']} is {t['dtype']}, expected {want}"
            assert set(j['dtypes']) == ({'f32'} if dt == 'f32' else {'f32', dt}), j['dtypes']
        for dt in ('bf16', 'f16'):
            assert sizes[dt] < 0.6 * sizes['f32'], f"{dt} file {sizes[dt]} bytes vs f32 {sizes['f32']}"
        # --dtype-head: the matrices in bf16, the (tied) head wte in f32.
        mixed = suite.path('demo_mixed.mmgpt')
        R.convert(suite, ckpt_path, mixed, ['--dtype', 'bf16', '--dtype-head', 'f32'])
        _, js, _ = R.run_cli(suite.mmgpt, ['inspect', mixed, '--json'])
        by_name = {t['name']: t['dtype'] for t in json.loads(js)['tensors']}
        assert by_name['wte'] == 'f32' and by_name['h.0.mlp.fc.weight'] == 'bf16', by_name
        # 16-bit needs the panel layout.
        rc, out, err = R.run_cli(suite.mmgpt, ['convert', ckpt_path, '-o', suite.path('rm.mmgpt'), '--dtype', 'f16',
                                               '--weight-layout', 'row-major'], expect_ok=False)
        assert rc != 0 and 'panel16' in err and not os.path.exists(suite.path('rm.mmgpt')), (rc, err)
        return [', '.join(f"{dt} {sizes[dt]} bytes" for dt in sizes)]

    def perplexity_budget():
        assert 'f32' in state, 'conversion failed'
        text = val_text(suite.shared)
        path = suite.path('val.txt')
        with open(path, 'w') as f:
            f.write(text)
        ppl = {}
        for dt in ('f32', 'bf16', 'f16'):
            _, out, _ = R.run_cli(suite.mmgpt, ['perplexity', '-m', state[dt], '-f', path, '--threads', 2, '--json'])
            ppl[dt] = json.loads(out)['perplexity']
        lines = [f"val split {len(text)} chars: perplexity f32 {ppl['f32']:.5f}"]
        for dt in ('bf16', 'f16'):
            rel = ppl[dt] / ppl['f32'] - 1
            lines.append(f"{dt} {ppl[dt]:.5f} ({rel * 100:+.3f}%)")
            assert rel <= PPL_BUDGET[dt], f"{dt}: perplexity {ppl[dt]} is {rel * 100:.3f}% above f32's {ppl['f32']}"
        return lines

    def kl_divergence():
        assert 'f32' in state, 'conversion failed'
        _, js, _ = R.run_cli(suite.mmgpt, ['inspect', state['f32'], '--json'])
        cfg = json.loads(js)['config']
        ctx, vocab = cfg['n_ctx'], cfg['vocab_size']
        text = val_text(suite.shared)
        ids = [state['stoi'][c] for c in text[:ctx * KL_CHUNKS]]
        ref = torch.cat([logits(suite, state['f32'], ids[i:i + ctx], vocab) for i in range(0, len(ids), ctx)])
        logp = torch.log_softmax(ref, dim=-1)
        lines = [f"{ref.shape[0]} positions"]
        for dt in ('bf16', 'f16'):
            got = torch.cat([logits(suite, state[dt], ids[i:i + ctx], vocab) for i in range(0, len(ids), ctx)])
            logq = torch.log_softmax(got, dim=-1)
            kl = (logp.exp() * (logp - logq)).sum(-1)
            agree = (ref.argmax(-1) == got.argmax(-1)).double().mean().item()
            lines.append(f"{dt}: mean KL {kl.mean().item():.3e} nats (max {kl.max().item():.3e}), "
                         f"argmax agrees {agree * 100:.1f}%")
            assert kl.mean().item() < KL_BOUND[dt], lines[-1]
        return lines

    suite.case('dtype_convert_inspect_sizes', convert_all)
    suite.case('dtype_perplexity_budget', perplexity_budget)
    suite.case('dtype_kl_divergence', kl_divergence)
    suite.finish()


if __name__ == '__main__':
    main()
