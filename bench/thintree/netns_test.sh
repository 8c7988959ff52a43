#!/usr/bin/env bash
# netns_test.sh: bench/thintree/netns.sh builds its thin tree only inside its own
# namespaces and leaves nothing behind: after `down`, after a second `down`, and
# when `up` is interrupted (TERM) half-way.  Exit 77 (skip) where `ip netns add`
# is not permitted.
set -u  # no pipefail: `ip ... | grep -q` may SIGPIPE ip
here=$(cd "$(dirname "$0")" && pwd)
export DPT_TT_PREFIX=dptc$$
probe=dpt-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then
  echo "skip: ip netns add is not permitted here"
  exit 77
fi
ip netns del "$probe"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
ours() { ip netns list | awk '{print $1}' | grep -c "^$DPT_TT_PREFIX-" || true; }
root_links() { ip -br link | awk '{print $1}' | sort; }
trap 'bash "$here/netns.sh" down >/dev/null 2>&1' EXIT

before=$(root_links)
bash "$here/netns.sh" up 4 2 100mbit
check "up: 4 nodes + 2 leaves + spine + ctl namespaces" '[ "$(ours)" -eq 8 ]'
check "node n1 has fab0 10.77.1.1 and mgmt0 10.77.2.1" \
  'ip -n $DPT_TT_PREFIX-n1 -4 -o addr | grep -q "fab0 .*10.77.1.1/" && ip -n $DPT_TT_PREFIX-n1 -4 -o addr | grep -q "mgmt0 .*10.77.2.1/"'
check "n2 sits on leaf2, n3 on leaf1 (names interleave the leaves)" \
  'ip -n $DPT_TT_PREFIX-leaf2 -br link | grep -q "^n2@" && ip -n $DPT_TT_PREFIX-leaf1 -br link | grep -q "^n3@"'
check "tbf 100Mbit on n1's fab0 and on leaf1's uplink" \
  'ip netns exec $DPT_TT_PREFIX-n1 tc qdisc show dev fab0 | grep -q "tbf.*rate 100Mbit" && ip netns exec $DPT_TT_PREFIX-leaf1 tc qdisc show dev up0 | grep -q "tbf.*rate 100Mbit"'
check "nothing added to this namespace" '[ "$(root_links)" = "$before" ]'
check "rate: node links 20 Mbit/s, uplinks 10 Mbit/s, in place" \
  'bash "$here/netns.sh" rate 20mbit 10mbit >/dev/null && ip netns exec $DPT_TT_PREFIX-n3 tc qdisc show dev fab0 | grep -q "tbf.*rate 20Mbit" && ip netns exec $DPT_TT_PREFIX-leaf1 tc qdisc show dev n3 | grep -q "tbf.*rate 20Mbit" && ip netns exec $DPT_TT_PREFIX-leaf2 tc qdisc show dev up0 | grep -q "tbf.*rate 10Mbit" && ip netns exec $DPT_TT_PREFIX-spine tc qdisc show dev leaf1 | grep -q "tbf.*rate 10Mbit"'
check "rate refuses a bad rate with exit 2" 'bash "$here/netns.sh" rate fast 2>/dev/null; [ $? -eq 2 ]'
check "up refuses to run twice" '! bash "$here/netns.sh" up 4 2 100mbit 2>/dev/null'
bash "$here/netns.sh" down
check "down removes every namespace" '[ "$(ours)" -eq 0 ]'
check "down again succeeds (idempotent)" 'bash "$here/netns.sh" down'
check "bad rate refused with exit 2" 'bash "$here/netns.sh" up 4 2 fast 2>/dev/null; [ $? -eq 2 ]'

# interrupted half-way: up's trap removes what it built
bash "$here/netns.sh" up 16 4 100mbit >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ "$(ours)" -ge 4 ] && break; sleep 0.05; done
kill -TERM "$pid" 2>/dev/null
wait "$pid"
check "TERM during up leaves no namespace" '[ "$(ours)" -eq 0 ]'
check "nothing left in this namespace after the interrupted up" '[ "$(root_links)" = "$before" ]'
exit $fail
