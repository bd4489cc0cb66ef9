#!/usr/bin/env python3
"""Load test of `mmgpt serve`: a bounded number of streamed completions at
each client concurrency, reporting throughput and latency percentiles.

    /usr/bin/python3 bench/serve_load.py --mmgpt build/mmgpt --model M.mmgpt [--threads 2]
    /usr/bin/python3 bench/serve_load.py --url http://127.0.0.1:8080 ...   # a server already running

Each client sends its requests one after another (a new one as soon as the
last finished); every request streams max_tokens tokens (ignore_eos), so all
levels do the same work per request. Per level it prints: requests, generated
tokens/s over the level's wall time, time to first token (TTFT, from sending
the request to the first text), the time between a request's tokens (TPOT),
and the request latency, as p50 and p99. The last lines compare the most
clients with 1: the throughput ratio, and TTFT p99 under load against twice
the idle TTFT plus one decode step, over all requests and after the start
(when every client's first request arrives at once).
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

PROMPTS = [
    "The history of the city begins with a small settlement on the river, where",
    "In a distant galaxy, the crew of the starship received a message that",
    "Here is a short recipe for bread: first, mix the flour with",
    "The committee met on Tuesday to discuss the new budget, and after a long debate",
    "Once upon a time, in a kingdom by the sea, there lived a",
    "The results of the experiment were surprising because",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Dear customer, thank you for your order. We are writing to let you know",
]


def percentile(xs, p):
    if not xs:
        return float('nan')
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(host, port, body):
    """(ttft, [token arrival times after the first], total seconds, tokens) of one streamed completion."""
    c = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    c.request('POST', '/v1/completions', body=json.dumps(body), headers={'Content-Type': 'application/json'})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f'status {r.status}: {r.read()[:200]!r}')
    ttft, arrivals, tokens = None, [], 0
    # Only the timing is needed from each event: lines are matched, not parsed,
    # so the client takes little of the CPU the server runs on.
    while True:
        line = r.fp.readline()
        if not line or line.startswith(b'data: [DONE]'):
            break
        if not line.startswith(b'data: {'):
            continue
        if b'"usage"' in line:
            tokens = json.loads(line[6:])['usage']['completion_tokens']
        elif b'"text":""' not in line:
            now = time.perf_counter()
            if ttft is None:
                ttft = now - t0
            arrivals.append(now)
    total = time.perf_counter() - t0
    c.close()
    return ttft, arrivals, total, tokens


def run_level(host, port, clients, requests, max_tokens, seed0):
    results, errors = [], []
    lock = threading.Lock()
    counter = iter(range(requests))

    def client():
        first = True
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            body = {'prompt': PROMPTS[i % len(PROMPTS)], 'max_tokens': max_tokens, 'seed': seed0 + i,
                    'ignore_eos': True, 'stream': True, 'stream_options': {'include_usage': True}}
            try:
                res = one_request(host, port, body)
                with lock:
                    results.append((*res, first))
                first = False
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(repr(e))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[3] for r in results)
    ttft = [r[0] for r in results if r[0] is not None]
    # Steady state: each client's first request arrives with every other client's at the start.
    ttft_steady = [r[0] for r in results if r[0] is not None and not r[4]]
    tpot = [(r[1][-1] - r[1][0]) / (len(r[1]) - 1) for r in results if len(r[1]) > 1]
    latency = [r[2] for r in results]
    return {'clients': clients, 'requests': len(results), 'errors': len(errors), 'wall_s': wall,
            'tokens_per_s': tokens / wall, 'ttft_p50': percentile(ttft, 50), 'ttft_p99': percentile(ttft, 99),
            'ttft_steady_p99': percentile(ttft_steady, 99),
            'tpot_p50': percentile(tpot, 50), 'tpot_p99': percentile(tpot, 99),
            'latency_p50': percentile(latency, 50), 'latency_p99': percentile(latency, 99),
            'first_error': errors[0] if errors else ''}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--mmgpt', help='start this mmgpt serve (with --model)')
    ap.add_argument('--model')
    ap.add_argument('--url', help='use a running server instead')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--levels', default='1,4,16')
    ap.add_argument('--requests', type=int, default=0, help='requests per level (default: 4 per client, at least 8)')
    ap.add_argument('--max-tokens', type=int, default=64)
    ap.add_argument('--json', help='also write the results here')
    ap.add_argument('--serve-arg', action='append', default=[], help='extra argument for mmgpt serve')
    a = ap.parse_args()

    proc = None
    if a.url:
        u = urllib.parse.urlparse(a.url)
        host, port = u.hostname, u.port
    else:
        if not (a.mmgpt and a.model):
            ap.error('give --url, or --mmgpt and --model')
        levels = [int(x) for x in a.levels.split(',')]
        proc = subprocess.Popen([a.mmgpt, 'serve', '-m', a.model, '--port', '0', '--threads', str(a.threads),
                                 '--parallel', str(max(levels)), *a.serve_arg],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = proc.stdout.readline().decode()
        if 'http://' not in line:
            sys.exit(f'mmgpt serve did not start: {line!r}')
        host, port = line.split('http://')[1].split()[0].split(':')
        port = int(port)
        print(line.strip())
    try:
        # Warm-up: the first requests fault the weights in and size the buffers.
        run_level(host, port, 2, 4, 8, 10_000)
        rows = []
        print(f"{'clients':>7} {'requests':>8} {'errors':>6} {'tokens/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
              f"{'TPOT p50':>9} {'TPOT p99':>9} {'latency p50':>11} {'latency p99':>11}")
        for clients in [int(x) for x in a.levels.split(',')]:
            n = a.requests or max(8, 4 * clients)
            r = run_level(host, port, clients, n, a.max_tokens, 1000 * clients)
            rows.append(r)
            print(f"{r['clients']:>7} {r['requests']:>8} {r['errors']:>6} {r['tokens_per_s']:>9.1f} "
                  f"{r['ttft_p50'] * 1e3:>7.1f}ms {r['ttft_p99'] * 1e3:>7.1f}ms {r['tpot_p50'] * 1e3:>7.1f}ms "
                  f"{r['tpot_p99'] * 1e3:>7.1f}ms {r['latency_p50']:>10.2f}s {r['latency_p99']:>10.2f}s", flush=True)
            if r['first_error']:
                print('  first error:', r['first_error'])
        by = {r['clients']: r for r in rows}
        if 1 in by and max(by) > 1:
            hi = by[max(by)]
            print(f"throughput, {hi['clients']} clients / 1: {hi['tokens_per_s'] / by[1]['tokens_per_s']:.2f}x")
            bound = 2 * by[1]['ttft_p50'] + hi['tpot_p50']
            print(f"2 x idle TTFT (p50 at 1 client) + one decode step (TPOT p50 at {hi['clients']}): "
                  f"{bound * 1e3:.1f} ms")
            for what, v in [('all requests', hi['ttft_p99']),
                            ("after the start (each client's first request left out)", hi['ttft_steady_p99'])]:
                print(f"  TTFT p99 at {hi['clients']} clients, {what}: {v * 1e3:.1f} ms "
                      f"({'within' if v <= bound else 'over'})")
        if a.json:
            with open(a.json, 'w') as f:
                json.dump(rows, f, indent=1)
    finally:
        if proc:
            proc.terminate()
            proc.wait(30)


if __name__ == '__main__':
    main()
