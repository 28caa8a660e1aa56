#!/usr/bin/env bash
# Keeps the edge image the real-node tests and the demo boot in OUT_DIR
# (make test-image): build.sh's outputs in OUT_DIR/out and the root file
# system unpacked in OUT_DIR/rootfs. It is rebuilt only when one of its
# inputs changed: fleet-agent's package (built first), the image's
# definition, the Kubernetes binaries and images, the epoch.
#
# Settings (environment): OUT_DIR, K8S_DIRS, SOURCE_DATE_EPOCH (required);
# MAKE; CI=true turns "cannot build here" into a failure.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${OUT_DIR:?set OUT_DIR}" "${K8S_DIRS:?set K8S_DIRS}" "${SOURCE_DATE_EPOCH:?set SOURCE_DATE_EPOCH}"

log() { printf '>> %s\n' "$*"; }

# Where the image cannot be built the tests that boot it skip (or fail
# under CI), as they do without bin/k8s.
why=
missing=()
for t in mmdebstrap:mmdebstrap sfdisk:fdisk mkfs.ext4:e2fsprogs mkfs.vfat:dosfstools mcopy:mtools zstd:zstd; do
	command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done
if [ "$(id -u)" != 0 ]; then
	why="building the edge image needs root"
elif [ ${#missing[@]} -gt 0 ]; then
	why="building the edge image needs: apt-get install ${missing[*]}"
fi
if [ -n "$why" ]; then
	if [ "${CI:-}" = true ]; then
		echo "test-image: $why" >&2
		exit 1
	fi
	log "not building the edge image the real-node tests boot ($why): they will skip"
	exit 0
fi

mkdir -p "$OUT_DIR"
exec 9>"$OUT_DIR/.lock"
flock 9

"${MAKE:-make}" --no-print-directory -C "$repo" packages PKG_ARCHS=amd64 PKG_DIST="$OUT_DIR/packages" >/dev/null
read -r -a k8s_dirs <<<"$K8S_DIRS"
key=$(
	cd "$repo"
	echo "epoch $SOURCE_DATE_EPOCH"
	# The package's other contents are under packaging/ and manifests/.
	sha256sum "$OUT_DIR"/packages/build/amd64/fleet-agent | cut -c1-64
	find packaging manifests/agent -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	for d in "${k8s_dirs[@]}"; do
		(cd "$d" && sha256sum kubeadm kubelet kubectl images/*.tar)
	done
)
key=$(printf '%s\n' "$key" | sha256sum | cut -c1-64)
if [ -f "$OUT_DIR/key" ] && [ "$(cat "$OUT_DIR/key")" = "$key" ] && [ -d "$OUT_DIR/rootfs/usr" ]; then
	log "the edge image in $OUT_DIR is up to date (inputs ${key:0:12})"
	exit 0
fi

log "building the edge image the real-node tests boot into $OUT_DIR (inputs ${key:0:12}; about 5 minutes)"
rm -rf "$OUT_DIR/key" "$OUT_DIR/out" "$OUT_DIR/rootfs" "$OUT_DIR/rootfs.new"
deb=$(ls "$OUT_DIR"/packages/*.deb)
OUT_DIR="$OUT_DIR/out" AGENT_DEB="$deb" K8S_DIRS="$K8S_DIRS" "$here/build.sh"
mkdir "$OUT_DIR/rootfs.new"
tar --zstd -xf "$OUT_DIR/out/fleet-edge-amd64.rootfs.tar.zst" -C "$OUT_DIR/rootfs.new" \
	--numeric-owner --xattrs --xattrs-include=security.capability
mv "$OUT_DIR/rootfs.new" "$OUT_DIR/rootfs"
echo "$key" >"$OUT_DIR/key"
log "the edge image is in $OUT_DIR/out, its root file system unpacked in $OUT_DIR/rootfs"
