#!/usr/bin/env bash
# Run HERE before a device call that compares decode kernels (scripts/gpu/decode-ab.sh): puts the
# source of each given revision into .carry/ab/<name>/ (git-ignored; .carry travels with the
# call), so the GPU machine builds each one's `mla` beside the working tree's.
#   scripts/gpu/bundle-ab.sh [name=]REV ...     e.g.  scripts/gpu/bundle-ab.sh main=e849223
# At most 3 revisions: the machine returns at most 8 files, and decode-ab.sh writes 5 plus one
# per revision. bench/results (old sweeps, megabytes) is left out of each copy.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ] || [ $# -gt 3 ]; then
  echo "usage: $0 [name=]REV ... (1 to 3 revisions)" >&2
  exit 2
fi
rm -rf .carry/ab
for arg in "$@"; do
  rev="${arg#*=}"
  name="${arg%%=*}"
  [ "$name" = "$arg" ] && name=$(git rev-parse --short "$rev")
  if ! [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || [ "$name" = tree ]; then
    echo "bundle-ab: bad name '$name' (letters, digits, . _ -; not 'tree')" >&2
    exit 2
  fi
  commit=$(git rev-parse --short=12 "$rev^{commit}")
  mkdir -p ".carry/ab/$name"
  git archive "$commit" -- . ':(exclude)bench/results' | tar -x -C ".carry/ab/$name"
  echo "$commit" >".carry/ab/$name/AB_COMMIT"
  echo "bundle-ab: $name = $commit"
done
du -sh .carry/ab | sed 's/^/bundle-ab: /'
