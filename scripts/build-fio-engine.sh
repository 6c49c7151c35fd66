#!/usr/bin/env bash
# Builds Pontoon's fio external ioengine, target/$PROFILE/libpontoon_fio.so
# (crates/capi/fio/pontoon_engine.c over libpontoon.so), and prints its path:
#
#   fio --ioengine=external:target/release/libpontoon_fio.so --filename=VOLUME \
#       [--pontoon_cluster=DIR] --name=x --rw=randread --bs=4k --iodepth=32 ...
#
# fio external engines compile against fio's own headers (fio.h, ioengines.h
# and the config-host.h its ./configure writes), which Debian's fio package
# does not ship; and they must come from the same fio version as the fio that
# loads them (the structures fio and the engine share have no stable ABI).
# So this script:
#   1. installs Debian's fio (and dpkg-dev, for `apt-get source`) if missing;
#   2. fetches the source of the INSTALLED fio version (`apt-get source
#      fio=<version>`, Debian's patches applied) through a private apt
#      configuration in $FIO_SRC_DIR/apt (own sources.list with deb-src
#      lines for the archives and suites the system's apt sources use, read
#      with `apt-get indextargets`; own lists, cache and an empty dpkg
#      status); the system's apt sources, lists and cache are not touched.
#      Skipped when that version's source is already unpacked;
#   3. runs fio's ./configure in that tree once (config-host.h is all we
#      need from it);
#   4. builds libpontoon (cargo build --profile $PROFILE -p pontoon-capi) and
#      compiles the engine next to it, linked with an $ORIGIN rpath.
# Idempotent; quick (no network, no configure) once the source is there.
#
# Env:
#   PROFILE       cargo profile (default release; the suite uses ci)
#   FIO_SRC_DIR   where the fio source lives (default target/fio-src)
#   MIRROR        override the archive URI for the deb-src line
#   CC            C compiler (default cc)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PROFILE=${PROFILE:-release}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case "$PROFILE" in dev|test) OUT=$TARGET_DIR/debug ;; *) OUT=$TARGET_DIR/$PROFILE ;; esac
FIO_SRC_DIR=${FIO_SRC_DIR:-$TARGET_DIR/fio-src}
KEYRING=${KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
CC=${CC:-cc}
log() { echo "build-fio-engine: $*" >&2; }

# ---- 1. fio and the tools to fetch its source ------------------------------
need_pkgs=()
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
installed fio || need_pkgs+=(fio)
installed dpkg-dev || need_pkgs+=(dpkg-dev)
command -v "$CC" >/dev/null || need_pkgs+=(gcc libc6-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	log "installing ${need_pkgs[*]}"
	SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null ||
		{ $SUDO apt-get update -qq || true; $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null; }
fi
FIO_VERSION=$(dpkg-query -W -f='${Version}' fio)          # e.g. 3.33-3
UPSTREAM=${FIO_VERSION#*:}; UPSTREAM=${UPSTREAM%-*}         # e.g. 3.33
# the fio on PATH must be that package's (the engine is built for its ABI)
if ! fio --version 2>/dev/null | grep -qx "fio-$UPSTREAM"; then
	log "warning: \`fio --version\` says '$(fio --version 2>&1 | head -1)', but the Debian package is $FIO_VERSION; the engine is built for the package's fio"
fi

# ---- 2. the source of exactly that version ---------------------------------
mkdir -p "$FIO_SRC_DIR"
FIO_SRC_DIR=$(cd "$FIO_SRC_DIR" && pwd)
VDIR=$FIO_SRC_DIR/$FIO_VERSION
SRC=$VDIR/fio-$UPSTREAM
exec 9> "$FIO_SRC_DIR/.lock"       # parallel runs (tests, bench) wait for each other
flock 9 || { log "flock $FIO_SRC_DIR/.lock failed"; exit 1; }
if [ ! -f "$VDIR/.complete" ]; then
	t0=$(date +%s%N)
	[ -r "$KEYRING" ] || { log "keyring $KEYRING missing (apt-get install debian-archive-keyring)"; exit 1; }
	A=$FIO_SRC_DIR/apt
	mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/state" "$A/etc/preferences.d"
	: > "$A/state/status"                   # empty dpkg status: nothing "installed"
	# deb-src lines for every archive+suite+component the system's apt
	# sources use for binaries (whatever the mirror: deb822 or one-line).
	if [ -n "${MIRROR:-}" ]; then
		CODENAME=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
		echo "deb-src [signed-by=$KEYRING] $MIRROR $CODENAME main" > "$A/sources.list.new"
	else
		apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Identifier: Packages' 2>/dev/null |
			sort -u | awk -v k="$KEYRING" 'NF == 3 { print "deb-src [signed-by=" k "] " $1 " " $2 " " $3 }' > "$A/sources.list.new"
		[ -s "$A/sources.list.new" ] || { log "no apt sources found in the system's apt configuration; set MIRROR="; exit 1; }
	fi
	mv "$A/sources.list.new" "$A/sources.list"
	# Read with -c after the system's apt.conf.d (so its proxy/Acquire
	# settings still apply); the #clear lines drop the system's hooks.
	cat > "$A/apt.conf" <<EOF
Dir::Etc::sourcelist "$A/sources.list";
Dir::Etc::sourceparts "-";
Dir::Etc::preferences "$A/etc/preferences";
Dir::Etc::preferencesparts "$A/etc/preferences.d";
Dir::State "$A/state";
Dir::State::Lists "$A/lists";
Dir::State::status "$A/state/status";
Dir::Cache "$A/cache";
Dir::Cache::archives "$A/cache/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Get::List-Cleanup "true";
#clear APT::Update::Post-Invoke;
#clear APT::Update::Post-Invoke-Success;
#clear DPkg::Post-Invoke;
EOF
	APT=(apt-get -q -c "$A/apt.conf")
	log "apt-get update (private lists in $A: $(awk '{print $3, $4}' "$A/sources.list" | paste -sd, -))"
	"${APT[@]}" update >&2
	rm -rf "$VDIR.tmp"; mkdir -p "$VDIR.tmp"
	chown _apt "$VDIR.tmp" 2>/dev/null || true   # the _apt sandbox user downloads into it
	log "apt-get source fio=$FIO_VERSION -> $VDIR"
	(cd "$VDIR.tmp" && "${APT[@]}" source "fio=$FIO_VERSION") >&2
	[ -f "$VDIR.tmp/fio-$UPSTREAM/fio.h" ] || { log "apt-get source did not unpack fio-$UPSTREAM/fio.h in $VDIR.tmp"; exit 1; }
	rm -f "$VDIR.tmp"/*.tar.* "$VDIR.tmp"/*.dsc
	rm -rf "$VDIR"; mv "$VDIR.tmp" "$VDIR"
	touch "$VDIR/.complete"
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	log "fetched fio $FIO_VERSION source in $((ms / 1000)).$(printf %03d $((ms % 1000)))s"
fi

# ---- 3. config-host.h, once ---------------------------------------------------
# Only the header is used. Debian configures fio with `--disable-native
# --prefix=/usr --enable-gfio --enable-libnbd` and its engines' dev
# packages installed; here ./configure finds fewer libraries, which changes
# only CONFIG_* switches that the structures the engine shares with fio
# (thread_data, thread_options, fio_file, io_u up to its engine union,
# ioengine_ops) do not depend on: the libaio/posixaio/sg union at the end
# of io_u (fio allocates io_us, the engine never sizes one), libnuma and
# CUDA (not in what the engine touches; no CUDA in Debian's build).
if [ ! -f "$SRC/.configured" ]; then
	log "fio ./configure in $SRC"
	(cd "$SRC" && ./configure --disable-native > configure.log 2>&1) ||
		{ log "fio ./configure failed; see $SRC/configure.log"; exit 1; }
	touch "$SRC/.configured"
fi
flock -u 9

# ---- 4. libpontoon and the engine ------------------------------------------------
CARGO_ARGS=(--profile "$PROFILE"); [ "$PROFILE" = release ] && CARGO_ARGS=(--release)
# Every library of the workspace, not `-p pontoon-capi`: that would resolve
# the dependencies' features differently from the workspace build the suite
# has just made and compile a second copy of them.
# Run from a test, the environment holds the variables cargo sets for a
# test process; ring's build script reruns when CARGO_MANIFEST_DIR changes,
# so with them every library depending on ring was rebuilt (2-4 minutes of
# the suite, and the workspace build invalidated).
for v in $(compgen -e | grep -E '^(CARGO_(MANIFEST_DIR|MANIFEST_PATH|PKG_[A-Z_]+|CRATE_NAME|PRIMARY_PACKAGE|TARGET_TMPDIR|BIN_NAME|BIN_EXE_[A-Za-z0-9_-]+)|OUT_DIR)$'); do
	unset "$v"
done
cargo build "${CARGO_ARGS[@]}" --workspace --lib >&2
[ -f "$OUT/libpontoon.so" ] || { log "cargo did not produce $OUT/libpontoon.so"; exit 1; }
ENGINE_SRC=$ROOT/crates/capi/fio/pontoon_engine.c
INC=$OUT/include; [ -f "$INC/pontoon.h" ] || INC=$ROOT/crates/capi/include
[ -f "$INC/pontoon.h" ] || { log "pontoon.h not found in $OUT/include or crates/capi/include"; exit 1; }
SO=$OUT/libpontoon_fio.so
# rebuild when the engine source, the header, the fio config or this script changed
if [ ! -f "$SO" ] || [ "$ENGINE_SRC" -nt "$SO" ] || [ "$INC/pontoon.h" -nt "$SO" ] ||
   [ "$SRC/config-host.h" -nt "$SO" ] || [ "$ROOT/scripts/build-fio-engine.sh" -nt "$SO" ] ||
   [ "$OUT/libpontoon.so" -nt "$SO" ]; then
	log "cc $ENGINE_SRC (fio $FIO_VERSION headers) -> $SO"
	# As fio's Makefile builds its own engines as plugins (ENGINE_*: -fPIC
	# -shared, with config-host.h included first and _GNU_SOURCE, fio's
	# CPPFLAGS); -rdynamic as engines/skeleton_external.c asks.
	"$CC" -std=gnu99 -O2 -g -Wall -Wno-unused-parameter -shared -fPIC -rdynamic \
		-include "$SRC/config-host.h" -D_GNU_SOURCE -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64 \
		-DPONTOON_FIO_BUILT="\"fio-$UPSTREAM\"" \
		-I"$SRC" -I"$INC" \
		"$ENGINE_SRC" -L"$OUT" -lpontoon -Wl,-rpath,'$ORIGIN' \
		-o "$SO.tmp.$$"
	mv "$SO.tmp.$$" "$SO"
fi
echo "$SO"
