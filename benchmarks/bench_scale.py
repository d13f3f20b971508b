"""Full-batch versus neighbour-sampled training of the same GAT on a large
generated graph: peak memory and training throughput (labelled nodes per
second), and samples per second of data-parallel sampled training with 1
and 2 processes.

    python benchmarks/bench_scale.py memory --nodes 1000000
    python benchmarks/bench_scale.py processes --nodes 200000

The graph is PyG's FakeDataset recipe (uniform random edges made undirected,
128 Gaussian features shifted by the node's class, 10 classes) with an exact
node count. Each configuration runs in a fresh process, so one's memory
never counts for another; a thread samples that process's resident memory
every 5 ms while it trains. Steps are timed in CPU seconds of the process
(one thread), which a machine busy with other work disturbs far less than
wall-clock time, after untimed warm-up steps (two of sampled training, one
of full-batch training), whose allocations and lazy set-up later steps do
not repeat; the data-parallel comparison is timed by the clock. ``memory`` measures full-batch training at the
``--full-sizes`` (smaller graphs of the same degree), fits memory linear in
the size, and makes one attempt at ``--nodes`` under an address-space limit
(``--guard-gb``) so that an attempt too large fails instead of exhausting
a shared machine. One thread per process unless ``--threads``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from timing import at_least, run_script, whole_numbers

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- #
# One configuration, in its own process
# --------------------------------------------------------------------------- #

def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """The largest resident set size seen while the block runs."""

    def __enter__(self):
        self.peak, self._stop = rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def make_graph(num_nodes: int, degree: float, features: int = 128, classes: int = 10, seed: int = 0):
    import torch
    from torch_geometric.data import Data
    from torch_geometric.datasets.fake import get_edge_index

    torch.manual_seed(seed)
    y = torch.randint(classes, (num_nodes,))
    edge_index = get_edge_index(num_nodes, num_nodes, degree, is_undirected=True, remove_loops=True)
    x = torch.randn(num_nodes, features) + y.unsqueeze(1)
    return Data(x=x, edge_index=edge_index, y=y)


def run_child(mode: str, num_nodes: int, degree: float, steps: int, batch_size: int,
              fanout: list, threads: int, guard_gb: float) -> dict:
    if guard_gb > 0:
        limit = int(guard_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import torch
    import torch.nn.functional as F

    from graphseq.data.neighbors import make_sampler, neighbor_loader
    from graphseq.models import GAT

    torch.set_num_threads(threads)
    data = make_graph(num_nodes, degree)
    torch.manual_seed(0)
    model = GAT(data.num_features, 10)  # gat-cora's model: 8 heads x 8, dropout 0.6.
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    result = {"mode": mode, "nodes": num_nodes, "edges": data.num_edges}
    baseline = rss_bytes()
    times = []
    try:
        with PeakMemory() as memory:
            if mode == "full":
                # One step more than timed: the first pays for the allocator's
                # first requests and lazy initialisation, which later steps do not.
                for k in range(steps + 1):
                    start = time.process_time()
                    optimizer.zero_grad()
                    loss = F.cross_entropy(model(data.x, data.edge_index), data.y)
                    loss.backward()
                    optimizer.step()
                    if k >= 1:
                        times.append(time.process_time() - start)
                samples = num_nodes
            else:
                sampler = make_sampler(data, fanout)
                seeds = torch.randperm(num_nodes)[:batch_size * (steps + 2)]
                loader = neighbor_loader(data, fanout, input_nodes=seeds, batch_size=batch_size, sampler=sampler)
                start = time.process_time()
                for k, batch in enumerate(loader):  # Sampling counts in the step's time.
                    optimizer.zero_grad()
                    out = model(batch.x, batch.edge_index)[:batch.batch_size]
                    F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
                    optimizer.step()
                    if k >= 2:  # The first two steps warm up.
                        times.append(time.process_time() - start)
                    start = time.process_time()
                samples = batch_size
    except (RuntimeError, MemoryError) as error:
        result.update(failed=str(error).splitlines()[0][:200], peak_gb=memory.peak / 2**30)
        return result
    step = statistics.median(times)
    result.update(baseline_gb=baseline / 2**30, peak_gb=memory.peak / 2**30,
                  training_gb=(memory.peak - baseline) / 2**30, step_seconds=step,
                  samples_per_second=samples / step, steps=len(times))
    return result


def child(args: list, guard_gb: float = 0.0, timeout: float = 3600) -> dict:
    command = [sys.executable, __file__, "child", *map(str, args), str(guard_gb)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS=str(args[-1]))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"mode": args[0], "nodes": args[1], "failed": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- #
# Data-parallel samples per second
# --------------------------------------------------------------------------- #

def _dp_worker(rank: int, world: int, store: str, num_nodes: int, degree: float, steps: int,
               batch_size: int, fanout: list, queue) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from graphseq import distributed
    from graphseq.data.neighbors import make_sampler, neighbor_loader
    from graphseq.models import GAT

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    data = make_graph(num_nodes, degree)
    torch.manual_seed(0)
    model = GAT(data.num_features, 10)
    trained = distributed.wrap(model, torch.device("cpu"))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    seeds = distributed.shard(torch.randperm(num_nodes, generator=torch.Generator().manual_seed(1))
                              [:batch_size * world * (steps + 2)])
    loader = neighbor_loader(data, fanout, input_nodes=seeds, batch_size=batch_size,
                             sampler=make_sampler(data, fanout))
    dist.barrier()
    times, start = [], time.perf_counter()
    for k, batch in enumerate(loader):
        optimizer.zero_grad()
        out = trained(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
        if k >= 2:
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
    if rank == 0:
        queue.put(statistics.median(times))
    dist.destroy_process_group()


def samples_per_second(world: int, num_nodes: int, degree: float, steps: int, batch_size: int,
                       fanout: list, tmp: Path) -> float:
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.Queue()
    store = tmp / f"store-{world}-{time.time_ns()}"
    mp.start_processes(_dp_worker, args=(world, str(store), num_nodes, degree, steps, batch_size, fanout, queue),
                       nprocs=world, join=True, start_method="spawn")
    return world * batch_size / queue.get()


# --------------------------------------------------------------------------- #

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        mode, nodes, degree, steps, batch, fanout, threads, guard = sys.argv[2:10]
        print(json.dumps(run_child(mode, int(nodes), float(degree), int(steps), int(batch),
                                   json.loads(fanout), int(threads), float(guard))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["memory", "processes"])
    parser.add_argument("--nodes", type=at_least(1), default=1_000_000)
    parser.add_argument("--degree", type=at_least(0, float), default=6.0,
                        help="edges drawn per node before they are made undirected (6: about 12 per node)")
    parser.add_argument("--full-sizes", type=whole_numbers(1, empty=True), default=None,
                        help="memory: comma-separated distinct node counts of the full-batch runs "
                             "(default 62500,125000,250000; none: skip them)")
    parser.add_argument("--guard-gb", type=at_least(0, float), default=None,
                        help="memory: address-space limit of the attempt at --nodes, in GB (default 10; 0: no guard)")
    parser.add_argument("--batch-size", type=at_least(1), default=1024)
    parser.add_argument("--fanout", type=whole_numbers(-1), default="10,10",
                        help="neighbours a hop, comma-separated (-1: every neighbour)")
    parser.add_argument("--steps", type=at_least(1), default=20, help="timed steps of sampled training")
    parser.add_argument("--full-steps", type=at_least(1), default=None,
                        help="memory: timed steps of full-batch training, after one untimed warm-up step (default 2)")
    parser.add_argument("--threads", type=at_least(1), default=None, help="memory: threads a process (default 1)")
    args = parser.parse_args()
    memory_only = {"--full-sizes": args.full_sizes, "--guard-gb": args.guard_gb,
                   "--full-steps": args.full_steps, "--threads": args.threads}
    if args.what == "processes":
        given = [option for option, value in memory_only.items() if value is not None]
        if given:
            parser.error(f"{', '.join(given)}: only for memory; processes runs 1 thread a process, sampled only")
    else:
        args.full_sizes = [62500, 125000, 250000] if args.full_sizes is None else args.full_sizes
        args.guard_gb = 10.0 if args.guard_gb is None else args.guard_gb
        args.full_steps = 2 if args.full_steps is None else args.full_steps
        args.threads = 1 if args.threads is None else args.threads
        repeated = sorted({size for size in args.full_sizes if args.full_sizes.count(size) > 1})
        if repeated:
            parser.error(f"--full-sizes: size(s) {', '.join(map(str, repeated))} named more than once")
    # Two warm-up steps, then --steps timed ones, in each process.
    world = 2 if args.what == "processes" else 1
    needed = args.batch_size * (args.steps + 2) * world
    if args.nodes < needed:
        parser.error(f"--nodes {args.nodes} is too few for --steps {args.steps} timed steps (after 2 warm-up steps) "
                     f"of --batch-size {args.batch_size} seeds" + (" in each of 2 processes" if world > 1 else "")
                     + f": need at least {needed}")
    fanout = json.dumps(args.fanout)

    if args.what == "processes":
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            rates = {w: samples_per_second(w, args.nodes, args.degree, args.steps, args.batch_size,
                                           json.loads(fanout), Path(tmp)) for w in (1, 2)}
        print(f"neighbour-sampled GAT, {args.nodes:,} nodes, batches of {args.batch_size} seeds per "
              f"process, fan-out {','.join(map(str, args.fanout))}, gloo, 1 thread per process")
        for w, rate in rates.items():
            print(f"  {w} process(es): {rate:,.0f} samples/s")
        print(f"  2 / 1: {rates[2] / rates[1]:.2f}")
        return

    rows = []
    sampled = child(["sampled", args.nodes, args.degree, args.steps, args.batch_size, fanout, args.threads])
    rows.append(sampled)
    for size in args.full_sizes:
        rows.append(child(["full", size, args.degree, args.full_steps, 0, fanout, args.threads]))
    small = [r for r in rows[1:] if "failed" not in r]
    fit = None
    if len(small) >= 2:
        xs, ys = [r["nodes"] for r in small], [r["training_gb"] for r in small]
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
        fit = (slope, mean_y - slope * mean_x)
    attempt = child(["full", args.nodes, args.degree, 1, 0, fanout, args.threads], guard_gb=args.guard_gb)
    rows.append(attempt)
    for r in rows:
        if "failed" in r:
            print(f"{r['mode']:>8} {r['nodes']:>10,} nodes: FAILED ({r['failed']})")
        else:
            print(f"{r['mode']:>8} {r['nodes']:>10,} nodes {r['edges']:>11,} edges: peak {r['peak_gb']:.2f} GB "
                  f"(data and model {r['baseline_gb']:.2f} GB, training {r['training_gb']:.2f} GB), "
                  f"{r['step_seconds']:.3f} CPU s/step, {r['samples_per_second']:,.0f} labelled nodes per CPU second")
    if fit is not None:
        estimate = fit[0] * args.nodes + fit[1]
        print(f"full-batch training memory fitted over {len(small)} sizes: {fit[0] * 1e6:.2f} GB per million "
              f"nodes -> {estimate:.1f} GB at {args.nodes:,} nodes, "
              f"{estimate / max(sampled.get('training_gb', float('nan')), 1e-9):.0f}x sampled training's")
    print(json.dumps(rows))


if __name__ == "__main__":
    run_script(main)
