"""mmgpt serve over HTTP with the standard library and curl: results equal
`mmgpt generate`, alone and under 16 concurrent clients; the API's shapes;
limits; and hostile or broken input, after each of which the server keeps
serving."""
import json
import os
import socket
import subprocess
import threading
import time

from server_harness import (Server, body_for, check, demo_model, finish, generate_cli, gpt2_model)

MODEL = demo_model()
srv = Server(MODEL, '--threads', '2', '--timeout', '2', '--max-body', '65536', '--parallel', '8')
check('ready line names the port and model', srv.port > 0 and '(model demo,' in srv.ready_line, srv.ready_line)

# --- the simple endpoints
status, h = srv.json('GET', '/health')
check('/health is 200 ok', status == 200 and h == {'status': 'ok'}, (status, h))
status, m = srv.json('GET', '/v1/models')
check('/v1/models lists the model', status == 200 and m['object'] == 'list' and m['data'][0]['id'] == 'demo'
      and m['data'][0]['object'] == 'model', m)
status, m = srv.json('GET', '/v1/models/demo')
check('/v1/models/demo', status == 200 and m['id'] == 'demo', m)
status, t = srv.json('POST', '/tokenize', {'content': 'ROMEO:'})
check('/tokenize gives one id a character', status == 200 and len(t['tokens']) == 6, t)
status, d = srv.json('POST', '/detokenize', {'tokens': t['tokens']})
check('/detokenize inverts it', status == 200 and d == {'content': 'ROMEO:'}, d)
status, t = srv.json('POST', '/tokenize', {'content': 'Hi', 'with_pieces': True})
check('/tokenize with pieces', status == 200 and [p['piece'] for p in t['tokens']] == ['H', 'i'], t)

# --- results equal mmgpt generate, streamed and not
CASES = [
    dict(prompt='ROMEO:', n=40, greedy=True),
    dict(prompt='First Citizen:\n', n=60, temperature=0.9, top_k=20, top_p=0.95, min_p=0.02,
         repetition_penalty=1.1, seed=7),
    dict(prompt='To be, or not', n=50, seed=3),
    dict(prompt='KING HENRY', n=80, seed=11, stop=('\n\n', ',')),
    dict(prompt='O', n=30, temperature=1.5, seed=5),
]
expected = [generate_cli(MODEL, **c) for c in CASES]
for c, want in zip(CASES, expected):
    name = f"{c['prompt']!r} {sorted(k for k in c if k not in ('prompt', 'n'))}"
    status, r = srv.complete(**body_for(**c))
    ok = status == 200 and r['choices'][0]['text'] == want
    check(f'completion equals generate: {name}', ok, (status, r, want))
    reason = r['choices'][0]['finish_reason'] if status == 200 else None
    # The demo model is character-level (a token a character) and never ends its text: a
    # continuation shorter than max_tokens was cut by a stop string.
    check(f'finish_reason: {name}', reason == ('length' if len(want) == c['n'] else 'stop'), (reason, len(want)))
    if status == 200:
        u = r['usage']
        prompt_tokens = len(srv.json('POST', '/tokenize', {'content': c['prompt']})[1]['tokens'])
        check(f'usage: {name}', u['prompt_tokens'] == prompt_tokens and u['total_tokens'] ==
              u['prompt_tokens'] + u['completion_tokens'] and (reason != 'length' or u['completion_tokens'] == c['n']),
              u)
        check(f'response shape: {name}', r['object'] == 'text_completion' and r['id'].startswith('cmpl-') and
              r['model'] == 'demo' and isinstance(r['created'], int) and r['choices'][0]['index'] == 0, r)
    status, events, done = srv.stream(**body_for(**c), stream_options={'include_usage': True})
    text = ''.join(e['choices'][0]['text'] for e in events if e.get('choices'))
    check(f'streamed completion equals generate: {name}', status == 200 and done and text == want,
          (status, text, want))
    finals = [e['choices'][0]['finish_reason'] for e in events if e.get('choices')]
    check(f'stream: only the last chunk has a finish_reason: {name}',
          finals and finals[-1] == reason and all(f is None for f in finals[:-1]), finals)
    check(f'stream: a usage chunk last: {name}', events and events[-1]['choices'] == [] and
          events[-1]['usage']['completion_tokens'] == (r['usage']['completion_tokens'] if status == 200 else -1),
          events[-1:])
    if c.get('stop'):
        check(f'no chunk holds part of a stop string: {name}',
              all(s not in text for s in c['stop']), text)

