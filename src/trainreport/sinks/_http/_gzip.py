"""gzip of request bodies: python-isal's when it is installed, the standard library's otherwise.

Compression runs on the reporter thread, and every microsecond of it is GIL time taken
from training (docs/design.md#shape), so it is done only where it pays and as cheaply as
the output allows (docs/engine.md, "The cost of a send"):

* bodies of at most :data:`GZIP_MIN_BYTES` go uncompressed: below it gzip costs more
  CPU than the bytes it saves are worth (at one send per interval, 16 KiB a send is
  nothing on any link), measured by ``benchmarks/bench_send.py``;
* with the ``fast`` extra (``pip install "trainreport[fast]"``), python-isal's
  ``isal_zlib`` (Intel's ISA-L) compresses about 8x faster than zlib at its level 2,
  for output within a few per cent of zlib's level 6;
* without it, zlib at level 1: about 1.5x faster than level 6, for output about 10 %
  larger (bytes on the wire stay far under the final state's size).

Both write standard gzip (RFC 1952) that any server reads with ``gzip``/``zlib``; the
reference server does. Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "GZIP_MIN_BYTES",
    "ISAL_LEVEL",
    "ZLIB_LEVEL",
    "compressor",
    "gzip_isal",
    "gzip_zlib",
    "isal_available",
]

#: Bodies above this size (bytes, before compression) are gzip-compressed when allowed.
GZIP_MIN_BYTES: Final[int] = 16 * 1024
#: zlib's compression level (1: fastest; the output is ~10 % larger than level 6's).
ZLIB_LEVEL: Final[int] = 1
#: python-isal's compression level (0-3; 2 is its default and as fast as 1 here).
ISAL_LEVEL: Final[int] = 2
#: zlib's ``wbits`` for a gzip wrapper (header and CRC-32 trailer) around deflate.
_GZIP_WBITS: Final[int] = 31

_isal: Any
try:
    from isal import isal_zlib as _isal  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # the fast extra is optional
    _isal = None


def isal_available() -> bool:
    """python-isal is importable (the ``fast`` extra is installed)."""
    return _isal is not None


def gzip_zlib(body: bytes) -> bytes:
    """``body`` as gzip, by the standard library's zlib at :data:`ZLIB_LEVEL`. Never raises."""
    compress = zlib.compressobj(ZLIB_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return compress.compress(body) + compress.flush()


def gzip_isal(body: bytes) -> bytes:
    """``body`` as gzip, by python-isal at :data:`ISAL_LEVEL`.

    Raises:
        RuntimeError: python-isal is not installed (see :func:`isal_available`).
    """
    if _isal is None:
        raise RuntimeError("python-isal is not installed (pip install 'trainreport[fast]')")
    result: bytes = _isal.compress(body, ISAL_LEVEL, _GZIP_WBITS)
    return result


def compressor() -> Callable[[bytes], bytes]:
    """The fastest gzip this process has: :func:`gzip_isal` if installed, else :func:`gzip_zlib`."""
    return gzip_isal if _isal is not None else gzip_zlib
