"""Tests of scripts/catalog/convert.py on small inline samples, and of the committed catalog.

    python3 -m pytest scripts/catalog      # with pytest
    python3 scripts/catalog/test_convert.py  # without: runs every test_* function

Standard library only (pytest optional).
"""

import decimal
import hashlib
import io
import json
import os
import random
import re
import sys
import tempfile
import zipfile
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convert  # noqa: E402

AS_OF = "2026-11-23"
DEC = re.compile(r"^(0|[1-9][0-9]*)(\.[0-9]*[1-9])?$")  # plain decimal, no exponent/trailing zeros

# Written as LiteLLM writes them: JSON numbers in exponent form, USD per token.
SAMPLE_JSON = """
{
  "sample_spec": {"litellm_provider": "one of https://docs.litellm.ai/docs/providers", "mode": "chat",
                  "input_cost_per_token": 0.0, "output_cost_per_token": 0.0},
  "gpt-4o-mini": {
    "litellm_provider": "openai", "mode": "chat",
    "input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07, "cache_read_input_token_cost": 7.5e-08,
    "input_cost_per_token_priority": 2.5e-07, "output_cost_per_token_priority": 1e-06,
    "cache_read_input_token_cost_priority": 1.25e-07,
    "input_cost_per_token_batches": 7.5e-08, "output_cost_per_token_batches": 3e-07,
    "max_input_tokens": 128000, "max_output_tokens": 16384, "max_tokens": 16384,
    "supports_function_calling": true, "supports_vision": true, "supports_response_schema": true,
    "supports_audio_input": false, "supports_prompt_caching": true
  },
  "o-flex": {
    "litellm_provider": "openai", "mode": "chat",
    "input_cost_per_token": 1.25e-06, "output_cost_per_token": 1e-05,
    "output_cost_per_reasoning_token": 1.2e-05,
    "input_cost_per_token_flex": 6.25e-07, "cache_read_input_token_cost_flex": 6.25e-08,
    "cache_read_input_token_cost_priority": 2.5e-07,
    "max_tokens": 100000
  },
  "claude-sonnet-4-5-20250929": {
    "litellm_provider": "anthropic", "mode": "chat",
    "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
    "cache_read_input_token_cost": 3e-07, "cache_creation_input_token_cost": 3.75e-06,
    "cache_creation_input_token_cost_above_1hr": 6e-06,
    "max_input_tokens": 200000, "max_output_tokens": 64000,
    "supports_reasoning": true, "supports_pdf_input": true, "supports_function_calling": true,
    "deprecation_date": "2027-09-29"
  },
  "claude-old": {
    "litellm_provider": "anthropic", "mode": "chat",
    "input_cost_per_token": 8e-07, "output_cost_per_token": 4e-06, "deprecation_date": "2026-11-22"
  },
  "claude-retiring-today": {
    "litellm_provider": "anthropic", "mode": "chat",
    "input_cost_per_token": 8e-07, "output_cost_per_token": 4e-06, "deprecation_date": "2026-11-23"
  },
  "gemini/gemini-2.5-flash": {
    "litellm_provider": "gemini", "mode": "chat",
    "input_cost_per_token": 3e-07, "output_cost_per_token": 2.5e-06, "cache_read_input_token_cost": 2.5e-08,
    "output_cost_per_reasoning_token": 2.5e-06, "max_input_tokens": 1048576, "max_output_tokens": 65535,
    "supports_web_search": true, "supports_audio_input": true
  },
  "gemini/text-embedding-004": {
    "litellm_provider": "gemini", "mode": "embedding",
    "input_cost_per_token": 0, "output_cost_per_token": 0, "max_input_tokens": 2048
  },
  "gemini/imagen-4": {
    "litellm_provider": "gemini", "mode": "image_generation", "output_cost_per_image": 0.04
  },
  "gemini-2.5-flash": {
    "litellm_provider": "vertex_ai-language-models", "mode": "chat",
    "input_cost_per_token": 3e-07, "output_cost_per_token": 2.5e-06
  },
  "azure/gpt-4o": {
    "litellm_provider": "azure", "mode": "chat",
    "input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05, "max_input_tokens": 128000
  },
  "anthropic.claude-3-haiku-20240307-v1:0": {
    "litellm_provider": "bedrock_converse", "mode": "chat",
    "input_cost_per_token": 2.5e-07, "output_cost_per_token": 1.25e-06
  },
  "bedrock/us-east-1/anthropic.claude-3-haiku-20240307-v1:0": {
    "litellm_provider": "bedrock", "mode": "chat",
    "input_cost_per_token": 2.5e-07, "output_cost_per_token": 1.25e-06
  },
  "bedrock/claude-sonnet-4-5-20250929": {
    "litellm_provider": "bedrock", "mode": "chat",
    "input_cost_per_token": 3.3e-06, "output_cost_per_token": 1.65e-05
  },
  "bedrock/amazon.nova-micro-v1:0": {
    "litellm_provider": "bedrock", "mode": "chat",
    "input_cost_per_token": 3.5e-08, "output_cost_per_token": 1.4e-07
  },
  "groq/openai/gpt-oss-20b": {
    "litellm_provider": "groq", "mode": "chat",
    "input_cost_per_token": 7.5e-08, "output_cost_per_token": 3e-07
  },
  "together_ai/openai/gpt-oss-20b": {
    "litellm_provider": "together_ai", "mode": "chat",
    "input_cost_per_token": 5e-08, "output_cost_per_token": 2e-07
  },
  "together-ai-up-to-4b": {
    "litellm_provider": "together_ai", "mode": "chat",
    "input_cost_per_token": 1e-07, "output_cost_per_token": 1e-07
  },
  "command-r-08-2024": {
    "litellm_provider": "cohere_chat", "mode": "chat",
    "input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07
  },
  "embed-english-v3.0": {
    "litellm_provider": "cohere", "mode": "embedding",
    "input_cost_per_token": 1e-07, "output_cost_per_token": 0.0
  },
  "mistral/mistral-embed": {
    "litellm_provider": "mistral", "mode": "embedding", "output_cost_per_token": 0.0
  },
  "mistral/mistral-small-latest": {
    "litellm_provider": "mistral", "mode": "chat",
    "input_cost_per_token": 1e-07, "output_cost_per_token": 3e-07, "max_tokens": 32000
  },
  "deepseek/deepseek-v3.2": {
    "litellm_provider": "deepseek", "mode": "chat",
    "input_cost_per_token": 2.8e-07, "output_cost_per_token": 4.2e-07, "cache_read_input_token_cost": 2.8e-08
  },
  "xai/grok-4": {
    "litellm_provider": "xai", "mode": "chat",
    "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05
  },
  "text-embedding-3-small": {
    "litellm_provider": "openai", "mode": "embedding",
    "input_cost_per_token": 2e-08, "output_cost_per_token": 0.0, "max_input_tokens": 8191
  },
  "gpt-tiny": {
    "litellm_provider": "openai", "mode": "chat",
    "input_cost_per_token": 2.5e-08, "output_cost_per_token": 1.1e-07
  },
  "gpt-3.5-turbo-instruct": {
    "litellm_provider": "text-completion-openai", "mode": "completion",
    "input_cost_per_token": 1.5e-06, "output_cost_per_token": 2e-06
  }
}
"""


