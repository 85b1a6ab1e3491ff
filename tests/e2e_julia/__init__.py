"""End-to-end tests of the Julia half (issue 48), for machines that have Julia.

``gate`` decides whether they run (``JULIABRIDGE_JULIA_TESTS`` and a ``julia`` on PATH), with
one reason when they do not and a loud failure when the ``julia`` found is not one;
``julia_runs`` runs Julia (JuliaBridge's ``Pkg.test``, the test environment, the export and
load scripts in ``models/``); ``reference`` compares what Python computes, on every backend
that imports, with what Julia computed. The tests are tests/test_e2e_julia.py; the gate's own
tests, which run everywhere, tests/test_e2e_julia_gate.py.
"""
