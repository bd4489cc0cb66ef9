#!/usr/bin/python3
"""Perplexity parity: `mmgpt perplexity` against the same sliding windows in PyTorch (float64).

The windows are those of the Hugging Face guide "Perplexity of fixed-length
models" (see engine/perplexity.cpp): for begin in range(0, N, stride), end =
min(begin + ctx, N), the window scores its last end - prev_end tokens except
its own first one (row t predicts token t+1); stop once end == N. The mean
NLL must agree within 1e-4 relative, and the token and window counts exactly.
Models: the bundled demo (char vocabulary, models/demo) over tinyshakespeare's
validation text, and a random nanoGPT whose vocabulary (128) is padded past
its 65-character tokenizer.
"""
import json
import os
import pickle
import re
import shutil
import sys

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402

NLL_REL_TOL = 1e-4


def hf_windows(n, ctx, stride):
    """(begin, end, first target) of each window that scores something."""
    out, prev_end = [], 0
    for begin in range(0, n, stride):
        end = min(begin + ctx, n)
        first = max(prev_end, begin + 1)  # labels before prev_end are masked; label `begin` has no prediction
        if end > first:
            out.append((begin, end, first))
        prev_end = end
        if end == n:
            break
    return out


@torch.no_grad()
def ref_perplexity(model, ids, ctx, stride):
    """Mean NLL (float64), scored tokens and windows; windows of equal length run as one batch."""
    windows = hf_windows(len(ids), ctx, stride)
    by_len = {}
    for w in windows:
        by_len.setdefault(w[1] - w[0], []).append(w)
    total, count = 0.0, 0
    for length, group in by_len.items():
        batch = torch.tensor([ids[b:e] for b, e, _ in group], dtype=torch.long)
        logp = F.log_softmax(model(batch).double(), dim=-1)
        for k, (b, e, first) in enumerate(group):
            rows = torch.arange(first - b - 1, e - b - 1)
            targets = torch.tensor(ids[first:e], dtype=torch.long)
            total -= float(logp[k, rows, targets].sum())
            count += e - first
    return total / count, count, len(windows)


def val_text():
    """tinyshakespeare's validation split, cut where tools/train_demo.py cuts it (90/10 by characters)."""
    path = os.path.join(R.DATA, 'tinyshakespeare.txt')
    assert os.path.isfile(path), f"missing {path}"
    with open(path, 'r') as f:
        data = f.read()
    return data[int(len(data) * 0.9):]


def mmgpt_perplexity(suite, model_path, text_path, ctx=None, stride=None, json_out=True):
    args = ['perplexity', '-m', model_path, '-f', text_path, '--threads', 2]
    if ctx is not None:
        args += ['--ctx', ctx]
    if stride is not None:
        args += ['--stride', stride]
    if json_out:
        args.append('--json')
    _, out, err = R.run_cli(suite.mmgpt, args)
    # stderr is not a terminal here: no progress display may appear in it.
    assert err == '', f"`mmgpt {' '.join(map(str, args))}` wrote to stderr: {err[:300]!r}"
    if not json_out:
        return out
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        raise AssertionError(f"--json output does not parse ({e}): {out[:300]!r}")


