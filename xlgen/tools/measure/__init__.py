"""Running and measuring: `bench` (the mega-kernel against host-launched and CUDA-graph
loops), `results` (the `--json` document of sim, diff, run, bench), `sweep` (a policy study
as Ray tasks) and `multigpu` (a workload sharded over GPUs).

May import: the layers below xlgen.tools, xlgen.tools.progress and doctor,
xlgen.tools.pipeline, xlgen.tools.check.
"""
