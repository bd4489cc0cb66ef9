"""Sharding mmgpt's batch jobs over a Dask cluster (dask.distributed).

    from dask.distributed import Client
    import mmgpt.dask
    client = Client("tcp://scheduler:8786")          # or Client(LocalCluster(...))
    r = mmgpt.dask.perplexity(client, "/models/gpt2.mmgpt", open("corpus.txt").read())
    outs = mmgpt.dask.generate(client, "/models/gpt2.mmgpt", prompts, max_new_tokens=64, seed=1)

`model_path` is opened by the workers: the file must be at that path on every
worker's host (a copy on each, or shared storage). Each worker process maps it
once and keeps it for all its tasks; worker processes on one host share its
pages. Tasks are retried by Dask when they fail or their worker dies.

perplexity() runs the windows of one `mmgpt perplexity` run, a range of them
per task, and adds the NLL sums (double) in window order: the figure equals
the single-process one to rounding (1e-12 relative). generate() runs the
prompts in batches, a batch per task; each result is what Model.generate
gives for that prompt alone with the same arguments and seed, in prompt order.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Dict, List, Optional, Sequence

import mmgpt

__all__ = ["perplexity", "generate"]

_models: Dict[str, "mmgpt.Model"] = {}
_models_lock = threading.Lock()


def _model(path: str) -> "mmgpt.Model":
    """The worker process's Model for path, loaded (mapped) on first use."""
    with _models_lock:
        lm = _models.get(path)
        if lm is None:
            lm = _models[path] = mmgpt.load(path)
        return lm


def _plan(path: str, text, ctx, stride):
    """On a worker: the token ids of text and the window plan's size."""
    import numpy as np

    lm = _model(path)
    ids = np.asarray(lm.encode(text) if isinstance(text, str) else text, dtype=np.int32)
    d = lm._m.perplexity(ids, ctx, stride, 0, 0, 0)  # no window run: only the plan
    return ids, d["windows_planned"], d["ctx"], d["stride"]


def _windows(path: str, ids, ctx, stride, begin: int, end: int, threads: int):
    d = _model(path)._m.perplexity(ids, ctx, stride, threads, begin, end)
    return d["nll_sum"], d["tokens"], d["windows"]


def _batch(path: str, prompts, kwargs):
    return _model(path).generate_batch(prompts, **kwargs)


def _workers(client) -> int:
    return max(1, len(client.scheduler_info().get("workers", {})))


def perplexity(client, model_path: str, text, ctx: Optional[int] = None, stride: Optional[int] = None, *,
               threads: Optional[int] = None, shards: Optional[int] = None, retries: int = 2) -> "mmgpt.PerplexityResult":
    """Model.perplexity(text, ctx, stride) of the model at model_path, its
    windows spread over the client's workers (shards tasks: default 4 per
    worker). threads: the engine's threads per task (None: all the worker's)."""
    for name, value in (("ctx", ctx), ("stride", stride), ("shards", shards), ("threads", threads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise mmgpt.Error(f"{name}: must be a positive integer or None, not {value!r}")
    if not isinstance(text, str):
        text = [int(t) for t in text]
    ids, planned, ctx_used, stride_used = client.submit(_plan, model_path, text, ctx, stride, pure=False,
                                                        retries=retries).result()
    n = min(planned, shards or 4 * _workers(client))
    bounds = [planned * i // n for i in range(n + 1)]
    ids_f = client.scatter(ids, broadcast=True)
    futures = [client.submit(_windows, model_path, ids_f, ctx_used, stride_used, bounds[i], bounds[i + 1],
                             threads or 0, pure=False, retries=retries) for i in range(n)]
    parts = client.gather(futures)
    nll_sum, tokens, windows = 0.0, 0, 0
    for s, t, w in parts:  # window order, as one process sums
        nll_sum += s
        tokens += t
        windows += w
    mean = nll_sum / tokens
    return mmgpt.PerplexityResult(perplexity=math.exp(mean), mean_nll=mean, tokens=tokens, windows=windows,
                                  ctx=ctx_used, stride=stride_used)


def generate(client, model_path: str, prompts: Sequence, *, batch_size: int = 16, retries: int = 2,
             **generate_kwargs: Any) -> List["mmgpt.GenerationResult"]:
    """Model.generate for every prompt (Model.generate_batch's arguments),
    batch_size prompts per task; the results in prompt order."""
    if isinstance(prompts, (str, bytes)):
        raise mmgpt.Error("prompts: give a list of prompts")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise mmgpt.Error(f"batch_size: must be a positive integer, not {batch_size!r}")
    prompts = list(prompts)
    futures = [client.submit(_batch, model_path, prompts[i:i + batch_size], generate_kwargs, pure=False,
                             retries=retries) for i in range(0, len(prompts), batch_size)]
    out: List[mmgpt.GenerationResult] = []
    for batch in client.gather(futures):
        out.extend(batch)
    return out
