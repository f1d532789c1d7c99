"""OpenTelemetry traces: gw exports one server span per `/v1` request and one client span per
upstream attempt over OTLP/HTTP (protobuf) to a receiver this module starts, decoded with
OpenTelemetry's own protobuf definitions (PyPI `opentelemetry-proto`). The client's W3C
`traceparent` is continued and passed upstream through the attempt's span; the GenAI semantic
conventions' attributes and gw's own are there; prompt and answer text only when the organization
keeps bodies. With the receiver down, requests are unaffected and the dropped spans are counted."""

import json
import os
import re
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from conftest import Org, client, run_stack

PROMPT = "The secret word is marmalade; say hello."
# An OpenAI-compatible deployment whose requests the mock counts under their own tag (and keeps
# the `traceparent` of), and one whose first deployment always fails (a fallback: two attempts).
MODELS = """
[[providers]]
name = "otel-up"
kind = "openai"
base_url = "{mock}/k/tag=otel-up/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[providers]]
name = "otel-down"
kind = "openai"
base_url = "{mock}/k/status=503/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[models]]
name = "otel-model"
deployments = [{ provider = "otel-up", model = "gpt-4o-mini" }]
[[models]]
name = "otel-fallback"
deployments = [{ provider = "otel-down", model = "gpt-4o-mini" }, { provider = "otel-up", model = "gpt-4o-mini" }]
"""


