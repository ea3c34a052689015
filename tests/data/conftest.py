"""Fixtures of the data tests: the digits source and a tiny image folder."""

from __future__ import annotations

import pytest

from contrastive_jax import data
from tests.data.helpers import digits_config, write_image_folder


@pytest.fixture(scope="session")
def digits_source() -> data.Source:
    return data.load_source(digits_config())


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> str:
    return write_image_folder(str(tmp_path_factory.mktemp("folder")))
