//go:build race

package portforward_test

const raceDetector = true
