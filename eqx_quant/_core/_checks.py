"""Run our own argument checks (clear messages with the fix) before jaxtyping/beartype's."""

import functools
import inspect
from collections.abc import Callable


def validated_by(check: Callable[..., None]):
    """Decorate a (jaxtyped) function so `check(**bound_arguments)` runs first.

    jaxtyping + beartype still check every annotation afterwards; `check` only gets the first
    word on the mistakes users make most, with a message that names the fix.
    """

    def decorate(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            bound = signature.bind_partial(*args, **kwargs)
            bound.apply_defaults()
            check(**bound.arguments)
            return fn(*args, **kwargs)

        return wrapper

    return decorate
