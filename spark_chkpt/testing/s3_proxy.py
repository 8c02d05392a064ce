"""A small HTTP proxy in front of the test S3 server that makes it a worse store, on
purpose, for the tests that must see a store's fault:

- ``ProxyMode.IGNORE_IF_NONE_MATCH``: every request is forwarded without its
  ``If-None-Match`` header, so a ``PUT`` of a key that exists replaces it, as on a server
  that ignores conditional writes (s3proxy 2.6.0 did). The racing-writer tests run their
  race through it to show they can fail.
- ``ProxyMode.REJECT_CHECKSUMS``: a request that carries the newer AWS SDKs' request
  checksums (an ``x-amz-checksum-*`` or ``x-amz-sdk-checksum-algorithm`` header, an
  ``x-amz-trailer``, a ``STREAMING-...-TRAILER`` payload) is answered ``400
  InvalidArgument``, as
  stores that do not support them answer (Backblaze B2's words: "Unsupported header
  'x-amz-sdk-checksum-algorithm' received for this API call."); others are forwarded.

    with S3Server() as s3, StoreProxy(upstream=s3.endpoint, mode=ProxyMode.REJECT_CHECKSUMS) as p:
        ...  # clients given p.endpoint

It runs in the test process (a thread per connection): each request is read whole, sent
to the upstream server on a connection of its own, and its answer returned whole.
:attr:`StoreProxy.counts` counts what it saw (requests, stripped headers, refusals).
"""

from __future__ import annotations

import enum
import http.client
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from spark_chkpt.testing.processes import Started, free_port

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}
_CHECKSUM_HEADERS = ("x-amz-checksum-", "x-amz-sdk-checksum-algorithm", "x-amz-trailer")
REJECTED_HEADER_MESSAGE = "Unsupported header '{header}' received for this API call."


class ProxyMode(enum.Enum):
    IGNORE_IF_NONE_MATCH = "ignore-if-none-match"
    REJECT_CHECKSUMS = "reject-checksums"


def checksum_header(headers: dict[str, str]) -> str | None:
    """The first header of the newer SDKs' request checksums in ``headers`` (lower-case
    names), or None."""
    for name, value in headers.items():
        if name.startswith(_CHECKSUM_HEADERS):
            return name
        # (an aws-chunked body alone is SigV4's streaming signature, which Hadoop's S3A
        # sends over http whatever its checksum settings: older stores take it)
        if name == "x-amz-content-sha256" and value.upper().endswith("-TRAILER"):
            return f"x-amz-content-sha256: {value}"
    return None


class StoreProxy(Started):
    """The proxy on a free loopback port, forwarding to ``upstream`` (``http://h:p``)."""

    def __init__(self, *, upstream: str, mode: ProxyMode, host: str = "127.0.0.1") -> None:
        target = urllib.parse.urlsplit(upstream)
        if target.scheme != "http" or target.hostname is None or target.port is None:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self.upstream_host, self.upstream_port = target.hostname, target.port
        self.mode = mode
        self.host = host
        self.port = free_port(host)
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def start(self) -> StoreProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    parts: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                head = self.command == "HEAD"  # the length of what a GET would answer
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP and (
                        head or name.lower() != "content-length"
                    ):
                        self.send_header(name, value)
                if not head:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _forward(self) -> None:
                body = self._body()
                proxy.count("requests")
                headers = {k.lower(): v for k, v in self.headers.items()}
                if proxy.mode is ProxyMode.REJECT_CHECKSUMS:
                    found = checksum_header(headers)
                    if found is not None:
                        proxy.count("refused")
                        message = REJECTED_HEADER_MESSAGE.format(header=found.split(":")[0])
                        xml = (
                            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                            f"InvalidArgument</Code><Message>{message}</Message></Error>"
                        ).encode()
                        self._answer(400, [("Content-Type", "application/xml")], xml)
                        return
                forwarded = [
                    (k, v)
                    for k, v in self.headers.items()
                    if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
                ]
                if proxy.mode is ProxyMode.IGNORE_IF_NONE_MATCH:
                    kept = [(k, v) for k, v in forwarded if k.lower() != "if-none-match"]
                    if len(kept) != len(forwarded):
                        proxy.count("if-none-match stripped")
                    forwarded = kept
                upstream = http.client.HTTPConnection(
                    proxy.upstream_host, proxy.upstream_port, timeout=120
                )
                try:
                    upstream.putrequest(self.command, self.path, skip_host=True,
                                        skip_accept_encoding=True)  # fmt: skip
                    for name, value in forwarded:
                        upstream.putheader(name, value)
                    if body or self.command in ("PUT", "POST"):
                        upstream.putheader("Content-Length", str(len(body)))
                    upstream.endheaders(body or None)
                    response = upstream.getresponse()
                    answer = response.read()
                    proxy.count(f"status {response.status}")
                    self._answer(response.status, response.getheaders(), answer)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"s3-proxy-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
