//go:build race

package eksctl_test

// raceEnabled: the agent binary is built with the race detector too.
const raceEnabled = true
