#!/usr/bin/env bash
# Fetches a Debian/Ubuntu source package's upstream tarball (its .orig.tar.*) with apt, from
# the archives this machine's own apt is configured with, and checks it against a sha256:
#   tools/fetch_source.sh PACKAGE UPSTREAM_VERSION SHA256 DEST_FILE
# The machine's apt configuration and state are left alone: the deb-src lines (the same
# archives and keys as its deb lines) and the package lists live in a private folder.
# apt checks what it downloads against the archive's signed index; the sha256 pins the file:
# a distribution whose tarball differs stops here rather than building something else.
set -euo pipefail
[ $# -eq 4 ] || { sed -n '2,4p' "$0" >&2; exit 2; }
pkg="$1" version="$2" sha256="$3" dest="$4"
die() { echo "fetch_source.sh: $*" >&2; exit 1; }
command -v apt-get >/dev/null || die "needs apt-get (Debian or Ubuntu)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/parts" "$work/src"
: > "$work/sources.list"
# one-line sources (sources.list, *.list) and deb822 ones (*.sources): deb -> deb-src
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] && sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >> "$work/sources.list"
done
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" > "$work/parts/$(basename "$f")"
done
opts=(-q -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/parts"
      -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
apt-get "${opts[@]}" update >&2 || die "apt-get update failed"
(cd "$work/src" && apt-get "${opts[@]}" source --download-only "$pkg") >&2 \
  || die "apt-get source $pkg failed"
shopt -s nullglob
tarballs=("$work/src/${pkg}_${version}.orig.tar."*)
[ ${#tarballs[@]} -eq 1 ] || die "no ${pkg}_${version}.orig.tar.* in this distribution's sources: $(ls "$work/src")"
echo "$sha256  ${tarballs[0]}" | sha256sum -c --quiet - || die "${tarballs[0]##*/} does not match its sha256"
mkdir -p "$(dirname "$dest")"
cp "${tarballs[0]}" "$dest.tmp" && mv "$dest.tmp" "$dest"
echo "$dest"
