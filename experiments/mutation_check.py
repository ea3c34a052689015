"""Mutation check of the fast test suite: do `make test`'s tests catch small bugs?

Each mutation below is one small edit of a loss's internals or of the training step (an
exact source snippet and its replacement). For each, the script applies it to a private
copy of the repository, runs the `make test` selection of the relevant test directories
(``-x -q -n 2 -m "not slow" -p no:cacheprovider``) and records whether a test fails
(caught) or every test passes (survived). A survived mutation is information about the
suite, not an error of the script.

The copy is the tracked files of a git revision (``--rev``) or the tracked and untracked,
not ignored files of a working tree (``--tree``, default: this checkout), so the same list
checks an old commit's tests against a new one's::

    python -m experiments.mutation_check --rev fc2c5b3 --json before.json
    python -m experiments.mutation_check --tree . --json after.json
    python -m experiments.mutation_check --compare before.json after.json

``--compare`` prints both columns and exits with status 1 when a mutation caught by the
first run survives the second. A snippet not found exactly once in the copy stops the
script (the list must be updated with the source). ``make mutations`` runs it on the
working tree (about 10-20 minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]

# The quick, direct tests first, so that with -x a caught mutation stops early; a pattern
# expands (sorted) to the files it matches that are not named before it.
LOSS_TESTS = ("--doctest-modules", "contrastive_jax/losses", "tests/losses")
TRAIN_TESTS = ("tests/train/test_step.py", "tests/train/test_objective.py",
               "tests/train/test_optim.py", "tests/train/test_*.py")


class Mutation(NamedTuple):
    """One edit: ``original`` (found exactly once in ``path``) becomes ``replacement``."""

    name: str
    path: str
    original: str
    replacement: str
    description: str
    tests: tuple[str, ...]


MUTATIONS = (
    Mutation(
        "temperature_multiplies", "contrastive_jax/losses/_core.py",
        "    return dots / jnp.asarray(temperature, jnp.float32)",
        "    return dots * jnp.asarray(temperature, jnp.float32)",
        "similarity logits multiplied by the temperature instead of divided", LOSS_TESTS,
    ),
    Mutation(
        "logsumexp_wrong_axis", "contrastive_jax/losses/_core.py",
        "    return jax.nn.logsumexp(jnp.where(mask, logits, -BIG), axis=axis)",
        "    return jax.nn.logsumexp(jnp.where(mask, logits, -BIG), axis=0)",
        "masked log-sum-exp always over axis 0 (columns) instead of the requested axis",
        LOSS_TESTS,
    ),
    Mutation(
        "no_gather_of_negatives", "contrastive_jax/losses/_core.py",
        "    return jax.lax.all_gather(x, names, axis=0, tiled=True)",
        "    return x",
        "rows not all-gathered across devices: each device sees only its own negatives",
        LOSS_TESTS,
    ),
    Mutation(
        "self_mask_local_index", "contrastive_jax/losses/_core.py",
        "    return jax.lax.axis_index(names).astype(jnp.int32) * n_local",
        "    return jax.lax.axis_index(names).astype(jnp.int32) * 0",
        "anchor's own column taken at its local, not global, index under axis_name",
        LOSS_TESTS,
    ),
    Mutation(
        "psum_gradient_not_stopped", "contrastive_jax/losses/_core.py",
        "    return x + jax.lax.stop_gradient(jax.lax.psum(x, names) - x)",
        "    return jax.lax.psum(x, names)",
        "final psum without stop-gradient under pmap: gradients times the device count",
        LOSS_TESTS,
    ),
    Mutation(
        "supcon_self_in_denominator", "contrastive_jax/losses/_nce.py",
        "    return positives, negatives, ~is_self & live",
        "    return positives, negatives, live",
        "SupCon denominator includes the anchor itself (diagonal not excluded)",
        LOSS_TESTS,
    ),
    Mutation(
        "sincere_vjp_sign", "contrastive_jax/losses/_nce.py",
        "    grad = weight * (jnp.where(negatives, total * small, 0.0) - on_positives)",
        "    grad = weight * (jnp.where(negatives, total * small, 0.0) + on_positives)",
        "SINCERE's custom backward pass with the sign of the positive term flipped",
        LOSS_TESTS,
    ),
    Mutation(
        "stream_padding_row_live", "contrastive_jax/losses/blockwise.py",
        "    live = jnp.arange(num_blocks * block) < n\n",
        "    live = jnp.arange(num_blocks * block) <= n\n",
        "streamed loss counts the first zero-padding row of the last block",
        LOSS_TESTS,
    ),
    Mutation(
        "stream_lse_block_rescale", "contrastive_jax/losses/blockwise.py",
        "    per_block = jnp.exp(shifts - shift) / total",
        "    per_block = 1.0 / total",
        "streamed log-sum-exp: row gradients of earlier blocks not rescaled to the final max",
        LOSS_TESTS,
    ),
    Mutation(
        "projnce_adjustment_sign", "contrastive_jax/losses/_projnce.py",
        "    return uniformity - _own_logit(lb, prototypes, temperature) + _adjustment(",
        "    return uniformity - _own_logit(lb, prototypes, temperature) - _adjustment(",
        "ProjNCE's leave-one-out adjustment R_i (Eq. 10) subtracted instead of added",
        LOSS_TESTS,
    ),
    Mutation(
        "probe_not_stop_gradient", "contrastive_jax/train/step.py",
        "probe(jax.lax.stop_gradient(features).astype(jnp.float32))",
        "probe(features.astype(jnp.float32))",
        "online probe's loss back-propagates into the encoder (stop-gradient missing)",
        TRAIN_TESTS,
    ),
    Mutation(
        "nonfinite_update_kept", "contrastive_jax/train/step.py",
        "        lambda a, b: jnp.where(finite, a, b),",
        "        lambda a, b: a,",
        "a non-finite step's update is applied instead of keeping the previous state",
        TRAIN_TESTS,
    ),
    Mutation(
        "loss_device_local", "contrastive_jax/train/step.py",
        # No closing parenthesis: later code passes more arguments after this one.
        "objective.evaluate(terms, projections, targets, axis_name=DATA_AXIS",
        "objective.evaluate(terms, projections, targets, axis_name=None",
        "loss on each device's rows alone: no cross-device negatives, no all-reduced loss",
        TRAIN_TESTS,
    ),
    Mutation(
        "term_weight_ignored", "contrastive_jax/train/objective.py",
        "        total = total + term.weight * value",
        "        total = total + value",
        "weights of a multi-term objective ignored",
        TRAIN_TESTS,
    ),
    Mutation(
        "second_view_dropped", "contrastive_jax/train/objective.py",
        "    images, texts = projections[0::2], projections[1::2]",
        "    images, texts = projections[0::2], projections[0::2]",
        "two-tower objective: the second view replaced by the first",
        TRAIN_TESTS,
    ),
    Mutation(
        "weight_decay_mask_all", "contrastive_jax/train/optim.py",
        "    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)",
        "    return jax.tree.map(lambda p: jnp.ndim(p) >= 1, params)",
        "weight-decay mask also decays biases and normalisation parameters",
        TRAIN_TESTS,
    ),
    Mutation(
        "cosine_length_off", "contrastive_jax/train/optim.py",
        "        decay_steps=length,",
        "        decay_steps=length - warmup,",
        "LR schedule: cosine decay ends `warmup` steps early",
        TRAIN_TESTS,
    ),
)


class Outcome(NamedTuple):
    name: str
    result: str  # "caught", "survived", "timeout" or "error"
    first_failure: str
    seconds: float


def copy_tree(rev: str | None, tree: Path, dest: Path) -> None:
    """Writes the files of ``rev`` (tracked) or of the working tree ``tree`` into ``dest``."""
    dest.mkdir(parents=True)
    if rev is not None:
        archive = subprocess.run(
            ["git", "-C", str(tree), "archive", "--format=tar", rev],
            check=True, capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    listed = subprocess.run(
        ["git", "-C", str(tree), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = tree / rel
        if source.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def apply(root: Path, mutation: Mutation) -> str:
    """Applies ``mutation`` in ``root`` and returns the file's original text."""
    path = root / mutation.path
    if not path.is_file():
        raise SystemExit(f"{mutation.name}: {mutation.path} does not exist in the copy")
    text = path.read_text()
    count = text.count(mutation.original)
    if count != 1:
        raise SystemExit(
            f"{mutation.name}: the snippet occurs {count} times in {mutation.path} "
            f"(must be once): {mutation.original!r}"
        )
    path.write_text(text.replace(mutation.original, mutation.replacement))
    return text


