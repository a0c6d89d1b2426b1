"""The raw bytes of each item of one top-level array in a large JSON document, read in chunks.

A whole-document log (an Inspect `.json` log) keeps its samples in one array under a top-level key.
This finds that array and hands out each of its items' bytes one at a time, so each is parsed and
checked like a JSONL line (`limits.parse_json`: its size, encoding and depth) and memory stays one
chunk plus one item whatever the file's size. The structure is read with numpy over each chunk
(strings masked, brackets counted), as `limits.json_depth` reads one record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from evalrx.interop.errors import ImportFormatError
from evalrx.interop.limits import ImportLimits, check_size

CHUNK = 1 << 20  # bytes scanned at once: its numpy temporaries are a few times this
_OPEN = (0x5B, 0x7B)  # [ {
_CLOSE = (0x5D, 0x7D)  # ] }
_BETWEEN_ITEMS = frozenset(b" \t\r\n,")


def array_items(path: Path, key: str, limits: ImportLimits, what: str = "item") -> Iterator[tuple]:
    """`(bytes, depth)` of each object of the array at the document's top-level `key`, in order: its
    text and how deep it nests (as `limits.json_depth` counts, found by the same scan).

    Raises:
        RecordTooLargeError: an item over the record limit (said before it is all read).
        ImportFormatError: no such array, a non-object item, or the file ends inside the array.
    """
    import numpy as np

    state = _Scan()
    pending = b""  # a run of backslashes at a chunk's end waits for the next chunk (an escape may span them)
    with path.open("rb") as fh:
        while True:
            raw = fh.read(CHUNK)
            data = pending + raw
            if not raw:
                cut = len(data)
            else:
                cut = len(data.rstrip(b"\\"))
            chunk, pending = data[:cut], data[cut:]
            if chunk:
                yield from state.feed(np, chunk, key, path, limits, what)
            if not raw or state.phase == "after":  # what follows the array is not read
                break
    if state.phase == "before":
        raise ImportFormatError(path, 1, f"no top-level `{key}` array")
    if state.phase != "after":
        where = f"{what} {state.index}" if state.phase == "item" else f"after {what} {state.index - 1}"
        raise ImportFormatError(path, where, "the file ends here: was it cut off while it was written?")


class _Scan:
    """What the scan knows between chunks: depth, whether it is inside a string, and where it is."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = 0
        self.phase = "before"  # before the array, "array" between items, "item" inside one, "after" it
        self.index = 0  # the item being read
        self.parts: list = []
        self.size = 0
        self.peak = 0  # the deepest the scan went inside the item being read
        self.tail = b""  # the previous chunk's last bytes: a key may end there and its array open here
        self.lines = 0  # newlines in the chunks before, for an error's line number

    def feed(self, np, chunk: bytes, key: str, path: Path, limits: ImportLimits, what: str) -> Iterator[tuple]:
        tail, self.tail = self.tail, (self.tail + chunk)[-256:]
        text = chunk.replace(b"\\\\", b"__").replace(b'\\"', b"__")  # escapes out of the way, lengths kept
        a = np.frombuffer(text, dtype=np.uint8)
        quotes = np.cumsum(a == 0x22, dtype=np.uint8) + np.uint8(self.in_string)  # parity survives wrap-around
        inside = (quotes & 1).astype(bool)  # an opening quote counts as inside, a closing one as outside
        self.in_string = int(quotes[-1] & 1)
        # Two comparisons each: np.isin sorts its inputs and cost several times as much on a 1 MB chunk.
        step = ((a == _OPEN[0]) | (a == _OPEN[1])).astype(np.int8) - ((a == _CLOSE[0]) | (a == _CLOSE[1]))
        step[inside] = 0
        after = np.cumsum(step, dtype=np.int32) + np.int32(self.depth)  # the depth after each byte
        self.depth = int(after[-1])
        # The brackets that can matter, in order: those that open to depth 3 or less (the document, the
        # array, an item) and those that close to depth 2 or less (an item, the array); the many inside
        # an item are skipped here rather than one by one in Python.
        marks = np.flatnonzero(((step == 1) & (after <= 3)) | ((step == -1) & (after <= 2)))
        pos = 0  # where the unread part of this chunk starts
        for m in marks.tolist():
            d = int(after[m])
            if self.phase == "before":
                if d == 2 and step[m] == 1 and a[m] == 0x5B and _key_before(tail + chunk, len(tail) + m) == key:
                    self.phase, pos = "array", m + 1
            elif self.phase == "array":
                if step[m] == 1:  # an item opens (depth 3)
                    self._between(chunk[pos:m], path, what)
                    if a[m] != 0x7B:
                        raise ImportFormatError(path, f"{what} {self.index}", "not a JSON object")
                    self.phase, pos, self.parts, self.size, self.peak = "item", m, [], 0, 0
                elif d == 1:  # the array closes
                    self._between(chunk[pos:m], path, what)
                    self._closes(chunk, m, 0x5D, path)
                    self.phase = "after"
                    return
            elif self.phase == "item" and d == 2:  # the item's closing brace
                self._closes(chunk, m, 0x7D, path)
                piece = chunk[pos : m + 1]
                self.size += len(piece)
                check_size(self.size, path, f"{what} {self.index}", limits, what=what)
                self.peak = max(self.peak, int(after[pos : m + 1].max()))
                self.parts.append(piece)
                yield b"".join(self.parts), self.peak - 2  # the item's own `{` is depth 1
                self.parts, self.size = [], 0
                self.index += 1
                self.phase, pos = "array", m + 1
        self.lines += chunk.count(b"\n")
        if self.phase == "item":
            piece = chunk[pos:]
            self.size += len(piece)
            check_size(self.size, path, f"{what} {self.index}", limits, what=f"{what} (at least)")
            if piece:
                self.peak = max(self.peak, int(after[pos:].max()))
            self.parts.append(piece)
        elif self.phase == "array":
            self._between(chunk[pos:], path, what)

    def _closes(self, chunk: bytes, at: int, want: int, path: Path) -> None:
        """The bracket at `at` must close what it closes (`]` an array, `}` an object)."""
        if chunk[at] != want:
            line = self.lines + chunk.count(b"\n", 0, at) + 1
            raise ImportFormatError(path, line, f"not valid JSON ({chr(chunk[at])!r} where {chr(want)!r} closes)")

    def _between(self, gap: bytes, path: Path, what: str) -> None:
        """Between items only commas and spaces are allowed (a string, number or null is not a sample)."""
        if gap.strip(bytes(_BETWEEN_ITEMS)):
            raise ImportFormatError(path, f"{what} {self.index}", "not a JSON object")


def _key_before(chunk: bytes, at: int) -> str:
    """The object key a value at `at` belongs to (`"key": [`), read back from `at`; "" when none is there."""
    head = chunk[max(0, at - 256) : at].rstrip()
    if not head.endswith(b":"):
        return ""
    head = head[:-1].rstrip()
    if not head.endswith(b'"'):
        return ""
    start = head.rfind(b'"', 0, len(head) - 1)
    return head[start + 1 : -1].decode("utf-8", "replace") if start >= 0 else ""


__all__ = ["array_items"]
