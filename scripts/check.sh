#!/usr/bin/env bash
# Runs every stage of `make check` (the README's test command, which CI's
# .ci/run calls) one after another, each under a time budget, and prints a
# table of each stage's time against its budget at the end, pass or fail.
#
#   scripts/check.sh              every stage
#   scripts/check.sh test fuzz    only these, in the order given
#
# A stage that goes over its budget by more than half is stopped there and
# fails the run with the stage's name: the budget is what keeps CI within
# 35 minutes on a 2-core machine as the suite grows, and a stage that hangs
# must not eat the 90-minute limit. A stage over its budget but within the
# half is a warning in the table. Budgets are in seconds, measured on a
# 2-core machine from a fresh clone with empty caches (docs/ci.md has the
# measurements); change one only with a measurement.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}

# The whole run's budget (issue 35): the stages' own budgets are each a
# little above what they took in the measured runs (docs/ci.md), and
# their sum is more than this; the total row says when the run is over it.
total_budget=2100

# stage  budget(s)  what it runs (make and its arguments)
stages=(
	"setup         150  setup-test"
	"vet           330  vet-linux"
	"generate       60  check-generate"
	"test          720  test"
	"bench-once     90  bench-once"
	"fuzz          390  fuzz FUZZTIME=3s"
	"vet-ports     300  vet-ports"
	"wine          150  wine-test"
	"vmtest       1080  vmtest"
)

# These stages run beside the VM matrix, one after another on one core
# (fuzzing with one worker and one build job): a guest under TCG leaves
# much of the second core idle (it waits, as its tests do, for graces and
# sweeps), and fuzzing and compiling for other systems are pure CPU, the
# wine tests mostly waiting on wine. Each has its row ("beside vmtest")
# and its own budget; the first that fails stops the ones after it. Run
# alone (scripts/check.sh fuzz wine) each runs as any stage.
beside_of=vmtest
beside=(fuzz vet-ports wine)
fuzz_flags="-p=1 -parallel=1"
beside_pid=""
beside_dir=$(mktemp -d)
beside_run=()

# Work that waits on the network more than on the CPU, or fills a stage's
# idle CPU, runs in the background from the start of one stage and is
# waited for before the first stage that needs it; each has a row of its
# own (its wait) in the table:
#   hosts-npm    the real agent hosts from npm (about 1.2 GB, two minutes
#                on a fresh machine, mostly the registry)
#   debian-root  the Debian root that deploy's package test and
#                vmtests/systemd share (debootstrap, two to four minutes,
#                mostly downloading and unpacking, into debian.Bootstrap's
#                cache: internal/debian/cmd/debianroot)
#   vm-kernels   the VM matrix's kernels, resolved and downloaded (make
#                vmtest-kernels: about 15 s of CPU each, which the matrix
#                spent on its serial path), beside the host's tests, which
#                leave about 0.8 of a core idle
# NAME FROM-STAGE NEEDED-BY WHAT-THE-ROW-SAYS COMMAND…
background=(
	"hosts-npm   vet   test    installed scripts/setup.sh hosts"
	"debian-root vet   test    made      GO run ./internal/debian/cmd/debianroot"
	"vm-kernels  test  vmtest  fetched   MAKE --no-print-directory vmtest-kernels"
)
export MCPTRACE_SETUP_HOSTS=later # setup leaves the hosts to hosts-npm
declare -A bg_pid=() bg_log=()
bg_dir=$(mktemp -d)
# A stage that fails stops the run: the stages beside it go too (each
# one's timeout leads a process group of its own and passes the signal
# on), and so does the work in the background.
trap 'for p in "${bg_pid[@]}"; do kill "$p" 2>/dev/null; done; [ -n "$beside_pid" ] && pkill -TERM -P "$beside_pid" 2>/dev/null; rm -rf "$bg_dir" "$beside_dir"' EXIT

# stage_index NAME: its place in stages.
stage_index() {
	local i n
	for i in "${!stages[@]}"; do
		read -r n _ <<<"${stages[$i]}"
		[ "$n" = "$1" ] && echo "$i" && return
	done
	echo 999
}

