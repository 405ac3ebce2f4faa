//go:build !race

package access_test

const raceEnabled = false
