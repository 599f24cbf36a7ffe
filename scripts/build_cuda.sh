#!/usr/bin/env bash
# Builds `agentrl` with candle's CUDA backend (`cargo build --release --features cuda`) using a
# CUDA toolkit installed from PyPI wheels, so no system CUDA install (and no GPU) is needed to
# compile. Not part of `.ci/run`: CI builds and tests the CPU path only.
#
#   scripts/build_cuda.sh                    # builds target/release/agentrl with CUDA
#   scripts/build_cuda.sh --bin agentrl      # extra arguments go to `cargo build`
#   source target/cuda-toolchain/env.sh      # then run the binary (sets LD_LIBRARY_PATH)
#
# What it installs, into a venv at $AGENTRL_CUDA_TOOLCHAIN (default target/cuda-toolchain/venv):
#   nvidia-cuda-nvcc==13.0.88    nvcc, ptxas, fatbinary, nvlink (candle-kernels' build script
#                                compiles its .cu files to PTX and to a static libmoe.a)
#   nvidia-nvvm==13.0.88         cicc, which nvcc calls
#   nvidia-cuda-crt==13.0.88     crt/ headers nvcc includes
#   nvidia-cuda-cccl==13.0.85    CCCL headers (include/cccl) on nvcc's system include path
#   nvidia-cuda-runtime==13.0.96 cuda_runtime.h, cuda_bf16.h, ...; libcudart (linked by candle-kernels)
#   nvidia-cuda-nvrtc==13.0.88   libnvrtc (cudarc links it)
#   nvidia-cublas==13.1.1.3      libcublas, libcublasLt (cudarc links them)
#   nvidia-curand==10.4.0.35     libcurand (cudarc links it)
# The versions match the CUDA 13.0 wheels that PyTorch 2.14 installs, so the GPU machine's
# torch environment carries the same shared libraries at run time.
#
# Why CUDA 13 and not the `-cu12` wheels: nvidia-cuda-nvcc-cu12 (checked: 12.9.86) ships only
# ptxas, nvvm and headers, with no `nvcc` binary, so candle-kernels cannot build with it. The
# CUDA 13 wheels put one toolkit tree under site-packages/nvidia/cu13 with bin/nvcc, which this
# script uses as CUDA_HOME. cudarc 0.19 (candle 0.11's) supports CUDA 13.0 to 13.4.
#
# What no wheel provides, and how it is filled in: candle links cudarc with `dynamic-linking`,
# so the link needs `libcuda.so`, the driver library that only a GPU driver install has. Like the
# CUDA toolkit's own `lib64/stubs/libcuda.so`, this script builds a link-time stub exporting the
# driver API's names (read from the wheel's cuda.h) with soname `libcuda.so.1`; at run time the
# real driver's libcuda.so.1 is loaded instead. A binary built this way therefore needs an
# NVIDIA driver to start at all (≥ 580, as the kernels are PTX 9.0 from CUDA 13.0), and
# LD_LIBRARY_PATH must reach libcudart.so.13, libcublas.so.13, libnvrtc.so.13 and
# libcurand.so.10 (target/cuda-toolchain/env.sh points it at this venv; a torch cu13 venv's
# site-packages/nvidia/cu13/lib works as well). Wheels also ship no unversioned `libX.so`
# links, so the script adds them next to the versioned files.
#
# Environment: CUDA_COMPUTE_CAP (default 90: H100/H200; the kernels are built for this one
# architecture, which cudaforge turns into sm_90a, so the binary runs on sm_90 GPUs only), CUDAFORGE_THREADS (parallel nvcc jobs, default: all cores), CARGO_TARGET_DIR
# (as cargo), AGENTRL_CUDA_TOOLCHAIN (the venv's folder), PYTHON (default python3).
#
# Checked with: Debian 12, gcc 12.2, rustc 1.95, Python 3.11.7, pip 23.2, candle 0.11.1,
# cudarc 0.19.10, cudaforge 0.1.6 (candle-kernels' build helper), the wheel versions above.
# Result on a 2-core machine without a GPU: the build completes (cargo: 18m30s from a target dir
# already holding the CPU build; candle-kernels' nvcc step is most of it); the binary links
# libcuda.so.1, libcudart.so.13, libcublas.so.13, libcurand.so.10, and is ~68 MiB (~17 MiB
# gzipped).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
toolchain="${AGENTRL_CUDA_TOOLCHAIN:-$repo/target/cuda-toolchain}"
venv="$toolchain/venv"
python="${PYTHON:-python3}"

