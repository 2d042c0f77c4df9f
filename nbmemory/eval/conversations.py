"""LoCoMo-style conversations (Maharana et al., ACL 2024) as agent memory: the file's turns and
questions, and turn-level retrieval metrics from ``pytrec_eval``.

The file is a list of conversations, each with ``sample_id``, ``conversation`` (``speaker_a``,
``speaker_b``, ``session_N`` lists of turns ``{speaker, dia_id, text, [blip_caption]}`` and
``session_N_date_time``) and ``qa`` (``question``, ``evidence``: turn ids, ``category`` 1-5).
``bench/quality/conversations.py`` stores each turn as an agent would and runs the questions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytrec_eval

#: Turns scored per question.
K = 10
_TURN = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    conversation: str
    dia_id: str
    speaker: str
    text: str
    heading: str
    at: datetime | None


@dataclass(frozen=True)
class Question:
    qid: str
    conversation: str
    text: str
    category: int
    evidence: tuple[str, ...]


def parse_evidence(entries: list[str]) -> tuple[str, ...]:
    """Turn ids of a question's evidence: ``"D8:6; D9:17"`` and ``"D9:1 D4:4"`` split, ``"D:11:26"`` read as ``D11:26``."""
    out: list[str] = []
    for entry in entries:
        for part in re.split(r"[;,\s]+", entry.strip()):
            part = part.replace("D:", "D")
            match = _TURN.fullmatch(part)
            if match:
                out.append(f"D{int(match.group(1))}:{int(match.group(2))}")
    return tuple(dict.fromkeys(out))


def session_time(text: str) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` as a datetime (None when it does not parse)."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return None


def load(path: Path) -> tuple[list[Turn], list[Question]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    turns: list[Turn] = []
    questions: list[Question] = []
    for conv in data:
        cid = conv["sample_id"]
        body = conv["conversation"]
        sessions = sorted(
            (int(m.group(1)), key) for key in body if (m := re.fullmatch(r"session_(\d+)", key))
        )
        for number, key in sessions:
            when = body.get(f"{key}_date_time", "")
            for turn in body[key]:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                turns.append(
                    Turn(cid, turn["dia_id"], turn["speaker"], text, f"Session {number}, {when}", session_time(when))
                )
        for n, qa in enumerate(conv["qa"]):
            evidence = parse_evidence(qa.get("evidence", []))
            questions.append(Question(f"{cid}/{n}", cid, qa["question"], int(qa["category"]), evidence))
    return turns, questions


def evaluate(ranked: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """Per question: ``recall_any@1/5/10`` (trec_eval's ``success``), ``recall_all@5``
    (``recall@5 == 1``) and ``mrr@10`` (``recip_rank`` of the run cut to :data:`K`)."""
    run = {q: {d: 1.0 / r for r, d in enumerate(docs[:K], start=1)} for q, docs in ranked.items()}
    run = {q: docs if docs else {"__none__": 0.0} for q, docs in run.items()}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"success.1,5,10", "recall.5", "recip_rank"}).evaluate(run)
    return {
        q: {
            "recall_any@1": s["success_1"],
            "recall_any@5": s["success_5"],
            "recall_any@10": s["success_10"],
            "recall_all@5": 1.0 if s["recall_5"] >= 1.0 - 1e-9 else 0.0,
            "mrr@10": s["recip_rank"],
        }
        for q, s in scores.items()
    }
