#!/usr/bin/env python3
"""Time to first token of each turn of `mmgpt chat`, with and without its prefix cache.

    python3 bench/gpt2_shaped.py 124M /tmp/hf124
    python3 bench/chat_ttft.py --ascii-head /tmp/hf124      # see below
    build/mmgpt convert /tmp/hf124 -o /tmp/m124-q8.mmgpt --dtype q8_0
    python3 bench/chat_ttft.py --mmgpt build/mmgpt --model /tmp/m124-q8.mmgpt [--threads 2] [--rounds 7]

Each round starts two `mmgpt chat` processes in turn (which goes first
alternates from round to round), one as is (a prefix cache of one) and one
with --no-prefix-cache, and types the same five user messages (40-80 tokens
each) into each, one after the other, with the replies limited to -n tokens
(default 48) and --greedy, so both configurations see the same
conversation. The turn's prompt is the whole conversation rendered by a
ChatML template (--chat-template), so turn k's prompt begins with turn k-1's.

TTFT is measured as a user sees it: from writing the line (and its newline)
to chat's stdin to the first byte of the reply on its stdout (chat streams
the reply as it is generated and flushes each piece), so it includes
rendering the template, tokenizing, queueing, prefill, the first sample and
the pipe. The script waits 0.3 s after each reply ends before typing the
next line, and 2 s after starting the process before the first (the model's
load is not counted). chat's --stats line (stderr) gives, per turn, the
prompt tokens, those served by the prefix cache and its own TTFT (submit to
first sampled token, inside the engine); both TTFTs are printed.

--ascii-head DIR: a random-weight model samples byte tokens that do not
form valid UTF-8, and chat keeps such a reply in the history, where the
template then refuses it ("a string of the template's variables is not
valid UTF-8") on every later turn. This zeroes, in DIR/model.safetensors
(a GPT-2 directory with a tied head, as gpt2_shaped.py writes), the wte
rows of every token whose text is not printable ASCII (and of
<|endoftext|>): their logits are 0 while the largest of the others is
well above, so greedy replies are ASCII. Speed does not depend on values.
"""
import argparse
import json
import os
import queue
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

USER = [  # 40-80 GPT-2 tokens each
    "Hello! I am planning a four day hiking trip in the Scottish Highlands at the end of October with two friends. "
    "None of us has hiked there before, but we are reasonably fit and have done some long day walks in the Lake "
    "District. Could you suggest a rough route and where we might stay each night?",
    "That sounds good. What should we pack for cold and wet nights? We have ordinary three season tents and "
    "sleeping bags rated to about minus two degrees, and we would rather not buy much new gear if we can avoid it.",
    "What about food? We would like to cook simple hot meals in the evening on a small gas stove, and we want to "
    "keep our packs light. Is it easy to buy gas canisters and supplies in the villages along the way?",
    "How long would it take to drive from Edinburgh to the start of the route, and is there somewhere safe to leave "
    "a car for four or five days? We could also take a train and a bus if that is much easier.",
    "Thanks, this is really helpful. Is there anything else we should know before we go, for example about midges, "
    "mobile phone signal, river crossings after heavy rain, or letting someone know our plans in case we get lost?",
]

STATS = re.compile(r'\[turn (\d+): (\d+) prompt tokens, (\d+) from the prefix cache; first token ([\d.]+) ms; (\d+) tokens\]')


def ascii_head(hf_dir):
    """Zeroes the wte rows of tokens that are not printable ASCII (see the module's doc)."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), ord('ÿ') + 1))
    cs, n = bs[:], 0
    for b in range(256):  # GPT-2's bytes_to_unicode
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    vocab = json.load(open(os.path.join(hf_dir, 'vocab.json'), encoding='utf-8'))
    bad = [i for tok, i in vocab.items()
           if tok == '<|endoftext|>' or not all(c in byte_of and (32 <= byte_of[c] < 127 or byte_of[c] == 10)
                                                for c in tok)]
    path = os.path.join(hf_dir, 'model.safetensors')
    with open(path, 'r+b') as f:
        hlen = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(hlen))
        wte = header.get('transformer.wte.weight') or header['wte.weight']
        if wte['dtype'] != 'F32':
            sys.exit(f'{path}: wte is {wte["dtype"]}, not F32')
        row = wte['shape'][1] * 4
        for i in bad:
            f.seek(8 + hlen + wte['data_offsets'][0] + i * row)
            f.write(bytes(row))
    print(f'{path}: zeroed the wte rows of {len(bad)} of {len(vocab)} tokens (not printable ASCII)')


class Chat:
    """One `mmgpt chat` process, its stdout and stderr read by threads with timestamps."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out = queue.Queue()  # (time, bytes)
        self.stats = queue.Queue()  # (time, match)
        self.err = b''
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self):
        fd = self.p.stdout.fileno()
        while True:
            b = os.read(fd, 65536)
            if not b:
                self.out.put((time.perf_counter(), None))
                return
            self.out.put((time.perf_counter(), b))

    def _read_err(self):
        fd, buf = self.p.stderr.fileno(), ''
        while True:
            b = os.read(fd, 65536)
            if not b:
                self.stats.put((time.perf_counter(), None))
                return
            self.err += b
            buf += b.decode('utf-8', 'replace')
            while (m := STATS.search(buf)):
                self.stats.put((time.perf_counter(), m))
                buf = buf[m.end():]

    def turn(self, line, timeout=600):
        """Types line; returns (client TTFT s, --stats match, reply bytes)."""
        while not self.out.empty():  # the previous reply's trailing newline
            self.out.get_nowait()
        t0 = time.perf_counter()
        self.p.stdin.write(line.encode() + b'\n')
        self.p.stdin.flush()
        t, b = self.out.get(timeout=timeout)
        if b is None:
            raise RuntimeError('mmgpt chat ended: ' + self.err.decode('utf-8', 'replace')[-2000:])
        first, reply = t - t0, b
        _, m = self.stats.get(timeout=timeout)
        if m is None:
            raise RuntimeError('mmgpt chat ended: ' + self.err.decode('utf-8', 'replace')[-2000:])
        time.sleep(0.3)
        while not self.out.empty():
            reply += self.out.get_nowait()[1] or b''
        if b'mmgpt chat:' in self.err:
            raise RuntimeError(self.err.decode('utf-8', 'replace')[-2000:])
        return first, m, reply

    def close(self):
        self.p.stdin.close()
        self.p.wait(60)


