package testenv

import "runtime"

// Allocated runs fn and returns how many bytes the process allocated meanwhile: the fuzz
// targets fail an input whose request costs more than a fixed budget (another goroutine's
// allocations count too, so budgets leave room for the background work of a store).
func Allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
