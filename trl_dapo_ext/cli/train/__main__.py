"""``python -m trl_dapo_ext.cli.train``: the same as ``trl-dapo train``."""

import sys

from trl_dapo_ext.cli.train import main

sys.exit(main())
