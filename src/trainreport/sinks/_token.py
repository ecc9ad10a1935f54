"""TokenFile: a bearer token read from a file, again whenever the file changes.

Job systems rotate tokens in place (Kubernetes' projected service-account
tokens expire after about an hour; the kubelet swaps a symlink to a new file),
so a token is never cached for the run: the file is ``stat``-ed before every
request and read again when its modification time, size or inode changed.
"""

from __future__ import annotations

import os

__all__ = ["TokenFile"]


class TokenFile:
    """A token file, read lazily and again after every change.

    Args:
        path: the file's path.

    Not thread-safe (the reporter thread owns it). The token never appears in
    ``repr()``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._key: tuple[int, int, int] | None = None
        self._token: str | None = None

    def __repr__(self) -> str:
        return f"TokenFile({self.path!r})"

    @property
    def last(self) -> str | None:
        """The token read last (for scrubbing it out of messages), or ``None``."""
        return self._token

    def forget(self) -> None:
        """Read the file again on the next :meth:`read` even if it looks unchanged."""
        self._key = None

    def read(self) -> tuple[str | None, str | None]:
        """The current token (stripped; ``None`` when empty) and the error, if any.

        Returns:
            ``(token, None)``, or ``(None, error type name)`` when the file
            cannot be read. Never raises.
        """
        try:
            st = os.stat(self.path)
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if key != self._key:
                with open(self.path, encoding="utf-8") as handle:
                    self._token = handle.read().strip() or None
                self._key = key
        except (OSError, UnicodeDecodeError) as exc:
            self._key = None
            self._token = None
            return None, type(exc).__name__
        return self._token, None
