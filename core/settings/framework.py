"""How settings are declared and checked: the field helper, the cross-field rules, pydantic's errors in our words,
and the parsing of `-c` strings. core.settings declares its sections with these; nothing here names a setting.

A section is a `Section` whose fields are `setting(...)`s; a `check(...)` in a field's Annotated type runs a
predicate after pydantic's own checks; `@rule(key, ...)` registers a check of several settings. Whatever is wrong,
a model raises one SettingsError (core.problems) with every Problem in it: the field problems and the problems of
each rule whose settings are valid on their own.

Pure Python with pydantic alone, like core.settings (the training job imports it inside the container).
"""

from __future__ import annotations

import difflib
import json
import math
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from ray_efa.core import scheduling
from ray_efa.core.problems import Problem, SettingsError

if TYPE_CHECKING:
    from pydantic.config import JsonDict

__all__ = [
    "setting",
    "check",
    "string_schema",
    "LIST_AS_TUPLE",
    "Rule",
    "RULES",
    "rule",
    "rule_problems",
    "choices_of",
    "Model",
    "Section",
    "parse_context_value",
]


# -- how a field is declared --------------------------------------------------------------------------------------


def setting(default: Any, key: str, doc: str, *, message: str | None = None, **constraints: Any) -> Any:
    """A settings field: its context key, a one-line description and pydantic constraints (ge, le, pattern...).

    Closed sets of values are `Literal[...]` annotations. `message` replaces the generic text of a constraint error
    ("must be between 1 and 64") where the setting needs its own words; the JSON Schema carries it as errorMessage,
    which editors show.
    """
    extra: JsonDict | None = {"errorMessage": message} if message else None
    return Field(default, alias=key, description=doc, json_schema_extra=extra, **constraints)


def check(predicate: Callable[[Any], str | None]) -> AfterValidator:
    """A field check beyond types and constraints: `predicate` returns what is wrong ("must be ...") or None."""

    def validate(value: Any) -> Any:
        if (problem := predicate(value)) is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(validate)


def string_schema(**schema: Any) -> WithJsonSchema:
    """What the JSON Schema shows of a checked string: a hint for editors; the check itself is its `check(...)`."""
    return WithJsonSchema({"type": "string", **schema})


# A list is as good as a tuple in the Python API (strict about types, not about which sequence holds them).
LIST_AS_TUPLE: BeforeValidator = BeforeValidator(lambda value: tuple(value) if isinstance(value, list) else value)


# -- rules across fields ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A check of several settings: their context keys, in the order `check` takes their values."""

    keys: tuple[str, ...]
    check: Callable[..., Problem | None]


RULES: list[Rule] = []
"""Every rule registered with @rule, in declaration order."""


def rule(*keys: str) -> Callable[[Callable[..., Problem | None]], Callable[..., Problem | None]]:
    """Register a check that reads several settings (by key, passed in that order) and returns a Problem or None.

    A rule runs whenever each of its settings is valid on its own, also when other settings are not: so one
    SettingsError reports field problems and rule problems together.
    """

    def register(check: Callable[..., Problem | None]) -> Callable[..., Problem | None]:
        RULES.append(Rule(keys, check))
        return check

    return register


def rule_problems(rules: Iterable[Rule], values: Mapping[str, Any], invalid: set[str]) -> list[Problem]:
    """The problems of the rules whose settings are all valid; `values` maps keys to (valid) values."""
    problems = []
    for rule in rules:
        if any(key in invalid for key in rule.keys):
            continue
        problem = rule.check(*(values[key] for key in rule.keys))
        if problem is not None:
            problems.append(problem)
    return problems


# -- translating pydantic's errors into problems ------------------------------------------------------------------

_TYPE_MESSAGES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "tuple_type": "must be a list of strings",
}


def choices_of(annotation: Any) -> tuple[Any, ...] | None:
    """The values of a Literal annotation (also inside `X | None`), else None."""
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is Literal:
            return typing.get_args(arg)
    return None


def _bounds(info: Any) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    for item in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if getattr(item, name, None) is not None:
                bounds[name] = getattr(item, name)
    return bounds


def _bounds_message(bounds: dict[str, Any]) -> str:
    if "ge" in bounds and "le" in bounds:
        return f"must be between {bounds['ge']} and {bounds['le']}"
    for name, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if name in bounds:
            return f"must be {sign} {bounds[name]}"
    return "is out of range"


