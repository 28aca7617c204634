"""A bounded live fuzzer for a running daemon: ``messages`` makes the hostile traffic,
``live`` sends it over several lanes and checks every reply.

Why in the package: the test suite (``tests/test_live_fuzz.py``) and the operator's
``scripts/ops/fuzz`` run the same fuzzer, and neither may import the other's files.
"""
