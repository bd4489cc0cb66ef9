"""mmgpt serve with the modern block: a nanochat checkpoint (sliding windows,
the smear of the previous token, value embeddings) and a Hugging Face Llama
directory (grouped-query heads, rotary positions), each with GPT-2's
byte-level vocabulary. Completions equal `mmgpt generate`, alone, under 8
concurrent clients (the steps batched) and from the prefix cache: a prompt
that extends a cached one resumes after the cached tokens, where nanochat's
smear must read the token before the new ones from the cache."""
import os
import shutil
import sys
import threading

import torch

from server_harness import (ROOT, W, Server, body_for, check, finish, generate_cli, run)

sys.path.insert(0, os.path.join(ROOT, 'tests', 'reference'))
import ref_hf_modern as M  # noqa: E402
import ref_nanochat as N  # noqa: E402

GPT2 = os.path.join(ROOT, 'data', 'gpt2')
VOCAB = 50257


def body(c):
    """The completions request for case c, without the demo's model name."""
    b = body_for(**c)
    del b['model']
    return b


def convert(src, name, *extra):
    out = os.path.join(W, name + '.mmgpt')
    rc, _, err = run('convert', src, '-o', out, '--tokenizer', GPT2, *extra)
    if rc != 0:
        raise SystemExit(f'converting {name} failed: {err}')
    return out


def nanochat_model():
    cfg = N.nanochat_config(sequence_len=256, vocab_size=VOCAB, n_layer=4, n_head=4, n_kv_head=2, n_embd=64,
                            window_pattern='SSSL')  # layers 0-2 see 129 positions
    d = os.path.join(W, 'nanochat')
    shutil.rmtree(d, ignore_errors=True)
    model_path, _ = N.write_nanochat_checkpoint(N.randomize_nanochat_(N.NanochatGPT(cfg), 81), d, 300)
    return convert(model_path, 'nanochat')


def llama_model():
    cfg = M.config_json('llama', hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                        intermediate_size=96, max_position_embeddings=256)
    d = os.path.join(W, 'llama')
    shutil.rmtree(d, ignore_errors=True)
    M.write_hf_modern_dir(M.randomize_(M.build(cfg), 82), d)
    return convert(d, 'llama', '--dtype', 'q8_0')


LONG = ('First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First Citizen: You are all '
        'resolved rather to die than to famish? All: Resolved. resolved. First Citizen: First, you know Caius '
        'Marcius is chief enemy to the people. All: We know it, we know it. First Citizen: Let us kill him, and '
        "we'll have corn at our own price. Is't a verdict? All: No more talking on't; let it be done: away, away!")

for name, model in (('nanochat', nanochat_model()), ('llama q8_0', llama_model())):
    torch.manual_seed(0)
    srv = Server(model, '--threads', '2', '--parallel', '8', name=name.replace(' ', '_'))
    cases = [dict(prompt='ROMEO:', n=24, greedy=True),
             dict(prompt='To be, or not', n=30, seed=3, temperature=0.8, top_k=40),
             dict(prompt=LONG, n=20, greedy=True),  # past nanochat's 129-position windows
             dict(prompt=LONG[:200], n=16, seed=9)]
    expected = [generate_cli(model, **c) for c in cases]
    for c, want in zip(cases, expected):
        status, r = srv.complete(**body(c))
        check(f'{name}: completion equals generate ({len(c["prompt"])} chars)',
              status == 200 and r['choices'][0]['text'] == want, (status, r, want))

    many = cases * 2
    results = [None] * len(many)

    def client(i):
        status, r = srv.complete(**body(many[i]))
        results[i] = r['choices'][0]['text'] if status == 200 else (status, r)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(many))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [i for i in range(len(many)) if results[i] != expected[i % len(cases)]]
    check(f'{name}: 8 concurrent clients each equal generate', not bad, [(i, results[i]) for i in bad[:2]])
    check(f'{name}: the concurrent steps were batched',
          srv.metric('mmgpt_step_sequences_total') > srv.metric('mmgpt_steps_total'))

    # The prefix cache: LONG is cached; a prompt extending it runs only its new tokens.
    before = srv.metric('mmgpt_prompt_tokens_cached_total')
    extended = dict(prompt=LONG + ' Second Citizen: One word, good citizens.', n=20, greedy=True)
    status, r = srv.complete(**body(extended))
    check(f'{name}: a prompt extending a cached one equals generate',
          status == 200 and r['choices'][0]['text'] == generate_cli(model, **extended), r)
    check(f'{name}: ... and reused the cached prefix', srv.metric('mmgpt_prompt_tokens_cached_total') - before > 50,
          srv.metric('mmgpt_prompt_tokens_cached_total') - before)
    check(f'{name}: the server stops cleanly', srv.stop() == 0)

finish()
