#!/usr/bin/env bash
# The compressed size of the registry and gateway images, measured without a container engine:
# the files each Dockerfile puts in its runtime stage, tarred and gzipped as an image layer is.
#
#   cargo build --release -p registry-svc -p gateway -p taskforce-cli --bins
#   ./scripts/image-sizes.sh            # prints a Markdown table
#
# - Our layers: the release binaries with their debug info dropped (`objcopy --strip-debug`, what
#   the Dockerfiles' CARGO_PROFILE_RELEASE_STRIP=debuginfo does), the registry's configs/ seed, as in deploy/docker/*.Dockerfile.
# - The base, gcr.io/distroless/cc-debian12: rebuilt from the Debian bookworm packages it is made
#   of (`apt-get download`: base-files, netbase, tzdata, ca-certificates, libc6, libssl3,
#   libgcc-s1, libgomp1, libstdc++6), without their docs and man pages, as distroless has them.
#
# Needs a Debian (bookworm) host with apt sources, dpkg-deb, objcopy (binutils) and gzip. Layers are
# gzipped at level 6 (what `docker push` does); one base for both images, counted in each.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${TASKFORCE_RELEASE_DIR:-$root/target/release}"
for b in registry-svc gateway taskforce; do
    [[ -x "$bin/$b" ]] || { echo "no $bin/$b: build the release binaries first (see the top of $0)" >&2; exit 1; }
done
for tool in apt-get dpkg-deb objcopy gzip tar; do
    command -v "$tool" >/dev/null || { echo "$0 needs $tool" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Bytes of a directory as one gzipped tar layer.
layer() { tar -C "$1" -cf - . | gzip -6 | wc -c; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }

(
    cd "$work"
    apt-get download -q base-files netbase tzdata ca-certificates libc6 libssl3 libgcc-s1 \
        libgomp1 'libstdc++6' >/dev/null 2>&1 \
        || { echo "apt-get download failed: is this a Debian host with apt sources?" >&2; exit 1; }
)
mkdir -p "$work/base"
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$work/base"
done
rm -rf "$work/base/usr/share/doc" "$work/base/usr/share/man" "$work/base/usr/share/info" \
    "$work/base/usr/share/lintian"
base=$(layer "$work/base")

# The runtime stage of registry.Dockerfile and gateway.Dockerfile.
reg="$work/registry"
mkdir -p "$reg/usr/local/bin" "$reg/var/lib/taskforce/config" "$reg/var/lib/taskforce/data" \
    "$reg/etc/taskforce"
objcopy --strip-debug "$bin/registry-svc" "$reg/usr/local/bin/registry-svc"
objcopy --strip-debug "$bin/taskforce" "$reg/usr/local/bin/taskforce"
cp -r "$root/configs/." "$reg/var/lib/taskforce/config/"
cp "$root/configs/llm_config.yaml" "$reg/etc/taskforce/llm_config.yaml"

gw="$work/gateway"
mkdir -p "$gw/usr/local/bin"
objcopy --strip-debug "$bin/gateway" "$gw/usr/local/bin/gateway"
objcopy --strip-debug "$bin/taskforce" "$gw/usr/local/bin/taskforce"

echo "| image | base (distroless cc-debian12) | its own layers | total, compressed | budget |"
echo "|---|---|---|---|---|"
for image in registry gateway; do
    own=$(layer "$work/$image")
    echo "| $image | $(mb "$base") | $(mb "$own") | **$(mb $((base + own)))** | 60 MB |"
done
