//go:build !race

package podcreds_test

const raceEnabled = false
