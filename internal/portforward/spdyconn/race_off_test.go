//go:build !race

package spdyconn_test

const raceDetector = false
