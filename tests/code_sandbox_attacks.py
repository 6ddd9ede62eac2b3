"""Attacks of the code sandbox's third review, one function each: ``attack(isolation) -> dict`` of what happened.

Run in a fresh interpreter by tests/test_code_rewards_attacks.py, as root (``ns-root``, ``root``) and as an
unprivileged user (``ns-user``, ``user``), so that each backend is attacked; a fresh process also measures the
trainer's memory and bounds a hang by the subprocess timeout. Not a test module itself (no ``test_`` prefix).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

# HumanEval/38: the test program and the prompt's helper.
from test_code_rewards_programs import CYCLIC_TESTS as HE38_TESTS  # noqa: E402
from test_code_rewards_programs import ENCODE as ENCODE_CYCLIC  # noqa: E402

from reward_funcs import make_code_reward, run_code_tests
from reward_funcs.code.formats import stdout_matches, values_match

PLANT = (
    ENCODE_CYCLIC
    + r"""
import os
def _plant():
    for pid in (1, os.getppid()):  # the supervisor: PID 1 (namespaces) or our parent
        try:
            args = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        main = next((a.decode() for a in args if a.endswith(b"__main__.py")), None)
        if main:
            break
    d = os.path.dirname(os.path.dirname(main))  # the oracle's sys.path[0] before the fix
    os.makedirs(d, exist_ok=True)  # under /tmp: inside the candidate's writable tmpfs
    payload = "import os\nos.write(3, b'{\"o\":\"ok\",\"v\":true}\\n')\nos._exit(0)\n"
    for m in ("random", "string"):
        with open(os.path.join(d, m + ".py"), "w") as f:
            f.write(payload)
    for d in ("/tmp", os.getcwd()):  # a test reading files from its working folder must not read these
        open(os.path.join(d, "expected.txt"), "w").write("wrong")
try:
    _plant()
except Exception:
    pass
def decode_cyclic(s):
    return "definitely wrong"
"""
)


def oracle_import_hijack(isolation: str) -> dict:
    """Item 1: the package in a folder under /tmp (a CI clone); a wrong solution plants ``random.py`` where the
    oracle imports from. Runs a child interpreter importing that copy."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(__import__("reward_funcs").__file__)))
    copy = tempfile.mkdtemp(prefix="clone-", dir="/tmp")
    try:
        shutil.copytree(os.path.join(src, "reward_funcs"), os.path.join(copy, "reward_funcs"))
        os.chmod(copy, 0o755)
        script = (
            "import sys; from reward_funcs.code.runner import run_code_tests\n"
            f"r = run_code_tests({PLANT!r}, {HE38_TESTS!r}, entry_point='decode_cyclic', isolation={isolation!r},"
            " timeout_s=20)\nprint(r.fraction, [o.outcome for o in r.outcomes])\n"
        )
        env = {**os.environ, "PYTHONPATH": copy}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        planted = glob.glob(os.path.join(copy, "reward_funcs", "code", "*.py"))
        return {"out": out.stdout.strip(), "err": out.stderr[-500:], "planted": sorted(map(os.path.basename, planted))}
    finally:
        subprocess.run(["rm", "-rf", copy])


def float_tol_overflow(isolation: str) -> dict:
    """Item 2: a huge int against a float expected value with float_tol."""
    reward = make_code_reward(float_tol=1e-6, isolation=isolation)
    tests = ['{"fn_name": "f", "inputs": [[1]], "outputs": [2.5]}'] * 2
    good, evil = (f"```python\ndef f(x):\n    return {v}\n```" for v in ("2.5", "10**400"))
    try:
        return {"scores": reward([good, evil], tests=tests)}
    except BaseException as exc:
        return {"raised": f"{type(exc).__name__}: {exc}"}


