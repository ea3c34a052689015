"""``python -m contrastive_jax.configs [NAME]``: the paths of the packaged configs."""

import sys

from contrastive_jax.configs import main

sys.exit(main(sys.argv[1:]))
