"""The labelled examples of semi-supervised fine-tuning (data/label_subset.py,
``config.data.label_fraction`` and ``label_ids``)."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax import data as data_lib
from contrastive_jax.data import label_subset
from contrastive_jax.data.config import DataSpec
from contrastive_jax.errors import ConfigError


def test_a_fraction_keeps_that_share_of_every_class_seeded():
    labels = np.repeat(np.arange(4), [100, 50, 10, 1])
    rows = label_subset.fraction_rows(labels, 0.1, seed=3)
    assert np.bincount(labels[rows]).tolist() == [10, 5, 1, 1]  # at least one per class
    assert np.array_equal(rows, np.unique(rows))
    assert np.array_equal(rows, label_subset.fraction_rows(labels, 0.1, seed=3))
    assert not np.array_equal(rows, label_subset.fraction_rows(labels, 0.1, seed=4))
    assert np.array_equal(label_subset.fraction_rows(labels, 1.0, seed=0), np.arange(161))


def test_an_ids_file_of_ids_or_of_file_names(tmp_path):
    ids = np.array([10, 11, 12, 13])
    paths = np.array(["a/n01_1.JPEG", "a/n01_2.JPEG", "b/n02_1.JPEG", "b/n02_2.JPEG"])
    listed = tmp_path / "ids.txt"
    listed.write_text("# SimCLR-style list\n13\n11\n\n")
    assert label_subset.id_rows(label_subset.read_ids(str(listed)), ids, paths).tolist() == [1, 3]
    assert label_subset.id_rows(["n02_1.JPEG", "n01_1.JPEG"], ids, paths).tolist() == [0, 2]
    with pytest.raises(ConfigError, match="1 of 2 entries are not in the training split"):
        label_subset.id_rows(["13", "99"], ids, paths)
    with pytest.raises(ConfigError, match="cannot be read"):
        label_subset.read_ids(str(tmp_path / "absent.txt"))


def _indices(config, processes: int) -> list[int]:
    """The example ids of one pass over the training split, every process's rows together."""
    seen = []
    for process in range(processes):
        for batch in data_lib.make_eval_iterator(config, "train", 8, process_index=process,
                                                 process_count=processes):
            seen += batch["index"][batch["valid"]].tolist()
    return sorted(seen)


def test_the_fraction_picks_the_same_examples_on_any_process_count():
    config = data_lib.default_data_config()
    config.label_fraction = 0.05
    config.data_seed = 7
    train = data_lib.load_source(config).split("train")
    full = data_lib.load_source(data_lib.default_data_config()).split("train")
    expected = label_subset.fraction_rows(full.labels, 0.05, 7)
    assert train.ids.tolist() == full.ids[expected].tolist()
    for processes in (1, 2, 4):
        assert _indices(config, processes) == train.ids.tolist()


def test_a_fraction_and_an_ids_file_together_are_refused_when_the_config_is_read(tmp_path):
    with pytest.raises(ConfigError, match="label_fraction or config.data.label_ids, not both"):
        DataSpec(dataset="digits", label_fraction=0.1, label_ids=str(tmp_path / "ids.txt"))
