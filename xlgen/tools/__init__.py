"""The tools on top of the compiler and the runtimes, grouped by purpose (lowest first; a
group imports its own modules and the groups before it, never one after it):

- `progress` (progress bars) and `doctor` (what this machine has): leaves, importing no tool;
- `pipeline`: a pipeline as the tools see it: its companion module, its workloads, its
  declared metrics, the options that reach them, its stage graph;
- `check`: is it right? `diff` (comparing runs bit for bit), `testing` and `pytest_plugin`
  (for a user's tests), `fuzzgen` (the differential fuzzer);
- `measure`: how fast, at scale: `bench`, `results` (`--json`), `sweep` and `multigpu` (Ray);
- `demo`: `xlgen demo`, which runs the demo a pipeline's companion declares.

Nothing here names a pipeline: what one pipeline needs (the real model pair's prompts,
PyTorch comparison and plots) lives beside it, in its companion (stages/).

May import: every lower layer (core, semantics, frontend, backends, runtime).
"""
