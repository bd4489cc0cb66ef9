"""deploy/haproxy.cfg in front of two replicas of the demo model.

haproxy runs the shipped file itself, its addresses given by the environment
variables the file reads. Through it, completions (greedy and seeded, plain and
streamed) must give exactly what a replica gives directly and what `mmgpt
generate` prints, spread over both replicas. The replicas require an API
key, which haproxy passes on and its health check does without. When one
replica is stopped (SIGTERM), haproxy's health check takes it out and requests
still succeed, including those sent while it is going.
"""
import atexit
import concurrent.futures
import csv
import http.client
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import time

from server_harness import ROOT, W, Server, body_for, check, demo_model, finish, generate_cli

CONFIG = os.path.join(ROOT, 'deploy/haproxy.cfg')
KEY = 'test-key-haproxy'
AUTH = {'Authorization': f'Bearer {KEY}'}

HAPROXY = shutil.which('haproxy') or next((p for p in ('/usr/sbin/haproxy', '/usr/local/sbin/haproxy')
                                           if os.access(p, os.X_OK)), None)
if HAPROXY is None:
    check('haproxy is installed', False,
          'haproxy is not installed: run scripts/setup.sh (as root), which installs it for this test')
    finish()


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def fetch(port, method, path, body=None, headers=None, timeout=60):
    """(status, {lower-case header name: value}, body bytes) from 127.0.0.1:port; a dict body is sent as JSON."""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        c.request(method, path, body=json.dumps(body) if isinstance(body, dict) else body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def completion(port, body):
    """(status, text, finish_reason) of a completion, streamed or not, through the API key."""
    status, headers, data = fetch(port, 'POST', '/v1/completions', body, AUTH)
    if status != 200:
        return status, data.decode('utf-8', 'replace'), None
    if not body.get('stream'):
        choice = json.loads(data)['choices'][0]
        return status, choice['text'], choice['finish_reason']
    if not headers.get('content-type', '').startswith('text/event-stream'):
        return 'not an event stream', headers, None
    text, reason, done = '', None, False
    for raw in data.decode().split('\n\n'):
        if not raw:
            continue
        if raw == 'data: [DONE]':
            done = True
            continue
        event = json.loads(raw.removeprefix('data: '))
        text += event['choices'][0]['text']
        reason = event['choices'][0]['finish_reason'] or reason
    return (status if done else 'no [DONE]'), text, reason


def served(replica):
    """Completions the replica answered with 200, counted from its access log."""
    with open(replica.log.name, 'rb') as f:
        return f.read().decode('utf-8', 'replace').count('POST /v1/completions -> 200')


def served_all(replicas, total, timeout=10):
    """[served(r) for r in replicas] once they add up to total (or timeout s passed): a replica logs
    a response just after sending it, so a client can have its answer before the line is written."""
    end = time.monotonic() + timeout
    while True:
        counts = [served(r) for r in replicas]
        if sum(counts) >= total or time.monotonic() > end:
            return counts
        time.sleep(0.05)


class Haproxy:
    """haproxy -db -f deploy/haproxy.cfg, in the foreground, addresses from the environment."""

    def __init__(self, replicas):
        self.port, self.stats_port = free_port(), free_port()
        env = dict(os.environ, MMGPT_FRONTEND=f'127.0.0.1:{self.port}', MMGPT_STATS=f'127.0.0.1:{self.stats_port}')
        for i, r in enumerate(replicas, 1):
            env[f'MMGPT_REPLICA{i}'] = f'{r.host}:{r.port}'
        p = subprocess.run([HAPROXY, '-c', '-f', CONFIG], env=env, capture_output=True, text=True)
        check('haproxy -c accepts deploy/haproxy.cfg', p.returncode == 0, p.stdout + p.stderr)
        self.log = open(os.path.join(W, 'haproxy.log'), 'wb')
        self.proc = subprocess.Popen([HAPROXY, '-db', '-f', CONFIG], env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def servers(self):
        """{server name: (status, last check)} from the stats page's CSV; {} while it does not answer."""
        try:
            status, _, data = fetch(self.stats_port, 'GET', '/stats;csv', timeout=5)
        except OSError:
            return {}
        if status != 200:
            return {}
        rows = csv.DictReader(io.StringIO(data.decode().lstrip('# ')))
        return {r['svname']: (r['status'], r['check_status']) for r in rows
                if r['pxname'] == 'mmgpt_replicas' and r['svname'] not in ('FRONTEND', 'BACKEND')}

    def wait_for(self, want, timeout):
        """Polls the stats until they equal want; returns what they were last."""
        end = time.monotonic() + timeout
        while True:
            now = self.servers()
            if now == want or time.monotonic() > end or self.proc.poll() is not None:
                return now
            time.sleep(0.1)

    def stop(self):
        """A soft stop (SIGUSR1): haproxy closes its listeners, lets its connections end and exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = 'hung'
        self.log.close()
        return rc


started = []  # every process this test starts; an exception leaves none behind


@atexit.register
def kill_leftovers():
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


start = time.monotonic()
model = demo_model()
a = Server(model, '--threads', '1', '--parallel', '4', '--api-key', KEY, name='replica1')
started.append(a.proc)
b = Server(model, '--threads', '1', '--parallel', '4', '--api-key', KEY, name='replica2')
started.append(b.proc)
lb = Haproxy([a, b])
started.append(lb.proc)

both_up = {'replica1': ('UP', 'L7OK'), 'replica2': ('UP', 'L7OK')}
seen = lb.wait_for(both_up, 20)
check('haproxy sees both replicas up (health check L7OK)', seen == both_up, f'{seen}; see {lb.log.name}')

status, _, data = fetch(lb.port, 'GET', '/health')
check('/health through haproxy: 200 {"status":"ok"}', status == 200 and json.loads(data) == {'status': 'ok'},
      (status, data))
status, _, data = fetch(lb.port, 'GET', '/v1/models', headers=AUTH)
check('/v1/models through haproxy names the demo model',
      status == 200 and [m['id'] for m in json.loads(data)['data']] == ['demo'], (status, data))
status, _, data = fetch(lb.port, 'GET', '/v1/models')
check('the API key is still required through haproxy (401 without it)', status == 401, (status, data))

# Twenty requests: greedy and seeded sampling, every third one streamed.
prompts = ['ROMEO:', 'JULIET:\nO ', 'KING HENRY VI:\n', 'First Citizen:\nWe ', 'To be', 'MENENIUS:\nWhat ',
           'Where is ', 'HAMLET:\nI ', 'CLARENCE:\n', 'My lord, ']
requests = []
for i, prompt in enumerate(prompts):
    requests.append(body_for(prompt, 40 + i, greedy=True))
    requests.append(body_for(prompt, 50, temperature=0.9, top_k=40, top_p=0.95, seed=1000 + i))
for i, r in enumerate(requests):
    r['stream'] = i % 3 == 1
requests[5]['stop'] = ['\n\n']
requests[8]['repetition_penalty'] = 1.3

with concurrent.futures.ThreadPoolExecutor(4) as pool:
    through = list(pool.map(lambda r: completion(lb.port, r), requests))
check('20 completions through haproxy: all 200', all(t[0] == 200 for t in through),
      [t for t in through if t[0] != 200][:3])
n_a, n_b = served_all([a, b], len(requests))
check('the completions were spread over both replicas', n_a > 0 and n_b > 0 and n_a + n_b == len(requests),
      f'replica1 served {n_a}, replica2 {n_b} of {len(requests)}')

mismatch = []
for r, t in zip(requests, through):
    plain = {**r, 'stream': False}
    for replica in (a, b):
        direct = completion(replica.port, plain)
        if direct != (200, t[1], t[2]):
            mismatch.append((r, t, replica.port, direct))
check('each answer through haproxy is what either replica gives directly', not mismatch, mismatch[:2])

cli_mismatch = []
for i in (0, 1, 6, 9):  # greedy and seeded, streamed and not
    r = requests[i]
    want = generate_cli(model, r['prompt'], r['max_tokens'], greedy=r.get('temperature') == 0,
                        temperature=r['temperature'] or None, top_k=r.get('top_k'), top_p=r.get('top_p'),
                        seed=r.get('seed'))
    if through[i][1] != want:
        cli_mismatch.append((r, through[i][1], want))
check('answers through haproxy match `mmgpt generate`', not cli_mismatch, cli_mismatch[:2])

# Stop replica 2: requests sent at once (haproxy still thinks it up) are
# retried on replica 1; then the health check takes it out.
before = sum(served_all([a, b], 3 * len(requests)))  # through haproxy, then directly to each
b.proc.send_signal(signal.SIGTERM)
during = [completion(lb.port, requests[i]) for i in range(6)]
check('requests sent while replica 2 stops all succeed', [d[0] for d in during] == [200] * 6,
      [d for d in during if d[0] != 200][:2])
check('... with the same answers', [d[1:] for d in during] == [t[1:] for t in through[:6]], during)
check('... each answered once', sum(served_all([a, b], before + 6)) - before == 6,
      f'{served(a) + served(b) - before} answers')
rc_b = b.stop()
check('replica 2 exits 0 on SIGTERM', rc_b == 0, f'exit status {rc_b}; see {b.log.name}')

seen = lb.wait_for({'replica1': ('UP', 'L7OK'), 'replica2': ('DOWN', 'L4CON')}, 15)
check('haproxy marks replica 2 down',
      seen.get('replica1') == ('UP', 'L7OK') and seen.get('replica2', ('',))[0] == 'DOWN', f'{seen}; see {lb.log.name}')
before_a = served(a)
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    after = list(pool.map(lambda r: completion(lb.port, r), requests[6:14]))
check('with replica 2 down, completions through haproxy succeed', [t[0] for t in after] == [200] * 8,
      [t for t in after if t[0] != 200][:2])
check('... with the same answers', [t[1:] for t in after] == [t[1:] for t in through[6:14]], after)
check('... all by replica 1', served_all([a], before_a + 8)[0] - before_a == 8,
      f'replica 1 served {served(a) - before_a} of 8')
status, _, _ = fetch(lb.port, 'GET', '/health')
check('/health through haproxy: still 200', status == 200, status)

rc_lb = lb.stop()
check('haproxy stops on SIGUSR1 with status 0', rc_lb == 0, f'exit status {rc_lb}; see {lb.log.name}')
rc_a = a.stop()
check('replica 1 exits 0 on SIGTERM', rc_a == 0, f'exit status {rc_a}; see {a.log.name}')
print(f'{time.monotonic() - start:.1f} s', flush=True)
finish()
