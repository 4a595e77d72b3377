"""`xlgen demo PIPELINE`: `declared` runs the demo a pipeline's companion declares (`@demo`,
given a `Demo`); `standard` is the standard demo any pipeline can run through
`Demo.standard(workload)`: build, simulate, diff-test, metrics and plots (what the bundled
pipeline's demo runs).

May import: the layers below xlgen.tools and every other group of xlgen.tools.
"""

from .declared import Demo, DemoUsage  # noqa: F401 - imports only click: the runs load lazily
