#!/bin/sh
# fetch-faiss-source.sh DEST -- downloads and unpacks the source of the faiss Debian package that
# provides the installed libfaiss-dev (same version), so that the FAISS C API (c_api/*.cpp, which
# Debian does not ship compiled) can be built against the installed headers and libfaiss.a.
#
# The deb-src URIs are derived from the system's own apt configuration (the deb stanzas of
# /etc/apt/sources.list.d/*.sources and the deb lines of /etc/apt/sources.list); nothing about the
# system apt state is changed: apt runs with a private source list, list and cache directory
# under DEST. Idempotent: a complete unpacked tree (DEST/faiss-src/.complete) is reused. Runs
# under flock so that two build trees configuring at once fetch only once.
#
# Prints the path of the unpacked source tree on success.
set -eu
dest=${1:?usage: $0 DEST}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
exec 9>"$dest/.lock"
flock 9

src="$dest/faiss-src"
if [ -f "$src/.complete" ]; then
  echo "$src"
  exit 0
fi

ver=$(dpkg-query -W -f='${source:Version}' libfaiss-dev 2>/dev/null || true)
pkg=$(dpkg-query -W -f='${source:Package}' libfaiss-dev 2>/dev/null || true)
if [ -z "$ver" ] || [ -z "$pkg" ]; then
  echo "fetch-faiss-source: libfaiss-dev is not installed (run .ci/deps.sh)" >&2
  exit 1
fi

apt="$dest/apt"
rm -rf "$apt"
mkdir -p "$apt/srcparts" "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/dl"

# deb822 stanzas: every stanza whose Types has "deb" gives a deb-src stanza with the same
# URIs/Suites/Components/Signed-By.
n=0
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  awk -v out="$apt/srcparts/from-$n.sources" '
    function flush() {
      if (is_deb && uris != "" && suites != "") {
        printf "Types: deb-src\nURIs: %s\nSuites: %s\nComponents: %s\n", uris, suites, comps > out
        if (signed != "") printf "Signed-By: %s\n", signed > out
        printf "\n" > out
      }
      is_deb = 0; uris = ""; suites = ""; comps = ""; signed = ""; enabled = 1
    }
    BEGIN { flush() }
    /^[ \t]*#/ { next }
    /^[ \t]*$/ { flush(); next }
    {
      key = $1; sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
      k = tolower(key)
      if (k == "types") { is_deb = (" " val " " ~ / deb /) }
      else if (k == "uris") uris = val
      else if (k == "suites") suites = val
      else if (k == "components") comps = val
      else if (k == "signed-by") signed = val
      else if (k == "enabled" && tolower(val) == "no") is_deb = 0
    }
    END { flush() }
  ' "$f"
done
# one-line format: "deb [options] URI SUITE COMPONENT..."
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  sed -n 's/^[ \t]*deb[ \t]\+/deb-src /p' "$f" > "$apt/srcparts/from-$n.list"
done
if ! cat "$apt"/srcparts/* 2>/dev/null | grep -q 'deb-src'; then
  echo "fetch-faiss-source: no deb entries found in the system apt configuration" >&2
  exit 1
fi

opts="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$apt/srcparts -o Dir::State::Lists=$apt/lists
      -o Dir::Cache=$apt/cache -o Debug::NoLocking=1 -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
apt-get -qq $opts update >&2
cd "$apt/dl"
# shellcheck disable=SC2086
apt-get -qq $opts source --download-only "$pkg=$ver" >&2
dsc=$(ls ./*.dsc | head -n 1)
rm -rf "$src.tmp"
dpkg-source -x "$dsc" "$src.tmp" >&2
rm -rf "$src"
mv "$src.tmp" "$src"
if [ ! -f "$src/c_api/index_io_c.cpp" ]; then
  echo "fetch-faiss-source: $src has no c_api/ sources" >&2
  exit 1
fi
echo "$pkg $ver" > "$src/.complete"
rm -rf "$apt"
rm -f "$dest"/*.orig.tar.* # links dpkg-source leaves beside the tree
echo "$src"
