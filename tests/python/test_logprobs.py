"""Log-probabilities in the Python package: generate(logprobs=N) and
score(context, continuation), against the log-softmax (float64) of
Model.logits for the same tokens, and bit for bit against what `mmgpt serve`
answers (completions with echo and logprobs) for the same tokens and seed."""
import json
import subprocess
import urllib.request

import numpy as np
import pytest

import mmgpt
from conftest import cli_path

TOLERANCE = 1e-7  # relative to 1 + |value|: about two float32 roundings


def log_softmax(lm, ids):
    x = lm.logits(ids).astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True)), x


def close(got, want):
    return abs(got - want) <= TOLERANCE * (1 + abs(want))


@pytest.mark.parametrize("kwargs", [dict(greedy=True), dict(seed=7, temperature=1.2, top_k=20)])
def test_generate_logprobs(lm, kwargs):
    prompt = lm.encode("ROMEO:")
    plain = lm.generate(prompt, 20, **kwargs)
    assert plain.logprobs is None
    r = lm.generate(prompt, 20, logprobs=5, **kwargs)
    assert r.tokens == plain.tokens and r.text == plain.text  # asking for them changes nothing sampled
    assert [p.token for p in r.logprobs] == r.tokens
    ref, raw = log_softmax(lm, prompt + r.tokens)
    for i, p in enumerate(r.logprobs):
        row = len(prompt) - 1 + i
        assert close(p.logprob, ref[row, p.token])
        order = sorted(range(raw.shape[1]), key=lambda t: (-raw[row, t], t))[:5]
        assert [t for t, _ in p.top] == order
        assert all(close(v, ref[row, t]) for t, v in p.top)
        if kwargs.get("greedy"):
            assert p.token == order[0]
    # The same through generate_batch, stream and chat's options.
    batch = lm.generate_batch([prompt, prompt], 20, logprobs=5, **kwargs)
    assert batch[1].logprobs == r.logprobs
    s = lm.stream(prompt, 20, logprobs=5, **kwargs)
    assert "".join(s) == r.text
    assert s.result.logprobs == r.logprobs
    assert lm.generate(prompt, 20, logprobs=0, **kwargs).logprobs[0].top == []


def test_score(lm):
    context, continuation = "JULIET: O Romeo,", " Romeo! wherefore"
    s = lm.score(context, continuation, top_logprobs=3)
    ctx = lm.encode(context)
    cont = lm.encode(context + continuation)[len(ctx):]
    assert [p.token for p in s.tokens] == cont
    ref, raw = log_softmax(lm, ctx + cont)
    want = [ref[len(ctx) - 1 + i, t] for i, t in enumerate(cont)]
    assert all(close(p.logprob, w) for p, w in zip(s.tokens, want))
    assert close(s.logprob, sum(want))
    assert s.greedy == all(int(np.argmax(raw[len(ctx) - 1 + i])) == t for i, t in enumerate(cont))
    assert all(len(p.top) == 3 for p in s.tokens)
    # Token ids are taken as they are; a trailing space of the context moves to the continuation.
    assert lm.score(ctx, cont, top_logprobs=3) == s
    assert lm.score("JULIET: O Romeo, ", "Romeo! wherefore").logprob == s.logprob
    # The greedy continuation is greedy.
    best = lm.generate(ctx, 8, greedy=True, ignore_eos=True).tokens
    g = lm.score(ctx, best)
    assert g.greedy
    assert close(g.logprob, sum(p.logprob for p in g.tokens))


def test_score_errors(lm):
    with pytest.raises(mmgpt.Error, match="continuation"):
        lm.score("ROMEO:", "")
    with pytest.raises(mmgpt.Error, match="both as text or both as token ids"):
        lm.score("ROMEO:", [1, 2])
    with pytest.raises(mmgpt.Error, match="top_logprobs"):
        lm.score("ROMEO:", " hi", top_logprobs=21)
    with pytest.raises(mmgpt.Error, match="outside the vocabulary"):
        lm.score([1], [10**6])
    with pytest.raises(mmgpt.Error, match="exceed the context length"):
        lm.score([1], [1] * (lm.config.n_ctx + 1))
    with pytest.raises(mmgpt.Error, match="logprobs"):
        lm.generate("ROMEO:", 4, logprobs=21)


def test_equal_to_the_server(demo, lm):
    """The same tokens scored by `mmgpt serve` (echo, logprobs) and by score(): the same floats."""
    proc = subprocess.Popen([cli_path(), "serve", "-m", str(demo), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline().decode()
        assert "listening on http://" in line, line
        address = line.split("http://")[1].split()[0]
        ctx, cont = lm.encode("To be, or not"), lm.encode(" to be, that is")
        body = {"prompt": [ctx + cont], "max_tokens": 0, "echo": True, "logprobs": 2, "temperature": 0}
        req = urllib.request.Request(f"http://{address}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            out = json.load(r)
        served = out["choices"][0]["logprobs"]["token_logprobs"][len(ctx):]
        s = lm.score(ctx, cont, top_logprobs=2)
        assert [np.float32(v) for v in served] == [np.float32(p.logprob) for p in s.tokens]
        # Generated: the server's logprobs N and generate(logprobs=N), same seed.
        body = {"prompt": ctx, "max_tokens": 12, "logprobs": 3, "seed": 21, "temperature": 0.9, "top_k": 200}
        req = urllib.request.Request(f"http://{address}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            out = json.load(r)
        g = lm.generate(ctx, 12, logprobs=3, seed=21, temperature=0.9, top_k=200)
        assert out["choices"][0]["text"] == g.text
        assert [np.float32(v) for v in out["choices"][0]["logprobs"]["token_logprobs"]] == \
            [np.float32(p.logprob) for p in g.logprobs]
    finally:
        proc.terminate()
        proc.wait(30)
