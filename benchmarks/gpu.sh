#!/usr/bin/env bash
# The figures to record when a GPU is lent: each layer against its peer (PyG's
# GATConv and TransformerConv, nn.MultiheadAttention, nn.LSTM and nn.GRU, the
# charlm-lstm training step against plain torch), each ratio printed; then a
# few hundred steps of five pipelines, each with its time per step or epoch.
# About 8 minutes on one GPU. CI runs it on the CPU with --quick, as a smoke
# test of every command in it.
#
#   bash benchmarks/gpu.sh [--device cuda] [--data-mirror DIR] [--quick]
set -euo pipefail

device=cuda
quick=0
mirror=()
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="${2:?--device needs cpu, cuda or cuda:N}"; shift 2 ;;
    --data-mirror) mirror=(--data-mirror "${2:?--data-mirror needs a folder}"); shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "gpu.sh: error: unknown argument $1 (usage: gpu.sh [--device cuda] [--data-mirror DIR] [--quick])" >&2
       exit 2 ;;
  esac
done

here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
if [ "$quick" = 1 ]; then
  repeats=2 steps=3 epochs=2 episodes=10 edges=2000
else
  repeats=20 steps=300 epochs=200 episodes=2000 edges=200000
fi

echo "== layers against their peers on $device"
python "$here/bench_gat.py" --device "$device" --repeats "$repeats" "${mirror[@]}"
python "$here/bench_self_attention.py" --device "$device" --repeats "$repeats" --edges "$edges"
python "$here/bench_recurrent.py" --device "$device" --repeats "$repeats"
python "$here/bench_charlm.py" --device "$device" --repeats "$repeats"

echo "== pipelines on $device: a few hundred steps each"
run() {  # A pipeline's short run, then its time per step (per epoch for node training).
  local name="$1"; shift
  graphseq run "$name" --device "$device" --out "$out/$name" --quiet "${mirror[@]}" "$@" > /dev/null
  python - "$name" "$out/$name/metrics.json" <<'EOF'
import json, sys
name, path = sys.argv[1], sys.argv[2]
metrics = json.load(open(path))["mean"]
if "epoch_seconds" in metrics:
    print(f"  {name:<24} {metrics['epoch_seconds'] * 1e3:9.2f} ms an epoch ({int(metrics['epochs'])} epochs)")
else:
    steps = next(value for key, value in metrics.items() if key == "steps" or key.startswith("steps_"))
    minutes = next(value for key, value in metrics.items() if key.startswith("train_minutes"))
    print(f"  {name:<24} {minutes * 60e3 / steps:9.2f} ms a step ({int(steps)} steps)")
EOF
}
run gat-cora --set train.max_epochs="$epochs" --set train.patience="$epochs"
run gat-cora-neighbor --set train.max_epochs="$((epochs / 20 + 1))" --set train.patience="$epochs"
run charlm-lstm --set train.steps="$steps" --set train.eval_every="$steps" --set train.checkpoint_every="$steps" \
  --set sample.length=20
run fewshot-omniglot-5w1s --set train.steps="$steps" --set train.eval_every="$steps" \
  --set train.eval_episodes="$episodes" --set train.checkpoint_every="$steps" --set test.episodes="$episodes"
run bert-pretrain --set pretrain.steps="$steps" --set pretrain.eval_every="$steps" \
  --set pretrain.checkpoint_every="$steps"
