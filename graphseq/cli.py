"""The ``graphseq`` command: argument parsing only. Every command calls the
Python API, so whatever the CLI can do, ``graphseq.run(...)`` can do too.
Problems in what the user asked for exit with code 2 and a one-line message.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .errors import GraphseqError


def _add_run(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("run", help="run a named pipeline or a pipeline TOML file")
    p.add_argument("pipeline", help="a name from 'graphseq list' or a path to a .toml file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one setting of the pipeline (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first run (default 0)")
    p.add_argument("--runs", type=int, default=1, help="repeat with seeds seed..seed+N-1 (default 1)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--data-root", default=None, help="where datasets live (default $GRAPHSEQ_DATA or ./datasets)")
    p.add_argument("--data-mirror", default=None,
                   help="read-only folder of raw dataset files consulted before any download "
                        "(default $GRAPHSEQ_MIRROR)")
    p.add_argument("--out", default=None, help="output directory (default runs/NAME-TIME)")
    p.add_argument("--resume", action="store_true", help="continue the run stored in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bars or console log")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from .pipeline import run

    if args.resume and args.out is None:
        raise GraphseqError("--resume needs --out DIR, the run to continue")
    summary = run(args.pipeline, overrides=args.overrides, seed=args.seed, runs=args.runs,
                  device=args.device, out=args.out, data_root=args.data_root,
                  data_mirror=args.data_mirror, quiet=args.quiet, resume=args.resume)
    mean, std = summary["mean"], summary["std"]
    figures = ", ".join(f"{k} {v:.4f}" + (f" ± {std[k]:.4f}" if args.runs > 1 else "")
                        for k, v in mean.items() if k != "seed")
    print(f"{summary['pipeline']}: {figures}")
    return 0


def _add_list(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("list", help="list the named pipelines")
    p.set_defaults(handler=_list)


def _list(args: argparse.Namespace) -> int:
    from .pipeline import available_pipelines, read_config

    pipelines = available_pipelines()
    width = max((len(n) for n in pipelines), default=0)
    for name, path in pipelines.items():
        print(f"{name:<{width}}  {read_config(path).get('description', '')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphseq", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run(commands)
    _add_list(commands)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except GraphseqError as error:
        print(f"graphseq: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graphseq: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
