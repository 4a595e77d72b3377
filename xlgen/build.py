"""`xlgen.build`, the public entry point for loading a pipeline: kept here, as it was;
the code is in xlgen.backends.build."""

from .backends.build import Compiled, load, load_text, render  # noqa: F401