# Token-id prompts and echo.
ids = srv.json('POST', '/tokenize', {'content': 'ROMEO:'})[1]['tokens']
status, r = srv.complete(prompt=ids, max_tokens=40, temperature=0)
check('a prompt of token ids gives the same completion', status == 200 and r['choices'][0]['text'] == expected[0], r)
status, r = srv.complete(prompt=['ROMEO:'], max_tokens=40, temperature=0, echo=True)
check('echo puts the prompt first', status == 200 and r['choices'][0]['text'] == 'ROMEO:' + expected[0], r)

# curl, the other client the issue names.
curl = subprocess.run(['curl', '-sS', '-N', f'http://127.0.0.1:{srv.port}/v1/completions', '-H',
                       'Content-Type: application/json', '-d', json.dumps({**body_for(**CASES[1]), 'stream': True})],
                      capture_output=True, timeout=60)
events = [json.loads(x[6:]) for x in curl.stdout.decode().split('\n\n') if x.startswith('data: {')]
check('curl: a streamed completion', curl.returncode == 0 and
      ''.join(e['choices'][0]['text'] for e in events) == expected[1] and curl.stdout.endswith(b'data: [DONE]\n\n'),
      curl.stdout[-200:])

# --- 16 concurrent clients, streamed and not, each equal to generate
many = [dict(prompt=p, n=30 + 5 * (i % 4), seed=100 + i, temperature=0.8 + 0.05 * (i % 3))
        for i, p in enumerate(['ROMEO:', 'JULIET:', 'First Citizen:', 'Thou', 'What, ho!', 'My lord,', 'A', 'Good'] * 2)]
many_expected = [generate_cli(MODEL, **c) for c in many]
results = [None] * len(many)


def client(i):
    try:
        if i % 2:
            _, events, done = srv.stream(**body_for(**many[i]))
            results[i] = ''.join(e['choices'][0]['text'] for e in events if e.get('choices')) if done else None
        else:
            _, r = srv.complete(**body_for(**many[i]))
            results[i] = r['choices'][0]['text']
    except Exception as e:  # noqa: BLE001 - reported as a mismatch
        results[i] = repr(e)


threads = [threading.Thread(target=client, args=(i,)) for i in range(len(many))]
t0 = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
bad = [i for i in range(len(many)) if results[i] != many_expected[i]]
check('16 concurrent clients: each equals generate', not bad, [(i, results[i], many_expected[i]) for i in bad[:3]])
check('the concurrent steps were batched', srv.metric('mmgpt_step_sequences_total') > srv.metric('mmgpt_steps_total'),
      (srv.metric('mmgpt_step_sequences_total'), srv.metric('mmgpt_steps_total')))

# Prefix cache: the same prompt again starts from its cached keys and values.
before = srv.metric('mmgpt_prompt_tokens_cached_total')
srv.complete(**body_for(prompt='ROMEO: a long preamble that repeats', n=5, seed=1))
srv.complete(**body_for(prompt='ROMEO: a long preamble that repeats', n=5, seed=1))
check('prefix cache: a repeated prompt reuses its keys and values',
      srv.metric('mmgpt_prompt_tokens_cached_total') - before >= len('ROMEO: a long preamble that repeats') - 1,
      srv.metric('mmgpt_prompt_tokens_cached_total'))


# --- bad requests: each gets its status and an OpenAI-shaped error; the server keeps serving
def expect(name, status_want, method, path, body=None, headers=None, param=None):
    status, _, data = srv.request(method, path, body, headers)
    try:
        e = json.loads(data)['error']
        shaped = set(e) == {'message', 'type', 'param', 'code'} and e['message']
    except (ValueError, KeyError, TypeError):
        e, shaped = data, False
    ok = status == status_want and shaped and (param is None or e['param'] == param)
    check(f'{name} -> {status_want}', ok and srv.alive(), (status, data[:300]))


