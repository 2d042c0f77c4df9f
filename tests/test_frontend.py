"""What the front ends share: option specs applied to argparse and to magics, the JSON encoder."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pytest
from IPython.core.magic_arguments import magic_arguments, parse_argstring

from nbmemory import Memory, options
from nbmemory.errors import NbMemoryError
from nbmemory.options import (
    TUNE_OPTIONS,
    Option,
    filter_options,
    magic_options,
    search_filters,
    to_jsonable,
    tune_options,
)
from nbmemory.search.filters import KINDS
from nbmemory.tune.run import TuneOptions


def parser_with(*options: Option) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for option in options:
        option.add_to(parser)
    return parser


def test_option_names_are_argparse_dests() -> None:
    parser = parser_with(
        Option("query"), Option("-k", type=int), Option("-q", "--quiet", action="store_true")
    )
    dests = {a.dest for a in parser._actions}
    assert {o.name for o in (Option("query"), Option("-k"), Option("-q", "--quiet"))} <= dests
    assert Option("--max-seq-length").name == "max_seq_length"
    assert Option("--model", dest="eval_model").name == "eval_model"


def test_the_kind_filter_is_built_from_the_one_kinds() -> None:
    kind = next(o for o in filter_options() if o.name == "kind")
    assert kind.choices == KINDS and kind.repeatable
    assert all(k in (kind.help or "") for k in KINDS)
    assert "(default: MemoryMagics.namespace" in (filter_options("MemoryMagics.namespace")[0].help or "")


def test_filters_parse_the_same_on_the_command_line_and_in_a_magic() -> None:
    line = "--ns work --kind code --kind memory --tag a --tag b --since 30d --path '*.md' --speaker Caroline"

    @magic_arguments()
    @magic_options(*filter_options(), group="filters")
    def magic(line: str) -> None: ...

    from_cli = search_filters(vars(parser_with(*filter_options()).parse_args(line.replace("'", "").split())))
    from_magic = search_filters(vars(parse_argstring(magic, line.replace("'", ""))))
    assert (
        from_cli
        == from_magic
        == {
            "namespace": "work",
            "kind": ["code", "memory"],
            "path": "*.md",
            "tags": ["a", "b"],
            "since": "30d",
            "until": None,
            "speaker": "Caroline",
            "conversation": None,
        }
    )
    # The magic lists its options in the declared order.
    assert [a.dest for a in magic.parser._actions if a.dest != "help"] == [o.name for o in filter_options()]
    with pytest.raises(SystemExit):
        parser_with(*filter_options()).parse_args(["--kind", "video"])


def test_tune_option_defaults_are_the_defaults_of_a_tuning_run() -> None:
    values = vars(parser_with(*TUNE_OPTIONS).parse_args([]))
    assert tune_options(values) == TuneOptions()
    options = tune_options(
        vars(
            parser_with(*TUNE_OPTIONS).parse_args(["--query-source", "title, first_sentence", "--lr", "1e-4"])
        ),
        namespace="work",
    )
    assert options.sources == ("title", "first_sentence") and options.train.learning_rate == 1e-4
    assert options.namespace == "work"


@dataclass
class Row:
    when: datetime
    tags: tuple[str, ...]
    score: np.float32


def test_one_encoder_plain_and_tagged() -> None:
    row = Row(datetime(2026, 1, 31, 12, 0), ("a",), np.float32(0.5))
    plain = json.loads(json.dumps(row, default=to_jsonable))
    assert plain == {"when": "2026-01-31T12:00:00", "tags": ["a"], "score": 0.5}
    tagged = json.loads(json.dumps(row, default=lambda v: to_jsonable(v, tagged=True)))
    assert tagged == {
        "__type__": "Row",
        "when": {"__dt__": "2026-01-31T12:00:00"},
        "tags": ["a"],
        "score": 0.5,
    }
    assert json.loads(json.dumps({1, 2}, default=to_jsonable)) in ([1, 2], [2, 1])
    with pytest.raises(TypeError, match="cannot encode object as JSON"):
        json.dumps(object(), default=to_jsonable)
    with pytest.raises(TypeError, match="cannot send object over the wire"):
        json.dumps(object(), default=lambda v: to_jsonable(v, tagged=True))


def test_owned_memory_names_the_busy_file(fake_mem: Memory) -> None:
    assert options.local_memory(fake_mem) is fake_mem
    assert options.owned_memory(fake_mem, "busy") is fake_mem

    class Client:
        memory = None

    assert options.local_memory(Client()) is None
    with pytest.raises(NbMemoryError, match="open elsewhere"):
        options.owned_memory(Client(), "open elsewhere")
