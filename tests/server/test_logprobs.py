"""`mmgpt serve`: log-probabilities, prompt lists and n.

Every log-probability the server reports is checked against the log-softmax
(float64, numpy) of the float32 logits `mmgpt logits` writes for the same
tokens, within TOLERANCE:
  /v1/completions with logprobs N (tokens, token_logprobs, top_logprobs,
    text_offset), with echo (the prompt's tokens first, the first one null),
    max_tokens 0, streamed and not;
  lm-evaluation-harness's exact loglikelihood requests (local-completions:
    token id lists, echo, logprobs 1, max_tokens 1; and the older max_tokens
    0), parsed as its parse_logprobs does;
  /v1/chat/completions with logprobs and top_logprobs, streamed and not,
    raw and through the official OpenAI client.
A list of prompts gives one choice per prompt, each what that prompt gives
alone; n > 1 gives choice j the seed + j, each what `mmgpt generate` gives
with that seed. Models: the bundled demo (characters) and tiny-gpt2-hf (GPT-2's
byte-level BPE, so tokens that are not whole characters are seen).
"""
import json
import os

import numpy as np

from server_harness import W, Server, check, demo_model, finish, generate_cli, gpt2_model, openai_client, run


# |server - reference| <= TOLERANCE * (1 + |reference|), about two float32 roundings: the server sums the
# exponentials in double and rounds the result to float32 once.
TOLERANCE = 1e-7
worst = [0.0]


def tokenize(model, text):
    rc, out, err = run('tokenize', '-m', model, '-p', text)
    assert rc == 0, err
    return [int(t) for t in out.split()]


def reference(model, ids):
    """log_softmax of `mmgpt logits` for ids: rows [len(ids), vocab], float64."""
    path = os.path.join(W, 'logits.f32')
    rc, _, err = run('logits', '-m', model, '--ids', ' '.join(map(str, ids)), '-o', path)
    assert rc == 0, err
    x = np.fromfile(path, dtype='<f4').astype(np.float64).reshape(len(ids), -1)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True)), x


def close(got, want):
    err = abs(got - want) / (1 + abs(want))
    worst[0] = max(worst[0], err)
    return err <= TOLERANCE



def check_legacy(name, model, prompt_ids, lp, generated, top_n, echo=False):
    """A completions logprobs object against the reference for prompt + generated tokens."""
    ids = prompt_ids + generated
    logsm, raw = reference(model, ids)
    first = 0 if echo else len(prompt_ids)
    n = len(ids) - first
    ok = all(len(lp[k]) == n for k in ('tokens', 'token_logprobs', 'top_logprobs', 'text_offset'))
    check(f'{name}: one entry per token', ok, {k: len(v) for k, v in lp.items()})
    if not ok:
        return
    values_ok, tops_ok, detail = True, True, None
    for i in range(n):
        pos = first + i  # the token at pos is predicted by row pos - 1
        if pos == 0:
            values_ok &= lp['token_logprobs'][i] is None and lp['top_logprobs'][i] is None
            continue
        row = logsm[pos - 1]
        if not close(lp['token_logprobs'][i], row[ids[pos]]):
            values_ok, detail = False, (i, lp['token_logprobs'][i], row[ids[pos]])
        top = lp['top_logprobs'][i]
        order = sorted(range(len(row)), key=lambda t: (-raw[pos - 1][t], t))[:top_n]
        want = sorted(row[t] for t in set(order) | {ids[pos]})  # keyed by distinct token strings
        got = sorted(top.values())
        if len(got) != len(want) or not all(close(a, b) for a, b in zip(got, want)):
            tops_ok = False
    check(f'{name}: token_logprobs are the log-softmax of mmgpt logits', values_ok, detail)
    check(f'{name}: top_logprobs hold the top {top_n} and the chosen token', tops_ok, lp['top_logprobs'][:3])
    offsets = lp['text_offset']
    check(f'{name}: text_offset grows by each token\'s characters',
          offsets[0] == 0 and all(b >= a for a, b in zip(offsets, offsets[1:])), offsets)


