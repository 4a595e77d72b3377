"""Source locations and diagnostics: `file:line:col: error: message`, the line, a caret."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        if self.line < 1:  # the file as a whole (it cannot be read)
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


NOWHERE = Loc("<builtin>", 0, 0)


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning" | "note"
    loc: Loc
    message: str

    def render(self, sources: dict[str, str] | None = None) -> str:
        head = f"{self.loc}: {self.severity}: {self.message}"
        text = (sources or {}).get(self.loc.file)
        if text is None or self.loc.line < 1:
            return head
        lines = text.split("\n")  # as the lexer counts lines (splitlines() also splits at \f, \x1c, ...)
        if self.loc.line > len(lines):
            return head
        raw = lines[self.loc.line - 1].rstrip("\r")
        src = raw.expandtabs(4)
        caret = " " * len(raw[: max(self.loc.col - 1, 0)].expandtabs(4)) + "^"  # tabs widen the line
        return f"{head}\n    {src}\n    {caret}"


class CompileError(Exception):
    """Raised when compilation stops; carries every diagnostic collected so far."""

    def __init__(self, diagnostics: list[Diagnostic], sources: dict[str, str]):
        super().__init__(f"{sum(d.severity == 'error' for d in diagnostics)} error(s)")
        self.diagnostics = diagnostics
        self.sources = sources

    def render(self) -> str:
        return render_all(self.diagnostics, self.sources)


def render_all(diagnostics: list[Diagnostic], sources: dict[str, str]) -> str:
    ordered = sorted(diagnostics, key=lambda d: (d.loc.file, d.loc.line, d.loc.col))
    body = "\n".join(d.render(sources) for d in ordered)
    errors = sum(d.severity == "error" for d in diagnostics)
    warnings = sum(d.severity == "warning" for d in diagnostics)
    summary = []
    if errors:
        summary.append(f"{errors} error{'s' if errors != 1 else ''}")
    if warnings:
        summary.append(f"{warnings} warning{'s' if warnings != 1 else ''}")
    return body + ("\n" + ", ".join(summary) + " generated." if summary else "")


@dataclass
class DiagnosticSink:
    """Collects diagnostics so the checker can report every error at once."""

    items: list[Diagnostic] = field(default_factory=list)

    def error(self, loc: Loc, message: str) -> None:
        self.items.append(Diagnostic("error", loc, message))

    def warning(self, loc: Loc, message: str) -> None:
        self.items.append(Diagnostic("warning", loc, message))

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)


def did_you_mean(name: str, candidates) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
