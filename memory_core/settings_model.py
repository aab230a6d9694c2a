"""The validating base class of the settings model (memory_core.config), without pydantic.

Importing pydantic and building ~20 models' validators cost a keyword-only search more than the
rest of its start-up (issue 38; bench/results/startup-settings-2026-11-28.md). This module does
what :mod:`memory_core.config` asked of pydantic, and nothing more, with the same results for
the inputs settings come from (TOML values, ``MEMORY_CORE_*`` strings, CLI flags, the index's
recorded JSON, keyword arguments), the same error wording and the same dumps:

* fields are class annotations, with :func:`Field` for a default, a ``default_factory``,
  bounds (``ge``/``gt``/``le``/``lt``), a ``pattern``, a ``min_length`` and an ``alias``
  (accepted as well as the field's name; the alias given, the name is an unknown key);
* unknown keys are errors; assignment is validated; numbers are finite; defaults are not
  validated (as pydantic's);
* the types ``str``, ``int``, ``float``, ``bool``, ``Path``, :class:`SecretStr`, ``Literal``,
  ``X | None``, ``list[X]``, ``dict[str, X]``, ``tuple[X, Y]``, nested models, unions of them,
  and ``Annotated[X, Check(f)]`` (``f`` checks the value after its type);
* coercion as pydantic's lax mode: an int field takes ``5``, ``5.0``, ``"5"``, ``" 5 "``,
  ``"5.0"``, ``True``; a float field an int or a numeric string; a bool field ``0``/``1``,
  ``"true"``/``"off"``/``"y"``...; a str field no number; a list field a list, tuple or set;
* :func:`field_validator` (after the field's type and bounds) and :func:`model_validator`
  (``before``: the raw input; ``after``: the built model) as plain methods; a ``ValueError``
  or ``AssertionError`` they raise is the setting's error ("Value error, ...");
* :class:`ValidationError` (a ``ValueError``) lists every error with its location, as pydantic's
  ``errors()`` did; :mod:`memory_core.config` turns it into one ``ConfigError`` line;
* ``model_validate``, ``model_validate_json``, ``model_copy(update=...)`` (no validation, as
  pydantic's), ``model_dump(mode=, by_alias=, context=)``, ``model_dump_json``, ``model_fields``,
  ``repr`` (``__repr_args__`` can mask values), equality, pickling.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePath
from typing import ClassVar, Literal, TypeVar, Union, get_args, get_origin, overload

__all__ = ["Check", "ErrorItem", "Field", "FieldInfo", "PrivateAttr", "SecretStr", "SettingsModel", "ValidationError",
           "field_validator", "model_validator"]

_T = TypeVar("_T")
Loc = tuple[str | int, ...]


class _Missing:
    def __repr__(self) -> str:
        return "<required>"


_MISSING = _Missing()


# -- errors -------------------------------------------------------------------------------------

class ErrorItem:
    """One invalid value: where (``loc``, field names and list indexes from the model down),
    why (``msg``, pydantic's wording) and its kind (``type``: ``extra_forbidden``, ``missing``,
    ``int_parsing``, ``value_error``, ...)."""

    __slots__ = ("loc", "msg", "type")

    def __init__(self, loc: Loc, msg: str, type: str) -> None:
        self.loc, self.msg, self.type = loc, msg, type

    def __repr__(self) -> str:
        return f"ErrorItem(loc={self.loc!r}, msg={self.msg!r}, type={self.type!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorItem) and (self.loc, self.msg, self.type) == (other.loc, other.msg, other.type)

    def __hash__(self) -> int:
        return hash((self.loc, self.msg, self.type))


class ValidationError(ValueError):
    """Every invalid value of one validation (a ``ValueError``, as pydantic's)."""

    def __init__(self, title: str, errors: list[ErrorItem]) -> None:
        self.title = title
        self.items = list(errors)
        n = len(self.items)
        lines = [f"{n} validation error{'s' if n != 1 else ''} for {title}"]
        for e in self.items:
            lines.append(".".join(str(x) for x in e.loc) or title)
            lines.append(f"  {e.msg} [type={e.type}]")
        super().__init__("\n".join(lines))

    def errors(self) -> list[ErrorItem]:
        return list(self.items)


class InvalidValue(ValueError):
    """Raised by a :class:`Check` function for an error in its own words (no "Value error, ")."""

    def __init__(self, kind: str, msg: str) -> None:
        super().__init__(msg)
        self.kind, self.msg = kind, msg


class _Fail(Exception):
    """Internal: the errors of one value, their locations relative to it."""

    def __init__(self, errors: list[ErrorItem]) -> None:
        self.errors = errors


def _fail(msg: str, kind: str) -> _Fail:
    return _Fail([ErrorItem((), msg, kind)])


def _prefixed(errors: list[ErrorItem], *loc: str | int) -> list[ErrorItem]:
    return [ErrorItem((*loc, *e.loc), e.msg, e.type) for e in errors]


def _validator_error(exc: Exception) -> _Fail:
    """A validator's ValueError / AssertionError as pydantic words it."""
    if isinstance(exc, InvalidValue):
        return _fail(exc.msg, exc.kind)
    if isinstance(exc, AssertionError):
        return _fail(f"Assertion failed, {exc}", "assertion_error")
    return _fail(f"Value error, {exc}", "value_error")


# -- secrets ------------------------------------------------------------------------------------

class SecretStr:
    """A string shown as ``'**********'`` in ``repr``, ``str`` and every dump; the value is
    :meth:`get_secret_value`'s."""

    __slots__ = ("_secret_value",)

    def __init__(self, secret_value: str) -> None:
        self._secret_value = secret_value

    def get_secret_value(self) -> str:
        return self._secret_value

    def __str__(self) -> str:
        return "**********" if self._secret_value else ""

    def __repr__(self) -> str:
        return f"SecretStr({str(self)!r})"

    def __len__(self) -> int:
        return len(self._secret_value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and self._secret_value == other._secret_value

    def __hash__(self) -> int:
        return hash(self._secret_value)

    def __getstate__(self) -> str:
        return self._secret_value

    def __setstate__(self, state: str) -> None:
        self._secret_value = state


# -- declaring fields ---------------------------------------------------------------------------

class Check:
    """``Annotated[X, Check(f)]``: ``f`` gets the value once it is an ``X`` and returns it (or
    another); a ``ValueError`` it raises is the value's error (:class:`InvalidValue`: in its own words)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[typing.Any], object]) -> None:
        self.func = func


# (plain classes, not dataclasses: making a dataclass costs ~0.5 ms at import, this module is on
# every command's path)
_RULES = ("ge", "gt", "le", "lt", "pattern", "min_length")


class FieldInfo:
    """A field of a :class:`SettingsModel` (``model_fields[name]``); ``annotation`` is its type
    (without ``Annotated``'s extras), ``hint`` its type as declared."""

    __slots__ = ("default", "default_factory", "alias", *_RULES, "annotation", "hint")

    def __init__(self, default: object = _MISSING, default_factory: Callable[[], object] | None = None,
                 alias: str | None = None, ge: float | None = None, gt: float | None = None, le: float | None = None,
                 lt: float | None = None, pattern: str | None = None, min_length: int | None = None) -> None:
        self.default, self.default_factory, self.alias = default, default_factory, alias
        self.ge, self.gt, self.le, self.lt, self.pattern, self.min_length = ge, gt, le, lt, pattern, min_length
        self.annotation: object = None
        self.hint: object = None

    def __repr__(self) -> str:
        shown = [f"{k}={getattr(self, k)!r}" for k in ("annotation", "default", "alias", *_RULES)
                 if getattr(self, k) not in (None, _MISSING)]
        return f"FieldInfo({', '.join(shown)})"

    def with_rules(self, other: FieldInfo) -> FieldInfo:
        """A copy with ``other``'s rules added (``Annotated[X, Field(pattern=...)]``)."""
        out = FieldInfo(self.default, self.default_factory, self.alias)
        for k in _RULES:
            mine, theirs = getattr(self, k), getattr(other, k)
            setattr(out, k, theirs if theirs is not None else mine)
        out.annotation, out.hint = self.annotation, self.hint
        return out

    @property
    def required(self) -> bool:
        return self.default is _MISSING and self.default_factory is None

    def make_default(self) -> object:
        return self.default_factory() if self.default_factory is not None else self.default


@overload
def Field(default: _T, *, alias: str | None = None, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None, pattern: str | None = None,
          min_length: int | None = None) -> _T: ...


@overload
def Field(*, default_factory: Callable[[], _T], alias: str | None = None, ge: float | None = None,
          gt: float | None = None, le: float | None = None, lt: float | None = None, pattern: str | None = None,
          min_length: int | None = None) -> _T: ...


@overload
def Field(*, alias: str | None = None, ge: float | None = None, gt: float | None = None, le: float | None = None,
          lt: float | None = None, pattern: str | None = None, min_length: int | None = None) -> FieldInfo: ...


def Field(default: object = _MISSING, *, default_factory: Callable[[], object] | None = None, alias: str | None = None,
          ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
          pattern: str | None = None, min_length: int | None = None) -> object:
    """A field's default and rules: ``x: int = Field(default=5, ge=1)``. With neither default nor
    factory the field is required, and its rules go in its type: ``x: Annotated[str, Field(pattern=...)]``."""
    return FieldInfo(default=default, default_factory=default_factory, alias=alias, ge=ge, gt=gt, le=le, lt=lt,
                     pattern=pattern, min_length=min_length)


class _Private:
    __slots__ = ("default_factory",)

    def __init__(self, default_factory: Callable[[], object]) -> None:
        self.default_factory = default_factory


def PrivateAttr(default_factory: Callable[[], _T]) -> _T:
    """A private attribute (a name starting with ``_``): per instance, never validated or dumped,
    shared by a :meth:`SettingsModel.model_copy` (as pydantic's)."""
    return typing.cast(_T, _Private(default_factory))


_F = TypeVar("_F", bound=Callable[..., object])


def field_validator(*names: str) -> Callable[[_F], _F]:
    """``@field_validator("a", "b")`` on a classmethod ``(cls, value) -> value``: run after the
    fields' types and bounds are checked."""

    def mark(func: _F) -> _F:
        typing.cast(typing.Any, _unwrap(func)).__settings_fields__ = names
        return func

    return mark


def model_validator(*, mode: Literal["before", "after"]) -> Callable[[_F], _F]:
    """``@model_validator(mode="before")`` on a classmethod ``(cls, data) -> data`` (the raw input),
    ``mode="after"`` on a method ``(self) -> self`` (the built model)."""

    def mark(func: _F) -> _F:
        typing.cast(typing.Any, _unwrap(func)).__settings_model__ = mode
        return func

    return mark


def _unwrap(func: object) -> object:
    return func.__func__ if isinstance(func, classmethod | staticmethod) else func


# -- coercion (pydantic's lax mode) ---------------------------------------------------------------

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
_Validator = Callable[[object], object]


def _as_str(v: object) -> object:
    if isinstance(v, str):
        return v
    if isinstance(v, bytes | bytearray):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            raise _fail("Input should be a valid string, unable to parse raw data as a unicode string",
                        "string_unicode") from None
    raise _fail("Input should be a valid string", "string_type")


def _numeric_text(v: object) -> str | None:
    if isinstance(v, bytes | bytearray):
        try:
            v = bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(v, str):
        return None
    s = v.strip()
    return s if s.isascii() else ""


def _as_int(v: object) -> object:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _fail("Input should be a finite number", "finite_number")
        if v != int(v):
            raise _fail("Input should be a valid integer, got a number with a fractional part", "int_from_float")
        if not -(2**63) <= v < 2**63:
            raise _fail("Unable to parse input string as an integer, exceeded maximum size", "int_parsing_size")
        return int(v)
    s = _numeric_text(v)
    if s is None:
        raise _fail("Input should be a valid integer", "int_type")
    whole, dot, frac = s.partition(".")
    if dot and whole and frac.strip("0") == "" and frac.isdigit():  # "5.0" and "5.00" are 5; "5." is not
        s = whole
    try:
        if not s or s[-1] == "_" or s.lstrip("+-")[:1] == "_":
            raise ValueError
        return int(s, 10)
    except ValueError:
        raise _fail("Input should be a valid integer, unable to parse string as an integer", "int_parsing") from None


def _as_float(v: object) -> object:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int):
        return float(v)
    if isinstance(v, float):
        out = v
    else:
        s = _numeric_text(v)
        if s is None:
            raise _fail("Input should be a valid number", "float_type")
        try:
            if not s or "_" in (s[0], s[-1]):
                raise ValueError
            out = float(s)
        except ValueError:
            raise _fail("Input should be a valid number, unable to parse string as a number", "float_parsing") from None
    if not math.isfinite(out):
        raise _fail("Input should be a finite number", "finite_number")
    return out


def _as_bool(v: object) -> object:
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        v = int(v)  # 1.0 is 1 (and 5.0 a number that is no boolean); 0.5, inf, nan: no boolean at all
    if isinstance(v, int) and -(2**63) <= v < 2**63:
        if v in (0, 1):
            return bool(v)
        raise _fail("Input should be a valid boolean, unable to interpret input", "bool_parsing")
    if isinstance(v, str | bytes | bytearray):
        s = (v if isinstance(v, str) else bytes(v).decode("utf-8", "replace")).lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise _fail("Input should be a valid boolean, unable to interpret input", "bool_parsing")
    raise _fail("Input should be a valid boolean", "bool_type")


def _as_path(v: object) -> object:
    if isinstance(v, PurePath):
        return Path(v)
    if isinstance(v, str):
        return Path(v)
    raise _fail("Input is not a valid path for <class 'pathlib.Path'>", "path_type")


def _as_secret(v: object) -> object:
    return v if isinstance(v, SecretStr) else SecretStr(typing.cast(str, _as_str(v)))


_SCALARS: dict[object, _Validator] = {str: _as_str, int: _as_int, float: _as_float, bool: _as_bool, Path: _as_path,
                                      SecretStr: _as_secret}


def _expected(choices: tuple[object, ...]) -> str:
    shown = [repr(c) for c in choices]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + f" or {shown[-1]}"


def _literal(choices: tuple[object, ...]) -> _Validator:
    msg = f"Input should be {_expected(choices)}"

    def check(v: object) -> object:
        for c in choices:
            if v == c and type(v) is type(c):
                return c
        raise _fail(msg, "literal_error")

    return check


def _optional(inner: _Validator) -> _Validator:
    def check(v: object) -> object:
        return None if v is None else inner(v)

    return check


def _list_of(item: _Validator) -> _Validator:
    def check(v: object) -> object:
        if not isinstance(v, list | tuple | set | frozenset) and not isinstance(v, types.GeneratorType | range):
            raise _fail("Input should be a valid list", "list_type")
        out, errors = [], []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except _Fail as f:
                errors += _prefixed(f.errors, i)
        if errors:
            raise _Fail(errors)
        return out

    return check


def _tuple_of(items: tuple[_Validator, ...]) -> _Validator:
    def check(v: object) -> object:
        if not isinstance(v, list | tuple | set | frozenset):
            raise _fail("Input should be a valid tuple", "tuple_type")
        given = list(v)
        if len(given) > len(items):
            raise _fail(f"Tuple should have at most {len(items)} item{'s' if len(items) != 1 else ''} after"
                        f" validation, not {len(given)}", "too_long")
        out, errors = [], []
        for i, validate in enumerate(items):
            if i >= len(given):
                errors.append(ErrorItem((i,), "Field required", "missing"))
                continue
            try:
                out.append(validate(given[i]))
            except _Fail as f:
                errors += _prefixed(f.errors, i)
        if errors:
            raise _Fail(errors)
        return tuple(out)

    return check


def _dict_of(key: _Validator, value: _Validator) -> _Validator:
    def check(v: object) -> object:
        if not isinstance(v, Mapping):
            raise _fail("Input should be a valid dictionary", "dict_type")
        out, errors = {}, []
        for k, x in v.items():
            try:
                kk = key(k)
            except _Fail as f:
                errors += _prefixed(f.errors, str(k), "[key]")
                continue
            try:
                out[kk] = value(x)
            except _Fail as f:
                errors += _prefixed(f.errors, str(k))
        if errors:
            raise _Fail(errors)
        return out

    return check


def _union(members: list[tuple[str, _Validator]]) -> _Validator:
    def check(v: object) -> object:
        errors: list[ErrorItem] = []
        for tag, validate in members:
            try:
                return validate(v)
            except _Fail as f:
                errors += _prefixed(f.errors, tag)
        raise _Fail(errors)

    return check


def _constrained(inner: _Validator, info: FieldInfo) -> _Validator:
    rules: list[Callable[[object], None]] = []

    def bound(op: Callable[[float, float], bool], limit: float, words: str, kind: str) -> Callable[[object], None]:
        msg = f"Input should be {words} {limit}"

        def rule(v: object) -> None:
            if isinstance(v, int | float) and not op(v, limit):
                raise _fail(msg, kind)

        return rule

    if info.gt is not None:
        rules.append(bound(lambda a, b: a > b, info.gt, "greater than", "greater_than"))
    if info.ge is not None:
        rules.append(bound(lambda a, b: a >= b, info.ge, "greater than or equal to", "greater_than_equal"))
    if info.lt is not None:
        rules.append(bound(lambda a, b: a < b, info.lt, "less than", "less_than"))
    if info.le is not None:
        rules.append(bound(lambda a, b: a <= b, info.le, "less than or equal to", "less_than_equal"))
    if info.min_length is not None:
        n = info.min_length

        def min_length(v: object) -> None:
            if isinstance(v, str) and len(v) < n:
                raise _fail(f"String should have at least {n} character{'s' if n != 1 else ''}", "string_too_short")

        rules.append(min_length)
    if info.pattern is not None:
        source = info.pattern
        # as pydantic's (Rust) regex: "$" is the end of the text, not also before a final newline
        compiled = re.compile(source[:-1] + r"\Z" if source.endswith("$") and not source.endswith("\\$") else source)

        def pattern(v: object) -> None:
            if isinstance(v, str) and compiled.search(v) is None:
                raise _fail(f"String should match pattern '{source}'", "string_pattern_mismatch")

        rules.append(pattern)
    if not rules:
        return inner

    def check(v: object) -> object:
        out = inner(v)
        if out is not None:
            for rule in rules:
                rule(out)
        return out

    return check


def _checked(inner: _Validator, func: Callable[[typing.Any], object]) -> _Validator:
    def check(v: object) -> object:
        out = inner(v)
        try:
            return func(out)
        except (ValueError, AssertionError) as exc:
            raise _validator_error(exc) from None

    return check


def _tag(tp: object) -> str:
    """The name pydantic gives a union member in an error's location."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        base, *meta = get_args(tp)
        checks = [m for m in meta if isinstance(m, Check)]
        if checks:
            return f"function-after[{getattr(checks[-1].func, '__name__', 'check')}(), {_tag(base)}]"
        return _tag(base)
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def _compile(tp: object, info: FieldInfo | None = None) -> _Validator:
    """The validator of values of type ``tp`` (with ``info``'s bounds, on the non-None value)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is typing.Annotated:
        base, *meta = args
        merged = info or FieldInfo()
        for m in meta:
            if isinstance(m, FieldInfo):
                merged = merged.with_rules(m)
        out = _compile(base, merged)
        for m in meta:
            if isinstance(m, Check):
                out = _checked(out, m.func)
        return out
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) < len(args):  # Optional[X]: None, or an X (errors are X's)
            inner = members[0] if len(members) == 1 else Union[tuple(members)]  # noqa: UP007
            return _optional(_compile(inner, info))
        return _union([(_tag(m), _compile(m, info)) for m in members])
    validator: _Validator
    if origin is Literal:
        validator = _literal(args)
    elif origin is list:
        validator = _list_of(_compile(args[0]))
    elif origin is tuple:
        validator = _tuple_of(tuple(_compile(a) for a in args))
    elif origin is dict:
        validator = _dict_of(_compile(args[0]), _compile(args[1]))
    elif isinstance(tp, type) and issubclass(tp, SettingsModel):
        validator = tp._validate_nested
    elif tp in _SCALARS:
        validator = _SCALARS[tp]
    else:
        raise TypeError(f"settings_model: no validator for the type {tp!r}")
    return _constrained(validator, info) if info is not None else validator


# -- the model ----------------------------------------------------------------------------------

class SettingsModel:
    """A validating settings model: see the module docstring."""

    model_fields: ClassVar[dict[str, FieldInfo]] = {}
    __settings_validators__: ClassVar[dict[str, _Validator]] = {}
    __settings_private__: ClassVar[dict[str, Callable[[], object]]] = {}
    __settings_before__: ClassVar[tuple[Callable[..., object], ...]] = ()
    __settings_after__: ClassVar[tuple[Callable[..., object], ...]] = ()
    __settings_field_checks__: ClassVar[dict[str, tuple[Callable[..., object], ...]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__()
        fields: dict[str, FieldInfo] = {}
        private: dict[str, Callable[[], object]] = {}
        before: list[Callable[..., object]] = []
        after: list[Callable[..., object]] = []
        checks: dict[str, list[Callable[..., object]]] = {}
        for base in reversed(cls.__mro__[1:]):
            if issubclass(base, SettingsModel) and base is not SettingsModel:
                fields.update(base.model_fields)
                private.update(base.__settings_private__)
                before += [f for f in base.__settings_before__ if f not in before]
                after += [f for f in base.__settings_after__ if f not in after]
                for name, funcs in base.__settings_field_checks__.items():
                    checks.setdefault(name, []).extend(f for f in funcs if f not in checks.get(name, []))
        own = cls.__dict__.get("__annotations__", {})
        texts = [ann for ann in own.values() if isinstance(ann, str)]
        # one eval for the class's annotations (``from __future__ import annotations``: strings)
        evaluated = iter(eval("(" + "".join(f"({t}),\n" for t in texts) + ")", vars(sys.modules[cls.__module__]),
                              {cls.__name__: cls}) if texts else ())  # noqa: S307
        for name, ann in own.items():
            hint = next(evaluated) if isinstance(ann, str) else ann
            raw = cls.__dict__.get(name, _MISSING)
            if name.startswith("_"):
                if isinstance(raw, _Private):
                    private[name] = raw.default_factory
                continue
            if get_origin(hint) is ClassVar:
                continue
            info = raw.with_rules(FieldInfo()) if isinstance(raw, FieldInfo) else FieldInfo(default=raw)
            info.hint = hint
            info.annotation = get_args(hint)[0] if get_origin(hint) is typing.Annotated else hint
            fields[name] = info
            if name in cls.__dict__:
                delattr(cls, name)  # a default is the field's, not a class attribute (as pydantic's)
        for name in private:
            if name in cls.__dict__:
                delattr(cls, name)
        cls.model_fields = fields
        cls.__settings_private__ = private
        for attr in list(vars(cls).values()):
            func = _unwrap(attr)
            mode = getattr(func, "__settings_model__", None)
            if mode == "before":
                before.append(typing.cast(Callable[..., object], func))
            elif mode == "after":
                after.append(typing.cast(Callable[..., object], func))
            for name in getattr(func, "__settings_fields__", ()):
                checks.setdefault(name, []).append(typing.cast(Callable[..., object], func))
        cls.__settings_before__, cls.__settings_after__ = tuple(before), tuple(after)
        cls.__settings_field_checks__ = {k: tuple(v) for k, v in checks.items()}
        cls.__settings_validators__ = {}  # compiled on first use

    # -- validation --------------------------------------------------------------------------------
    @classmethod
    def _field_validator(cls, name: str) -> _Validator:
        found = cls.__settings_validators__.get(name)
        if found is None:
            info = cls.model_fields[name]
            found = _compile(info.hint, info)
            for func in cls.__settings_field_checks__.get(name, ()):
                found = _checked(found, functools.partial(func, cls))
            cls.__settings_validators__[name] = found
        return found

    @classmethod
    def _validate_nested(cls, data: object) -> object:
        for func in cls.__settings_before__:
            try:
                data = func(cls, data)
            except (ValueError, AssertionError) as exc:
                raise _validator_error(exc) from None
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise _fail(f"Input should be a valid dictionary or instance of {cls.__name__}", "model_type")
        values: dict[str, object] = {}
        errors: list[ErrorItem] = []
        given: dict[str, str] = {}  # field -> the key it is given by: its alias, else its name
        for name, info in cls.model_fields.items():
            if info.alias is not None and info.alias in data:
                given[name] = info.alias
            elif name in data:
                given[name] = name
        used = set(given.values())
        extra = [k for k in data if k not in used]
        for name, info in cls.model_fields.items():
            if name not in given:
                if info.required:
                    errors.append(ErrorItem((info.alias or name,), "Field required", "missing"))
                else:
                    values[name] = info.make_default()
                continue
            try:
                values[name] = cls._field_validator(name)(data[given[name]])
            except _Fail as f:
                errors += _prefixed(f.errors, given[name])
        errors += [ErrorItem((k,), "Extra inputs are not permitted", "extra_forbidden") for k in extra]
        if errors:
            raise _Fail(errors)
        model = cls.__new__(cls)
        object.__setattr__(model, "__dict__", values)
        for name, factory in cls.__settings_private__.items():
            values[name] = factory()
        return model._after()

    def _after(self) -> SettingsModel:
        model = self
        for func in type(self).__settings_after__:
            try:
                model = typing.cast(SettingsModel, func(model))
            except (ValueError, AssertionError) as exc:
                raise _validator_error(exc) from None
        return model

    @classmethod
    def model_validate(cls: type[_M], data: object) -> _M:
        """``data`` (a mapping, or an instance) validated; :class:`ValidationError` lists every error."""
        try:
            return typing.cast(_M, cls._validate_nested(data))
        except _Fail as f:
            raise ValidationError(cls.__name__, f.errors) from None

    @classmethod
    def model_validate_json(cls: type[_M], text: str | bytes) -> _M:
        return cls.model_validate(json.loads(text))

    def __init__(self, **data: object) -> None:
        built = type(self).model_validate(data)
        object.__setattr__(self, "__dict__", built.__dict__)

    def __setattr__(self, name: str, value: object) -> None:
        cls = type(self)
        if name in cls.__settings_private__ or name not in cls.model_fields:
            if name.startswith("_"):
                object.__setattr__(self, name, value)
                return
            raise ValidationError(cls.__name__, [ErrorItem((name,), f"Object has no attribute '{name}'",
                                                           "no_such_attribute")])
        try:
            checked = cls._field_validator(name)(value)
        except _Fail as f:
            raise ValidationError(cls.__name__, _prefixed(f.errors, name)) from None
        old = self.__dict__[name]
        self.__dict__[name] = checked
        try:
            self._after()
        except _Fail as f:
            self.__dict__[name] = old
            raise ValidationError(cls.__name__, f.errors) from None

    # -- copies and dumps ----------------------------------------------------------------------------
    def model_copy(self: _M, *, update: Mapping[str, object] | None = None) -> _M:
        """A shallow copy with ``update``'s fields replaced, not validated (as pydantic's)."""
        copied = type(self).__new__(type(self))
        object.__setattr__(copied, "__dict__", {**self.__dict__, **(update or {})})
        return copied

    def __copy__(self: _M) -> _M:
        return self.model_copy()

    def _dump_field(self, name: str, value: object, context: Mapping[str, object]) -> object:
        """A field's value in a dump, before it is made JSON (a model may mask it)."""
        return value

    def model_dump(self, *, mode: Literal["python", "json"] = "python", by_alias: bool = False,
                   context: Mapping[str, object] | None = None) -> dict[str, object]:
        """The fields as a dict (nested models as dicts); ``mode="json"``: JSON values only (paths
        as strings, secrets masked, tuples as lists)."""
        out: dict[str, object] = {}
        for name, info in type(self).model_fields.items():
            value = self._dump_field(name, self.__dict__[name], context or {})
            if mode == "json" and type(value) is int and info.annotation in (float, float | None):
                value = float(value)  # a float field's default given as an int (``4``) is 4.0 in JSON
            out[(info.alias or name) if by_alias else name] = _dump(value, mode, by_alias, context)
        return out

    def model_dump_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"), ensure_ascii=False)

    # -- the rest of an object -------------------------------------------------------------------------
    def __repr_args__(self) -> Iterator[tuple[str | None, object]]:
        for name in type(self).model_fields:
            yield name, self.__dict__[name]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__repr_args__())})"

    def __str__(self) -> str:
        return " ".join(f"{k}={v!r}" for k, v in self.__repr_args__())

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic's models


_M = TypeVar("_M", bound=SettingsModel)


def _dump(value: object, mode: str, by_alias: bool, context: Mapping[str, object] | None) -> object:
    if isinstance(value, SettingsModel):
        return value.model_dump(mode=typing.cast(Literal["python", "json"], mode), by_alias=by_alias, context=context)
    if isinstance(value, dict):
        return {k: _dump(v, mode, by_alias, context) for k, v in value.items()}
    if isinstance(value, list):
        return [_dump(v, mode, by_alias, context) for v in value]
    if isinstance(value, tuple):
        items = [_dump(v, mode, by_alias, context) for v in value]
        return items if mode == "json" else tuple(items)
    if mode == "json":
        if isinstance(value, SecretStr):
            return str(value)
        if isinstance(value, PurePath):
            return str(value)
    return value
