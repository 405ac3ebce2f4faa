//go:build !race

package eksctl_test

const raceEnabled = false