class Receiver:
    """An OTLP/HTTP traces endpoint: every span it is sent, decoded."""

    def __init__(self):
        self.spans = []
        self.bodies = []
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                ok = self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
                if ok:
                    req = ExportTraceServiceRequest.FromString(body)
                    with receiver.cond:
                        receiver.bodies.append(body)
                        for rs in req.resource_spans:
                            for ss in rs.scope_spans:
                                receiver.spans.extend((rs.resource, s) for s in ss.spans)
                        receiver.cond.notify_all()
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 400)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def trace(self, trace_id, count, timeout=30):
        """The spans of one trace, once there are `count` of them."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [(r, s) for r, s in self.spans if s.trace_id == trace_id]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, f"{len(found)} of {count} spans of trace {trace_id.hex()} arrived"
                self.cond.wait(left)


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()


def telemetry(endpoint, **more):
    extra = "".join(f"{k} = {v}\n" for k, v in more.items())
    return f'[telemetry]\notlp_endpoint = "{endpoint}"\nexport_interval_ms = 50\n{extra}{MODELS}'


@pytest.fixture(scope="module")
def traced(receiver):
    yield from run_stack(GW_STACK_EXTRA=telemetry(receiver.url), GW_STACK_PROXY="audit_flush_interval_ms = 50\n")


def attrs(span):
    out = {}
    for kv in span.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = list(x.string_value for x in v.array_value.values) if kind == "array_value" else getattr(v, kind)
    return out


def client_parent():
    trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)
    return trace_id, span_id, f"00-{trace_id.hex()}-{span_id.hex()}-01"


def mock_stats(stack, tag):
    return httpx.get(f"{stack['mock']}/_mock/stats", params={"tag": tag}, timeout=10).json()


def test_a_chat_request_continues_the_client_trace_and_passes_it_upstream(traced, receiver):
    org = Org(traced)
    key = org.create_key()
    trace_id, parent, header = client_parent()
    c = client(traced, key["key"])
    r = c.chat.completions.create(model="otel-model", messages=[{"role": "user", "content": PROMPT}],
                                  max_tokens=40, extra_headers={"traceparent": header, "tracestate": "acme=7"})
    assert r.choices[0].message.content
    spans = receiver.trace(trace_id, 2)
    server = [s for _, s in spans if s.kind == Span.SPAN_KIND_SERVER]
    attempts = [s for _, s in spans if s.kind == Span.SPAN_KIND_CLIENT]
    assert len(server) == 1 and len(attempts) == 1
    req, up = server[0], attempts[0]
    assert req.parent_span_id == parent
    assert req.trace_state == "acme=7"
    assert up.parent_span_id == req.span_id and up.trace_id == trace_id
    assert req.name == "chat otel-model" and up.name == "chat gpt-4o-mini"
    assert req.start_time_unix_nano <= up.start_time_unix_nano <= up.end_time_unix_nano <= req.end_time_unix_nano
    a = attrs(req)
    usage = r.usage
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.system"] == "openai"
    assert a["gen_ai.request.model"] == "otel-model"
    assert a["gen_ai.response.model"] == "gpt-4o-mini"
    assert a["gen_ai.request.max_tokens"] == 40
    assert a["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert a["gen_ai.response.finish_reasons"] == [r.choices[0].finish_reason]
    assert a["gw.org_id"] == org.org_id
    assert a["gw.api_key_id"] == key["id"]
    assert re.fullmatch(r"[0-9a-f-]{36}", a["gw.request_id"])
    assert a["gw.cache.status"] in ("bypass", "miss")
    assert a["gw.policy.action"] == "none"
    assert a["gw.cost_usd"] > 0
    assert a["http.response.status_code"] == 200
    u = attrs(up)
    assert u["gw.provider"] == "otel-up" and u["gw.attempt.outcome"] == "ok"
    assert u["http.response.status_code"] == 200
    # The upstream got the trace, with gw's attempt span as its parent.
    seen = mock_stats(traced, "otel-up")["last_traceparent"]
    assert seen == f"00-{trace_id.hex()}-{up.span_id.hex()}-01"
    # Nothing the prompt or the answer said is in its spans: this organization keeps no bodies.
    for _, s in spans:
        encoded = s.SerializeToString()
        assert b"marmalade" not in encoded
        assert r.choices[0].message.content.encode() not in encoded
    resource = {kv.key: kv.value.string_value for kv in spans[0][0].attributes}
    assert resource["service.name"] == "gw-proxy"


def test_a_streamed_messages_request_and_a_fallback_are_traced(traced, receiver):
    org = Org(traced)
    key = org.create_key()["key"]
    trace_id, parent, header = client_parent()
    c = anthropic.Anthropic(api_key=key, base_url=traced["proxy"], max_retries=0)
    with c.messages.stream(model="otel-fallback", max_tokens=32, messages=[{"role": "user", "content": "hi"}],
                           extra_headers={"traceparent": header}) as s:
        final = s.get_final_message()
    assert final.stop_reason
    spans = [s for _, s in receiver.trace(trace_id, 3)]
    req = next(s for s in spans if s.kind == Span.SPAN_KIND_SERVER)
    failed, answered = sorted((s for s in spans if s.kind == Span.SPAN_KIND_CLIENT), key=lambda s: s.start_time_unix_nano)
    a = attrs(req)
    assert req.parent_span_id == parent
    assert a["url.path"] == "/v1/messages" and a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["gen_ai.usage.output_tokens"] == final.usage.output_tokens
    assert a["gw.attempts"] == 2
    f = attrs(failed)
    assert f["gw.provider"] == "otel-down" and f["http.response.status_code"] == 503
    assert f["error.type"] and failed.status.code == failed.status.STATUS_CODE_ERROR
    assert attrs(answered)["gw.provider"] == "otel-up"
    assert failed.parent_span_id == answered.parent_span_id == req.span_id
    assert failed.end_time_unix_nano <= answered.start_time_unix_nano


def test_a_request_without_a_traceparent_starts_its_own_trace(traced, receiver):
    org = Org(traced)
    key = org.create_key()["key"]
    r = httpx.post(f"{traced['proxy']}/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                   json={"model": "otel-model", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert r.status_code == 200
    request_id = r.headers["x-gw-request-id"]
    deadline = time.monotonic() + 30
    while True:
        with receiver.cond:
            mine = [s for _, s in receiver.spans if attrs(s).get("gw.request_id") == request_id]
            if mine or time.monotonic() > deadline:
                break
            receiver.cond.wait(1)
    assert len(mine) == 1
    assert mine[0].parent_span_id == b"" and len(mine[0].trace_id) == 16 and any(mine[0].trace_id)


def test_bodies_are_in_spans_only_when_the_organization_keeps_them(traced, receiver):
    org = Org(traced)
    r = org.http.patch("/api/v1/organizations/current", json={"log_bodies": True}, headers=org.auth())
    assert r.status_code == 200, r.text
    key = org.create_key()["key"]
    trace_id, _, header = client_parent()
    c = client(traced, key)
    # The organization's setting reaches the proxy through its lookup cache: retry until it does.
    for _ in range(60):
        c.chat.completions.create(model="otel-model", messages=[{"role": "user", "content": PROMPT}],
                                  extra_headers={"traceparent": header})
        spans = receiver.trace(trace_id, 2)
        bodies = [attrs(s).get("gw.request.body") for _, s in spans if s.kind == Span.SPAN_KIND_SERVER]
        if any(bodies):
            break
        time.sleep(0.5)
    body = next(b for b in bodies if b)
    assert "marmalade" in body
    answer = next(attrs(s)["gw.response.body"] for _, s in spans if attrs(s).get("gw.request.body"))
    assert json.loads(answer)["object"] == "chat.completion"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def receiver_down():
    # Nothing listens there; a queue of 4 spans fills at once.
    endpoint = f"http://127.0.0.1:{free_port()}/v1/traces"
    yield from run_stack(GW_STACK_EXTRA=telemetry(endpoint, queue_spans=4, batch_spans=2))


def metric(stack, name):
    text = httpx.get(f"{stack['proxy_metrics']}/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_with_the_receiver_down_requests_are_unaffected_and_drops_are_counted(receiver_down):
    org = Org(receiver_down)
    key = org.create_key()["key"]
    c = client(receiver_down, key)
    _, _, header = client_parent()
    for i in range(30):
        r = c.chat.completions.with_raw_response.create(
            model="otel-model", messages=[{"role": "user", "content": f"hello {i}"}], extra_headers={"traceparent": header})
        assert r.http_response.status_code == 200
        assert r.parse().choices[0].message.content
    deadline = time.monotonic() + 30
    while metric(receiver_down, "gw_otel_spans_dropped_total") < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metric(receiver_down, "gw_otel_spans_dropped_total") >= 1
    assert metric(receiver_down, "gw_otel_spans_exported_total") == 0


def test_with_export_off_the_client_traceparent_goes_upstream_unchanged(stack, org):
    # The session's stack exports nothing; the mock counts the request under its body's tag.
    tag = f"otel-off-{secrets.token_hex(6)}"
    _, _, header = client_parent()
    r = client(stack, org.create_key()["key"]).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"traceparent": header, "tracestate": "acme=1"}, extra_body={"mock": {"tag": tag}})
    assert r.choices[0].message.content
    assert mock_stats(stack, tag)["last_traceparent"] == header
