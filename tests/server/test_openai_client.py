"""`mmgpt serve` through the official OpenAI client: the npm package 'openai',
pinned by tests/server/openai/package-lock.json (scripts/setup.sh runs `npm ci`
there) at 6.49.0, the last release before 7.0 required Node 22. 6.x says Node
20 or later, yet runs on Debian 12's Node 18 (18.20.4+dfsg-1~deb12u3) with
Node's own fetch. v4 does not: it reads responses with node-fetch 2, which on
that Node build fails every chunked (streamed) response over a kept-alive
connection with 'Premature close'.

openai_client.mjs performs the requests (models.list, completions.create,
streamed with for await, errors, a stream left early) and prints what the
client returned; this script compares that with `mmgpt generate` for the
same options, with the demo model. A second server requires an API key.

The node binary is $MMGPT_NODE if set, else `node` on PATH.
"""
import json
import os
import shutil
import subprocess
import sys
import time

from server_harness import W, Server, body_for, check, demo_model, finish, generate_cli

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = os.path.join(HERE, 'openai', 'node_modules')
if not os.path.isfile(os.path.join(MODULES, 'openai', 'package.json')):
    sys.exit(f'FAIL: {MODULES}/openai is missing: run scripts/setup.sh (it runs `npm ci` there)')
NODE = os.environ.get('MMGPT_NODE') or shutil.which('node')
if not NODE:
    sys.exit('FAIL: node is not installed: run scripts/setup.sh (or name one in MMGPT_NODE)')

# 'openai' must resolve from the script's directory: run a copy of it in the
# work directory, next to a node_modules leading to tests/server/openai's.
SCRIPT = os.path.join(W, 'openai_client.mjs')
shutil.copy(os.path.join(HERE, 'openai_client.mjs'), SCRIPT)
os.symlink(MODULES, os.path.join(W, 'node_modules'))
p = subprocess.run([NODE, '--version'], capture_output=True, text=True)
print(f'node {p.stdout.strip()} ({NODE}), openai '
      f"{json.load(open(os.path.join(MODULES, 'openai', 'package.json')))['version']}", flush=True)

t_start = time.monotonic()
M = demo_model()
_specs = [0]


