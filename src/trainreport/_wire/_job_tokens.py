"""Per-job tokens of the reference server: issued from a server secret, checked without storage.

A job token lets its holder read and write one job and nothing else
(``docs/server.md``, "Tokens"). It is derived from a secret only the server
(and whoever issues tokens) knows, so the server stores nothing per token::

    trj1.<job>.<expires>.<signature>

- ``trj1``: the format and its version.
- ``<job>``: the job id, base64url without padding (job ids may contain ``.``).
- ``<expires>``: when the token stops working, in whole seconds since the Unix
  epoch (UTC), or ``0`` for never; canonical decimal, no leading zeros.
- ``<signature>``: base64url without padding of
  ``HMAC-SHA256(secret, "trainreport job token\\n" + "trj1.<job>.<expires>")``,
  so neither the job nor the expiry can be changed without the secret.

Pure (no I/O, no clock: ``now`` comes in as an argument) and free of the
server's dependencies, so ``trainreport token`` runs without the ``server``
extra.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from datetime import datetime, timezone
from pathlib import Path

import attrs

from trainreport._wire._protocol import ID_PATTERN

__all__ = [
    "MAX_TOKEN_CHARS",
    "MIN_SECRET_BYTES",
    "TOKEN_PREFIX",
    "JobToken",
    "TokenRefusedError",
    "check_secret",
    "issue_job_token",
    "looks_like_job_token",
    "read_secret_file",
    "verify_job_token",
]

#: The first field of every job token: the format and its version.
TOKEN_PREFIX = "trj1"  # noqa: S105 - a format tag, not a secret
#: A server secret shorter than this (in bytes, surrounding whitespace stripped) is refused.
MIN_SECRET_BYTES = 32
#: Longest credential looked at; anything longer is malformed before any work is done.
MAX_TOKEN_CHARS = 512

_DOMAIN = b"trainreport job token\n"
_B64URL_RE = re.compile(r"[A-Za-z0-9_-]+")
_EXPIRES_RE = re.compile(r"0|[1-9][0-9]{0,11}")
_SIGNATURE_CHARS = 43  # 32 bytes of HMAC-SHA256, base64url without padding


@attrs.frozen
class JobToken:
    """A verified job token.

    Args:
        job_id: the one job its holder may read and write.
        expires_at: seconds since the Unix epoch after which it is refused,
            or ``None`` when it never expires.
    """

    job_id: str
    expires_at: int | None


class TokenRefusedError(Exception):
    """A job token that does not verify; the message says why and never contains the token."""


def read_secret_file(path: str | Path) -> bytes:
    """Read a server secret: the file's bytes with surrounding whitespace stripped.

    Args:
        path: the file, e.g. made with ``openssl rand -hex 32 > secret``.

    Returns:
        The secret, at least :data:`MIN_SECRET_BYTES` bytes.

    Raises:
        OSError: the file cannot be read.
        ValueError: the secret is shorter than :data:`MIN_SECRET_BYTES` bytes.
    """
    secret = Path(path).read_bytes().strip()
    check_secret(secret)
    return secret


def check_secret(secret: bytes) -> None:
    """Refuse a secret shorter than :data:`MIN_SECRET_BYTES` bytes (``ValueError``)."""
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"the secret has {len(secret)} bytes; at least {MIN_SECRET_BYTES} are needed "
            "(make one with: openssl rand -hex 32)"
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Decode base64url without padding; ``ValueError`` for anything that is not canonical."""
    if _B64URL_RE.fullmatch(text) is None or len(text) % 4 == 1:
        raise ValueError("not base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:  # unused low bits set: a second spelling of the same bytes
        raise ValueError("not canonical base64url")
    return data


def _signature(secret: bytes, signed: str) -> bytes:
    return hmac.new(secret, _DOMAIN + signed.encode("ascii"), hashlib.sha256).digest()


def issue_job_token(secret: bytes, job_id: str, *, expires_at: int | None = None) -> str:
    """Issue a token that reads and writes ``job_id`` only.

    Args:
        secret: the server secret (at least :data:`MIN_SECRET_BYTES` bytes).
        job_id: the job, ``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$``.
        expires_at: seconds since the Unix epoch (UTC) after which the server
            refuses it, or ``None`` for a token that never expires.

    Returns:
        ``trj1.<job>.<expires>.<signature>`` (module docstring).

    Raises:
        ValueError: a short secret, a malformed job id, or an expiry that is
            not a positive whole number of seconds below 10**12.
    """
    check_secret(secret)
    if ID_PATTERN.fullmatch(job_id) is None:
        raise ValueError(f"a job id must match ^{ID_PATTERN.pattern}$")
    if expires_at is not None and not 0 < expires_at < 10**12:
        raise ValueError("expires_at must be a positive number of seconds since the epoch")
    signed = f"{TOKEN_PREFIX}.{_b64(job_id.encode('ascii'))}.{expires_at or 0}"
    return f"{signed}.{_b64(_signature(secret, signed))}"


def looks_like_job_token(credential: str) -> bool:
    """Whether a credential claims to be a job token (starts with ``trj1.``). Never raises."""
    return credential.startswith(TOKEN_PREFIX + ".")


def verify_job_token(secret: bytes, token: str, *, now: float) -> JobToken:
    """Check a job token's shape, signature (in constant time) and expiry.

    Args:
        secret: the server secret.
        token: the credential from ``Authorization: Bearer``.
        now: the current time, seconds since the Unix epoch.

    Returns:
        The job the token is for, and its expiry.

    Raises:
        TokenRefusedError: malformed, signed with another secret, or expired; the
            message says which (and never repeats the token).
    """
    parts = token.split(".") if len(token) <= MAX_TOKEN_CHARS else []
    if len(parts) != 4 or parts[0] != TOKEN_PREFIX:
        raise TokenRefusedError(
            "the job token is malformed: expected trj1.<job>.<expires>.<signature> "
            "as printed by `trainreport token`"
        )
    _, job_part, expires_part, signature_part = parts
    try:
        job_id = _unb64(job_part).decode("ascii")
        signature = _unb64(signature_part)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise TokenRefusedError("the job token is malformed: a field is not base64url") from None
    if (
        ID_PATTERN.fullmatch(job_id) is None
        or _EXPIRES_RE.fullmatch(expires_part) is None
        or len(signature_part) != _SIGNATURE_CHARS
    ):
        raise TokenRefusedError("the job token is malformed: a field is out of range")
    expected = _signature(secret, f"{TOKEN_PREFIX}.{job_part}.{expires_part}")
    if not hmac.compare_digest(signature, expected):
        raise TokenRefusedError("the job token was not issued with this server's secret")
    expires_at = int(expires_part) or None
    if expires_at is not None and now >= expires_at:
        when = datetime.fromtimestamp(expires_at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        raise TokenRefusedError(f"the job token expired at {when}; issue a new one")
    return JobToken(job_id=job_id, expires_at=expires_at)
