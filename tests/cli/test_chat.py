"""`mmgpt chat`: a conversation in the terminal, through a chat template.

Run by ctest as: /usr/bin/python3 test_chat.py --mmgpt PATH --workdir DIR
With the bundled demo model and a --chat-template file:
  one reply (--messages FILE) is `mmgpt generate` on the prompt
    `mmgpt chat-template` renders, with the same seed;
  a conversation on stdin: turn k is generated with seed + k on the whole
    conversation so far (the replies kept as printed), resuming from the
    prefix cache (--stats says how much of the prompt it held);
  /reset and /system change the history; Ctrl-C stops a reply and the
    conversation goes on; a model without a template is refused.
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import MM, W, check, finish, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

model = os.path.join(W, 'demo.mmgpt')
rc, _, err = run('convert', os.path.join(ROOT, 'models', 'demo', 'ckpt.pt'), '-o', model)
if rc != 0:
    sys.exit(f'FAIL: converting the demo model: {err}')
template = os.path.join(W, 'chat.jinja')
with open(template, 'w') as f:
    f.write("{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}ASSISTANT:{% endif %}")


def rendered(messages):
    path = os.path.join(W, 'rendered.json')
    with open(path, 'w') as f:
        json.dump(messages, f)
    rc, out, err = run('chat-template', '--template', template, '--messages', path, '--add-generation-prompt')
    assert rc == 0, err
    return out


def generated(prompt, n, seed):
    rc, out, err = run('generate', '-m', model, '-p', prompt, '-n', str(n), '--seed', str(seed))
    assert rc == 0 and out.startswith(prompt), err
    return out[len(prompt):-1]


def chat(stdin, *extra):
    p = subprocess.run([MM, 'chat', '-m', model, '--chat-template', template, *extra], input=stdin.encode(),
                       capture_output=True, timeout=300)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


# One reply to a conversation from a file.
conversation = [{'role': 'system', 'content': 'Speak as Shakespeare.'}, {'role': 'user', 'content': 'ROMEO: hark'}]
path = os.path.join(W, 'conversation.json')
with open(path, 'w') as f:
    json.dump(conversation, f)
rc, out, err = chat('', '--messages', path, '-n', '24', '--seed', '5')
want = generated(rendered(conversation), 24, 5)
check('--messages: generate on the rendered prompt', rc == 0 and out == want + '\n', (rc, out, want, err))

# A conversation on stdin, turn by turn.
rc, out, err = chat('ROMEO: hark\nJULIET: who is there?\n', '-n', '20', '--seed', '9', '--system', 'Be brief.',
                    '--stats')
replies = out.split('\n')
history = [{'role': 'system', 'content': 'Be brief.'}]
ok = rc == 0
for k, line in enumerate(['ROMEO: hark', 'JULIET: who is there?']):
    history.append({'role': 'user', 'content': line})
    want = generated(rendered(history), 20, 9 + k)
    history.append({'role': 'assistant', 'content': want})
    ok = ok and want in out
check('turns: each generate on the conversation so far, seed + turn', ok, (out, history, err))
cached = [int(s.split(' from the prefix cache')[0].split()[-1]) for s in err.split('[turn ')[1:]]
check('turn 2 resumes from the prefix cache', len(cached) == 2 and cached[0] == 0 and cached[1] > 0, err)
rc, out2, err2 = chat('ROMEO: hark\nJULIET: who is there?\n', '-n', '20', '--seed', '9', '--system', 'Be brief.',
                      '--no-prefix-cache', '--stats')
check('--no-prefix-cache: the same replies, prefilled whole', rc == 0 and out2 == out and
      ' 0 from the prefix cache' in err2.split('[turn 2')[1], (out2, err2))

# /reset keeps the system message; /system replaces it and starts again.
rc, out, err = chat('ROMEO: hark\n/reset\nROMEO: hark\n/system Speak plainly.\nROMEO: hark\n', '-n', '12', '--seed',
                    '3', '--system', 'Be brief.')
first = generated(rendered([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'ROMEO: hark'}]),
                  12, 3)
after_reset = generated(rendered([{'role': 'system', 'content': 'Be brief.'},
                                  {'role': 'user', 'content': 'ROMEO: hark'}]), 12, 4)
after_system = generated(rendered([{'role': 'system', 'content': 'Speak plainly.'},
                                   {'role': 'user', 'content': 'ROMEO: hark'}]), 12, 5)
check('/reset and /system', rc == 0 and out == f'{first}\n{after_reset}\n{after_system}\n', (out, err))

# Ctrl-C stops the reply being generated; the next line is still answered.
p = subprocess.Popen([MM, 'chat', '-m', model, '--chat-template', template, '-n', '100000', '--seed', '1'],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
p.stdin.write(b'ROMEO: speak on\n')
p.stdin.flush()
first_bytes = p.stdout.read1(1)  # the reply has begun
p.send_signal(signal.SIGINT)
time.sleep(0.3)
try:
    out, err = p.communicate(b'JULIET: again\n', timeout=120)
except subprocess.TimeoutExpired:
    p.kill()
    out, err = p.communicate()
check('Ctrl-C stops a reply, not the chat', p.returncode == 0 and first_bytes and b'[stopped]' in err and
      out.count(b'\n') >= 2, (p.returncode, err[-300:]))

# A reply that is not whole UTF-8 (GPT-2's byte tokens, cut by -n): the
# conversation goes on, the next turn's template seeing U+FFFD for those bytes.
gpt2 = os.path.join(W, 'tiny-gpt2.mmgpt')
rc, _, err = run('convert', os.path.join(ROOT, 'data', 'models', 'tiny-gpt2-hf'), '-o', gpt2)
assert rc == 0, err
# Where does turn 1 first end inside a character? generate --logprobs names each token's bytes.
prompt = rendered([{'role': 'user', 'content': 'one'}])
cut = None
for seed in range(1, 40):
    rc, out, err = run('generate', '-m', gpt2, '-p', prompt, '-n', '400', '--seed', str(seed), '--logprobs', '0',
                       '--temperature', '2')
    assert rc == 0, err
    pieces = [e['piece'].encode() if isinstance(e['piece'], str) else bytes(e['piece'])
              for e in json.loads(out)['logprobs']]
    for k in range(1, len(pieces) + 1):
        try:
            b''.join(pieces[:k]).decode('utf-8')
        except UnicodeDecodeError:
            cut = k
            break
    if cut:
        break
check('a seed whose turn 1 ends inside a character', cut is not None)
if cut:
    p = subprocess.run([MM, 'chat', '-m', gpt2, '--chat-template', template, '-n', str(cut), '--seed', str(seed),
                        '--temperature', '2'], input=b'one\ntwo\n', capture_output=True, timeout=120)
    check('the turn after a reply cut inside a character is answered, not refused',
          p.returncode == 0 and p.stdout.count(b'\n') == 2 and b'not valid UTF-8' not in p.stderr and
          p.stdout.startswith(b''.join(pieces[:cut])), (p.stdout, p.stderr[-300:]))

# No template: refused, naming the option.
rc, _, err = run('chat', '-m', model, '--messages', path)
check('no template', rc != 0 and 'no chat template' in err and '--chat-template' in err, err)
finish()
