#!/usr/bin/env python3
"""Checks every #include "..." under src/ against the layer order of docs/architecture.md: a file in
layer L may include only the layers L may use (below it, and itself). Also: CUDA, cuBLAS and NCCL
headers only in ops/cuda, comm/nccl and comm/cuda, MPI's only in comm. Prints each violation as FILE:LINE and
exits 1 when there is one.

Usage: check_includes.py SRC_DIR | --self-test
"""
import os
import re
import sys

# Each layer and the layers it may include (besides itself). The CMake targets follow the same
# graph, so a wrong include is usually a link error too; this catches header-only leaks.
ALLOWED = {
    "base": set(),
    "tensor": {"base"},
    "ops": {"base", "tensor"},
    "comm": {"base", "tensor"},
    "parallel": {"base", "tensor", "ops", "comm"},
    "model": {"base", "tensor", "ops", "comm", "parallel"},
    "optim": {"base", "tensor", "ops", "comm", "parallel", "model"},
    "plan": {"base", "tensor", "ops", "comm", "parallel", "model", "optim"},
    "data": {"base", "tensor"},
    "io": {"base", "tensor", "ops", "comm", "parallel", "model"},
    "train": {"base", "tensor", "ops", "comm", "parallel", "model", "optim", "data", "io"},
    "recipe": {"base", "tensor", "ops", "comm", "parallel", "model", "optim", "data", "io", "train"},
    "tune": {"base", "tensor", "ops", "comm", "parallel", "model", "optim", "plan", "data", "io", "train", "recipe"},
    "cli": {"base", "tensor", "ops", "comm", "parallel", "model", "optim", "plan", "data", "io", "train", "recipe", "tune"},
}
SYSTEM = [  # (header pattern, folders that may include it)
    (re.compile(r"^(cuda|cublas|cudnn|nccl|cuda_bf16|cuda_runtime)"), ("ops/cuda", "comm/nccl", "comm/cuda")),
    (re.compile(r"^mpi\.h$"), ("comm",)),
]
QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ANGLED = re.compile(r"^\s*#\s*include\s+<([^>]+)>")


def self_test():
    """The checker must catch what it is for: a model file including train, CUDA in model, MPI in
    train; and accept a clean tree."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        write("model/a.h", '#include "base/error.h"\n#include "parallel/layout.h"\n')
        write("train/b.cc", '#include "model/a.h"\n#include "data/rows.h"\n')
        assert check(d) == [], check(d)
        write("model/c.cc", '#include "train/trainer.h"\n#include <cuda_runtime.h>\n')
        write("train/d.cc", "#include <mpi.h>\n")
        got = check(d)
        assert len(got) == 3 and "model/c.cc:1" in got[0] and "model/c.cc:2" in got[1] and "train/d.cc:1" in got[2], got
    print("check_includes: self-test passed")
    return 0


def main():
    if sys.argv[1] == "--self-test":
        return self_test()
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    print(f"check_includes: {len(problems)} problems")
    return 1 if problems else 0


def check(src):
    problems, files = [], 0
    for root, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            layer = rel.split(os.sep)[0]
            if layer not in ALLOWED:
                problems.append(f"{rel}: folder '{layer}' is not a layer of docs/architecture.md")
                continue
            files += 1
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = QUOTED.match(line)
                    if m:
                        target = m.group(1).split("/")[0]
                        if "/" in m.group(1) and target != layer and target not in ALLOWED[layer]:
                            problems.append(f"{rel}:{n}: layer '{layer}' includes \"{m.group(1)}\" of layer '{target}'")
                        continue
                    m = ANGLED.match(line)
                    if m:
                        for pattern, folders in SYSTEM:
                            if pattern.match(m.group(1)) and not any(rel.startswith(f + os.sep) for f in folders):
                                problems.append(f"{rel}:{n}: <{m.group(1)}> outside {', '.join(folders)}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
