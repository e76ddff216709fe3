"""What every framework's handler takes and answers, the same whichever container serves the model: the encoded image
in (`SERVING_CONTENT_TYPES`), every class's score out as JSON, the most likely first. The standard library only: the
TensorFlow inference image runs its handlers with no framework and no image library."""

from __future__ import annotations

import json
from collections.abc import Iterable

from steps.contract import SERVING_ACCEPT, SERVING_CONTENT_TYPES


def content_refusal(content_type: str | None) -> str | None:
    """Why a request of ``content_type`` is not served (the 415's one line); None where it is."""
    if (content_type or "").split(";")[0].strip().lower() in SERVING_CONTENT_TYPES:
        return None
    return f"content type {content_type!r} is not served: send the encoded image as one of {', '.join(SERVING_CONTENT_TYPES)}"


def accept_refusal(accept: str | None) -> str | None:
    """Why an answer for ``accept`` is not written (the 406's one line); None where it is (no Accept: JSON)."""
    kinds = [part.split(";")[0].strip().lower() for part in (accept or SERVING_ACCEPT).split(",")]
    if any(kind in (SERVING_ACCEPT, "application/*", "*/*") for kind in kinds):
        return None
    return f"accept {accept!r} is not written: ask for {SERVING_ACCEPT}"


def ranked(scores: Iterable[tuple[str, float]]) -> str:
    """``(class, score)`` pairs as the answer's JSON body, every class, the most likely first."""
    order = sorted(scores, key=lambda item: item[1], reverse=True)
    return json.dumps({"predictions": [{"class": name, "score": score} for name, score in order]})
