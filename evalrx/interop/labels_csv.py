"""The current human labels alone, as CSV (for spreadsheets and label tools)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Optional, Sequence

from evalrx import store as S
from evalrx.interop.files import write_lines


def export_labels_csv(
    path: "str | Path",
    *,
    run_id: Optional[int] = None,
    trajectory_ids: Optional[Sequence[int]] = None,
    store: "S.Store | str | None" = None,
) -> int:
    """The current labels alone (of a run, or of chosen trajectories) as CSV; returns the rows written."""
    rows = S.current_label_rows(run_id=run_id, trajectory_ids=trajectory_ids, store=store)
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(S.LABEL_COLUMNS)
    for r in rows:  # a leading = + - @ would be read as a formula by spreadsheets: quote it inert
        out.writerow(["'" + v if isinstance(v, str) and v[:1] in "=+-@" else v for v in r])
    write_lines(Path(path), [buf.getvalue().rstrip("\n")])
    return len(rows)
