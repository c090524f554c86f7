"""Who may open a session, and who a connection is for.

/ws and /v1/realtime are refused at the handshake, before a session exists, for a browser page
of a foreign origin and, when the server has a token (always off loopback), for a client without
it. The client's address, which the per-client session cap counts, is the peer's, or behind a
trusted proxy the one its X-Forwarded-For names.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request

from dllm_voice.app.config import ConfigError, ServerConfig
from dllm_voice.app.conversation.events import brief

_LOOPBACK_NAMES = ("localhost", "localhost.", "ip6-localhost")
INSECURE_KEY_PREFIX = "openai-insecure-api-key."

Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or name to listen on, or a URL's host) is this machine only."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def access_token(scfg: ServerConfig) -> str:
    """The token /ws requires: the configured one; none on loopback; else a fresh random one
    (printed in the URL at start, as Jupyter does)."""
    if scfg.token or is_loopback(scfg.host):
        return scfg.token
    return secrets.token_urlsafe(24)


def refusal(request: Request, token: str, allowed_origins: tuple[str, ...]) -> str | None:
    """Why a /ws handshake is refused, or None: a wrong or missing token, a foreign origin."""
    for name in ("Authorization", "Origin", "Host"):  # no browser or proxy sends two
        if len(request.headers.get_all(name)) > 1:
            return f"more than one {name} header"
    if token:
        query = parse_qs(urlsplit(request.path).query).get("token", [""])[0]
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        given = query or bearer or subprotocol_key(request)
        if not hmac.compare_digest(given.encode(), token.encode()):
            return (
                "wrong token"
                if given
                else "missing token (?token=... or an Authorization: Bearer key)"
            )
    origin = request.headers.get("Origin")
    # A client that sends no Origin is not a browser, which is what Origin guards against.
    if origin is None or origin in allowed_origins:
        return None
    try:
        parts = urlsplit(origin)
        host = parts.hostname or ""
    except ValueError:
        host = ""
    if host and is_loopback(host):
        return None
    # The page's own origin only with a token: without one, the server listens on loopback
    # and a page under another name that reaches it is DNS rebinding.
    if host and token and parts.netloc == request.headers.get("Host"):
        return None
    return f"origin {brief(origin)} not allowed (server.allowed_origins)"


def subprotocol_key(request: Request) -> str:
    """The key a browser's Realtime client passes as the subprotocol
    ``openai-insecure-api-key.<key>`` (a browser cannot set Authorization on a websocket)."""
    offered = ",".join(request.headers.get_all("Sec-WebSocket-Protocol"))
    for name in offered.split(","):
        if name.strip().startswith(INSECURE_KEY_PREFIX):
            return name.strip().removeprefix(INSECURE_KEY_PREFIX)
    return ""


def trusted_networks(proxies: tuple[str, ...]) -> Networks:
    """`server.trusted_proxies` parsed, or a one-line ConfigError naming the bad entry."""
    try:
        return tuple(ipaddress.ip_network(p.strip(), strict=False) for p in proxies)
    except ValueError as exc:
        raise ConfigError(
            f"server.trusted_proxies: {exc} (give addresses or networks, e.g. 127.0.0.1, "
            "10.0.0.0/8)"
        ) from None


def client_address(peer: str, forwarded: str | None, proxies: Networks) -> str:
    """The client's address (what the per-client session cap counts): the peer's, or, when
    the peer is a trusted proxy, the nearest address in X-Forwarded-For that is not one. Each
    proxy appends the address it was reached from, so only the entries right of the first
    untrusted one are proxies' words; whatever a client wrote further left is not believed."""
    hops = [peer, *(h.strip() for h in reversed((forwarded or "").split(",")) if h.strip())]
    for hop in hops[:-1]:
        try:
            trusted = any(ipaddress.ip_address(hop) in net for net in proxies)
        except ValueError:
            trusted = False
        if not trusted:
            return hop
    return hops[-1]


def connection_client(
    connection: ServerConnection, request: Request | None, proxies: Networks
) -> str:
    """Who the connection is for: its peer, or the client a trusted proxy names."""
    address = connection.remote_address
    peer = str(address[0]) if address else ""
    # Several header lines are one list, in order (RFC 9110, 5.3).
    forwarded = ", ".join(request.headers.get_all("X-Forwarded-For")) if request else None
    return client_address(peer, forwarded, proxies)
