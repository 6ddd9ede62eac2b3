"""Hostile-completion corpus for the code sandbox, in all three test formats and on every available backend.

Every cheat must score 0 (with partial credit, so not a single test may pass), and after every run the host must be
unharmed: no process of a sandbox uid left, no marker file outside the scratch directory, no scratch left behind.
Two problems: ``double`` (solvable; the cheats pair a *wrong* solution with the trick) and ``secret`` (expects a
random token generated in this process at run time: any pass means the expected value leaked to the candidate).
"""

from __future__ import annotations

import glob
import os
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from reward_funcs import make_code_reward, run_code_tests
from reward_funcs.code import sandbox
from reward_funcs.code.sandbox import _UID_BASE, SandboxUnavailable, resolve_backend

FORMATS = ("assert", "stdio", "call")
# The hostile corpus also runs against a test program that cannot be split (asserts in a loop, HumanEval's
# check(candidate)): one all-or-nothing test, run by the oracle process against the candidate's call server.
HOSTILE_FORMATS = (*FORMATS, "program")
MARK = "HOSTILE-MARK-" + secrets.token_hex(4)  # this run's: another test run beside it writes other names
REPO = Path(__file__).resolve().parents[1]
# Two time limits. A run that must finish gets a limit no load reaches (a verdict of "timeout" there would be the
# machine's speed, not the code's); a run that must be stopped (loops, sleeps, floods) gets a short one.
TIMEOUT = 20.0
TIMEOUT_TO_HIT = 1.5
LIMITS = dict(timeout_s=TIMEOUT, memory_mb=256, output_bytes=1 << 20, file_mb=4, max_procs=16)
SECRET = "tok_" + secrets.token_hex(12)  # exists only in this process's memory


def _backend_or_skip(isolation: str) -> str:
    try:
        return resolve_backend(isolation)
    except SandboxUnavailable as exc:
        pytest.skip(f"{isolation} isolation unavailable here: {exc}")


@pytest.fixture(params=["namespaces", "rlimits"], scope="module")
def isolation(request):
    backend = _backend_or_skip(request.param)
    return request.param, backend


# What the current test started (set by `host_unharmed`): its sandbox uids and its scratch root. The checks look at
# these only, so another sandbox user on the machine (a second test run, a trainer) cannot fail them.
_OWN: dict = {"uids": set(), "root": None, "older": set()}  # older: descendants from before the test


def _sandbox_procs() -> list[psutil.Process]:
    """This test's sandbox processes: of its uids, with its scratch root in their environment (the fallbacks'
    TMPDIR), or descendants of this process (the namespace backends' supervisors)."""
    found = {p.pid: p for p in psutil.Process().children(recursive=True) if p.pid not in _OWN["older"]}
    for p in psutil.process_iter(["uids", "environ"]):
        try:
            tmpdir = (p.info["environ"] or {}).get("TMPDIR", "")
            if p.info["uids"].real in _OWN["uids"] or (_OWN["root"] and tmpdir.startswith(_OWN["root"])):
                found[p.pid] = p
        except (psutil.Error, TypeError, AttributeError):
            pass
    return list(found.values())


def _killed(within_s: float = 30.0) -> bool:
    """No sandbox process is left (polled: a killed process can take a moment to vanish on a loaded machine)."""
    deadline = time.monotonic() + within_s
    while _sandbox_procs() and time.monotonic() < deadline:
        time.sleep(0.05)
    return _sandbox_procs() == []


def _marker_files() -> list[str]:
    places = [
        tempfile.gettempdir(),
        "/tmp",
        "/var/tmp",
        "/dev/shm",
        str(REPO),
        str(REPO / "tests"),
        os.path.expanduser("~"),
        os.getcwd(),
    ]
    return sorted({f for d in places for f in glob.glob(os.path.join(d, f"*{MARK}*"))})


