#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before a device call: gathers into .carry/ (git-ignored) what
# the lent GPU machine lacks and cannot download: the header-only libraries, PCRE2 (header and
# static library) and GoogleTest's sources from this machine's Debian packages, cpp-httplib's
# single header (for `mla serve`), and the commit being measured. Name `.carry` in the device
# call's `carry`.
#
# cpp-httplib: Debian's /usr/include/httplib.h is only the declarations of its compiled library
# (which links OpenSSL, zlib and Brotli), useless without it. The bundle wants upstream's whole
# single header of the same version (0.11.4 on bookworm: `git show v0.11.4:httplib.h` in a clone
# of yhirose/cpp-httplib), given as MLA_HTTPLIB_HEADER=/path/to/httplib.h; it is compiled
# header-only with no feature macro. Without it the GPU build has no server.
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
httplib_header="${MLA_HTTPLIB_HEADER:-/usr/include/httplib.h}"
if [ -f "$httplib_header" ] && grep -q '^inline Server::Server()' "$httplib_header"; then
  cp "$httplib_header" .carry/deps/include/httplib.h
  echo "bundle: cpp-httplib $(grep -m1 -o 'CPPHTTPLIB_VERSION "[0-9.]*"' "$httplib_header" |
    cut -d'"' -f2) single header (the GPU build has mla serve)"
else
  echo "bundle: no whole cpp-httplib single header at $httplib_header (set MLA_HTTPLIB_HEADER):" \
    "the GPU build has no mla serve"
fi
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo none)
git diff --quiet HEAD 2>/dev/null || commit="${commit}+uncommitted"
echo "$commit" > .carry/commit
du -sh .carry | sed 's/^/bundle: /'
