"""``python -m tinyopt [command]``: tools around the library.

    python -m tinyopt          # the environment report (the same as ``python -m tinyopt env``)
    python -m tinyopt env      # versions, threads, kernel cache, CPU features, TINYOPT_* variables
    python -m tinyopt warmup   # compile the common kernels ahead of time (tinyopt/warmup.py)

Each command is a function ``(args) -> exit status`` registered in :data:`COMMANDS` with its
help line; a new one adds a subparser there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def env(args: argparse.Namespace) -> int:
    from tinyopt.diagnostics import collect_env
    collect_env()
    return 0


def warmup(args: argparse.Namespace) -> int:
    from tinyopt.warmup import warmup as run
    took = run(report=lambda name, seconds: print(f"{name:>6}  {seconds:6.2f} s", flush=True))
    print(f"kernels of {len(took)} workloads compiled or loaded in {sum(took.values()):.2f} s")
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "env": (env, "print the environment report (the default): versions, threads, kernel cache, "
                 "CPU features, TINYOPT_* variables"),
    "warmup": (warmup, "compile the kernels of common models (MLP, CNN, LSTM, GPT) into the "
                       "kernel cache ahead of time, so their first step starts fast"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tinyopt", description="tinyopt's tools (default command: env).")
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (fn, text) in COMMANDS.items():
        sub.add_parser(name, help=text, description=text).set_defaults(run=fn)
    args = parser.parse_args(argv)
    return args.run(args) if args.command else env(args)


if __name__ == "__main__":
    sys.exit(main())
