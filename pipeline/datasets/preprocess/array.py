"""Array preprocessor: one ``.npy`` file → one sample of the recipe's exact shape and dtype.

Always ``allow_pickle=False``: a pickled object array (or a pickle renamed ``.npy``) can run
code when loaded, so it is refused with a clear reason instead. Shapes and dtypes must match
the recipe exactly; only the byte order is normalised (a big-endian float32 is a float32).
"""

from __future__ import annotations

import numpy as np

from pipeline.datasets.preprocess.base import Decoded, DecodeResult, InvalidInput
from pipeline.datasets.recipe_model import CODE_VERSIONS, Recipe

CODE_VERSION = CODE_VERSIONS["array"]  # bumped in recipe_model.py: part of recipe_hash

PICKLE_REASON = "pickled .npy refused (allow_pickle=False)"


class ArrayPreprocessor:
    name = "array"
    code_version = CODE_VERSION

    def decode(self, abspath: str, recipe: Recipe) -> DecodeResult:
        assert recipe.array is not None
        return DecodeResult(
            [Decoded(load_array(abspath, tuple(recipe.array.shape), np.dtype(recipe.array.dtype)))]
        )


def _sniff(abspath: str) -> None:
    """Name what a non-.npy file is: np.load would call anything without the magic a pickle."""
    try:
        with open(abspath, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise InvalidInput(f"unreadable .npy file: {exc.strerror or exc}") from None
    if not head:
        raise InvalidInput("empty .npy file (0 bytes)")
    if head.startswith(b"\x93NUMPY"):
        return
    if head.startswith(b"PK"):
        raise InvalidInput("not a .npy file (an .npz archive)")
    if head[0] == 0x80:  # pickle protocol 2+ opcode
        raise InvalidInput(PICKLE_REASON)
    raise InvalidInput("not a readable .npy file (no NumPy magic header)")


def load_array(abspath: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    _sniff(abspath)
    try:
        loaded = np.load(abspath, allow_pickle=False, mmap_mode=None)
    except ValueError as exc:
        text = str(exc)
        if "pickle" in text.lower():
            # Both an object-dtype .npy and a plain pickle file land here.
            raise InvalidInput(PICKLE_REASON) from None
        raise InvalidInput(f"not a readable .npy file: {text}") from None
    except EOFError:
        raise InvalidInput("empty or truncated .npy file") from None
    except OSError as exc:
        raise InvalidInput(f"unreadable .npy file: {exc}") from None
    if not isinstance(loaded, np.ndarray):
        loaded.close()  # an NpzFile holds the file open
        raise InvalidInput("not a .npy file (an .npz archive)")
    if loaded.dtype.hasobject:
        raise InvalidInput(PICKLE_REASON)
    if loaded.shape != shape:
        raise InvalidInput(f"shape {loaded.shape} != recipe shape {shape}")
    native = (
        loaded.dtype.newbyteorder("=") if loaded.dtype.byteorder not in ("=", "|") else loaded.dtype
    )
    if native != dtype:
        raise InvalidInput(f"dtype {loaded.dtype.name} != recipe dtype {dtype.name}")
    return np.ascontiguousarray(loaded, dtype=dtype)
