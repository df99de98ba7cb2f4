"""truth.jsonl: written line by line (a torn last line cut off), read back, and its errors named by line."""

from __future__ import annotations

import logging

import pytest

from webgym_rollout.judge.truth import TRUTH_FILE, TruthFileError, append_truth, read_truth
from webgym_sites.facts import SessionFacts, ShopFacts


def facts_of(session: str, *, cart: int = 0) -> SessionFacts:
    return SessionFacts(session_id=session, seen=True, visited=("/shop/",), shop=ShopFacts(seed=cart))


def test_truth_file_round_trip_torn_line_and_errors(tmp_path, caplog):
    append_truth(tmp_path, "e1", "t1", facts_of("s1"))
    append_truth(tmp_path, "e2", "t2", facts_of("s2"))
    append_truth(tmp_path, "e1", "t1", facts_of("s1", cart=5))  # a redone episode: the last line wins
    truth = read_truth(tmp_path)
    assert truth == {"e1": ("t1", facts_of("s1", cart=5)), "e2": ("t2", facts_of("s2"))}
    path = tmp_path / TRUTH_FILE
    with open(path, "a", encoding="utf-8") as file:  # a crash in the middle of a line
        file.write('{"episode_id": "e3", "task_id": "t3", "fac')
    with caplog.at_level(logging.WARNING, logger="webgym_rollout.judge.truth"):
        assert set(read_truth(tmp_path)) == {"e1", "e2"}
    assert "line 4: a line cut short" in caplog.text
    append_truth(tmp_path, "e4", "t4", facts_of("s4"))  # cuts the torn line off first
    assert set(read_truth(tmp_path)) == {"e1", "e2", "e4"}
    assert len(path.read_text(encoding="utf-8").splitlines()) == 4

    path.write_text('{"episode_id": "e1", "task_id": "t1", "facts": {"session_id": "s"}}\n'
                    'not json\n{"episode_id": "e2"}\n', encoding="utf-8")
    with pytest.raises(TruthFileError, match=r"truth.jsonl line 2: not JSON"):
        read_truth(tmp_path)
    path.write_text('{"episode_id": "e2", "task_id": "", "facts": {}}\n', encoding="utf-8")
    with pytest.raises(TruthFileError, match=r"line 1: task_id: expected a non-empty string"):
        read_truth(tmp_path)
    path.write_text('[1]\n{"episode_id": "e2", "task_id": "t", "facts": {}}\n', encoding="utf-8")
    with pytest.raises(TruthFileError, match=r"line 1: expected an object, got list"):
        read_truth(tmp_path)
    path.write_text('{"episode_id": "e2", "task_id": "t", "facts": {"session_id": "s", "seen": "maybe"}}\n',
                    encoding="utf-8")
    with pytest.raises(TruthFileError, match=r"line 1: facts.seen: "):
        read_truth(tmp_path)
    path.unlink()
    with pytest.raises(TruthFileError, match="no such file.*site server truth source"):
        read_truth(tmp_path)
