"""mmgpt's GPT-2 BPE tokenizer against implementations nobody here wrote.

Run by ctest as: /usr/bin/python3 test_bpe_conformance.py --mmgpt PATH --workdir DIR
Reads data/ (tiny-gpt2-hf, tinyshakespeare.txt, llama.cpp's GPT-2 vocabulary
test) and tests/tokenizer/node_modules (scripts/setup.sh runs `npm ci`).

Compares `mmgpt tokenize` id for id with js-tiktoken's gpt2 encoding on all of
tinyshakespeare, llama.cpp's 46 GPT-2 cases (also against their .out ids, made
by Hugging Face's tokenizer), the committed multilingual corpus and seeded
random Unicode text; then checks tokenize -> detokenize returns every input
byte for byte, random bytes that are not UTF-8 included.

The \\s question: JavaScript's \\s is not Unicode's White_Space (it adds U+FEFF
and lacks U+0085). mmgpt follows White_Space, the \\s of OpenAI's original
(Python `regex`), so the ids must equal js-tiktoken run with White_Space in its
pattern (reference.js), and stock js-tiktoken may differ only on texts holding
U+0085 or U+FEFF (the corpus has both, so that difference is shown to exist).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--workdir', required=True)
args = parser.parse_args()
W = args.workdir
shutil.rmtree(W, ignore_errors=True)
os.makedirs(os.path.join(W, 'cases'))

DATA = os.path.join(os.path.dirname(os.path.dirname(HERE)), 'data')
MODEL_DIR = os.path.join(DATA, 'models', 'tiny-gpt2-hf')
SHAKESPEARE = os.path.join(DATA, 'tinyshakespeare.txt')
LLAMA_INP = os.path.join(DATA, 'gpt2', 'llamacpp-vocab-gpt-2.inp')
LLAMA_OUT = os.path.join(DATA, 'gpt2', 'llamacpp-vocab-gpt-2.out')
if not os.path.isdir(os.path.join(HERE, 'node_modules', 'js-tiktoken')):
    sys.exit(f'FAIL: {HERE}/node_modules/js-tiktoken is missing: run scripts/setup.sh (it runs `npm ci` there)')
NODE = shutil.which('node')
if NODE is None:
    sys.exit('FAIL: node is not installed: run scripts/setup.sh')

failures = []


def check(name, ok, detail=''):
    if not ok:
        failures.append(name)
        print(f'[FAIL] {name}: {detail}')


def mmgpt(*argv):
    p = subprocess.run([args.mmgpt, *argv], capture_output=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f'FAIL: mmgpt {" ".join(argv)} exited {p.returncode}: {p.stderr.decode(errors="replace")}')
    return p.stdout


model = os.path.join(W, 'tiny-gpt2.mmgpt')
mmgpt('convert', MODEL_DIR, '-o', model)

# --- the texts: (name, bytes)
# The sanitizer stage runs a slice (scripts/test-sanitizers.sh sets
# MMGPT_TEST_SLICE=sanitizers): tinyshakespeare's first 64 KB and 4 of the
# random texts; the host suite runs all of it.
SLICE = os.environ.get('MMGPT_TEST_SLICE') == 'sanitizers'
if SLICE:
    print('[SLICE] tinyshakespeare.txt: its first 64 KB; random texts: 4 of 24 (the host suite runs all)', flush=True)
cases = []
with open(SHAKESPEARE, 'rb') as f:
    cases.append(('tinyshakespeare.txt', f.read(65536) if SLICE else f.read()))

# llama.cpp writes each case followed by "\n__ggml_vocab_test__\n" (convert_hf_to_gguf_update.py),
# so splitting on that separator gives the exact texts, leading/trailing newlines included.
with open(LLAMA_INP, 'rb') as f:
    inp = f.read().decode('utf-8')
llama_texts = inp.split('\n__ggml_vocab_test__\n')
check('llama.cpp .inp ends with a separator', llama_texts[-1] == '', repr(llama_texts[-1][:40]))
llama_texts = llama_texts[:-1]
with open(LLAMA_OUT, 'rb') as f:
    llama_expected = [[int(t) for t in line.split()] for line in f.read().decode().split('\n')[:len(llama_texts)]]
check('llama.cpp has 46 cases', len(llama_texts) == 46 == len(llama_expected), f'{len(llama_texts)} cases')
for i, t in enumerate(llama_texts):
    cases.append((f'llama.cpp case {i} {t[:20]!r}', t.encode('utf-8')))
n_llama_first = 1

corpus_dir = os.path.join(HERE, 'corpus')
for name in sorted(os.listdir(corpus_dir)):
    with open(os.path.join(corpus_dir, name), 'rb') as f:
        cases.append((f'corpus/{name}', f.read()))

# Seeded random text over code points assigned in this Python's Unicode (plus
# ASCII, whitespace and apostrophes at higher weight, so every rule is hit).
rng = random.Random(20240531)
assigned = [c for c in range(0x20, 0x30000) if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) != 'Cn']
common = list("  '''sStTrRvVmMlLdDe\n\n\t\r0123456789.,!?-") + ['\u00a0', '\u3000', '\u2003', '\r\n', '\u0085', '\ufeff']
for k in range(4 if SLICE else 24):
    parts = []
    for _ in range(3000):
        r = rng.random()
        parts.append(rng.choice(common) if r < 0.45 else chr(rng.choice(assigned)) if r < 0.7 else
                     chr(rng.randrange(0x61, 0x7b)))
    cases.append((f'random text {k}', ''.join(parts).encode('utf-8')))

specials = ['<|endoftext|>', 'a<|endoftext|>b', ' <|endoftext|> ', '<|endoftext|><|endoftext|>x', '<|endoftext',
            'Hello<|endoftext|>\n\nWorld <|endoftext|>', '<|endoftext|>'.join(['', 'x', ' y', '\n'])]
for t in specials:
    cases.append((f'special {t!r}', t.encode('utf-8')))

paths = []
for i, (_, data) in enumerate(cases):
    p = os.path.join(W, 'cases', f'{i:04d}.txt')
    with open(p, 'wb') as f:
        f.write(data)
    paths.append(p)
list_file = os.path.join(W, 'cases.list')
with open(list_file, 'w') as f:
    f.write('\n'.join(paths) + '\n')
ref_file = os.path.join(W, 'reference.json')
p = subprocess.run([NODE, os.path.join(HERE, 'reference.js'), list_file, ref_file], capture_output=True, timeout=600)
if p.returncode != 0:
    sys.exit(f'FAIL: node reference.js failed: {p.stderr.decode(errors="replace")}')
with open(ref_file) as f:
    ref = json.load(f)


def ids_of(out):
    return [int(t) for t in out.split()]


def first_diff(a, b):
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f'first difference at id {n}: mmgpt {a[n:n + 6]} vs reference {b[n:n + 6]} ({len(a)} vs {len(b)} ids)'


total_bytes = total_ids = stock_diffs = 0
for i, (name, data) in enumerate(cases):
    got = ids_of(mmgpt('tokenize', '-m', model, '-f', paths[i]))
    total_bytes += len(data)
    total_ids += len(got)
    check(f'{name}: same ids as js-tiktoken', got == ref['white_space'][i], first_diff(got, ref['white_space'][i]))
    if ref['stock'][i] != ref['white_space'][i]:
        stock_diffs += 1
        text = data.decode('utf-8')
        check(f'{name}: stock js-tiktoken differs only where U+0085/U+FEFF are',
              '\u0085' in text or '\ufeff' in text, first_diff(ref['white_space'][i], ref['stock'][i]))
    if name.startswith('llama.cpp case'):
        k = int(name.split()[2])
        check(f'{name}: same ids as llama.cpp .out', got == llama_expected[k], first_diff(got, llama_expected[k]))
check('stock js-tiktoken shows the \\s difference on the corpus', stock_diffs > 0, 'no difference seen')

# --no-special: <|endoftext|> is plain text, so it must equal the ids of the text with no special token at all
# (js-tiktoken's allowedSpecial=[] would refuse the text; encoding the halves around the '|' proves the same).
t = 'a<|endoftext|>b'
plain = ids_of(mmgpt('tokenize', '-m', model, '-p', t, '--no-special'))
check('--no-special encodes <|endoftext|> as text', 50256 not in plain and len(plain) > 3, str(plain))
check('special token by default', ids_of(mmgpt('tokenize', '-m', model, '-p', t)) == [64, 50256, 65])

# --- round trip, byte for byte
rt = list(enumerate(paths))
junk = os.path.join(W, 'random-bytes.bin')
rb = random.Random(7)
junk_data = bytes(rb.randrange(256) for _ in range(200000)) + b'\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80\xe2\x82'
try:
    junk_data.decode('utf-8')
    check('random bytes are not UTF-8', False)
except UnicodeDecodeError:
    pass
with open(junk, 'wb') as f:
    f.write(junk_data)
rt.append((len(paths), junk))
for i, path in rt:
    with open(path, 'rb') as f:
        data = f.read()
    for flags in ([], ['--no-special']):
        ids_path = os.path.join(W, 'ids.txt')
        with open(ids_path, 'wb') as f:
            f.write(mmgpt('tokenize', '-m', model, '-f', path, *flags))
        back = mmgpt('detokenize', '-m', model, '-f', ids_path)
        check(f'round trip {path} {flags}', back == data, f'{len(back)} bytes back of {len(data)}')
        total_bytes += len(data)

print(f'{len(cases)} texts ({len(llama_texts)} llama.cpp cases), {total_ids} ids compared with js-tiktoken; '
      f'{len(rt) * 2} round trips; {total_bytes} bytes in all; stock js-tiktoken differed on {stock_diffs} texts '
      f'(U+0085/U+FEFF)')
if failures:
    print(f'{len(failures)} FAILED')
    sys.exit(1)
print('all passed')
