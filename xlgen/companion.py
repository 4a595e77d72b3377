"""`xlgen.companion`, what a pipeline's companion module imports (docs/language.md,
"Declarations for the tools"): the decorators, `Unavailable` and `load`. The code is in
xlgen.tools.pipeline.companion."""

from .tools.pipeline.companion import (CompanionError, Unavailable, demo, invariant, load, metrics,  # noqa: F401
                                       plot, reference, report)
