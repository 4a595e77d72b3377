"""xlgen: compile .xl inference pipelines to a CUDA persistent mega-kernel and a bit-exact Python simulator."""

__version__ = "0.1.0"
