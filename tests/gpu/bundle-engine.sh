#!/usr/bin/env bash
# Prepares, on this machine (no GPU needed), what tests/gpu/run-gpu-checks.sh trains with on a GPU
# machine that has nothing but a CUDA torch wheel: a bare GPU image lacks HDF5, yaml-cpp, PCRE2
# and the rest, so the engine cannot be built there. This builds the headless fp4lab with the
# CUDA kernels (the `cuda` preset, against the project's own CUDA LibTorch) and copies into
# <repo>/.gpu-deps/:
#   fp4lab/bin/fp4lab   the executable
#   fp4lab/lib/         the shared libraries it needs that are neither LibTorch's (the GPU
#                       machine's torch wheel provides those, same version) nor glibc's
#   fp4lab/lib-gcc/     libstdc++ and libgcc_s, for a GPU machine whose own are older than
#                       Debian 12's compiler needs (train-checks.sh uses them only then: they
#                       need glibc 2.36)
#   catch2/catch.hpp    for the CUDA kernel tests
# Carry .gpu-deps to the GPU machine (the device tool's `carry`), then run run-gpu-checks.sh.
#
# Usage: bash tests/gpu/bundle-engine.sh        (about 20 minutes on 2 cores; ccache helps after)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
JOBS=${FP4LAB_JOBS:-$(nproc)}
OUT=$ROOT/.gpu-deps

cmake --preset cuda > /dev/null
cmake --build --preset cuda -j "$JOBS" --target fp4lab
BIN=$ROOT/build/cuda/app/fp4lab

rm -rf "$OUT/fp4lab"
mkdir -p "$OUT/fp4lab/bin" "$OUT/fp4lab/lib" "$OUT/fp4lab/lib-gcc" "$OUT/catch2"
cp "$BIN" "$OUT/fp4lab/bin/"
[ -f /usr/include/catch2/catch.hpp ] && cp /usr/include/catch2/catch.hpp "$OUT/catch2/"

# Every library the executable loads, but LibTorch's own (torch/lib, the nvidia wheels: the GPU
# machine has them, matching its driver) and glibc's (the system's, never bundled). libstdc++ and
# libgcc_s go aside (lib-gcc): an older image may lack the GLIBCXX versions Debian 12's compiler
# needs. libcudart goes along: the kernels were compiled by this machine's nvcc.
ldd "$BIN" | awk '/=> \// {print $1, $3}' | while read -r name path; do
  case "$path" in
    */torch/lib/* | */nvidia/*) continue ;;
  esac
  case "$name" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libutil.so.* | \
      libresolv.so.* | ld-linux*) continue ;;
    libstdc++.so.* | libgcc_s.so.*)
      cp -L "$path" "$OUT/fp4lab/lib-gcc/$name"
      continue
      ;;
  esac
  cp -L "$path" "$OUT/fp4lab/lib/$name"
done

# What the GPU machine's glibc must be at least.
need=$(for f in "$OUT"/fp4lab/bin/fp4lab "$OUT"/fp4lab/lib/*; do  # lib-gcc's are only a fallback
  objdump -T "$f" 2> /dev/null | grep -o 'GLIBC_[0-9.]*'
done | sort -t. -k2,2n -k3,3n -u | tail -1)
echo "${need:-GLIBC_2.17}" > "$OUT/fp4lab/glibc-needed"
torch_version=$("${FP4LAB_VENV:-$HOME/.cache/fp4lab/venv-torch-2.11.0}/bin/python" -c \
  'import torch; print(torch.__version__, torch.version.cuda)')
echo "$torch_version" > "$OUT/fp4lab/torch-version"
echo "bundled in $OUT: $(du -sh "$OUT" | cut -f1), $(ls "$OUT/fp4lab/lib" | wc -l) libraries;" \
  "needs glibc >= ${need#GLIBC_} and torch $torch_version on the GPU machine"
