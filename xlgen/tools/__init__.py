"""The tools on top of the compiler and the runtimes: `workload` (request inputs), `diff`
(comparing runs), `metrics` and `bench`, `companion` (a pipeline's own Python: invariants,
reports, reference) and `tool_options`, `demo`, `graph`, `fuzzgen` (the differential
fuzzer), `testing` (helpers for a user's tests) and `pytest_plugin` (their fixture), `sweep` and `multigpu` (Ray).

May import: every lower layer (core, semantics, frontend, backends, runtime).
"""
