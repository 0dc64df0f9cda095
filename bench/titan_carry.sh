#!/usr/bin/env bash
# Fill .whl/ (git-ignored) for bench/titan_side_by_side.sh: run here, from the repository root, before the device call.
# Adds to what ../shared/device/prepare-ray-carry.sh put there (run it first when .whl/ has no Ray wheel):
#   - the project's wheel, built from this checkout (pip wheel --no-deps), replacing an older one;
#   - torchao 0.18.0 and tensorboardX, which the default job imports (../shared/device/README.md);
#   - torchtitan 0.2.2 and what it imports at run time that the GPU image lacks: tyro (docstring-parser, typeguard),
#     torchdata, and datasets (dill, multiprocess), which torchtitan's Qwen3 package imports though this benchmark
#     does not use it. The image has the rest (einops, fsspec, tensorboard, pillow, tokenizers, safetensors, xxhash,
#     pyarrow, pandas, huggingface-hub, aiohttp, rich: /work/.library/device/KINDS.md's package list).
# torchtitan 0.2.2 (2026-02) rather than 0.3.0 (2026-09): 0.3.0 needs spmd_types and torch_checkpointing and targets a
# newer torch than the GPU image's 2.11; 0.2.2 imports and builds its model on torch 2.11 (checked on CPU).
# Writes only under .whl/; prints its size, which must stay under the 64 MiB a device call carries.
set -euo pipefail
[ -f pyproject.toml ] && [ -d bench ] || { echo "run from the repository root" >&2; exit 2; }
ls .whl/ray-*.whl >/dev/null 2>&1 || { echo ".whl/ has no Ray wheel: run ../shared/device/prepare-ray-carry.sh first" >&2; exit 2; }
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${PLAT[@]}" -d .whl \
  torchao==0.18.0 tensorboardX==2.6.5 \
  torchtitan==0.2.2 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 torchdata==0.11.0 \
  datasets==4.8.5 dill==0.4.0 multiprocess==0.70.18
rm -f .whl/ray_efa_stack-*.whl
python3 -m pip wheel -q --no-deps -w .whl .
# One version of each package: pip refuses two in one install.
dups=$(ls .whl/*.whl | sed 's#.*/##; s/-[0-9].*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || { echo "two versions of: $dups in .whl/: remove the older" >&2; exit 1; }
du -sh .whl
total=$(du -sb .whl | cut -f1)
[ "$total" -lt $((60 * 1024 * 1024)) ] || { echo ".whl/ is $total bytes: over the ~60 MiB that leaves room for the tree" >&2; exit 1; }
