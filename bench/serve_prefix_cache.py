#!/usr/bin/env python3
"""Time to first token of `mmgpt serve` with and without its prefix cache.

    /usr/bin/python3 bench/serve_prefix_cache.py --mmgpt build/mmgpt --model M.mmgpt [--threads 2]

Requests share a long preamble (a system prompt) and differ in their last
words, as a chat front end's do. One at a time, alternating between a server
with the prefix cache (the default) and one with --prefix-cache 0, each
request's TTFT is measured from sending it to its first streamed text; the
medians and spreads (min-max) are printed, and the ratio.
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import time

PREAMBLE = ("You are a careful assistant for a public library. Answer questions about opening hours, "
            "borrowing rules, fines, reading rooms, events for children and adults, the local history "
            "collection, interlibrary loans, printing and scanning, and accessibility. ") * 6
QUESTIONS = ["When do you open on Sunday?", "How many books may I borrow?", "Is there a fine for late DVDs?",
             "Can I print in colour?", "Do you have story time for toddlers?", "Where is the history room?"]


def start(mmgpt, model, threads, extra):
    p = subprocess.Popen([mmgpt, 'serve', '-m', model, '--port', '0', '--threads', str(threads),
                          '--parallel', '2', *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    if 'http://' not in line:
        sys.exit(f'mmgpt serve did not start: {line!r}')
    return p, int(line.split('http://')[1].split()[0].split(':')[1])


def ttft(port, prompt):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=300)
    t0 = time.perf_counter()
    c.request('POST', '/v1/completions', body=json.dumps({'prompt': prompt, 'max_tokens': 4, 'seed': 1,
                                                          'ignore_eos': True, 'stream': True}))
    r = c.getresponse()
    first = None
    for line in r:
        if first is None and line.startswith(b'data: {') and b'"text":""' not in line:
            first = time.perf_counter() - t0
    c.close()
    return first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--mmgpt', required=True)
    ap.add_argument('--model', required=True)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=12)
    a = ap.parse_args()
    servers = {'prefix cache': start(a.mmgpt, a.model, a.threads, []),
               'no prefix cache': start(a.mmgpt, a.model, a.threads, ['--prefix-cache', '0'])}
    try:
        for _, port in servers.values():
            ttft(port, PREAMBLE + 'Hello?')  # warm-up, and the preamble's first pass
        times = {k: [] for k in servers}
        for i in range(a.rounds):
            prompt = PREAMBLE + QUESTIONS[i % len(QUESTIONS)] + f' ({i})'
            for k, (_, port) in servers.items():
                times[k].append(ttft(port, prompt))
        c = http.client.HTTPConnection('127.0.0.1', servers['prefix cache'][1])
        c.request('POST', '/tokenize', body=json.dumps({'content': PREAMBLE}))
        n = len(json.loads(c.getresponse().read())['tokens'])
        print(f'preamble {n} tokens, {a.rounds} requests each, --threads {a.threads}')
        for k, t in times.items():
            print(f'{k:>16}: TTFT median {statistics.median(t) * 1e3:7.1f} ms  '
                  f'({min(t) * 1e3:.1f}-{max(t) * 1e3:.1f})')
        print(f"speed-up of the median: {statistics.median(times['no prefix cache']) / statistics.median(times['prefix cache']):.1f}x")
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait(30)


if __name__ == '__main__':
    main()
