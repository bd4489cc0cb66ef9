"""What the server tests share: starting `mmgpt serve` on a free loopback
port, HTTP requests with the standard library, the bundled demo model, and
what `mmgpt generate` gives for the same request (the server must match it).

Each test script is run by ctest as
    /usr/bin/python3 test_X.py --mmgpt PATH --workdir DIR
and ends with the line 'N passed, M failed' (exit status 1 on any failure).
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--workdir', required=True)
args = parser.parse_args()
MM = args.mmgpt
W = args.workdir
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)

counts = {'passed': 0, 'failed': 0}
_lock = threading.Lock()


def check(name, ok, detail=''):
    with _lock:
        if ok:
            counts['passed'] += 1
            print(f'[PASS] {name}', flush=True)
        else:
            counts['failed'] += 1
            print(f'[FAIL] {name}: {detail}', flush=True)


def finish():
    print(f"{counts['passed']} passed, {counts['failed']} failed", flush=True)
    sys.exit(1 if counts['failed'] else 0)


def run(*argv, timeout=300):
    p = subprocess.run([MM, *argv], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace')


def demo_model():
    """The bundled character-level Shakespeare model, converted once into the work dir."""
    path = os.path.join(W, 'demo.mmgpt')
    if not os.path.exists(path):
        rc, _, err = run('convert', os.path.join(ROOT, 'models/demo/ckpt.pt'), '-o', path)
        if rc != 0:
            raise SystemExit(f'converting the demo model failed: {err}')
    return path


def gpt2_model():
    """A GPT-2 (byte-level BPE) model: data/models/tiny-gpt2-hf, random weights."""
    src = os.path.join(ROOT, 'data', 'models', 'tiny-gpt2-hf')
    path = os.path.join(W, 'tiny-gpt2.mmgpt')
    if not os.path.exists(path):
        rc, _, err = run('convert', src, '-o', path)
        if rc != 0:
            raise SystemExit(f'converting tiny-gpt2-hf failed: {err}')
    return path


class Server:
    """`mmgpt serve` on 127.0.0.1 and a free port; stop() sends SIGTERM and returns the exit status."""

    def __init__(self, model, *extra, name='server'):
        self.log = open(os.path.join(W, f'{name}.log'), 'wb')
        self.proc = subprocess.Popen([MM, 'serve', '-m', model, '--port', '0', *extra],
                                     stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode()
        if 'listening on http://' not in line:
            self.proc.kill()
            raise SystemExit(f'mmgpt serve did not start: {line!r}; see {self.log.name}')
        self.ready_line = line
        self.host, port = line.split('http://')[1].split()[0].split(':')
        self.port = int(port)

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict, body bytes); a dict body is sent as JSON."""
        c = self.conn(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def json(self, method, path, body=None, headers=None):
        status, _, data = self.request(method, path, body, headers)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    def complete(self, **body):
        return self.json('POST', '/v1/completions', body)

    def stream(self, path='/v1/completions', **body):
        """(status, [events as parsed JSON], saw [DONE]) of a streamed completion (or chat completion)."""
        c = self.conn()
        c.request('POST', path, body=json.dumps({**body, 'stream': True}))
        r = c.getresponse()
        if r.status != 200:
            return r.status, [json.loads(r.read())], False
        events, done = [], False
        for raw in r.read().decode().split('\n\n'):
            if not raw:
                continue
            assert raw.startswith('data: '), raw
            if raw == 'data: [DONE]':
                done = True
            else:
                events.append(json.loads(raw[6:]))
        c.close()
        return r.status, events, done

    def metric(self, name):
        _, _, data = self.request('GET', '/metrics')
        for line in data.decode().splitlines():
            if line.startswith(name + ' ') or line.startswith(name + '{'):
                if line.split()[0] == name or name.endswith('}'):
                    return float(line.split()[-1])
        return None

    def alive(self):
        try:
            return self.request('GET', '/health', timeout=10)[0] == 200
        except OSError:
            return False

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = 'hung'
        self.log.close()
        return rc


def generate_cli(model, prompt, n, greedy=False, temperature=None, top_k=None, top_p=None, min_p=None,
                 repetition_penalty=None, seed=None, stop=()):
    """The continuation `mmgpt generate` prints for these options (its prompt and final newline removed)."""
    argv = ['generate', '-m', model, '-p', prompt, '-n', str(n)]
    if greedy:
        argv.append('--greedy')
    for flag, v in [('--temperature', temperature), ('--top-k', top_k), ('--top-p', top_p), ('--min-p', min_p),
                    ('--repetition-penalty', repetition_penalty), ('--seed', seed)]:
        if v is not None:
            argv += [flag, str(v)]
    for s in stop:
        argv += ['--stop', s]
    p = subprocess.run([MM, *argv], capture_output=True, timeout=300)
    out = p.stdout.decode('utf-8', 'replace')
    assert p.returncode == 0 and out.startswith(prompt) and out.endswith('\n'), (p.returncode, out, p.stderr)
    return out[len(prompt):-1]


def body_for(prompt, n, greedy=False, temperature=None, top_k=None, top_p=None, min_p=None,
             repetition_penalty=None, seed=None, stop=()):
    """The completions request matching generate_cli's arguments."""
    b = {'model': 'demo', 'prompt': prompt, 'max_tokens': n}
    if greedy:
        b['temperature'] = 0
    for k, v in [('temperature', temperature), ('top_k', top_k), ('top_p', top_p), ('min_p', min_p),
                 ('repetition_penalty', repetition_penalty), ('seed', seed)]:
        if v is not None:
            b[k] = v
    if stop:
        b['stop'] = list(stop)
    return b


def openai_client(server, ops, timeout_ms=30000):
    """Runs openai_client.mjs (the official OpenAI npm client) on these ops
    against the server: {op name: result}; {} after a failed run, which is
    checked as a failure. Needs node and tests/server/openai/node_modules
    (scripts/setup.sh installs both); a test that calls it without them fails."""
    here = os.path.dirname(os.path.abspath(__file__))
    modules = os.path.join(here, 'openai', 'node_modules')
    node = os.environ.get('MMGPT_NODE') or shutil.which('node')
    if not node or not os.path.isfile(os.path.join(modules, 'openai', 'package.json')):
        sys.exit('FAIL: node and tests/server/openai/node_modules are needed: run scripts/setup.sh')
    script = os.path.join(W, 'openai_client.mjs')
    if not os.path.exists(script):
        shutil.copy(os.path.join(here, 'openai_client.mjs'), script)
    if not os.path.exists(os.path.join(W, 'node_modules')):
        os.symlink(modules, os.path.join(W, 'node_modules'))
    spec = os.path.join(W, 'client-spec.json')
    with open(spec, 'w') as f:
        json.dump({'baseURL': f'http://{server.host}:{server.port}/v1', 'timeoutMs': timeout_ms, 'ops': ops}, f)
    p = subprocess.run([node, script, spec], cwd=W, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        check('openai_client.mjs', False, p.stderr[-500:])
        return {}
    return json.loads(p.stdout)
