# Sourced by the device scripts that run the bundle (scripts/gpu-bundle.sh) or, for a dry run, a local build:
# OUT (what comes back), B (the bundle), its libraries on the loader's path, NCCL without NVLink multicast
# (the device tool's rule), Q (the quill binary; Q=build/quill for a dry run) and DEVICE (cuda; cpu for a dry run).
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
[ -d "$B/lib" ] && export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
Q=${Q:-$B/bin/quill}
DEVICE=${DEVICE:-cuda}
