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
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:
                # e.g. a missing keyword-only argument or one passed positionally: name the
                # public function and its signature, not the check behind it.
                raise TypeError(f"{fn.__qualname__}({_short(signature)}): {e}.") from None
            bound.apply_defaults()
            check(**bound.arguments)
            return fn(*args, **kwargs)

        return wrapper

    return decorate


def _short(signature: inspect.Signature) -> str:
    """`x, kernel, bias=None, *, quantizers, key=None`: names and defaults, no annotations."""
    parts, star = [], False
    for p in signature.parameters.values():
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        default = "" if p.default is p.empty else f"={p.default!r}"
        parts.append(f"{p.name}{default}")
    return ", ".join(parts)
