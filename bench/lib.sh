# Shared by the bench scripts (sourced, not run).

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_cluster DIR: waits up to 120 s for `pontoon up --dir DIR/cluster`
# (logging to DIR/up.log) to write its cluster file; exits if it does not.
wait_cluster() {
  for _ in $(seq 1 240); do [ -f "$1/cluster/cluster.toml" ] && return 0; sleep 0.5; done
  echo "cluster did not start; see $1/up.log" >&2
  exit 1
}

# nvmf_export PONTOON HOSTNQN VOLUME CLUSTER-ARGS...: exports VOLUME as
# namespace 1 of subsystem nqn.2026-11.io.pontoon:VOLUME to HOSTNQN.
nvmf_export() {
  local p=$1 host=$2 v=$3; shift 3
  "$p" nvmf subsystem add "nqn.2026-11.io.pontoon:$v" "$@"
  "$p" nvmf ns add "nqn.2026-11.io.pontoon:$v" "$v" --nsid 1 "$@" >/dev/null
  "$p" nvmf host allow "nqn.2026-11.io.pontoon:$v" "$host" "$@"
}

# Deletes the OSD device files of every cluster under DIR, the bulk of a
# run's disk use (logs and results stay for a post-mortem); called on
# every exit, so an interrupted run does not leave gigabytes behind.
# PONTOON_BENCH_KEEP=1 keeps them.
drop_osd_images() {
  [ -n "${PONTOON_BENCH_KEEP:-}" ] || find "$1" -name 'osd.*.img' -type f -delete 2>/dev/null
  true
}

# Waits (at most a minute) until every PG of the cluster is active+clean:
# wait_clean PONTOON --cluster DIR
wait_clean() {
  local p=$1; shift
  for _ in $(seq 600); do
    "$p" status --json "$@" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)["pgs"]["states"]
sys.exit(0 if s and s.get("active+clean") == sum(s.values()) else 1)' && return 0
    sleep 0.1
  done
  echo "PGs not active+clean" >&2; return 1
}
