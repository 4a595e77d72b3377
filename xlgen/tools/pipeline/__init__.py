"""A pipeline as the tools see it, beyond the compiler: `companion` (its Python companion
module: invariants, metrics, reference, reports, plots, demo), `workload` (request inputs),
`metrics` (what its `metric`, `output` and `progress` declarations measure of a run),
`tool_options` (the `--report`, `--plot`, invariant options of sim, diff and run) and
`graph` (its stage state machine as DOT).

May import: the layers below xlgen.tools, and xlgen.tools.progress and doctor.
"""
