"""Model instances to and from the rows of hand-written SQL: the hot paths (every training step
passes through them) map their rows without the ORM compiling the same query anew on each call.

``select_list`` and ``load`` turn a model's columns, selected alongside others in one statement,
back into a model instance exactly as the ORM would (the same field converters); ``insert``
writes an instance as the ORM's ``save(force_insert=True)`` would, in one statement whose SQL is
built once per model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def select_list(model: type[models.Model], alias: str | None) -> str:
    """Every concrete column of ``model`` (under the table alias ``alias``), in field order."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + _q(f.column) for f in model._meta.concrete_fields)


def width(model: type[models.Model]) -> int:
    """How many columns ``select_list`` names."""
    return len(model._meta.concrete_fields)


def load(model: type[M], values: Sequence[Any]) -> M:
    """The instance whose ``select_list`` columns are ``values`` (as the ORM would build it)."""
    converted = [
        _convert(converters, col, value)
        for (converters, col), value in zip(_converters(model), values, strict=True)
    ]
    return model.from_db(connection.alias, None, converted)


def insert(instance: models.Model, *, unless_conflict: bool = False) -> bool:
    """INSERT ``instance`` (auto fields such as ``auto_now_add`` filled in first); an automatic
    primary key is set from the database. ``unless_conflict``: a row that would break a unique
    constraint is not inserted (no error, the transaction goes on). Whether it was inserted."""
    sql, _, auto_pk = _insert_sql(type(instance))
    returned = auto_pk or (instance._meta.pk if unless_conflict else None)
    if unless_conflict:
        sql += " ON CONFLICT DO NOTHING"
    if returned is not None:
        sql += f" RETURNING {_q(returned.column)}"
    with connection.cursor() as cursor:
        cursor.execute(sql, insert_values(instance))
        row = cursor.fetchone() if returned is not None else None
    if unless_conflict and row is None:
        return False
    if auto_pk is not None:
        setattr(instance, auto_pk.attname, row[0])
    instance._state.adding = False
    instance._state.db = connection.alias
    return True


def insert_columns(model: type[models.Model]) -> str:
    """The quoted table and column list an INSERT of ``model`` names, as ``table (a, b, …)``;
    ``insert_values`` gives their values in the same order (no automatic primary key)."""
    _, fields, _ = _insert_sql(model)
    return f"{_q(model._meta.db_table)} ({', '.join(_q(f.column) for f in fields)})"


def insert_values(instance: models.Model) -> list:
    """The values of ``insert_columns``, ready for the database (auto fields filled in)."""
    _, fields, _ = _insert_sql(type(instance))
    return [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


@cache
def _insert_sql(model: type[models.Model]) -> tuple[str, list, Any]:
    meta = model._meta
    auto_pk = meta.pk if meta.pk is not None and meta.pk.db_returning else None
    fields = [f for f in meta.concrete_fields if f is not auto_pk]
    sql = (
        f"INSERT INTO {_q(meta.db_table)} ({', '.join(_q(f.column) for f in fields)}) "  # noqa: S608 — identifiers from the models' metadata, every value a bound parameter
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    return sql, fields, auto_pk


@cache
def _converters(model: type[models.Model]) -> list[tuple[list[Callable], Any]]:
    table = model._meta.db_table
    out = []
    for field in model._meta.concrete_fields:
        col = field.get_col(table)
        converters = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
        out.append((converters, col))
    return out


def _convert(converters: list[Callable], col: Any, value: Any) -> Any:
    for convert in converters:
        value = convert(value, col, connection)
    return value
