"""`xlgen demo`: `standard` (build, simulate, diff-test, metrics and plots of a pipeline on a
workload: what the bundled pipeline's demo runs).

May import: the layers below xlgen.tools and every other group of xlgen.tools.
"""
