#!/usr/bin/env python3
"""Builds gw's model catalog (conf/catalog.json) from LiteLLM's price list.

The input is LiteLLM's community-maintained `model_prices_and_context_window.json` (MIT
licence). It ships inside the `litellm` PyPI package as
`litellm/model_prices_and_context_window_backup.json`; only that data file is read, no LiteLLM
code is installed, imported or run.

    python3 scripts/catalog/convert.py --from-pypi            # the pinned DEFAULT_VERSION
    python3 scripts/catalog/convert.py --from-pypi 1.109.1    # another release
    python3 scripts/catalog/convert.py path/to/model_prices.json --version 1.109.1
    python3 scripts/catalog/convert.py path/to/litellm-1.109.1-*.whl

Prices are converted from USD per token (JSON numbers such as 1.5e-07) to USD per million
tokens as exact decimal strings ("0.15"): the numbers are parsed as `decimal.Decimal`, never as
binary floats. The output is deterministic: the same input file and `--as-of` date give the same
bytes. See docs/catalog.md for the fields.

Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

# The newest litellm release when the catalog was last refreshed (`pip index versions litellm`).
DEFAULT_VERSION = "1.109.1"

SOURCE_NAME = "LiteLLM model_prices_and_context_window.json"
SOURCE_LICENSE = "MIT"
PACKAGE = "litellm"
JSON_IN_PACKAGE = "litellm/model_prices_and_context_window_backup.json"

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = REPO_ROOT / "conf" / "catalog.json"

MODES = ("chat", "embedding")

# Providers kept, by normalised name, in order of precedence when two entries end up with the
# same model name: first-party providers first, then the clouds, then the other first-party
# APIs, then resellers.
PROVIDERS = (
    "openai",
    "anthropic",
    "gemini",
    "azure",
    "bedrock",
    "mistral",
    "deepseek",
    "xai",
    "cohere",
    "perplexity",
    "groq",
    "together_ai",
    "fireworks_ai",
    "openrouter",
)
FIRST_PARTY = ("openai", "anthropic", "gemini")

# LiteLLM provider names that differ from the normalised provider.
PROVIDER_ALIASES = {
    "bedrock_converse": "bedrock",
    "text-completion-openai": "openai",
    "azure_text": "azure",
    "cohere_chat": "cohere",
    "fireworks_ai-embedding-models": "fireworks_ai",
    "together_ai-embedding-models": "together_ai",
    "vertex_ai_beta": "vertex_ai",
}

# Providers kept only for some modes (Cohere's embeddings are priced per LiteLLM provider
# `cohere`, its chat models as `cohere_chat`; the catalog takes chat only).
PROVIDER_MODES = {"cohere": ("chat",)}

# Prefixes LiteLLM puts in front of the id the provider's own API expects. Azure keeps its
# prefix: Azure deployments reuse OpenAI's model names, so `azure/gpt-4o` stays distinct from
# OpenAI's `gpt-4o` (gw looks up `<kind>/<model>` after the bare name).
STRIP_PREFIX = {
    "openai": "openai/",
    "anthropic": "anthropic/",
    "gemini": "gemini/",
    "bedrock": "bedrock/",
    "mistral": "mistral/",
    "deepseek": "deepseek/",
    "xai": "xai/",
    "cohere": "cohere_chat/",
    "perplexity": "perplexity/",
    "groq": "groq/",
    "together_ai": "together_ai/",
    "fireworks_ai": "fireworks_ai/",
    "openrouter": "openrouter/",
}

# Keys that are price buckets, not models (`together-ai-up-to-4b`, `fireworks-ai-56b-to-176b`).
BUCKET_KEY = re.compile(r"^(together-ai|fireworks-ai)-")

# LiteLLM flag -> capability name in the catalog.
CAPABILITIES = {
    "supports_function_calling": "tools",
    "supports_vision": "vision",
    "supports_response_schema": "response_schema",
    "supports_reasoning": "reasoning",
    "supports_prompt_caching": "prompt_caching",
    "supports_audio_input": "audio_input",
    "supports_pdf_input": "pdf_input",
    "supports_web_search": "web_search",
}

TIERS = ("flex", "priority")

MILLION = 10**6
# Wide enough that every product below is exact; Inexact traps if one ever is not.
EXACT = decimal.Context(prec=100, traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow])


def normalise_provider(litellm_provider: str) -> str:
    """LiteLLM's `litellm_provider` -> the catalog's provider name."""
    p = litellm_provider.strip()
    if p in PROVIDER_ALIASES:
        return PROVIDER_ALIASES[p]
    if p.startswith("vertex_ai"):  # vertex_ai-language-models, vertex_ai-anthropic_models, ...
        return "vertex_ai"
    if p.startswith("text-completion-"):  # text-completion-openai, text-completion-codestral
        return p[len("text-completion-"):]
    return p


def per_mtok(value) -> decimal.Decimal | None:
    """USD per token (a Decimal or int from the JSON) -> USD per million tokens, exactly.

    None for a value that is not a number (missing, bool, text, NaN, infinite)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        value = decimal.Decimal(value)
    if not isinstance(value, decimal.Decimal) or not value.is_finite():
        return None
    return EXACT.multiply(value, decimal.Decimal(MILLION))


