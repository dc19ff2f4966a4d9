#!/bin/sh
# apt-install.sh PACKAGE COMMAND: install Debian's PACKAGE with apt-get when
# COMMAND is not on PATH. One install at a time on this machine: two
# "make test" running at once would otherwise collide on dpkg's lock, and
# the second would fail; it waits for the first instead, then finds COMMAND.
set -e
pkg=$1
cmd=$2
command -v "$cmd" >/dev/null 2>&1 && exit 0
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
exec 9>"${TMPDIR:-/tmp}/floodgate-apt.lock"
flock 9
command -v "$cmd" >/dev/null 2>&1 && exit 0
echo "$cmd not found: installing $pkg with apt-get"
$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$pkg" >/dev/null
command -v "$cmd" >/dev/null 2>&1 || { echo "$cmd is still missing after apt-get install $pkg"; exit 1; }
