//go:build !race

package agent_test

const raceEnabled = false
