"""Misuse of the command line, option by option: every bad value of every option
of every subcommand gives one line on stderr that names the option or the file,
and a non-zero exit -- never a crash, a hang, a stack trace or a silent clamp.

Run by ctest as: /usr/bin/python3 test_cli_misuse.py --mmgpt PATH --workdir DIR
Table-driven: each case is (name, argv, substring the error must contain).
"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import MM, W, check, finish, run, write_char_model  # noqa: E402

alphabet = sorted(set('\n !,.:;?abcdefghijklmnopqrstuvwxyz'))
CTX = 16
ckdir = os.path.join(W, 'ck')
ckpt, _ = write_char_model(ckdir, alphabet, n_embd=32, n_layer=1, n_head=4, ctx=CTX)
model = os.path.join(W, 'model.mmgpt')
rc, _, err = run('convert', ckpt, '-o', model)
if rc != 0:
    print(f'[FAIL] convert the tiny model: {err}')
    sys.exit(1)

# Files the cases point at.
missing = os.path.join(W, 'missing.bin')
nodir_out = os.path.join(W, 'no', 'such', 'dir', 'out.bin')
text = os.path.join(W, 'text.txt')
with open(text, 'w') as f:
    f.write('to be, or not to be: that is the question.\n')
one_char = os.path.join(W, 'one.txt')
with open(one_char, 'w') as f:
    f.write('a')
empty = os.path.join(W, 'empty.txt')
open(empty, 'w').close()
blanks = os.path.join(W, 'blanks.txt')
with open(blanks, 'w') as f:
    f.write('\n\n\r\n')
bad_ids = os.path.join(W, 'bad_ids.txt')
with open(bad_ids, 'w') as f:
    f.write('1 2 x\n')
not_model = text  # a text file is not a .mmgpt file
emptydir = os.path.join(W, 'emptydir')
os.makedirs(emptydir)
threads_absurd = str(os.cpu_count() * 64 + 1)
# Victims of "write over what is being read": copies, compared byte for byte afterwards.
victim_model = os.path.join(W, 'victim.mmgpt')
shutil.copyfile(model, victim_model)
victim_dir = os.path.join(W, 'victim_ck')
shutil.copytree(ckdir, victim_dir)
victims = {p: open(p, 'rb').read() for p in (victim_model, os.path.join(victim_dir, 'ckpt.pt'),
                                              os.path.join(victim_dir, 'meta.pkl'))}

G = ('generate', '-m', model, '-p', 'a')
P = ('perplexity', '-m', model, '-f', text)
B = ('bench', '-m', model, '--bw-mib', '16', '-r', '1')
C = ('convert', ckpt)
cases = [
    # --- the top level
    ('no subcommand', (), 'subcommand'),
    ('unknown subcommand', ('frobnicate',), 'frobnicate'),
    ('unknown top-level flag', ('--frobnicate',), '--frobnicate'),

    # --- convert
    ('convert: no input', ('convert', '-o', os.path.join(W, 'x.mmgpt')), 'input'),
    ('convert: missing input', ('convert', missing, '-o', os.path.join(W, 'x.mmgpt')), 'missing.bin'),
    ('convert: empty input path', ('convert', '', '-o', os.path.join(W, 'x.mmgpt')), 'input'),
    ('convert: input directory without a checkpoint', ('convert', emptydir, '-o', os.path.join(W, 'x.mmgpt')),
     'emptydir'),
    ('convert: empty input file', ('convert', empty, '-o', os.path.join(W, 'x.mmgpt')), 'empty.txt'),
    ('convert: input not a checkpoint', ('convert', text, '-o', os.path.join(W, 'x.mmgpt')), 'text.txt'),
    ('convert: no -o', C, '--output'),
    ('convert: -o without a value', (*C, '-o'), '--output'),
    ('convert: -o empty', (*C, '-o', ''), '-o'),
    ('convert: -o in a missing directory', (*C, '-o', nodir_out), 'out.bin'),
    ('convert: -o is a directory', (*C, '-o', emptydir), 'emptydir'),
    ('convert: -o ends with a slash', (*C, '-o', emptydir + '/'), 'emptydir'),
    ('convert: -o is the input', ('convert', os.path.join(victim_dir, 'ckpt.pt'), '-o',
                                  os.path.join(victim_dir, 'ckpt.pt')), 'ckpt.pt'),
    ('convert: -o is the tokenizer found beside the input', ('convert', os.path.join(victim_dir, 'ckpt.pt'), '-o',
                                                             os.path.join(victim_dir, 'meta.pkl')), 'meta.pkl'),
    ('convert: -o is the --tokenizer', (*C, '-o', os.path.join(victim_dir, 'meta.pkl'), '--tokenizer',
                                        os.path.join(victim_dir, 'meta.pkl')), 'meta.pkl'),
    ('convert: -o is /dev/null (not a regular file)', (*C, '-o', '/dev/null'), '/dev/null'),
    ('convert: --layout unknown', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--layout', 'llama'), '--layout'),
    ('convert: --layout empty', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--layout', ''), '--layout'),
    ('convert: --n-head 0', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--n-head', '0'), '--n-head'),
    ('convert: --n-head -4', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--n-head', '-4'), '--n-head'),
    ('convert: --n-head x', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--n-head', 'x'), '--n-head'),
    ('convert: --n-head 2.5', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--n-head', '2.5'), '--n-head'),
    ('convert: --n-head huge', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--n-head', '99999999999'), '--n-head'),
    ('convert: --n-head not dividing the width', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--n-head', '5'),
     'head'),
    ('convert: --tokenizer missing', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--tokenizer', missing), 'missing.bin'),
    ('convert: --tokenizer empty directory', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--tokenizer', emptydir),
     'emptydir'),
    ('convert: --tokenizer not a tokenizer', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--tokenizer', text),
     'text.txt'),
    ('convert: --tokenizer empty', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--tokenizer', ''), '--tokenizer'),
    ('convert: --weight-layout unknown', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--weight-layout', 'tiled'),
     '--weight-layout'),
    ('convert: unknown flag', (*C, '-o', os.path.join(W, 'x.mmgpt'), '--frobnicate'), '--frobnicate'),
    ('convert: two inputs', (*C, ckpt, '-o', os.path.join(W, 'x.mmgpt')), 'ckpt.pt'),

    # --- generate
    ('generate: no -m', ('generate', '-p', 'a'), '--model'),
    ('generate: -m missing', ('generate', '-m', missing, '-p', 'a'), 'missing.bin'),
    ('generate: -m empty', ('generate', '-m', '', '-p', 'a'), '--model'),
    ('generate: -m directory', ('generate', '-m', emptydir, '-p', 'a'), 'emptydir'),
    ('generate: -m not a model', ('generate', '-m', not_model, '-p', 'a'), 'text.txt'),
    ('generate: -m empty file', ('generate', '-m', empty, '-p', 'a'), 'empty.txt'),
    ('generate: no prompt', ('generate', '-m', model), 'prompt'),
    ('generate: -p empty', ('generate', '-m', model, '-p', ''), '-p'),
    ('generate: -p without a value', ('generate', '-m', model, '-p'), '--prompt'),
    ('generate: -p and --ids', (*G, '--ids', '1'), '--ids'),
    ('generate: --ids empty', ('generate', '-m', model, '--ids', ''), '--ids'),
    ('generate: --ids blank', ('generate', '-m', model, '--ids', ' , '), '--ids'),
    ('generate: --ids not a number', ('generate', '-m', model, '--ids', '1 x'), '--ids'),
    ('generate: --ids negative', ('generate', '-m', model, '--ids', '-1'), '--ids'),
    ('generate: --ids past the vocabulary', ('generate', '-m', model, '--ids', str(len(alphabet))), '--ids'),
    ('generate: --ids past int32', ('generate', '-m', model, '--ids', '99999999999999999999999'), '--ids'),
    ('generate: --batch-file missing', ('generate', '-m', model, '--batch-file', missing), 'missing.bin'),
    ('generate: --batch-file directory', ('generate', '-m', model, '--batch-file', emptydir), 'emptydir'),
    ('generate: --batch-file empty', ('generate', '-m', model, '--batch-file', empty), 'empty.txt'),
    ('generate: --batch-file blank lines only', ('generate', '-m', model, '--batch-file', blanks), 'blanks.txt'),
    ('generate: --batch-file with --ids', ('generate', '-m', model, '--batch-file', text, '--ids', '1'),
     '--batch-file'),
    ('generate: -n -1', (*G, '-n', '-1'), '--n-tokens'),
    ('generate: -n x', (*G, '-n', 'x'), '--n-tokens'),
    ('generate: -n 1.5', (*G, '-n', '1.5'), '--n-tokens'),
    ('generate: -n huge', (*G, '-n', '99999999999999999999'), '--n-tokens'),
    ('generate: -n past the limit', (*G, '-n', str((1 << 24) + 1)), '--n-tokens'),
    ('generate: --greedy=x', (*G, '--greedy=x'), '--greedy'),
    ('generate: --top-k empty', (*G, '--top-k', ''), '--top-k'),
    ('generate: -n empty', (*G, '-n', ''), '--n-tokens'),
    ('generate: --greedy with --top-k', (*G, '--greedy', '--top-k', '5'), '--greedy'),
    ('generate: --greedy with --min-p', (*G, '--greedy', '--min-p', '0.1'), '--greedy'),
]
for t in ('0', '-0', '-1', 'nan', 'inf', '-inf', 'x', '', '1e39'):
    cases.append((f'generate: --temperature {t!r}', (*G, '--temperature', t), '--temperature'))
for k in ('-1', 'x', '1.5', '99999999999'):
    cases.append((f'generate: --top-k {k!r}', (*G, '--top-k', k), '--top-k'))
for p in ('0', '-0.1', '1.5', '1.0001', 'nan', 'inf', 'x', ''):
    cases.append((f'generate: --top-p {p!r}', (*G, '--top-p', p), '--top-p'))
for p in ('-0.1', '1', '2', 'nan', '-inf', 'x'):
    cases.append((f'generate: --min-p {p!r}', (*G, '--min-p', p), '--min-p'))
for r in ('0', '-1', 'nan', 'inf', 'x'):
    cases.append((f'generate: --repetition-penalty {r!r}', (*G, '--repetition-penalty', r), '--repetition-penalty'))
for s in ('x', '-1', '1.5', '99999999999999999999999'):
    cases.append((f'generate: --seed {s!r}', (*G, '--seed', s), '--seed'))
for t in ('0', '-1', 'x', threads_absurd, '99999999999'):
    cases.append((f'generate: --threads {t}', (*G, '--threads', t), '--threads'))
cases += [
    ('generate: --stop empty', (*G, '--stop', ''), '--stop'),
    ('generate: --stop without a value', (*G, '--stop'), '--stop'),
    ('generate: unknown flag', (*G, '--frobnicate'), '--frobnicate'),
    ('generate: stray positional', (*G, 'extra'), 'extra'),

    # --- logits
    ('logits: no -m', ('logits', '--ids', '1', '-o', os.path.join(W, 'l.f32')), '--model'),
    ('logits: -m missing', ('logits', '-m', missing, '--ids', '1', '-o', os.path.join(W, 'l.f32')), 'missing.bin'),
    ('logits: -m directory', ('logits', '-m', emptydir, '--ids', '1', '-o', os.path.join(W, 'l.f32')), 'emptydir'),
    ('logits: no --ids', ('logits', '-m', model, '-o', os.path.join(W, 'l.f32')), '--ids'),
    ('logits: --ids empty', ('logits', '-m', model, '--ids', '', '-o', os.path.join(W, 'l.f32')), '--ids'),
    ('logits: --ids bad', ('logits', '-m', model, '--ids', '1 -2', '-o', os.path.join(W, 'l.f32')), '--ids'),
    ('logits: --ids past the context', ('logits', '-m', model, '--ids', ' '.join(['1'] * (CTX + 1)), '-o',
                                        os.path.join(W, 'l.f32')), 'context'),
    ('logits: no -o', ('logits', '-m', model, '--ids', '1'), '--output'),
    ('logits: -o empty', ('logits', '-m', model, '--ids', '1', '-o', ''), '--output'),
    ('logits: -o in a missing directory', ('logits', '-m', model, '--ids', '1', '-o', nodir_out), 'out.bin'),
    ('logits: -o is a directory', ('logits', '-m', model, '--ids', '1', '-o', emptydir), 'emptydir'),
    ('logits: -o is the model', ('logits', '-m', victim_model, '--ids', '1', '-o', victim_model), 'victim.mmgpt'),
    ('logits: -o is /dev/null (not a regular file)', ('logits', '-m', model, '--ids', '1', '-o', '/dev/null'),
     '/dev/null'),
    ('logits: unknown flag', ('logits', '-m', model, '--ids', '1', '-o', os.path.join(W, 'l.f32'), '--json'),
     '--json'),

    # --- inspect
    ('inspect: no model', ('inspect',), 'model'),
    ('inspect: missing', ('inspect', missing), 'missing.bin'),
    ('inspect: empty path', ('inspect', ''), 'model'),
    ('inspect: directory', ('inspect', emptydir), 'emptydir'),
    ('inspect: not a model', ('inspect', not_model), 'text.txt'),
    ('inspect: empty file', ('inspect', empty), 'empty.txt'),
    ('inspect: two models', ('inspect', model, model), 'model.mmgpt'),
    ('inspect: unknown flag', ('inspect', model, '--frobnicate'), '--frobnicate'),
    ('inspect: --json=x', ('inspect', model, '--json=x'), '--json'),

    # --- tokenize / detokenize
    ('tokenize: no -m', ('tokenize', '-p', 'a'), '--model'),
    ('tokenize: -m missing', ('tokenize', '-m', missing, '-p', 'a'), 'missing.bin'),
    ('tokenize: -m directory', ('tokenize', '-m', emptydir, '-p', 'a'), 'emptydir'),
    ('tokenize: no text', ('tokenize', '-m', model), 'text'),
    ('tokenize: -p and -f', ('tokenize', '-m', model, '-p', 'a', '-f', text), '--file'),
    ('tokenize: -f missing', ('tokenize', '-m', model, '-f', missing), 'missing.bin'),
    ('tokenize: -f directory', ('tokenize', '-m', model, '-f', emptydir), 'emptydir'),
    ('tokenize: -f empty path', ('tokenize', '-m', model, '-f', ''), '--file'),
    ('tokenize: character outside the vocabulary', ('tokenize', '-m', model, '-p', 'A'), 'U+0041'),
    ('tokenize: unknown flag', ('tokenize', '-m', model, '-p', 'a', '--frobnicate'), '--frobnicate'),
    ('detokenize: no -m', ('detokenize', '--ids', '1'), '--model'),
    ('detokenize: no ids', ('detokenize', '-m', model), 'ids'),
    ('detokenize: --ids bad', ('detokenize', '-m', model, '--ids', '1 x'), '--ids'),
    ('detokenize: --ids past the vocabulary', ('detokenize', '-m', model, '--ids', '1 999'), '--ids'),
    ('detokenize: --ids and -f', ('detokenize', '-m', model, '--ids', '1', '-f', bad_ids), '--file'),
    ('detokenize: -f missing', ('detokenize', '-m', model, '-f', missing), 'missing.bin'),
    ('detokenize: -f directory', ('detokenize', '-m', model, '-f', emptydir), 'emptydir'),
    ('detokenize: -f bad ids', ('detokenize', '-m', model, '-f', bad_ids), 'bad_ids.txt'),
    ('detokenize: unknown flag', ('detokenize', '-m', model, '--ids', '1', '--frobnicate'), '--frobnicate'),

    # --- perplexity
    ('perplexity: no -m', ('perplexity', '-f', text), '--model'),
    ('perplexity: -m missing', ('perplexity', '-m', missing, '-f', text), 'missing.bin'),
    ('perplexity: -m directory', ('perplexity', '-m', emptydir, '-f', text), 'emptydir'),
    ('perplexity: no -f', ('perplexity', '-m', model), '--file'),
    ('perplexity: -f missing', ('perplexity', '-m', model, '-f', missing), 'missing.bin'),
    ('perplexity: -f directory', ('perplexity', '-m', model, '-f', emptydir), 'emptydir'),
    ('perplexity: -f empty path', ('perplexity', '-m', model, '-f', ''), '--file'),
    ('perplexity: -f empty file', ('perplexity', '-m', model, '-f', empty), 'empty.txt'),
    ('perplexity: -f one token', ('perplexity', '-m', model, '-f', one_char), 'one.txt'),
]
for c in ('0', '1', '-1', 'x', '2.5', str(CTX + 1), '99999999999999999999999'):
    cases.append((f'perplexity: --ctx {c}', (*P, '--ctx', c), '--ctx'))
for s in ('0', '-1', 'x', '9', '99999999999999999999999'):
    cases.append((f'perplexity: --stride {s}', (*P, '--ctx', '8', '--stride', s), '--stride'))
for t in ('0', '-1', 'x', threads_absurd):
    cases.append((f'perplexity: --threads {t}', (*P, '--threads', t), '--threads'))
# --kv-dtype (generate, perplexity, bench): only f32, bf16, f16; --kl-base must be a model
for v in ('x', 'q8_0', 'F16', ''):
    cases.append((f'generate: --kv-dtype {v!r}', (*G, '--kv-dtype', v), '--kv-dtype'))
    cases.append((f'perplexity: --kv-dtype {v!r}', (*P, '--kv-dtype', v), '--kv-dtype'))
    cases.append((f'bench: --kv-dtype {v!r}', (*B, '--kv-dtype', v), '--kv-dtype'))
cases += [
    ('perplexity: --kl-base missing', (*P, '--kl-base', missing), 'missing.bin'),
    ('perplexity: --kl-base directory', (*P, '--kl-base', emptydir), 'emptydir'),
    ('perplexity: --kl-base empty', (*P, '--kl-base', ''), '--kl-base'),
]
cases += [
    ('perplexity: --json=x', (*P, '--json=x'), '--json'),
    ('perplexity: unknown flag', (*P, '--frobnicate'), '--frobnicate'),

    # --- bench
    ('bench: no -m', ('bench', '-p', '2'), '--model'),
    ('bench: -m missing', ('bench', '-m', missing), 'missing.bin'),
    ('bench: -m directory', ('bench', '-m', emptydir), 'emptydir'),
    ('bench: -m not a model', ('bench', '-m', not_model), 'text.txt'),
]
for opt, values in (('-p', ('', ',', '0', '-1', 'x', '1,,2', '2,', '4,x', '99999999999999999999')),
                    ('-n', ('', '-1', 'x', '1,2', '99999999999999999999')),
                    ('-t', ('', ',', '0', '-1', 'x', '1,,2', threads_absurd, f'1,{threads_absurd}')),
                    ('-b', ('', ',', '0', '-1', 'x', '257', '1,,2')),
                    ('-r', ('', '0', '-1', 'x', '1001')),
                    ('--bw-mib', ('', '0', '15', '-1', 'x'))):
    long = {'-p': '--n-prompt', '-n': '--n-gen', '-t': '--threads', '-b': '--batch', '-r': '--repetitions',
            '--bw-mib': '--bw-mib'}[opt]
    for v in values:
        cheap = ()  # small runs in case the value were accepted
        for o, x in (('-p', '2'), ('-n', '1'), ('-t', '1')):
            if o != opt:
                cheap += (o, x)
        cases.append((f'bench: {opt} {v!r}', (*B, *cheap, opt, v), long))
cases += [
    ('bench: --json=x', (*B, '--json=x'), '--json'),
    ('bench: unknown flag', (*B, '--frobnicate'), '--frobnicate'),
]

# Run them all, a few at a time; each must end well within its timeout (a hang fails).
TIMEOUT = 60
start = time.monotonic()
pending = list(cases)
running = []
results = {}
while pending or running:
    while pending and len(running) < 4:
        name, argv, mention = pending.pop(0)
        p = subprocess.Popen([MM, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        running.append((name, argv, mention, p, time.monotonic()))
    name, argv, mention, p, t0 = running.pop(0)
    try:
        out, err = p.communicate(timeout=max(1, TIMEOUT - (time.monotonic() - t0)))
        results[name] = (argv, mention, p.returncode, err.decode('utf-8', 'replace'))
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        results[name] = (argv, mention, None, f'hung: still running after {TIMEOUT} s')

for name, _, _ in cases:
    argv, mention, rc, err = results[name]
    lines = err.splitlines()
    ok = (rc is not None and 0 < rc < 128 and len(lines) == 1 and err.endswith('\n')
          and lines[0].startswith('mmgpt: error: ') and mention in lines[0])
    check(name, ok, f'argv {list(argv)[1:]!r}: exit {rc}, stderr {err!r}, wanted one error line mentioning {mention!r}')

for path, before in victims.items():
    check(f'misuse left {os.path.basename(path)} intact', open(path, 'rb').read() == before)
check('/dev/null is still a character device', os.path.exists('/dev/null') and
      not os.path.isfile('/dev/null'))

# The valid neighbours of those values still work (the contract is unchanged).
valid = [
    ('generate -n 0', (*G, '-n', '0')),
    ('generate --top-k 0 --top-p 1 --min-p 0', (*G, '-n', '3', '--top-k', '0', '--top-p', '1', '--min-p', '0', '--seed', '1')),
    ('generate --temperature 1e-3 --top-p 0.5 --min-p 0.5', (*G, '-n', '3', '--temperature', '1e-3', '--top-p', '0.5', '--min-p', '0.5')),
    ('generate --threads at the CPU count', (*G, '-n', '3', '--threads', str(os.cpu_count()), '--seed', '1')),
    ('generate --seed 0', (*G, '-n', '3', '--seed', '0')),
    ('generate --seed 2^64-1', (*G, '-n', '3', '--seed', str(2**64 - 1))),
    ('generate --ids with commas', ('generate', '-m', model, '--ids', '1,2', '-n', '3')),
    ('perplexity --ctx 2 --stride 2', (*P, '--ctx', '2', '--stride', '2')),
    ('perplexity --ctx at the context length', (*P, '--ctx', str(CTX))),
    ('generate --kv-dtype f16', (*G, '-n', '3', '--kv-dtype', 'f16', '--seed', '1')),
    ('perplexity --kv-dtype bf16 --kl-base the model itself', (*P, '--kv-dtype', 'bf16', '--kl-base', model)),
    ('bench --kv-dtype f16', (*B, '-n', '1', '-t', '1', '-p', '2', '--kv-dtype', 'f16')),
    ('bench -n 0 -t 1 -p 2 -b 1,2', (*B, '-n', '0', '-t', '1', '-p', '2', '-b', '1,2')),
    ('bench -p past the context (clamped with a note, as documented)', (*B, '-n', '1', '-t', '1', '-p', '99')),
    ('detokenize with no ids in the file', ('detokenize', '-m', model, '-f', empty)),
    ('tokenize an empty file', ('tokenize', '-m', model, '-f', empty)),
]
for name, argv in valid:
    rc, out, err = run(*argv, timeout=TIMEOUT)
    check(f'still valid: {name}', rc == 0, f'exit {rc}, stderr {err!r}')
print(f'{len(cases)} misuse cases and {len(valid)} valid ones in {time.monotonic() - start:.1f} s')
finish()
