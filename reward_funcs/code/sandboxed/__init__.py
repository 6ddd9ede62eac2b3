"""The programs that run inside the code sandbox (standard library only, started by path, never importing the package).

``python -I -S -B .../sandboxed/__main__.py ROLE ...`` starts one of two roles:

* ``supervisor`` (`supervisor`): the trusted process the parent starts (PID 1 of the namespaces). It reads the job,
  builds the isolated file system (`rootfs`), starts the solution's processes, enforces the per-test wall time,
  collects their reports (`collect`) and writes the verdict records on the result channel only it holds.
* ``candidate`` (`candidate`): the solution's process. The supervisor forks, lays out the file descriptors and
  ``exec``s a **fresh interpreter** in this role, so nothing of the supervisor's memory (the job, the test program,
  the nonce) exists in it. It reads only what it needs to run (the solution, the calls of this run) from a memfd,
  confines itself (`confine`: rlimits, unprivileged uid or no capabilities, ``no_new_privs``, a minimal
  environment) and only then runs the solution.

Assert-style tests run in a third process, the `oracle`, forked from the supervisor: it holds the test program, is
not dumpable, and talks to the candidate only through two pipes of plain data (`codec`).
"""
