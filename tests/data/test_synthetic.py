"""The synthetic brain-phantom generator (docs/reproductions.md, "Synthetic brain phantoms")."""

from __future__ import annotations

import numpy as np

from contrastive_jax.data import synthetic


def test_phantoms_metadata():
    splits = synthetic.phantom_splits(num_train=64, seed=3)
    train, test = splits["train"], splits["test"]
    assert train.images.shape == (64, 32, 32, 3) and (train.labels == 0).all()
    assert np.bincount(test.labels).tolist() == [356, 306]
    for split in (train, test):
        age, sex = split.metadata.T
        assert ((age >= 20) & (age <= 80)).all() and set(np.unique(sex)) <= {0.0, 1.0}
    again = synthetic.phantom_splits(num_train=64, seed=3)
    np.testing.assert_array_equal(again["test"].images, test.images)
    # Ventricles (dark) grow with age: the centre is darker in old subjects.
    centre = train.images[:, 12:20, 12:20, 0].mean((1, 2))
    age = train.metadata[:, 0]
    assert np.corrcoef(age, centre)[0, 1] < -0.5