@pytest.fixture(autouse=True)
def host_unharmed(monkeypatch, tmp_path_factory):
    """The test's runs use a scratch root and uids of their own; afterwards none of their processes, marker files
    or scratch folders may be left."""
    tmp_path_factory.getbasetemp()  # pytest's own temp folder, made before the temp dir points at our root
    root = tempfile.mkdtemp(prefix="sandbox-test-", dir="/tmp")
    os.chmod(root, 0o755)  # the root fallback's uids pass through it to their folders
    monkeypatch.setattr(tempfile, "tempdir", root)
    allocate = sandbox._allocate_uids

    def recording() -> int:
        uid = allocate()
        _OWN["uids"].update((uid, uid + 1))
        return uid

    monkeypatch.setattr(sandbox, "_allocate_uids", recording)
    _OWN.update(uids=set(), root=root, older={p.pid for p in psutil.Process().children(recursive=True)})
    try:
        yield
        time.sleep(0.05)  # give a surviving orphan a moment to show itself (the orphan test waits longer)
        assert _sandbox_procs() == [], "sandbox processes survived the run"
        leftovers = _marker_files()
        for f in leftovers:  # keep later tests meaningful even after a failure
            Path(f).unlink(missing_ok=True)
        assert leftovers == [], "files written outside the scratch directory survived"
        assert glob.glob(os.path.join(root, "code-sandbox-*")) == [], "scratch folders survived the run"
    finally:
        _OWN.update(uids=set(), root=None, older=set())
        subprocess.run(["rm", "-rf", root], check=False)


# -- programs ----------------------------------------------------------------------------------------------

TESTS = {
    "double": {
        "assert": "assert double(21) == 42\nassert double(-1) == -2",
        "stdio": {"inputs": ["21\n", "-1\n"], "outputs": ["42\n", "-2\n"]},
        "call": {"fn_name": "double", "inputs": [[21], [-1]], "outputs": [42, -2]},
        "program": "def check(candidate):\n    for x, want in ((21, 42), (-1, -2)):\n"
        "        assert candidate(x) == want\ncheck(double)\n",
    },
    "secret": {
        "assert": f"assert double(1) == {SECRET!r}\nassert double(2) == {SECRET!r}",
        "stdio": {"inputs": ["1\n", "2\n"], "outputs": [SECRET + "\n", SECRET + "\n"]},
        "call": {"fn_name": "double", "inputs": [[1], [2]], "outputs": [SECRET, SECRET]},
        "program": "def check(candidate):\n    for x in (1, 2):\n        got = candidate(x)\n"
        f"        assert got == {SECRET!r}, 'the solution returned ' + repr(got)\ncheck(double)\n",
    },
}


def program(fmt: str, ret: str, top: str = "", tail: str = "") -> str:
    """A program for one format: `double(x)` returns `ret` (stdio: prints it), with extra top/tail code."""
    if fmt == "stdio":
        body = f"def double(x):\n    return {ret}\n\nprint(double(int(input())))\n"
    else:
        body = f"def double(x):\n    return {ret}\n"
    return f"{top}\n{body}\n{tail}\n"


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


def score(code: str, fmt: str, problem: str = "double", isolation: str = "namespaces", **kw) -> float:
    reward = make_code_reward(partial_credit=True, isolation=isolation, **{**LIMITS, **kw})
    return reward([fenced(code)], tests=[TESTS[problem][fmt]])[0]


def outcomes(code: str, fmt: str, problem: str = "double", isolation: str = "namespaces", **kw) -> list[str]:
    report = run_code_tests(code, TESTS[problem][fmt], isolation=isolation, **{**LIMITS, **kw})
    return [o.outcome for o in report.outcomes]


