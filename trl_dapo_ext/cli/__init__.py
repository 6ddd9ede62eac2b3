"""The ``trl-dapo`` command line.

Python imports this package before any of its modules, so every way into the command line (the ``trl-dapo``
script, ``python -m trl_dapo_ext.cli.main``, ``python -m trl_dapo_ext.cli.train``, ``make demo``, ``accelerate
launch -m ...``) passes here before a subcommand imports torch: the one moment the OpenMP wait policy can still be
set (see :mod:`trl_dapo_ext.cpu_threads`). A value of the user's own environment is kept.
"""

from trl_dapo_ext.cpu_threads import configure_openmp

configure_openmp()
