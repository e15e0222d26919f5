#!/usr/bin/env bash
# Bundles the debug build into the Linux packages (.deb, .rpm) with `tauri bundle`, installs the
# .deb with dpkg, checks what it installed (binary, desktop entry, icons,
# the .gguf type), and runs tests/package/smoke.test.mjs against the
# INSTALLED binary under Xvfb through tauri-driver. Installs over an earlier
# run's package, so it can run again; it removes nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export PATH="$HOME/.cargo/bin:$PATH"
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
fail() { echo "tests/package: $*" >&2; exit 1; }
ok() { echo "tests/package: ok: $*"; }

bundle="$CARGO_TARGET_DIR/debug/bundle"
mime=application/x-gguf

# --- Build. An earlier version's packages must not be the ones tested.
# The packages hold the debug build that the end-to-end tests ran, the one
# the integration tests build (after ./hearth test's build, nothing to do):
# what is packaged and how it installs does not depend on the profile, and
# a release build of the whole tree is the longest compile CI would
# otherwise run for it.
rm -f "$bundle"/deb/*.deb "$bundle"/rpm/*.rpm
cargo test --workspace --no-run
npx --prefix ui tauri bundle --debug --bundles deb,rpm
debs=("$bundle"/deb/*.deb) rpms=("$bundle"/rpm/*.rpm)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || fail "expected one .deb in $bundle/deb"
[ ${#rpms[@]} = 1 ] && [ -f "${rpms[0]}" ] || fail "expected one .rpm in $bundle/rpm"
deb="${debs[0]}" rpm="${rpms[0]}"
ok "built $(basename "$deb") and $(basename "$rpm")"

# --- What the packages hold.
deb_files="$(dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./||; s|^|/|')"
for f in /usr/bin/hearth /usr/share/applications/Hearth.desktop /usr/share/mime/packages/hearth.xml /usr/share/icons/hicolor/128x128/apps/hearth.png; do
  grep -qx "$f" <<<"$deb_files" || fail "the .deb lacks $f"
done
ok "the .deb holds the binary, the desktop entry, the icons and the MIME type"
if command -v rpm >/dev/null; then
  rpm_files="$(rpm -qlp "$rpm" 2>/dev/null)"
  for f in /usr/bin/hearth /usr/share/applications/Hearth.desktop /usr/share/mime/packages/hearth.xml /usr/share/icons/hicolor/128x128/apps/hearth.png; do
    grep -qx "$f" <<<"$rpm_files" || fail "the .rpm lacks $f"
  done
  ok "the .rpm holds the same ($(rpm -qp --qf '%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}' "$rpm" 2>/dev/null))"
else
  echo "tests/package: rpm is not installed: the .rpm's file list is not checked" >&2
fi

# --- Install the .deb (its dependencies from apt when some are missing).
package="$(dpkg-deb -f "$deb" Package)"
if ! sudo_ dpkg -i "$deb"; then
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -f -y --no-install-recommends
fi
dpkg -s "$package" | grep -q '^Status: install ok installed' || fail "$package did not install"
app="$(dpkg -L "$package" | grep -x '/usr/bin/hearth')" || fail "$package installed no /usr/bin/hearth"
ok "installed $package $(dpkg-query -W -f '${Version}' "$package")"

# --- The desktop entry, its icon and the .gguf association, as installed.
desktop=""
for f in /usr/share/applications/*.desktop; do
  grep -qx 'Exec=hearth %F' "$f" && desktop="$f"
done
[ -n "$desktop" ] || fail "no desktop entry in /usr/share/applications runs 'hearth %F'"
grep -qx "MimeType=.*$mime;*" "$desktop" || fail "$desktop does not name $mime"
grep -qx 'Icon=hearth' "$desktop" || fail "$desktop has no Icon=hearth"
if command -v desktop-file-validate >/dev/null; then desktop-file-validate "$desktop" || fail "$desktop is not valid"; fi
for size in 32x32 128x128 256x256@2; do
  [ -f "/usr/share/icons/hicolor/$size/apps/hearth.png" ] || fail "no $size icon installed"
done
[ -f /usr/share/mime/packages/hearth.xml ] || fail "the MIME type is not installed"
# dpkg's triggers (shared-mime-info, desktop-file-utils) rebuild the caches.
grep -q "$mime" /usr/share/mime/globs2 || fail "the MIME database does not know *.gguf (update-mime-database did not run)"
ok "desktop entry $desktop, icons, and $mime for *.gguf"

# --- The installed app, end to end.
scripts/fetch-model.sh >/dev/null
command -v tauri-driver >/dev/null || cargo install tauri-driver --version '^2' --locked
export HEARTH_APP="$app"
# Under Xvfb and a D-Bus session: the second launch finds the first on it.
tests/e2e/headless.sh node --test --test-concurrency=1 --test-force-exit tests/package/
