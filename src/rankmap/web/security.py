"""What makes ``rankmap serve`` safe to expose: a token off loopback, a Host check, strict headers.

The dashboard shows every stored job's command lines, host names and environment, so:

* **Token.** A server bound to anything but loopback requires a bearer token on ``/api/*`` and
  ``/metrics`` (``Authorization: Bearer <token>``; 401 without it). The page and its static files
  carry no data and load without it; the page reads the token from the ``#token=`` part of the URL
  ``rankmap serve`` prints (never sent to the server, dropped from the address bar once read) or
  asks for it. Prometheus sends it with ``authorization: {credentials: <token>}``. A token given
  by hand must have ``MIN_TOKEN`` characters (:func:`check_token`); the one ``rankmap serve``
  makes has 32.
* **Guessing.** Wrong tokens slow their sender down (:class:`Backoff`): after ``FREE_FAILURES``
  of them, each further try from that address must wait twice as long as the one before (1 s,
  2 s, 4 s, ... up to a minute), and one that comes earlier is answered 429 with ``Retry-After``
  without its token being looked at: a guesser gets a handful of tries a minute, whatever it
  sends in parallel, where it had a thousand a second. The right token clears the count; ten
  minutes without a wrong one forget it. Behind a reverse proxy every client has the proxy's
  address, so one guesser slows everyone down there: a proxy should check a token of its own.
* **Host header.** A page of another site cannot read a loopback server thanks to the same-origin
  rule, unless that site's name is made to resolve to 127.0.0.1 (DNS rebinding): then the browser
  sends ``Host: evil.example``. Requests whose Host is not a name the server was bound to (or
  ``--allow-host``) are refused with 400. IP literals are accepted only if they are this machine's.
* **Headers.** A Content-Security-Policy that allows nothing but this origin (plotly needs inline
  styles, nothing else; ``script-src 'self'`` admits the page's ES modules and the modules they
  import, all served from ``/static``, and no inline or evaluated script), ``X-Frame-Options: DENY`` and ``frame-ancestors 'none'`` against
  click-jacking, ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Awaitable, Callable

from rankmap.errors import RankmapError

CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
PROTECTED = ("/api/", "/metrics")
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


MIN_TOKEN = 16          # characters of a token given by hand (new_token's have 32)
FREE_FAILURES = 5       # wrong tokens an address may send before it is slowed down


def new_token() -> str:
    return secrets.token_urlsafe(24)


def check_token(token: str, where: str) -> str:
    """A token given by hand (``where``: ``--token``, ``$RANKMAP_TOKEN``), refused when it is too
    short to stand guessing: 3 characters of the URL-safe alphabet are 260,000 tries."""
    if len(token) < MIN_TOKEN:
        raise RankmapError(f"{where}: a token of {len(token)} characters is too easily guessed; give one of at "
                           f"least {MIN_TOKEN}, or none for a random one (rankmap serve prints it)")
    return token


@dataclass
class Backoff:
    """Wrong tokens per client address, and how long each must wait before its next try counts.

    After ``free`` wrong tokens the wait is ``base_s`` x 2^(wrong - free) seconds after the last
    one, at most ``cap_s``; ``forget_s`` without a wrong token forgets the address. At most
    ``max_clients`` addresses are kept (the oldest go first), so the table stays small."""

    free: int = FREE_FAILURES
    base_s: float = 1.0
    cap_s: float = 60.0
    forget_s: float = 600.0
    max_clients: int = 4096
    clock: Callable[[], float] = time.monotonic
    _wrong: dict[str, tuple[int, float]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def wait_s(self, client: str) -> float:
        """Seconds ``client`` must still wait before a token of its is checked (0: now)."""
        now = self.clock()
        with self._lock:
            n, last = self._wrong.get(client, (0, 0.0))
            if n and now - last > self.forget_s:
                del self._wrong[client]
                return 0.0
        if n < self.free:
            return 0.0
        return max(0.0, last + min(self.cap_s, self.base_s * 2 ** (n - self.free)) - now)

    def failed(self, client: str) -> None:
        with self._lock:
            n, _ = self._wrong.pop(client, (0, 0.0))
            self._wrong[client] = (n + 1, self.clock())   # re-inserted: the newest last
            while len(self._wrong) > self.max_clients:
                del self._wrong[next(iter(self._wrong))]

    def passed(self, client: str) -> None:
        with self._lock:
            self._wrong.pop(client, None)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    ip = _ip(host)
    if ip is not None:
        return ip.is_loopback
    try:
        addrs = {i[4][0] for i in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(addrs) and all((a := _ip(x)) is not None and a.is_loopback for x in addrs)


@lru_cache(maxsize=256)
def is_local_address(text: str) -> bool:
    """True when ``text`` is an IP address of this machine (it can be bound to)."""
    ip = _ip(text)
    if ip is None:
        return False
    if ip.is_loopback:
        return True
    fam = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.bind((str(ip), 0))
        return True
    except OSError:
        return False


@dataclass
class Access:
    """Who may talk to the server: the bearer token (None: no token asked) and the Host names allowed."""

    token: str | None = None
    hosts: set[str] = field(default_factory=set)   # lower-case names / IP literals without port
    any_local_ip: bool = True                        # also accept IP literals of this machine
    backoff: Backoff = field(default_factory=Backoff)  # wrong tokens slow their sender down

    def host_ok(self, header: str | None) -> bool:
        if not header:
            return False
        h = header.strip().lower()
        if h.startswith("["):                         # [::1]:8000
            h = h[1:h.find("]")] if "]" in h else h
        elif h.count(":") == 1:                       # name:8000
            h = h.split(":", 1)[0]
        h = h.rstrip(".")
        if h in self.hosts:
            return True
        return self.any_local_ip and _ip(h) is not None and is_local_address(h)

    def token_ok(self, authorization: str | None) -> bool:
        if self.token is None:
            return True
        if not authorization or not authorization.lower().startswith("bearer "):
            return False
        return hmac.compare_digest(authorization[7:].strip().encode(), self.token.encode())


def access_for(bind: str, token: str | None, allow_hosts: list[str] | None = None) -> Access:
    """The access rules of a server bound to ``bind``: loopback needs no token unless one is given;
    anything else needs one (the caller generates it when the user gave none)."""
    hosts = {h.lower().rstrip(".") for h in (allow_hosts or [])} | LOOPBACK_NAMES | {"127.0.0.1", "::1"}
    b = bind.strip("[]").lower()
    if not is_loopback(bind):
        if not token:
            raise RankmapError(f"--host {bind}: a server reachable from other machines needs a token")
        hosts |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    if _ip(b) is None or not _ip(b).is_unspecified:
        hosts.add(b)
    return Access(token=token, hosts={h for h in hosts if h})


class Guard:
    """ASGI middleware: Host check on every request, token on protected paths, headers on every answer."""

    def __init__(self, app: Callable[..., Awaitable[None]], access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("path", "")
        if not self.access.host_ok(headers.get("host")):
            return await _plain(send, 400, "this server does not answer to that Host name "
                                           "(start rankmap serve with --allow-host NAME to add one)")
        if path.startswith(PROTECTED) and self.access.token is not None:
            client = (scope.get("client") or ("unknown",))[0]
            wait = self.access.backoff.wait_s(client)
            if wait > 0:   # not even looked at: a guesser gets no answer until its wait is over
                secs = math.ceil(wait)
                return await _plain(send, 429, f"too many wrong tokens from this address: try again in {secs} s",
                                    [(b"retry-after", str(secs).encode())])
            given = headers.get("authorization")
            if not self.access.token_ok(given):
                if given:  # a request without a token guesses nothing (the page's first one has none)
                    self.access.backoff.failed(client)
                return await _plain(send, 401, "this dashboard needs its token: Authorization: Bearer <token>",
                                    [(b"www-authenticate", b'Bearer realm="rankmap"')])
            self.access.backoff.passed(client)

        async def with_headers(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                have = {k.lower() for k, _ in msg.get("headers", [])}
                msg["headers"] = list(msg.get("headers", [])) + [h for h in HEADERS if h[0] not in have]
            await send(msg)

        await self.app(scope, receive, with_headers)


async def _plain(send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = ('{"detail": "%s"}' % text.replace('"', "'")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(extra or []), *HEADERS]})
    await send({"type": "http.response.body", "body": body})