def compare(suite, model, model_path, text, stoi, ctx, stride, label):
    text_path = suite.path(f'{label}.txt')
    with open(text_path, 'w') as f:
        f.write(text)
    ids = [stoi[c] for c in text]
    got = mmgpt_perplexity(suite, model_path, text_path, ctx, stride)
    n_ctx = model.block_size
    want_ctx = ctx if ctx is not None else n_ctx
    want_stride = stride if stride is not None else max(1, want_ctx // 2)
    want_nll, want_tokens, want_windows = ref_perplexity(model, ids, want_ctx, want_stride)
    where = f"{label} ({len(ids)} tokens, ctx {want_ctx}, stride {want_stride})"
    assert (got['ctx'], got['stride']) == (want_ctx, want_stride), f"{where}: mmgpt used ctx/stride {got['ctx']}/{got['stride']}"
    assert got['tokens'] == want_tokens, f"{where}: mmgpt scored {got['tokens']} tokens, reference {want_tokens}"
    assert got['windows'] == want_windows, f"{where}: mmgpt ran {got['windows']} windows, reference {want_windows}"
    rel = abs(got['mean_nll'] - want_nll) / abs(want_nll)
    assert rel <= NLL_REL_TOL, f"{where}: mean NLL mmgpt {got['mean_nll']:.8f} vs torch {want_nll:.8f} (rel {rel:.3g})"
    ppl_rel = abs(got['perplexity'] - torch.tensor(want_nll).exp().item()) / torch.tensor(want_nll).exp().item()
    assert ppl_rel <= 2 * NLL_REL_TOL * max(1.0, want_nll), f"{where}: perplexity {got['perplexity']} vs exp(NLL)"
    assert got['tokens_per_second'] > 0 and got['seconds'] >= 0, f"{where}: bad timing fields {got}"
    return f"{label} ctx {want_ctx} stride {want_stride}: nll {got['mean_nll']:.6f} (rel {rel:.1e}), {want_tokens} tokens"


def main():
    suite = R.Suite(__doc__.split('\n')[1])
    state = {}

    def demo_convert():
        model, meta, ckpt_path, _ = R.load_demo()
        out = suite.path('demo.mmgpt')
        R.convert(suite, ckpt_path, out)
        state['demo'] = (model, meta['stoi'], out)
        state['val'] = val_text()
        return [f"val split {len(state['val'])} characters"]

    def demo_windows():
        assert 'demo' in state, 'demo conversion failed'
        model, stoi, out = state['demo']
        text = state['val'][:3000]
        lines = [compare(suite, model, out, text, stoi, None, None, 'demo_default'),
                 compare(suite, model, out, text, stoi, 64, 64, 'demo_stride_eq_ctx'),
                 compare(suite, model, out, text, stoi, 17, 5, 'demo_ctx17'),
                 compare(suite, model, out, text[:301], stoi, 16, 1, 'demo_stride1'),
                 compare(suite, model, out, text[:50], stoi, 2, 1, 'demo_ctx2'),
                 compare(suite, model, out, text[:40], stoi, 64, 7, 'demo_one_window')]
        return lines

    def demo_text_output():
        assert 'demo' in state, 'demo conversion failed'
        _, _, out = state['demo']
        path = suite.path('text_output.txt')
        with open(path, 'w') as f:
            f.write(state['val'][:2000])
        line = mmgpt_perplexity(suite, out, path, json_out=False)
        m = re.fullmatch(r'mean_nll (\S+) nats  perplexity (\S+)  tokens (\d+)  windows (\d+)  ctx (\d+)  '
                         r'stride (\d+)  tokens/s (\S+)\n', line)
        assert m, f"text output not in the documented format: {line!r}"
        j = mmgpt_perplexity(suite, out, path)
        assert abs(float(m.group(1)) - j['mean_nll']) < 1e-4 and int(m.group(3)) == j['tokens'] == 1999, (line, j)
        return [line.strip()]

    def padded_vocab_model():
        cfg = dict(n_layer=2, n_head=2, n_embd=32, block_size=24, bias=False, vocab_size=128, dropout=0.0)
        model = R.randomize_(R.NanoGPT(cfg), seed=41)
        d = suite.path('padded')
        os.makedirs(d)
        R.torch_save(R.nanogpt_checkpoint(model, compiled=True, with_optimizer=False), os.path.join(d, 'ckpt.pt'))
        shutil.copyfile(os.path.join(R.DEMO_DIR, 'meta.pkl'), os.path.join(d, 'meta.pkl'))  # 65 chars < 128 rows
        with open(os.path.join(d, 'meta.pkl'), 'rb') as f:
            stoi = pickle.load(f)['stoi']
        out = suite.path('padded.mmgpt')
        R.convert(suite, os.path.join(d, 'ckpt.pt'), out)
        model.double().eval()
        text = val_text()[5000:6500]
        return [compare(suite, model, out, text, stoi, None, None, 'padded_default'),
                compare(suite, model, out, text, stoi, 24, 24, 'padded_stride_eq_ctx'),
                compare(suite, model, out, text, stoi, 7, 3, 'padded_ctx7')]

    def errors():
        assert 'demo' in state, 'demo conversion failed'
        model, _, out = state['demo']
        past = model.block_size + 1  # one more than the model's context
        bad = suite.path('bad_char.txt')
        with open(bad, 'w', encoding='utf-8') as f:
            f.write('To be, or not to b\u00e9')
        empty = suite.path('empty.txt')
        open(empty, 'w').close()
        ok = suite.path('ok.txt')
        with open(ok, 'w') as f:
            f.write('To be, or not to be')
        cases = [(['-f', suite.path('nope.txt')], 'not found'), (['-f', empty], 'empty'),
                 (['-f', bad], 'U+00E9'), (['-f', ok, '--ctx', 1], 'ctx 1 '), (['-f', ok, '--ctx', past], f'ctx {past} '),
                 (['-f', ok, '--ctx', 8, '--stride', 9], 'stride 9 ')]
        for extra, needle in cases:
            rc, stdout, stderr = R.run_cli(suite.mmgpt, ['perplexity', '-m', out] + extra, expect_ok=False)
            assert rc == 1 and stdout == '', f"{extra}: exit {rc}, stdout {stdout!r}"
            assert stderr.count('\n') == 1 and needle in stderr, f"{extra}: expected one line naming {needle!r}: {stderr!r}"
        return [f"{len(cases)} bad inputs give one-line errors"]

    suite.case('perplexity_demo_convert', demo_convert)
    suite.case('perplexity_demo_windows', demo_windows)
    suite.case('perplexity_demo_text_output', demo_text_output)
    suite.case('perplexity_padded_vocab_random_nanogpt', padded_vocab_model)
    suite.case('perplexity_errors', errors)
    suite.finish()


if __name__ == '__main__':
    main()
