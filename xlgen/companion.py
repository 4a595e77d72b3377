"""`xlgen.companion`, what a pipeline's companion module imports (docs/language.md,
"Declarations for the tools"): the decorators and `Unavailable`. The code is in
xlgen.tools.pipeline.companion."""

from .tools.pipeline.companion import (CompanionError, Unavailable, invariant, load, metrics, plot,  # noqa: F401
                              reference, report)
