//go:build race

package podcreds_test

// raceEnabled: the agent binary is built with the race detector too.
const raceEnabled = true
