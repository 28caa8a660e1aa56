#!/usr/bin/env bash
# Measures fleet-agent's footprint: stripped binary size, and the idle RSS
# and CPU of a real agent connected to a local hub (fleet-hub dev) with its
# link probe running. Usage: hack/agent-footprint.sh [idle-seconds]
# Needs root (the link probe) and bin/k8s (make k8s).
set -euo pipefail
cd "$(dirname "$0")/.."
idle=${1:-120}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

go build -o "$work/" ./cmd/fleet-hub ./cmd/kubectl-fleet
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/fleet-agent" ./cmd/fleet-agent
echo "binary: fleet-agent (CGO_ENABLED=0, -trimpath -ldflags '-s -w', $(go env GOOS)/$(go env GOARCH)): $(stat -c %s "$work/fleet-agent") bytes"

port=$((20000 + RANDOM % 20000))
"$work/fleet-hub" dev --data-dir "$work/hub" --bin-dir bin/k8s --gateway-bind-address 127.0.0.1:$port > "$work/hub.out" 2>&1 &
until grep -q "is ready" "$work/hub.out"; do sleep 1; done
export KUBECONFIG=$work/hub/kubeconfig
out=$("$work/kubectl-fleet" token create)
token=$(sed -n 's/^token: //p' <<<"$out")
pin=$(grep -o 'sha256:[0-9a-f]*' <<<"$out" | head -1)
mkdir -p "$work/root/etc"
echo footprint > "$work/root/etc/hostname"
echo 0123456789abcdef0123456789abcdef > "$work/root/etc/machine-id"
"$work/fleet-agent" --config /nonexistent --hub https://127.0.0.1:$port --ca-cert-hash "$pin" --token "$token" \
	--root-dir "$work/root" --state-dir "$work/state" > "$work/agent.log" 2>&1 &
agent=$!
until grep -q "Connected to hub" "$work/agent.log"; do sleep 1; done
grep -o '"msg":"Link probe[^}]*' "$work/agent.log" || true
sleep 10 # settle: enrollment, first status, first link window
ticks() { awk '{print $14 + $15}' /proc/$agent/stat; }
t0=$(ticks); s0=$(date +%s.%N)
sleep "$idle"
t1=$(ticks); s1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
echo "idle RSS after $((idle + 10)) s connected: $(awk '/VmRSS/ {print $2, $3}' /proc/$agent/status) (VmHWM $(awk '/VmHWM/ {print $2, $3}' /proc/$agent/status))"
awk -v t="$((t1 - t0))" -v hz="$hz" -v s0="$s0" -v s1="$s1" \
	'BEGIN { printf "idle CPU over %.0f s: %.3f s of CPU = %.3f %% of one core\n", s1 - s0, t / hz, 100 * t / hz / (s1 - s0) }'