def fmt(xs):
    return f'{statistics.median(xs):7.1f} [{min(xs):.1f}, {max(xs):.1f}]'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--ascii-head', metavar='HF_DIR', help='prepare a random-weight GPT-2 directory (see above), then exit')
    ap.add_argument('--mmgpt', help='the mmgpt binary')
    ap.add_argument('--model', help='.mmgpt model')
    ap.add_argument('--chat-template', help='Jinja chat template file (default: ChatML, written to a temp file)')
    ap.add_argument('--threads', type=int, default=0, help='chat --threads (default 0: chat\'s default, all cores)')
    ap.add_argument('--rounds', type=int, default=7, help='alternated rounds (default 7)')
    ap.add_argument('-n', type=int, default=48, help='reply length in tokens (default 48)')
    ap.add_argument('--turns', type=int, default=len(USER), help=f'turns (at most {len(USER)})')
    ap.add_argument('--json', help='write every turn of every run here')
    a = ap.parse_args()
    if a.ascii_head:
        return ascii_head(a.ascii_head)
    if not a.mmgpt or not a.model:
        ap.error('--mmgpt and --model are needed (or --ascii-head)')
    template = a.chat_template
    if not template:
        fd, template = tempfile.mkstemp(suffix='.jinja')
        os.write(fd, TEMPLATE.encode())
        os.close(fd)
    base = [a.mmgpt, 'chat', '-m', a.model, '--chat-template', template, '-n', str(a.n), '--greedy', '--seed', '1',
            '--stats']
    if a.threads:
        base += ['--threads', str(a.threads)]
    configs = {'cache': base, 'no cache': base + ['--no-prefix-cache']}
    runs = []  # {config, round, turn, client_ms, engine_ms, prompt, cached, tokens}
    replies = {}
    for r in range(a.rounds):
        order = list(configs) if r % 2 == 0 else list(configs)[::-1]
        for k in order:
            chat = Chat(configs[k])
            time.sleep(2)
            try:
                texts = []
                for t in range(a.turns):
                    first, m, reply = chat.turn(USER[t])
                    texts.append(reply)
                    runs.append({'config': k, 'round': r, 'turn': t + 1, 'client_ms': first * 1e3,
                                 'engine_ms': float(m.group(4)), 'prompt': int(m.group(2)),
                                 'cached': int(m.group(3)), 'tokens': int(m.group(5)),
                                 'reply': reply.decode('utf-8', 'replace')})
                replies.setdefault(k, texts)
                if texts != replies[k] or texts != replies.get('cache', texts):
                    print(f'note: round {r} {k}: the replies differ from the first run\'s', file=sys.stderr)
            finally:
                chat.close()
            print(f'round {r + 1}/{a.rounds} {k}: turn {a.turns} TTFT {runs[-1]["client_ms"]:.1f} ms', file=sys.stderr)
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(runs, f, indent=1)

    def sel(k, t, field):
        return [x[field] for x in runs if x['config'] == k and x['turn'] == t]

    print(f'{os.path.basename(a.model)}, --threads {a.threads or "default"}, -n {a.n} --greedy, {a.rounds} rounds '
          f'alternated; TTFT in ms, median [min, max]; client = stdin write to first stdout byte, '
          f'engine = chat --stats')
    print(f'{"turn":>4} {"prompt":>6} {"cached":>6} | {"client TTFT, cache":>24} {"client TTFT, no cache":>24} '
          f'{"ratio":>5} | {"engine, cache":>22} {"engine, no cache":>22} {"ratio":>5}')
    for t in range(1, a.turns + 1):
        prompt = sorted(set(sel('cache', t, 'prompt')) | set(sel('no cache', t, 'prompt')))
        cached = sorted(set(sel('cache', t, 'cached')))
        nc = sorted(set(sel('no cache', t, 'cached')))
        cc, cn = sel('cache', t, 'client_ms'), sel('no cache', t, 'client_ms')
        ec, en = sel('cache', t, 'engine_ms'), sel('no cache', t, 'engine_ms')
        print(f'{t:>4} {"/".join(map(str, prompt)):>6} {"/".join(map(str, cached)):>6} | {fmt(cc):>24} {fmt(cn):>24} '
              f'{statistics.median(cn) / statistics.median(cc):5.2f} | {fmt(ec):>22} {fmt(en):>22} '
              f'{statistics.median(en) / statistics.median(ec):5.2f}' + (f'  (no cache: {nc} cached!)' if nc != [0] else ''))


if __name__ == '__main__':
    main()