# bg_start STAGE: starts, before STAGE runs, the background jobs due from
# it or an earlier stage that were not started yet, when the stage that
# needs them will run.
declare -A bg_started=()
bg_start() {
	local line name from before what cmd
	for line in "${background[@]}"; do
		read -r name from before what cmd <<<"$line"
		[ -z "${bg_started[$name]:-}" ] && wanted "$before" || continue
		[ "$(stage_index "$from")" -le "$(stage_index "$1")" ] || continue
		bg_started[$name]=$1
		cmd=${cmd/#GO/$(scripts/setup.sh which-go)}
		cmd=${cmd/#MAKE/$MAKE}
		bg_log[$name]=$bg_dir/$name.log
		# shellcheck disable=SC2086 # cmd is words
		$cmd >"${bg_log[$name]}" 2>&1 &
		bg_pid[$name]=$!
	done
}

# bg_wait STAGE: waits for the background jobs STAGE needs, a row each;
# fails (and says which) when one failed.
bg_wait() {
	local line name before what cmd t0
	for line in "${background[@]}"; do
		read -r name _ before what cmd <<<"$line"
		[ "$before" = "$1" ] && [ -n "${bg_pid[$name]:-}" ] || continue
		t0=$SECONDS
		echo
		echo "==== make check: waiting for $name ($(c=${cmd#MAKE --no-print-directory }; echo "${c/#GO/go}"), in the background since stage ${bg_started[$name]}) ===="
		if wait "${bg_pid[$name]}"; then
			[ "$name" = hosts-npm ] || cat "${bg_log[$name]}"
			rows+=("$name $((SECONDS - t0)) 0 ok ($what beside the stages from ${bg_started[$name]}; this is the wait)")
			unset "bg_pid[$name]"
		else
			cat "${bg_log[$name]}"
			rows+=("$name $((SECONDS - t0)) 0 FAIL: $cmd")
			failed=$name
			unset "bg_pid[$name]"
			return 1
		fi
	done
}

declare -a want=("$@")
declare -a rows=()
failed=""
total_start=$SECONDS

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

print_table() {
	echo
	echo "==== make check: stage times (budget: a stage fails past 1.5 × its budget) ===="
	printf '  %-12s %9s %9s  %s\n' STAGE TIME BUDGET RESULT
	for r in "${rows[@]}"; do
		# shellcheck disable=SC2086
		set -- $r
		b=-
		[ "$3" -gt 0 ] && b=$(fmt_time "$3")
		printf '  %-12s %9s %9s  %s\n' "$1" "$(fmt_time "$2")" "$b" "${*:4}"
	done
	local took=$((SECONDS - total_start)) verdict=""
	[ "$took" -gt "$total_budget" ] && verdict="over the whole run's budget: find the stage that grew"
	printf '  %-12s %9s %9s  %s\n' total "$(fmt_time "$took")" "$(fmt_time "$total_budget")" "$verdict"
}

# verdict NAME RC TOOK BUDGET TARGET NOTE: the stage's row in the table;
# fails (and says so) when it failed or was stopped past 1.5 × its budget.
verdict() {
	local name=$1 rc=$2 took=$3 budget=$4 target=$5 note=${6:+ ($6)}
	if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$took" -ge $((budget * 3 / 2)) ]; then
		rows+=("$name $took $budget FAIL: over its budget by more than half, stopped$note")
		failed=$name
		echo "make check: FAIL: stage $name went over its budget ($(fmt_time "$budget")) by more than half and was stopped at $(fmt_time "$took")" >&2
		return 1
	elif [ "$rc" -ne 0 ]; then
		rows+=("$name $took $budget FAIL (exit $rc)$note")
		failed=$name
		echo "make check: FAIL: stage $name (make $target) exited $rc" >&2
		return 1
	elif [ "$took" -gt "$budget" ]; then
		rows+=("$name $took $budget ok, but over its budget$note")
	else
		rows+=("$name $took $budget ok$note")
	fi
}

wanted() { # stage
	[ ${#want[@]} -eq 0 ] && return 0
	for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
	return 1
}
# stage_of NAME: its budget and target, from the table.
stage_of() {
	local s n b t
	for s in "${stages[@]}"; do
		read -r n b t <<<"$s"
		[ "$n" = "$1" ] && echo "$b $t" && return 0
	done
	return 1
}
is_beside() { # stage
	[ -n "$beside_of" ] || return 1
	for b in "${beside[@]}"; do [ "$b" = "$1" ] && return 0; done
	return 1
}
wanted "$beside_of" || beside_of=""
for b in "${beside[@]}"; do
	wanted "$b" && [ -n "$beside_of" ] && beside_run+=("$b")
done

# run_beside: the stages of beside_run, one after another, each under its
# timeout; each leaves its output in $beside_dir/NAME.log and a line
# "NAME EXIT START END" (SECONDS carries on in the subshell) in
# $beside_dir/ends. The first that fails stops the rest.
run_beside() {
	local name budget target rc t0
	for name in "${beside_run[@]}"; do
		read -r budget target <<<"$(stage_of "$name")"
		local -a bargs
		read -ra bargs <<<"$target"
		[ "$name" = fuzz ] && bargs+=(FUZZFLAGS="$fuzz_flags")
		t0=$SECONDS
		timeout -k 30 $((budget * 3 / 2)) "$MAKE" --no-print-directory "${bargs[@]}" >"$beside_dir/$name.log" 2>&1
		rc=$?
		echo "$name $rc $t0 $SECONDS" >>"$beside_dir/ends"
		[ "$rc" -eq 0 ] || return
	done
}

for s in "${stages[@]}"; do
	read -r name budget target <<<"$s"
	read -ra margs <<<"$target"
	wanted "$name" || continue
	if is_beside "$name"; then
		continue # started with the stage it runs beside, below
	fi
	if [ "$name" = "$beside_of" ] && [ ${#beside_run[@]} -gt 0 ]; then
		echo
		echo "==== make check: stages ${beside_run[*]}, one after another beside $name on one core; their output follows $name's ===="
		run_beside &
		beside_pid=$!
	fi
	[ "$name" = setup ] || bg_start "$name" # setup installs what they use
	bg_wait "$name" || break
	limit=$((budget * 3 / 2))
	echo
	echo "==== make check: stage $name (budget $(fmt_time "$budget"), stopped at $(fmt_time "$limit")) ===="
	t0=$SECONDS
	# timeout runs the stage in a process group of its own and signals
	# the whole group at the limit, so a stopped stage takes every
	# process it started with it (guests, dockerd, test binaries).
	timeout -k 30 "$limit" "$MAKE" --no-print-directory "${margs[@]}"
	rc=$?
	verdict "$name" $rc $((SECONDS - t0)) "$budget" "$target" "" || break
	if [ -n "$beside_pid" ] && [ "$name" = "$beside_of" ]; then
		t1=$SECONDS
		wait "$beside_pid"
		beside_pid=""
		waited=$((SECONDS - t1))
		ok=1
		for b in "${beside_run[@]}"; do
			line=$(grep "^$b " "$beside_dir/ends" 2>/dev/null)
			[ -n "$line" ] || break # not run: one before it failed
			read -r _ brc bstart bend <<<"$line"
			read -r bbudget btarget <<<"$(stage_of "$b")"
			echo
			echo "==== make check: stage $b (ran beside $name; budget $(fmt_time "$bbudget"), stopped at $(fmt_time $((bbudget * 3 / 2)))): its output ===="
			cat "$beside_dir/$b.log"
			verdict "$b" "$brc" $((bend - bstart)) "$bbudget" "$btarget" \
				"beside $name, which waited $(fmt_time "$waited") for them" || { ok=0; break; }
		done
		[ "$ok" -eq 1 ] || break
	fi
done
print_table
if [ -n "$failed" ]; then
	echo "make check: FAIL in stage $failed"
	exit 1
fi
echo "make check: PASS"