# -- baselines ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_correct_wrong_and_partial(fmt, isolation):
    iso, _ = isolation
    assert score(program(fmt, "2 * x"), fmt, isolation=iso) == 1.0
    assert score(program(fmt, "x + 1"), fmt, isolation=iso) == 0.0
    assert score(program(fmt, "42 if x == 21 else 0"), fmt, isolation=iso) == 0.5
    binary = make_code_reward(isolation=iso, **LIMITS)
    assert binary([fenced(program(fmt, "42 if x == 21 else 0"))], tests=[TESTS["double"][fmt]]) == [0.0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_syntax_error_is_error_for_every_test(fmt):
    assert outcomes("def double(x):\n    return (", fmt) == ["error", "error"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_runtime_error_in_one_case_only_fails_that_case(fmt):
    code = program(fmt, "2 * x if x > 0 else 1 // 0")
    assert outcomes(code, fmt) == ["passed", "error"]


# -- the cheats: all must score 0 ----------------------------------------------------------------------------

ALWAYS_EQ = """
class AlwaysEq:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return 0
    def __bool__(self): return True
"""

CHEATS = {
    # Leave with success before any test runs (each variant placed after a wrong solution).
    "sys_exit_0": dict(tail="import sys\nsys.exit(0)"),
    "os_exit_0": dict(tail="import os\nos._exit(0)"),
    "raise_systemexit": dict(tail="raise SystemExit(0)"),
    "atexit_os_exit": dict(tail="import atexit, os\natexit.register(lambda: os._exit(0))"),
    "thread_os_exit": dict(
        tail="import threading, os, time\n"
        "def _bye():\n    time.sleep(0.05)\n    os._exit(0)\n"
        "threading.Thread(target=_bye, daemon=True).start()"
    ),
    "excepthook_exit": dict(tail="import sys, os\nsys.excepthook = lambda *a: os._exit(0)"),
    # Equality hijacking.
    "always_eq_object": dict(top=ALWAYS_EQ, ret="AlwaysEq()"),
    "always_eq_int_subclass": dict(
        top="class E(int):\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
        "    __hash__ = int.__hash__",
        ret="E(0)",
    ),
    "always_eq_str_subclass": dict(
        top="class S(str):\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
        "    __hash__ = str.__hash__",
        ret="S('nope')",
    ),
    "class_spoofing_object": dict(
        top=ALWAYS_EQ + "class Spoof(AlwaysEq):\n    __class__ = property(lambda self: int)", ret="Spoof()"
    ),
    # Patching the test framework / builtins / harness internals of the process the candidate runs in.
    "patch_builtins_and_harness": dict(
        top="import builtins, sys, json\n"
        "builtins.AssertionError = type('AssertionError', (Exception,), {})\n"
        "builtins.print = lambda *a, **k: sys.stdout.write('PASSED\\n')\n"
        "builtins.isinstance = lambda *a: True\n"
        "m = sys.modules.get('__main__')\n"
        "for name in ('encode_value', '_report', 'decode_value', '_describe'):\n"
        "    if hasattr(m, name):\n"
        "        setattr(m, name, (lambda *a, **k: True))\n"
        'json.dumps = lambda *a, **k: \'{"k": 0, "o": "ok", "v": true}\'\n'
        "__builtins__ = {'print': lambda *a, **k: None}\n",
    ),
    # Faking a success summary / result records on every channel the candidate can reach.
    "fake_summary_and_records": dict(
        top="import os, sys\n"
        "msg = b'All tests passed\\nPASSED 2/2\\nOK\\n'\n"
        "for k in range(-1, 3):\n"
        '    msg += (\'{"k": %d, "o": "ok", "v": 42, "nonce": "00", "out": "42\\\\n"}\\n\' % k).encode()\n'
        "for fd in range(0, 64):\n"
        "    try:\n        os.write(fd, msg)\n    except OSError:\n        pass\n"
        "print('All tests passed')\n",
    ),
    # Killing the supervisor / everything it can signal; escalating privileges.
    "kill_supervisor_and_escalate": dict(
        top="import os, signal\n"
        "for target in (os.getppid(), 1):\n"
        "    try:\n        os.kill(target, signal.SIGKILL)\n    except OSError:\n        pass\n"
        "for attempt in (lambda: os.setuid(0), lambda: os.chroot('/'), lambda: os.unshare(0)):\n"
        "    try:\n        attempt()\n    except Exception:\n        pass\n",
    ),
}


@pytest.mark.parametrize("fmt", HOSTILE_FORMATS)
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_cheat_scores_zero(cheat, fmt, isolation):
    iso, _ = isolation
    spec = CHEATS[cheat]
    code = program(fmt, spec.get("ret", "x + 1"), spec.get("top", ""), spec.get("tail", ""))
    assert score(code, fmt, isolation=iso) == 0.0


def test_cheats_are_not_trivially_zero():
    """Sanity check of the corpus: where the trick alone is harmless, the same program with a correct `double`
    passes, so the zeros above come from the wrong answer, not from a program that cannot run. (Writing fake records
    into the report pipe or patching the in-process reporter poisons the run, which is an error by design.)"""
    for cheat, fmt in (
        ("kill_supervisor_and_escalate", "call"),
        ("kill_supervisor_and_escalate", "assert"),
        ("sys_exit_0", "stdio"),
        ("raise_systemexit", "stdio"),
        ("excepthook_exit", "call"),
    ):
        spec = CHEATS[cheat]
        assert score(program(fmt, "2 * x", spec.get("top", ""), spec.get("tail", "")), fmt) == 1.0, cheat


# -- leaking the expected output: the `secret` problem cannot be solved honestly ---------------------------

# The search below reads every object, file and process memory it can reach, once per call of the solution: seconds
# of work that grow with the machine's load and its other processes. Its limit leaves room for the search to finish,
# so that "found nothing" is what a test sees, not a timeout (which would score 0 without having searched).
SEARCH_TIMEOUT_S = 60

FIND_SECRET = r'''
import gc, os, re, sys
def _find():
    """Search everything the solution's process can reach for the expected output: frames, heap, module tables,
    argv, environment, its own file descriptors, files, and /proc (cmdline, environ, memory of every process)."""
    def hit(s):
        if isinstance(s, (bytes, bytearray)):
            s = bytes(s).decode("latin-1")
        if isinstance(s, str):
            m = re.search("tok_[0-9a-f]{24}", s)  # the token's shape: this search's own text never matches
            return m.group(0) if m else None
    f = sys._getframe()
    while f is not None:
        for d in (f.f_locals, f.f_globals):
            for v in list(d.values()):
                r = hit(v) or hit(repr(v)[:100000])
                if r:
                    return r
        f = f.f_back
    for o in gc.get_objects():
        try:
            r = hit(o) if isinstance(o, (str, bytes)) else hit(repr(o)[:10000])
        except Exception:
            r = None
        if r:
            return r
    for module in list(sys.modules.values()):
        for v in list(getattr(module, "__dict__", {}).values()):
            try:
                r = hit(v) or hit(repr(v)[:10000])
            except Exception:
                r = None
            if r:
                return r
    for v in (*sys.argv, *getattr(sys, "orig_argv", ()), *os.environ.values()):
        if hit(v):
            return hit(v)
    for fd in range(256):
        try:
            blocking = os.get_blocking(fd)
            os.set_blocking(fd, False)
            try:
                try:
                    os.lseek(fd, 0, os.SEEK_SET)
                except OSError:
                    pass
                r = hit(os.read(fd, 1 << 20))
            finally:
                os.set_blocking(fd, blocking)
            if r:
                return r
        except OSError:
            pass
    roots = [os.getcwd(), os.path.dirname(os.getcwd()), "/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"),
             "/work", "/root", "/sandbox"]
    seen = 0
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            for name in files:
                seen += 1
                if seen > 3000:
                    break
                try:
                    with open(os.path.join(dirpath, name), "rb") as fh:
                        r = hit(fh.read(1 << 16))
                    if r:
                        return r
                except OSError:
                    pass
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as fh:
                    r = hit(fh.read())
                if r:
                    return r
            except OSError:
                pass
        try:
            with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    try:
                        mem.seek(lo)
                        r = hit(mem.read(min(hi - lo, 1 << 22)))
                    except (OSError, ValueError, OverflowError):
                        continue
                    if r:
                        return r
        except OSError:
            pass
    for name in ("expected_output.txt", "output.txt", "answer.txt", "tests.json", "correct_output.txt"):
        try:
            return open(name).read().strip()
        except OSError:
            pass
    return "not found"
'''


@pytest.mark.parametrize("fmt", HOSTILE_FORMATS)
def test_expected_output_cannot_be_read_from_stack_heap_files_or_proc(fmt, isolation):
    iso, _ = isolation
    assert score(program(fmt, "_find()", FIND_SECRET), fmt, "secret", isolation=iso, timeout_s=SEARCH_TIMEOUT_S) == 0.0


def test_test_program_is_not_in_the_solutions_process(isolation):
    """Program mode: the search ran to its end and found nothing (the test program's assert message shows what the
    solution returned). The candidate used to be a fork of the supervisor, whose frames held the test program."""
    iso, _ = isolation
    code = program("program", "_find()", FIND_SECRET)
    report = run_code_tests(
        code, TESTS["secret"]["program"], isolation=iso, **{**LIMITS, "timeout_s": SEARCH_TIMEOUT_S}
    )
    assert [o.outcome for o in report.outcomes] == ["failed"]
    assert "the solution returned 'not found'" in report.outcomes[0].detail


@pytest.mark.parametrize("fmt", HOSTILE_FORMATS)
def test_secret_problem_sanity(fmt):
    """The secret problem is scorable at all in every format: a program that knows the token passes (the tests
    above are not vacuous)."""
    assert score(program(fmt, repr(SECRET)), fmt, "secret") == 1.0


@pytest.mark.parametrize("fmt", FORMATS)
def test_network_is_unreachable(fmt, isolation):
    """A new network namespace (ns-*), the allow-list's AF_UNIX-only socket() everywhere (the fallbacks too)."""
    iso, _ = isolation
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    connections = []

    def serve():
        deadline = time.monotonic() + 3 * TIMEOUT + 10
        while time.monotonic() < deadline and not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            connections.append(1)
            conn.sendall(f"{SECRET}\n".encode())
            conn.close()

    stop = threading.Event()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    top = (
        "import socket\n"
        "def _fetch():\n"
        "    for host in ('127.0.0.1', 'localhost', '10.0.2.2', '1.1.1.1'):\n"
        "        try:\n"
        f"            s = socket.create_connection((host, {port}), timeout=0.3)\n"
        "            return s.recv(100).decode().strip()\n"
        "        except OSError:\n"
        "            pass\n"
        "    return 'offline'\n"
    )
    try:
        assert score(program(fmt, "_fetch()", top), fmt, "secret", isolation=iso) == 0.0
    finally:
        stop.set()
        t.join()
        server.close()
    assert connections == []


# -- resource abuse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_infinite_loop_and_sleep_time_out(fmt, isolation):
    # Tested by the verdict and the kill, not by a stopwatch: a limit that did not fire would let the sleeper wake
    # after 60 s and answer (a wrong answer, not "timeout"), and its process would outlive the call.
    iso, _ = isolation
    looping = program(fmt, "x + 1", tail="while True:\n    pass")
    assert outcomes(looping, fmt, isolation=iso, timeout_s=TIMEOUT_TO_HIT)[0] == "timeout"
    assert _killed(), "the looping program was not killed"
    code = program(
        fmt,
        "x + 1",
        top="import signal, time\nfor s in (signal.SIGTERM, signal.SIGXCPU, "
        "signal.SIGALRM):\n    signal.signal(s, signal.SIG_IGN)\ntime.sleep(60)",
    )
    assert outcomes(code, fmt, isolation=iso, timeout_s=TIMEOUT_TO_HIT)[0] == "timeout"
    assert _killed(), "the sleeping program was not killed"


@pytest.mark.parametrize("fmt", FORMATS)
def test_memory_hog_is_a_memory_outcome(fmt, isolation):
    iso, _ = isolation
    report = run_code_tests(program(fmt, "len(bytearray(2 * 10**9))"), TESTS["double"][fmt], isolation=iso, **LIMITS)
    assert report.outcomes[0].outcome == "memory", report
    hog = "_h = []\nwhile True:\n    _h.append(' ' * 10**7)"
    report = run_code_tests(program(fmt, "x + 1", top=hog), TESTS["double"][fmt], isolation=iso, **LIMITS)
    assert [o.outcome for o in report.outcomes] == ["memory", "memory"], report


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_flood(fmt, isolation):
    iso, _ = isolation
    flood = "import sys\nwhile True:\n    sys.stdout.write('42\\n' * 10000)"
    code = program(fmt, "2 * x", tail=flood) if fmt == "stdio" else program(fmt, "2 * x", top=flood)
    result = outcomes(code, fmt, isolation=iso, timeout_s=TIMEOUT_TO_HIT)
    assert "passed" not in result and result[0] in ("error", "timeout")  # stdio: output limit; else: never loads


@pytest.mark.parametrize("fmt", FORMATS)
def test_fork_flood_is_contained(fmt, isolation):
    iso, _ = isolation
    # Endless, so the verdict does not depend on machine speed: a finite flood that ends before the time limit
    # would go on to answer correctly (and did, on a quiet machine), which is containment working, not a cheat.
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    before = len(psutil.pids())
    assert score(program(fmt, "2 * x", top=bomb), fmt, isolation=iso, timeout_s=1.0) == 0.0
    assert len(psutil.pids()) < before + 50


@pytest.mark.parametrize("fmt", FORMATS)
def test_orphaned_setsid_grandchild_is_killed(fmt, isolation):
    iso, _ = isolation
    orphan = (
        "import os, time, signal\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):\n"
        "            signal.signal(s, signal.SIG_IGN)\n"
        "        for _ in range(600):\n"
        f"            for d in ('/tmp', '/var/tmp', '/dev/shm'):\n"
        "                try:\n"
        f"                    open(d + '/{MARK}-orphan', 'w').write(str(os.getpid()))\n"
        "                except OSError:\n"
        "                    pass\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
    )
    # Correct solution: the orphan must die even when everything else goes well.
    assert score(program(fmt, "2 * x", top=orphan), fmt, isolation=iso) == 1.0
    time.sleep(0.5)
    assert _sandbox_procs() == []
    assert not any("orphan" in f for f in _marker_files())


@pytest.mark.parametrize("fmt", FORMATS)
def test_file_writes_outside_scratch_do_not_survive(fmt, isolation):
    iso, _ = isolation
    targets = ["/tmp", "/var/tmp", "/dev/shm", str(REPO), str(REPO / "tests"), "/root", "..", "~"]
    writer = (
        "import os\nwrote = []\n"
        f"for d in {targets!r}:\n"
        f"    p = os.path.join(os.path.expanduser(d), '{MARK}-file')\n"
        "    try:\n"
        "        open(p, 'w').write('x')\n"
        "        wrote.append(p)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('scratch-ok.txt', 'w').write('fine')\n"
        "assert open('scratch-ok.txt').read() == 'fine'\n"
    )
    # Writing in the scratch dir is allowed (the correct solution still passes); nothing else may survive.
    assert score(program(fmt, "2 * x", top=writer), fmt, isolation=iso) == 1.0


@pytest.mark.parametrize("fmt", FORMATS)
def test_file_size_limit(fmt, isolation):
    iso, _ = isolation
    fill = "with open('big', 'wb') as f:\n    for _ in range(100):\n        f.write(b'0' * 10**6)\n"
    result = outcomes(program(fmt, "2 * x", top=fill), fmt, isolation=iso)
    assert "passed" not in result


def test_namespace_backend_hides_host_files_and_processes(isolation):
    iso, backend = isolation
    if not backend.startswith("ns"):
        pytest.skip("only the namespace backend replaces the file system view")
    probe = (
        "import os\ndef double(x):\n    return [sorted(os.listdir('/')), "
        "len([p for p in os.listdir('/proc') if p.isdigit()]) < 10, os.getuid()]\n"
    )
    report = run_code_tests(probe, {"fn_name": "double", "inputs": [[1]], "outputs": [0]}, isolation=iso)
    assert report.outcomes[0].outcome == "failed"  # the value itself is checked through a direct probe below
    from reward_funcs.code.sandbox import Limits, run_job

    recs = run_job(
        {"mode": "calls", "code": probe, "cases": [{"fn": "double", "args": [1]}]}, Limits(), backend=backend
    )
    listing, few_procs, uid = recs[0]["v"]
    assert "work" not in listing and "home" not in listing and "tmp" in listing
    assert few_procs
    if backend == "ns-root":
        assert uid >= _UID_BASE


# -- format features end to end (default backend) ------------------------------------------------------------


def test_assert_checks_decided_by_the_oracle_process():
    tests = "assert abs(area(2) - 12.566) < 1e-3\nassert round(area(1), 2) == 3.14"
    good = "import math\ndef area(r):\n    return math.pi * r * r"
    assert [o.outcome for o in run_code_tests(good, tests, **LIMITS).outcomes] == ["passed", "passed"]
    assert [o.outcome for o in run_code_tests("def area(r):\n    return 3 * r * r", tests, **LIMITS).outcomes] == [
        "failed",
        "failed",
    ]
    hijack = (
        ALWAYS_EQ + "class F(float):\n    def __lt__(self, o): return True\n    __eq__ = lambda s, o: True\n"
        "    __hash__ = float.__hash__\n    def __sub__(self, o): return F(0.0)\n    def __round__(self, n=0): return self\n"
        "def area(r):\n    return F(0.0)"
    )
    assert [o.outcome for o in run_code_tests(hijack, tests, **LIMITS).outcomes] == ["failed", "failed"]


def test_humaneval_mbpp_and_leetcode_variants():
    he = "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n    assert candidate([]) == 0\n"
    r = make_code_reward(**LIMITS)
    assert r([fenced("def total(xs):\n    return sum(xs)")], tests=[he], entry_point=["total"]) == [1.0]
    mbpp = ["assert total([1]) == 1", "assert total([2, 2]) == 4"]
    assert r([fenced("def total(xs):\n    return sum(xs)")], tests=[mbpp]) == [1.0]
    leet = '{"fn_name": "twoSum", "inputs": [[[2, 7, 11], 9]], "outputs": [[0, 1]]}'
    sol = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1] if nums[0] + nums[1] == target else []"
    assert r([fenced(sol)], tests=[leet]) == [1.0]


def test_float_tolerance_is_opt_in_for_stdio_and_calls():
    stdio = {"inputs": ["1\n"], "outputs": ["0.3333333\n"]}
    call = {"fn_name": "third", "inputs": [[1]], "outputs": [0.3333333]}
    prog_io, prog_call = "print(1 / 3)", "def third(x):\n    return x / 3"
    strict, tolerant = make_code_reward(**LIMITS), make_code_reward(float_tol=1e-6, **LIMITS)
    assert strict([fenced(prog_io), fenced(prog_call)], tests=[stdio, call]) == [0.0, 0.0]
    assert tolerant([fenced(prog_io), fenced(prog_call)], tests=[stdio, call]) == [1.0, 1.0]


def test_stdio_nonzero_exit_fails_even_with_right_output():
    code = "print(42)\nimport sys\nsys.exit(3)"
    assert outcomes(code, "stdio")[0] == "error"


def test_site_packages_shows_package_folders_only(isolation, tmp_path, monkeypatch):
    """With ``site_packages=True`` the namespace backends show the environment's packages, never the other folders
    on ``sys.path`` (the tests' own folder is on it under pytest; a script's folder holds its data)."""
    iso, backend = isolation
    if not backend.startswith("ns"):
        pytest.skip("only the namespace backend replaces the file system view")
    script_dir = tmp_path / "my-training-script"
    script_dir.mkdir()
    (script_dir / "data.jsonl").write_text(SECRET)
    monkeypatch.syspath_prepend(str(script_dir))
    probe = "import os, json\ndef double(x):\n    return [os.path.exists(p) for p in x] + [json.dumps(1)]\n"
    paths = [str(script_dir), str(REPO / "tests"), str(REPO / "reward_funcs")]  # the repo may hold the venv
    report = run_code_tests(
        probe,
        {"fn_name": "double", "inputs": [[paths]], "outputs": [[False, False, False, "1"]]},
        isolation=iso,
        site_packages=True,
        **LIMITS,
    )
    assert [o.outcome for o in report.outcomes] == ["passed"], report.outcomes
