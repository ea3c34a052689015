"""Test-session set-up: 8 simulated CPU devices, cheap XLA:CPU compiles, no accelerator for
TensorFlow, a temporary TFRecord index cache; and the ``matrix`` marker.

XLA_FLAGS must be set before JAX initialises its backends, so it is set here, at the top of
the first file pytest imports. A cold suite is dominated by compilation: the tests' programs
run for milliseconds, so XLA:CPU's backend optimisation is not worth its compile time (on
tests/train/test_step.py + test_grad_cache.py, cold, ``-n 0``: 274 s without the two
optimisation flags, 172 s with them, all passing).

``@pytest.mark.matrix`` on a parametrized test: ``make test`` runs its first case (the
representative one, listed first) and ``make test-all`` every case; the others are marked
``slow`` here, before ``-m "not slow"`` deselects. It serves where the cases come from stacked
``parametrize`` decorators or parametrized fixtures; :mod:`tests.pairwise` chooses the fast
cases of one parameter list by their values.
"""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
for _flag in ("--xla_force_host_platform_device_count=8",
              "--xla_backend_optimization_level=0",
              "--xla_llvm_disable_expensive_passes=true"):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session", autouse=True)
def tfrecord_index_dir(tmp_path_factory):
    """The TFRecord index cache of this session's readers and their subprocesses: a temporary
    folder, not the user's ``~/.cache`` (:func:`contrastive_jax.data.tfrecord.index_dir`)."""
    folder = str(tmp_path_factory.mktemp("tfrecord_index"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONTRASTIVE_JAX_INDEX_DIR", folder)
        yield folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks every case of a ``matrix`` test ``slow`` but its first case not marked so
    already (by :func:`tests.pairwise.all_pairs` or :func:`tests.pairwise.only_in_make_test`)."""
    first_seen = set()
    for item in items:
        if item.get_closest_marker("matrix") is None or item.get_closest_marker("slow"):
            continue
        test = (item.path, item.cls, getattr(item, "originalname", item.name))
        if test in first_seen:
            item.add_marker(pytest.mark.slow)
        else:
            first_seen.add(test)
