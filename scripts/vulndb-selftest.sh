#!/usr/bin/env bash
# Proves that govulncheck, run on the local database `make lint` builds from
# the pinned golang.org/x/vulndb module, finds what it should. Usage:
#   scripts/vulndb-selftest.sh DBDIR
#   1. the database holds GO-2022-0969 (net/http, golang.org/x/net/http2)
#      and indexes it under both stdlib and golang.org/x/net
#   2. a module calling golang.org/x/text/language.Parse at x/text v0.3.6
#                                        -> the check fails on GO-2021-0113
#   3. the same, with GO-2021-0113 accepted -> the check passes
#   4. the same module at x/text v0.43.0 (fixed) -> the check passes, and
#      with GO-2021-0113 still accepted it names that line as left over
set -euo pipefail

db=${1:?usage: vulndb-selftest.sh DBDIR}
GO=${GO:-go}
src=$(git rev-parse --show-toplevel)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

ok() { echo "vulndb-selftest: ok: $*"; }
die() { echo "vulndb-selftest: FAILED: $*" >&2; exit 1; }

test -f "$db/ID/GO-2022-0969.json" || die "$db/ID/GO-2022-0969.json is missing"
grep -q '"id": "GO-2022-0969"' "$db/ID/GO-2022-0969.json" || die "ID/GO-2022-0969.json is not that entry"
for mod in stdlib golang.org/x/net; do
	grep -Eq "\"path\":\"$mod\",\"vulns\":\[[^]]*\"id\":\"GO-2022-0969\"" "$db/index/modules.json" ||
		die "index/modules.json does not list GO-2022-0969 under $mod"
done
grep -q '"modified":"2' "$db/index/db.json" || die "index/db.json has no modified time"
ok "the database holds GO-2022-0969, indexed under stdlib and golang.org/x/net"

"$GO" -C "$src/tools" build -o "$scratch/bin/" golang.org/x/vuln/cmd/govulncheck ./vulndb

mkdir "$scratch/m"
cat >"$scratch/m/go.mod" <<'MOD'
module vulndbselftest

go 1.26

require golang.org/x/text v0.3.6
MOD
cat >"$scratch/m/main.go" <<'SRC'
package main

import (
	"fmt"
	"os"

	"golang.org/x/text/language"
)

func main() {
	fmt.Println(language.Parse(os.Args[1]))
}
SRC
(cd "$scratch/m" && GOWORK=off "$GO" mod tidy)

expect() { # expect pass|fail description [accept-file]
	local want=$1 what=$2 accept=${3:-/dev/null} got
	(cd "$scratch/m" && GOWORK=off "$scratch/bin/govulncheck" -db "file://$db" -format json ./... >"$scratch/report.json") ||
		die "$what: govulncheck did not run"
	if "$scratch/bin/vulndb" check -accept "$accept" "$scratch/report.json" >"$scratch/out" 2>&1; then got=pass; else got=fail; fi
	if [[ $got != "$want" ]]; then
		cat "$scratch/out" >&2
		die "$what: the check should $want but did $got"
	fi
	ok "$what: the check did $got, as it should"
}

expect fail "x/text v0.3.6 calling language.Parse"
grep -q 'GO-2021-0113 in golang.org/x/text@v0.3.6 is reachable' "$scratch/out" || { cat "$scratch/out" >&2; die "GO-2021-0113 not reported"; }
grep -q 'vulndbselftest.main -> golang.org/x/text/language.Parse' "$scratch/out" || { cat "$scratch/out" >&2; die "no trace to language.Parse"; }
ok "GO-2021-0113 reported with its trace to language.Parse"

echo "GO-2021-0113 golang.org/x/text@v0.3.6 accepted by the self-test" >"$scratch/accept"
expect pass "x/text v0.3.6 with GO-2021-0113 accepted" "$scratch/accept"

(cd "$scratch/m" && GOWORK=off "$GO" get golang.org/x/text@v0.43.0 && GOWORK=off "$GO" mod tidy)
expect pass "x/text v0.43.0 (fixed) calling language.Parse"
expect pass "x/text v0.43.0 (fixed) with GO-2021-0113 accepted" "$scratch/accept"
grep -q "accepts GO-2021-0113 golang.org/x/text@v0.3.6, which the report does not find reachable: remove the line" "$scratch/out" ||
	{ cat "$scratch/out" >&2; die "the left-over acceptance of GO-2021-0113 not named"; }
ok "the left-over acceptance of GO-2021-0113 named"
