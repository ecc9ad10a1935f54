"""Who may read and write what: the admin token, per-job tokens, and each endpoint's access rule.

Authentication (who is asking) runs in :class:`Authentication`, a middleware
in front of every protected path, before any body is read: a missing, wrong,
malformed or expired token is 401. Authorization (may they do this) runs per
endpoint, from the access rule the endpoint declares (:class:`Access`) and the
job id the router extracted from the path, before the handler reads a body: a
job token used on another job, or on something only the admin may do, is 403.
So a refused request writes nothing.

Without an admin token and without a secret every request is allowed, as on a
laptop (``trainreport serve`` says so loudly at start). The token format and
the threat model are in ``docs/server.md``, "Tokens".
"""

from __future__ import annotations

import enum
import hmac
import time
from collections.abc import Callable

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from trainreport._wire._job_tokens import (
    MAX_TOKEN_CHARS,
    TokenRefusedError,
    looks_like_job_token,
    verify_job_token,
)
from trainreport.server._wire import ApiError

__all__ = [
    "Access",
    "Authentication",
    "Authenticator",
    "Principal",
    "principal_of",
]

_SCOPE_KEY = "trainreport.principal"
#: ``WWW-Authenticate`` of every 401 (RFC 6750).
WWW_AUTHENTICATE = 'Bearer realm="trainreport"'


class Access(enum.Enum):
    """What an endpoint lets a caller do, declared beside its route."""

    #: Anyone (discovery, the contract, health checks, the page's HTML shells).
    OPEN = "open"
    #: The admin, or a job token for the job named in the path.
    JOB = "job"
    #: The admin sees every job; a job token sees its own job only (the handler filters).
    JOB_LIST = "job_list"
    #: Only the admin (cancelling a job).
    ADMIN = "admin"
    #: Only the admin when an admin token is set; anyone otherwise (``/metrics``).
    OPERATOR = "operator"


@attrs.frozen
class Principal:
    """Who a request comes from.

    Args:
        admin: the admin token (or no authentication configured at all).
        job_id: for a job token, the one job it may read and write; else ``None``.
    """

    admin: bool
    job_id: str | None = None

    def may_access_job(self, job_id: str) -> bool:
        """Whether this principal may read and write ``job_id``."""
        return self.admin or self.job_id == job_id


#: The principal of every request when the server has neither an admin token nor a secret.
UNRESTRICTED = Principal(admin=True)


class Authenticator:
    """Turns an ``Authorization`` header into a :class:`Principal`, or refuses it with 401.

    Args:
        admin_token: the admin token (reads and writes everything, cancels), or ``None``.
        secret: the secret job tokens are verified with, or ``None`` (no job tokens).
        clock: wall-clock seconds since the Unix epoch, for expiries.

    Thread-safe (no mutable state). Tokens are compared in constant time and
    never appear in an error message or a log.
    """

    def __init__(
        self,
        admin_token: str | None,
        secret: bytes | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._admin = admin_token.encode() if admin_token is not None else None
        self._secret = secret
        self._clock = clock

    @property
    def enabled(self) -> bool:
        """Whether any token is required at all (an admin token or a secret is set)."""
        return self._admin is not None or self._secret is not None

    @property
    def has_admin_token(self) -> bool:
        """Whether an admin token is set."""
        return self._admin is not None

    def authenticate(self, authorization: bytes | None) -> Principal:
        """The principal of a request with this ``Authorization`` header value.

        Raises:
            ApiError: 401 ``unauthorized``, the message saying what was wrong.
        """
        if not self.enabled:
            return UNRESTRICTED
        if authorization is None:
            raise _unauthorized("a token is needed: send 'Authorization: Bearer <token>'")
        scheme, _, raw = authorization.strip().partition(b" ")
        credential = raw.strip()
        if scheme.lower() != b"bearer" or not credential:
            raise _unauthorized("the Authorization header must be 'Bearer <token>'")
        if len(credential) > MAX_TOKEN_CHARS:
            raise _unauthorized("the token is malformed: it is too long")
        if self._admin is not None and hmac.compare_digest(credential, self._admin):
            return UNRESTRICTED
        try:
            text = credential.decode("ascii")
        except UnicodeDecodeError:
            raise _unauthorized("the token is malformed: it is not ASCII text") from None
        if not looks_like_job_token(text):
            raise _unauthorized(
                "the token was refused: it is neither the admin token nor a job token"
            )
        if self._secret is None:
            raise _unauthorized(
                "the token was refused: this server issues no job tokens (no --secret-file)"
            )
        try:
            token = verify_job_token(self._secret, text, now=self._clock())
        except TokenRefusedError as exc:
            raise _unauthorized(str(exc)) from None
        return Principal(admin=False, job_id=token.job_id)

    def authorize(self, principal: Principal | None, access: Access, job_id: str | None) -> None:
        """Refuse what ``access`` does not let ``principal`` do.

        Fails closed: on a server with tokens, a request that reached a
        non-open endpoint without being authenticated is 401.

        Args:
            principal: who asks (:func:`principal_of`), or ``None``.
            access: the endpoint's rule.
            job_id: the validated job id of the path, when the path names one.

        Raises:
            ApiError: 401 ``unauthorized`` without a principal; 403 ``forbidden``
                naming what the token may do instead.
        """
        if access is Access.OPEN or not self.enabled:
            return
        if access is Access.OPERATOR and not self.has_admin_token:
            return
        if principal is None:
            raise _unauthorized("a token is needed: send 'Authorization: Bearer <token>'")
        if principal.admin or access is Access.JOB_LIST:
            return
        if access is Access.JOB and job_id is not None and principal.may_access_job(job_id):
            return
        if access is Access.JOB:
            message = (
                f"this token is for job {principal.job_id!r} only; it may not use job {job_id!r}"
            )
        else:
            message = f"this needs the admin token; a job token (job {principal.job_id!r}) may not"
        raise ApiError(403, "forbidden", message)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


def principal_of(request: Request) -> Principal | None:
    """The principal :class:`Authentication` stored for this request, or ``None``."""
    principal = request.scope.get(_SCOPE_KEY)
    return principal if isinstance(principal, Principal) else None


class Authentication:
    """ASGI middleware: authenticates every request to a protected path, else 401.

    Args:
        app: the wrapped application.
        authenticator: turns the ``Authorization`` header into a principal.
        protected: whether a path needs a token (every ``/v1`` path but the
            open ones, and ``/metrics`` when an admin token is set).
    """

    def __init__(
        self, app: ASGIApp, authenticator: Authenticator, protected: Callable[[str], bool]
    ) -> None:
        self._app = app
        self._authenticator = authenticator
        self._protected = protected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._authenticator.enabled:
            await self._app(scope, receive, send)
            return
        if self._protected(scope.get("path", "")):
            authorization = None
            for name, value in scope.get("headers", []):
                if name == b"authorization":
                    authorization = value
                    break
            try:
                scope[_SCOPE_KEY] = self._authenticator.authenticate(authorization)
            except ApiError as error:
                response = JSONResponse(
                    error.body(),
                    status_code=error.status_code,
                    headers={"WWW-Authenticate": WWW_AUTHENTICATE},
                )
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)
