"""Experiments: configs, reproduction scripts, benchmarks and the PyTorch parity harness.

Only :mod:`experiments.parity` is a package (run as ``python -m experiments.parity.step``); the
scripts in ``reproduce/`` and ``bench/`` are run by path.
"""
