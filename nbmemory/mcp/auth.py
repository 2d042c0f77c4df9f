"""The bearer token of ``nbmemory mcp --http``: every HTTP request must carry it.

A local port can be reached by any process of any user on the machine, so the streamable HTTP
server answers only requests with ``Authorization: Bearer <token>``. The token is
``$NBMEMORY_MCP_TOKEN`` when set, else the content of a token file (``--token-file``, default
``mcp-token`` beside the memory file), generated with :func:`secrets.token_urlsafe` on first use
and stored 0600. stdio needs none: the client started the server and holds its pipes.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbmemory import private
from nbmemory.errors import ConfigError

__all__ = ["TOKEN_ENV", "BearerAuth", "Token", "load_token"]

TOKEN_ENV = "NBMEMORY_MCP_TOKEN"
#: Fewer characters than this is guessable: refused from the variable or a file.
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Token:
    """The token in use: its ``value``, where it came from, and whether it was just generated."""

    value: str
    source: str
    generated: bool = False


def load_token(token_file: Path) -> Token:
    """``$NBMEMORY_MCP_TOKEN``, else the token stored in ``token_file``, generated when missing.

    Raises
    ------
    ConfigError
        The variable or the file holds a token that is too short, or the file cannot be read
        or written.
    """
    raw = os.environ.get(TOKEN_ENV)
    if raw is not None and raw.strip():
        return Token(_checked(raw.strip(), TOKEN_ENV), TOKEN_ENV)
    path = Path(token_file).expanduser()
    try:
        generated = _create(path)
        private.narrow_all([path], f"the MCP token {path}")
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"MCP token file {path}: {exc}; give another with --token-file") from None
    return Token(_checked(value, str(path)), str(path), generated)


def _create(path: Path) -> bool:
    """Write a new token to ``path`` (0600) unless one is there; True if this wrote it."""
    private.make_dir(path.parent)
    try:
        # O_EXCL: two servers started at once both end up with the one token written first.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, private.FILE_MODE)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return True


def _checked(value: str, source: str) -> str:
    if len(value) < MIN_TOKEN_CHARS or not value.isascii() or not value.isprintable() or " " in value:
        raise ConfigError(
            f"the MCP token from {source} must be at least {MIN_TOKEN_CHARS} printable ASCII "
            "characters without spaces: delete the file to have one generated, or set another"
        )
    return value


class BearerAuth:
    """ASGI middleware: an HTTP request without the right bearer token gets 401 and goes no
    further (its body is never read); the comparison takes constant time. Lifespan events pass."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode("ascii")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if self.allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (
            b'{"error": "unauthorized", "error_description": "send the header Authorization: Bearer '
            b'<token> (nbmemory mcp --show-token prints it)"}'
        )
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="nbmemory"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def allowed(self, scope: dict[str, Any]) -> bool:
        """Whether the request's first ``Authorization`` header is ``Bearer <the token>``."""
        header = next((v for k, v in scope.get("headers", ()) if k.lower() == b"authorization"), b"")
        scheme, _, given = bytes(header).strip().partition(b" ")
        # Compared even when the scheme is wrong, so the time taken says nothing either way.
        same = hmac.compare_digest(given.strip(), self._token)
        return scheme.lower() == b"bearer" and same
