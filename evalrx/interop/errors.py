"""What an import raises: one line naming the file, where in it, and the problem.

Every error here is a `ValueError`, so the CLI prints it as one line (no traceback).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalrx.core import one_line


class ImportFormatError(ValueError):
    """A file that cannot be imported; the message names the file, the line and the problem."""

    def __init__(self, path: "str | Path", line: Any, problem: str) -> None:
        problem = one_line(problem)  # a library's message (pyarrow's, a parser's pointer) may run over lines
        self.path, self.line, self.problem = str(path), line, problem
        where = f"line {line}" if isinstance(line, int) else one_line(line)
        super().__init__(f"{path}: {where}: {problem}")


class RecordTooLargeError(ImportFormatError):
    """One record (a JSONL line, a log sample, a whole JSON document) is over the size limit."""


class NestingTooDeepError(ImportFormatError):
    """JSON nested deeper than the limit (which would otherwise end in a RecursionError)."""


class EncodingError(ImportFormatError):
    """Bytes that are not UTF-8 (a UTF-16 file, Latin-1 text)."""


class UnknownFormatError(ImportFormatError):
    """A file whose content matches none of the formats evalrx reads."""