def run_tests(root: Path, tests: tuple[str, ...], timeout: float, workers: int) -> Outcome:
    env = dict(os.environ, PYTHONPATH=str(root), TF_CPP_MIN_LOG_LEVEL="2",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    paths: list[str] = []
    for entry in tests:
        matches = sorted(str(p.relative_to(root)) for p in root.glob(entry)) if "*" in entry else [entry]
        paths += [m for m in matches if m not in paths]
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-n", str(workers), "-m", "not slow",
               "-p", "no:cacheprovider", *paths]
    start = time.perf_counter()
    # A session of its own, so a timeout ends pytest and its xdist workers together.
    process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return Outcome("", "timeout", "", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.MULTILINE)
    if done.returncode == 0:
        return Outcome("", "survived", "", seconds)
    if done.returncode in (1, 2) and (failed or "error" in done.stdout.lower()):
        return Outcome("", "caught", failed[0] if failed else "(collection error)", seconds)
    tail = (done.stdout + done.stderr)[-2000:]
    return Outcome("", "error", f"pytest exit {done.returncode}: {tail}", seconds)


def check(args: argparse.Namespace) -> list[Outcome]:
    selected = [m for m in MUTATIONS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTATIONS}
    if unknown:
        raise SystemExit(f"--only names unknown mutations: {sorted(unknown)}")
    tree = Path(args.tree).resolve()
    with tempfile.TemporaryDirectory(prefix="mutation_check_") as tmp:
        root = Path(tmp) / "repo"
        copy_tree(args.rev, tree, root)
        shared = tree.parent / "shared"
        if shared.is_dir():  # the tests' optional ../shared data, beside the copy as well
            (Path(tmp) / "shared").symlink_to(shared)
        for mutation in selected:  # every snippet is checked before any test runs
            (root / mutation.path).write_text(apply(root, mutation))
        if args.baseline:
            paths = tuple(dict.fromkeys(t for m in selected for t in m.tests))
            base = run_tests(root, paths, args.timeout, args.workers)
            print(f"baseline (no mutation): {base.result} in {base.seconds:.0f} s", flush=True)
            if base.result != "survived":
                raise SystemExit(f"the unmutated tests do not pass: {base.first_failure}")
        outcomes = []
        for mutation in selected:
            original = apply(root, mutation)
            try:
                outcome = run_tests(root, mutation.tests, args.timeout, args.workers)
            finally:
                (root / mutation.path).write_text(original)
            outcome = outcome._replace(name=mutation.name)
            outcomes.append(outcome)
            if args.json:  # after each mutation, so an interrupted run keeps its results
                Path(args.json).write_text(json.dumps([o._asdict() for o in outcomes], indent=1))
            print(f"{mutation.name:28s} {outcome.result:9s} {outcome.seconds:6.0f} s  "
                  f"{outcome.first_failure}", flush=True)
    return outcomes


