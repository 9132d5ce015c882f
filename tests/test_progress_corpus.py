"""The live LineParser on real console logs from shared/corpus, fed as a pipe would deliver
them (whole, and in small odd-sized chunks): the facts SOURCES.md states for each file."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest

from costctl.progress import LineParser
from costctl.records import ProgressPoint

from replay_support import corpus_file

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _parse(name: str, chunk: int | None) -> list[ProgressPoint]:
    text = corpus_file(name).read_bytes().decode("utf-8", errors="replace")
    parser = LineParser()
    if chunk is None:
        points = parser.feed(text, T0)
    else:
        points = [p for i in range(0, len(text), chunk) for p in parser.feed(text[i : i + chunk], T0)]
    return points + parser.flush(T0)


def _split(points: list[ProgressPoint]) -> tuple[list[ProgressPoint], list[ProgressPoint]]:
    return [p for p in points if p.kind == "train"], [p for p in points if p.kind == "eval"]


def _min(points: list[ProgressPoint]) -> ProgressPoint:
    return min((p for p in points if p.finite), key=lambda p: p.value)


CHUNKS = [None, 1, 7, 4093]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_hf_cpt_console_crlf_and_tqdm(chunk: int | None) -> None:
    train, evals = _split(_parse("hf_stdout_cpt_cmd.txt", chunk))
    assert len(train) == 10 and len(evals) == 10
    assert [p.epoch for p in train] == [0.91, 1.82, 2.73, 3.64, 4.55, 5.46, 6.38, 7.29, 8.2, 9.11]
    assert (train[0].value, train[-1].value, _min(train).value) == (1.1409, 0.2645, 0.2645)
    assert [p.epoch for p in evals] == [float(e) for e in range(1, 11)]
    assert round(evals[0].value, 4) == 0.6598 and round(evals[-1].value, 4) == 0.4917
    best = _min(evals)
    assert (round(best.value, 4), best.epoch) == (0.4853, 6.0)
    assert {p.name for p in train} == {"loss"} and {p.name for p in evals} == {"eval_loss"}
    # the summary dict (train_loss 0.4479) and the "train metrics" block are not progress
    assert all(round(p.value, 4) != 0.4479 for p in train + evals)
    assert all(p.time == T0 for p in train + evals)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_hf_slurm_bert_sst2(chunk: int | None) -> None:
    train, evals = _split(_parse("hf_stdout_slurm_bert_sst2.log", chunk))
    assert len(train) == 47 and len(evals) == 4
    assert (train[0].epoch, train[-1].epoch) == (0.06, 2.99)
    assert (train[0].value, train[-1].value) == (0.6879, 0.1306)
    assert (_min(train).value, _min(train).epoch) == (0.1296, 2.29)
    assert [p.epoch for p in evals] == [0.64, 1.27, 1.91, 2.55]
    assert (round(evals[0].value, 4), round(evals[-1].value, 4)) == (0.3684, 0.3033)
    assert (round(_min(evals).value, 4), _min(evals).epoch) == (0.2884, 1.91)
    assert all(p.step is None for p in train + evals)  # the tqdm count beside the dicts is stale


@pytest.mark.parametrize("chunk", CHUNKS)
def test_keras_nan(chunk: int | None) -> None:
    train, evals = _split(_parse("keras_stdout_nan_issue.txt", chunk))
    assert len(train) == 7 and len(evals) == 7
    assert train[0].value == 0.6242 and evals[0].value == 0.5265
    assert all(math.isnan(p.value) for p in train[1:]) and len(train[1:]) == 6
    assert all(math.isnan(p.value) for p in evals[1:])
    assert [p.epoch for p in train] == [float(e) for e in range(1, 8)]  # from the "Epoch k/10" headers
    assert {p.total for p in train} == {10}


@pytest.mark.parametrize("chunk", CHUNKS)
def test_nanogpt_nan(chunk: int | None) -> None:
    train, evals = _split(_parse("nanogpt_nan_termux.log", chunk))
    assert len(train) == 91
    assert [p.step for p in train] == list(range(0, 451, 5))
    assert train[0].value == 4.2709
    assert (_min(train).value, _min(train).step) == (3.2452, 415)
    finite = [p for p in train if p.finite]
    assert (finite[-1].value, finite[-1].step) == (3.5023, 420)
    nans = [p for p in train if not p.finite]
    assert len(nans) == 6 and [p.step for p in nans] == list(range(425, 451, 5))
    assert all(math.isnan(p.value) for p in nans)
    assert [(p.step, p.value) for p in evals] == [(0, 4.2475), (100, 3.4987), (200, 3.4427), (300, 3.4254),
                                                  (400, 3.3687)]
    assert {p.name for p in evals} == {"val loss"}
