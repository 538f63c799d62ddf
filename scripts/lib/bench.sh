# shellcheck shell=bash
# scripts/lib/bench.sh: what the scripts that compare two builds of herald share. Sourced, not
# run. The sourcing script sets bench_name (its name, for messages) and `set -euo pipefail`
# first, then calls bench_init.
#
#   bench_init                 cd to the repository, C locale, Go on PATH, the cleanup trap
#   bench_say / bench_die      a message on stderr, prefixed with bench_name (die exits 1)
#   bench_need TOOL HINT       die with HINT unless TOOL is on PATH
#   bench_pgtool NAME          the path of a PostgreSQL program (HERALD_TESTENV_PGBIN, else PATH)
#   bench_whole NAME VALUE...  die unless each VALUE is a positive whole number (NAME says which)
#   bench_build OUT BEFORE     build BEFORE (git archive) and the working tree into OUT/{before,after}/herald
#   bench_file_limit           raise the open-file soft limit to the hard one; how many sessions a node holds
#   bench_run OUT LOG CMD...   run CMD in the background (stdout to OUT, stderr to LOG) and wait;
#                              an interrupt or exit stops it (SIGTERM) and waits for it
#   bench_json LABELS LOG ARG...  one `herald bench --json` run of the AFTER client against a node
#                              from the build LABELS names; its report, with LABELS, is appended
#                              to $bench_results (read it back from there: this runs a child
#                              the cleanup must see, so never call it inside $(...))
#   bench_jq_defs              jq functions for the tables: median, fmt(d), commas, cell(f; show)

bench_say() { printf '%s: %s\n' "${bench_name:-bench}" "$*" >&2; }
bench_die() {
	bench_say "$*"
	exit 1
}

bench_need() {
	command -v "$1" >/dev/null 2>&1 || bench_die "no $1 on PATH; $2"
}

bench_pgtool() {
	local d=${HERALD_TESTENV_PGBIN:-}
	if [ -n "$d" ] && [ -x "$d/$1" ]; then
		echo "$d/$1"
		return
	fi
	command -v "$1" || bench_die "no $1 in HERALD_TESTENV_PGBIN or on PATH; install the PostgreSQL client (Debian: apt-get install postgresql-client)"
}

bench_whole() { # NAME VALUE [NAME VALUE]...
	while [ $# -ge 2 ]; do
		[[ $2 =~ ^[1-9][0-9]*$ ]] || bench_die "$1=$2: want a positive whole number"
		shift 2
	done
}

# The child bench_run waits for; the cleanup stops it.
bench_child=

bench_cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$bench_child" ]; then
		bench_say "stopping pid $bench_child ..."
		kill -TERM "$bench_child" 2>/dev/null || true
		wait "$bench_child" 2>/dev/null || true
		bench_child=
	fi
	exit "$rc"
}

bench_init() {
	cd "$(dirname "$0")/.."
	export LC_ALL=C # a decimal point in awk and printf, whatever the locale
	export PATH="$PATH:/usr/local/go/bin"
	trap bench_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# bench_build OUT BEFORE: OUT/before/herald from commit BEFORE, through git archive so that no
# worktree or index is touched, and OUT/after/herald from the working tree. Sets bench_before_rev
# and bench_after_rev (short hashes; "+changes" when the tree differs from HEAD).
bench_build() {
	local out=$1 before=$2
	bench_need go "install Go, or put it at /usr/local/go/bin"
	bench_before_rev=$(git rev-parse --short --verify --quiet "$before^{commit}") ||
		bench_die "BENCH_BEFORE=$before: no such commit in this repository"
	bench_say "building $before and this working tree into $out ..."
	rm -rf "$out/before-src"
	mkdir -p "$out/before-src" "$out/before" "$out/after"
	git archive "$before" | tar -x -C "$out/before-src"
	(cd "$out/before-src" && go build -o "$out/before/herald" ./cmd/herald)
	go build -o "$out/after/herald" ./cmd/herald
	bench_after_rev=$(git rev-parse --short HEAD)
	if ! git diff --quiet HEAD -- . 2>/dev/null; then
		bench_after_rev="$bench_after_rev+changes"
	fi
}

# bench_file_limit sets bench_fd_limit and bench_max_sessions. A connection takes a descriptor
# in the node and one in the client, and the node keeps 256 descriptors and a sixteenth of the
# rest out of its session budget (internal/server/listener.go, socketBudget).
bench_file_limit() {
	ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
	bench_fd_limit=$(ulimit -n)
	if [ "$bench_fd_limit" = unlimited ]; then
		bench_fd_limit=1048576
	fi
	local free=$((bench_fd_limit - 256))
	bench_max_sessions=$((free - (free / 16 > 16 ? free / 16 : 16)))
}

bench_run() {
	local out=$1 log=$2 rc=0
	shift 2
	"$@" >"$out" 2>"$log" &
	bench_child=$!
	wait "$bench_child" || rc=$?
	bench_child=
	return "$rc"
}

# bench_json LABELS LOG ARG...: LABELS is a JSON object with at least "build" ("before" or
# "after"); ARG... are herald bench flags. Needs bench_out (the directory bench_build filled)
# and bench_results (a JSON-lines file).
bench_json() {
	local labels=$1 log=$2 build
	shift 2
	build=$(jq -nr --argjson l "$labels" '$l.build')
	if ! bench_run "$log.json" "$log" "$bench_out/after/herald" bench --json --node-binary "$bench_out/$build/herald" "$@"; then
		bench_say "herald bench $* failed (node from the $build build); its log:"
		tail -n 40 "$log" >&2
		exit 1
	fi
	jq -c --argjson l "$labels" '$l + .' "$log.json" >>"$bench_results"
}

# jq functions for the tables. median of an array (null when empty); fmt(d): a number with d
# decimals ("-" for null); commas: a whole number with thousands separators; cell(f; show): over
# an array of reports, the median of f shown by show, and each report's f in brackets when there
# is more than one.
# shellcheck disable=SC2016
bench_jq_defs='
def median: sort | length as $n | if $n == 0 then null elif $n % 2 == 1 then .[($n - 1) / 2] else (.[$n / 2 - 1] + .[$n / 2]) / 2 end;
def fmt(d): if . == null then "-" else
  (. * pow(10; d) | round | if . == 0 then 0 else . end) as $i | (if $i < 0 then -$i else $i end | tostring) as $s
  | ([range(0; d + 1 - ($s | length))] | map("0") | join("")) as $z | ($z + $s) as $p
  | (if $i < 0 then "-" else "" end) + (if d == 0 then $p else $p[0:-d] + "." + $p[-d:] end) end;
def commas: if . == null then "-" else (round | tostring) as $s
  | if ($s | length) <= 3 then $s else (($s[0:-3] | tonumber | commas) + "," + $s[-3:]) end end;
def cell(f; show): [.[] | f] as $v
  | ($v | median | show) + (if ($v | length) > 1 then " (" + ($v | map(show) | join(" / ")) + ")" else "" end);
'