C = '/v1/completions'
expect('malformed JSON', 400, 'POST', C, '{"prompt": "a",')
expect('a NaN temperature (not JSON)', 400, 'POST', C, '{"prompt": "a", "temperature": NaN}')
expect('a JSON array body', 400, 'POST', C, '[1, 2]')
expect('deeply nested JSON', 400, 'POST', C, '{"prompt": ' + '[' * 5000 + ']' * 5000 + '}')
expect('no prompt', 400, 'POST', C, {'max_tokens': 3}, param='prompt')
expect('an empty prompt', 400, 'POST', C, {'prompt': ''}, param='prompt')
expect('a prompt of the wrong type', 400, 'POST', C, {'prompt': {'a': 1}}, param='prompt')
expect('65 prompts', 400, 'POST', C, {'prompt': ['a'] * 65}, param='prompt')
expect('a list with an empty prompt', 400, 'POST', C, {'prompt': ['a', '']}, param='prompt')
expect('a token id outside the vocabulary', 400, 'POST', C, {'prompt': [1, 65]}, param='prompt')
expect('a negative token id', 400, 'POST', C, {'prompt': [-1]}, param='prompt')
expect('max_tokens as a string', 400, 'POST', C, {'prompt': 'a', 'max_tokens': '5'}, param='max_tokens')
expect('negative max_tokens', 400, 'POST', C, {'prompt': 'a', 'max_tokens': -1}, param='max_tokens')
expect('huge max_tokens', 400, 'POST', C, {'prompt': 'a', 'max_tokens': 10 ** 30}, param='max_tokens')
expect('prompt + max_tokens past the context', 400, 'POST', C, {'prompt': 'a', 'max_tokens': 128}, param='max_tokens')
expect('a fractional max_tokens', 400, 'POST', C, {'prompt': 'a', 'max_tokens': 2.5}, param='max_tokens')
expect('negative temperature', 400, 'POST', C, {'prompt': 'a', 'temperature': -0.5}, param='temperature')
expect('a huge temperature', 400, 'POST', C, {'prompt': 'a', 'temperature': 1e300}, param='temperature')
expect('top_p above 1', 400, 'POST', C, {'prompt': 'a', 'top_p': 2}, param='top_p')
expect('top_p 0', 400, 'POST', C, {'prompt': 'a', 'top_p': 0}, param='top_p')
expect('min_p 1', 400, 'POST', C, {'prompt': 'a', 'min_p': 1}, param='min_p')
expect('a negative top_k', 400, 'POST', C, {'prompt': 'a', 'top_k': -3}, param='top_k')
expect('repetition_penalty 0', 400, 'POST', C, {'prompt': 'a', 'repetition_penalty': 0}, param='repetition_penalty')
expect('a negative seed', 400, 'POST', C, {'prompt': 'a', 'seed': -1}, param='seed')
expect('n = 17', 400, 'POST', C, {'prompt': 'a', 'n': 17}, param='n')
expect('8 prompts times n = 9', 400, 'POST', C, {'prompt': ['a'] * 8, 'n': 9}, param='n')
expect('stream as a string', 400, 'POST', C, {'prompt': 'a', 'stream': 'yes'}, param='stream')
expect('stop as a number', 400, 'POST', C, {'prompt': 'a', 'stop': 5}, param='stop')
expect('logprobs 21', 400, 'POST', C, {'prompt': 'a', 'logprobs': 21}, param='logprobs')
expect('an unknown model', 404, 'POST', C, {'prompt': 'a', 'model': 'gpt-4'}, param='model')
expect('an unknown endpoint', 404, 'GET', '/v1/chat')
expect('a path that decodes to a newline', 404, 'GET', '/x%0Ammgpt%20serve:%20forged%0D')
expect('a wrong method', 404, 'GET', C)
expect('tokenize without content', 400, 'POST', '/tokenize', {'text': 'a'})
expect('detokenize an id outside the vocabulary', 400, 'POST', '/detokenize', {'tokens': [99999]})
expect('a body over --max-body', 413, 'POST', C, '{"prompt": "' + 'a' * 70000 + '"}')
status, _, data = srv.request('POST', C, body=iter([b'{"prompt": "a"}']),
                              headers={'Transfer-Encoding': 'chunked'})
check('a chunked body -> 411', status == 411 and b'"error"' in data and srv.alive(), (status, data))
status, r = srv.complete(prompt='a', max_tokens=0)
check('max_tokens 0: an empty completion', status == 200 and r['choices'][0]['text'] == '' and
      r['choices'][0]['finish_reason'] == 'length', r)
status, r = srv.complete(prompt='a', max_tokens=2, temperature=0, presence_penalty=0, logprobs=None, user='x')
check('fields at their neutral values are accepted', status == 200, r)


