#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before a device call: gathers into .carry/ (git-ignored) what
# the lent GPU machine lacks and cannot download: the header-only libraries, PCRE2 (header and
# static library) and GoogleTest's sources from this machine's Debian packages, and the commit
# being measured. Name `.carry` in the device call's `carry`.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup-deps.sh >/dev/null
rm -rf .carry/deps
mkdir -p .carry/deps/include
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/fmt .carry/deps/include/
mkdir -p .carry/deps/lib
cp /usr/include/pcre2.h .carry/deps/include/
cp "$(c++ -print-file-name=libpcre2-8.a)" .carry/deps/lib/
cp -r /usr/src/googletest .carry/deps/googletest
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo none)
git diff --quiet HEAD 2>/dev/null || commit="${commit}+uncommitted"
echo "$commit" > .carry/commit
du -sh .carry | sed 's/^/bundle: /'
