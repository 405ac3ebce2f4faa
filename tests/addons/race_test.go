//go:build race

package addons_test

// raceEnabled: the agent binary is built with the race detector too.
const raceEnabled = true