def hash_collision_decode(isolation: str) -> dict:
    """Item 3: the candidate's own record holds a set of 200k ints that all hash alike (~9 minutes to build)."""
    code = (
        "import os, json\ndef f(x):\n"
        "    rec = {'k': 0, 'o': 'ok', 'v': {'$': 'set', 'v': [i * (2**61 - 1) for i in range(200000)]}}\n"
        "    data = (json.dumps(rec) + '\\n').encode()\n"
        "    while data:\n        data = data[os.write(3, data):]\n    os._exit(0)\n"
    )
    tests = {"fn_name": "f", "inputs": [[1]], "outputs": [[1]]}
    r = run_code_tests(code, tests, timeout_s=5, isolation=isolation, output_bytes=8 << 20)
    return {"outcomes": [o.outcome for o in r.outcomes]}


HOG = r"""
import ctypes, os
def hog(mb_shm, mb_memfd):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    libc.shmdt.argtypes = [ctypes.c_void_p]
    chunk, shm, memfd, fds = 32 << 20, 0, 0, []
    for _ in range(mb_shm // 32):
        sid = libc.shmget(0, chunk, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT; never removed
        addr = libc.shmat(sid, None, 0) if sid >= 0 else None
        if not addr or addr == ctypes.c_void_p(-1).value:
            break
        ctypes.memset(addr, 1, chunk)
        libc.shmdt(ctypes.c_void_p(addr))  # detached: out of the address space, still in memory
        shm += 32
    buf = b"\1" * (15 << 20)
    for _ in range(mb_memfd // 15):
        try:
            fd = os.memfd_create("x")
            os.write(fd, buf)
        except OSError:
            break
        fds.append(fd)
        memfd += 15
    return [shm, memfd]
"""


def host_memory(isolation: str) -> dict:
    """Item 4: SysV segments and memfds beyond memory_mb=128 (max_procs=2)."""

    def segments() -> set[str]:  # SysV shm ids on the host
        return {ln.split()[1] for ln in open("/proc/sysvipc/shm").read().splitlines()[1:]}

    before = segments()
    tests = {"fn_name": "hog", "inputs": [[512, 512]], "outputs": [[0, 0]]}
    r = run_code_tests(HOG, tests, timeout_s=30, memory_mb=128, max_procs=2, isolation=isolation)
    left = segments() - before
    for shmid in left:  # the unfixed root fallback left them on the host: remove them
        subprocess.run(["ipcrm", "-m", shmid], check=False)
    return {"outcomes": [(o.outcome, o.detail) for o in r.outcomes], "left": len(left)}


LOOKUP = """
def _lookup(args):
    for v in list(globals().values()):
        if isinstance(v, (list, tuple)):
            for item in v:
                if isinstance(item, tuple) and len(item) == 2 and item[0] == args:
                    return item[1]
    return globals().get("expected")
def add(a, b):
    return _lookup((a, b))
def mystery(n):
    return _lookup((n,))
"""


def split_setup_leak(isolation: str) -> dict:
    """Item 5: expected values in setup statements the probes need."""
    tests = [
        "cases = [((2, 3), 17), ((10, 20), 99)]\nassert add(*cases[0][0]) == cases[0][1]\n"
        "assert add(*cases[1][0]) == cases[1][1]\n",
        "x, expected = 7, 12345\nassert mystery(x) == expected\n",
        "cases = [((2, 3), 17)]\nwant = cases[0][1]\nassert add(*cases[0][0]) == want\n",
    ]
    return {"fractions": [run_code_tests(LOOKUP, t, isolation=isolation).fraction for t in tests]}


def supervisor_crash(isolation: str) -> dict:
    """Item 6: a 100000-deep JSON line on the report fd, a death by real-time signal; four in a row."""
    reward = make_code_reward(isolation=isolation, max_workers=1)
    deep = "```python\nimport os\nos.write(3, b'[' * 100000 + b'\\n')  # %d\nos._exit(0)\n```"
    rt = "```python\nimport os  # %d\nos.kill(os.getpid(), 40)\n```"
    comps = [deep % i for i in range(2)] + [rt % i for i in range(2)]
    try:
        return {"scores": reward(comps, tests=["assert f(1) == 2"] * 4)}
    except BaseException as exc:
        return {"raised": f"{type(exc).__name__}: {exc}"[:300]}


