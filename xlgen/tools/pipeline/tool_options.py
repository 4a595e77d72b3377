"""What `xlgen sim`, `diff` and `run` do with a pipeline's declarations and companion:
the `--report`/`--plot` options (and their old spellings `--kv-report`/`--kv-plot`),
invariants checked every round, the reference decoder, and the metrics printed after a run.

Nothing here knows any pipeline: reports, plots, invariants and the reference come from
the companion the pipeline declares (xlgen/tools/pipeline/companion.py), metrics from its `metric`,
`output` and `progress` declarations (xlgen/tools/pipeline/metrics.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click

from ...core.files import refuse_link, write_with

from .companion import (CompanionError, Hook, InvariantChecker, Run, Unavailable, check_reference, no_companion_reason, of_program, params_by_name)


@dataclass
class Wanted:
    """The reports and plots asked for on the command line: (name, option as typed[, path])."""
    reports: list[tuple[str, str]] = field(default_factory=list)
    plots: list[tuple[str, str, Path]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reports or self.plots)


def _plot_item(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise click.UsageError(f"--plot {text!r}: expected NAME=PATH, e.g. --plot kv=kv.png")
    return name.strip(), Path(path.strip())


def wanted(reports=(), plots=(), kv_report: bool = False, kv_plot=None) -> Wanted:
    """--report NAME (repeatable), --plot NAME=PATH (repeatable), and the old spellings of the
    bundled pipeline's report and plot: --kv-report (--report kv), --kv-plot PATH (--plot kv=PATH)."""
    w = Wanted()
    w.reports = [(name.strip(), "--report") for name in reports]
    if kv_report:
        w.reports.append(("kv", "--kv-report"))
    for item in plots:
        name, path = _plot_item(item)
        w.plots.append((name, "--plot", path))
    if kv_plot is not None:
        w.plots.append(("kv", "--kv-plot", Path(kv_plot)))
    return w


def check_wanted(compiled, module, workload, want: Wanted, check_output_path) -> None:
    """Before the run: every report and plot asked for exists, can be made with this launch
    (the companion's `check`), and every plot's path can be written. Usage errors otherwise."""
    if not want:
        return
    program = compiled.program
    params = params_by_name(module, workload.params)
    for kind, items in (("report", want.reports), ("plot", want.plots)):
        for name, option, *rest in items:
            why = no_companion_reason(program, kind, name)
            if why is None:
                companion = of_program(program)
                check = companion.named(kind, name).options.get("check")
                if check is not None:
                    why = companion.call(Hook(f"{kind} check", name, check), program, params)
            if why:
                label = option if option != "--plot" and option != "--report" else f"{option} {name}"
                raise click.UsageError(f"{label}: {why}")
            if rest:
                check_output_path(rest[0], option)
                refuse_link(rest[0])  # written atomically after the run, never through a link


def produce(compiled, module, workload, result, want: Wanted) -> None:
    """After the run: print each report, write each plot (one line saying why when it has nothing)."""
    if not want:
        return
    companion = of_program(compiled.program)
    run = make_run(compiled, module, workload, result)
    for name, option in want.reports:
        try:
            click.echo(companion.call(companion.named("report", name), run))
        except Unavailable as why:
            click.echo(f"report {name}: {why}")
    for name, option, path in want.plots:
        try:  # into a temporary file beside PATH, then renamed: never through a link
            write_with(path, lambda tmp: companion.call(companion.named("plot", name), run, tmp))
        except Unavailable as why:
            click.echo(f"plot {name}: {why}; no plot written")
            continue
        except CompanionError as exc:
            if "ModuleNotFoundError" in exc.message and "matplotlib" in exc.message:
                raise click.UsageError(f"{option}: plots need matplotlib (pip install matplotlib)") from None
            raise
        click.echo(f"wrote {path}")


def make_run(compiled, module, workload, result) -> Run:
    return Run(compiled.program, result, params_by_name(module, workload.params), workload.name)


def invariant_checker(compiled, module, workload, enabled: bool = True) -> InvariantChecker | None:
    """The companion's invariants for this launch, or None (no companion, none declared, or off)."""
    companion = of_program(compiled.program) if enabled else None
    if companion is None or not companion.of("invariant"):
        return None
    return InvariantChecker(companion, compiled.program, params_by_name(module, workload.params))


def finish_invariants(checker: InvariantChecker | None, runs) -> bool:
    """End-of-run invariants on each run; prints a line, or the violations. True when all held."""
    if checker is None:
        return True
    for run in runs:
        checker.after_run(run)
    if checker.count:
        click.echo(checker.render())
        return False
    names = ", ".join(h.name for h in checker.companion.of("invariant"))
    click.echo(f"invariants hold ({names}; {checker.rounds_checked} rounds checked)")
    return True


def reference_check(compiled, run: Run) -> bool:
    """The companion's @reference against every finished request's output. True when all equal
    (or there is no reference)."""
    companion = of_program(compiled.program)
    if companion is None or not companion.of("reference") or compiled.program.tooling.output is None:
        return True
    checked, problems = check_reference(companion, run)
    name = companion.of("reference")[0].name
    if problems:
        click.echo(f"output differs from the reference '{name}':")
        for p in problems:
            click.echo(f"  {p}")
        return False
    click.echo(f"output equals the reference '{name}' for all {checked} finished requests")
    return True


def metrics_text(compiled, module, workload, result, max_active: int, stamps=None) -> str:
    """The metrics block printed after a run (empty when there is nothing beyond the summary)."""
    from .metrics import collect_metrics, format_metrics

    values = collect_metrics(compiled.program, result, max_active, make_run(compiled, module, workload, result),
                             stamps)
    if not values:
        return ""
    return "metrics:\n" + format_metrics(compiled.program, values)


# The options themselves (cli.py puts them on sim and run).
REPORT_OPTIONS = [
    click.option("--report", "reports", multiple=True, metavar="NAME",
                 help="After the run, print the report NAME of the pipeline's companion module (repeatable); "
                      "the bundled pipeline's: kv."),
    click.option("--plot", "plots", multiple=True, metavar="NAME=PATH",
                 help="After the run, write the plot NAME of the pipeline's companion to PATH (repeatable); "
                      "the bundled pipeline's: kv, block_sizes."),
    click.option("--kv-report", "kv_report", is_flag=True, hidden=False,
                 help="The same as --report kv (the bundled pipeline's KV residency report)."),
    click.option("--kv-plot", "kv_plot", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 metavar="PATH", help="The same as --plot kv=PATH (the bundled pipeline's KV occupancy plot)."),
]

INVARIANTS_OPTION = click.option(
    "--invariants/--no-invariants", "check_invariants", default=True, show_default=True,
    help="Check the invariants of the pipeline's companion module after every simulator round and "
         "after the run (a violation names round and request; exit code 1).")


def report_options(fn):
    for option in reversed(REPORT_OPTIONS):
        fn = option(fn)
    return fn
