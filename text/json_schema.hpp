#pragma once
// Structured output: the grammar (text/grammar.hpp, GBNF) of the JSON texts
// a JSON schema accepts, for constrained decoding.
//
// What a schema may say (anything else is refused, naming the keyword):
//  - type (a name or a list of names): object, array, string, number,
//    integer, boolean, null;
//  - object: properties (written in the schema's order, as OpenAI's
//    structured outputs write them), required (the others may be left out),
//    additionalProperties (false; or, with no properties, a schema for a
//    map's values; with properties, extra keys are never written, which every
//    schema allows);
//  - array: items, prefixItems (with items false or absent), minItems, maxItems;
//  - string: minLength, maxLength, format date, time, date-time (RFC 3339's:
//    days as the month has them, 29 February in leap years; years 0001-9999)
//    or uuid;
//  - integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum;
//  - enum, const (any JSON values), anyOf and oneOf (as alternatives: a
//    oneOf's branches should not overlap), allOf of one schema;
//  - $ref to "#" or a JSON pointer into the schema ("#/$defs/x",
//    "#/definitions/x"), recursive ones included;
//  - annotations, which change nothing: title, description, examples,
//    default, $schema, $id, $comment, deprecated, readOnly, writeOnly.
// Whitespace between tokens is at most a newline and 20 spaces or tabs, or
// one space; numbers have at most 16 integer digits, 15 fraction digits and
// a 3-digit exponent, so a model cannot run on forever inside one value.
//
// Bounds: schemas nested at most 64 deep; counts (minItems, maxLength, ...)
// at most 4096; an integer range's bounds within +-10^15.
#include <string>
#include <string_view>

namespace mmgpt {

// The GBNF grammar (its `root` rule) of the JSON texts `schema_json` (a JSON
// schema as JSON text) accepts. Throws mmgpt::Error naming `where`, the
// schema path and the keyword it cannot express.
std::string json_schema_grammar(std::string_view schema_json, const std::string& where = "the JSON schema");

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string json_object_grammar();

}  // namespace mmgpt
