"""The byte view of arrays and the bit-exact comparisons of the tests (NumPy only, so that the
oracle can use it too).

`u8` is the one byte view: every test that compares or inspects raw bytes goes through it.
"""

import numpy as np

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def u8(a) -> np.ndarray:
    """The bytes of `a` (a NumPy or JAX array of any dtype, ml_dtypes' included) as a uint8
    array: a's shape with the last axis times the item size. Non-contiguous arrays are copied
    first; a 0-d array of one-byte items stays 0-d."""
    a = np.asarray(a)
    if a.ndim:
        a = np.ascontiguousarray(a)
    return a.view(np.uint8)


def bits(a) -> np.ndarray:
    """The bit patterns of `a`'s elements: an unsigned integer array of a's shape and item size."""
    a = np.asarray(a)
    return a.view(_UINT[a.dtype.itemsize])


def assert_same_bytes(got, want, what: str = "") -> None:
    """`got` and `want` have the same shape, the same dtype and the same bytes."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    g, w = u8(got.reshape(-1)), u8(want.reshape(-1))
    bad = np.flatnonzero(g != w)
    if bad.size:
        item = bad[0] // max(got.dtype.itemsize, 1)
        index = np.unravel_index(item, got.shape) if got.ndim else ()
        raise AssertionError(
            f"{what}: {bad.size} of {g.size} bytes differ; first at element {index}: "
            f"got {got.reshape(-1)[item]!r} ({g[bad[0]]:#04x}), "
            f"want {want.reshape(-1)[item]!r} ({w[bad[0]]:#04x})"
        )


def assert_bytes(got, want, what: str) -> None:
    """Two integer arrays (bytes, E2M1 codes, bit patterns) of the same shape are equal
    element by element (their integer dtypes may differ)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {got.size} differ; first at {tuple(bad[0])}: "
        f"{got[tuple(bad[0])]:#04x} (kernel) vs {want[tuple(bad[0])]:#04x} (reference)"
    )


def f32_bits_equal(a, b, what: str = "") -> None:
    """`a` and `b`, both converted to float32, have the same bits (NaN payloads and the sign
    of zero included)."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    np.testing.assert_array_equal(bits(a), bits(b), err_msg=what)
