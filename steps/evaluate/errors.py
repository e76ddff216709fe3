"""The evaluate step's own errors."""

from __future__ import annotations

from steps.common.errors import UserError


class DocumentNotFound(UserError):
    """No such document for that execution (yet): callers that poll may treat it as 'absent'."""

    headline = "not found"
