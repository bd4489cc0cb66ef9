"""`mmgpt generate --logprobs N` and `--prompt-logprobs`: JSON Lines, one
object per prompt, whose values are the log-softmax (float64, numpy) of the
logits `mmgpt logits` writes for the same tokens, within 1e-7 x (1 + |value|),
and whose tokens and text are what plain `mmgpt generate` gives for the same
seed.

Run by ctest as: /usr/bin/python3 test_generate_logprobs.py --mmgpt PATH --workdir DIR
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import W, check, expect_error, finish, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = 1e-7

model = os.path.join(W, 'demo.mmgpt')
rc, _, err = run('convert', os.path.join(ROOT, 'models', 'demo', 'ckpt.pt'), '-o', model)
if rc != 0:
    sys.exit(f'FAIL: converting the demo model: {err}')


def tokenize(text):
    rc, out, err = run('tokenize', '-m', model, '-p', text)
    assert rc == 0, err
    return [int(t) for t in out.split()]


def reference(ids):
    path = os.path.join(W, 'logits.f32')
    rc, _, err = run('logits', '-m', model, '--ids', ' '.join(map(str, ids)), '-o', path)
    assert rc == 0, err
    x = np.fromfile(path, dtype='<f4').astype(np.float64).reshape(len(ids), -1)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True)), x


def positions_ok(entries, ids, first, top_n):
    """entries[i] is token ids[first + i], predicted by the logits row before it."""
    logsm, raw = reference(ids)
    for i, e in enumerate(entries):
        pos = first + i
        row = logsm[pos - 1]
        order = sorted(range(len(row)), key=lambda t: (-raw[pos - 1][t], t))[:top_n]
        if e['token'] != ids[pos] or abs(e['logprob'] - row[ids[pos]]) > TOLERANCE * (1 + abs(row[ids[pos]])):
            return False, (i, e, row[ids[pos]])
        if [t['token'] for t in e['top']] != order or \
                any(abs(t['logprob'] - row[t['token']]) > TOLERANCE * (1 + abs(row[t['token']])) for t in e['top']):
            return False, (i, e['top'], order)
    return True, None


prompt = 'ROMEO: Is the day so young?'
pids = tokenize(prompt)
for name, opts in [('greedy', ['--greedy']), ('seeded', ['--seed', '9', '--temperature', '1.1'])]:
    rc, out, err = run('generate', '-m', model, '-p', prompt, '-n', '15', '--logprobs', '4', *opts)
    lines = out.splitlines()
    ok = rc == 0 and len(lines) == 1
    check(f'{name}: one JSON line', ok, (rc, out, err))
    if not ok:
        continue
    r = json.loads(lines[0])
    rc, plain, _ = run('generate', '-m', model, '-p', prompt, '-n', '15', *opts)
    check(f'{name}: the text is plain generate\'s', plain == prompt + r['text'] + '\n', (plain, r['text']))
    rc, ids, _ = run('generate', '-m', model, '-p', prompt, '-n', '15', '--print-ids', *opts)
    check(f'{name}: the tokens are plain generate\'s', r['tokens'] == [int(t) for t in ids.split()], r['tokens'])
    check(f'{name}: one entry per token, with its piece', [e['token'] for e in r['logprobs']] == r['tokens'] and
          ''.join(e['piece'] for e in r['logprobs']) == r['text'], r['logprobs'][:2])
    ok, detail = positions_ok(r['logprobs'], pids + r['tokens'], len(pids), 4)
    check(f'{name}: the values are the log-softmax of mmgpt logits', ok, detail)
    check(f'{name}: prompt_tokens and stop_reason', r['prompt_tokens'] == len(pids) and r['stop_reason'] == 'length', r)

# The prompt scored: -n 0 generates nothing.
rc, out, err = run('generate', '-m', model, '-p', prompt, '-n', '0', '--prompt-logprobs')
r = json.loads(out) if rc == 0 else {}
check('--prompt-logprobs -n 0: the prompt\'s tokens after the first, nothing generated',
      rc == 0 and r['tokens'] == [] and len(r['prompt_logprobs']) == len(pids) - 1 and 'logprobs' not in r, (rc, out, err))
if rc == 0:
    ok, detail = positions_ok(r['prompt_logprobs'], pids, 1, 0)
    check('--prompt-logprobs: the values', ok, detail)

# A batch: one line per prompt, each as the prompt alone.
batch = os.path.join(W, 'batch.txt')
with open(batch, 'w') as f:
    f.write('ROMEO:\nJULIET: O\n')
rc, out, err = run('generate', '-m', model, '--batch-file', batch, '-n', '5', '--seed', '3', '--logprobs', '1',
                   '--prompt-logprobs')
lines = [json.loads(x) for x in out.splitlines()] if rc == 0 else []
alone = []
for p in ('ROMEO:', 'JULIET: O'):
    rc2, o, _ = run('generate', '-m', model, '-p', p, '-n', '5', '--seed', '3', '--logprobs', '1', '--prompt-logprobs')
    alone.append(json.loads(o))
check('--batch-file: a line per prompt, each what the prompt gives alone', rc == 0 and lines == alone, (out, err))

expect_error('--logprobs 21 is refused', 'generate', '-m', model, '-p', 'a', '--logprobs', '21', mentions=['--logprobs'])
expect_error('--logprobs needs a number', 'generate', '-m', model, '-p', 'a', '--logprobs', mentions=['--logprobs'])
finish()
