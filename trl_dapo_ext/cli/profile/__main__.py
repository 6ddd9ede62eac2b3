"""``python -m trl_dapo_ext.cli.profile``: the same as ``trl-dapo profile``."""

import sys

from trl_dapo_ext.cli.profile import main

sys.exit(main())