def sample() -> dict:
    return convert.load_json_bytes(SAMPLE_JSON.encode())


def run(data=None, as_of=AS_OF):
    stats = convert.Stats()
    doc = convert.convert(sample() if data is None else data, {"version": "test"}, as_of, stats)
    return doc["models"], stats


def test_prices_are_exact_decimal_strings():
    cases = {
        "1.5e-07": "0.15",
        "3e-06": "3",
        "1.25e-06": "1.25",
        "2.5e-08": "0.025",
        "1.1e-07": "0.11",  # 1.1e-07 * 1e6 in binary floats is 0.10999999999999999
        "7.5e-08": "0.075",
        "1.875e-06": "1.875",
        "6e-09": "0.006",
        "1e-05": "10",
        "0.00012": "120",
        "0.0": "0",
        "0": "0",
        "0e-7": "0",
        "-0.0": "0",
    }
    for text, want in cases.items():
        got = convert.fmt_decimal(convert.per_mtok(json.loads(text, parse_float=decimal.Decimal)))
        assert got == want, (text, got, want)
        assert DEC.match(got), got
    # Non-numbers are not prices.
    for bad in (None, True, "0.1", float("nan")):
        assert convert.per_mtok(bad) is None, bad
    assert convert.per_mtok(decimal.Decimal("NaN")) is None


