"""A JSONL seed file read by columns: Arrow's JSON reader, with the rows it might read differently
from `json.loads` left to the per-row path.

`read_jsonl_columns(path)` gives a `JsonlColumns` (an Arrow table, one row per non-blank line,
numbered as `webgym_data.importers._base.read_records` numbers them) or None when the file must be
read row by row. Arrow parses a 150 MB file in about a second where `json.loads` per line takes
several; an importer that converts the columns (`GenericImporter`) still hands any row it cannot
convert from its column values to the per-row path, through `JsonlColumns.record`.

None (read row by row, which names the file, line and field of a fault) when Arrow would not read
the file as `json.loads` reads each line:

- Arrow refuses it (a line that is not JSON, a field whose type changes between rows, a duplicate
  key, a lone surrogate escape, a line longer than the reader's blocks);
- a byte-order mark (Arrow skips it, `json.loads` refuses it);
- a line that does not hold one object: a line of ``null`` reads as a row of nulls in Arrow (and a
  file of that line alone crashes pyarrow 26), two objects on one line as two rows;
- text that is not UTF-8, or an array Arrow built wrong (seen in pyarrow 26: a list of text
  starting with a null, inside a list of objects): the table is validated in full;
- an infinite or NaN number (an integer too long for `json.loads` reads as infinite in Arrow).

Values Arrow reads as types other than JSON's (a number too large for 64 bits as a float, an ISO
date as a timestamp) are the converting importer's to refuse: it trusts a column by its type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webgym_data.errors import TaskValidationError
from webgym_data.importers._base import json_problem

__all__ = ["JsonlColumns", "read_jsonl_columns"]

_BLOCK_BYTES = 4 << 20
"""Bytes Arrow parses at a time (its threads split the file in such blocks); at least twice the
longest line, since a line never straddles two blocks."""
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class JsonlColumns:
    """The rows of a JSONL file as an Arrow table, and each row's line for the per-row path."""

    path: Path
    table: Any
    """A ``pyarrow.Table``: one row per non-blank line, in file order."""
    lines: tuple[bytes, ...]
    """The non-blank lines, row by row."""

    def record(self, row: int) -> Any:
        """Row `row` as `json.loads` reads its line (what the per-row path converts); JSON it
        cannot read (nested deeper than Python recurses) is the per-row reader's error."""
        try:
            return json.loads(self.lines[row].decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            raise TaskValidationError(f"invalid JSON on line {self._line_number(row)}: {json_problem(exc)}",
                                      file=str(self.path), row=row) from None

    def _line_number(self, row: int) -> int:
        """The 1-based line of row `row` (blank lines hold no row)."""
        seen = -1
        for number, line in enumerate(self.path.read_bytes().splitlines(), start=1):
            seen += bool(line.strip())
            if seen == row:
                return number
        raise IndexError(row)


def read_jsonl_columns(path: Path) -> JsonlColumns | None:
    """`path` read by columns, or None when it must be read row by row (see the module docstring)."""
    import pyarrow as pa  # optional: pyarrow
    import pyarrow.json as paj  # optional: pyarrow

    try:
        data = Path(path).read_bytes()
    except OSError:
        return None  # the per-row reader reports it
    if data.startswith(_BOM):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    # bytes.splitlines splits where a text-mode file does (\n, \r\n, \r), so rows number the same.
    lines = tuple(line for line in data.splitlines() if line.strip())
    if not lines or not all(line.lstrip()[:1] == b"{" and line.rstrip()[-1:] == b"}" for line in lines):
        return None
    block = max(_BLOCK_BYTES, 2 * max(map(len, lines)) + 2)
    try:
        table = paj.read_json(pa.BufferReader(data), read_options=paj.ReadOptions(block_size=block))
        # pyarrow 26 can build an invalid array (a list whose first item is null, then text, inside
        # a list of objects: list offsets past the values), which would read as garbage or crash.
        table.validate(full=True)
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(lines):  # some line held more than one value
        return None
    if not all(_finite(column) for column in table.columns):
        return None
    return JsonlColumns(path=Path(path), table=table, lines=lines)


def _finite(array: Any) -> bool:
    """No infinite or NaN float anywhere in `array` (nested values too). Arrow reads an integer of
    more digits than `json.loads` converts (4,300) as an infinite float; the per-row path refuses the
    line naming it."""
    import pyarrow as pa  # optional: pyarrow
    import pyarrow.compute as pc  # optional: pyarrow

    if isinstance(array, pa.ChunkedArray):
        return all(_finite(chunk) for chunk in array.chunks)
    kind = array.type
    if pa.types.is_floating(kind):
        return pc.all(pc.is_finite(array)).as_py() is not False
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _finite(array.flatten())
    if pa.types.is_struct(kind):
        return all(_finite(child) for child in array.flatten())
    return True