def _field_message(error_type: str, info: Any, fallback: str) -> str:
    """Our message for a pydantic error of a field: the field's own words, its choices, its bounds or its type."""
    if error_type == "literal_error":
        return f"must be one of {', '.join(map(str, choices_of(info.annotation) or ()))}"
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if error_type in ("greater_than_equal", "greater_than", "less_than_equal", "less_than", "string_pattern_mismatch"):
        if extra.get("errorMessage"):
            return str(extra["errorMessage"])
        if error_type != "string_pattern_mismatch":
            return _bounds_message(_bounds(info))
    return _TYPE_MESSAGES.get(error_type, fallback)


def _problems_of(error: ValidationError, model: type[BaseModel]) -> list[Problem]:
    """pydantic's errors as Problems: each names the context key, the value and what is allowed."""
    by_name = {
        **{name: name for name in model.model_fields},
        **{info.alias: name for name, info in model.model_fields.items() if info.alias},
    }
    problems: list[Problem] = []
    for item in error.errors():
        ctx_error = (item.get("ctx") or {}).get("error")
        if isinstance(ctx_error, SettingsError):  # raised by our own validator below, already in our words
            problems.extend(ctx_error.problems)
            continue
        loc = item["loc"]
        name = by_name.get(str(loc[0])) if loc else None
        if item["type"] == "extra_forbidden":
            known = sorted(by_name)
            close = difflib.get_close_matches(str(loc[0]), known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known settings: {', '.join(known)}"
            problems.append(Problem(str(loc[0]), item["input"], f"unknown setting ({hint})"))
            continue
        if name is None:
            problems.append(Problem(model.__name__, item["input"], item["msg"]))
            continue
        info = model.model_fields[name]
        key = info.alias or name
        if item["type"] == "value_error" and ctx_error is not None:  # a check: its message is ours already
            message = str(ctx_error)
        elif item["type"] in ("model_type", "is_instance_of"):
            message = f"must be a {getattr(info.annotation, '__name__', info.annotation)}"
        else:
            message = _field_message(item["type"], info, item["msg"])
        problems.append(Problem(key, item["input"], message))
    return problems


class Model(BaseModel):
    """Shared behaviour: strict and frozen, keys by name or context key, every problem at once as a SettingsError."""

    # populate_by_name (not validate_by_name, which needs pydantic 2.11): the container's Ray accepts pydantic >= 2.5.
    # No protected namespaces: model_path is a setting, not pydantic's.
    model_config: ClassVar[ConfigDict] = ConfigDict(
        frozen=True,
        strict=True,
        extra="forbid",
        populate_by_name=True,
        allow_inf_nan=False,
        protected_namespaces=(),
    )

    def __hash__(self) -> int:
        # Node selectors are dicts, which pydantic's field-tuple hash cannot take; equal settings dump equal JSON.
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise SettingsError(_problems_of(error, type(self))) from None

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem_at_once(cls, data: Any, handler: Callable[[Any], Any]) -> Any:
        """Field checks, then the rules over this model's settings, reported together."""
        rules = cls._rules()
        try:
            model = handler(data)
        except ValidationError as error:
            if not isinstance(data, Mapping):
                raise
            problems = _problems_of(error, cls)
            values = cls._values_by_key(data)
            problems += rule_problems(rules, values, {p.key for p in problems})
            raise SettingsError(problems) from None
        problems = rule_problems(rules, model._flat(), set())
        if problems:
            raise SettingsError(problems)
        return model

    @classmethod
    def _rules(cls) -> list[Rule]:
        """The cross-field rules of this model: an abstract hook, defined by each section and by Settings."""
        raise NotImplementedError

    @classmethod
    def _values_by_key(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with the given values (by name or key), keyed by context key."""
        keys = {name: info.alias or name for name, info in cls.model_fields.items()}
        values = {keys[name]: info.default for name, info in cls.model_fields.items()}
        for given, value in data.items():
            name = given if given in keys else next((n for n, key in keys.items() if key == given), None)
            if name is not None:
                values[keys[name]] = value
        return values

    def _flat(self) -> dict[str, Any]:
        """Every value of this model by context key: an abstract hook, defined by each section and by Settings."""
        raise NotImplementedError


class Section(Model):
    """A settings section: a flat group of settings, each with a context key."""

    @classmethod
    def _rules(cls) -> list[Rule]:
        keys = {info.alias for info in cls.model_fields.values()}
        return [rule for rule in RULES if set(rule.keys) <= keys]

    def _flat(self) -> dict[str, Any]:
        return {info.alias or name: getattr(self, name) for name, info in type(self).model_fields.items()}


# -- parsing context values ---------------------------------------------------------------------------------------

_TRUE, _FALSE, _NONE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}, {"", "none", "null"}


def _strip_annotated(annotation: Any) -> Any:
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation


def _parse_objects(raw: Any) -> tuple[dict[str, Any], ...]:
    """A list of JSON objects: a JSON list or one JSON object (`-c`), or a list of mappings (cdk.json)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else []
        except json.JSONDecodeError as error:
            raise ValueError(f"must be a JSON list of objects (or one object): {error.msg} at {error.pos}") from None
    if isinstance(raw, Mapping):
        raw = [raw]
    if not isinstance(raw, (list, tuple)) or not all(isinstance(item, Mapping) for item in raw):
        raise ValueError("must be a JSON list of objects (or one object)")
    return tuple(dict(item) for item in raw)


def _parse_json_object(raw: Any) -> dict[str, Any]:
    """A JSON object (a string, or a mapping), copied: never the caller's."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as error:
            raise ValueError(f"must be a JSON object ({error.msg} at character {error.pos})") from None
    if not isinstance(raw, Mapping):
        raise ValueError("must be a JSON object")
    try:
        return json.loads(json.dumps(dict(raw), allow_nan=False))  # a copy, never the caller's
    except (TypeError, ValueError) as error:  # a value JSON has no form for: a set, an object, NaN
        raise ValueError(
            f"must be a JSON object (strings, numbers, booleans, null, lists and objects; {error})"
        ) from None


def _parse_strings(raw: Any) -> tuple[str, ...]:
    """A list of strings: a JSON list, a comma-separated string, or a list."""
    if isinstance(raw, str):
        text = raw.strip()
        try:
            items = json.loads(text) if text.startswith("[") else [s for s in (x.strip() for x in text.split(",")) if s]
        except json.JSONDecodeError:
            raise ValueError("must be a list (JSON list or comma-separated string)") from None
    elif isinstance(raw, (list, tuple)):
        items = list(raw)
    else:
        raise ValueError("must be a list (JSON list or comma-separated string)")
    if not isinstance(items, list):
        raise ValueError("must be a list (JSON list or comma-separated string)")
    return tuple(str(item) for item in items)


def parse_context_value(raw: Any, annotation: Any) -> Any:
    """Convert a context value to a field's type, leniently (`-c` gives strings); raise ValueError with what was expected.

    The field's own checks (ranges, patterns, choices) run afterwards, in the model.
    """
    annotation = _strip_annotated(annotation)
    args = typing.get_args(annotation)
    literals = [a for a in args if typing.get_origin(a) is Literal]
    if literals and len(args) == 2:  # auto | int, auto | bool: the word, or the other type
        if isinstance(raw, str) and raw.strip().lower() in typing.get_args(literals[0]):
            return raw.strip().lower()
        other = next(a for a in args if a is not literals[0])
        try:
            return parse_context_value(raw, other)
        except ValueError as error:
            words = " or ".join(map(str, typing.get_args(literals[0])))
            raise ValueError(f"must be {words} or {str(error).removeprefix('must be ')}") from None
    if type(None) in args:  # X | None
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE):
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return parse_context_value(raw, inner)
    if typing.get_origin(annotation) is dict and typing.get_args(annotation)[1] is Any:  # a JSON object
        return _parse_json_object(raw)
    if typing.get_origin(annotation) is dict:  # a node selector
        if isinstance(raw, str):
            return scheduling.parse_node_selector(raw)
        if isinstance(raw, Mapping) and all(isinstance(v, str) for v in raw.values()):
            return {str(k): v for k, v in raw.items()}
        raise ValueError("must be a JSON object of string labels or key=value,key2=value2")
    if typing.get_origin(annotation) is tuple and typing.get_origin(typing.get_args(annotation)[0]) is dict:
        return _parse_objects(raw)  # extraGpuInstanceTypes: JSON objects
    if typing.get_origin(annotation) is tuple:
        return _parse_strings(raw)
    if annotation is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise ValueError("must be true or false")
    if annotation is int:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError("must be an integer")
        try:
            return int(raw) if not isinstance(raw, str) else int(raw.strip())
        except (TypeError, ValueError, OverflowError):
            raise ValueError("must be an integer") from None
    if annotation is float:
        if isinstance(raw, bool):
            raise ValueError("must be a number")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError("must be a number") from None
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
    if annotation is str or typing.get_origin(annotation) is Literal:
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            raise ValueError("must be a string")
        return str(raw)
    raise TypeError(f"unsupported settings type {annotation!r}")  # a programming error, not bad input
