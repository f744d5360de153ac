//! Timers (Go's time.go): per-P heaps run by the scheduler.
