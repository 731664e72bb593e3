"""The project's domain errors. Services raise them; the API layer maps them to HTTP answers.

    PermissionDenied -> 403    ValidationError -> 400    ConflictError -> 409

Every error carries the input ``field`` it is about (``None`` when it is about the request as a whole) and a plain
``message`` that names the reason, for example::

    ValidationError("the children of lab/nlp would receive 1200 GPU-hours, but lab/nlp holds 1000 in 2026-Q4",
                    field="gpu_hours")

``str(error)`` reads ``"gpu_hours: the children of lab/nlp would receive ..."``. A service that raises one of
these has written nothing (services are atomic).
"""

from __future__ import annotations


class DomainError(Exception):
    """Base of every domain error. ``field``: the input it is about, or None; ``message``: the plain reason."""

    status_code = 400

    def __init__(self, message: str, *, field: str | None = None):
        self.message = message
        self.field = field
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, field={self.field!r})"

    def as_dict(self) -> dict:
        """What an API answer carries: ``{"field": ..., "message": ...}``."""
        return {"field": self.field, "message": self.message}


class PermissionDenied(DomainError):
    """The actor's roles do not allow this (HTTP 403)."""

    status_code = 403


class ValidationError(DomainError):
    """The input breaks a rule (HTTP 400)."""

    status_code = 400


class ConflictError(DomainError):
    """The input is valid but collides with the current state, often a concurrent change (HTTP 409)."""

    status_code = 409
