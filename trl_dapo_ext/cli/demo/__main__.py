"""``python -m trl_dapo_ext.cli.demo``: the same as ``trl-dapo demo``."""

import sys

from trl_dapo_ext.cli.demo import main

sys.exit(main())
