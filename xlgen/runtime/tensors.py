"""Weight tensors: read from a file, checked against the pipeline's `tensor` declarations,
and bound at launch (docs/language.md, Tensors).

Every backend sees the same bytes: a flat, row-major float32 array per tensor. The
simulator reads it with numpy, the CPU build through a pointer in its Params struct, the
GPU from device memory uploaded once per array (runtime/gpu.py).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import numpy as np


class WeightsError(ValueError):
    """A weights file that cannot be read, or a tensor that does not match its declaration."""


def _check_file(path: Path) -> None:
    """A regular, readable file; else a WeightsError saying what it is instead."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise WeightsError(f"{path}: no such weights file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise WeightsError(f"{path}: a symbolic link loop (a link that leads back to itself); fix the link "
                               "or give the weights file itself") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise WeightsError(f"{path}: permission denied; make it readable (chmod u+r)") from None
        raise WeightsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise WeightsError(f"{path}: is a directory; give a .safetensors or .npz file")
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a special file")
        raise WeightsError(f"{path}: not a regular file ({kind}); give a .safetensors or .npz file")


def load_weights(path: str | Path, declared: dict[str, tuple[int, ...]] | None = None) -> dict:
    """The arrays of a .safetensors or .npz file, by name.

    With `declared` (the pipeline's tensors: name -> dims), only those arrays are read, each
    after its header's dtype and shape are checked against its declaration; the file's other
    names map to None (listed in messages, never read: docs/workloads.md)."""
    path = Path(path)
    _check_file(path)
    suffix = path.suffix.lower()
    if suffix not in (".safetensors", ".npz"):
        raise WeightsError(f"{path}: weights must be a .safetensors or .npz file, not '{suffix or path.name}'")
    try:
        if suffix == ".safetensors":
            try:
                from safetensors import safe_open
                from safetensors.numpy import load_file
            except ImportError:  # pragma: no cover - a dependency of xlgen
                raise WeightsError(f"{path}: reading .safetensors needs the safetensors package "
                                   "(pip install safetensors)") from None
            if declared is None:
                return dict(load_file(str(path)))
            with safe_open(str(path), framework="numpy") as f:
                out = dict.fromkeys(f.keys())
                for name in (n for n in declared if n in out):
                    piece = f.get_slice(name)
                    _check_header(name, declared[name], piece.get_dtype(), piece.get_shape(), path)
                    out[name] = f.get_tensor(name)
                return out
        with np.load(path, allow_pickle=False) as data:
            if declared is None:
                return {name: data[name] for name in data.files}
            out = dict.fromkeys(data.files)
            for name in (n for n in declared if n in out):
                with data.zip.open(f"{name}.npy") as member:
                    version = np.lib.format.read_magic(member)
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, _fortran, dtype = read(member)
                _check_header(name, declared[name], "F32" if dtype == np.float32 else str(dtype), shape, path)
                out[name] = data[name]
            return out
    except WeightsError:
        raise
    except Exception as exc:  # a corrupt file: say which, and what the reader said
        raise WeightsError(f"{path}: not a readable {suffix} file ({' '.join(str(exc).split())[:300]})") from None


def _check_header(name: str, dims, dtype: str, shape, path: Path) -> None:
    """A declared tensor's dtype and shape, from the file's header, before its data is read."""
    names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
             "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16", "U32": "uint32",
             "U64": "uint64", "BOOL": "bool"}
    shown = names.get(dtype.upper(), dtype.lower())
    if shown != "float32" or tuple(shape) != tuple(dims):
        raise WeightsError(f"tensor '{name}' in {path}: expected f32{_shape(dims)}, found {shown}{_shape(shape)} "
                           "(tensors hold float32 of the declared shape)")


def _shape(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def bind(declared: dict[str, tuple[int, ...]], values: dict, source: str = "the launch") -> dict[str, np.ndarray]:
    """Each declared tensor's value as a flat float32 array, checked: present, f32, the
    declared shape. `values` may hold other arrays (a weights file often does)."""
    out = {}
    for name, dims in declared.items():
        if values.get(name) is None:
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
