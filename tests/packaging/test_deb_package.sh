#!/usr/bin/env bash
# Builds the .deb with CPack from a build folder and checks what is in it: control fields, the
# files, the desktop entry, icon and metainfo, and that the extracted fp4lab runs on the package's
# own libraries (not the build's torch virtual environment).
#   test_deb_package.sh BUILD_DIR CPACK VERSION WITH_GUI
# About 2 minutes on 2 cores (cpack about 60 s for the 2.6 GB payload, then reading and extracting
# the 1.6 GB package) and 7 GB of temporary space. Exits 77 (skipped) when a tool it needs is
# missing.
set -euo pipefail

BUILD_DIR=$1 CPACK=$2 VERSION=$3 WITH_GUI=$4
SKIPPED=()
fail() { echo "FAIL: $*" >&2; exit 1; }
skip_now() { echo "SKIPPED: $*"; exit 77; }
ok() { echo "ok: $*"; }

for tool in dpkg-deb dpkg-shlibdeps ldd; do
  command -v "$tool" > /dev/null || skip_now "$tool is not installed"
done
[ -f "$BUILD_DIR/CPackConfig.cmake" ] || fail "no CPackConfig.cmake in $BUILD_DIR"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fp4lab-deb.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
free_gb=$(df -P -BG "$TMP" | awk 'NR == 2 {sub("G", "", $4); print $4}')
((free_gb >= 8)) || skip_now "only ${free_gb} GB free under $TMP; the package needs about 7 GB"

# The package, into the temporary folder (the build folder keeps no 1.6 GB file).
start=$SECONDS
(cd "$BUILD_DIR" && "$CPACK" --config CPackConfig.cmake -G DEB -B "$TMP") > "$TMP/cpack.log" 2>&1 ||
  { cat "$TMP/cpack.log" >&2; fail "cpack -G DEB"; }
rm -rf "$TMP/_CPack_Packages"  # the staging copy, before the extraction needs the space
arch=$(dpkg --print-architecture)
DEB="$TMP/fp4lab_${VERSION}_${arch}.deb"
[ -f "$DEB" ] || fail "cpack wrote no $(basename "$DEB"): $(ls "$TMP")"
ok "cpack: $(basename "$DEB"), $(du -m "$DEB" | cut -f1) MB, $((SECONDS - start)) s"

