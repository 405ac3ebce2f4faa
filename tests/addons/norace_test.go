//go:build !race

package addons_test

const raceEnabled = false
