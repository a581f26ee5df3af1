#!/bin/sh
# build-deb.sh BUILD_DIR OUT_DIR -- the Debian package of an already built tree (`make deb`):
# installs BUILD_DIR with prefix /usr into a staging root (DESTDIR), strips the ELF files, computes
# the shared-library dependencies with dpkg-shlibdeps, adds deploy/debian/ (control, conffiles,
# maintainer scripts) and builds OUT_DIR/searchgate_<version>_<arch>.deb with dpkg-deb.
# Needs dpkg-dev and binutils (.ci/deps.sh installs them); runs as any user (root ownership in the
# package comes from dpkg-deb --root-owner-group).
set -eu
build=$(cd "${1:?usage: build-deb.sh BUILD_DIR OUT_DIR}" && pwd)
mkdir -p "${2:?usage: build-deb.sh BUILD_DIR OUT_DIR}"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)

work="$build/deb"
root="$work/debian/searchgate"   # where dpkg-shlibdeps expects a package's files
rm -rf "$work"
mkdir -p "$root"
DESTDIR="$root" SG_SYSCONFDIR=/etc cmake --install "$build" --prefix /usr >/dev/null

# strip what the package ships (the build tree keeps its debug information)
find "$root/usr/bin" "$root/usr/lib/searchgate" -type f | while read -r f; do
  if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ]; then
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
  fi
done

version=$(sed -n 's/^#define SG_VERSION "\(.*\)"$/\1/p' "$here/../gateway/core/runtime.h")
arch=$(dpkg --print-architecture)
elfs=$(find "$root/usr/bin" "$root/usr/lib/searchgate" -type f \( -name '*.so' -o -perm -u+x \) ! -name prepare-demo)
printf 'Source: searchgate\n\nPackage: searchgate\nArchitecture: any\n' > "$work/debian/control"
# shellcheck disable=SC2086
depends=$(cd "$work" && dpkg-shlibdeps -O $elfs 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)

mkdir -p "$root/DEBIAN"
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" \
  "$here/debian/control.in" > "$root/DEBIAN/control"
cp "$here/debian/conffiles" "$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do
  install -m 0755 "$here/debian/$s" "$root/DEBIAN/$s"
done
deb="$out/searchgate_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
