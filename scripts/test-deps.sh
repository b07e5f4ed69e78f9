#!/bin/sh
# The system packages the test suite drives, from Debian, when they are missing: chromium for the
# browser tests, redis-server for the bus tests (they start their own on a free port, so the
# service the package starts is stopped). Needs root (or sudo) the first time only.
set -eu
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
[ -z "$missing" ] && exit 0
run() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive
run apt-get update -qq >/dev/null
# shellcheck disable=SC2086 # one word per package
run apt-get install -y -qq $missing >/dev/null
case "$missing" in *redis-server*) run service redis-server stop >/dev/null 2>&1 || true ;; esac
