#!/usr/bin/env bash
# Developer entry point: set up the virtualenv and run the broker or the whole test suite.
#
#   scripts/dev.sh broker [mqbroker args...]   run the broker on its embedded defaults (extra args passed through)
#   scripts/dev.sh shell  [command...]         a shell (or one command) with mqbroker, mqadmin, mqbench on PATH
#   scripts/dev.sh test   [pytest args...]     install test deps + the ali-ons client, run pytest over tests/
#
# Idempotent: pip runs only when pyproject.toml changed since the last install (a stamp in the venv records
# its hash and the extras), npm ci only when package-lock.json changed. Environment: VENV (default .venv in
# the repo), PYTHON (default python3, must be >= 3.11).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
NODE_DIR="$ROOT/tests/compat/node"

log() { printf 'dev.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 2; }

hash_of() { sha256sum "$1" | cut -d' ' -f1; }

ensure_python() {
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python >= 3.11"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$("$PYTHON" -V 2>&1) is too old; mini-rocketmq needs Python >= 3.11 (set PYTHON=...)"
}

ensure_venv() {
  if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    return
  fi
  ensure_python
  log "creating virtualenv $VENV"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Debian ships venv/ensurepip separately (python3.X-venv); install it when we are allowed to.
    local pkg
    pkg="python$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      log "python venv support missing; apt-get install $pkg"
      rm -rf "$VENV"
      apt-get update -qq >/dev/null
      if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      fi
      "$PYTHON" -m venv "$VENV"
    else
      die "cannot create a virtualenv: install $pkg (e.g. sudo apt-get install $pkg)"
    fi
  fi
}

# pip_install <stamp name> <extras or empty>: editable install of the project, skipped when the stamp matches.
pip_install() {
  local extras="$2" stamp="$VENV/.dev-stamp-$1" want
  want="$(hash_of "$ROOT/pyproject.toml") ${extras}"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return
  fi
  log "pip install -e .${extras:+[$extras]}"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT${extras:+[$extras]}"
  printf '%s' "$want" >"$stamp"
}

ensure_node_modules() {
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    log "node/npm not found: the ali-ons compatibility tests will be skipped"
    return
  fi
  local stamp="$NODE_DIR/node_modules/.dev-stamp" want
  want="$(hash_of "$NODE_DIR/package-lock.json")"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return
  fi
  log "npm ci in tests/compat/node"
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  printf '%s' "$want" >"$stamp"
}

# The official 5.x Python client (gRPC) for tests/compat/test_grpc_client.py, in a venv of its own: it installs
# the import name `rocketmq`, as the 4.x C++ wheel in the main venv does. Rebuilt when its requirements change.
ensure_grpc_client_venv() {
  local venv="${GRPC_CLIENT_VENV:-$ROOT/.venv-grpc-client}" req="$ROOT/tests/compat/grpc_client/requirements.txt"
  local stamp="$venv/.requirements-sha256" want
  want="$(hash_of "$req")"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return
  fi
  log "installing the 5.x Python client into $venv"
  [[ -x "$venv/bin/python" ]] || "$VENV/bin/python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  printf '%s' "$want" >"$stamp"
}

ensure_base_install() {
  ensure_venv
  # The test stamp covers the base install too.
  if [[ "$(cat "$VENV/.dev-stamp-test" 2>/dev/null)" != "$(hash_of "$ROOT/pyproject.toml") test,bench,metrics" ]]; then
    pip_install base ""
  fi
}

cmd_broker() {
  ensure_base_install
  cd "$ROOT"
  exec "$VENV/bin/mqbroker" "$@"
}

# The virtualenv's bin first on PATH, as `source .venv/bin/activate` would: an interactive shell, or the
# command given (`scripts/dev.sh shell mqadmin clusterList -n 127.0.0.1:9876`).
cmd_shell() {
  ensure_base_install
  export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
  unset PYTHONHOME
  if [[ $# -gt 0 ]]; then
    exec "$@"
  fi
  log "mqbroker, mqadmin and mqbench are on PATH (from $VENV/bin); 'exit' leaves this shell"
  exec "${SHELL:-bash}" -i
}

cmd_test() {
  ensure_venv
  pip_install test "test,bench,metrics"
  ensure_node_modules
  ensure_grpc_client_venv
  cd "$ROOT"
  # In CI the container image is built and driven too (tests/docker/test_container.py; a few minutes cold).
  if [[ "${CI:-}" == "true" && -z "${MINI_ROCKETMQ_CONTAINER_TEST:-}" ]]; then
    export MINI_ROCKETMQ_CONTAINER_TEST=1
  fi
  # Most of the suite's time is waiting on broker processes and real clients, not CPU: it runs on
  # MQ_TEST_WORKERS pytest-xdist workers (2 by default; `-n 0` among the arguments runs it in this process). A
  # module's tests, all of tests/flow, and all Spark tests each stay on one worker (tests/conftest.py).
  local rc=0
  "$VENV/bin/python" -m pytest -ra -n "${MQ_TEST_WORKERS:-2}" --dist loadgroup "$@" || rc=$?
  if [[ $rc -eq 5 ]]; then
    log "pytest collected no tests (exit 5): treating as failure"
    rc=1
  fi
  return "$rc"
}

usage() {
  sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    broker) cmd_broker "$@" ;;
    shell) cmd_shell "$@" ;;
    test) cmd_test "$@" ;;
    -h | --help | help | "") usage ;;
    *) log "unknown command: $cmd"; usage ;;
  esac
}

main "$@"