def raw(data, read_timeout=5.0):
    """Sends bytes on a fresh connection; returns what came back before the server closed it."""
    s = socket.create_connection(('127.0.0.1', srv.port), timeout=read_timeout)
    s.sendall(data)
    out = b''
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        pass
    s.close()
    return out


def send_completion(server, body):
    """Sends a completion request on a fresh socket, left open for the caller to read or close."""
    data = json.dumps(body).encode()
    s = socket.create_connection(('127.0.0.1', server.port), timeout=10)
    s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ' +
              str(len(data)).encode() + b'\r\n\r\n' + data)
    return s


for name, data in [('a garbage request line', b'GARBAGE\r\n\r\n'), ('an unknown method', b'FOO / HTTP/1.1\r\n\r\n'),
                   ('a request line over 8 KB', b'GET /' + b'a' * 9000 + b' HTTP/1.1\r\n\r\n')]:
    out = raw(data)
    check(f'malformed HTTP: {name} -> 4xx', out.startswith(b'HTTP/1.1 4') and srv.alive(), out[:100])

# A slow client (half a header, then nothing) is dropped after --timeout; others are served meanwhile.
s = socket.create_connection(('127.0.0.1', srv.port), timeout=10)
s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\n')
t0 = time.time()
check('served while a slow client holds a connection', srv.alive())
s.settimeout(10)
try:
    refused = s.recv(4096).startswith(b'HTTP/1.1 400')  # the request is refused once the header times out
except (socket.timeout, ConnectionResetError):
    refused = False
