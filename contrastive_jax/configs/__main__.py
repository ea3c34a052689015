"""``python -m contrastive_jax.configs [NAME] [--table]``: the paths of the packaged configs,
or the recipes against their sources."""

import argparse
import sys

from contrastive_jax import configs
from contrastive_jax.configs import _table


def main(argv: list[str]) -> int:
    """``python -m contrastive_jax.configs [NAME] [--table]``: print the path of NAME, or of
    every config; ``--table``: the recipes against their sources (``docs/recipes.md``)."""
    parser = argparse.ArgumentParser(prog="python -m contrastive_jax.configs")
    parser.add_argument("name", nargs="?", help="a packaged config; none: every config")
    parser.add_argument("--table", action="store_true",
                        help="print docs/recipes.md: each recipe's settings beside its source's")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if args.table:
        sys.stdout.write(_table.markdown())
        return 0
    if args.name is not None:
        try:
            print(configs.path(args.name))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    for name in configs.NAMES:
        print(f"{name:<22} {configs.path(name)}")
    return 0


if __name__ == "__main__":  # importing the module (e.g. for the API docs) runs nothing
    sys.exit(main(sys.argv[1:]))
