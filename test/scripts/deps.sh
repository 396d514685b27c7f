#!/bin/sh
# Installs every Debian package the tests need. Idempotent: it touches apt only when
# something is missing, so CI and developers can call it at the start of every run.
# Later issues append to PACKAGES; keep it one package per word.
set -eu

PACKAGES="tar zstd xz-utils gzip util-linux cpio e2fsprogs gdisk dosfstools mtools
qemu-utils skopeo docker-registry dpkg-dev apt-utils busybox-static time bc
qemu-system-x86 ipxe-qemu ovmf attr containerd runc acl gnupg gpgv
mount passwd openssl mawk mmdebstrap file grub-common grub-pc-bin
qemu-system-arm qemu-efi-aarch64 qemu-user-static erofs-utils xorriso genisoimage
binutils sbsigntool osslsigncode efitools cryptsetup-bin swtpm swtpm-tools systemd kmod umoci libarchive-tools
curl wrk nginx gcc libc6-dev libseccomp-dev pkg-config"

missing=""
for p in $PACKAGES; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$status" in
	"install ok installed") ;;
	*) missing="$missing $p" ;;
	esac
done

# The tests and the demo also fetch packages with apt-get download, which
# needs package lists even when nothing is missing.
if [ "$(id -u)" -eq 0 ] && ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then
	echo "deps.sh: no apt package lists; running apt-get update"
	apt-get update -qq
fi

if [ -z "$missing" ]; then
	echo "deps.sh: all $(echo $PACKAGES | wc -w) packages present"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: missing:$missing (run as root to install)" >&2
	exit 1
fi

echo "deps.sh: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps.sh: installed:$missing"
