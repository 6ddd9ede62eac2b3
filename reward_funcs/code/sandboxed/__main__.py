"""Entry point of the sandbox's processes: ``python -I -S -B __main__.py supervisor RESULT_FD | candidate``.

``-I`` leaves the script's folder off ``sys.path``: this puts the folder above it there, so that the roles import
each other as the package ``sandboxed`` (and nothing else of ``reward_funcs`` is imported, or needed).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "supervisor":
        from sandboxed.supervisor import main
    elif role == "candidate":
        from sandboxed.candidate import main
    else:
        sys.exit(f"usage: {sys.argv[0]} supervisor RESULT_FD | candidate")
    sys.exit(main(sys.argv[2:]))
