#!/usr/bin/env bash
# Run HERE before a device call that compares against DeepSeek FlashMLA in the same run: puts the
# parts of FlashMLA's published source that its dense sm90 decode needs into .carry/flashmla/csrc
# (git-ignored: FlashMLA's code never enters this repository), and CUTLASS's headers from the PyPI
# wheel nvidia-cutlass into .carry/flashmla/cutlass/include. scripts/gpu/check.sh and decode-ab.sh
# then configure with -DMLA_FLASHMLA_DIR=$PWD/.carry/flashmla, and `mla bench decode
# --flashmla-same-run` times FlashMLA beside ours.
#   scripts/gpu/flashmla-bundle.sh FLASHMLA_GIT_DIR [REV]
# FLASHMLA_GIT_DIR: a clone (or bare mirror) of github.com/deepseek-ai/FlashMLA; REV defaults to
# 9241ae3e, the commit of bench/reference/flashmla-h200.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  echo "usage: $0 FLASHMLA_GIT_DIR [REV]" >&2
  exit 2
fi
source_dir=$1
rev=${2:-9241ae3ef9bac614dd25e45e507e089f888280e0}
out=.carry/flashmla
rm -rf "$out"
mkdir -p "$out/cutlass"
git -C "$source_dir" archive "$rev" csrc/params.h csrc/defines.h csrc/utils.h csrc/sm90 csrc/smxx \
  csrc/kerutils | tar -x -C "$out"
git -C "$source_dir" rev-parse "$rev^{commit}" >"$out/FLASHMLA_COMMIT"
wheel_dir=$(mktemp -d)
trap 'rm -rf "$wheel_dir"' EXIT
python3 -m pip download --quiet --no-deps --dest "$wheel_dir" "nvidia-cutlass==4.2.0.0"
python3 -m zipfile -e "$wheel_dir"/nvidia_cutlass-*.whl "$wheel_dir/x"
cp -r "$wheel_dir/x/cutlass_library/source/include" "$out/cutlass/"
echo "flashmla-bundle: FlashMLA $(cut -c1-12 "$out/FLASHMLA_COMMIT"), CUTLASS 4.2.0.0 headers;" \
  "$(du -sh "$out" | cut -f1) in $out"