# Control fields.
dpkg-deb --info "$DEB" > "$TMP/info"
field() { dpkg-deb -f "$DEB" "$1"; }
[ "$(field Package)" = fp4lab ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$VERSION" ] || fail "Version: $(field Version), expected $VERSION"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture: $(field Architecture)"
[ "$(field Section)" = science ] || fail "Section: $(field Section)"
[ -n "$(field Maintainer)" ] && [ -n "$(field Description)" ] || fail "no Maintainer or Description"
depends=$(field Depends)
[[ "$depends" == *libc6* ]] || fail "Depends has no libc6 (dpkg-shlibdeps did not run?): $depends"
ok "control: fp4lab $VERSION $arch; Depends: $depends"

# The file list.
dpkg-deb --contents "$DEB" | awk '{print $6}' | sed 's|^\./||' > "$TMP/contents"
has() { grep -qx "$1" "$TMP/contents" || fail "the package has no $1"; }
has usr/bin/fp4lab
has usr/lib/fp4lab/libtorch_cpu.so
has usr/share/fp4lab/models/tiny-v2/model.safetensors
if grep -q '^usr/local/' "$TMP/contents"; then fail "files under /usr/local"; fi
ok "contents: $(grep -c '[^/]$' "$TMP/contents") files"

X="$TMP/root"
dpkg-deb -x "$DEB" "$X"
rm -f "$DEB"

# The desktop entry, icon and metainfo (GUI builds only: the entry launches `fp4lab gui`).
if [ "$WITH_GUI" = ON ] || [ "$WITH_GUI" = 1 ] || [ "$WITH_GUI" = TRUE ]; then
  desktop=$(ls "$X"/usr/share/applications/*.desktop 2> /dev/null) ||
    fail "no desktop entry in usr/share/applications"
  [ "$(wc -w <<< "$desktop")" -eq 1 ] || fail "more than one desktop entry: $desktop"
  app_id=$(basename "$desktop" .desktop)
  key() { sed -n "s/^$1=//p" "$desktop"; }
  [ "$(key Type)" = Application ] || fail "desktop Type=$(key Type)"
  [[ "$(key Exec)" == "fp4lab "* ]] || fail "desktop Exec=$(key Exec) does not run fp4lab"
  [ "$(key Icon)" = "$app_id" ] || fail "desktop Icon=$(key Icon), expected $app_id"
  [[ "$(key Categories)" == *Science* ]] || fail "desktop Categories=$(key Categories)"
  if command -v desktop-file-validate > /dev/null; then
    desktop-file-validate "$desktop" || fail "desktop-file-validate $app_id.desktop"
    ok "desktop entry $app_id.desktop (desktop-file-validate)"
  else
    SKIPPED+=("desktop-file-validate is not installed (desktop-file-utils); only the keys checked")
  fi

  svg="$X/usr/share/icons/hicolor/scalable/apps/$app_id.svg"
  png="$X/usr/share/icons/hicolor/256x256/apps/$app_id.png"
  [ -f "$svg" ] && grep -q '<svg' "$svg" || fail "no scalable icon $app_id.svg"
  [ -f "$png" ] || fail "no 256x256 icon $app_id.png"
  # The PNG header: signature, then IHDR's width and height (big-endian) at bytes 16..23.
  size=$(od -An -tu1 -j16 -N8 "$png" | awk '{print $3 * 256 + $4 "x" $7 * 256 + $8}')
  [ "$size" = 256x256 ] || fail "$app_id.png is $size, not 256x256"
  ok "icons: scalable SVG, 256x256 PNG"

  metainfo="$X/usr/share/metainfo/$app_id.metainfo.xml"
  [ -f "$metainfo" ] || fail "no usr/share/metainfo/$app_id.metainfo.xml"
  grep -q "<id>$app_id</id>" "$metainfo" || fail "metainfo's <id> is not $app_id"
  grep -q "<launchable type=\"desktop-id\">$app_id.desktop</launchable>" "$metainfo" ||
    fail "metainfo does not launch $app_id.desktop"
  if command -v appstreamcli > /dev/null; then
    appstreamcli validate --no-net "$metainfo" || fail "appstreamcli validate $app_id.metainfo.xml"
    ok "metainfo (appstreamcli validate)"
  else
    SKIPPED+=("appstreamcli is not installed (appstream); metainfo not validated")
  fi
elif [ -d "$X/usr/share/applications" ]; then
  fail "a headless build packaged a desktop entry"
fi

# The extracted fp4lab resolves every library in the package or the system, none from the
# virtual environment or the build tree: the package works on a machine without them.
exe="$X/usr/bin/fp4lab"
clean_env=(env -i PATH=/usr/bin:/bin HOME="$TMP/home" XDG_CACHE_HOME="$TMP/home/.cache"
  LANG=C.UTF-8)
mkdir -p "$TMP/home"
"${clean_env[@]}" ldd "$exe" > "$TMP/ldd" || fail "ldd $exe"
if grep 'not found' "$TMP/ldd"; then fail "libraries not found from the extracted package"; fi
bundled=0
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  if [ -e "$X/usr/lib/fp4lab/$name" ]; then
    [ "$(readlink -f "$path")" = "$(readlink -f "$X/usr/lib/fp4lab/$name")" ] ||
      fail "$name resolves to $path, not the packaged copy"
    bundled=$((bundled + 1))
  else
    case "$path" in
      /lib/* | /usr/lib/* | /lib64/*) ;;
      *) fail "$name resolves to $path: neither in the package nor a system library" ;;
    esac
  fi
done < "$TMP/ldd"
ok "ldd: $(grep -c '=>' "$TMP/ldd") libraries resolved, $bundled from usr/lib/fp4lab"

# Every system library fp4lab links directly comes from a package that Depends names.
if command -v readelf > /dev/null; then
  for name in $(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$X/usr/lib/fp4lab/$name" ] && continue
    path=$(awk -v n="$name" '$1 == n && $2 == "=>" {print $3; exit}
      $2 != "=>" && substr($1, length($1) - length(n)) == "/" n {print $1; exit}' "$TMP/ldd")
    owner=""
    # Debian 12 merges /lib into /usr/lib; dpkg knows each file under one of the two names.
    for candidate in "$path" "$(readlink -f "$path")" "/usr$path" "${path#/usr}"; do
      owner=$(dpkg -S "$candidate" 2> /dev/null | head -1 | cut -d: -f1) && [ -n "$owner" ] && break
    done
    [ -n "$owner" ] || fail "$name ($path) belongs to no Debian package"
    [[ ", $depends," =~ ", $owner"[\ ,] ]] || fail "Depends lacks $owner (for $name): $depends"
  done
  ok "Depends names the package of every system library fp4lab links"
else
  SKIPPED+=("readelf is not installed (binutils); Depends not checked against the libraries")
fi

out=$("${clean_env[@]}" "$exe" --version) || fail "fp4lab --version"
[ "$out" = "fp4lab $VERSION" ] || fail "fp4lab --version printed '$out'"
ok "$out (from the extracted package)"

# LibTorch from the package at work: the shipped model, found where the package put it, answers.
model=$("${clean_env[@]}" FP4LAB_RESOURCES="$X/usr/share/fp4lab" "$exe" base-model) ||
  fail "fp4lab base-model"
[ "$model" = "$X/usr/share/fp4lab/models/tiny-v2" ] || fail "base-model found $model"
reply=$("${clean_env[@]}" FP4LAB_RESOURCES="$X/usr/share/fp4lab" "$exe" generate builtin:tiny \
          --prompt "What is 2 plus 3?" --max-new-tokens 16) || fail "fp4lab generate"
[ -n "$reply" ] || fail "fp4lab generate printed nothing"
ok "generate with the packaged model: $reply"
# Without FP4LAB_RESOURCES the binary finds the model next to itself (<bin>/../share/fp4lab),
# wherever the package was unpacked.
model=$("${clean_env[@]}" "$exe" base-model) || fail "fp4lab base-model (relocated)"
[ "$model" = "$X/usr/share/fp4lab/models/tiny-v2" ] || fail "relocated base-model found $model"
ok "the relocated binary finds its model: $model"

if ((${#SKIPPED[@]})); then
  printf 'SKIPPED: %s\n' "${SKIPPED[@]}"
  exit 77
fi
echo "PASS: the .deb ($((SECONDS - start)) s)"
