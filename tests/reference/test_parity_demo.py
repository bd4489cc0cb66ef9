#!/usr/bin/python3
"""Parity of mmgpt with PyTorch on the bundled demo model (models/demo).

The demo is a trained character-level nanoGPT (ckpt.pt + meta.pkl). Checks:
logits of an encoded text prompt; greedy continuation from ids; and text
generation from `-p "ROMEO:"` running past the context (sliding window),
compared with PyTorch's greedy text decoded through meta.pkl's itos.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mmgpt_ref as R  # noqa: E402



def main():
    suite = R.Suite(__doc__.split('\n')[1])
    state = {}

    def convert():
        model, meta, ckpt_path, meta_path = R.load_demo()
        out = suite.path('demo.mmgpt')
        # No --tokenizer: meta.pkl beside ckpt.pt must be found, as in the README's demo command.
        dt = R.convert(suite, ckpt_path, out)
        info = json.loads(R.run_cli(suite.mmgpt, ['inspect', out, '--json'])[1])
        assert info['tokenizer']['kind'] == 'char' and info['tokenizer']['tokens'] == len(meta['stoi']), info['tokenizer']
        state.update(model=model, meta=meta, out=out)
        a = model.cfg
        return [f"converted in {dt:.1f}s (n_layer {a['n_layer']}, n_head {a['n_head']}, n_embd {a['n_embd']}, "
                f"block_size {a['block_size']}, vocab {a['vocab_size']})"]

    def ids_checks():
        assert state, 'demo conversion failed'
        stoi = state['meta']['stoi']
        prompt = [stoi[c] for c in 'ROMEO:\nWhat say you']
        return R.check_model(suite, state['model'], state['out'], prompt, n_gen=20)

    def text_past_context():
        assert state, 'demo conversion failed'
        model, meta, out = state['model'], state['meta'], state['out']
        n = model.block_size + 36  # crosses the context: the window slides
        prompt_text = 'ROMEO:'
        prompt = [meta['stoi'][c] for c in prompt_text]
        want_ids = R.ref_greedy(model, prompt, n)
        want_text = ''.join(meta['itos'][i] for i in want_ids)
        got_ids = R.mmgpt_greedy(suite.mmgpt, out, prompt, n)
        if got_ids != want_ids:
            i = next((k for k in range(min(len(got_ids), len(want_ids))) if got_ids[k] != want_ids[k]),
                     min(len(got_ids), len(want_ids)))
            raise AssertionError(f"--ids greedy differs from step {i}:\n  mmgpt {got_ids}\n  torch {want_ids}")
        _, stdout, _ = R.run_cli(suite.mmgpt, ['generate', '-m', out, '-p', prompt_text, '-n', n, '--greedy',
                                               '--ignore-eos'])
        assert want_text in stdout, (f"-p {prompt_text!r} greedy text differs:\n  mmgpt stdout {stdout!r}\n"
                                     f"  torch continuation {want_text!r}")
        _, stdout, _ = R.run_cli(suite.mmgpt, ['generate', '-m', out, '-p', prompt_text, '-n', n, '--greedy',
                                               '--ignore-eos', '--print-ids'])
        got = [int(t) for t in stdout.split()]
        assert got == want_ids, f"-p with --print-ids: mmgpt {got}\n  torch {want_ids}"
        return [f"greedy {n} tokens past ctx {model.block_size} match (ids and text); "
                f"text: {want_text[:60]!r}..."]

    suite.case('demo_convert', convert)
    suite.case('demo_logits_and_greedy_ids', ids_checks)
    suite.case('demo_prompt_text_past_context', text_past_context)
    suite.finish()


if __name__ == '__main__':
    main()