DEMO = demo_model()
srv = Server(DEMO, '--max-queue', '20', name='logprobs-demo')
try:
    # Generated tokens' logprobs, greedy and sampled.
    prompt = 'ROMEO:'
    pids = tokenize(DEMO, prompt)
    for name, extra in [('greedy', {'temperature': 0}), ('sampled', {'temperature': 1.1, 'seed': 5, 'top_k': 10})]:
        status, r = srv.complete(prompt=prompt, max_tokens=12, logprobs=5, **extra)
        ok = status == 200 and r['choices'][0]['logprobs'] is not None
        check(f'{name}: logprobs 5 answered', ok, r)
        if not ok:
            continue
        lp = r['choices'][0]['logprobs']
        gen = [tokenize(DEMO, t)[0] for t in lp['tokens']]
        check(f'{name}: the tokens spell the text', ''.join(lp['tokens']) == r['choices'][0]['text'], lp['tokens'])
        check_legacy(name, DEMO, pids, lp, gen, 5)
        check(f'{name}: usage counts the tokens', r['usage']['completion_tokens'] == len(gen), r['usage'])
        if name == 'greedy':
            check('greedy: each token is its position\'s most likely',
                  all(lp['token_logprobs'][i] == max(lp['top_logprobs'][i].values()) for i in range(len(gen))))
        # Streamed: the same tokens and values, spread over the chunks.
        status, events, done = srv.stream(prompt=prompt, max_tokens=12, logprobs=5, **extra)
        got = {'tokens': [], 'token_logprobs': [], 'top_logprobs': [], 'text_offset': []}
        for e in events[:-1]:
            for k in got:
                got[k] += e['choices'][0]['logprobs'][k]
        check(f'{name}: streamed logprobs are the whole answer\'s', status == 200 and done and got == lp,
              (got['tokens'], lp['tokens']))
        check(f'{name}: the last chunk has the finish_reason and no tokens',
              events[-1]['choices'][0]['finish_reason'] == 'length' and
              events[-1]['choices'][0]['logprobs']['tokens'] == [], events[-1])

    # Echo: the prompt's tokens first, its first token's values null; max_tokens 0 scores only.
    text = 'JULIET: Wherefore art thou'
    tids = tokenize(DEMO, text)
    for max_tokens in (0, 3):
        status, r = srv.complete(prompt=text, max_tokens=max_tokens, logprobs=2, echo=True, temperature=0)
        ok = status == 200
        check(f'echo, max_tokens {max_tokens}: answered', ok, r)
        if ok:
            c = r['choices'][0]
            lp = c['logprobs']
            gen = [tokenize(DEMO, t)[0] for t in lp['tokens'][len(tids):]]
            check(f'echo, max_tokens {max_tokens}: the text is the prompt and its completion',
                  c['text'].startswith(text) and len(gen) == max_tokens and c['text'] == ''.join(lp['tokens']),
                  c['text'])
            check_legacy(f'echo, max_tokens {max_tokens}', DEMO, tids, lp, gen, 2, echo=True)
    status, events, done = srv.stream(prompt=text, max_tokens=2, logprobs=1, echo=True, temperature=0)
    toks = [t for e in events for t in (e['choices'][0]['logprobs'] or {}).get('tokens', [])] if status == 200 else []
    first = events[0]['choices'][0] if events else {}
    check('echo streamed: the first chunk is the prompt with its logprobs',
          status == 200 and done and first.get('text') == text and len(first['logprobs']['tokens']) == len(tids) and
          first['logprobs']['token_logprobs'][0] is None and len(toks) == len(tids) + 2, events[:2])

    # lm-evaluation-harness's loglikelihood requests: token id lists, as its local-completions sends them.
    pairs = [('The quick brown', ' fox'), ('To be, or not', ' to be'), ('ROMEO', ':')]
    prompts, ctxlens = [], []
    for ctx, cont in pairs:
        whole = tokenize(DEMO, ctx + cont)
        prompts.append(whole)
        ctxlens.append(len(tokenize(DEMO, ctx)))
    for max_tokens in (1, 0):
        body = {'model': 'demo', 'prompt': prompts, 'temperature': 0, 'max_tokens': max_tokens, 'logprobs': 1,
                'seed': 1234, 'echo': True}
        status, _, data = srv.request('POST', '/v1/completions', body)
        out = json.loads(data)
        ok = status == 200 and len(out['choices']) == len(prompts)
        check(f'harness shape, max_tokens {max_tokens}: one choice per prompt', ok, out)
        if not ok:
            continue
        good = True
        for choice, ctxlen, ids in zip(sorted(out['choices'], key=lambda c: c['index']), ctxlens, prompts):
            # lm_eval.models.openai_completions.LocalCompletionsAPI.parse_logprobs, with max_tokens 1
            # (the older max_tokens 0 has no generated token to drop)
            end = -1 if max_tokens == 1 else None
            logprobs = choice['logprobs']['token_logprobs'][ctxlen:end]
            tops = choice['logprobs']['top_logprobs'][ctxlen:end]
            is_greedy = all(tok == max(top.values()) for tok, top in zip(logprobs, tops))
            logsm, raw = reference(DEMO, ids)
            want = sum(logsm[p - 1][ids[p]] for p in range(ctxlen, len(ids)))
            want_greedy = all(int(np.argmax(raw[p - 1])) == ids[p] for p in range(ctxlen, len(ids)))
            good &= close(sum(logprobs), want) and is_greedy == want_greedy and len(logprobs) == len(ids) - ctxlen
        check(f'harness shape, max_tokens {max_tokens}: loglikelihood and is_greedy as the reference', good)

    # A list of prompts: each choice is what its prompt gives alone.
    texts = ['ROMEO:', 'JULIET:', 'To be']
    status, r = srv.complete(prompt=texts, max_tokens=10, temperature=0.8, seed=11)
    ok = status == 200 and [c['index'] for c in r['choices']] == [0, 1, 2]
    check('a list of prompts: one choice each, indexed', ok, r)
    if ok:
        alone = [srv.complete(prompt=t, max_tokens=10, temperature=0.8, seed=11)[1]['choices'][0]['text']
                 for t in texts]
        check('a list of prompts: each choice is its prompt\'s alone', [c['text'] for c in r['choices']] == alone,
              (r['choices'], alone))
        check('a list of prompts: usage adds them up', r['usage']['prompt_tokens'] == sum(len(tokenize(DEMO, t))
                                                                                          for t in texts), r['usage'])

    # n: choice j has seed + j, each what mmgpt generate gives with that seed.
    status, r = srv.complete(prompt='ROMEO:', max_tokens=10, temperature=0.9, top_k=200, seed=40, n=3)
    ok = status == 200 and len(r['choices']) == 3
    check('n 3: three choices', ok, r)
    if ok:
        want = [generate_cli(DEMO, 'ROMEO:', 10, temperature=0.9, top_k=200, seed=40 + j) for j in range(3)]
        check('n 3: choice j is mmgpt generate --seed seed + j', [c['text'] for c in r['choices']] == want,
              (r['choices'], want))
        check('n 3: the samples differ', len(set(want)) == 3, want)
        check('n 3: usage counts the prompt once and every choice\'s tokens',
              r['usage']['prompt_tokens'] == len(pids) and r['usage']['completion_tokens'] == 30, r['usage'])
    status, events, done = srv.stream(prompt=['ROMEO:', 'JULIET:'], n=2, max_tokens=6, temperature=0.9, seed=40,
                                      stream_options={'include_usage': True})
    texts_by_index = {}
    finished = set()
    for e in events:
        for c in e['choices']:
            texts_by_index[c['index']] = texts_by_index.get(c['index'], '') + c['text']
            if c['finish_reason']:
                finished.add(c['index'])
    status2, whole = srv.complete(prompt=['ROMEO:', 'JULIET:'], n=2, max_tokens=6, temperature=0.9, seed=40)
    check('streamed, 2 prompts x n 2: each choice\'s text is the whole answer\'s',
          status == 200 and done and finished == {0, 1, 2, 3} and
          [texts_by_index[i] for i in range(4)] == [c['text'] for c in whole['choices']], (texts_by_index, whole))
    check('streamed: the usage event counts all four', events[-1]['usage']['completion_tokens'] == 24, events[-1])

    # More completions than the queue holds: a 400 that says so; nothing is left running.
    status, r = srv.complete(prompt=['a'] * 7, n=3, max_tokens=2)
    check('21 completions on a queue of 20: 400', status == 400 and r['error']['param'] == 'prompt' and
          '--max-queue' in r['error']['message'], r)
    check('nothing is left running', srv.metric('mmgpt_sequences_running') == 0)
