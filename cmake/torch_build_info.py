"""Prints, as CMake set() commands, what the PyTorch extension build needs from this Python's torch.

Run by cmake/PythonExtension.cmake. Exits non-zero with one line on stderr when torch is missing or
was built without CUDA, so that MLA_BUILD_PYTHON=AUTO can say why it skips the extension.
"""

import os
import sys

try:
    import torch
except Exception as error:  # ImportError, or a torch that fails to load its libraries
    sys.exit(f"torch cannot be imported ({type(error).__name__}: {error})")

if torch.version.cuda is None:
    sys.exit(f"torch {torch.__version__} was built without CUDA")

torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
include = os.path.join(torch_dir, "include")
# Newer torch wheels no longer ship the pybind11 ABI tags; when present they must match torch's.
pybind11_defines = []
for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{name}", None)
    if value is not None:
        pybind11_defines.append(f'PYBIND11_{name}="{value}"')


def cmake_string(value):
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


print(f"set(MLA_TORCH_VERSION {cmake_string(torch.__version__)})")
print(f"set(MLA_TORCH_CUDA_VERSION {cmake_string(torch.version.cuda)})")
print(f"set(MLA_TORCH_LIBRARY_DIR {cmake_string(os.path.join(torch_dir, 'lib'))})")
print(
    "set(MLA_TORCH_INCLUDE_DIRS "
    f"{cmake_string(include)} {cmake_string(os.path.join(include, 'torch', 'csrc', 'api', 'include'))})"
)
print(f"set(MLA_TORCH_CXX11_ABI {int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))})")
print(f"set(MLA_TORCH_PYBIND11_DEFINES {' '.join(cmake_string(d) for d in pybind11_defines)})")