def parent_memory(isolation: str) -> dict:
    """Item 7: eight records of 1.3M empty lists each (~100 MB of Python objects apiece in the trainer)."""

    def hwm() -> int:
        return int(next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")).split()[1]) // 1024

    code = (
        "import os\ndef _w(b):\n    while b:\n        b = b[os.write(3, b):]\n"
        "_w(b'{\"k\":-1,\"o\":\"loaded\"}\\n')\nbody = b'[' + b'[],' * 1300000 + b'[]]'\n"
        'for k in range(8):\n    _w(b\'{"k":%d,"o":"ok","v":\' % k + body + b\'}\\n\')\nos._exit(0)\n'
    )
    before = hwm()
    tests = {"fn_name": "f", "inputs": [[i] for i in range(8)], "outputs": [1] * 8}
    r = run_code_tests(code, tests, isolation=isolation, timeout_s=20)
    return {"grew_mib": hwm() - before, "passed": r.passed}


def deep_tree(isolation: str) -> dict:
    """Item 8: a correct solution that leaves 3000 nested folders in its scratch."""
    base = tempfile.mkdtemp(prefix="deep-", dir="/tmp")
    os.chmod(base, 0o755)
    tempfile.tempdir = base  # this process's scratch root: what is left there is this run's
    code = "```python\n# %d\nimport os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\ndef f(x):\n    return 2 * x\n```"
    reward = make_code_reward(isolation=isolation, max_workers=1)
    try:
        scores = reward([code % i for i in range(4)], tests=["assert f(1) == 2"] * 4)
    except BaseException as exc:
        scores = f"{type(exc).__name__}: {exc}"[:300]
    left = sorted(os.listdir(base))
    subprocess.run(["rm", "-rf", base])
    return {"scores": scores, "left": left}


def extract_quadratic(isolation: str) -> dict:
    """Item 10: 400 KiB of unclosed fences (about 20 minutes with the quadratic regex)."""
    from reward_funcs.code.extract import extract_code

    return {"code": extract_code("```a\n" * 80000 + "~~~python\nx = 1\n~~~\n")}


def float_tol_integers(isolation: str) -> dict:
    """Item 11 (review 3) and review 4: an integer expected value under float_tol is matched only by an exactly equal
    output: near misses printed or returned as ints or floats, and, past int()'s 4,300 digits, ``inf`` or another
    huge integer (both became ``inf`` through a float fallback)."""
    reward = make_code_reward(float_tol=1e-6, isolation=isolation, max_workers=1)
    call = {"fn_name": "f", "inputs": [[1]], "outputs": [999999937]}
    stdio = {"inputs": ["1"], "outputs": ["999999937"]}
    huge = {"inputs": ["20000\n"], "outputs": ["1" * 6021 + "\n"]}
    near = [("return 999999000", call), ("return 999999000.0", call), ("print(999999000)", stdio)]
    near += [("print('999999000.0')", stdio), ("print('9.99999e8')", stdio)]
    near += [("print('inf')", huge), ("import sys\nsys.set_int_max_str_digits(0)\nprint(3 ** 13000)", huge)]
    comps = [f"```python\ndef f(x):\n    {c}\n```" if t is call else f"```python\n{c}\n```" for c, t in near]
    right = "```python\nprint('1' * 6021)\n```"
    return {
        "scores": reward([*comps, right], tests=[t for _, t in near] + [huge]),
        "direct": [stdout_matches("999999000\n", "999999937\n", 1e-6), values_match(999999000, 999999937, 1e-6)],
        "floats_still_close": [stdout_matches("2.5000001", "2.5", 1e-6), values_match(2.5000001, 2.5, 1e-6)],
    }


# Review 4, class 1: test code evaluated in the solution's process. Wrong solutions that passed a split planner's
# probes (expected values and operations on them sent to the candidate) and the tests they passed.
ORACLE_WRONG = {
    "method call on the result": (
        "to_binary",
        "class Yes(str):\n    startswith = endswith = lambda self, *a: True\n    find = lambda self, *a: 0\n"
        "    count = lambda self, *a: 1\ndef to_binary(n):\n    return Yes('definitely not binary')\n",
        "assert to_binary(5).startswith('0b101')\nassert to_binary(6).endswith('110')\n"
        "assert to_binary(7).find('111') != -1\nassert to_binary(8).count('1000') == 1",
    ),
    "expected values in a comprehension": (
        "area",
        "class Zero:\n    __sub__ = __rsub__ = lambda self, other: 0\ndef area(r):\n    return Zero()\n",
        "assert [round(area(r) - a, 4) for r, a in [(1, 3.14159), (2, 12.56637)]] == [0, 0]\n"
        "assert sum([abs(area(r) - a) for r, a in [(1, 3.14159), (2, 12.56637)]]) < 1e-4",
    ),
    "expected values from imported names": (
        "area",
        "import math\nmath.isclose = lambda *a, **k: True\nclass Zero(float):\n"
        "    __sub__ = __rsub__ = lambda self, other: 0.0\ndef area(r):\n    return Zero(-1.0)\n",
        "import math\nassert abs(area(1) - math.pi) < 1e-9\nassert abs(area(1) - math.pi) < 1e-9\n"
        "from math import pi\nassert abs(area(1) - pi) < 1e-9\nassert math.isclose(area(1), math.pi)",
    ),
    "names of a star or nested import": (
        "area",
        "def isclose(*a, **k):\n    return True\nfabs = lambda x: 0.0\ndef area(r):\n    return -1.0\n",
        "from math import *\nassert isclose(area(2), 12.566, rel_tol=1e-3)\nassert fabs(area(2) - 12.566) < 1e-3\n"
        "if True:\n    from math import isclose\nassert isclose(area(2), 12.566, rel_tol=1e-3)",
    ),
}
ORACLE_RIGHT = {  # the solution each group of tests is about, and tests a split planner failed correct code on
    "to_binary": "def to_binary(n):\n    return bin(n)\n",
    "area": "import math\ndef area(r):\n    return math.pi * r * r\n",
    "f": "def f(x):\n    return 2 * x\ndef g(n):\n    yield from range(n)\n",
}
ORACLE_RIGHT_TESTS = (
    "assert sum(f(i) for i in range(3)) == 6\nassert list(map(f, [1, 2, 3])) == [2, 4, 6]\n"
    "assert sorted([3, 1, 2], key=f) == [1, 2, 3]\nassert list(g(3)) == [0, 1, 2]\nassert g(2) == [0, 1]"
)


def tests_run_in_the_oracle(isolation: str) -> dict:
    """Review 4, class 1: each group of asserts against a wrong solution (every test must fail) and against a correct
    one (every test must pass); generators drained into lists, ``map``/``key=f`` calling the solution."""
    run = dict(isolation=isolation, timeout_s=20)
    wrong = {name: run_code_tests(code, tests, **run).fraction for name, (_, code, tests) in ORACLE_WRONG.items()}
    right = {
        name: run_code_tests(ORACLE_RIGHT[fn], tests, **run).fraction for name, (fn, _, tests) in ORACLE_WRONG.items()
    }
    right["generators, map, key=f"] = run_code_tests(ORACLE_RIGHT["f"], ORACLE_RIGHT_TESTS, **run).fraction
    return {"wrong": wrong, "right": right}


# What the candidate's process may put on its report descriptor in reply to a call: values the oracle cannot decode
# or check (a 400-digit complex part, 700,000 items, 66 levels), and results that are not plain data.
WRITE_ANSWER = (
    "```python\nimport os\ndef f(x):\n    data = %s\n    while data:\n        data = data[os.write(3, data):]\n"
    "    os._exit(0)\n```"
)
UNDECODABLE = {
    "complex with a 400-digit part": 'b\'{"k":0,"o":"ok","v":{"$":"complex","v":[1\' + b\'0\' * 400 + b\',0]}}\\n\'',
    "700,000 items": "b'{\"k\":0,\"o\":\"ok\",\"v\":[' + b','.join([b'0'] * 700000) + b']}\\n'",
    "66 levels": "b'{\"k\":0,\"o\":\"ok\",\"v\":' + b'[' * 66 + b']' * 66 + b'}\\n'",
}
NOT_PLAIN = {
    "an object of the solution": "```python\nclass P:\n    pass\ndef f(x):\n    return P()\n```",
    "a function": "```python\ndef f(x):\n    return f\n```",
    "an endless generator": "```python\nimport itertools\ndef f(x):\n    return itertools.count()\n```",
}


def undecodable_answers(isolation: str) -> dict:
    """Review 4: answers the oracle cannot decode or check, and results that are not plain data, fail their test;
    none raises out of the reward call."""
    reward = make_code_reward(isolation=isolation, max_workers=1, timeout_s=20)
    comps = [WRITE_ANSWER % v for v in UNDECODABLE.values()] + list(NOT_PLAIN.values())
    tests = ["assert f(1) + 1 == 2\nassert f(1) == 2"] * len(comps)
    try:
        return {"scores": reward(comps, tests=tests)}
    except BaseException as exc:
        return {"raised": f"{type(exc).__name__}: {exc}"[:300]}


FRAME_READER = """
import sys
def encode_cyclic(s):
    return s
def decode_cyclic(s):
    f = sys._getframe(1)
    while f is not None:  # the caller's constants: the probe's source holds the helper's input
        for c in f.f_code.co_consts:
            if isinstance(c, str) and len(c) == 6:
                return c
        f = f.f_back
    return s
"""


def test_helper_precedence(isolation: str) -> dict:
    """Item 12: the tests define encode_cyclic; the solution's identity helpers and a frame reader must not pass."""
    split = ENCODE_CYCLIC + "assert decode_cyclic(encode_cyclic('abcdef')) == 'abcdef'\n"
    identity = "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n"
    program = ENCODE_CYCLIC + HE38_TESTS
    run = dict(isolation=isolation, entry_point="decode_cyclic")
    return {
        "fractions": [
            run_code_tests(identity, split, **run).fraction,
            run_code_tests(FRAME_READER, split, **run).fraction,
            run_code_tests(identity, program, **run).fraction,
        ]
    }


test_helper_precedence.__test__ = False  # a helper, not a pytest test


def stale_scratch(isolation: str) -> dict:
    """Also: scratch of a trainer killed mid-run is removed at the next start; a live process's is kept."""
    from reward_funcs.code.host.scratch import process_start

    base = tempfile.mkdtemp(prefix="stale-", dir="/tmp")
    os.chmod(base, 0o755)
    tempfile.tempdir = base
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = os.path.join(base, f"code-sandbox-{dead.pid}-1-x")
    live = os.path.join(base, f"code-sandbox-{os.getppid()}-{process_start(os.getppid())}-y")
    for d in (stale, live):
        os.makedirs(os.path.join(d, "run", "deep"))
    r = run_code_tests("def f(x):\n    return x", "assert f(1) == 1", isolation=isolation)
    left = sorted(os.listdir(base))
    subprocess.run(["rm", "-rf", base])
    return {"fraction": r.fraction, "left": [n.rsplit("-", 1)[1] for n in left]}


def control_characters(isolation: str) -> dict:
    """Also: text the candidate controls (an exception message, a test's assert message quoting its value) reaches
    the trainer's logs as plain one-line text, with no terminal escape or forged line."""
    evil = "\x1b[2J\nINFO all tests passed"
    code = f"def f(x):\n    raise ValueError({evil!r})\ndef g(x):\n    return {evil!r}\n"
    details = [o.detail for o in run_code_tests(code, "assert f(1) == 2", isolation=isolation).outcomes]
    program = "for i in range(2):\n    got = g(i)\n    assert got == 'x', 'the solution returned ' + got\n"
    details += [o.detail for o in run_code_tests(code, program, isolation=isolation).outcomes]
    return {"printable": [d.isprintable() and "INFO all tests passed" in d for d in details]}


if __name__ == "__main__":
    import json

    start = time.monotonic()
    result = globals()[sys.argv[1]](sys.argv[2])
    print(json.dumps(result))
