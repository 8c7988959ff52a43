#!/bin/bash
# tools_files.sh — what the tools leave behind and say, as a newcomer meets them:
#  - `dpt-topo plan` writes no file unless --output, --slurm-hostfile or --report asks: in an
#    empty directory a text plan, a JSON plan, an oversubscribed plan and a refused one leave it
#    empty; --output, --report and --slurm-hostfile write exactly the files named (the hostfile:
#    each rank's host in plan order; a missing directory is named);
#  - its report's command starts with the program (dpt-report's summary shows "dpt-topo plan ...");
#  - a bad host list gets one line on stderr, dpt's, carrying libslurm's reason; none of
#    libslurm's own log lines ("error: _parse_single_range: ...");
#  - `dpt-report --html /missing/dir/out.html` names that path, not --report / DPT_REPORT.
#
# usage: tools_files.sh DPT_TOPO DPT_REPORT
set -u
topo=$1 report=$2
tmp=$(mktemp -d /tmp/dpt-tools.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
unset DPT_REPORT

mkdir "$tmp/empty"
cd "$tmp/empty" || exit 1
"$topo" plan --nodes 'n[1-4]' --gpus-per-node 2 >/dev/null || fail "text plan failed"
"$topo" plan --nodes 'n[1-4]' --gpus-per-node 2 --json >/dev/null || fail "JSON plan failed"
"$topo" plan --nodes 'n[1-2]' --gpus-per-node 2 --ranks-per-node 3 --oversubscribe >/dev/null 2>&1 || fail "oversubscribed plan failed"
"$topo" plan --nodes 'n[1-2]' --gpus-per-node 2 --ranks-per-node 3 >/dev/null 2>&1 && fail "3 ranks on 2 GPUs accepted"
echo "after four dpt-topo plan runs: '$(ls -A)'"
[ -z "$(ls -A)" ] || fail "dpt-topo plan wrote files without being asked: $(ls -A)"

"$topo" plan --nodes 'n[1-4]' --gpus-per-node 2 --output plan.json --report rep.json >/dev/null || fail "--output --report failed"
[ "$(ls -A | tr '\n' ' ')" = "plan.json rep.json " ] || fail "--output plan.json --report rep.json wrote: $(ls -A)"
"$report" rep.json >summary.txt || fail "dpt-report rep.json failed"
grep -q "^  command   $topo plan --nodes n\[1-4\] --gpus-per-node 2 --output plan.json --report rep.json$" summary.txt ||
  fail "the report's command does not start with the program: $(grep command summary.txt)"

# --slurm-hostfile: exactly that file, each rank's host in plan order, one per line
mkdir "$tmp/hf"
(
  cd "$tmp/hf" || exit 1
  "$topo" plan --nodes 'n[1-3]' --gpus-per-node 2 --slurm-hostfile hosts >/dev/null || fail "--slurm-hostfile failed"
  [ "$(ls -A)" = "hosts" ] || fail "--slurm-hostfile hosts wrote: $(ls -A)"
  [ "$(tr '\n' ' ' <hosts)" = "n1 n1 n2 n2 n3 n3 " ] || fail "--slurm-hostfile: '$(tr '\n' ' ' <hosts)'"
  "$topo" plan --nodes 'n[1-3]' --gpus-per-node 2 --slurm-hostfile /nonexistent/hosts >/dev/null 2>"$tmp/err.txt"
  rc=$?
  [ $rc = 2 ] && grep -q "^dpt-topo plan: --slurm-hostfile '/nonexistent/hosts': cannot create /nonexistent/hosts.tmp: No such file or directory$" "$tmp/err.txt" ||
    fail "--slurm-hostfile in a missing directory: exit $rc: $(cat "$tmp/err.txt")"
  exit $fails
) || fails=$((fails + 1))

"$topo" plan --nodes 'n[5-1]' --gpus-per-node 1 >out.txt 2>err.txt
rc=$?
echo "bad host list: exit $rc: $(cat err.txt)"
[ $rc = 2 ] || fail "bad host list: exit $rc"
[ "$(wc -l <err.txt)" = 1 ] && grep -q "^dpt-topo plan: --nodes 'n\[5-1\]': hostlist 'n\[5-1\]' is invalid: libslurm rejects it: Invalid range: \`5-1'" err.txt ||
  fail "bad host list: stderr is not dpt's one line: $(cat err.txt)"
! grep -q "error: _parse" err.txt out.txt || fail "libslurm's own log line on the terminal"

"$report" --html /missing/dir/out.html rep.json >out.txt 2>err.txt
rc=$?
echo "dpt-report --html into a missing directory: exit $rc: $(cat err.txt)"
[ $rc = 2 ] && grep -q "^dpt-report: --html /missing/dir/out.html: cannot create /missing/dir/out.html.tmp.[0-9]*: No such file or directory (the directory of /missing/dir/out.html must exist" err.txt ||
  fail "dpt-report --html /missing/dir/out.html: exit $rc: $(cat err.txt)"
! grep -q -- "--report\|DPT_REPORT" err.txt || fail "dpt-report --html blames --report / DPT_REPORT: $(cat err.txt)"

[ $fails = 0 ] && echo "ok: no unasked files, the program in the report's command, dpt's messages only"
[ $fails = 0 ]