finally:
    check('the demo server stops cleanly', srv.stop() == 0)

# GPT-2's byte-level tokens: a token that is not whole characters is named "bytes:\x..".
GPT2 = gpt2_model()
TEMPLATE = os.path.join(W, 'chat.jinja')
with open(TEMPLATE, 'w') as f:
    f.write("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
srv = Server(GPT2, '--chat-template', TEMPLATE, name='logprobs-gpt2')
try:
    text = 'naïve café — 東京 🙂 done'
    tids = tokenize(GPT2, text)
    status, r = srv.complete(prompt=text, max_tokens=6, logprobs=3, echo=True, temperature=0)
    ok = status == 200
    check('gpt2 echo: answered', ok, r)
    if ok:
        lp = r['choices'][0]['logprobs']
        check('gpt2: partial characters are bytes:\\x.. tokens', any(t.startswith('bytes:\\x') for t in lp['tokens']),
              lp['tokens'])
        rc, out, _ = run('generate', '-m', GPT2, '-p', text, '-n', '6', '--greedy', '--print-ids')
        gen = [int(t) for t in out.split()]
        check_legacy('gpt2 echo', GPT2, tids, lp, gen, 3, echo=True)
        check('gpt2: text_offset counts characters', lp['text_offset'][len(tids)] == len(text), lp['text_offset'])

    # Chat: logprobs and top_logprobs in the chat shape, equal to completions on the rendered prompt.
    messages = [{'role': 'user', 'content': 'Say something.'}]
    body = {'messages': messages, 'max_tokens': 8, 'temperature': 0, 'logprobs': True, 'top_logprobs': 4}
    status, r = srv.json('POST', '/v1/chat/completions', body)
    ok = status == 200 and r['choices'][0]['logprobs'] is not None
    check('chat logprobs: answered', ok, r)
    if ok:
        content = r['choices'][0]['logprobs']['content']
        rendered = 'user: Say something.\nassistant:'
        pids = tokenize(GPT2, rendered)
        status, c = srv.complete(prompt=rendered, max_tokens=8, temperature=0, logprobs=4)
        legacy = c['choices'][0]['logprobs']
        check('chat: one entry per token, each with 4 alternatives',
              len(content) == len(legacy['tokens']) == r['usage']['completion_tokens'] and
              all(len(e['top_logprobs']) == 4 for e in content), content[:2])
        check('chat: the values are completions\'', [e['logprob'] for e in content] == legacy['token_logprobs'])
        check('chat: bytes spell the message', b''.join(bytes(e['bytes']) for e in content).decode('utf-8', 'replace')
              == r['choices'][0]['message']['content'], content)
        status, events, done = srv.stream('/v1/chat/completions', **body)
        streamed = [e2 for e in events for ch in e['choices'] if ch['logprobs'] for e2 in ch['logprobs']['content']]
        check('chat streamed: the same entries', status == 200 and done and streamed == content,
              (len(streamed), len(content)))
        # Through the official client: chat with logprobs and n 2, completions with echo and logprobs.
        res = openai_client(srv, [
            {'name': 'chat', 'op': 'chat', 'body': {**body, 'n': 2, 'temperature': 0.9, 'seed': 3}},
            {'name': 'chat_stream', 'op': 'chat_stream', 'body': body},
            {'name': 'complete', 'op': 'complete',
             'body': {'model': 'tiny-gpt2', 'prompt': text, 'max_tokens': 0, 'echo': True, 'logprobs': 1}},
        ])
        ch = res.get('chat', {}).get('response', {})
        check('client chat: n 2, each with its logprobs', len(ch.get('choices', [])) == 2 and
              all(c['logprobs']['content'] and b''.join(bytes(e['bytes']) for e in c['logprobs']['content'])
                  .decode('utf-8', 'replace') == c['message']['content'] for c in ch['choices']), ch)
        chunks = res.get('chat_stream', {}).get('chunks', [])
        streamed = [e2 for e in chunks for c in e['choices'] if c.get('logprobs') for e2 in c['logprobs']['content']]
        check('client chat stream: the entries', streamed == content, (len(streamed), chunks[:2]))
        cp = res.get('complete', {}).get('response', {})
        lp = cp.get('choices', [{}])[0].get('logprobs') or {}
        check('client completions: echo with max_tokens 0 scores the prompt',
              len(lp.get('tokens', [])) == len(tids) and lp['token_logprobs'][0] is None, cp)
finally:
    check('the gpt2 server stops cleanly', srv.stop() == 0)

print(f'largest relative difference from the reference: {worst[0]:.3g} (tolerance {TOLERANCE})')
finish()
