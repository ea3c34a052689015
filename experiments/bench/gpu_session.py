"""One short GPU lease, spent: the loss sweep, then the pretraining step, then the largest
batch, each a stage of ``experiments/bench/accelerator.py`` in its own process, within one
time limit (8 minutes by default), every row appended to one JSON-lines file as it is
measured.

    # on the device machine (experiments/bench/README.md, "How to spend the next GPU
    # session"), after copying the reference files into the git-ignored .device/peers/:
    python3 -m experiments.bench.gpu_session --out $OUT \
        --supcon-dir .device/peers/HobbitLong-SupContrast \
        --sincere-dir .device/peers/tufts-ml-SupContrast
    # the same stages at tiny sizes on the CPU (what the test suite runs):
    python -m experiments.bench.gpu_session --smoke --out /tmp/session --limit 1200 ...

Each stage gets the time left times its share over the shares of the stages not run yet
(a stage that ends early leaves its time to the later ones), as the script's ``--budget``,
and is killed 20 s past it. ``<out>/rows.jsonl`` holds every row (``session`` rows mark
each stage's start and end); ``--profile`` also writes a ``jax.profiler`` trace of the
step, packed as ``<out>/profile.tar.gz`` (the device tool brings back files at most two
folders deep).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Seconds a stage may run past its budget before it is killed.
GRACE = 20.0


class Stage(NamedTuple):
    """A run of ``accelerator.py`` with ``args`` (``smoke_args`` under ``--smoke``) and a
    ``share`` of the session's time."""

    name: str
    share: float
    args: tuple[str, ...]
    smoke_args: tuple[str, ...]


#: In the order they run. The loss sweep first (its block rule and the precision figures
#: are what the losses need), SupCon's block sweep at 65,536 (the goal's size) first; then
#: each precision's errors against float64 (a stage of its own: the float64 reference
#: comes first and is not cut by a budget shared with timings); the other NCE losses; our
#: step beside PyTorch's; last the largest executed batch of ours and both references.
STAGES = (
    Stage("loss_sweep", 0.30,
          ("--parts", "losses", "--losses", "supcon", "--dtypes", "float32",
           "--precisions", "float32,tf32,bf16", "--block-sizes", "auto,128,512,2048",
           "--loss-sizes", "65536,8192,262144"),
          ("--parts", "losses", "--losses", "supcon", "--dtypes", "float32",
           "--precisions", "float32,bf16", "--block-sizes", "auto,16")),
    Stage("numerics", 0.06,
          ("--parts", "numerics", "--precisions", "float32,tf32,bf16"),
          ("--parts", "numerics", "--precisions", "float32,bf16")),
    Stage("other_losses", 0.08,
          ("--parts", "losses", "--losses", "sincere,nt_xent", "--dtypes", "float32,bfloat16",
           "--precisions", "float32,tf32,bf16", "--loss-sizes", "65536"),
          ("--parts", "losses", "--losses", "sincere", "--dtypes", "bfloat16",
           "--precisions", "float32,bf16")),
    Stage("step", 0.36,
          ("--parts", "step", "--step-configs", "supcon:128,supcon:256,supcon:128:bn_one_pass"),
          ("--parts", "step", "--step-configs", "supcon:2")),
    Stage("largest", 0.20, ("--parts", "largest,peers"), ("--parts", "largest,peers")),
)


def stage_budget(left: float, stage: Stage, later: tuple[Stage, ...]) -> float:
    """A stage's ``--budget``: the time left (less the grace of every stage still to run)
    times its share over the shares of itself and the stages after it."""
    usable = left - GRACE * (1 + len(later))
    return max(0.0, usable * stage.share / (stage.share + sum(s.share for s in later)))


def _append(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"part": "session", **row}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder of rows.jsonl (and profile.tar.gz)")
    parser.add_argument("--supcon-dir", required=True,
                        help="HobbitLong/SupContrast checkout (the reference step and loss)")
    parser.add_argument("--sincere-dir", required=True,
                        help="tufts-ml/SupContrast checkout (the reference SINCERE loss)")
    parser.add_argument("--limit", type=float, default=470.0,
                        help="seconds for all stages (default 470: an 8-minute call)")
    parser.add_argument("--stages", default=",".join(s.name for s in STAGES),
                        help="comma-separated stages to run, in the order of STAGES")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CPU)")
    parser.add_argument("--profile", action="store_true",
                        help="a jax.profiler trace of the step stage, as profile.tar.gz")
    parser.add_argument("--block-imports", default="",
                        help="passed on to accelerator.py (e.g. tensorflow,ml_collections)")
    args = parser.parse_args(argv)
    names = [n for n in args.stages.split(",") if n]
    unknown = sorted(set(names) - {s.name for s in STAGES})
    if unknown:
        parser.error(f"--stages: unknown {unknown}; choose from {[s.name for s in STAGES]}")
    stages = tuple(s for s in STAGES if s.name in names)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = out / "rows.jsonl"
    profile = Path(tempfile.mkdtemp(prefix="profile_")) if args.profile else None
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    start = time.monotonic()
    failed = 0
    for i, stage in enumerate(stages):
        left = args.limit - (time.monotonic() - start)
        budget = stage_budget(left, stage, stages[i + 1:])
        if budget < 5:
            _append(rows, {"stage": stage.name, "status": "skipped (limit)"})
            print(f"## stage {stage.name}: skipped, {left:.0f} s left", flush=True)
            continue
        command = [sys.executable, "-m", "experiments.bench.accelerator",
                   *(stage.smoke_args if args.smoke else stage.args),
                   "--budget", f"{budget:.0f}", "--json-out", str(rows),
                   "--supcon-dir", args.supcon_dir, "--sincere-dir", args.sincere_dir]
        if args.smoke:
            command.append("--smoke")
        if args.block_imports:
            command += ["--block-imports", args.block_imports]
        if profile is not None and stage.name == "step":
            command += ["--profile-dir", str(profile)]
        print(f"\n## stage {stage.name}: budget {budget:.0f} s, {left:.0f} s left\n"
              f"## {' '.join(command[1:])}", flush=True)
        _append(rows, {"stage": stage.name, "event": "start", "budget_s": budget,
                       "command": command[1:]})
        began = time.monotonic()
        try:
            rc = subprocess.run(command, cwd=REPO_ROOT, env=env, timeout=budget + GRACE,
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = "killed"
        failed += rc != 0
        _append(rows, {"stage": stage.name, "event": "end", "returncode": rc,
                       "seconds": time.monotonic() - began})
    if profile is not None:
        with tarfile.open(out / "profile.tar.gz", "w:gz") as tar:
            tar.add(profile, arcname="profile")
    _append(rows, {"event": "done", "seconds": time.monotonic() - start, "failed": failed})
    print(f"\n## session: {time.monotonic() - start:.0f} s, {failed} stage(s) failed; "
          f"rows in {rows}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
