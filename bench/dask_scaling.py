"""mmgpt.dask scaling: a perplexity run sharded over Dask worker processes.

Times the same run (the first --tokens tokens of --text, windows of --ctx)
in one process (Model.perplexity, 1 engine thread) and through
mmgpt.dask.perplexity on LocalClusters of 1 and 2 worker processes of one
engine thread each, the three alternated --rounds times; prints the median
seconds (min-max) of each and the speed-up of 2 workers over 1.
Run it with the interpreter the mmgpt package is installed in:

    .venv/bin/python bench/dask_scaling.py --model M.mmgpt --text corpus.txt
"""
import argparse
import statistics
import time

from distributed import Client, LocalCluster

import mmgpt
import mmgpt.dask



def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--tokens", type=int, default=20000)
    p.add_argument("--ctx", type=int, default=None)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()

    lm = mmgpt.load(a.model)
    ids = lm.encode(open(a.text, encoding="utf-8").read())[: a.tokens]
    clusters = {w: LocalCluster(n_workers=w, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address="127.0.0.1:0", silence_logs=40) for w in (1, 2)}
    clients = {w: Client(c) for w, c in clusters.items()}
    for c in clients.values():  # every worker maps the model before the timing
        mmgpt.dask.perplexity(c, a.model, ids[: 4 * lm.config.n_ctx], a.ctx, threads=1)

    runs = {"1 process": lambda: lm.perplexity(ids, a.ctx, threads=1)}
    for w, c in clients.items():
        runs[f"dask, {w} worker{'s' if w > 1 else ''}"] = lambda c=c: mmgpt.dask.perplexity(c, a.model, ids, a.ctx,
                                                                                            threads=1)
    times = {k: [] for k in runs}
    results = {}
    for _ in range(a.rounds):
        for k, f in runs.items():
            t0 = time.perf_counter()
            results[k] = f()
            times[k].append(time.perf_counter() - t0)

    base = results["1 process"]
    print(f"{a.model}: {base.tokens} tokens scored, {base.windows} windows of {base.ctx}, "
          f"perplexity {base.perplexity:.6f}; {a.rounds} rounds alternated")
    for k, t in times.items():
        r = results[k]
        assert abs(r.mean_nll - base.mean_nll) <= 1e-12 * abs(base.mean_nll), (k, r.mean_nll, base.mean_nll)
        print(f"  {k:<16} median {statistics.median(t):7.3f} s  ({min(t):.3f}-{max(t):.3f})  "
              f"{r.tokens / statistics.median(t):9.1f} tokens/s")
    s1, s2 = statistics.median(times["dask, 1 worker"]), statistics.median(times["dask, 2 workers"])
    print(f"  2 workers over 1: {s1 / s2:.2f}x")
    for c in clients.values():
        c.close()
    for c in clusters.values():
        c.close()


if __name__ == "__main__":  # worker processes are spawned and import this file
    main()
