// Package release is what a saltbush binary says it is: the module version
// it was built as, the commit it was built from, and the contract baseline
// its wire contracts start from. `saltbush version` and `saltbush-agent
// version` print it; an agent sends it in its Hello, and `saltbush admin
// delivery status` shows each connected agent's. CHANGELOG.md has a
// section per contract baseline; docs/contracts.md ("Upgrades") says
// which older binaries a release works with.
package release

import (
	"fmt"
	"runtime/debug"
)

// ContractBaseline is the number of the newest released contract
// baseline (api/proto/baseline.binpb): the ADR that released it, and the
// CHANGELOG section that lists it. A binary's contracts are that baseline
// plus additive changes made since. Refreshing the baseline raises it
// (TestChangelogNamesTheBaseline fails until both agree).
const ContractBaseline = 7

// version, when set at link time (-ldflags "-X
// github.com/saltbush/saltbush/release.version=v1.2.3"), is the version a
// release build says it is, instead of the one the go command stamped.
var version string

// Identity is one binary's release identity.
type Identity struct {
	// Version is the module version: a release build's -X version, else
	// what the go command stamps from the repository (a pseudo-version
	// such as v0.0.0-20261207135301-20a1711c0ffe, "+dirty" when the work
	// tree had changes), "(devel)" when it could not.
	Version string
	// Commit is the full commit the binary was built from, "" when the
	// build did not record one (go build -buildvcs=false, go test).
	Commit string
	// Modified says the work tree differed from Commit.
	Modified bool
	// ContractBaseline is the package constant.
	ContractBaseline uint32
}

// Current is the running binary's identity, read from the build
// information the go command embeds.
func Current() Identity {
	id := Identity{Version: "(devel)", ContractBaseline: ContractBaseline}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			id.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				id.Commit = s.Value
			case "vcs.modified":
				id.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		id.Version = version
	}
	return id
}

// ShortCommit is the commit's first 12 hex digits ("" when unknown), with
// "+dirty" when the tree was modified.
func (id Identity) ShortCommit() string {
	c := id.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if c != "" && id.Modified {
		c += "+dirty"
	}
	return c
}

// String is the one line the version commands print:
// "v0.0.0-20261207135301-20a1711c0ffe (commit 20a1711c0ffe, contract baseline 7)".
func (id Identity) String() string {
	commit := id.ShortCommit()
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, contract baseline %d)", id.Version, commit, id.ContractBaseline)
}
