"""Progress bars for long work (the simulator's rounds, a demo's steps, a sweep's points)."""

from __future__ import annotations

import sys

import click


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int) -> None:
        pass


def progress_bar(total: int, label: str, **options):
    """A progress bar on a terminal; nothing at all otherwise (in a pipe or a log, click
    prints the bare label, which interleaves with stdout)."""
    if not sys.stderr.isatty():
        return _NoProgress()
    return click.progressbar(length=total, label=label, file=sys.stderr, **options)
