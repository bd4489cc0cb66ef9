#!/usr/bin/env python3
"""What constrained decoding (structured output) costs decode: alternated
runs of `mmgpt generate --stats` with and without a JSON constraint.

    /usr/bin/python3 bench/structured_decode.py --mmgpt build/mmgpt --model M.mmgpt \\
        [--threads 2] [--rounds 7] [--n 128] [--json OUT.json]

For each schema (below), each round runs the same prompt and seed twice,
unconstrained (--ignore-eos, so it runs the whole -n) and constrained
(--json-object or --json-schema FILE), the order alternating from round to
round so a host that speeds up or slows down favours neither. The seed is
--seed plus the round. From --stats it takes the decode rate ('decode ...
tokens/s', which leaves out the prefill and the first token) and the
first-token time (prefill plus the first sample: for a constrained run,
building the vocabulary's trie and the first masks too). The table gives
per schema: decode tok/s unconstrained and constrained as median [min, max],
the slowdown (1 - constrained/unconstrained, of the medians), the tokens
the constrained runs generated (min-max: a run that ends before -n because
its JSON is complete spends more of its steps on masks not yet cached, so
the rates and slowdowns count only the rounds whose constrained run reached
-n: 'tokens' then ends '*K', K such rounds), and
the first-token time's extra (median of the rounds' differences), and the
paired slowdown: each round's 1 - constrained/unconstrained, median [min,
max] (the two runs of a round are seconds apart, so this drifts less).

Every constrained output is checked: one that ended before -n must be whole
JSON (json.loads) that its schema accepts (jsonschema); one cut at -n must be
valid UTF-8 and must not already be whole JSON. A failure is printed with its
schema, seed and output, and the script exits 1.

The schemas: 'object' (--json-object, any JSON object), 'records' (an array
of at least 100 objects {name: string of at most 16, id: integer 0..100000,
score: number, ok: boolean, tags: array of an enum}) and 'string' (a string of
at least 4000 characters: the output runs through -n). --schemas picks some.
A random-weight model is fine: the mask decides what is sampled, and speed
does not depend on the weights' values.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

SCHEMAS = {
    'object': None,  # --json-object
    'records': {
        'type': 'array', 'minItems': 100,
        'items': {
            'type': 'object',
            'properties': {
                'name': {'type': 'string', 'maxLength': 16},
                'id': {'type': 'integer', 'minimum': 0, 'maximum': 100000},
                'score': {'type': 'number'},
                'ok': {'type': 'boolean'},
                'tags': {'type': 'array', 'items': {'enum': ['red', 'green', 'blue', 'urgent', 'archived']}},
            },
            'required': ['name', 'id', 'score', 'ok', 'tags'],
        },
    },
    'string': {'type': 'string', 'minLength': 4000},
}
PROMPT = 'Here is the data as JSON:\n'

DECODE = re.compile(r'^decode\s+([\d.]+) ms\s+([\d.]+) tokens/s\s+\((\d+) tokens, (\d+) steps\)', re.M)
FIRST = re.compile(r'^first token\s+([\d.]+) ms', re.M)


def run(a, seed, constraint):
    cmd = [a.mmgpt, 'generate', '-m', a.model, '-p', a.prompt, '-n', str(a.n), '--seed', str(seed),
           '--threads', str(a.threads), '--stats'] + constraint
    p = subprocess.run(cmd, capture_output=True)
    err = p.stderr.decode('utf-8', 'replace')
    if p.returncode != 0:
        sys.exit(f'structured_decode.py: {" ".join(cmd)} failed ({p.returncode}): {err.strip()}')
    d, f = DECODE.search(err), FIRST.search(err)
    if not d or not f:
        sys.exit(f'structured_decode.py: no decode / first token line in the stats of {" ".join(cmd)}:\n{err}')
    out = p.stdout
    if out.endswith(b'\n'):
        out = out[:-1]  # generate ends its output with a newline
    prompt = a.prompt.encode()
    if not out.startswith(prompt):
        sys.exit(f'structured_decode.py: the output of {" ".join(cmd)} does not start with the prompt')
    return {'tok_s': float(d.group(2)), 'decode_ms': float(d.group(1)), 'tokens': int(d.group(3)),
            'steps': int(d.group(4)), 'first_ms': float(f.group(1)), 'text': out[len(prompt):]}


def check(name, schema, r, n):
    """None when the output is fine, else why not."""
    try:
        text = r['text'].decode('utf-8')
    except UnicodeDecodeError as e:
        return f'not valid UTF-8: {e}'
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        if r['tokens'] < n:
            return f'ended after {r["tokens"]} tokens (before -n {n}) but is not JSON: {e}'
        return None  # cut at -n: a prefix
    if schema is None:
        if not isinstance(value, dict):
            return 'not a JSON object'
        return None
    import jsonschema
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return f'does not match the schema: {e.message}'
    return None


def spread(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--mmgpt', default='build/mmgpt')
    ap.add_argument('--model', required=True)
    ap.add_argument('--rounds', type=int, default=7)
    ap.add_argument('--n', type=int, default=128, help='tokens to generate (default 128)')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--prompt', default=PROMPT)
    ap.add_argument('--schemas', default=','.join(SCHEMAS), help='comma-separated, of: ' + ', '.join(SCHEMAS))
    ap.add_argument('--json', help='write every run here')
    a = ap.parse_args()
    names = a.schemas.split(',')
    for s in names:
        if s not in SCHEMAS:
            ap.error(f'--schemas: {s!r} is not one of {", ".join(SCHEMAS)}')

    tmp = tempfile.mkdtemp(prefix='structured_decode.')
    constraint = {}
    for s in names:
        if SCHEMAS[s] is None:
            constraint[s] = ['--json-object']
        else:
            path = os.path.join(tmp, s + '.json')
            with open(path, 'w') as f:
                json.dump(SCHEMAS[s], f)
            constraint[s] = ['--json-schema', path]

    runs = {s: {'free': [], 'constrained': []} for s in names}
    failures = []
    for r in range(a.rounds):
        seed = a.seed + r
        for s in names:
            order = [('free', ['--ignore-eos']), ('constrained', constraint[s])]
            if r % 2:
                order.reverse()
            for kind, args in order:
                res = run(a, seed, args)
                res['seed'] = seed
                if kind == 'constrained':
                    why = check(s, SCHEMAS[s], res, a.n)
                    if why:
                        failures.append((s, seed, why, res['text']))
                res['text'] = res['text'].decode('utf-8', 'replace')
                runs[s][kind].append(res)
        print(f'round {r + 1}/{a.rounds} done', file=sys.stderr)

    print(f'{a.model}: -n {a.n}, --threads {a.threads}, {a.rounds} rounds; decode tokens/s median [min, max]')
    print(f'{"schema":<9} {"unconstrained":>22} {"constrained":>22} {"slowdown":>9} {"paired slowdown %":>22} '
          f'{"tokens":>8} {"first token +ms":>16}')
    table = []
    for s in names:
        fr, co = runs[s]['free'], runs[s]['constrained']
        toks = [x['tokens'] for x in co]
        first = spread([c['first_ms'] - f['first_ms'] for f, c in zip(fr, co)])
        full = [(f, c) for f, c in zip(fr, co) if c['tokens'] >= a.n]  # the rates: rounds that ran the whole -n
        if not full:
            print(f'{s:<9} no constrained run reached -n {a.n} (tokens {min(toks)}-{max(toks)}): lengthen the schema')
            continue
        uf, cf = spread([f['tok_s'] for f, _ in full]), spread([c['tok_s'] for _, c in full])
        slow = 100.0 * (1.0 - cf[0] / uf[0])
        paired = spread([100.0 * (1.0 - c['tok_s'] / f['tok_s']) for f, c in full])
        table.append({'schema': s, 'unconstrained': uf, 'constrained': cf, 'slowdown_pct': slow,
                      'paired_slowdown_pct': paired,
                      'tokens': [min(toks), max(toks)], 'first_token_extra_ms': first})
        tk = f'{min(toks)}' if min(toks) == max(toks) else f'{min(toks)}-{max(toks)}*{len(full)}'
        print(f'{s:<9} {uf[0]:6.1f} [{uf[1]:6.1f},{uf[2]:6.1f}] {cf[0]:6.1f} [{cf[1]:6.1f},{cf[2]:6.1f}] '
              f'{slow:8.1f}% {paired[0]:6.1f} [{paired[1]:6.1f},{paired[2]:6.1f}] {tk:>8} {first[0]:8.1f} [{first[1]:.0f},{first[2]:.0f}]')
    for s, seed, why, text in failures:
        print(f'FAIL {s} seed {seed}: {why}\n  schema: {json.dumps(SCHEMAS[s])}\n  output: {text!r}')
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'model': a.model, 'n': a.n, 'threads': a.threads, 'rounds': a.rounds, 'prompt': a.prompt,
                       'schemas': {s: SCHEMAS[s] for s in names}, 'table': table, 'runs': runs,
                       'failures': [{'schema': s, 'seed': seed, 'why': why,
                                     'output': t.decode('utf-8', 'replace')} for s, seed, why, t in failures]},
                      f, indent=1)
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
