"""Experiments: configs, reproduction scripts, benchmarks and the PyTorch parity harness.

Run them from the repository root as modules: ``python -m experiments.reproduce.<name>``
(reproductions, training with the library from the configs in ``configs/``),
``python -m experiments.parity.step`` (parity); the benchmarks also run by path
(``python experiments/bench/losses.py``).
"""
