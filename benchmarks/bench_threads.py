"""Thread settings on a busy machine: the median gat-citeseer epoch (training
step + validation pass) with torch's default threads and OpenMP's default
(spinning) wait, with a passive wait, and with one thread, each in a fresh
process (OpenMP reads its settings when torch loads), interleaved, so that
the machine's load falls on every setting alike.

    python benchmarks/bench_threads.py --repeats 2 --epochs 60

Run it while the machine is busy (other jobs on every core) to see why the
graphseq command sets OMP_WAIT_POLICY=PASSIVE. Every run reads CiteSeer
from ``--data-root`` (default ``$GRAPHSEQ_DATA`` or ``./datasets``, both
from where the script was started; ``--data-mirror`` likewise), though it
runs in a temporary folder.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import at_least, run_script

CODE = """
import json, sys, tempfile, torch, graphseq
with tempfile.TemporaryDirectory() as scratch:  # Removed with the run in it.
    summary = graphseq.run("gat-citeseer", overrides={{"train.max_epochs": {epochs}, "train.patience": 10**6}},
                           out=scratch + "/run", quiet=True)
print(json.dumps({{"threads": torch.get_num_threads(), "epoch": summary["runs"][0]["epoch_seconds"]}}))
"""

SETTINGS = {
    "torch's threads, default wait": {},
    "torch's threads, passive wait": {"OMP_WAIT_POLICY": "PASSIVE"},
    "1 thread, default wait": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "1 thread, passive wait": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=at_least(1), default=2)
    parser.add_argument("--epochs", type=at_least(3), default=60,
                        help="epochs a run (at least 3, so that the first, warm-up epoch is not the median)")
    parser.add_argument("--data-root", default=os.environ.get("GRAPHSEQ_DATA") or "datasets",
                        help="where CiteSeer is, or is downloaded to (default $GRAPHSEQ_DATA or ./datasets)")
    parser.add_argument("--data-mirror", default=os.environ.get("GRAPHSEQ_MIRROR"),
                        help="a local copy of the download sources (default $GRAPHSEQ_MIRROR)")
    args = parser.parse_args()
    # The runs read the data through the variables graphseq.run reads, made
    # absolute: each runs in a temporary folder, where a relative path (the
    # default ./datasets) would name another, empty folder.
    data = {"GRAPHSEQ_DATA": str(Path(args.data_root).resolve())}
    if args.data_mirror:
        data["GRAPHSEQ_MIRROR"] = str(Path(args.data_mirror).resolve())
    results = {name: [] for name in SETTINGS}
    for repeat in range(args.repeats):
        for name, extra in SETTINGS.items():
            env = {k: v for k, v in os.environ.items()
                   if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GRAPHSEQ_MIRROR")}
            env.update(extra, **data)
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, "-c", CODE.format(epochs=args.epochs)], env=env,
                                  capture_output=True, text=True, cwd=tempfile.gettempdir())
            if done.returncode != 0:
                sys.exit(f"{name}: the run failed (exit status {done.returncode}):\n{done.stderr.strip()}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            results[name].append(figures["epoch"])
            print(f"{name}: {figures['threads']} threads, median epoch {1000 * figures['epoch']:.1f} ms "
                  f"(load average {load:.1f})", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    run_script(main)
