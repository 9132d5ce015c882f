"""click's own usage errors (typer's vendored click words them as English f-strings) and
pydantic's own wording come out in costctl's words, in the chosen language (issue 16, part 3)."""

from __future__ import annotations

import enum
from collections.abc import Iterator

import pytest
import typer

from costctl.cli.click_errors import click_message
from costctl.cli.translated import ClickException, CostctlTyper
from costctl.i18n import language, set_language


class By(str, enum.Enum):
    run = "run"
    day = "day"


def _app() -> CostctlTyper:
    app = CostctlTyper(name="t", add_completion=False, rich_markup_mode=None)

    @app.command("bill")
    def bill(gpu: str = typer.Argument(...), limit: int = typer.Option(10, "--limit"),
             price: float = typer.Option(1.0, "--price"), by: By = typer.Option(By.run, "--by"),
             need: str = typer.Option(..., "--need")) -> None:
        """Bill."""

    @app.command("gpus")
    def gpus() -> None:
        """GPUs."""

    return app


@pytest.fixture()
def lang() -> Iterator[None]:
    before = language()
    yield
    set_language(before)


def _error(args: list[str]) -> str:
    with pytest.raises(ClickException) as info:
        _app()(args=args, prog_name="t", standalone_mode=False)
    return click_message(info.value)


GOOD = ["bill", "a100", "--need", "x"]
CASES = [
    (["bill", "a100", "--need", "x", "--bogus"], "No such option: --bogus", "没有这个选项：--bogus"),
    (["bill", "a100", "--need", "x", "--limt", "3"], "No such option: --limt (Did you mean --limit?)",
     "没有这个选项：--limt（您是不是要用 --limit？）"),
    (["bill", "--need", "x"], "Missing argument 'gpu'.", "缺少参数 'gpu'。"),
    (["bill", "a100"], "Missing option '--need'.", "缺少选项 '--need'。"),
    ([*GOOD, "--limit"], "Option '--limit' requires an argument.", "选项 '--limit' 需要一个值。"),
    ([*GOOD, "--limit", "x"], "Invalid value for '--limit': 'x': expected a whole number",
     "'--limit' 的值无效：'x'：应为整数"),
    ([*GOOD, "--price", "cheap"], "Invalid value for '--price': 'cheap': expected a number",
     "'--price' 的值无效：'cheap'：应为数字"),
    ([*GOOD, "--by", "zzz"], "Invalid value for '--by': 'zzz' is not one of 'run', 'day'.",
     "'--by' 的值无效：'zzz' 不是 'run', 'day' 之一。"),
    ([*GOOD, "extra", "more"], "Got unexpected extra arguments: extra more", "多余的参数：extra more"),
    (["gpuz"], "No such command 'gpuz'. Did you mean 'gpus'?", "没有命令 'gpuz'。您是不是要用 'gpus'？"),
    (["zzzzzz"], "No such command 'zzzzzz'.", "没有命令 'zzzzzz'。"),
]


@pytest.mark.parametrize("args, english, chinese", CASES, ids=[c[1][:30] for c in CASES])
def test_clicks_errors_are_costctls_sentences_in_both_languages(lang, args, english, chinese) -> None:
    set_language("en")
    assert _error(args) == english
    set_language("zh_CN")
    got = _error(args)
    assert got == chinese
    assert "Input should" not in got and "Value error" not in got


def test_pydantic_types_get_costctls_wording(lang) -> None:
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    from costctl.validation import pydantic_problem

    class M(BaseModel):
        model_config = ConfigDict(extra="forbid")
        i: int = 0
        f: float = 0.0
        b: bool = False
        items: list[int] = Field(default_factory=list, max_length=2)
        t: dict[str, int] = Field(default_factory=dict)
        s: str = ""
        g: int = Field(0, gt=0)
        le: int = Field(0, le=5)

    def problem(**data) -> str:
        with pytest.raises(ValidationError) as info:
            M(**data)
        return pydantic_problem(info.value.errors()[0])

    set_language("en")
    assert problem(i="x") == "expected a whole number"
    assert problem(f="x") == "expected a number"
    assert problem(b="maybe") == "expected true or false"
    assert problem(items=5) == "expected a list"
    assert problem(items=[1, 2, 3]) == "expected at most 2 items"
    assert problem(t=3) == "expected a table of keys and values"
    assert problem(s=3) == "expected text"
    assert problem(g=0) == "expected a number greater than 0"
    assert problem(le=9) == "expected a number of at most 5"
    assert problem(zz=1) == "not a known key"
    set_language("zh_CN")
    assert problem(i="x") == "应为整数"
    assert problem(b="maybe") == "应为 true 或 false"
    assert problem(g=0) == "应为大于 0 的数字"
