"""The settings model without pydantic (memory_core/settings_model.py): the rules config.py relies
on, each checked so that breaking it fails here, and its coercion against pydantic's lax mode (which
the settings model used to be; pydantic is still installed for the MCP SDK)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any, Literal, get_args

import pytest

from memory_core.config import (
    AgentsSettings,
    ChunkingSettings,
    MMRSettings,
    QuerySettings,
    RemoteSettings,
    Settings,
    load_settings,
)
from memory_core.errors import ConfigError
from memory_core.settings_model import SecretStr, ValidationError


def _error(overrides: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as exc:
        load_settings(None, overrides, env={})
    return str(exc.value)


# -- coercion, as pydantic's lax mode ------------------------------------------------------------

@pytest.mark.parametrize("given,expected", [(5, 5), (5.0, 5), ("5", 5), (" 5 ", 5), ("5.0", 5), ("+5", 5),
                                            ("1_0", 10), (True, 1)])
def test_an_int_setting_takes_whole_numbers_in_any_form(given: object, expected: int) -> None:
    got = load_settings(None, {"query": {"max_results": given}}, env={}).query.max_results
    assert got == expected and type(got) is int


@pytest.mark.parametrize("given,says", [
    (5.5, "query.max_results: Input should be a valid integer, got a number with a fractional part"),
    ("5.5", "query.max_results: Input should be a valid integer, unable to parse string as an integer"),
    ("five", "query.max_results: Input should be a valid integer, unable to parse string as an integer"),
    ("５", "query.max_results: Input should be a valid integer, unable to parse string as an integer"),
    ([5], "query.max_results: Input should be a valid integer"),
    (float("inf"), "query.max_results: Input should be a finite number"),
])
def test_an_int_setting_refuses_what_is_not_a_whole_number(given: object, says: str) -> None:
    assert _error({"query": {"max_results": given}}) == f"invalid configuration: {says}"


def test_a_float_setting_takes_ints_and_numeric_strings_but_no_inf_or_nan() -> None:
    q = load_settings(None, {"query": {"min_score": 1, "vector_weight": "0.25", "text_weight": "1e-1"}}, env={}).query
    assert (q.min_score, q.vector_weight, q.text_weight) == (1.0, 0.25, 0.1) and type(q.min_score) is float
    for bad in (float("nan"), "inf", "-Infinity"):
        assert _error({"lock": {"timeout_s": bad}}) == "invalid configuration: lock.timeout_s: Input should be a finite number"
    assert _error({"lock": {"timeout_s": "soon"}}) == ("invalid configuration: lock.timeout_s: Input should be a valid"
                                                       " number, unable to parse string as a number")


@pytest.mark.parametrize("given,expected", [("true", True), ("Off", False), ("y", True), ("0", False), (1, True),
                                            (0.0, False)])
def test_a_bool_setting_takes_the_usual_words(given: object, expected: bool) -> None:
    assert load_settings(None, {"query": {"hybrid": given}}, env={}).query.hybrid is expected


@pytest.mark.parametrize("given,says", [(2, "Input should be a valid boolean, unable to interpret input"),
                                        (" true", "Input should be a valid boolean, unable to interpret input"),
                                        (0.5, "Input should be a valid boolean"),
                                        ([], "Input should be a valid boolean")])
def test_a_bool_setting_refuses_other_values(given: object, says: str) -> None:
    assert _error({"query": {"hybrid": given}}) == f"invalid configuration: query.hybrid: {says}"


def test_a_string_setting_is_never_a_number_and_paths_are_paths() -> None:
    assert _error({"model": 3}) == "invalid configuration: model: Input should be a valid string"
    assert _error({"workspace": 3}) == ("invalid configuration: workspace: Input is not a valid path for"
                                        " <class 'pathlib.Path'>")
    s = load_settings(None, {"workspace": "/tmp/ws", "sessions": {"dir": "logs"}, "remote": {"api_key": "k"}}, env={})
    assert s.workspace == Path("/tmp/ws") and s.sessions.dir == Path("logs")
    assert isinstance(s.remote.api_key, SecretStr)


def test_lists_tuples_and_tables_are_checked_item_by_item() -> None:
    s = load_settings(None, {"sources": ("sessions", "memory", "sessions"), "query": {"vector_calibration": ["0.1", 1]}},
                      env={})
    assert s.sources == ["sessions", "memory"] and s.query.vector_calibration == (0.1, 1.0)
    assert _error({"sources": "memory"}) == "invalid configuration: sources: Input should be a valid list"
    assert _error({"sources": ["memory", "notes"]}) == ("invalid configuration: sources.1: Input should be 'memory' or"
                                                        " 'sessions'")
    assert _error({"query": {"vector_calibration": [0.1]}}) == ("invalid configuration: query.vector_calibration.1:"
                                                                 " Field required")
    assert _error({"query": {"vector_calibration": [0.1, 0.2, 0.3]}}) == (
        "invalid configuration: query.vector_calibration: Tuple should have at most 2 items after validation, not 3")
    assert _error({"batch": {"prices": {"openai/x": "cheap"}}}) == (
        "invalid configuration: batch.prices.openai/x: Input should be a valid number, unable to parse string as a"
        " number")


def test_literals_patterns_and_lengths_say_what_they_expect() -> None:
    assert _error({"query": {"fusion": "max"}}) == ("invalid configuration: query.fusion: Input should be 'calibrated',"
                                                    " 'minmax' or 'rrf'")
    assert _error({"agent": "Bad"}) == ("invalid configuration: agent: String should match pattern"
                                        " '^[a-z0-9][a-z0-9_-]{0,63}$'")
    # "$" is the end of the text, as in pydantic's (Rust) regex: not also before a final newline
    assert "String should match pattern" in _error({"agent": "ok\n"})
    assert "String should match pattern" in _error({"qmd": {"index_name": "memory-core\n"}})
    assert _error({"compaction": {"memory_flush": {"prompt": ""}}}) == (
        "invalid configuration: compaction.memory_flush.prompt: String should have at least 1 character")
    assert _error({"fallback": 5}) == (
        "invalid configuration: fallback.function-after[_registered_provider(), str]: Input should be a valid string;"
        " fallback.FallbackSettings: Input should be a valid dictionary or instance of FallbackSettings")


def test_every_error_is_named_in_one_line_fields_first_then_unknown_keys() -> None:
    assert _error({"zeta": 1, "query": {"nope": 1, "min_score": 2, "max_results": 0}, "provider": "mystery"}) == (
        "invalid configuration: provider: Input should be 'auto', 'local', 'openai', 'gemini', 'voyage', 'mistral' or"
        " 'none'; query.max_results: Input should be greater than or equal to 1; query.min_score: Input should be less"
        " than or equal to 1; query.nope: unknown setting; zeta: unknown setting")


def test_validators_errors_are_the_setting_s() -> None:
    assert _error({"chunking": {"tokens": 100, "overlap": 100}}) == (
        "invalid configuration: chunking: Value error, chunking.overlap (100) must be smaller than chunking.tokens (100)")
    assert _error({"sources": []}) == "invalid configuration: sources: Value error, at least one source is required"
    assert _error({"batch": {"batch_discount": {"openai": 1}}}) == (
        "invalid configuration: batch.batch_discount: Value error, batch_discount.openai must be a fraction in [0, 1)")
    with pytest.raises(ValidationError) as exc:  # a ValueError, as pydantic's: callers catching that still do
        Settings(provider="plugin")
    assert isinstance(exc.value, ValueError) and [e.loc for e in exc.value.errors()] == [("provider",)]


def test_aliases_name_and_alias_and_the_alias_wins() -> None:
    assert MMRSettings.model_validate({"lambda": 0.2}).lambda_ == 0.2
    assert MMRSettings.model_validate({"lambda_": 0.3}).lambda_ == 0.3
    assert _error({"query": {"mmr": {"lambda": 0.2, "lambda_": 0.3}}}) == ("invalid configuration: query.mmr.lambda_:"
                                                                           " unknown setting (did you mean"
                                                                           " query.mmr.lambda?)")
    assert [a.id for a in AgentsSettings.model_validate({"list": [{"id": "a"}]}).agents] == ["a"]
    assert AgentsSettings(agents=[{"id": "b"}]).model_dump(by_alias=True)["list"] == [
        {"id": "b", "workspace": None, "index_path": None, "qmd_state_dir": None, "lancedb_path": None}]
    assert "agents" in AgentsSettings().model_dump()


# -- the model as an object ------------------------------------------------------------------------

def test_assignment_is_validated_and_a_refused_value_leaves_the_old_one() -> None:
    q = QuerySettings()
    q.max_results = "7"  # type: ignore[assignment]
    assert q.max_results == 7
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        q.max_results = 0
    assert q.max_results == 7
    c = ChunkingSettings(tokens=100)
    with pytest.raises(ValidationError, match="must be smaller than chunking.tokens"):
        c.overlap = 100
    assert c.overlap is None
    with pytest.raises(ValidationError, match="Object has no attribute 'nope'"):
        q.nope = 1


def test_secrets_are_masked_everywhere_but_private_json() -> None:
    s = load_settings(None, {"provider": "openai", "remote": {"api_key": "sk-secret-1", "headers": {
        "Authorization": "Bearer sk-secret-2", "X-Team": "search"}}}, env={})
    shown = (repr(s), str(s), repr(s.remote), s.model_dump_json(), repr(s.model_dump()), repr(s.model_dump(mode="json")))
    for blob in shown:
        assert "sk-secret" not in blob
        assert "X-Team" in blob and "'search'" in blob or '"search"' in blob
    assert s.model_dump(mode="json")["remote"]["api_key"] == "**********"  # type: ignore[index]
    assert str(SecretStr("")) == "" and repr(SecretStr("x")) == "SecretStr('**********')"
    private = s.private_json()
    assert "sk-secret-1" in private and "Bearer sk-secret-2" in private
    again = Settings.model_validate_json(private)
    assert again == s and again.remote.api_key is not None and again.remote.api_key.get_secret_value() == "sk-secret-1"


def test_copies_are_not_validated_and_share_the_origins() -> None:
    s = load_settings(None, {"provider": "none"}, env={})
    s._origins = {"provider": "--provider"}
    c = s.model_copy(update={"index_path": "relative.sqlite"})
    assert c.__dict__["index_path"] == "relative.sqlite"  # a str, as given: not validated, as pydantic's model_copy
    assert c.origins is s.origins
    assert c.index_file == Path("relative.sqlite").absolute()
    assert s.model_copy() == s and s.model_copy(update={"model": "m"}) != s
    assert pickle.loads(pickle.dumps(s)) == s


def test_defaults_are_not_validated_but_dump_as_their_type() -> None:
    q = QuerySettings()
    assert q.candidate_multiplier == 4 and type(q.candidate_multiplier) is int  # as declared
    assert '"candidate_multiplier":4.0' in q.model_dump_json()  # a float field dumps a float
    assert RemoteSettings().headers == {} and RemoteSettings().headers is not RemoteSettings().headers


def test_the_fields_are_described() -> None:
    assert get_args(QuerySettings.model_fields["fusion"].annotation) == ("calibrated", "minmax", "rrf")
    assert QuerySettings.model_fields["mmr"].annotation is MMRSettings
    assert MMRSettings.model_fields["lambda_"].alias == "lambda"
    assert list(Settings.model_fields)[:4] == ["workspace", "index_path", "extra_paths", "sources"]
    assert "_origins" not in Settings.model_fields


# -- against pydantic ------------------------------------------------------------------------------

SCALARS: list[object] = [0, 1, -1, 2, 7, 2**40, True, False, 0.0, 1.0, 2.0, 0.5, -0.5, float("inf"), float("nan"), "",
                         " ", "0", "1", "2", "-3", "+4", " 5 ", "5.0", "5.00", "5.", ".5", "5.5", "1e3", "1_000", "0x1f",
                         "true", "False", "YES", "no", "on", "off", "t", "f", "y", "n", "maybe", "inf", "NaN", "١",
                         None, [], {}, (1,), b"7", Path("/p")]


@pytest.mark.parametrize("kind", [int, float, bool, str, Path, Literal["a", "b"], list[str], dict[str, float],
                                  tuple[float, float], int | None])
def test_scalars_coerce_as_pydantic_s_lax_mode(kind: Any) -> None:
    from pydantic import ConfigDict, TypeAdapter
    from pydantic import ValidationError as PydanticError

    from memory_core.settings_model import _compile, _Fail

    theirs = TypeAdapter(kind, config=ConfigDict(allow_inf_nan=False))
    ours = _compile(kind)
    values = [*SCALARS, ["a", 1], ["x", "y"], {"k": "1.5"}, {"k": "x"}, ("0.1", 2), [0.1, 0.2, 0.3], "a", "b"]
    for value in values:
        try:
            expected: tuple[str, object] = ("ok", theirs.validate_python(value))
        except PydanticError as exc:
            expected = ("error", [(e["loc"], e["msg"]) for e in exc.errors()])
        try:
            got: tuple[str, object] = ("ok", ours(value))
        except _Fail as f:
            got = ("error", [(e.loc, e.msg) for e in f.errors])
        if expected[0] == got[0] == "ok" and isinstance(expected[1], float) and math.isnan(expected[1]):
            continue  # (never: no NaN passes)
        assert got == expected, (kind, value)
        if got[0] == "ok":
            assert type(got[1]) is type(expected[1]), (kind, value)
