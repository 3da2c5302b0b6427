#!/bin/bash
# End-to-end test of the broker image: build docker/Dockerfile, run it, drive it with the real C++ client.
#
#   scripts/container_test.sh            (as root; CI=true is fine: nothing here asks questions)
#
# There is no Docker engine on the team's machines, so this uses Debian's podman, as root, with the
# settings that work here: --isolation chroot for builds, the vfs storage driver, --runtime runc and
# explicit --ulimit values (runc may not raise limits above the caller's). Public image registries
# are not reachable, so the image is built FROM a local Debian bookworm (python3 3.11) made with
# debootstrap once and kept in the cache directory; Debian packages and PyPI are reachable.
#
# Steps: install missing tools (apt-get) -> base image (cached) -> build the image (layer cache kept)
# -> run it with ports published on 127.0.0.1, a mounted broker.conf, BROKER_CONF_* env and a store
# volume -> wait for the image's own HEALTHCHECK -> produce with the C++ client from the host venv
# -> stop, start a new container on the same volume -> pull every message back -> clean up.
#
# Exit status: 0 passed, 1 failed, 77 skipped (tools cannot be installed or cannot run containers
# on this machine; the reason is printed on a line starting with "SKIP:").
#
# Environment:
#   MINI_ROCKETMQ_CACHE_DIR   where the base rootfs and podman's storage live (/var/cache/mini-rocketmq)
#   MINI_ROCKETMQ_PYTHON      python with rocketmq==0.4.4 (<repo>/.venv/bin/python)
#   MINI_ROCKETMQ_DEBIAN_MIRROR  Debian mirror for debootstrap (default: the first one apt uses here)
#   MINI_ROCKETMQ_CONTAINER_REV=REV  build from `git archive REV` instead of the work tree (a shared
#                             checkout may hold others' half-made changes)
#   KEEP_CONTAINER=1          leave the container and volume behind for inspection
set -euo pipefail

readonly SKIP=77
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${MINI_ROCKETMQ_CACHE_DIR:-/var/cache/mini-rocketmq}"
python="${MINI_ROCKETMQ_PYTHON:-$repo/.venv/bin/python}"
# Bump when the base recipe below changes, so a stale cached rootfs is not reused.
readonly base_recipe=v1
readonly suite=bookworm
readonly image=localhost/mini-rocketmq:container-test
run_id="ct$$-$(date +%s)"
work="$(mktemp -d "${TMPDIR:-/tmp}/mini-rocketmq-ct.XXXXXX")"
containers=()
volume="mini-rocketmq-ct-store-$$"
volume_created=0

log() { printf '[container_test %4ds] %s\n' "$SECONDS" "$*" >&2; }
skip() { echo "SKIP: $*"; exit "$SKIP"; }
fail() { echo "FAIL: $*"; exit 1; }

pod() {
    # A storage of our own: vfs needs no kernel overlay support and cannot clash with another
    # podman configuration on the machine.
    podman --root "$cache/storage" --runroot /run/mini-rocketmq-podman --storage-driver vfs \
        --cgroup-manager cgroupfs --events-backend file "$@"
}

