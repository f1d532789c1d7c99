"""Real servers the tests start on this machine: a DNS server (dnslib) answering TXT records the
tests publish, an SMTP server (aiosmtpd) keeping what it receives, and a webhook receiver."""

import email
import http.server
import json
import email.policy
import socket
import threading
import time

from aiosmtpd.controller import Controller
from dnslib import A, QTYPE, RCODE, RR, TXT
from dnslib.server import BaseResolver, DNSServer


class Zone(BaseResolver):
    """TXT and A records by name; a name with neither is NXDOMAIN (a name with only one kind
    answers the other with no records)."""

    def __init__(self):
        self.txt = {}
        self.a = {}
        self.lock = threading.Lock()
        self.questions = []

    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        qtype = request.q.qtype
        with self.lock:
            self.questions.append((name, QTYPE[qtype]))
            known = name in self.txt or name in self.a
            if qtype == QTYPE.TXT:
                answers = [RR(request.q.qname, QTYPE.TXT, rdata=TXT(v), ttl=0) for v in self.txt.get(name, [])]
            elif qtype == QTYPE.A:
                answers = [RR(request.q.qname, QTYPE.A, rdata=A(v), ttl=0) for v in self.a.get(name, [])]
            else:
                answers = []
        for rr in answers:
            reply.add_answer(rr)
        if not known:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


class Dns:
    """A DNS server on 127.0.0.1 (UDP and TCP, one port)."""

    def __init__(self):
        self.zone = Zone()
        self.port = free_port()
        self.udp = DNSServer(self.zone, port=self.port, address="127.0.0.1")
        self.tcp = DNSServer(self.zone, port=self.port, address="127.0.0.1", tcp=True)

    def __enter__(self):
        self.udp.start_thread()
        self.tcp.start_thread()
        return self

    def __exit__(self, *exc):
        self.udp.stop()
        self.tcp.stop()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def point(self, name, *addresses):
        """Makes `name` resolve to these IPv4 addresses (replacing what it resolved to)."""
        with self.zone.lock:
            self.zone.a[name.lower()] = list(addresses)

    def publish(self, name, value):
        with self.zone.lock:
            self.zone.txt.setdefault(name.lower(), []).append(value)

    def withdraw(self, name):
        with self.zone.lock:
            self.zone.txt.pop(name.lower(), None)


class _Inbox:
    def __init__(self):
        self.messages = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.lock:
            self.messages.append((list(envelope.rcpt_tos), msg))
        return "250 OK"


class Smtp:
    """An SMTP server on 127.0.0.1 keeping every message it receives."""

    def __init__(self):
        self.inbox = _Inbox()
        self.port = free_port()
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)

    def __enter__(self):
        self.controller.start()
        return self

    def __exit__(self, *exc):
        self.controller.stop()

    @property
    def url(self):
        return f"smtp://127.0.0.1:{self.port}"

    def wait_for(self, to, subject_contains, timeout=30):
        """The first message to `to` whose subject contains the words: (subject, text body)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.inbox.lock:
                for rcpts, msg in self.inbox.messages:
                    if to.lower() in [r.lower() for r in rcpts] and subject_contains in str(msg["subject"]):
                        return str(msg["subject"]), msg.get_content()
            time.sleep(0.1)
        raise AssertionError(f"no mail to {to} about {subject_contains!r} within {timeout} s")

    def count_to(self, to, subject_contains=""):
        with self.inbox.lock:
            return sum(1 for rcpts, msg in self.inbox.messages
                       if to.lower() in [r.lower() for r in rcpts] and subject_contains in str(msg["subject"]))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, socket.socket() as t:
        # One port free for both UDP and TCP.
        for _ in range(50):
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                u.bind(("127.0.0.1", port))
                return port
            except OSError:
                t.close()
                t = socket.socket()
        raise RuntimeError("no free port")


class Receiver:
    """A webhook receiver on loopback that records every request (headers, body) and answers
    `status` (changeable), with a `Location` header when `location` is set, or holds each request
    while `hang` is set."""

    def __init__(self, status=200, location=None):
        self.requests = []
        self.status = status
        self.location = location
        self.hang = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer.lock:
                    outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                while outer.hang.is_set():
                    time.sleep(0.05)
                self.send_response(outer.status)
                if outer.location:
                    self.send_header("Location", outer.location)
                self.end_headers()
                self.wfile.write(b"received")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait(self, n, timeout=20):
        """The `n`th request (1-based), once it has arrived."""
        deadline = time.time() + timeout
        while len(self.requests) < n and time.time() < deadline:
            time.sleep(0.05)
        assert len(self.requests) >= n, f"{len(self.requests)} of {n} deliveries arrived"
        return self.requests[n - 1]

    def of_type(self, event_type, timeout=20):
        """The first delivery of `event_type`: (headers, body, parsed body)."""
        deadline = time.time() + timeout
        while True:
            with self.lock:
                for headers, body in self.requests:
                    parsed = json.loads(body)
                    if parsed["type"] == event_type:
                        return headers, body, parsed
            assert time.time() < deadline, f"no {event_type} delivery arrived"
            time.sleep(0.05)

    def close(self):
        self.hang.clear()
        self.server.shutdown()
