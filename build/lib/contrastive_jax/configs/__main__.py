"""``python -m contrastive_jax.configs [NAME]``: the paths of the packaged configs."""

import sys

from contrastive_jax.configs import main

if __name__ == "__main__":  # importing the module (e.g. for the API docs) runs nothing
    sys.exit(main(sys.argv[1:]))