check('a slow client is refused after the read timeout', refused and time.time() - t0 < 4, time.time() - t0)
s.close()
# A body shorter than its Content-Length: the same.
out = raw(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt"', read_timeout=8)
check('a body shorter than Content-Length is dropped after the read timeout', srv.alive(), out[:100])

# A client that disconnects mid-stream cancels its sequence: it leaves the batch well before its
# 120 tokens. The request may still be queued when the client goes, so wait for both gauges.
steps_before = srv.metric('mmgpt_step_sequences_total')
s = send_completion(srv, {'prompt': 'ROMEO:', 'max_tokens': 120, 'stream': True, 'seed': 1})
first = s.recv(4096)
s.close()
deadline = time.time() + 20
left = None
while time.time() < deadline and left != 0:
    time.sleep(0.05)
    left = srv.metric('mmgpt_sequences_running') + srv.metric('mmgpt_sequences_queued')
stepped = srv.metric('mmgpt_step_sequences_total') - steps_before
check('a disconnect mid-stream cancels the sequence', first.startswith(b'HTTP/1.1 200') and left == 0 and
      stepped < 100 and srv.alive(), (first[:100], left, stepped))

# Many idle connections: the server holds at most its threads' and their queue's worth, the
# rest wait in the kernel's listen queue; once they go, it serves again at once.
idle = []
for _ in range(400):
    idle.append(socket.create_connection(('127.0.0.1', srv.port), timeout=10))
time.sleep(0.5)
fds = len(os.listdir(f'/proc/{srv.proc.pid}/fd'))
check('400 idle connections: the server holds a bounded number (threads + waiting)', fds < 2 * (8 + 64 + 8) + 40, fds)
for s in idle:
    s.close()
time.sleep(0.5)
check('after idle connections leave, the server answers at once', srv.alive())

metrics = srv.request('GET', '/metrics')[2].decode()
for name in ['mmgpt_requests_total{status="200"}', 'mmgpt_requests_total{status="400"}', 'mmgpt_prompt_tokens_total',
             'mmgpt_generated_tokens_total', 'mmgpt_sequences_running', 'mmgpt_sequences_queued', 'mmgpt_batch_size',
             'mmgpt_time_to_first_token_seconds_count', 'mmgpt_time_per_output_token_seconds_bucket{le="0.1"}']:
    check(f'/metrics has {name}', name in metrics, metrics[:500])
check('server exits 0 on SIGTERM', srv.stop() == 0)
with open(srv.log.name, 'rb') as f:
    log = f.read()
check('a client cannot forge log lines', b'\nmmgpt serve: forged' not in log and b'/x?mmgpt serve: forged?' in log,
      [l for l in log.splitlines() if b'forged' in l])

# --- the API key
key = Server(MODEL, '--api-key', 'sk-test', '--threads', '1', name='key')
status, _, _ = key.request('GET', '/v1/models')
check('no key -> 401', status == 401)
status, r = key.json('GET', '/v1/models', headers={'Authorization': 'Bearer sk-wrong'})
check('a wrong key -> 401 authentication_error', status == 401 and r['error']['type'] == 'authentication_error', r)
status, _ = key.json('POST', '/v1/completions', {'prompt': 'a', 'max_tokens': 1},
                     headers={'Authorization': 'Bearer sk-test'})
check('the right key -> 200', status == 200)
check('/health needs no key', key.request('GET', '/health')[0] == 200)
check('/metrics needs the key', key.request('GET', '/metrics')[0] == 401)
check('key server exits 0', key.stop() == 0)

# --- a full queue gets 503, and SIGTERM finishes or cancels running work within the grace period
busy = Server(MODEL, '--parallel', '1', '--max-queue', '1', '--threads', '1', '--shutdown-grace', '1', name='busy')
statuses = []


def long_request():
    statuses.append(busy.complete(prompt='ROMEO:', max_tokens=120, seed=1)[0])


ts = [threading.Thread(target=long_request) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
check('a full queue answers 503', 503 in statuses and 200 in statuses, statuses)
stream_result = {}


def long_stream():
    try:
        stream_result['r'] = busy.stream(prompt='ROMEO:', max_tokens=127 - 6, seed=2)
    except Exception as e:  # noqa: BLE001 - reported below
        stream_result['r'] = (repr(e), [], False)


# The stream may end before a poll sees it run (121 tokens of the demo model take tens of ms): start it again.
for _ in range(50):
    t = threading.Thread(target=long_stream)
    t.start()
    while t.is_alive() and busy.metric('mmgpt_sequences_running') != 1:
        time.sleep(0.005)
    if t.is_alive():
        break
    t.join()
t0 = time.time()
rc = busy.stop()
t.join()
check('SIGTERM: exit 0 within a few seconds', rc == 0 and time.time() - t0 < 5, (rc, time.time() - t0))
status, events, done = stream_result['r']
check('SIGTERM: the running stream ended cleanly', status == 200 and done, (status, events[-1:]))

# --- byte-level BPE: every chunk holds whole UTF-8 characters
GPT2 = gpt2_model()
g = Server(GPT2, '--threads', '1', name='gpt2')
body = {'prompt': 'Hello \u00e9\u4e16\U0001F600', 'max_tokens': 60, 'seed': 4, 'temperature': 1.5, 'top_k': 0}
want = generate_cli(GPT2, body['prompt'], 60, seed=4, temperature=1.5, top_k=0)
c = g.conn()
c.request('POST', '/v1/completions', body=json.dumps({**body, 'stream': True}))
raw_stream = c.getresponse().read()
pieces = [json.loads(x[6:].decode('utf-8'))['choices'][0]['text'] for x in raw_stream.split(b'\n\n')
          if x.startswith(b'data: {')]
check('gpt2: streamed text equals generate', ''.join(pieces) == want, (pieces, want))
check('gpt2: no chunk holds a replacement character that the whole text lacks',
      sum(p.count('\ufffd') for p in pieces) == want.count('\ufffd'), pieces)

# A client that closes its connection while its (not streamed) completion runs cancels it: the
# request ends as 499, and the 15 running beside it are unaffected. The client leaves after
# 0.1 s, long before 16 sequences of 1000 tokens can end.
others = []


def long_completion(i):
    status, r = g.complete(prompt='Hello', max_tokens=1000, seed=i, ignore_eos=True)
    others.append((status, r['usage']['completion_tokens'] if status == 200 else r))


ts = [threading.Thread(target=long_completion, args=(i,)) for i in range(15)]
for t in ts:
    t.start()
s = send_completion(g, {'prompt': 'Hello', 'max_tokens': 1000, 'seed': 99, 'ignore_eos': True})
time.sleep(0.1)
s.close()
for t in ts:
    t.join()
check('a client that closes its connection cancels its completion (499)',
      g.metric('mmgpt_requests_total{status="499"}') == 1 and g.metric('mmgpt_sequences_running') == 0,
      (g.metric('mmgpt_requests_total{status="499"}'), g.metric('mmgpt_sequences_running')))
check('the completions beside it are whole', others == [(200, 1000)] * 15, others[:3])
check('gpt2 server exits 0', g.stop() == 0)
finish()