def client(server, ops, api_key=None):
    """Runs openai_client.mjs on these ops against the server: {op name: result}."""
    _specs[0] += 1
    spec = os.path.join(W, f'spec-{_specs[0]}.json')
    with open(spec, 'w') as f:
        json.dump({'baseURL': f'http://{server.host}:{server.port}/v1', 'apiKey': api_key,
                   'timeoutMs': 30000, 'ops': ops}, f)
    try:
        p = subprocess.run([NODE, SCRIPT, spec], cwd=W, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        check(f'openai_client.mjs ({spec})', False, 'timed out after 120 s')
        return {}
    try:
        if p.returncode != 0:
            raise ValueError(f'exit status {p.returncode}')
        return json.loads(p.stdout)
    except ValueError as e:
        check(f'openai_client.mjs ({spec})', False, f'{e}: {p.stdout[-1000:]!r} {p.stderr[-3000:]}')
        return {}


def text_of(res):
    """(text, finish_reason) of a completion or a stream's chunks; None when the client raised."""
    try:
        if 'response' in res:
            ch = res['response']['choices'][0]
            return ch['text'], ch['finish_reason']
        chunks = [k for k in res['chunks'] if k.get('choices')]
        return ''.join(k['choices'][0]['text'] for k in chunks), chunks[-1]['choices'][0]['finish_reason']
    except (KeyError, IndexError, TypeError):
        return None


def case(prompt, n, **opts):
    """A request and what `mmgpt generate` gives for it."""
    return {'body': body_for(prompt, n, **opts), 'text': generate_cli(M, prompt, n, **opts), 'n': n}


def ok(name, res):
    """False (and a failure) when the client raised."""
    if res is None:
        check(name, False, 'no result (see above)')
        return False
    if 'error' in res:
        check(name, False, f'the client raised {res["error"]}')
        return False
    return True


def check_usage(name, usage, n, finish_reason, prompt_tokens, text):
    if finish_reason == 'length':
        good_ct = usage.get('completion_tokens') == n
    else:  # the demo model is character-level: at least a token per character kept
        good_ct = len(text) <= usage.get('completion_tokens', -1) <= n
    check(f'{name}: usage', usage.get('prompt_tokens') == prompt_tokens and good_ct
          and usage.get('total_tokens') == usage.get('prompt_tokens', 0) + usage.get('completion_tokens', 0),
          f'{usage} (prompt {prompt_tokens} tokens, max_tokens {n}, finish {finish_reason})')


def check_completion(name, res, c, finish_reason, prompt_tokens, text=None):
    if not ok(name, res):
        return None
    r = res['response']
    text = c['text'] if text is None else text
    ch = r.get('choices') or [{}]
    check(f'{name}: text equals mmgpt generate', len(r['choices']) == 1 and ch[0].get('text') == text,
          f'{ch!r}, expected {text!r}')
    check(f'{name}: finish_reason {finish_reason}', ch[0].get('finish_reason') == finish_reason, repr(ch))
    check(f'{name}: object, model', r.get('object') == 'text_completion' and r.get('model') == MODEL_ID
          and isinstance(r.get('id'), str), f"{r.get('object')!r} {r.get('model')!r} {r.get('id')!r}")
    check_usage(name, r.get('usage') or {}, c['n'], finish_reason, prompt_tokens, c['text'])
    return r.get('usage')


def check_stream(name, res, c, finish_reason, usage=None):
    """usage: what the usage chunk must hold (include_usage), None: no chunk may have one."""
    if not ok(name, res):
        return
    chunks = res['chunks']
    texts = [k for k in chunks if k.get('choices')]
    text = ''.join(k['choices'][0].get('text', '') for k in texts)
    check(f'{name}: streamed text equals mmgpt generate', text == c['text'], f'{text!r}, expected {c["text"]!r}')
    reasons = [k['choices'][0].get('finish_reason') for k in texts]
    check(f'{name}: last chunk finish_reason {finish_reason}, none before',
          reasons[-1:] == [finish_reason] and not any(reasons[:-1]), repr(reasons))
    check(f'{name}: chunks have one id, object text_completion',
          len({k.get('id') for k in chunks}) == 1 and all(k.get('object') == 'text_completion' for k in chunks),
          repr(chunks[:2]))
    with_usage = [k for k in chunks if k.get('usage')]
    if usage is None:
        check(f'{name}: no usage without include_usage', not with_usage, repr(with_usage))
    else:
        last = chunks[-1] if chunks else {}
        check(f'{name}: the last chunk is the usage chunk, equal to the non-streamed usage',
              with_usage == [last] and last.get('choices') == [] and last.get('usage') == usage,
              f'{with_usage!r}, expected {usage!r} in the last chunk with choices []')


def check_error(name, res, cls, status, message):
    e = (res or {}).get('error')
    if not e:
        check(name, False, f'no exception: {res!r}')
        return
    check(f'{name}: {cls} (an OpenAI.APIError), status {status}',
          cls in e['kinds'] and 'APIError' in e['kinds'] and e['status'] == status, repr(e))
    check(f"{name}: the server's message", (e.get('error') or {}).get('message') == message
          and e['message'] == f'{status} {message}', f'{e["message"]!r} / {e.get("error")!r}, server: {message!r}')


# ---- the server without a key ------------------------------------------------------------------
srv = Server(M, name='server')
MODEL_ID = srv.ready_line.split('(model ')[1].split(',')[0]
check('ready line names the model demo', MODEL_ID == 'demo', srv.ready_line)


def prompt_tokens(prompt):
    status, r = srv.json('POST', '/tokenize', {'content': prompt})
    assert status == 200, (status, r)
    return r['tokens']


greedy = case('ROMEO:', 24, greedy=True)
sampled = case('First Citizen:\n', 32, temperature=0.9, top_k=20, top_p=0.95, min_p=0.02,
               repetition_penalty=1.1, seed=7)
full = generate_cli(M, 'To be, or not', 48, greedy=True)
stop_str = full[12:15]  # occurs in the greedy continuation, so generation stops there (or earlier)
stopped = case('To be, or not', 48, greedy=True, stop=('@@never@@', stop_str))
check('the stop case stops early', len(stopped['text']) < len(full), f'{stop_str!r} in {full!r}')
echo = dict(greedy, body={**greedy['body'], 'echo': True})
ids = dict(greedy, body={**greedy['body'], 'prompt': prompt_tokens('ROMEO:')})
with_usage = {'stream_options': {'include_usage': True}}


def streamed(c, **extra):
    return {**c, 'body': {**c['body'], **extra}}


# 16 different requests at once, half of them streamed.
prompts = ['ROMEO:', 'First Citizen:\n', 'To be, or not', 'JULIET:\nO ', 'KING RICHARD:', 'MENENIUS:\n',
           'Now is the winter', 'HAMLET:\n']
many = []
for i in range(16):
    if i % 3 == 0:
        c = case(prompts[i % 8], 40 + 4 * i, greedy=True)
    else:
        c = case(prompts[i % 8], 40 + 4 * i, temperature=0.8, top_k=30, top_p=0.9, seed=100 + i)
    many.append(c)

bad = {'max_tokens -1': {**greedy['body'], 'max_tokens': -1}, 'n 17': {**greedy['body'], 'n': 17}}
unknown = {**greedy['body'], 'model': 'no-such-model'}
server_says = {k: srv.complete(**b) for k, b in [*bad.items(), ('unknown model', unknown)]}

ops = [
    {'name': 'models', 'op': 'models'},
    {'name': 'greedy', 'op': 'complete', 'body': greedy['body']},
    {'name': 'sampled', 'op': 'complete', 'body': sampled['body']},
    {'name': 'stop', 'op': 'complete', 'body': stopped['body']},
    {'name': 'echo', 'op': 'complete', 'body': echo['body']},
    {'name': 'token ids', 'op': 'complete', 'body': ids['body']},
    {'name': 'greedy streamed', 'op': 'stream', 'body': greedy['body']},
    {'name': 'greedy streamed, usage', 'op': 'stream', 'body': {**greedy['body'], **with_usage}},
    {'name': 'sampled streamed, usage', 'op': 'stream', 'body': {**sampled['body'], **with_usage}},
    {'name': 'stop streamed, usage', 'op': 'stream', 'body': {**stopped['body'], **with_usage}},
    {'name': '16 at once', 'op': 'parallel',
     'ops': [{'name': str(i), 'op': 'stream' if i % 2 else 'complete', 'body': c['body']} for i, c in enumerate(many)]},
    *[{'name': k, 'op': 'complete', 'body': b} for k, b in bad.items()],
    {'name': 'max_tokens -1 streamed', 'op': 'stream', 'body': bad['max_tokens -1']},
    {'name': 'unknown model', 'op': 'complete', 'body': unknown},
]
out = client(srv, ops)
R = out.get

if ok('models.list()', R('models')):
    check('models.list() has the served model', MODEL_ID in R('models')['ids'], repr(R('models')))

usage = {}
for name, c, reason in [('greedy', greedy, 'length'), ('sampled', sampled, 'length'), ('stop', stopped, 'stop')]:
    usage[name] = check_completion(name, R(name), c, reason, len(prompt_tokens(c['body']['prompt'])))
check_completion('echo', R('echo'), echo, 'length', len(prompt_tokens('ROMEO:')), 'ROMEO:' + greedy['text'])
check_completion('token ids', R('token ids'), ids, 'length', len(ids['body']['prompt']))

check_stream('greedy streamed', R('greedy streamed'), greedy, 'length')
check_stream('greedy streamed, usage', R('greedy streamed, usage'), greedy, 'length', usage['greedy'])
check_stream('sampled streamed, usage', R('sampled streamed, usage'), sampled, 'length', usage['sampled'])
check_stream('stop streamed, usage', R('stop streamed, usage'), stopped, 'stop', usage['stop'])

if ok('16 at once', R('16 at once')):
    results = R('16 at once')['results']
    wrong = []
    for i, c in enumerate(many):
        r = results.get(str(i))
        if text_of(r) != (c['text'], 'length'):
            wrong.append(f'{i} ({"streamed" if i % 2 else "not streamed"}): {r!r}, expected {c["text"]!r} (length)')
    check('16 concurrent clients, each equal to mmgpt generate', not wrong, '; '.join(wrong))

for k in ['max_tokens -1', 'n 17', 'max_tokens -1 streamed', 'unknown model']:
    status, raw = server_says[k.replace(' streamed', '')]
    message = raw['error']['message'] if isinstance(raw, dict) else f'(no JSON error: {raw!r})'
    want_status, cls = (404, 'NotFoundError') if k == 'unknown model' else (400, 'BadRequestError')
    check(f'{k}: the server answers {want_status}', status == want_status, f'{status} {raw!r}')
    check_error(k, R(k), cls, want_status, message)

# Two 100-token streams left after their first chunk. Alone, the demo model
# writes 100 tokens in some 40 ms, often before the client has gone; beside
# 14 other requests (the first 14 of the 16 above, not streamed) each step
# takes the whole batch, so the client leaves while its sequence still runs.
# A cancelled sequence never finishes, so adds nothing to
# mmgpt_generated_tokens_total, which sums the tokens of finished completions.
before = srv.metric('mmgpt_generated_tokens_total')
aborts = client(srv, [
    {'name': 'leaving', 'op': 'parallel', 'ops': [
        {'name': 'left with break', 'op': 'abort', 'how': 'break', 'waitMs': 10000,
         'body': {**sampled['body'], 'max_tokens': 100}},
        {'name': 'left with controller.abort()', 'op': 'abort', 'how': 'controller', 'waitMs': 10000,
         'body': {**greedy['body'], 'max_tokens': 100}},
        *[{'name': str(i), 'op': 'complete', 'body': c['body']} for i, c in enumerate(many[:14])]]},
    {'name': 'greedy after leaving', 'op': 'complete', 'body': greedy['body']},
])
if ok('leaving', aborts.get('leaving')):
    results = aborts['leaving']['results']
    for name in ['left with break', 'left with controller.abort()']:
        r = results.get(name)
        if ok(name, r):
            check(f'{name}: a first chunk came', bool(r['first'] and r['first'].get('choices')), repr(r['first']))
            check(f'{name}: mmgpt_sequences_running back to 0', r['running'] == 0,
                  f"{r['running']} after {r['waitedMs']} ms")
    wrong = [f'{i}: {results.get(str(i))!r}, expected {c["text"]!r}' for i, c in enumerate(many[:14])
             if text_of(results.get(str(i))) != (c['text'], 'length')]
    check('the 14 requests beside them each equal to mmgpt generate', not wrong, '; '.join(wrong))
check_completion('greedy after leaving', aborts.get('greedy after leaving'), greedy, 'length',
                 len(prompt_tokens('ROMEO:')))
left = srv.metric('mmgpt_generated_tokens_total') - before - sum(c['n'] for c in many[:14]) - greedy['n']
print(f'  (tokens of the streams left counted as finished: {left:g})', flush=True)
check('the server cancelled the streams left (fewer than 100 of their tokens counted as finished)',
      0 <= left < 100, f'{left:g} tokens beyond those of the other requests')
check('after leaving: mmgpt_sequences_running 0, /health 200',
      srv.metric('mmgpt_sequences_running') == 0 and srv.alive(), srv.metric('mmgpt_sequences_running'))

rc = srv.stop()
check('SIGTERM stops the server, exit status 0', rc == 0, f'exit status {rc}')

# ---- a server that requires a key ----------------------------------------------------------
srv = Server(M, '--api-key', 'sk-test', name='server-key')
right = client(srv, [{'name': 'models', 'op': 'models'},
                     {'name': 'greedy', 'op': 'complete', 'body': greedy['body']},
                     {'name': 'greedy streamed', 'op': 'stream', 'body': greedy['body']},
                     {'name': 'wrong key', 'op': 'complete', 'body': greedy['body'], 'apiKey': 'sk-wrong'},
                     {'name': 'wrong key models', 'op': 'models', 'apiKey': 'sk-wrong'}], api_key='sk-test')
if ok('key: models.list()', right.get('models')):
    check('key: models.list() has the served model', MODEL_ID in right['models']['ids'], repr(right['models']))
if ok('key: greedy', right.get('greedy')):
    check('key: greedy equals mmgpt generate', text_of(right['greedy']) == (greedy['text'], 'length'),
          repr(right['greedy']))
check_stream('key: greedy streamed', right.get('greedy streamed'), greedy, 'length')
for k in ['wrong key', 'wrong key models']:
    e = (right.get(k) or {}).get('error')
    check(f'key: {k}: AuthenticationError (an OpenAI.APIError), status 401',
          bool(e) and 'AuthenticationError' in e['kinds'] and 'APIError' in e['kinds'] and e['status'] == 401,
          repr(right.get(k)))
rc = srv.stop()
check('SIGTERM stops the server with a key, exit status 0', rc == 0, f'exit status {rc}')

print(f'({time.monotonic() - t_start:.1f} s)', flush=True)
finish()