def test_entry_prices_and_cache_fields():
    models, _ = run()
    m = models["gpt-4o-mini"]
    assert (m["input_per_mtok"], m["output_per_mtok"], m["cached_input_per_mtok"]) == ("0.15", "0.6", "0.075")
    assert "cache_write_per_mtok" not in m and "reasoning_per_mtok" not in m
    c = models["claude-sonnet-4-5-20250929"]
    assert (c["input_per_mtok"], c["output_per_mtok"]) == ("3", "15")
    assert c["cached_input_per_mtok"] == "0.3"
    assert c["cache_write_per_mtok"] == "3.75"  # the 5-minute write price, not the 1-hour one
    assert "tiers" not in c
    g = models["gemini-2.5-flash"]
    assert g["cached_input_per_mtok"] == "0.025" and g["reasoning_per_mtok"] == "2.5"
    assert models["gpt-tiny"]["input_per_mtok"] == "0.025"
    assert models["gpt-tiny"]["output_per_mtok"] == "0.11"
    assert models["o-flex"]["reasoning_per_mtok"] == "12"
    e = models["text-embedding-3-small"]
    assert (e["mode"], e["input_per_mtok"], e["output_per_mtok"]) == ("embedding", "0.02", "0")
    assert models["text-embedding-004"]["input_per_mtok"] == "0"
    for name, entry in models.items():
        for k, v in entry.items():
            if k.endswith("_per_mtok"):
                assert DEC.match(v), (name, k, v)


def test_tiers():
    models, stats = run()
    assert models["gpt-4o-mini"]["tiers"] == {
        "priority": {"input_per_mtok": "0.25", "output_per_mtok": "1", "cached_input_per_mtok": "0.125"}
    }
    # A tier LiteLLM prices only partly gets the standard price for the rest; a cached price
    # alone (o-flex priority) makes no tier.
    assert models["o-flex"]["tiers"] == {
        "flex": {"input_per_mtok": "0.625", "output_per_mtok": "10", "cached_input_per_mtok": "0.0625"}
    }
    assert ("o-flex", "flex", ["output_per_mtok"]) in stats.partial_tiers
    # Batch prices are not a service tier gw sees.
    assert "batches" not in models["gpt-4o-mini"]["tiers"]
    for entry in models.values():
        for tier, t in entry.get("tiers", {}).items():
            assert tier in ("priority", "flex")
            assert set(t) <= {"input_per_mtok", "output_per_mtok", "cached_input_per_mtok"}
            assert {"input_per_mtok", "output_per_mtok"} <= set(t)


def test_deprecated_entries_are_skipped():
    models, stats = run()
    assert "claude-old" not in models  # deprecated yesterday
    assert "claude-retiring-today" in models  # deprecated today: not before today
    assert "claude-sonnet-4-5-20250929" in models  # deprecated later
    assert stats.skipped["deprecated before " + AS_OF] == 1
    models, _ = run(as_of="2027-10-01")
    # Anthropic's entry is gone; the undated Bedrock entry of the same name is all that is left.
    assert models["claude-sonnet-4-5-20250929"]["litellm_key"] == "bedrock/claude-sonnet-4-5-20250929"
    assert "claude-sonnet-4-5-20250929" not in {e["litellm_key"] for e in models.values()}


def test_selection():
    models, stats = run()
    assert "sample_spec" not in models
    assert "imagen-4" not in models and "gemini/imagen-4" not in models  # mode
    assert "gpt-3.5-turbo-instruct" not in models  # completion mode
    assert "embed-english-v3.0" not in models  # Cohere: chat only
    assert "mistral-embed" not in models  # no input price
    assert "together-ai-up-to-4b" not in models  # a price bucket
    assert not any(e["provider"] == "vertex_ai" for e in models.values())
    assert stats.skipped["no input or output price"] == 1
    assert stats.skipped["price bucket, not a model"] == 1
    assert stats.skipped["sample_spec / not an entry"] == 1


