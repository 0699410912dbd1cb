"""The Iceberg REST catalog's error model: every non-2xx answer is
``{"error": {"message": ..., "type": ..., "code": <the HTTP status>}}``
(IcebergErrorResponse / ErrorModel in the spec); ``type`` is the name of
the exception a Java client raises for it, which pyiceberg prints too.

Who may call: the app's request threads.
"""
from __future__ import annotations

BAD_REQUEST = (400, "BadRequestException")
NOT_AUTHORIZED = (401, "NotAuthorizedException")
FORBIDDEN = (403, "ForbiddenException")
NO_SUCH_NAMESPACE = (404, "NoSuchNamespaceException")
NO_SUCH_TABLE = (404, "NoSuchTableException")
NOT_FOUND = (404, "NotFoundException")
METHOD_NOT_ALLOWED = (405, "MethodNotAllowedException")
UNSUPPORTED = (406, "UnsupportedOperationException")
SERVICE_FAILURE = (500, "ServiceFailureException")


class IcebergError(Exception):
    """An answer in the spec's error model; ``kind`` is one of the pairs above."""

    def __init__(self, kind: tuple[int, str], message: str):
        super().__init__(message)
        self.code, self.type = kind
        self.message = message

    def body(self) -> dict:
        return error_body(self.code, self.type, self.message)


def error_body(code: int, type_: str, message: str) -> dict:
    return {"error": {"message": message, "type": type_, "code": code}}


def login_error_body(code: int, message: str) -> dict:
    """The body of the login's own refusals (401, 403) in this model, for
    the HTTP login in front of the app (server/auth/http_login.py)."""
    return error_body(code, NOT_AUTHORIZED[1] if code == 401 else FORBIDDEN[1], message)