def fmt_decimal(d: decimal.Decimal) -> str:
    """Plain decimal notation: no exponent, no trailing zeros, "0" for zero."""
    if d.is_zero():
        return "0"
    return format(EXACT.normalize(d), "f")


def token_count(value) -> int | None:
    """A token limit as an int (LiteLLM has a few as floats or strings); None if unusable."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, decimal.Decimal):
        return int(value) if value.is_finite() and value == value.to_integral_value() and value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip()) or None
    return None


def model_name(key: str, provider: str) -> str:
    """The id the provider's API expects (Azure keeps LiteLLM's `azure/` key, see STRIP_PREFIX)."""
    prefix = STRIP_PREFIX.get(provider)
    if prefix and key.startswith(prefix):
        return key[len(prefix):]
    return key


def price_fields(spec: dict, suffix: str = "") -> dict:
    """The catalog price fields of one LiteLLM entry (standard prices, or a tier's with suffix
    `_priority` / `_flex`); only the fields LiteLLM has, as Decimals."""
    names = {
        "input_per_mtok": "input_cost_per_token",
        "output_per_mtok": "output_cost_per_token",
        "cached_input_per_mtok": "cache_read_input_token_cost",
        "cache_write_per_mtok": "cache_creation_input_token_cost",
        "reasoning_per_mtok": "output_cost_per_reasoning_token",
    }
    out = {}
    for field, litellm_field in names.items():
        if litellm_field + suffix in spec:
            v = per_mtok(spec[litellm_field + suffix])
            if v is not None:
                out[field] = v
    return out


class Stats:
    def __init__(self) -> None:
        self.skipped = Counter()  # reason -> count
        self.kept = Counter()  # (provider, mode) -> count
        self.collisions = 0
        self.collision_price_differs = []  # (name, winner key, loser key)
        self.cross_provider = []  # (name, winner provider, loser provider)
        self.partial_tiers = []  # (key, tier, filled fields)
        self.no_context_window = 0


def convert_entry(key: str, spec: dict, stats: Stats) -> dict | None:
    """One LiteLLM entry -> a catalog entry (without its name), or None if it is not kept."""
    provider = normalise_provider(str(spec.get("litellm_provider", "")))
    mode = spec.get("mode")
    out = {"provider": provider, "mode": mode, "litellm_key": key}
    std = price_fields(spec)
    if "input_per_mtok" not in std or "output_per_mtok" not in std:
        stats.skipped["no input or output price"] += 1
        return None
    if any(v < 0 for v in std.values()):
        stats.skipped["negative price"] += 1
        return None
    for field, v in std.items():
        out[field] = fmt_decimal(v)

    tiers = {}
    for tier in TIERS:
        t = price_fields(spec, "_" + tier)
        t = {f: v for f, v in t.items() if f in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")}
        if "input_per_mtok" not in t and "output_per_mtok" not in t:
            continue  # no tier prices (a tier with only a cached price is not a tier)
        if any(v < 0 for v in t.values()):
            stats.skipped[f"negative {tier} price (tier dropped)"] += 1
            continue
        filled = []
        for f in ("input_per_mtok", "output_per_mtok"):
            if f not in t:  # a missing tier price means the standard one (LiteLLM's own reading)
                t[f] = std[f]
                filled.append(f)
        if filled:
            stats.partial_tiers.append((key, tier, filled))
        tiers[tier] = {f: fmt_decimal(v) for f, v in t.items()}
    if tiers:
        out["tiers"] = tiers

    window = token_count(spec.get("max_input_tokens")) or token_count(spec.get("max_tokens"))
    out["context_window"] = window
    out["max_output_tokens"] = token_count(spec.get("max_output_tokens"))
    out["capabilities"] = sorted(cap for flag, cap in CAPABILITIES.items() if spec.get(flag) is True)
    return out


def select(key: str, spec, as_of: str, stats: Stats) -> tuple[str, str] | None:
    """(provider, output name) if the entry is one the catalog takes, else None (and why)."""
    if key == "sample_spec" or not isinstance(spec, dict):
        stats.skipped["sample_spec / not an entry"] += 1
        return None
    mode = spec.get("mode")
    if mode not in MODES:
        stats.skipped["mode not chat/embedding"] += 1
        return None
    provider = normalise_provider(str(spec.get("litellm_provider", "")))
    if provider not in PROVIDERS or mode not in PROVIDER_MODES.get(provider, MODES):
        stats.skipped["provider not in catalog"] += 1
        return None
    if BUCKET_KEY.match(key):
        stats.skipped["price bucket, not a model"] += 1
        return None
    dep = spec.get("deprecation_date")
    if isinstance(dep, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", dep.strip()) and dep.strip() < as_of:
        stats.skipped["deprecated before " + as_of] += 1
        return None
    name = model_name(key, provider)
    if provider == "bedrock" and "/" in name:
        # bedrock/<region>/<model>, bedrock/<region>/<n>-month-commitment/<model>: regional or
        # provisioned-throughput prices, which a model name alone cannot select.
        stats.skipped["bedrock regional / commitment entry"] += 1
        return None
    return provider, name


def rank(provider: str, key: str, name: str) -> tuple:
    """Sort key choosing among entries with the same output name: first-party provider, then
    provider precedence, then the entry LiteLLM keys by the bare name, then the key itself."""
    return (provider not in FIRST_PARTY, PROVIDERS.index(provider), key != name, key)


def convert(data: dict, source: dict, as_of: str, stats: Stats | None = None) -> dict:
    """LiteLLM's JSON (parsed with Decimal floats) -> the catalog document."""
    stats = stats if stats is not None else Stats()
    candidates: dict[str, list] = {}
    for key in sorted(data):
        spec = data[key]
        sel = select(key, spec, as_of, stats)
        if sel is None:
            continue
        provider, name = sel
        entry = convert_entry(key, spec, stats)
        if entry is None:
            continue
        candidates.setdefault(name, []).append(entry)

    models = {}
    for name in sorted(candidates):
        entries = sorted(candidates[name], key=lambda e: rank(e["provider"], e["litellm_key"], name))
        win = entries[0]
        for lose in entries[1:]:
            stats.collisions += 1
            if lose["provider"] != win["provider"]:
                stats.cross_provider.append((name, win["provider"], lose["provider"]))
            if any(lose.get(f) != win.get(f) for f in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")):
                stats.collision_price_differs.append((name, win["litellm_key"], lose["litellm_key"]))
        models[name] = win
        stats.kept[(win["provider"], win["mode"])] += 1
        if win["context_window"] is None:
            stats.no_context_window += 1
    return {"source": dict(source, as_of=as_of), "models": models}


def dumps(doc: dict) -> str:
    """Deterministic JSON: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def load_json_bytes(raw: bytes) -> dict:
    return json.loads(raw.decode("utf-8"), parse_float=decimal.Decimal)


def read_wheel(path: Path) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read(JSON_IN_PACKAGE)


def version_from_wheel(path: Path) -> str | None:
    m = re.match(r"^litellm-([^-]+)-", path.name)
    return m.group(1) if m else None


def download_wheel(version: str, into: str) -> Path:
    """`pip download litellm==VERSION --no-deps` into a directory; wheels only, so no package
    code runs (an sdist would be built to read its metadata)."""
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={version}", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", into]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    wheels = sorted(Path(into).glob(f"{PACKAGE}-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"pip downloaded no {PACKAGE} {version} wheel into {into}")
    return wheels[0]


def print_summary(doc: dict, stats: Stats, size: int, out: Path) -> None:
    src = doc["source"]
    print(f"source: {src['package']} {src['version']} sha256 {src['sha256']} (deprecations before {src['as_of']} dropped)")
    print(f"wrote {out} ({size} bytes, {len(doc['models'])} models)")
    providers = sorted({p for p, _ in stats.kept})
    print(f"{'provider':<14}{'chat':>6}{'embed':>7}")
    for p in providers:
        print(f"{p:<14}{stats.kept[(p, 'chat')]:>6}{stats.kept[(p, 'embedding')]:>7}")
    chat = sum(n for (p, m), n in stats.kept.items() if m == "chat")
    emb = sum(n for (p, m), n in stats.kept.items() if m == "embedding")
    fp = sum(n for (p, m), n in stats.kept.items() if m == "chat" and p in FIRST_PARTY)
    print(f"{'total':<14}{chat:>6}{emb:>7}   (first-party chat: {fp})")
    print("skipped:")
    for reason, n in sorted(stats.skipped.items()):
        print(f"  {n:>5}  {reason}")
    print(f"name collisions: {stats.collisions} (kept first-party / preferred entry); "
          f"{len(stats.cross_provider)} across providers, {len(stats.collision_price_differs)} with different prices")
    for name, w, l in stats.cross_provider:
        print(f"    {name}: kept {w}, dropped {l}")
    for name, w, l in stats.collision_price_differs:
        print(f"    {name}: prices differ, kept {w}, dropped {l}")
    if stats.partial_tiers:
        print(f"tiers with a missing price (filled from the standard price): {len(stats.partial_tiers)}")
        for key, tier, filled in stats.partial_tiers:
            print(f"    {key} {tier}: {', '.join(filled)}")
    print(f"models without a context window: {stats.no_context_window}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", nargs="?", help="LiteLLM's model_prices JSON, or a litellm wheel")
    ap.add_argument("--from-pypi", nargs="?", const=DEFAULT_VERSION, metavar="VERSION",
                    help=f"download the litellm wheel with pip and read the JSON from it (default {DEFAULT_VERSION})")
    ap.add_argument("--version", help="litellm version the input JSON file comes from (recorded in the output)")
    ap.add_argument("--as-of", default=datetime.date.today().isoformat(), metavar="YYYY-MM-DD",
                    help="drop entries deprecated before this date (default: today)")
    ap.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT), help=f"default {DEFAULT_OUTPUT}")
    ap.add_argument("--max-bytes", type=int, default=1_572_864, help="fail if the output is larger (default 1.5 MiB)")
    ap.add_argument("--min-chat", type=int, default=100,
                    help="fail if fewer chat models come out, a sign the input is not the full list (default 100)")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.as_of):
        ap.error("--as-of must be YYYY-MM-DD")
    if args.input and args.from_pypi:
        ap.error("give an input file or --from-pypi, not both")
    if not args.input and not args.from_pypi:
        args.from_pypi = DEFAULT_VERSION

    if args.from_pypi:
        version = args.from_pypi
        with tempfile.TemporaryDirectory(prefix="gw-litellm-") as tmp:
            wheel = download_wheel(version, tmp)
            raw = read_wheel(wheel)
    else:
        path = Path(args.input)
        if path.suffix in (".whl", ".zip"):
            raw = read_wheel(path)
            version = args.version or version_from_wheel(path) or "unknown"
        else:
            raw = path.read_bytes()
            version = args.version or "unknown"

    source = {
        "name": SOURCE_NAME,
        "license": SOURCE_LICENSE,
        "package": PACKAGE,
        "version": version,
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    stats = Stats()
    doc = convert(load_json_bytes(raw), source, args.as_of, stats)
    text = dumps(doc)
    size = len(text.encode("utf-8"))
    chat = sum(1 for e in doc["models"].values() if e["mode"] == "chat")
    if chat < args.min_chat:
        raise SystemExit(f"only {chat} chat models (--min-chat {args.min_chat}): the input does not look like LiteLLM's price list")
    if size > args.max_bytes:
        raise SystemExit(f"catalog is {size} bytes, over --max-bytes {args.max_bytes}: restrict PROVIDERS")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    os.replace(tmp, out)
    print_summary(doc, stats, size, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