cleanup() {
    local rc=$?
    if [[ "${KEEP_CONTAINER:-0}" == 1 ]]; then
        log "KEEP_CONTAINER=1: left ${containers[*]:-no container} and volume $volume"
    else
        local c
        for c in "${containers[@]}"; do
            pod rm -f -v -t 0 "$c" >/dev/null 2>&1 || true
        done
        if [[ $volume_created == 1 ]]; then
            pod volume rm -f "$volume" >/dev/null 2>&1 || true
        fi
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT

phase_start=0
phase() { phase_start=$SECONDS; log "$*"; }
phase_done() { log "  done in $((SECONDS - phase_start))s"; }

# --- 1. tools ------------------------------------------------------------------------------------
phase "checking tools"
[[ -x "$python" ]] || skip "no python at $python (set MINI_ROCKETMQ_PYTHON to a venv with rocketmq==0.4.4)"
"$python" -c "import rocketmq.client" 2>/dev/null || skip "$python cannot import rocketmq.client (pip install rocketmq==0.4.4)"
[[ $EUID -eq 0 ]] || skip "needs root (podman with the vfs driver and runc, as set up here)"
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v iptables >/dev/null || missing+=(iptables)                     # published ports (portmap)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)   # the default network
if [[ ${#missing[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null || skip "missing ${missing[*]} and no apt-get to install them"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
            >"$work/apt.log" 2>&1; then
        tail -n 5 "$work/apt.log" >&2
        skip "could not install ${missing[*]} with apt-get"
    fi
fi
phase_done

# --- 2. base image -------------------------------------------------------------------------------
debian_mirror() {
    # The mirror apt already uses here, so no host name is written down in the repository.
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" ]] || continue
        awk -v suite="$suite" '
            /^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
            $1 == "URIs:" { uri = $2 }
            $1 == "Suites:" { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
            END { if (uri != "" && ok) print uri }' "$f" | head -n 1
    done
    if [[ -f /etc/apt/sources.list ]]; then
        awk -v suite="$suite" '$1 == "deb" {
            for (i = 2; i < NF; i++) if ($i !~ /^\[/ && $(i + 1) == suite) { print $i; exit } }' /etc/apt/sources.list
    fi
}

rootfs="$cache/rootfs-$suite-$base_recipe"
phase "base image"
mkdir -p "$cache"
if [[ ! -f "$rootfs/.complete" ]]; then
    mirror="${MINI_ROCKETMQ_DEBIAN_MIRROR:-$(debian_mirror | head -n 1)}"
    [[ -n "$mirror" ]] || skip "no Debian $suite mirror found in /etc/apt (set MINI_ROCKETMQ_DEBIAN_MIRROR)"
    log "debootstrap $suite (once; cached in $rootfs)"
    rm -rf "$rootfs.tmp"
    if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            "$suite" "$rootfs.tmp" "$mirror" >"$work/debootstrap.log" 2>&1; then
        tail -n 5 "$work/debootstrap.log" >&2
        rm -rf "$rootfs.tmp"
        skip "debootstrap of $suite from $mirror failed"
    fi
    # What an image never needs; vfs copies the whole tree for every layer built on it.
    rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/* \
        "$rootfs.tmp"/usr/share/doc "$rootfs.tmp"/usr/share/man "$rootfs.tmp"/usr/share/locale
    touch "$rootfs.tmp/.complete"
    mv "$rootfs.tmp" "$rootfs"
fi
# pip inside the build must trust what this machine trusts (a TLS-inspecting proxy may sit between
# it and PyPI), so the base carries the host's CA bundle, and its tag names the bundle.
ca_bundle=/etc/ssl/certs/ca-certificates.crt
ca_tag=none
[[ -f "$ca_bundle" ]] && ca_tag="$(sha256sum "$ca_bundle" | cut -c1-12)"
base="localhost/mini-rocketmq-base:$suite-$base_recipe-$ca_tag"
if ! pod image exists "$base"; then
    [[ -f "$ca_bundle" ]] && cp "$ca_bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
    tar -C "$rootfs" --exclude=./.complete -cf - . | pod import --quiet --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
fi
phase_done

nofile_hard="$(ulimit -Hn)"
[[ "$nofile_hard" == unlimited || "$nofile_hard" -gt 65536 ]] && nofile_hard=65536
ulimits=(--ulimit "nofile=$nofile_hard:$nofile_hard" --ulimit nproc=4096:4096)
phase "checking that podman can run a container here"
if ! pod run --rm --runtime runc "${ulimits[@]}" --network none "$base" true >"$work/smoke.log" 2>&1; then
    cat "$work/smoke.log" >&2
    skip "podman cannot run a container on this machine (see above)"
fi
phase_done

# --- 3. image --------------------------------------------------------------------------------------
context="$repo"
if [[ -n "${MINI_ROCKETMQ_CONTAINER_REV:-}" ]]; then
    context="$work/src"
    mkdir -p "$context"
    git -C "$repo" archive "$MINI_ROCKETMQ_CONTAINER_REV" | tar -x -C "$context" \
        || fail "cannot export $MINI_ROCKETMQ_CONTAINER_REV from $repo"
fi
phase "building $image FROM $base (context ${MINI_ROCKETMQ_CONTAINER_REV:-work tree})"
# --layers=false: with vfs every cached layer is a full copy of the tree (16 steps took 2-3 minutes
# and 3 GB); one commit per stage takes ~20 s, and the sources change on every commit anyway.
if ! pod build --isolation chroot --format docker --layers=false --force-rm \
        --ignorefile "$context/docker/Dockerfile.dockerignore" \
        --build-arg "BASE_IMAGE=$base" --target broker -f "$context/docker/Dockerfile" -t "$image" "$context" \
        >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    fail "image build failed"
fi
pod image prune -f >/dev/null 2>&1 || true   # the previous build's image, untagged by this one
phase_done

# --- 4. run ---------------------------------------------------------------------------------------
free_ports() {
    "$python" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
}
read -r ns_port broker_port < <(free_ports)
namesrv="127.0.0.1:$ns_port"
# The mounted file sets brokerName; the environment sets listenPort. The broker's port is published
# under the same number because clients connect to what the broker advertises (brokerIP1:listenPort);
# the name server's host port can be anything.
# 64 MiB commit log files: the store allocates whole files (two of them up front), 2 GiB by default.
printf 'brokerName=ct-from-conf\nbrokerClusterName=ContainerTestCluster\nmappedFileSizeCommitLog=67108864\n' \
    >"$work/broker.conf"
chmod 0644 "$work/broker.conf"
pod volume create "$volume" >/dev/null
volume_created=1

start_broker() {  # sets $container
    container="mini-rocketmq-ct-$$-$1"
    containers+=("$container")
    pod run -d --name "$container" --runtime runc "${ulimits[@]}" \
        -p "127.0.0.1:$ns_port:9876" -p "127.0.0.1:$broker_port:$broker_port" \
        -e "BROKER_CONF_listenPort=$broker_port" \
        -v "$work/broker.conf:/etc/mini-rocketmq/broker.conf:ro" \
        -v "$volume:/home/rocketmq/store" \
        "$image" >"$work/run-$1.log" 2>&1 || { cat "$work/run-$1.log" >&2; fail "podman run failed"; }
}

wait_healthy() {
    local name="$1" deadline=$((SECONDS + 90)) state
    while :; do
        state="$(pod inspect -f '{{.State.Status}}' "$name" 2>/dev/null || echo gone)"
        if [[ "$state" != running ]]; then
            pod logs "$name" 2>&1 | tail -n 30 >&2 || true
            fail "container $name is $state before it became healthy"
        fi
        # Runs the image's own HEALTHCHECK command inside the container.
        if pod healthcheck run "$name" >/dev/null 2>&1; then
            return 0
        fi
        if [[ $SECONDS -ge $deadline ]]; then
            pod logs "$name" 2>&1 | tail -n 30 >&2 || true
            fail "container $name not healthy within 90s"
        fi
        sleep 1
    done
}

client() {
    timeout 150 "$python" "$repo/tests/docker/client_roundtrip.py" "$@" --namesrv "$namesrv" \
        --topic "ContainerTest" --run-id "$run_id" --count 20 --deadline 60
}

phase "starting the broker (name server on $namesrv, broker on 127.0.0.1:$broker_port)"
start_broker 1
c1="$container"
wait_healthy "$c1"
phase_done

phase "checking the running container"
logs="$(pod logs "$c1" 2>&1)"
grep -F "boot success" <<<"$logs" | grep -Fq "ct-from-conf, 127.0.0.1:$broker_port" \
    || { tail -n 20 <<<"$logs" >&2; fail "no 'The broker[ct-from-conf, 127.0.0.1:$broker_port] boot success' line"; }
uid="$(pod exec "$c1" id -u)"
[[ "$uid" != 0 ]] || fail "the broker runs as root"
# The broker is PID 1 (the entrypoint execs it); uvloop's extension mapped there means it runs on uvloop.
pod exec "$c1" grep -q 'uvloop/loop' /proc/1/maps || fail "the broker process has not loaded uvloop"
# MINI_ROCKETMQ_LOG_FORMAT=json: structlog events as JSON objects, one a line.
"$python" -c 'import json, sys
events = [json.loads(line) for line in sys.stdin if line.startswith("{")]
sys.exit(not events or not all("event" in e for e in events))' <<<"$logs" \
    || fail "the container's log has no JSON event lines"
phase_done

phase "producing 20 messages with the C++ client"
client produce || fail "produce failed"
phase_done

phase "stopping the broker and starting a new container on the same store volume"
stop_started=$SECONDS
# (podman's complaints about missing systemd health-check timers go to the log: there is no systemd here)
pod stop -t 20 "$c1" >"$work/stop.log" 2>&1 || { cat "$work/stop.log" >&2; fail "podman stop failed"; }
stop_seconds=$((SECONDS - stop_started))
exit_code="$(pod inspect -f '{{.State.ExitCode}}' "$c1")"
[[ "$exit_code" == 0 ]] \
    || { pod logs "$c1" 2>&1 | tail -n 20 >&2; fail "the broker exited with $exit_code on SIGTERM (137: killed after 20 s)"; }
start_broker 2
wait_healthy "$container"
phase_done

phase "pulling the 20 messages back with the C++ client"
client consume || fail "consume after restart failed"
phase_done

log "PASS in ${SECONDS}s total (stop took ${stop_seconds}s)"
echo "container test passed in ${SECONDS}s"
