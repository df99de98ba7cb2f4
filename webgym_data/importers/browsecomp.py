"""BrowseComp (OpenAI simple-evals): 1,266 hard browsing questions with short answers.

CSV columns ``problem, answer, problem_topic, canary``. `problem` and `answer` are encrypted: base64
of the text XOR-ed with a key stream that is the SHA-256 digest of the row's `canary` repeated.
They are decrypted in memory only; the canary asks that the plain text never appears online, so
never commit or publish an unencrypted copy. ``answer`` becomes `definite_answer`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from itertools import cycle
from typing import Any

from webgym_data.importers._base import SEARCH_START_URL, SeedImporter, optional_text, require_text
from webgym_data.schema import Task, TaskValidationError

__all__ = ["BrowseCompImporter", "decrypt", "encrypt"]


def _xor(data: bytes, password: str) -> bytes:
    key = hashlib.sha256(password.encode("utf-8")).digest()
    return bytes(a ^ b for a, b in zip(data, cycle(key), strict=False))


def encrypt(plaintext: str, password: str) -> str:
    """The BrowseComp encoding of `plaintext` (for tests and round trips)."""
    return base64.b64encode(_xor(plaintext.encode("utf-8"), password)).decode("ascii")


def decrypt(ciphertext: str, password: str) -> str:
    """Decode a BrowseComp cell; `TaskValidationError` (a ValueError) when it is not base64 or not
    text under this password."""
    try:
        raw = base64.b64decode(ciphertext, validate=True)
    except binascii.Error as exc:
        raise TaskValidationError(f"not base64 ({exc})") from None
    try:
        return _xor(raw, password).decode("utf-8")
    except UnicodeDecodeError:
        raise TaskValidationError("does not decrypt to text with this row's canary") from None


class BrowseCompImporter(SeedImporter):
    name = "browsecomp"
    benchmark_name = "browsecomp"
    # Not on the Hub: https://openaipublic.blob.core.windows.net/simple-evals/browse_comp_test_set.csv
    hub_id = None
    license_id = "mit"
    license_note = "its canary asks that questions and answers never appear as plain text online"
    home_url = "https://openaipublic.blob.core.windows.net/simple-evals/browse_comp_test_set.csv"
    default_paths = ("browsecomp", "browse_comp")
    upstream_files = ("browse_comp_test_set.csv",)
    folder_files = ("browse_comp*.csv",)

    def convert(self, record: Mapping[str, Any], *, file: str, row: int) -> Task:
        require_text(record, "canary", file=file, row=row)
        canary = record["canary"]  # as written: the key is a hash of the exact string
        plain = {}
        for name in ("problem", "answer"):
            try:
                plain[name] = decrypt(require_text(record, name, file=file, row=row), canary)
            except ValueError as exc:
                raise TaskValidationError(str(exc), file=file, row=row, field=name) from None
            if not plain[name].strip():
                raise TaskValidationError("decrypts to an empty string", file=file, row=row, field=name)
        return self.make_task(
            file=file, row=row, task_name=plain["problem"], task_name_field="problem",
            website=SEARCH_START_URL,
            definite_answer=plain["answer"].strip(),
            metadata={"problem_topic": optional_text(record, "problem_topic")},
        )