def test_names_and_providers():
    models, _ = run()
    want = {
        "gpt-4o-mini": ("openai", "gpt-4o-mini"),
        "claude-sonnet-4-5-20250929": ("anthropic", "claude-sonnet-4-5-20250929"),
        "gemini-2.5-flash": ("gemini", "gemini/gemini-2.5-flash"),
        "text-embedding-004": ("gemini", "gemini/text-embedding-004"),
        "azure/gpt-4o": ("azure", "azure/gpt-4o"),
        "anthropic.claude-3-haiku-20240307-v1:0": ("bedrock", "anthropic.claude-3-haiku-20240307-v1:0"),
        "amazon.nova-micro-v1:0": ("bedrock", "bedrock/amazon.nova-micro-v1:0"),
        "openai/gpt-oss-20b": ("groq", "groq/openai/gpt-oss-20b"),
        "command-r-08-2024": ("cohere", "command-r-08-2024"),
        "mistral-small-latest": ("mistral", "mistral/mistral-small-latest"),
        "deepseek-v3.2": ("deepseek", "deepseek/deepseek-v3.2"),
        "grok-4": ("xai", "xai/grok-4"),
    }
    for name, (provider, key) in want.items():
        assert name in models, name
        assert (models[name]["provider"], models[name]["litellm_key"]) == (provider, key), name
    # Regional Bedrock prices cannot be selected by model name: dropped.
    assert not any(k.startswith("bedrock/us-east-1/") for k in models)
    assert not any(e["litellm_key"].startswith("bedrock/us-east-1/") for e in models.values())
    for litellm, ours in {
        "bedrock_converse": "bedrock",
        "vertex_ai-language-models": "vertex_ai",
        "vertex_ai-anthropic_models": "vertex_ai",
        "vertex_ai": "vertex_ai",
        "text-completion-openai": "openai",
        "cohere_chat": "cohere",
        "gemini": "gemini",
        "fireworks_ai-embedding-models": "fireworks_ai",
        "azure_text": "azure",
        "openai": "openai",
    }.items():
        assert convert.normalise_provider(litellm) == ours, litellm


def test_collisions_keep_first_party_then_precedence():
    models, stats = run()
    # bedrock/claude-sonnet-4-5-20250929 strips to Anthropic's own name: Anthropic's entry stays.
    c = models["claude-sonnet-4-5-20250929"]
    assert (c["provider"], c["input_per_mtok"]) == ("anthropic", "3")
    # Groq and Together both serve openai/gpt-oss-20b: provider precedence picks Groq.
    assert models["openai/gpt-oss-20b"]["provider"] == "groq"
    assert stats.collisions == 2
    assert ("openai/gpt-oss-20b", "groq", "together_ai") in stats.cross_provider
    assert ("claude-sonnet-4-5-20250929", "anthropic", "bedrock") in stats.cross_provider
    # Same provider twice: the entry LiteLLM keys by the bare name wins over the prefixed one.
    data = sample()
    data["deepseek-v3.2"] = dict(data["deepseek/deepseek-v3.2"], input_cost_per_token=decimal.Decimal("3e-07"))
    models, stats = run(data)
    assert models["deepseek-v3.2"]["litellm_key"] == "deepseek-v3.2"
    assert models["deepseek-v3.2"]["input_per_mtok"] == "0.3"
    assert ("deepseek-v3.2", "deepseek-v3.2", "deepseek/deepseek-v3.2") in stats.collision_price_differs


def test_limits_and_capabilities():
    models, _ = run()
    m = models["gpt-4o-mini"]
    assert (m["context_window"], m["max_output_tokens"]) == (128000, 16384)
    assert m["capabilities"] == ["prompt_caching", "response_schema", "tools", "vision"]  # audio_input false
    assert models["claude-sonnet-4-5-20250929"]["capabilities"] == ["pdf_input", "reasoning", "tools"]
    assert models["gemini-2.5-flash"]["capabilities"] == ["audio_input", "web_search"]
    assert models["o-flex"]["context_window"] == 100000  # max_tokens when max_input_tokens is absent
    assert models["o-flex"]["max_output_tokens"] is None
    assert models["grok-4"]["context_window"] is None
    assert convert.token_count(decimal.Decimal("4096.0")) == 4096
    assert convert.token_count("8192") == 8192
    assert convert.token_count("lots") is None and convert.token_count(0) is None


def test_output_is_deterministic():
    data = sample()
    keys = list(data)
    random.Random(7).shuffle(keys)
    shuffled = {k: data[k] for k in keys}
    a = convert.dumps(convert.convert(data, {"version": "test"}, AS_OF))
    b = convert.dumps(convert.convert(shuffled, {"version": "test"}, AS_OF))
    assert a == b
    assert a.endswith("}\n") and not a.endswith("\n\n")
    assert a == json.dumps(json.loads(a), indent=2, sort_keys=True) + "\n"
    assert "\n  \"models\": {\n" in a  # 2-space indent


