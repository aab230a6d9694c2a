"""An MCP tool's input schema, produced by its pydantic argument model: each tool's input is
declared once, and the schema a client lists is the one its arguments are validated against.

:func:`input_schema` renders a model as the plain JSON Schema the tools have always listed:
no titles, no ``default: null``, an optional field as its own type (a client leaves it out
rather than sending ``null``), ``additionalProperties: false`` from ``extra="forbid"``. A field
description may name settings in braces (``{max_results}``), filled from ``values``: a default
that depends on the settings is stated in the schema of the server that applies it. A model
whose config names :func:`list_alias_choices` lists every alias a field accepts (``maxResults``
and ``max_results``), the others after the first as "Alias of ...".
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema


class _WireSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema less what a tool's clients never saw (titles, null defaults)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])  # optional means "may be left out"

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])  # the defaults are stated in descriptions


def list_alias_choices(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """``json_schema_extra`` of a model whose fields' other aliases are listed too: after each
    field taking :class:`~pydantic.AliasChoices`, its further names, "Alias of <first>."."""
    props: dict[str, Any] = {}
    aliases = {}
    for f in model.model_fields.values():
        if isinstance(f.validation_alias, AliasChoices):
            names = [str(c) for c in f.validation_alias.choices]
            aliases[names[0]] = names[1:]
    for name, prop in schema["properties"].items():
        props[name] = prop
        for other in aliases.get(name, ()):
            props[other] = {**prop, "description": f"Alias of {name}."}
    schema["properties"] = props


def input_schema(model: type[BaseModel], values: dict[str, object] | None = None) -> dict[str, object]:
    """The input schema a tool lists: ``model``'s, by alias, its descriptions filled from ``values``."""
    schema = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_WireSchema)
    schema.pop("title", None)
    schema.pop("description", None)  # the model's docstring is for readers of the code
    if values:
        for prop in schema["properties"].values():
            if "description" in prop:
                prop["description"] = prop["description"].format_map(values)
    return schema
