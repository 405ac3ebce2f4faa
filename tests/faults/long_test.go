package faults

import "flag"

// long selects the long forms of the fault suite (go test ./tests/faults
// -args -faults.long): more iterations and longer runs than `make test`
// affords. docs/reliability.md records what the long forms found.
var long = flag.Bool("faults.long", false, "run the long forms of the fault suite")
