"""The Python package against the command line: the same model, options and
seed give the same bytes, ids, logits and perplexity."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import mmgpt
from conftest import ROOT


def test_convert_equals_cli(cli, work, demo):
    out = work / "demo-cli.mmgpt"
    cli("convert", ROOT / "models" / "demo" / "ckpt.pt", "-o", out)
    assert out.read_bytes() == demo.read_bytes()


def test_config(lm):
    import torch

    args = torch.load(ROOT / "models" / "demo" / "ckpt.pt", map_location="cpu")["model_args"]
    c = lm.config
    assert (c.n_layer, c.n_head, c.n_embd, c.n_ctx, c.vocab_size) == (
        args["n_layer"], args["n_head"], args["n_embd"], args["block_size"], args["vocab_size"])
    assert (c.n_ff, c.n_kv_head, c.head_dim) == (4 * args["n_embd"], args["n_head"], args["n_embd"] // args["n_head"])
    assert repr(c).startswith("Config(n_layer=")


@pytest.mark.parametrize("args,kwargs", [
    (["--seed", "7"], dict(seed=7)),
    (["--greedy"], dict(greedy=True)),
    (["--seed", "3", "--temperature", "1.3", "--top-k", "0", "--top-p", "0.9"],
     dict(seed=3, temperature=1.3, top_k=0, top_p=0.9)),
    (["--seed", "5", "--min-p", "0.05", "--repetition-penalty", "1.3"],
     dict(seed=5, min_p=0.05, repetition_penalty=1.3)),
    (["--seed", "11", "--stop", "\n\n"], dict(seed=11, stop=["\n\n"])),
])
def test_generate_equals_cli(cli, demo, lm, args, kwargs):
    p = cli("generate", "-m", demo, "-p", "ROMEO:", "-n", 80, *args)
    expected = p.stdout[len(b"ROMEO:"):-1]  # the CLI prints the prompt, the continuation and a newline
    r = lm.generate("ROMEO:", 80, **kwargs)
    assert r.text_bytes == expected
    assert r.text == expected.decode()
    assert r.stop_reason in ("length", "stop", "eos")
    assert len(r.tokens) <= 80
    ids = cli("generate", "-m", demo, "-p", "ROMEO:", "-n", 80, "--print-ids", *args).stdout.split()
    assert r.tokens == [int(t) for t in ids]


def test_prompt_as_ids(cli, demo, lm):
    ids = lm.encode("JULIET:")
    r = lm.generate(ids, 40, seed=9)
    assert r.text == lm.generate("JULIET:", 40, seed=9).text
    p = cli("generate", "-m", demo, "--ids", " ".join(map(str, ids)), "-n", 40, "--seed", 9, "--print-ids")
    assert r.tokens == [int(t) for t in p.stdout.split()]


def test_stream_joined_equals_generate(lm):
    s = lm.stream("ROMEO:", 120, seed=21)
    assert s.result is None
    pieces = list(s)
    assert len(pieces) > 1
    want = lm.generate("ROMEO:", 120, seed=21)
    assert "".join(pieces) == want.text
    assert s.result == want and s.result.stop_reason == "length"
    s = lm.stream("ROMEO:", 200, seed=4, stop=["\n"])
    stopped = list(s)
    want = lm.generate("ROMEO:", 200, seed=4, stop=["\n"])
    assert "".join(stopped) == want.text
    assert s.result == want and s.result.stop_reason == "stop"
    assert list(s) == []  # an ended stream stays ended


def test_stream_break_stops_generation(lm):
    t0 = time.monotonic()
    it = lm.stream("ROMEO:", 100000, seed=1, ignore_eos=True)
    for i, _ in enumerate(it):
        if i == 3:
            break
    assert it.result is None
    it.close()
    assert time.monotonic() - t0 < 30
    assert it.result.stop_reason == "interrupted" and 4 <= len(it.result.tokens) < 100000


def test_generate_batch_each_as_alone(lm):
    prompts = ["ROMEO:", "JULIET:", lm.encode("KING")]
    batch = lm.generate_batch(prompts, 50, seed=13)
    assert [r.text for r in batch] == [lm.generate(p, 50, seed=13).text for p in prompts]


def test_logits_equal_cli(cli, demo, lm, work):
    ids = lm.encode("ROMEO: O, she doth teach the torches")
    out = work / "logits.bin"
    cli("logits", "-m", demo, "--ids", " ".join(map(str, ids)), "-o", out)
    expected = np.fromfile(out, dtype="<f4").reshape(len(ids), lm.config.vocab_size)
    got = lm.logits(ids)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(got, expected)
    assert np.array_equal(lm.logits(ids, threads=1), expected)


def test_perplexity_equals_cli(cli, demo, lm, work):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 8
    f = work / "ppl.txt"
    f.write_text(text)
    for ctx, stride in ((None, None), (64, 32)):
        extra = [] if ctx is None else ["--ctx", ctx, "--stride", stride]
        j = json.loads(cli("perplexity", "-m", demo, "-f", f, "--json", *extra).stdout)
        r = lm.perplexity(text, ctx, stride)
        assert r.tokens == j["tokens"]
        assert r.mean_nll == pytest.approx(j["mean_nll"], rel=1e-12, abs=0)
        assert r.perplexity == pytest.approx(j["perplexity"], rel=1e-12, abs=0)
        assert lm.perplexity(lm.encode(text), ctx, stride).mean_nll == r.mean_nll


def test_gpt2_bpe_encode_decode(gpt2, cli):
    text = "Hello, world! It's 2026 — naïve café, 東京 🤖 <|endoftext|> end"
    ids = gpt2.encode(text)
    assert 50256 in ids
    assert 50256 not in gpt2.encode(text, allow_special=False)
    assert gpt2.decode(ids) == text
    assert gpt2.decode_bytes(ids) == text.encode()
    # "🤖" is three byte-level tokens; the first alone is half a character:
    # decode_bytes gives its exact bytes, decode replaces them.
    robot = gpt2.encode("🤖")
    assert len(robot) == 3
    assert gpt2.decode_bytes(robot[:1]) == "🤖".encode()[:2]
    assert gpt2.decode(robot[:1]) == "\ufffd"


def test_errors(lm, work):
    assert issubclass(mmgpt.Error, ValueError)
    with pytest.raises(mmgpt.Error, match="nope.mmgpt"):
        mmgpt.load(work / "nope.mmgpt")
    bad = work / "bad.mmgpt"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(mmgpt.Error, match="bad.mmgpt"):
        mmgpt.load(bad)
    with pytest.raises(mmgpt.Error, match="token id 65 is outside the vocabulary"):
        lm.generate([1, 65])
    with pytest.raises(mmgpt.Error, match="token id -1"):
        lm.logits([-1])
    with pytest.raises(mmgpt.Error, match="outside the vocabulary"):
        lm.decode([10**6])
    with pytest.raises(mmgpt.Error):
        lm.logits(list(range(10)) * 100)  # more than n_ctx ids
    with pytest.raises(mmgpt.Error, match="temperature"):
        lm.generate("A", 5, temperature=0)
    with pytest.raises(mmgpt.Error, match="top_p|top-p"):
        lm.generate("A", 5, top_p=1.5)
    with pytest.raises(mmgpt.Error, match="max_new_tokens"):
        lm.generate("A", -1)
    with pytest.raises(mmgpt.Error, match="max_new_tokens"):
        lm.generate("A", 10**30)
    with pytest.raises(mmgpt.Error, match="top_k"):
        lm.generate("A", 5, top_k=2**40)
    with pytest.raises(mmgpt.Error, match="temperature"):
        lm.generate("A", 5, temperature=float("nan"))
    with pytest.raises(mmgpt.Error, match="seed"):
        lm.generate("A", 5, seed=-3)
    with pytest.raises(mmgpt.Error, match="threads"):
        lm.generate("A", 5, threads=0)
    with pytest.raises(mmgpt.Error, match="prompt"):
        lm.generate("", 5)
    with pytest.raises(mmgpt.Error, match="stop"):
        lm.generate("A", 5, stop=[""])
    with pytest.raises(mmgpt.Error, match="ctx"):
        lm.perplexity("abc", ctx=0)
    with pytest.raises(mmgpt.Error, match="nope.pt"):
        mmgpt.convert(work / "nope.pt", work / "x.mmgpt")
    assert not (work / "x.mmgpt").exists()


def test_threads_run_in_parallel(lm):
    # The GIL is released while the engine computes: a Python thread keeps
    # running during a long call, and concurrent calls give sequential results.
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    expected = lm.generate("ROMEO:", 300, seed=2, threads=1).text
    before = len(ticks)
    lm.generate("ROMEO:", 300, seed=2, threads=1)
    done.set()
    t.join()
    assert len(ticks) - before > 10

    results = [None] * 4

    def work_(i):
        results[i] = lm.generate("ROMEO:", 300, seed=2, threads=1).text

    threads = [threading.Thread(target=work_, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [expected] * 4


def _interrupted(demo, work):
    """Runs `work` (Python lines, after `lm = mmgpt.load(...)`) in a child, sends it
    SIGINT a second after it says ready; returns its output once it exits."""
    code = f"import mmgpt\nlm = mmgpt.load({str(demo)!r})\n" + work
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 10
    return out


def test_ctrl_c_stops_generate(demo):
    out = _interrupted(demo, "print('ready', flush=True)\n"
                             "try:\n"
                             "    lm.generate('ROMEO:', 10**7, ignore_eos=True, seed=1)\n"
                             "except KeyboardInterrupt:\n"
                             "    print('interrupted', flush=True)\n")
    assert "interrupted" in out


def test_ctrl_c_stops_stream(demo):
    out = _interrupted(demo, "s = lm.stream('ROMEO:', 10**7, ignore_eos=True, seed=1)\n"
                             "print('ready', flush=True)\n"
                             "try:\n"
                             "    for piece in s:\n"
                             "        pass\n"
                             "except KeyboardInterrupt:\n"
                             "    s.close()\n"
                             "    print('interrupted', s.result.stop_reason, flush=True)\n")
    assert "interrupted interrupted" in out


def test_help_is_useful():
    assert "Maps and validates" in mmgpt.load.__doc__
    assert "iterator of text pieces" in mmgpt.Model.stream.__doc__


CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}{{ 'ASSISTANT' ~ suffix }}:{% endif %}")
CHAT = [{"role": "system", "content": "You speak as Shakespeare."}, {"role": "user", "content": "ROMEO: speak."}]


def test_apply_chat_template_equals_cli(cli, work, lm):
    template, messages = work / "chat.jinja", work / "chat-messages.json"
    template.write_text(CHAT_TEMPLATE)
    messages.write_text(json.dumps({"messages": CHAT, "suffix": "!"}))
    want = cli("chat-template", "--template", template, "--messages", messages, "--add-generation-prompt").stdout
    got = lm.apply_chat_template(CHAT, chat_template=CHAT_TEMPLATE, suffix="!")
    assert got.encode() == want
    assert not lm.apply_chat_template(CHAT, chat_template=CHAT_TEMPLATE, add_generation_prompt=False,
                                      suffix="!").endswith("ASSISTANT!:")


def test_chat_is_generate_on_the_rendered_prompt(lm):
    prompt = lm.apply_chat_template(CHAT, chat_template=CHAT_TEMPLATE, suffix="")
    r = lm.chat(CHAT, 30, chat_template=CHAT_TEMPLATE, chat_template_kwargs={"suffix": ""}, seed=4)
    assert r.text == lm.generate(prompt, 30, seed=4).text
    s = lm.chat_stream(CHAT, 30, chat_template=CHAT_TEMPLATE, chat_template_kwargs={"suffix": ""}, seed=4)
    assert "".join(s) == r.text


def test_chat_errors(lm):
    with pytest.raises(mmgpt.Error, match="no chat template"):
        lm.chat(CHAT)  # the demo's character vocabulary carries none
    with pytest.raises(mmgpt.Error, match="line 1: roles must alternate"):
        lm.apply_chat_template(CHAT, chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(mmgpt.Error, match="unbalanced|endfor|for"):
        lm.apply_chat_template(CHAT, chat_template="{% for m in messages %}")
