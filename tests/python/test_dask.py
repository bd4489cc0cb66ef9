"""mmgpt.dask on a LocalCluster of 2 worker processes on the loopback."""
import os
import signal
import time

import distributed  # python3-distributed, installed by scripts/setup.sh
import pytest

import mmgpt
import mmgpt.dask


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0", silence_logs=40)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def text(data):
    return (data / "tinyshakespeare.txt").read_text()[:12000]


def test_perplexity_sharded_equals_one_process(client, demo, lm, text):
    for ctx, stride in ((None, None), (64, 48), (32, 32)):
        want = lm.perplexity(text, ctx, stride)
        got = mmgpt.dask.perplexity(client, str(demo), text, ctx, stride, threads=1)
        assert (got.tokens, got.windows, got.ctx, got.stride) == (want.tokens, want.windows, want.ctx, want.stride)
        assert got.mean_nll == pytest.approx(want.mean_nll, rel=1e-12, abs=0)
        assert got.perplexity == pytest.approx(want.perplexity, rel=1e-12, abs=0)
    ids = lm.encode(text[:3000])
    assert mmgpt.dask.perplexity(client, str(demo), ids, 64, shards=3).mean_nll == pytest.approx(
        lm.perplexity(ids, 64).mean_nll, rel=1e-12, abs=0)


def test_each_worker_maps_the_model_once(client, demo, text):
    def loaded():
        return client.run(lambda: {p: id(m) for p, m in mmgpt.dask._models.items()})

    mmgpt.dask.perplexity(client, str(demo), text, 64, threads=1)
    first = loaded()
    mmgpt.dask.perplexity(client, str(demo), text, 32, threads=1)
    second = loaded()
    assert any(str(demo) in models for models in first.values())
    for w, models in first.items():  # the same Model object: not loaded again
        assert set(models) <= {str(demo)}
        if models:
            assert second[w] == models


def test_generate_in_prompt_order(client, demo, lm):
    prompts = ["ROMEO:", "JULIET:", "KING:", lm.encode("NURSE:"), "First Citizen:"]
    got = mmgpt.dask.generate(client, str(demo), prompts, batch_size=2, max_new_tokens=30, seed=7, threads=1)
    assert [r.text for r in got] == [lm.generate(p, 30, seed=7).text for p in prompts]
    assert [r.tokens for r in got] == [lm.generate(p, 30, seed=7).tokens for p in prompts]


def test_a_dead_worker_is_retried(client, demo, lm):
    prompts = [f"{name}:" for name in ("ROMEO", "JULIET", "KING", "QUEEN", "NURSE", "FRIAR")] * 2
    futures = [client.submit(mmgpt.dask._batch, str(demo), [p], dict(max_new_tokens=200, seed=3, threads=1),
                             pure=False, retries=2) for p in prompts]
    # Kill one worker process while tasks run on it; its nanny starts another.
    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    deadline = time.monotonic() + 60
    while not client.processing(workers=[victim]).get(victim):
        assert time.monotonic() < deadline, "no task reached the worker"
        time.sleep(0.01)
    os.kill(pids[victim], signal.SIGKILL)
    got = [r[0].text for r in client.gather(futures)]
    assert got == [lm.generate(p, 200, seed=3).text for p in prompts]


def test_errors(client, demo, text):
    with pytest.raises(mmgpt.Error, match="nope.mmgpt"):
        mmgpt.dask.perplexity(client, str(demo).replace("demo.mmgpt", "nope.mmgpt"), text)
    with pytest.raises(mmgpt.Error, match="ctx"):
        mmgpt.dask.perplexity(client, str(demo), text, ctx=0)
    with pytest.raises(mmgpt.Error, match="prompts"):
        mmgpt.dask.generate(client, str(demo), "ROMEO:")


@pytest.fixture(scope="module")
def nanochat(work):
    """A nanochat checkpoint (sliding windows of 129 on two of three layers, the smear, value
    embeddings) over the demo's characters, converted by the package."""
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tests" / "reference"))
    import ref_nanochat as N
    cfg = N.nanochat_config(sequence_len=256, vocab_size=65, n_layer=3, n_head=4, n_kv_head=2, n_embd=48,
                            window_pattern="SSL")
    model_path, _ = N.write_nanochat_checkpoint(N.randomize_nanochat_(N.NanochatGPT(cfg), 3), str(work / "nc"), 9)
    out = work / "nanochat.mmgpt"
    mmgpt.convert(model_path, out, tokenizer=root / "models" / "demo" / "meta.pkl")
    return out


def test_modern_block_sharded_equals_one_process(client, nanochat, text):
    lm = mmgpt.load(nanochat)
    assert (lm.config.n_kv_head, lm.config.n_ctx) == (2, 256)
    for ctx, stride in ((None, None), (200, 150)):
        want = lm.perplexity(text, ctx, stride)
        got = mmgpt.dask.perplexity(client, str(nanochat), text, ctx, stride, threads=1)
        assert (got.tokens, got.windows) == (want.tokens, want.windows)
        assert got.mean_nll == pytest.approx(want.mean_nll, rel=1e-12, abs=0)
    prompts = ["ROMEO:", text[:300], "KING:"]
    got = mmgpt.dask.generate(client, str(nanochat), prompts, batch_size=2, max_new_tokens=40, seed=5, threads=1)
    assert [r.tokens for r in got] == [lm.generate(p, 40, seed=5).tokens for p in prompts]
