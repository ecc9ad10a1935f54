"""The reference server's error value: an HTTP status, a code and a message, rendered as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ApiError"]


class ApiError(Exception):
    """A request the server refuses; rendered as ``{"error": code, "message": ...}``.

    Args:
        status_code: the HTTP status, e.g. 400, 413, 422.
        code: the machine-readable error code (``docs/protocol.md``), e.g.
            ``"invalid_id"``.
        message: human-readable text; never contains a token.
        extra: further JSON fields of the error body (e.g. ``"path"``,
            ``"series_lengths"``).
    """

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.extra: dict[str, Any] = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """The JSON error body. Never raises."""
        return {"error": self.code, "message": self.message, **self.extra}
