"""Shared machinery of the validated input types.

Every spec is a frozen pydantic model that rejects unknown keys. Quantity fields
accept human strings and are parsed by :mod:`aitrinity.units` only.
:func:`validate` turns pydantic's errors into one-line :class:`SpecError`\\ s that
name the dotted field, the value and what was expected.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from aitrinity import units
from aitrinity.errors import SpecError, UnitError


class Spec(BaseModel):
    """Base of all input types: immutable, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False, defer_build=True)
    """``allow_inf_nan=False``: NaN and infinity are refused in every field of every input, with the field named."""


def _parser(fn: Any) -> BeforeValidator:
    def run(v: Any) -> Any:
        try:
            return fn(v)
        except UnitError as e:
            raise ValueError(str(e)) from None

    return BeforeValidator(run)


Bytes = Annotated[float, _parser(units.parse_bytes), Field(ge=0)]
PositiveBytes = Annotated[float, _parser(units.parse_bytes), Field(gt=0)]
Bandwidth = Annotated[float, _parser(units.parse_bandwidth), Field(gt=0)]
FlopRate = Annotated[float, _parser(units.parse_flops), Field(gt=0)]
Power = Annotated[float, _parser(units.parse_power), Field(gt=0)]
Seconds = Annotated[float, _parser(units.parse_time), Field(ge=0)]
PricePerHour = Annotated[float, _parser(units.parse_price_per_hour), Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]

T = TypeVar("T", bound=BaseModel)


def _expected(err: Any) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return "no such key (unknown keys are rejected)"
    if kind == "missing":
        return "a value (this field is required)"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        return f"a number {op} {ctx.get(next(iter(ctx), ''), '')}"
    if kind == "union_tag_invalid":
        return f"a known kind: {ctx.get('expected_tags', '')}"
    if kind == "literal_error":
        return f"one of {ctx.get('expected', '')}"
    if kind.startswith("int") or kind.startswith("float"):
        return "a " + ("whole number" if kind.startswith("int") else "number")
    msg = str(err.get("msg", "a valid value"))
    return msg.removeprefix("Value error, ").removeprefix("Input should be ")


def validate(cls: type[T], data: Any, where: str = "", source: str = "") -> T:
    """``cls.model_validate(data)`` with the first error as a one-line SpecError.

    ``where`` prefixes the dotted field path (``"plan"`` -> ``plan.tp``);
    ``source`` names the file the data came from.
    """
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        field = ".".join(p for p in (where, loc) if p)
        missing = err.get("type") == "missing"
        if not loc and err.get("type") == "value_error":  # a rule over several fields: its sentence, not the input
            problem = SpecError(field or cls.__name__, None, _expected(err), source=source)
            problem.args = (": ".join(p for p in (source, field or cls.__name__, _expected(err)) if p),)
            raise problem from None
        value = None if missing else err.get("input")
        raise SpecError(field or cls.__name__, value, _expected(err), source=source, missing=missing) from None
