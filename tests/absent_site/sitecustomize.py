"""Makes the packages named by ``CONTRASTIVE_JAX_ABSENT`` absent (tests/no_tensorflow.py)."""

import os

if os.environ.get("CONTRASTIVE_JAX_ABSENT"):
    from tests.no_tensorflow import install

    install(os.environ["CONTRASTIVE_JAX_ABSENT"].split(","))
