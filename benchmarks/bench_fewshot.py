"""Times one training step of the few-shot GNN (message passing on a batch
of episode graphs, :class:`graphseq.models.fewshot.FewShotGNN`) against the
dense batched-matmul reference written like the authors' ``gnn_iclr.py``
(:class:`graphseq.models.fewshot_dense.DenseFewShotGNN`) with the same
weights, side by side in one process, and prints the ratios: the GNN alone
on node features, and the whole step with the embedding CNN on images.
With ``--per-support M`` it also times our step on a batch whose episodes
share their support sets M at a time (``train.per_support``): the CNN
embeds each distinct image once. That saving is the draw's, not the
layer's (the dense reference would save the same), so it is printed apart.

A step is forward, backward and an Adam update, in training mode (BatchNorm
on the batch's statistics). The two are checked to give the same outputs
(the GNN's and the whole model's) before they are timed; the script stops
if they do not.

    python benchmarks/bench_fewshot.py [--ways 5] [--shots 1] [--unlabelled 0]
        [--batch 100] [--per-support 1] [--repeats 30] [--threads 1] [--clock wall|cpu]
        [--device auto]
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from graphseq.data.episodes import EpisodeSampler, FewShotClasses
from graphseq.models.fewshot import FewShotConfig, FewShotModel
from graphseq.models.fewshot_dense import DenseFewShotGNN
from graphseq.devices import resolve_device
from timing import CLOCKS, at_least, check_agreement, median_times, run_script


class DenseModel(torch.nn.Module):
    """The whole few-shot model with the dense GNN: the same CNN and node
    features, episodes as ``[batch, N, F]``; the query is each episode's last node."""

    def __init__(self, model: FewShotModel):
        super().__init__()
        self.model = model
        self.gnn = DenseFewShotGNN(model.gnn)

    def forward(self, episodes, size: int):
        features = self.model.node_features(episodes)
        return self.gnn(features.view(-1, size, features.size(-1)))[:, -1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ways", type=at_least(1), default=5)
    parser.add_argument("--shots", type=at_least(1), default=1)
    parser.add_argument("--unlabelled", type=at_least(0), default=0)
    parser.add_argument("--batch", type=at_least(1), default=100, help="episodes per step")
    parser.add_argument("--per-support", type=at_least(1), default=1,
                        help="also time our step with this many episodes to a support set")
    parser.add_argument("--repeats", type=at_least(1), default=30)
    parser.add_argument("--threads", type=at_least(0), default=1, help="torch threads (0: leave as is)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time wall-clock or this process's CPU seconds (less disturbed by other jobs)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    clock = CLOCKS[args.clock]
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64, 20, 1, 28, 28), dtype=torch.uint8, generator=generator)
    sampler = EpisodeSampler(FewShotClasses(images, [str(i) for i in range(64)]), args.ways, args.shots,
                             args.unlabelled)
    episodes = sampler.sample(args.batch, generator, device)
    size = sampler.episode_size

    torch.manual_seed(0)
    config = FewShotConfig(num_ways=args.ways, last_dropout=0.0)  # dropout draws differ in layout
    ours = FewShotModel(config).to(device)
    dense = DenseModel(FewShotModel(config).to(device)).to(device)
    dense.model.load_state_dict(ours.state_dict())
    dense.gnn.load_from(ours.gnn)
    with torch.no_grad():
        features = ours.node_features(episodes)
    target = episodes.target

    def gnn_ours():
        return ours.gnn(features, episodes.edge_index)[episodes.query]

    def gnn_dense():
        return dense.gnn(features.view(args.batch, size, -1))[:, -1]

    contenders = {  # name: (forward, module, target)
        "GNN, message passing": (gnn_ours, ours.gnn, target),
        "GNN, dense reference": (gnn_dense, dense.gnn, target),
        "step, message passing": (lambda: ours(episodes), ours, target),
        "step, dense reference": (lambda: dense(episodes, size), dense, target),
    }
    if args.per_support > 1:
        shared = sampler.sample(args.batch, generator, device, per_support=args.per_support)
        contenders[f"step, {args.per_support} to a support"] = (lambda: ours(shared), ours, shared.target)
    with torch.no_grad():
        difference = max(check_agreement("GNN", gnn_ours(), gnn_dense()),
                         check_agreement("step", ours(episodes), dense(episodes, size)))
    optimizers = {name: torch.optim.Adam(module.parameters(), lr=1e-3) for name, (_, module, _) in contenders.items()}

    def training_step(forward, optimizer, target):
        def step():
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(forward(), target).backward()
            optimizer.step()
        return step

    steps = {name: training_step(forward, optimizers[name], target)
             for name, (forward, _, target) in contenders.items()}
    median = median_times(steps, args.repeats, device, clock, warmup=3)
    print(f"{args.ways}-way {args.shots}-shot" + (f" + {args.unlabelled} unlabelled" if args.unlabelled else "")
          + f", {args.batch} episodes of {size} nodes ({args.batch * size * (size - 1)} edges), on {device} "
          f"({torch.get_num_threads()} threads), median {args.clock} time of {args.repeats} training steps "
          f"(forward, backward, Adam); largest output difference at the start {difference:.1e}")
    for name, seconds in median.items():
        print(f"  {name:<24} {seconds * 1e3:9.2f} ms")
    for part, label in (("GNN", "GNN "), ("step", "step")):
        ratio = median[f"{part}, message passing"] / median[f"{part}, dense reference"]
        print(f"  ratio {label} message passing / dense: {ratio:.2f}")
    if args.per_support > 1:
        name = f"step, {args.per_support} to a support"
        print(f"  ratio step {args.per_support} to a support set / drawn alone (the draw, not the layer): "
              f"{median[name] / median['step, message passing']:.2f}")


if __name__ == "__main__":
    run_script(main)
