#!/usr/bin/env bash
# Installs everything mla.cpp needs on a fresh Debian/Ubuntu machine; safe to run again (it only
# installs what is missing). Debian packages: compilers, CMake, the C++ libraries; PyPI: the
# CUTLASS/CuTe headers (the nvidia-cutlass wheel, headers only) and the official `openai` client
# that the server's end-to-end tests drive `mla serve` with. The CUDA toolkit (nvcc) is
# expected on PATH when GPU code is to be built; without it the CPU backend alone is built.
set -euo pipefail

packages=(
  build-essential cmake git python3 python3-pip clang-format
  libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev
  libgtest-dev libbenchmark-dev
)
cutlass_version="4.2.0.0"
openai_version="3.57.0"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "setup-deps: need root (or sudo) to run: $*" >&2; exit 1; fi
}

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
# A toolchain that is already on PATH (not from apt) counts as present.
filtered=()
for package in "${missing[@]}"; do
  case "$package" in
    cmake) command -v cmake >/dev/null || filtered+=("$package") ;;
    python3) command -v python3 >/dev/null || filtered+=("$package") ;;
    python3-pip) python3 -m pip --version >/dev/null 2>&1 || filtered+=("$package") ;;
    clang-format) command -v clang-format >/dev/null || filtered+=("$package") ;;
    git) command -v git >/dev/null || filtered+=("$package") ;;
    *) filtered+=("$package") ;;
  esac
done
if [ "${#filtered[@]}" -gt 0 ]; then
  echo "setup-deps: installing ${filtered[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${filtered[@]}" >/dev/null
fi

if ! python3 -c "import cutlass_library" 2>/dev/null; then
  echo "setup-deps: installing the CUTLASS headers (pip nvidia-cutlass==${cutlass_version}, no deps)"
  python3 -m pip install -q --no-deps "nvidia-cutlass==${cutlass_version}" 2>/dev/null ||
    python3 -m pip install -q --no-deps --break-system-packages "nvidia-cutlass==${cutlass_version}"
fi
if ! python3 -c "import openai, sys; sys.exit(openai.__version__ != '${openai_version}')" 2>/dev/null; then
  echo "setup-deps: installing the openai client (pip openai==${openai_version}, for the server tests)"
  python3 -m pip install -q "openai==${openai_version}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "openai==${openai_version}"
fi
echo "setup-deps: ok"