wheels=(
    nvidia-cuda-nvcc==13.0.88
    nvidia-nvvm==13.0.88
    nvidia-cuda-crt==13.0.88
    nvidia-cuda-cccl==13.0.85
    nvidia-cuda-runtime==13.0.96
    nvidia-cuda-nvrtc==13.0.88
    nvidia-cublas==13.1.1.3
    nvidia-curand==10.4.0.35
)

# 1. The toolkit wheels, installed once: the stamp records the exact list, so changing a pin
#    above reinstalls.
stamp="$venv/.agentrl-wheels"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "${wheels[*]}" ]]; then
    echo "build_cuda: installing CUDA wheels into $venv" >&2
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${wheels[@]}"
    echo "${wheels[*]}" >"$stamp"
fi
site_packages="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cuda_home="$site_packages/nvidia/cu13"
if [[ ! -x "$cuda_home/bin/nvcc" ]]; then
    echo "build_cuda: no nvcc at $cuda_home/bin/nvcc after installing ${wheels[0]}" >&2
    exit 1
fi

# 2. Unversioned links for the linker (-lcudart, -lcublas, ...), as a system toolkit has.
for versioned in "$cuda_home"/lib/lib{cudart,cublas,cublasLt,curand,nvrtc}.so.*; do
    name="$(basename "$versioned")"
    [[ "$name" == *.alt.* ]] && continue
    ln -sfn "$name" "$cuda_home/lib/${name%%.so.*}.so"
done

# 3. The link-time libcuda stub: one empty function per `cu*` name in cuda.h, read both with
#    the versioned names cudarc's bindings use (cuMemAlloc_v2, ...) and the legacy ones.
stub_dir="$cuda_home/lib/stubs"
if [[ ! -f "$stub_dir/libcuda.so" || "$cuda_home/include/cuda.h" -nt "$stub_dir/libcuda.so" ]]; then
    mkdir -p "$stub_dir"
    {
        gcc -E -P -x c "$cuda_home/include/cuda.h"
        gcc -E -P -x c -D__CUDA_API_VERSION_INTERNAL "$cuda_home/include/cuda.h" 2>/dev/null || true
    } | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d '( \t' | sort -u \
        | sed 's/.*/void &(void) {}/' >"$stub_dir/libcuda_stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stub_dir/libcuda.so" "$stub_dir/libcuda_stub.c"
    echo "build_cuda: libcuda stub with $(wc -l <"$stub_dir/libcuda_stub.c") driver symbols" >&2
fi

# 4. The environment candle-kernels (cudaforge) and cudarc read at build time.
export CUDA_HOME="$cuda_home"         # cudarc's link search roots: lib/, lib/stubs/
export PATH="$cuda_home/bin:$PATH"     # cudaforge and cudarc run `nvcc` from PATH
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"  # no nvidia-smi needed
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"

cat >"$toolchain/env.sh" <<EOF
# Source before running a binary built by scripts/build_cuda.sh: finds the CUDA shared
# libraries in the wheel venv. The driver's libcuda.so.1 comes from the system.
export CUDA_HOME="$cuda_home"
export LD_LIBRARY_PATH="$cuda_home/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF

cd "$repo"
echo "build_cuda: nvcc $("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), sm_$CUDA_COMPUTE_CAP" >&2
cargo build --release --features cuda "$@"
echo "build_cuda: built with CUDA; run it after: source $toolchain/env.sh" >&2
