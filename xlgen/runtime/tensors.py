"""Weight tensors: read from a file, checked against the pipeline's `tensor` declarations,
and bound at launch (docs/language.md, Tensors).

Every backend sees the same bytes: a flat, row-major float32 array per tensor. The
simulator reads it with numpy, the CPU build through a pointer in its Params struct, the
GPU from device memory uploaded once per array (runtime/gpu.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class WeightsError(ValueError):
    """A weights file that cannot be read, or a tensor that does not match its declaration."""


def load_weights(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a .safetensors or .npz file, by name."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"{path}: no such weights file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".safetensors":
            try:
                from safetensors.numpy import load_file
            except ImportError:  # pragma: no cover - a dependency of xlgen
                raise WeightsError(f"{path}: reading .safetensors needs the safetensors package "
                                   "(pip install safetensors)") from None
            return dict(load_file(str(path)))
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {name: data[name] for name in data.files}
    except WeightsError:
        raise
    except Exception as exc:  # a corrupt file: say which, and what the reader said
        raise WeightsError(f"{path}: not a readable {suffix} file ({type(exc).__name__}: {exc})") from None
    raise WeightsError(f"{path}: weights must be a .safetensors or .npz file, not '{suffix or path.name}'")


def _shape(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def bind(declared: dict[str, tuple[int, ...]], values: dict, source: str = "the launch") -> dict[str, np.ndarray]:
    """Each declared tensor's value as a flat float32 array, checked: present, f32, the
    declared shape. `values` may hold other arrays (a weights file often does)."""
    out = {}
    for name, dims in declared.items():
        if name not in values:
            have = ", ".join(sorted(values)) or "none"
            raise WeightsError(f"tensor '{name}' (f32{_shape(dims)}) is not bound by {source} (it has: {have}); "
                               f"give it with --weights FILE (.safetensors or .npz)")
        array = np.asarray(values[name])
        if array.dtype != np.float32:
            raise WeightsError(f"tensor '{name}' in {source}: expected f32{_shape(dims)}, found "
                               f"{array.dtype}{_shape(array.shape)} (tensors hold float32; convert it with "
                               f"astype(numpy.float32) where rounding is what you mean)")
        if tuple(array.shape) != tuple(dims):
            raise WeightsError(f"tensor '{name}' in {source}: expected f32{_shape(dims)}, found "
                               f"float32{_shape(array.shape)}")
        flat = np.ascontiguousarray(array).reshape(-1)
        flat.setflags(write=False)  # read-only in every backend
        out[name] = flat
    return out