def _main(args):
    out = io.StringIO()
    with redirect_stdout(out):
        assert convert.main(args) == 0
    return out.getvalue()


def test_main_on_file_and_wheel():
    raw = SAMPLE_JSON.encode()
    sha = hashlib.sha256(raw).hexdigest()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "prices.json")
        src.write_bytes(raw)
        out1 = Path(tmp, "a.json")
        summary = _main([str(src), "--version", "1.2.3", "--as-of", AS_OF, "-o", str(out1), "--min-chat", "1"])
        assert "collisions: 2" in summary
        doc = json.loads(out1.read_text())
        assert doc["source"] == {
            "name": "LiteLLM model_prices_and_context_window.json",
            "license": "MIT",
            "package": "litellm",
            "version": "1.2.3",
            "sha256": sha,
            "as_of": AS_OF,
        }
        assert doc["models"]["gpt-4o-mini"]["input_per_mtok"] == "0.15"
        # The same JSON inside a wheel: same catalog, version from the file name.
        whl = Path(tmp, "litellm-1.2.3-cp310-abi3-manylinux_2_28_x86_64.whl")
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("litellm/__init__.py", "")
            z.writestr(convert.JSON_IN_PACKAGE, raw)
        out2 = Path(tmp, "b.json")
        _main([str(whl), "--as-of", AS_OF, "-o", str(out2), "--min-chat", "1"])
        assert out1.read_bytes() == out2.read_bytes()
        # Too few chat models for the real list: refused, nothing written.
        out3 = Path(tmp, "c.json")
        try:
            _main([str(src), "--as-of", AS_OF, "-o", str(out3)])
        except SystemExit as e:
            assert "chat models" in str(e)
        else:
            raise AssertionError("a small list passed --min-chat 100")
        assert not out3.exists()


def test_committed_catalog():
    """conf/catalog.json is well-formed the way gw reads it (shared/src/catalog.rs)."""
    path = convert.DEFAULT_OUTPUT
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert text == convert.dumps(doc), "conf/catalog.json is not in the converter's canonical form"
    src = doc["source"]
    assert src["package"] == "litellm" and src["license"] == "MIT" and src["version"]
    assert re.fullmatch(r"[0-9a-f]{64}", src["sha256"])
    assert len(text.encode()) < 1_572_864
    allowed = {
        "provider", "mode", "litellm_key", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok",
        "cache_write_per_mtok", "reasoning_per_mtok", "tiers", "context_window", "max_output_tokens", "capabilities",
    }
    caps = set(convert.CAPABILITIES.values())
    chat = first_party = 0
    for name, e in doc["models"].items():
        assert set(e) <= allowed, name
        assert e["mode"] in ("chat", "embedding"), name
        assert e["provider"] in convert.PROVIDERS, name
        for k in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok", "reasoning_per_mtok"):
            if k in e:
                assert DEC.match(e[k]), (name, k, e[k])
        for tier, t in e.get("tiers", {}).items():
            assert tier in ("priority", "flex") and {"input_per_mtok", "output_per_mtok"} <= set(t), name
            assert set(t) <= {"input_per_mtok", "output_per_mtok", "cached_input_per_mtok"}, name
            assert all(DEC.match(v) for v in t.values()), name
        for k in ("context_window", "max_output_tokens"):
            assert e[k] is None or (type(e[k]) is int and e[k] > 0), (name, k)
        assert e["capabilities"] == sorted(set(e["capabilities"])) and set(e["capabilities"]) <= caps, name
        chat += e["mode"] == "chat"
        first_party += e["mode"] == "chat" and e["provider"] in convert.FIRST_PARTY
    assert chat >= 100 and first_party >= 100, (chat, first_party)
    # What conf/gw.toml and gw's own tests rely on.
    assert doc["models"]["gpt-4o-mini"]["input_per_mtok"] == "0.15"
    for provider in ("openai", "anthropic", "gemini"):
        assert any(e["provider"] == provider for e in doc["models"].values()), provider


if __name__ == "__main__":
    failed = 0
    for name, fn in sorted((n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)):
        try:
            fn()
            print("ok  ", name)
        except Exception:  # noqa: BLE001 - report every failure, then exit non-zero
            failed += 1
            import traceback

            print("FAIL", name)
            traceback.print_exc()
    sys.exit(1 if failed else 0)