def table(columns: dict[str, dict[str, str]]) -> str:
    """A Markdown table: one row per mutation, one column per run."""
    heads = list(columns)
    lines = ["| mutation | file | " + " | ".join(heads) + " |",
             "|---|---|" + "---|" * len(heads)]
    for m in MUTATIONS:
        cells = [columns[h].get(m.name, "-") for h in heads]
        lines.append(f"| {m.name}: {m.description} | {Path(m.path).name} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="check this git revision's files (of --tree's repository)")
    parser.add_argument("--tree", default=str(REPO),
                        help="a working tree (default: this checkout)")
    parser.add_argument("--only", type=lambda s: s.split(","), help="comma-separated names")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds per mutation (then: timeout, not caught in time)")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="skip the check that the unmutated tests pass")
    parser.add_argument("--json", help="write the outcomes to this file")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="print two --json outputs side by side; exit 1 on lost coverage")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:28s} {m.path:40s} {m.description}")
        return 0
    if args.compare:
        runs = {p: {o["name"]: o["result"] for o in json.loads(Path(p).read_text())}
                for p in args.compare}
        print(table(runs))
        before, after = runs.values()
        lost = [n for n, r in before.items() if r == "caught" and after.get(n) != "caught"]
        if lost:
            print(f"caught before, not after: {lost}")
        return 1 if lost else 0
    outcomes = check(args)
    print()
    print(table({args.rev or "working tree": {o.name: o.result for o in outcomes}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
