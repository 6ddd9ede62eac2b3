"""Code rewards: run model-written Python against unit tests in a sandbox it cannot escape or fool.

Modules: ``extract`` (the code block of a completion), ``formats`` (test formats and output comparisons),
``asserts`` (assert-style tests as the oracle's steps and test units), ``runner`` (a test run and its per-test
outcomes), ``sandbox`` (the parent side: backends, launch, deadlines, clean-up), ``sandboxed`` (the supervisor, candidate
and oracle processes; standard library only, started by path), ``reward`` (the TRL reward functions).
"""
